//! hw-native-sys/simpler's real suite on its CPU simulator, adopted with exactly the files
//! docs/adopting.md gives (`examples/simpler/`): the install command as the guide writes
//! it, then upstream's own commands (the main run over one subset and two DFX smokes, each
//! its own pytest) and `scenerun warm && scenerun device` over the same three selections
//! in one acquisition, verdicts compared per (selection, node), the smoke's DFX files its
//! scene's. The tree must be one built by the realsuite setup
//! script (its `env.sh` beside the tree); `SCENERUN_SIMPLER_TREE` names it when the tests
//! are built, else this is listed as ignored with the reason (CI cannot build it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// An L2 example, a paged-attention test, an L3 class, a class with its own `test_run`,
/// a plain function, and a file with skipped nodes and a served golden called with a
/// keyword of its own.
const SUBSET: &[&str] = &[
    "examples/a2a3/tensormap_and_ringbuffer/benchmark_bgemm",
    "examples/a2a3/tensormap_and_ringbuffer/paged_attention",
    "tests/st/a2a3/tensormap_and_ringbuffer/test_l3_dependency.py",
    "tests/st/a2a3/tensormap_and_ringbuffer/test_l3_create_buffer.py",
    "examples/workers/l2/worker_malloc",
    "tests/st/a2a3/host_build_graph/run_stream_reuse",
];

struct Tree {
    env_sh: PathBuf,
    _work: tempfile::TempDir,
    root: PathBuf,
}

impl Tree {
    /// A copy of the named tree (its own kernel cache and PTO-ISA checkout included).
    fn copy() -> Tree {
        let tree = PathBuf::from(std::env::var_os("SCENERUN_SIMPLER_TREE").expect(
            "SCENERUN_SIMPLER_TREE names a simpler tree built by the realsuite setup script",
        ));
        assert!(
            tree.join("simpler_setup/scene_test.py").is_file(),
            "{} is not a simpler checkout",
            tree.display()
        );
        let env_sh = tree.parent().unwrap().join("env.sh");
        assert!(
            env_sh.is_file(),
            "{} has no env.sh beside it: build it with the realsuite setup script",
            tree.display()
        );
        let work = tempfile::tempdir().unwrap();
        let root = work.path().join("simpler");
        let o = std::process::Command::new("cp")
            .arg("-a")
            .arg(&tree)
            .arg(&root)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        Tree {
            env_sh,
            _work: work,
            root,
        }
    }

    /// `script` in bash, in the copy, with the tree's environment sourced and the
    /// lock stand-in and this build's scenerun first on PATH.
    fn sh(&self, script: &str, pool: Option<&Pool>) -> Output {
        let scenerun_dir = assert_cmd::cargo::cargo_bin("scenerun")
            .parent()
            .unwrap()
            .to_path_buf();
        let mut c = std::process::Command::new("bash");
        c.arg("-c")
            .arg(format!(
                "source {} && export PATH={}:{}/fixtures/bin:$PATH && {script}",
                self.env_sh.display(),
                scenerun_dir.display(),
                REPO
            ))
            .current_dir(&self.root)
            .env("CI", "true")
            .env("NO_COLOR", "1");
        for v in NOT_INHERITED {
            c.env_remove(v);
        }
        if let Some(p) = pool {
            c.env("TASK_SUBMIT_DEVICES", &p.devices)
                .env("TASK_SUBMIT_POOL", p.path("pool"))
                .env("TASK_SUBMIT_LOG", p.log())
                .env_remove("TASK_DEVICE");
        }
        c.output().unwrap()
    }
}

fn files_under(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                if e.file_name() != "__pycache__" {
                    stack.push(e.path());
                }
            } else {
                out.insert(e.path());
            }
        }
    }
    out
}

