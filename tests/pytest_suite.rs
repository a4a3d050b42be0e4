//! The pytest plugin (`python/scenerun-pytest`) with real pytest, on a copy of
//! `fixtures/pytest-demo`. The virtualenv comes from .ci/run (`.ci/venv`, or
//! `$SCENERUN_TEST_VENV`); without it these tests fail, they never pass silently.
//! Python process starts are counted through a `python` shim first on PATH.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::common::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The virtualenv, checked: it exists and holds this checkout's plugin, unchanged.
pub(crate) fn venv() -> PathBuf {
    let dir = std::env::var_os("SCENERUN_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join(".ci/venv"));
    let py = dir.join("bin/python");
    assert!(
        py.exists(),
        "no virtualenv at {}: create it as .ci/run does \
         (python3 -m venv .ci/venv && .ci/venv/bin/pip install ./python/scenerun-pytest), \
         or point SCENERUN_TEST_VENV at one",
        dir.display()
    );
    let o = std::process::Command::new(&py)
        .args([
            "-c",
            "import os, scenerun_pytest, pytest; print(os.path.dirname(scenerun_pytest.__file__))",
        ])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "the virtualenv lacks pytest or scenerun_pytest: {}",
        show(&o)
    );
    let installed = PathBuf::from(stdout(&o).trim());
    let source = Path::new(REPO).join("python/scenerun-pytest/src/scenerun_pytest");
    for e in fs::read_dir(&source).unwrap().flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().ends_with(".py") {
            continue;
        }
        assert_eq!(
            fs::read(e.path()).unwrap(),
            fs::read(installed.join(&name)).unwrap_or_default(),
            "{} in the virtualenv differs from the checkout: pip install ./python/scenerun-pytest again",
            name.to_string_lossy()
        );
    }
    dir
}

/// A copy of the demo (and the lock stand-in beside it, as `../bin`), with a `python`
/// shim that logs every start to `logs/python.log`.
pub(crate) struct Demo {
    suite: Suite,
    path_env: String,
    /// The suite's directory under the copy (`pytest-demo` or `pytest-demo/classes`).
    sub: &'static str,
}

impl Demo {
    pub(crate) fn new() -> Demo {
        let venv = venv();
        let suite = Suite::with_logs();
        copy_tree(
            &Path::new(REPO).join("fixtures/pytest-demo"),
            &suite.path("pytest-demo"),
            &["build", "__pycache__"],
        );
        copy_tree(
            &Path::new(REPO).join("fixtures/bin"),
            &suite.path("bin"),
            &[],
        );
        suite.script(
            "shim/python",
            &format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
                suite.path("logs/python.log").display(),
                venv.join("bin/python").display()
            ),
        );
        let path_env = format!(
            "{}:{}",
            suite.path("shim").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Demo {
            suite,
            path_env,
            sub: "pytest-demo",
        }
    }

    pub(crate) fn dir(&self) -> PathBuf {
        self.suite.path(self.sub)
    }

    pub(crate) fn scenerun(&self, args: &[&str]) -> assert_cmd::Command {
        let mut c = scenerun();
        c.current_dir(self.dir())
            .env("PATH", &self.path_env)
            .env("DEMO_RUNTIME_STARTUP_SECS", "0.05")
            .env("DEMO_RUNTIME_LOG", self.suite.path("logs/runtime.log"))
            .env("DEMO_CALLS_LOG", self.suite.path("logs/calls.log"))
            .env("DEMO_COMPILE_LOG", self.suite.path("logs/compile.log"))
            .env_remove("PYTHONPATH")
            .args(args);
        c
    }

    fn python(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(self.suite.path("shim/python"));
        c.current_dir(self.dir())
            .env("PATH", &self.path_env)
            .env("DEMO_RUNTIME_STARTUP_SECS", "0.05")
            .env("DEMO_RUNTIME_LOG", self.suite.path("logs/runtime.log"))
            .env("DEMO_CALLS_LOG", self.suite.path("logs/calls.log"))
            .env("DEMO_COMPILE_LOG", self.suite.path("logs/compile.log"))
            .env_remove("PYTHONPATH")
            .args(args);
        c
    }

