//! Selections of one suite, profiles and lane inheritance (docs/manifest.md
//! "Selections", docs/lanes.md "Defaults and inheritance"): the real pytest demo suite
//! collected once per selection by the real plugin, run under the lock stand-in; shell
//! lanes for inheritance. Assertions count runtime start-ups (the demo runtime's log) and
//! lock acquisitions (the stand-in's log), and read the reports.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::json;

use super::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The demo suite with two selections over one test file: `main` (TestVectorAdd and
/// TestRelu) and `extra` (TestRelu, last), a `daily` profile widening `extra`, lanes
/// from `lane_defaults` whose command names `{selection_args}`.
const SELECTIONS: &str = r#"version: 1
platform: sim
env:
  LC_ALL: C
cache:
  dir: build/cache
toolchains:
  cc:
    compile: "cc -shared -fPIC -O2 {includes} {source} -o {out} {flags}"
    identity: "cc --version"
    depfile: "-MD -MF {depfile}"
lock:
  submit: "../bin/task-submit --timeout 600 --max-time 600 --device auto --device-num {device_count} --run {run}"
  device_env: TASK_DEVICE
selections:
  main:
    paths: [tests/st/test_elementwise.py]
    args: [-k, "VectorAdd or Relu"]
  extra:
    paths: [tests/st/test_elementwise.py]
    args: [-k, Relu]
    order: last
profiles:
  daily:
    selections:
      extra: {args: [-k, "Relu or Axpy"]}
lane_defaults:
  run: "python -m pytest -q -p no:cacheprovider {args} {selection_args}"
lanes:
  pytest: {}
  pytest_x2: {inherits: pytest, devices: 2}
scenes_from:
  - run: "python -m scenerun_pytest collect {selection_paths} {selection_args} --platform {platform}"
    inputs: ["tests/st/**/*.py", "pytest.ini"]
"#;

/// A copy of the demo with the manifest above, the lock stand-in beside it as `../bin`,
/// and the virtualenv's `python` first on PATH.
struct Demo {
    suite: Suite,
    path_env: String,
}

impl Demo {
    fn new() -> Demo {
        let venv = crate::pytest_suite::venv();
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
        suite.write("pytest-demo/scenes.yaml", SELECTIONS);
        let path_env = format!(
            "{}:{}",
            venv.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Demo { suite, path_env }
    }

    fn dir(&self) -> PathBuf {
        self.suite.path("pytest-demo")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = scenerun();
        c.current_dir(self.dir())
            .env("PATH", &self.path_env)
            .env("DEMO_RUNTIME_STARTUP_SECS", "0.05")
            .env("DEMO_RUNTIME_LOG", self.suite.path("logs/runtime.log"))
            .env_remove("PYTHONPATH")
            .args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        let o = self.run(args);
        expect_code(&o, 0);
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&o)))
    }

    fn names(&self, args: &[&str]) -> Vec<String> {
        let mut all = vec!["list", "--format", "json"];
        all.extend_from_slice(args);
        self.json(&all)["scenes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    }
}

const MAIN: [&str; 5] = [
    "main/TestVectorAdd.small",
    "main/TestVectorAdd.medium",
    "main/TestVectorAdd.large",
    "main/TestRelu.mixed",
    "main/TestRelu.wide",
];
const EXTRA: [&str; 2] = ["extra/TestRelu.mixed", "extra/TestRelu.wide"];

#[test]
fn a_node_in_two_selections_is_two_scenes_run_in_two_processes_under_one_lock() {
    let d = Demo::new();
    let all: Vec<String> = MAIN.iter().chain(&EXTRA).map(|s| s.to_string()).collect();
    assert_eq!(d.names(&[]), all);
    // --selection and -k (which sees the full name) filter; an unknown selection is exit 4.
    assert_eq!(d.names(&["--selection", "extra"]), EXTRA);
    assert_eq!(d.names(&["-k", "extra/TestRelu"]), EXTRA);
    assert_eq!(
        d.names(&["--selection", "main", "-k", "Relu"]),
        ["main/TestRelu.mixed", "main/TestRelu.wide"]
    );
    let bad = d.run(&["list", "--selection", "nosuch"]);
    expect_code(&bad, 4);
    assert!(
        stderr(&bad).contains("unknown selection `nosuch`") && stderr(&bad).contains("main, extra"),
        "{}",
        show(&bad)
    );

    // The plan: every scene with its selection, order, variant and ids; one process per
    // selection, the extra one last.
    let plan = d.json(&["plan", "--format", "json"]);
    let scenes = plan["device"]["scenes"].as_array().unwrap();
    assert_eq!(scenes.len(), 7);
    for s in scenes {
        let name = s["name"].as_str().unwrap();
        let sel = name.split('/').next().unwrap();
        assert_eq!(s["selection"], sel, "{s:#}");
        assert_eq!(s["variant"], format!("selection {sel}"), "{s:#}");
        assert_eq!(s["devices"], 1, "{s:#}");
        let order = if sel == "extra" { "last" } else { "any" };
        assert_eq!(s["order"], order, "{s:#}");
    }
    let procs = plan["device"]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{procs:#?}");
    assert_eq!(plan["selections"][1]["name"], "extra");
    assert!(plan.get("profile").is_none(), "{plan:#}");
    let text = stdout(&d.run(&["plan"]));
    assert!(
        text.contains("selection main: 5 scenes selected")
            && text.contains("selection extra: 2 scenes selected, order last")
            && text.contains("lane pytest [selection extra] (2 scenes)"),
        "{text}"
    );

    // One warm, one lock: each selection's lane process starts once, with its own args.
    let pool = Pool::new("0-1");
    let warm = d.run(&["warm"]);
    expect_code(&warm, 0);
    let mut device = d.cmd(&["device"]);
    pool.apply(&mut device);
    let o = device.output().unwrap();
    expect_code(&o, 0);
    assert_eq!(pool.acquisitions(), 1, "{}", show(&o));
    let starts = d.suite.read("logs/runtime.log").lines().count();
    assert_eq!(starts, 2, "one runtime per selection's process");
    let logs = d.dir().join("build/scenerun/logs/lanes");
    let commands: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap();
            text.lines().next().unwrap_or_default().to_string()
        })
        .collect();
    assert_eq!(commands.len(), 2, "{commands:#?}");
    assert!(
        commands
            .iter()
            .any(|c| c.ends_with("-k 'VectorAdd or Relu'"))
            && commands.iter().any(|c| c.ends_with("-k Relu")),
        "{commands:#?}"
    );

    // report.json and junit name each scene's selection beside its node.
    let r = json_file(&d.dir().join("build/scenerun/report.json"));
    for (name, sel) in [
        ("main/TestRelu.mixed", "main"),
        ("extra/TestRelu.mixed", "extra"),
    ] {
        let s = scene_in(&r, name);
        assert_eq!(s["selection"], sel, "{s:#}");
        assert_eq!(s["outcome"], "passed", "{s:#}");
        assert_eq!(
            s["nodeid"],
            "tests/st/test_elementwise.py::TestRelu::test_scene[mixed]"
        );
    }
    let relu_nodes: Vec<&Value> = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["nodeid"] == "tests/st/test_elementwise.py::TestRelu::test_scene[mixed]")
        .collect();
    assert_eq!(relu_nodes.len(), 2, "{relu_nodes:#?}");
    let junit = std::fs::read_to_string(d.dir().join("build/scenerun/junit.xml")).unwrap();
    assert!(
        junit.contains(r#"name="extra/TestRelu.mixed" classname="scenerun.extra""#)
            && junit.contains(r#"<property name="selection" value="extra"/>"#),
        "{junit}"
    );
}

#[test]
fn a_profile_replaces_a_selections_words_in_the_plan_and_in_what_the_lane_runs() {
    let d = Demo::new();
    let bad = d.run(&["--profile", "weekly", "plan"]);
    expect_code(&bad, 4);
    assert!(
        stderr(&bad).contains("unknown profile `weekly`") && stderr(&bad).contains("daily"),
        "{}",
        show(&bad)
    );
    let plan = d.json(&["--profile", "daily", "plan", "--format", "json"]);
    assert_eq!(plan["profile"], "daily");
    assert_eq!(plan["selections"][1]["args"], json!(["-k", "Relu or Axpy"]));
    assert_eq!(
        plan["selections"][0]["args"],
        json!(["-k", "VectorAdd or Relu"])
    );
    // The environment variable is the same switch.
    let mut via_env = d.cmd(&["list", "--format", "json", "--selection", "extra"]);
    via_env.env("SCENERUN_PROFILE", "daily");
    let o = via_env.output().unwrap();
    expect_code(&o, 0);
    assert!(stdout(&o).contains("extra/TestAxpy.unit"), "{}", show(&o));
    assert!(!d
        .names(&["--selection", "extra"])
        .iter()
        .any(|n| n.contains("Axpy")));

    let run = d.run(&[
        "--profile",
        "daily",
        "run",
        "--selection",
        "extra",
        "--no-lock",
        "--devices",
        "0",
    ]);
    expect_code(&run, 0);
    let r = json_file(&d.dir().join("build/scenerun/report.json"));
    assert_eq!(r["profile"], "daily");
    assert_eq!(scene_in(&r, "extra/TestAxpy.unit")["outcome"], "passed");
    let log = d.dir().join("build/scenerun/logs/lanes/pytest.0.log");
    let first = std::fs::read_to_string(&log).unwrap();
    assert!(
        first.lines().next().unwrap().ends_with("-k 'Relu or Axpy'"),
        "{first}"
    );
}

/// A shell lane that logs its `{args}` and two variables, then passes every scene.
const ENV_LANE: &str = r#"#!/bin/sh
echo "$LANE_NAME A=$X_A B=$X_B C=$X_C args=$*" >> logs/lanes.log
while IFS= read -r line; do
    scene=$(printf '%s' "$line" | sed -n 's/.*"scene":"\([^"]*\)".*/\1/p')
    printf '{"scene":"%s","event":"end","outcome":"passed"}\n' "$scene" >> "$SCENERUN_RESULTS"
done < "$SCENERUN_SCENES"
"#;

fn lanes_manifest(lanes: &str) -> String {
    let scenes: String = [("one", "a"), ("two", "b"), ("three", "c")]
        .iter()
        .map(|(n, l)| format!("  - name: {n}\n    device:\n      lane: {l}\n      args: [{n}]\n"))
        .collect();
    format!("version: 1\ncache:\n  dir: cache\n{lanes}scenes:\n{scenes}")
}

const INHERITED: &str = r#"lane_defaults:
  run: "./lane.sh {args}"
  stop_signal: USR1
  env: {X_A: default, X_B: default}
lanes:
  a: {env: {LANE_NAME: a}}
  b:
    inherits: a
    args: [--level, "2"]
    env: {LANE_NAME: b, X_B: b}
  c:
    inherits: b
    devices: 2
    stop_wait: 2s
    env: {LANE_NAME: c, X_C: c}
"#;

const WRITTEN_OUT: &str = r#"lanes:
  a:
    run: "./lane.sh {args}"
    stop_signal: USR1
    env: {X_A: default, X_B: default, LANE_NAME: a}
  b:
    run: "./lane.sh {args}"
    stop_signal: USR1
    args: [--level, "2"]
    env: {X_A: default, X_B: b, LANE_NAME: b}
  c:
    run: "./lane.sh {args}"
    stop_signal: USR1
    stop_wait: 2s
    devices: 2
    args: [--level, "2"]
    env: {X_A: default, X_B: b, LANE_NAME: c, X_C: c}
"#;

#[test]
fn lanes_inherit_defaults_then_parents_then_their_own_keys() {
    let plan_of = |lanes: &str| {
        let s = Suite::with_logs();
        s.script("lane.sh", ENV_LANE);
        s.manifest(&lanes_manifest(lanes));
        let o = s.cmd(&["plan", "--format", "json"]).output().unwrap();
        expect_code(&o, 0);
        let mut v: Value = serde_json::from_slice(&o.stdout).unwrap();
        for k in ["manifest", "cache_dir"] {
            v.as_object_mut().unwrap().remove(k);
        }
        v["device"].as_object_mut().unwrap().remove("lock_command");
        (s, v)
    };
    let (s, inherited) = plan_of(INHERITED);
    let (_, written) = plan_of(WRITTEN_OUT);
    assert_eq!(inherited, written);

    // What each lane process got: the env merged per variable, the lane's args first.
    let o = no_lock(&s, "0-1");
    expect_code(&o, 0);
    let mut lines: Vec<String> = s
        .read("logs/lanes.log")
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "a A=default B=default C= args=one",
            "b A=default B=b C= args=--level 2 two",
            "c A=default B=b C=c args=--level 2 three",
        ]
    );
}

