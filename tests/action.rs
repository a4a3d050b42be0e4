//! The GitHub Action (action.yml): its structure, and its steps run on the demo suites by
//! the test runner (tests/runner.rs) as a runner would run them: the install from the
//! wheel, the cache key from the plan, warm && device, the cache saved only when warm
//! built something, the reports uploaded also when a scene failed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::common::*;
use crate::runner::*;

#[test]
fn the_action_declares_every_input_it_uses_and_gives_every_run_step_a_shell() {
    let doc = action();
    let raw = fs::read_to_string(Path::new(REPO).join("action.yml")).unwrap();
    assert_eq!(doc["runs"]["using"].as_str(), Some("composite"));
    let inputs = map(&doc["inputs"], "inputs");
    for (k, spec) in inputs {
        assert!(
            spec.get("description").is_some(),
            "input {} has no description",
            text(k)
        );
    }
    let steps = doc["runs"]["steps"].as_sequence().unwrap();
    let mut ids: Vec<String> = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let step = map(s, "step");
        let at = format!("action.yml: runs.steps[{i}]");
        match (get_str(step, "run"), get_str(step, "uses")) {
            (Some(run), None) => {
                assert_eq!(
                    get_str(step, "shell").as_deref(),
                    Some("bash"),
                    "{at}: a composite action's run step needs `shell:` (bash here)"
                );
                // Inputs reach scripts through env:, never pasted into the script text.
                assert!(
                    expressions(&run).is_empty(),
                    "{at}: `${{{{ … }}}}` inside a script"
                );
            }
            (None, Some(uses)) => assert!(
                crate::workflows::pinned(&uses),
                "{at}: `uses: {uses}` is not pinned"
            ),
            _ => panic!("{at}: a step has exactly one of `run:` and `uses:`"),
        }
        // Every `steps.X` names an earlier step.
        let own = serde_yaml::to_string(s).unwrap();
        for e in expressions(&own) {
            for word in e.split(|c: char| !(c.is_alphanumeric() || "._-".contains(c))) {
                if let Some(rest) = word.strip_prefix("steps.") {
                    let id = rest.split('.').next().unwrap();
                    assert!(
                        ids.iter().any(|x| x == id),
                        "{at}: `{word}` names no earlier step"
                    );
                }
            }
        }
        if let Some(id) = get_str(step, "id") {
            ids.push(id);
        }
    }
    // Every `inputs.X` anywhere is declared; every declared input is used.
    let mut used = BTreeSet::new();
    for e in expressions(&raw) {
        for word in e.split(|c: char| !(c.is_alphanumeric() || "._-".contains(c))) {
            if let Some(k) = word.strip_prefix("inputs.") {
                assert!(
                    inputs.contains_key(k),
                    "action.yml: `inputs.{k}` is not declared"
                );
                used.insert(k.to_string());
            }
        }
    }
    let declared: BTreeSet<String> = inputs.keys().map(text).collect();
    assert_eq!(
        used, declared,
        "action.yml: declared inputs that no step uses"
    );
    for (k, spec) in map(&doc["outputs"], "outputs") {
        let v = text(&spec["value"]);
        assert!(
            expressions(&v).iter().all(|e| e.starts_with("steps.")),
            "output {}: {v}",
            text(k)
        );
    }
}

/// A workspace (a copy of fixtures/), a runner temp dir and a cache store, with a fresh
/// virtualenv first on PATH (as actions/setup-python leaves it) and no scenerun on PATH.
pub struct Bench {
    pub tmp: tempfile::TempDir,
    pub venv: PathBuf,
}

impl Bench {
    pub fn new() -> Bench {
        let tmp = tempfile::tempdir().unwrap();
        let venv = tmp.path().join("venv");
        let o = std::process::Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", show(&o));
        fs::create_dir_all(tmp.path().join("temp")).unwrap();
        Bench { tmp, venv }
    }

    pub fn temp(&self) -> PathBuf {
        self.tmp.path().join("temp")
    }

    /// The scenerun build the action would have cached: the test wheel for `install:
    /// pip`, this build's binary for `install: cargo` (what actions/cache restores).
    pub fn seed_build(&self) {
        let build = self.temp().join("scenerun-build");
        fs::create_dir_all(build.join("bin")).unwrap();
        let wheel = &crate::wheel::wheel().path;
        fs::copy(wheel, build.join(wheel.file_name().unwrap())).unwrap();
        fs::copy(
            assert_cmd::cargo::cargo_bin("scenerun"),
            build.join("bin/scenerun"),
        )
        .unwrap();
    }