#[test]
#[cfg_attr(
    not(simpler_tree),
    ignore = "needs SCENERUN_SIMPLER_TREE at build time: simpler built for a2a3sim by the realsuite setup script (docs/adopting.md)"
)]
fn the_guides_files_give_upstreams_verdicts_node_for_node() {
    let t = Tree::copy();
    // The guide's install command, as written, in simpler's own virtualenv; it writes
    // nothing into the plugin's source tree.
    let plugin = Path::new(REPO).join("python/scenerun-pytest");
    let before = files_under(&plugin);
    let o = t.sh(
        &format!("python -m pip install -q {}", plugin.display()),
        None,
    );
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(
        files_under(&plugin),
        before,
        "pip wrote into the plugin's tree"
    );
    // The files the guide says to copy, where it says.
    for e in std::fs::read_dir(Path::new(REPO).join("examples/simpler")).unwrap() {
        let f = e.unwrap().path();
        std::fs::copy(&f, t.root.join(f.file_name().unwrap())).unwrap();
    }
    // Only the main selection's paths differ from the guide's: the subset instead of
    // examples tests/st.
    let manifest = t.root.join("scenes.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let subset = SUBSET.join(" ");
    let narrowed = text.replace(
        "main:          {paths: [examples, tests/st]",
        &format!("main:          {{paths: [{}]", SUBSET.join(", ")),
    );
    assert_ne!(
        narrowed, text,
        "the guide's manifest names `examples tests/st` for main"
    );
    std::fs::write(&manifest, narrowed).unwrap();

    // Upstream's own commands: the main run and two of the job's smokes, each its own
    // pytest, their verdicts recorded per (selection, node) in every process they start.
    let dfx = "tests/st/a2a3/tensormap_and_ringbuffer/dfx";
    let commands = [
        ("main", format!("{subset} --manual exclude")),
        (
            "pmu",
            format!("{dfx}/pmu/test_pmu.py -p no:xdist --manual include --enable-pmu 2"),
        ),
        (
            "args_dump",
            format!("{dfx}/args_dump/test_args_dump.py -p no:xdist --manual include --dump-args"),
        ),
    ];
    for (selection, words) in &commands {
        let o = t.sh(
            &format!(
                "SCENERUN_VERDICTS=upstream.jsonl SCENERUN_VERDICTS_SELECTION={selection} \
                 PYTEST_ADDOPTS='-p scenerun_pytest.verdicts' SIMPLER_SCHEDULER_TIMEOUT_MS=5000 \
                 python -m pytest {words} --platform a2a3sim --device 0-1 \
                 --pto-session-timeout 600 --require-pto-isa -q"
            ),
            None,
        );
        assert!(code(&o) <= 1, "{selection}: {}", show(&o));
    }
    let upstream = std::fs::read_to_string(t.root.join("upstream.jsonl")).unwrap_or_default();
    assert!(upstream.lines().count() >= 12, "{upstream}");
    for kind in ["passed", "skipped", "failed"] {
        assert!(
            upstream.contains(&format!(r#""verdict": "{kind}""#)),
            "{upstream}"
        );
    }
    for selection in ["pmu", "args_dump"] {
        assert!(
            upstream.contains(&format!(r#""selection": "{selection}""#)),
            "{upstream}"
        );
    }

    // scenerun, the same three selections of the job, through the lock stand-in: one
    // acquisition for all three.
    let only = "--selection main --selection pmu --selection args_dump";
    let pool = Pool::new("0-1");
    let _ = std::fs::remove_dir_all(t.root.join("outputs")); // upstream's DFX files
    let o = t.sh(&format!("scenerun warm {only}"), Some(&pool));
    assert_eq!(code(&o), 0, "{}", show(&o));
    let o = t.sh(&format!("scenerun device {only}"), Some(&pool));
    assert_eq!(
        code(&o),
        1,
        "paged attention fails under clang, as upstream: {}",
        show(&o)
    );
    assert_eq!(pool.acquisitions(), 1);
    let cmp = t.sh(
        "python -m scenerun_pytest.verdicts upstream.jsonl build/scenerun/report.json",
        None,
    );
    assert_eq!(code(&cmp), 0, "{}\n{}", show(&cmp), show(&o));
    assert!(stdout(&cmp).contains(" 0 differences"), "{}", show(&cmp));
    // What the PMU smoke wrote is its scene's, under the report dir, named in report.json.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(t.root.join("build/scenerun/report.json")).unwrap())
            .unwrap();
    let pmu = report["scenes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["selection"] == "pmu")
        .expect("a pmu scene");
    let outputs = pmu["outputs"].as_array().cloned().unwrap_or_default();
    assert!(
        outputs
            .iter()
            .any(|f| f.as_str().unwrap_or("").contains("pmu")),
        "{pmu}"
    );
    assert!(
        !t.root.join("outputs").exists(),
        "no DFX output in simpler's shared outputs/"
    );
}