#[test]
fn a_cycle_or_an_unknown_parent_is_a_manifest_error_naming_the_chain() {
    let s = Suite::new();
    s.script("lane.sh", ENV_LANE);
    s.manifest(&lanes_manifest(
        "lanes:\n  a: {inherits: b, run: ./lane.sh}\n  b: {inherits: a}\n  c: {inherits: b}\n",
    ));
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    assert!(
        stderr(&o).contains("lanes inherit in a cycle: a -> b -> a"),
        "{}",
        show(&o)
    );
    s.manifest(&lanes_manifest(
        "lanes:\n  a: {run: ./lane.sh}\n  b: {inherits: a}\n  c: {inherits: b, run: x}\n  d: {inherits: nope}\n",
    ));
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    assert!(
        stderr(&o).contains("unknown lane `nope` to inherit from (d -> nope; defined: a, b, c, d)"),
        "{}",
        show(&o)
    );
    // A placeholder of the selections without `selections:` is an error too.
    s.manifest(&lanes_manifest(
        "lanes:\n  a: {run: \"./lane.sh {selection_args}\"}\n  b: {inherits: a}\n  c: {inherits: a}\n",
    ));
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    assert!(
        stderr(&o).contains("the manifest has no `selections:`"),
        "{}",
        show(&o)
    );
}