    /// A runner for a new job (run `run_id`) in a fresh copy of fixtures/.
    pub fn runner(&self, run_id: u32, pool: &Pool) -> Runner {
        let root = self.tmp.path().join(format!("job-{run_id}"));
        let workspace = root.join("workspace");
        copy_tree(
            &Path::new(REPO).join("fixtures"),
            &workspace.join("fixtures"),
            &["build", "__pycache__"],
        );
        let system: Vec<String> = std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .filter(|d| !Path::new(d).join("scenerun").exists())
            .map(String::from)
            .collect();
        let base = format!("{}:{}", self.venv.join("bin").display(), system.join(":"));
        let mut r = Runner::new(
            &workspace,
            &self.temp(),
            &self.tmp.path().join("store"),
            base,
        );
        r.run_id = run_id;
        r.env.extend([
            ("TASK_SUBMIT_DEVICES".into(), pool.devices.clone()),
            (
                "TASK_SUBMIT_POOL".into(),
                pool.path("pool").display().to_string(),
            ),
            ("TASK_SUBMIT_LOG".into(), pool.log().display().to_string()),
            ("TASK_SUBMIT_GRACE".into(), "1".into()),
            ("DEMO_RUNTIME_STARTUP_SECS".into(), "0.05".into()),
        ]);
        r
    }
}

fn inputs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn scene_saves(r: &Runner) -> Vec<String> {
    r.events
        .saves
        .iter()
        .filter(|k| k.starts_with("scenes-"))
        .cloned()
        .collect()
}

/// `scope-part-digest-run-attempt` -> digest.
fn digest(key: &str) -> &str {
    key.rsplit('-').nth(2).unwrap()
}

#[test]
fn the_action_runs_the_demo_and_keys_the_cache_by_what_the_plan_builds() {
    let bench = Bench::new();
    bench.seed_build();
    let with = inputs(&[("manifest", "fixtures/demo/scenes.yaml")]);

    // Run 1, cold: every step built, one lock, the cache saved under the new key.
    let pool = Pool::new("0-3");
    let mut r = bench.runner(1, &pool);
    let out = r.run_action(with.clone(), BTreeMap::new());
    assert!(r.finish(), "{:#?}", r.events);
    assert_eq!(out["exit-code"], "0");
    let reports = r.workspace.join("fixtures/demo/build/scenerun");
    assert_eq!(PathBuf::from(&out["report-dir"]), reports);
    assert_eq!(pool.acquisitions(), 1);
    assert_eq!(r.events.restores.last().unwrap().1, None, "a cold store");
    assert_eq!(scene_saves(&r), [out["cache-key"].clone()]);
    assert!(
        out["cache-key"].contains("-all-") && out["cache-key"].ends_with("-1-1"),
        "{}",
        out["cache-key"]
    );
    let (name, paths) = &r.events.uploads[0];
    assert_eq!(name, "scene-reports");
    for want in ["report.json", "junit.xml", "warm.json", "lock.log", "logs"] {
        assert!(
            paths.contains(&reports.join(want)),
            "{want} not uploaded: {paths:?}"
        );
    }
    let report = json_file(&reports.join("report.json"));
    assert!(outcomes(&report).values().all(|o| o == "passed"));
    assert!(
        fs::read_to_string(r.summary()).is_ok_and(|t| !t.trim().is_empty()),
        "scenerun wrote no step summary"
    );
    // The scenerun that ran is the one the action installed from the wheel.
    assert!(
        r.path_added.contains(&bench.venv.join("bin")),
        "{:?}",
        r.path_added
    );
    let key1 = out["cache-key"].clone();

    // Run 2, nothing changed: the same plan restores run 1's save; warm builds nothing,
    // so nothing is saved.
    let pool = Pool::new("0-3");
    let mut r = bench.runner(2, &pool);
    let out = r.run_action(with.clone(), BTreeMap::new());
    assert!(r.finish(), "{:#?}", r.events);
    assert_eq!(digest(&out["cache-key"]), digest(&key1));
    assert_eq!(
        r.events.restores.last().unwrap().1.as_deref(),
        Some(key1.as_str())
    );
    assert_eq!(scene_saves(&r), Vec::<String>::new());
    assert_eq!(pool.acquisitions(), 1);
    let warm = json_file(&r.temp.join("scene-cache/last-warm.json"));
    assert_eq!(warm["built"], 0, "{warm:#}");

    // Run 3, one kernel source edited: another plan, so another key; the restore falls
    // back to run 1's save, warm rebuilds what the edit touched, and that is saved.
    let pool = Pool::new("0-3");
    let mut r = bench.runner(3, &pool);
    let kernel = r.workspace.join("fixtures/demo/kernels/vadd.c");
    let mut src = fs::read_to_string(&kernel).unwrap();
    src.push_str("\n/* edited */\n");
    fs::write(&kernel, src).unwrap();
    let out = r.run_action(with, BTreeMap::new());
    assert!(r.finish(), "{:#?}", r.events);
    assert_ne!(digest(&out["cache-key"]), digest(&key1));
    assert_eq!(
        r.events.restores.last().unwrap().1.as_deref(),
        Some(key1.as_str())
    );
    let warm = json_file(&r.temp.join("scene-cache/last-warm.json"));
    let built = warm["built"].as_u64().unwrap();
    assert!((1..42).contains(&built), "{warm:#}");
    assert_eq!(scene_saves(&r), [out["cache-key"].clone()]);
}