    fn python_runs(&self) -> Vec<String> {
        self.suite
            .read("logs/python.log")
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn edit(&self, rel: &str, append: &str) {
        let p = self.dir().join(rel);
        let mut text = fs::read_to_string(&p).unwrap();
        text.push_str(append);
        fs::write(p, text).unwrap();
    }
}

/// `scene/step` of every step a warm built (its lines end in `built`).
fn built(warm: &std::process::Output) -> BTreeSet<String> {
    stderr(warm)
        .lines()
        .filter(|l| l.ends_with(" built"))
        .filter_map(|l| l.split_whitespace().nth(2).map(str::to_string))
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn collect_lists_one_scene_per_class_and_case_as_pytest_collects_them() {
    let d = Demo::new();
    let o = d
        .python(&["-m", "scenerun_pytest", "collect", "tests/st"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON on stdout");
    let scenes = doc["scenes"].as_array().unwrap();

    // pytest's own view of the suite: every test_scene[case] of every class.
    let o = d
        .python(&[
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/st",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let pytest_ids: BTreeSet<String> = stdout(&o)
        .lines()
        .filter(|l| l.contains("::test_scene["))
        .map(str::to_string)
        .collect();
    let ours: BTreeSet<String> = scenes
        .iter()
        .map(|s| s["device"]["args"][0].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ours, pytest_ids);
    assert_eq!(scenes.len(), 23);
    let classes: BTreeSet<&str> = scenes
        .iter()
        .map(|s| s["name"].as_str().unwrap().split('.').next().unwrap())
        .collect();
    assert_eq!(classes.len(), 9, "{classes:?}");

    let by_name: BTreeMap<&str, &serde_json::Value> = scenes
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s))
        .collect();
    let pair = by_name["TestAllReduce.pair"];
    assert_eq!(pair["device"]["devices"], 2);
    assert_eq!(pair["device"]["lane"], "pytest_x2");
    let sat = by_name["TestClamp.saturate"];
    assert_eq!(sat["device"]["lane"], "pytest");
    assert_eq!(sat["kernels"][0]["source"], "kernels/clamp.c");
    assert_eq!(sat["kernels"][0]["include_dirs"][0], "include");
    assert!(sat["golden"]["run"]
        .as_str()
        .unwrap()
        .ends_with("--fixture {fixture} --out {out} --depfile {depfile}"));
    // Collection only: no fixture, golden or device work, one Python process each.
    assert_eq!(d.python_runs().len(), 2);
    assert_eq!(d.suite.count("logs/runtime.log"), 0);
}

#[test]
fn warm_reruns_exactly_what_a_change_touches_and_a_noop_warm_starts_no_python() {
    let d = Demo::new();
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let runs = d.python_runs();
    assert_eq!(runs.iter().filter(|r| r.contains(" collect ")).count(), 1);
    assert_eq!(runs.iter().filter(|r| r.contains(" fixture ")).count(), 23);
    assert_eq!(runs.iter().filter(|r| r.contains(" golden ")).count(), 23);
    assert_eq!(runs.len(), 47, "{runs:#?}");

    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(built(&o).is_empty(), "{}", show(&o));
    assert_eq!(
        d.python_runs().len(),
        47,
        "a no-op warm starts no Python process"
    );

    // A helper imported by one class's golden only: exactly its goldens rerun (and the
    // generator, whose inputs are every .py under tests/st; its scenes are the same).
    d.edit("tests/st/helpers/reduce_ref.py", "\n# edited\n");
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        built(&o),
        set(&["TestReduceSum.rows4/golden", "TestReduceSum.rows64/golden"]),
        "{}",
        show(&o)
    );
    let new: Vec<String> = d.python_runs()[47..].to_vec();
    assert_eq!(new.len(), 3, "{new:#?}");
    assert_eq!(new.iter().filter(|r| r.contains(" golden ")).count(), 2);

    // A kernel header: exactly the kernels that include it recompile; no Python runs.
    d.edit("include/demo/tile.h", "\n/* edited */\n");
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        built(&o),
        set(&[
            "TestMatmul.square8/matmul",
            "TestMatmul.odd/matmul",
            "TestMatmul.tall/matmul",
            "TestReduceSum.rows4/reduce",
            "TestReduceSum.rows64/reduce",
        ]),
        "{}",
        show(&o)
    );
    assert_eq!(d.python_runs().len(), 50);
}

/// The scenes of a warmed demo as a lane's `{scenes}` file would list them.
fn lane_batch(d: &Demo, names: &[&str]) -> (PathBuf, Vec<String>) {
    let o = d.scenerun(&["plan", "--format", "json"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let cache = PathBuf::from(plan["cache_dir"].as_str().unwrap());
    let collected: serde_json::Value = serde_json::from_str(&stdout(
        &d.python(&["-m", "scenerun_pytest", "collect", "tests/st"])
            .output()
            .unwrap(),
    ))
    .unwrap();
    let mut lines = String::new();
    let mut args = Vec::new();
    for name in names {
        let artifact = |kind: &str, step: &str| -> PathBuf {
            let s = plan["warm"]["steps"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["scene"] == *name && s["kind"] == kind && s["name"] == step)
                .unwrap_or_else(|| panic!("no {kind} {step} for {name}"));
            assert_eq!(s["status"], "hit", "{name} is warm");
            let key = s["key"].as_str().unwrap();
            cache.join(format!("entries/{kind}/{}/{key}/out", &key[..2]))
        };
        let scene = collected["scenes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == *name)
            .unwrap();
        let kdir = d.suite.path(&format!("kernels/{name}"));
        fs::create_dir_all(&kdir).unwrap();
        for k in scene["kernels"].as_array().unwrap() {
            let k = k["name"].as_str().unwrap();
            std::os::unix::fs::symlink(artifact("kernel", k), kdir.join(k)).unwrap();
        }
        let arg = scene["device"]["args"][0].as_str().unwrap().to_string();
        lines.push_str(&format!(
            "{}\n",
            serde_json::json!({
                "scene": name, "args": [arg], "kernels": kdir,
                "fixture": artifact("fixture", "fixture"), "golden": artifact("golden", "golden"),
                "timeout_secs": null,
            })
        ));
        args.push(arg);
    }
    let file = d.suite.path("batch.jsonl");
    fs::write(&file, lines).unwrap();
    (file, args)
}

#[test]
fn the_device_side_runs_warmed_artifacts_and_only_the_failing_case_fails() {
    let d = Demo::new();
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let phases = |d: &Demo| {
        d.python_runs()
            .iter()
            .filter(|r| {
                r.contains(" fixture ") || r.contains(" golden ") || r.contains(" collect ")
            })
            .count()
    };

    // As a lane process: one pytest for a batch of five classes, one runtime start-up,
    // a start and an end line per scene, the failed case a result and not a crash.
    let names = [
        "TestVectorAdd.small",
        "TestClamp.unit",
        "TestClamp.saturate",
        "TestClamp.bytes",
        "TestSoftmax.batch",
        "TestMatmul.odd",
        "TestReduceSum.rows64",
    ];
    let (batch, args) = lane_batch(&d, &names);
    let results = d.suite.path("results.jsonl");
    let before = phases(&d);
    let mut cmd = d.python(&["-m", "pytest", "-q", "-p", "no:cacheprovider"]);
    cmd.args(&args)
        .env("SCENERUN_SCENES", &batch)
        .env("SCENERUN_RESULTS", &results)
        .env("SCENERUN_DEVICES", "3");
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(phases(&d), before, "the lane recomputed nothing");
    assert_eq!(d.suite.count("logs/runtime.log"), 1);
    assert!(d.suite.read("logs/runtime.log").contains("ids=3"));
    let records: Vec<serde_json::Value> = d
        .suite
        .read("results.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(records.len(), 2 * names.len(), "{records:#?}");
    for (i, name) in names.iter().enumerate() {
        let (start, end) = (&records[2 * i], &records[2 * i + 1]);
        assert_eq!(
            (start["scene"].as_str(), start["event"].as_str()),
            (Some(*name), Some("start"))
        );
        assert_eq!(
            (end["scene"].as_str(), end["event"].as_str()),
            (Some(*name), Some("end"))
        );
        let want = if *name == "TestClamp.saturate" {
            "failed"
        } else {
            "passed"
        };
        assert_eq!(end["outcome"], want, "{end}");
        assert!(end["duration_secs"].as_f64().unwrap() >= 0.0);
    }
    let failed = &records[5];
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("out of tolerance"),
        "{failed}"
    );

    // The whole suite through the lock stand-in: `warm && device`, as lanes.
    let before = phases(&d);
    let startups_before = d.suite.count("logs/runtime.log");
    let pool = Pool::new("0-3");
    let mut c = d.scenerun(&["device"]);
    pool.apply(&mut c);
    let o = c.output().unwrap();
    assert_eq!(code(&o), 1, "{}", show(&o));
    assert_eq!(pool.acquisitions(), 1);
    assert_eq!(phases(&d), before, "the device phase computed nothing");
    let report = read_json(&d.dir().join("build/scenerun/report.json")).unwrap();
    let outcomes: BTreeMap<String, String> = report["scenes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["outcome"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    assert_eq!(outcomes.len(), 23, "{outcomes:#?}");
    let failed: Vec<&String> = outcomes
        .iter()
        .filter(|(_, o)| o.as_str() != "passed")
        .map(|(n, _)| n)
        .collect();
    // Each case is its own node here (SceneTest): the cases after a failing one run.
    assert_eq!(failed, ["TestClamp.saturate"], "{outcomes:#?}");
    // One runtime start-up per lane process, not one per scene.
    let procs = report["device"]["lanes"]
        .as_array()
        .expect("lane processes")
        .len();
    let startups = d.suite.count("logs/runtime.log") - startups_before;
    assert_eq!(startups, procs, "{report:#}");
    assert!(procs <= 4, "{procs} lane processes for 23 scenes on 4 ids");
}

// ---------------------------------------------------------------------------------------
// A suite in hw-native-sys/simpler's shape (`fixtures/pytest-demo/classes`): its own base
// class with one `test_run` per class, goldens in place on `args.clone()`, numpy
// arguments, a session-wide runtime pool, a kernel cache it fills itself (a prepare
// step). The test files never import scenerun_pytest.
// ---------------------------------------------------------------------------------------

impl Demo {
    fn classes() -> Demo {
        let d = Demo {
            sub: "pytest-demo/classes",
            ..Demo::new()
        };
        let o = d
            .python(&["-c", "import numpy; print(numpy.__version__)"])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "the class-style demo needs numpy in the virtualenv (bash .ci/deps.sh): {}",
            show(&o)
        );
        d
    }

    /// `generate|golden Class [params]` lines the suite's own functions logged.
    fn calls(&self) -> Vec<String> {
        self.suite
            .read("logs/calls.log")
            .lines()
            .map(|l| l.rsplit_once(" pid=").map_or(l, |(c, _)| c).to_string())
            .collect()
    }
}

const CLASS_SCENES: [&str; 8] = [
    "TestAllReduce.pair",
    "TestAxpy.scaled",
    "TestAxpy.unit",
    "TestClamp.bytes",
    "TestClamp.saturate",
    "TestClamp.unit",
    "TestVectorAdd.large",
    "TestVectorAdd.small",
];

#[test]
fn a_class_style_suite_warms_each_case_once_and_its_device_phase_runs_none() {
    let d = Demo::classes();
    for f in walk(&d.dir().join("tests")) {
        assert!(
            !fs::read_to_string(&f).unwrap().contains("scenerun"),
            "{} mentions scenerun",
            f.display()
        );
    }
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    // Each selected case's generate_args and compute_golden ran exactly once; the manual
    // case (`huge`) and the case of another platform (`board`) not at all.
    let calls = d.calls();
    assert_eq!(calls.len(), 16, "{calls:#?}");
    let unique: BTreeSet<&String> = calls.iter().collect();
    assert_eq!(unique.len(), 16, "{calls:#?}");
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("generate ")).count(),
        8
    );
    assert!(!calls
        .iter()
        .any(|c| c.contains("4194304") || c.contains("3.0)")));
    // The prepare step filled the kernel cache: four compiles, outside the lock.
    assert_eq!(d.suite.count("logs/compile.log"), 4);

    let pool = Pool::new("0-3");
    let mut c = d.scenerun(&["device"]);
    pool.apply(&mut c);
    let o = c.output().unwrap();
    assert_eq!(code(&o), 1, "{}", show(&o));
    assert_eq!(pool.acquisitions(), 1);
    assert_eq!(
        d.calls().len(),
        16,
        "the device phase called neither function"
    );
    assert_eq!(
        d.suite.count("logs/compile.log"),
        4,
        "nothing compiled in the lock"
    );
    let report = read_json(&d.dir().join("build/scenerun/report.json")).unwrap();
    let outcomes: BTreeMap<String, String> = report["scenes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["outcome"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    assert_eq!(
        outcomes.keys().map(String::as_str).collect::<Vec<_>>(),
        CLASS_SCENES,
        "{report:#}"
    );
    let failed: Vec<&String> = outcomes
        .iter()
        .filter(|(_, o)| o.as_str() != "passed")
        .map(|(n, _)| n)
        .collect();
    // The case after the failing one is not reached, as the class's own test_run would
    // stop there.
    assert_eq!(
        failed,
        ["TestClamp.bytes", "TestClamp.saturate"],
        "{outcomes:#?}"
    );
    assert_eq!(outcomes["TestClamp.bytes"], "not_reached", "{outcomes:#?}");
    let sat = report_scene(&report, "TestClamp.saturate").unwrap();
    assert!(
        sat["message"]
            .as_str()
            .unwrap()
            .contains("golden mismatch on 'out'"),
        "{sat:#}"
    );
    // One runtime start-up per lane process.
    let procs = report["device"]["lanes"].as_array().unwrap().len();
    assert_eq!(d.suite.count("logs/runtime.log"), procs, "{report:#}");
    // junit: one testcase per case, the failing one failed.
    let junit = fs::read_to_string(d.dir().join("build/scenerun/junit.xml")).unwrap();
    assert_eq!(junit.matches("<testcase ").count(), 8, "{junit}");
    let sat_case = junit
        .split("<testcase ")
        .find(|t| t.contains("TestClamp.saturate"))
        .unwrap();
    assert!(sat_case.contains("<failure"), "{sat_case}");
}

#[test]
fn a_failing_case_names_itself_and_the_cases_after_it_are_not_reached() {
    let d = Demo::classes();
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    // One id: the class's three cases run in one lane process, in one pytest session.
    let o = d
        .scenerun(&["device", "--no-lock", "--devices", "0", "-k", "TestClamp.*"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 1, "{}", show(&o));
    let report = read_json(&d.dir().join("build/scenerun/report.json")).unwrap();
    assert_eq!(report["device"]["lanes"].as_array().unwrap().len(), 1);
    let log = fs::read_to_string(d.dir().join("build/scenerun/logs/lanes/pytest.0.log")).unwrap();
    let command = log.lines().next().unwrap();
    let at = |case: &str| command.find(&format!("--scenerun-case={case}")).unwrap();
    assert!(at("saturate") < at("bytes"), "{command}");
    // test_run stops at its first failing case: the cases after it are not run, and
    // say why; the node is failed, as pytest's own run of it is.
    for (name, want) in [
        ("TestClamp.unit", "passed"),
        ("TestClamp.saturate", "failed"),
        ("TestClamp.bytes", "not_reached"),
    ] {
        let s = report_scene(&report, name).expect(name);
        assert_eq!(s["outcome"], want, "{name}: {report:#}");
    }
    // Under the failed case, its traceback as pytest words it (the end line's
    // failure_text): pytest itself prints it only in its summary, after the session.
    let sat = report_scene(&report, "TestClamp.saturate").unwrap();
    let tail = sat["attempts"][0]["output_tail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        tail.lines()
            .any(|l| l.starts_with("E ") && l.contains("golden mismatch on 'out'")),
        "{sat:#}"
    );
    let bytes = report_scene(&report, "TestClamp.bytes").unwrap();
    assert!(
        bytes["message"]
            .as_str()
            .unwrap()
            .contains("not run: case saturate ended test_run before it"),
        "{bytes:#}"
    );
    assert_eq!(
        report["nodes"],
        serde_json::json!([{
            "nodeid": "tests/elementwise/test_axpy_clamp.py::TestClamp::test_run",
            "outcome": "failed",
            "pytest": "failed",
            "scenes": ["TestClamp.unit", "TestClamp.saturate", "TestClamp.bytes"]
        }])
    );
    assert!(
        stdout(&o).contains("1 test node: 0 passed, 1 failed"),
        "{}",
        show(&o)
    );
    assert_eq!(d.suite.count("logs/runtime.log"), 1);
    assert_eq!(d.calls().len(), 16, "warm's calls only");
}

#[test]
fn editing_one_cases_params_rebuilds_that_case_only() {
    let d = Demo::classes();
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let before = d.calls().len();
    let file = d.dir().join("tests/elementwise/test_axpy_clamp.py");
    let text = fs::read_to_string(&file).unwrap();
    fs::write(&file, text.replace("\"alpha\": -2.5", "\"alpha\": -3.5")).unwrap();
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        built(&o),
        set(&["TestAxpy.scaled/fixture", "TestAxpy.scaled/golden"]),
        "{}",
        show(&o)
    );
    let new = d.calls()[before..].to_vec();
    assert_eq!(new.len(), 2, "{new:#?}");
    assert!(new.iter().all(|c| c.contains("-3.5")), "{new:#?}");

    // A new case in the same class: it alone is built.
    let text = fs::read_to_string(&file).unwrap();
    fs::write(
        &file,
        text.replace(
            "        {\"name\": \"board\"",
            "        {\"name\": \"wide\", \"platforms\": [\"sim\"], \"params\": {\"n\": 512, \"alpha\": 0.5}},\n        {\"name\": \"board\"",
        ),
    )
    .unwrap();
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        built(&o),
        set(&["TestAxpy.wide/fixture", "TestAxpy.wide/golden"]),
        "{}",
        show(&o)
    );

    // Code the cases share (the class's module): every case of the file again; a kernel:
    // the prepare step alone.
    fs::write(&file, fs::read_to_string(&file).unwrap() + "\nEXTRA = 1\n").unwrap();
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(built(&o).len(), 12, "{}", show(&o));
    let compiles = d.suite.count("logs/compile.log");
    let k = d.dir().join("kernels/vadd.c");
    fs::write(&k, fs::read_to_string(&k).unwrap() + "\n/* edited */\n").unwrap();
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let b = built(&o);
    assert!(b.iter().all(|s| s.ends_with("/kernels")), "{b:?}");
    assert_eq!(d.suite.count("logs/compile.log"), compiles + 1);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "py") {
            out.push(p);
        }
    }
    out
}

#[test]
fn the_codec_round_trips_what_a_suite_generates() {
    let venv = venv();
    let o = std::process::Command::new(venv.join("bin/python"))
        .current_dir(REPO)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "python/scenerun-pytest/tests",
        ])
        .env_remove("PYTHONPATH")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // The plugin's own unit tests (the codec's, the device ids', the lane results
    // schema's: at least these; others may join), all passing.
    let passed = stdout(&o)
        .split(" passed")
        .next()
        .and_then(|s| s.rsplit(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok());
    assert!(passed.is_some_and(|n| n >= 25), "{}", show(&o));
}

/// The plugin type-checks: mypy (the version .ci/deps.sh pins) over the whole package,
/// with the settings of python/scenerun-pytest/pyproject.toml (`strict`). Its cache goes
/// to a temporary directory: the plugin's tree gains nothing.
#[test]
fn the_plugin_type_checks_under_mypy_strict() {
    let venv = venv();
    let cache = tempfile::tempdir().unwrap();
    let o = std::process::Command::new(venv.join("bin/python"))
        .current_dir(Path::new(REPO).join("python/scenerun-pytest"))
        .args([
            "-m",
            "mypy",
            "--config-file",
            "pyproject.toml",
            "--cache-dir",
        ])
        .arg(cache.path())
        .env_remove("PYTHONPATH")
        .env_remove("MYPYPATH")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(
        stdout(&o).starts_with("Success: no issues found in "),
        "{}",
        show(&o)
    );
}

/// A small suite written here: a conftest with options of its own and the override hook.
fn selection_suite() -> (Suite, PathBuf) {
    let venv = venv();
    let s = Suite::new();
    s.write(
        "conftest.py",
        r#"import pytest

def pytest_addoption(parser):
    parser.addoption("--platform", default=None)
    parser.addoption("--manual", default="exclude", choices=["exclude", "include", "only"])
    parser.addoption("--flavor", default="plain")

def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long")
    config.addinivalue_line("markers", "sdma: async copies")

def pytest_scenerun_scene(item, case):
    flavor = item.config.getoption("--flavor")
    if case.get("name") == "dropped":
        return {"skip": "not for scenerun"}
    if item.get_closest_marker("sdma"):
        return {"lane": f"sdma_{flavor}", "order": "last", "tags": ["late"]}
    if case.get("name") == "pair":
        return {"persist": False}
    return None
"#,
    );
    let class = |name: &str, marks: &str, cases: &str| {
        format!(
            "{marks}class {name}:\n    CASES = [{cases}]\n    def generate_args(self, params):\n        return dict(params)\n    def compute_golden(self, args, params):\n        return args\n    def test_run(self):\n        pass\n\n"
        )
    };
    s.write(
        "tests/test_a.py",
        &format!(
            "import pytest\n\n{}{}{}",
            class(
                "TestPlain",
                "",
                "{'name': 'one', 'platforms': ['sim'], 'params': {'n': 1}}, {'name': 'hw_only', 'platforms': ['hw']}, {'name': 'by_hand', 'platforms': ['sim'], 'manual': ['sim']}, {'name': 'dropped', 'platforms': ['sim']}, {'name': 'pair', 'platforms': ['sim'], 'config': {'device_count': 2}}"
            ),
            class("TestSlow", "@pytest.mark.slow\n", "{'name': 's', 'platforms': ['sim']}"),
            class("TestSdma", "@pytest.mark.sdma\n", "{'name': 'copy', 'platforms': ['sim']}"),
        ),
    );
    (s, venv)
}

fn collect_in(
    s: &Suite,
    venv: &Path,
    args: &[&str],
) -> (std::process::Output, Vec<serde_json::Value>) {
    let o = std::process::Command::new(venv.join("bin/python"))
        .current_dir(s.dir())
        .args(["-m", "scenerun_pytest", "collect"])
        .args(args)
        .env_remove("PYTHONPATH")
        .output()
        .unwrap();
    let scenes = serde_json::from_str::<serde_json::Value>(&stdout(&o))
        .ok()
        .and_then(|d| d["scenes"].as_array().cloned())
        .unwrap_or_default();
    (o, scenes)
}

fn names_of(scenes: &[serde_json::Value]) -> Vec<&str> {
    scenes.iter().map(|s| s["name"].as_str().unwrap()).collect()
}

#[test]
fn collect_passes_the_suites_own_options_to_pytest_and_honours_its_selection() {
    let (s, venv) = selection_suite();
    let (o, scenes) = collect_in(&s, &venv, &["tests", "--platform", "sim", "-m", "not slow"]);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    // hw_only: another platform; by_hand: manual; dropped: the hook; TestSlow: -m.
    assert_eq!(
        names_of(&scenes),
        ["TestPlain.one", "TestPlain.pair", "TestSdma.copy"],
        "{}",
        show(&o)
    );
    assert_eq!(scenes[1]["device"]["devices"], 2);
    assert_eq!(scenes[1]["device"]["lane"], "pytest_x2");
    assert_eq!(scenes[1]["fixture"]["persist"], false);
    assert!(scenes[0]["fixture"].get("persist").is_none());
    assert_eq!(
        scenes[0]["device"]["args"],
        serde_json::json!([
            "tests/test_a.py::TestPlain::test_run",
            "--scenerun-case=one"
        ])
    );
    // The hook's overrides, with the conftest's own option.
    let sdma = &scenes[2];
    assert_eq!(sdma["device"]["lane"], "sdma_plain");
    assert_eq!(sdma["device"]["order"], "last");
    let tags: Vec<&str> = sdma["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tags, ["pytest", "sdma", "late"]);

    let (o, scenes) = collect_in(
        &s,
        &venv,
        &[
            "tests",
            "--platform",
            "sim",
            "--manual",
            "include",
            "--flavor",
            "x",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        names_of(&scenes),
        [
            "TestPlain.one",
            "TestPlain.by_hand",
            "TestPlain.pair",
            "TestSlow.s",
            "TestSdma.copy"
        ]
    );
    assert_eq!(scenes[4]["device"]["lane"], "sdma_x");
    // No case of any class is selected: each class's node still runs as pytest would
    // run it (a node scene: no fixture, no golden), and nothing is left uncovered.
    let (o, scenes) = collect_in(
        &s,
        &venv,
        &["tests", "--platform", "hw", "--manual", "only"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(
        names_of(&scenes),
        [
            "TestPlain.test_run",
            "TestSlow.test_run",
            "TestSdma.test_run"
        ]
    );
    assert!(scenes
        .iter()
        .all(|s| s.get("fixture").is_none() && s.get("case").is_none()));
    assert!(
        stderr(&o).contains("3 of 3 pytest nodes covered"),
        "{}",
        show(&o)
    );
}

#[test]
fn collect_fails_on_a_collection_error_unless_told_to_continue() {
    let (s, venv) = selection_suite();
    s.write("tests/test_broken.py", "import no_such_module\n");
    let (o, _) = collect_in(&s, &venv, &["tests", "--platform", "sim"]);
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));
    assert!(
        stderr(&o).contains("pytest collection failed"),
        "{}",
        show(&o)
    );
    let (o, scenes) = collect_in(
        &s,
        &venv,
        &[
            "tests",
            "--platform",
            "sim",
            "--continue-on-collection-errors",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert_eq!(scenes.len(), 4, "{}", show(&o));
}

/// `.ci/deps.sh` run again with nothing changed is a no-op: it does not reinstall the
/// plugin (it did every time, rewriting the installed files under running tests).
#[test]
fn ci_deps_does_not_reinstall_an_unchanged_plugin() {
    let deps = || {
        let out = std::process::Command::new("bash")
            .arg(Path::new(REPO).join(".ci/deps.sh"))
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "{}", show(&out));
    };
    let installed = || {
        let o = std::process::Command::new(Path::new(REPO).join(".ci/venv/bin/python"))
            .args([
                "-c",
                "import scenerun_pytest; print(scenerun_pytest.__file__)",
            ])
            .output()
            .expect("the venv's python runs");
        let file = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
        let meta = fs::metadata(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        (
            std::os::unix::fs::MetadataExt::ino(&meta),
            meta.modified().unwrap(),
        )
    };
    // Up to date first (a no-op already when .ci/run ran it before the tests).
    deps();
    let before = installed();
    deps();
    assert_eq!(
        installed(),
        before,
        "deps.sh reinstalled an unchanged plugin"
    );
}

/// The plugin's install command, as docs/adopting.md gives it, into a virtualenv of its
/// own: pip builds it with build isolation (the backend fetched for the build) and the
/// plugin's source tree gains nothing (no build/, no *.egg-info).
#[test]
fn the_plugin_installs_into_any_venv_and_writes_nothing_into_its_tree() {
    fn files(dir: &Path, out: &mut BTreeSet<PathBuf>) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                if e.file_name() != "__pycache__" {
                    files(&e.path(), out);
                }
            } else {
                out.insert(e.path());
            }
        }
    }
    let plugin = Path::new(REPO).join("python/scenerun-pytest");
    let mut before = BTreeSet::new();
    files(&plugin, &mut before);
    let tmp = tempfile::tempdir().unwrap();
    let env = tmp.path().join("venv");
    let o = std::process::Command::new(venv().join("bin/python"))
        .args(["-m", "venv"])
        .arg(&env)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let o = std::process::Command::new(env.join("bin/python"))
        .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
        .arg(&plugin)
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let mut after = BTreeSet::new();
    files(&plugin, &mut after);
    assert_eq!(after, before, "pip install wrote into {}", plugin.display());
    let o = std::process::Command::new(env.join("bin/python"))
        .args([
            "-c",
            "import scenerun_pytest.plugin, scenerun_pytest.verdicts",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
}

/// The failure text the plugin sends with a failed scene's end line is pytest's own:
/// under the failed scene, after its share of the output, the lines are the ones
/// pytest's session summary prints for that node in the same process, byte for byte and
/// in the same order.
#[test]
fn a_failed_scenes_failure_text_is_pytests_own_summary_of_it() {
    let d = Demo::new();
    let o = d.scenerun(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let o = d
        .scenerun(&[
            "device",
            "--no-lock",
            "--devices",
            "0",
            "-k",
            "TestClamp.saturate",
        ])
        .output()
        .unwrap();
    assert_eq!(code(&o), 1, "{}", show(&o));
    let report = read_json(&d.dir().join("build/scenerun/report.json")).unwrap();
    let sat = report_scene(&report, "TestClamp.saturate").unwrap();
    let tail = sat["attempts"][0]["output_tail"]
        .as_str()
        .unwrap_or_default();
    // Its first line is the scene's share of the output (pytest's progress mark).
    let told: Vec<&str> = tail.lines().skip(1).collect();
    assert!(
        told.iter().any(|l| l.starts_with("E ")),
        "a traceback under the scene: {sat:#}"
    );
    let log = fs::read_to_string(d.dir().join("build/scenerun/logs/lanes/pytest.0.log")).unwrap();
    let summary = &log[log.find("= FAILURES =").expect("pytest's own summary")..];
    assert!(
        summary.contains(&told.join("\n")),
        "not pytest's own words:\n{}\n--- pytest's summary:\n{summary}",
        told.join("\n")
    );
}