#[test]
fn a_worker_that_names_the_selection_is_started_once_per_selection_that_needs_it() {
    let d = Demo::new();
    let manifest = SELECTIONS
        .replace(
            "scenes_from:",
            "workers:\n  py: {run: \"python -m scenerun_pytest worker {selection_paths} {selection_args} --platform {platform}\"}\nscenes_from:",
        )
        .replace("collect {selection_paths}", "collect --worker py {selection_paths}");
    d.suite.write("pytest-demo/scenes.yaml", &manifest);
    // With the daily profile extra has TestAxpy, which main has not: both selections'
    // steps need building, each in a worker started with its own words.
    let o = d.run(&["--profile", "daily", "warm", "-j", "1"]);
    expect_code(&o, 0);
    let log = std::fs::read_to_string(d.dir().join("build/scenerun/logs/workers/py.0.log"))
        .unwrap_or_else(|e| panic!("no worker log ({e}): {}", show(&o)));
    let mut started: Vec<&str> = log.lines().filter(|l| l.starts_with("$ ")).collect();
    started.sort();
    assert_eq!(
        started,
        [
            "$ python -m scenerun_pytest worker tests/st/test_elementwise.py -k 'Relu or Axpy' --platform sim",
            "$ python -m scenerun_pytest worker tests/st/test_elementwise.py -k 'VectorAdd or Relu' --platform sim",
        ],
        "{log}"
    );
    let r = json_file(&d.dir().join("build/scenerun/warm.json"));
    assert!(r.to_string().contains("extra/TestAxpy.unit"), "{r:#}");
}