#[test]
fn a_failing_scene_fails_the_action_but_the_reports_and_the_cache_still_go() {
    let bench = Bench::new();
    bench.seed_build();
    let pool = Pool::new("0-3");
    let mut r = bench.runner(1, &pool);
    // The pytest demo needs the plugin: the wheel's, installed by the action.
    let out = r.run_action(
        inputs(&[("manifest", "fixtures/pytest-demo/scenes.yaml")]),
        BTreeMap::new(),
    );
    assert!(!r.finish(), "a failed scene fails the job");
    assert_eq!(out["exit-code"], "1");
    assert_eq!(pool.acquisitions(), 1);
    let reports = PathBuf::from(&out["report-dir"]);
    let report = json_file(&reports.join("report.json"));
    let failed: Vec<String> = outcomes(&report)
        .into_iter()
        .filter(|(_, o)| o != "passed")
        .map(|(n, _)| n)
        .collect();
    assert_eq!(failed, ["TestClamp.saturate"]);
    assert!(r.events.uploads[0].1.contains(&reports.join("junit.xml")));
    assert_eq!(scene_saves(&r), [out["cache-key"].clone()]);
}

#[test]
fn bad_inputs_stop_the_action_with_a_usage_exit() {
    let bench = Bench::new();
    bench.seed_build();
    let pool = Pool::new("0-3");
    let mut r = bench.runner(1, &pool);
    r.run_action(inputs(&[("install", "brew")]), BTreeMap::new());
    assert!(!r.finish());
    let install = r
        .events
        .ran
        .iter()
        .find(|(l, _)| l.starts_with("run:Install"))
        .unwrap();
    assert_eq!(install.1, 4, "{:?}", r.events.ran);
    assert!(r.events.saves.iter().all(|k| !k.starts_with("scenes-")));

    let mut r = bench.runner(2, &pool);
    r.run_action(
        inputs(&[("install", "cargo"), ("manifest", "no/such/scenes.yaml")]),
        BTreeMap::new(),
    );
    assert!(!r.finish());
    let setup = r.events.ran.iter().find(|(l, _)| l == "run:setup").unwrap();
    assert_eq!(setup.1, 4, "{:?}", r.events.ran);
    assert!(r.events.ran.iter().any(|(l, _)| l == "skipped:scenes"));
    assert_eq!(pool.acquisitions(), 0);
}

#[test]
fn output_and_expression_helpers() {
    let o = parse_outputs("a=1\nkeys<<EOF\nx-\ny-\nEOF\nb=two=2\n");
    assert_eq!(o["a"], "1");
    assert_eq!(o["keys"], "x-\ny-");
    assert_eq!(o["b"], "two=2");
    let look = |e: &str| match e {
        "steps.s.outputs.built" => "3".to_string(),
        "inputs.upload" => "true".to_string(),
        _ => String::new(),
    };
    let t = |e: &str, failed: bool| eval(e, failed, &look);
    assert_eq!(
        t("!cancelled() && steps.s.outputs.built != '0'", true),
        "true"
    );
    assert_eq!(t("steps.s.outputs.built != '3'", false), "false");
    assert_eq!(t("always() && inputs.upload == 'true'", true), "true");
    assert_eq!(t("success()", true), "false");
    assert_eq!(t("steps.x.outputs.y || 'fallback'", false), "fallback");
}
