//! Restarts of a poisoned device runtime (docs/lanes.md): a results line
//! `{"event": "restart"}` or `restart_on` (exit codes, output patterns) ends the lane
//! process and a fresh one runs the rest of the batch on the same ids; no id is
//! quarantined; the scene that ended before keeps its outcome; a scene cut short reruns
//! once; `max_restarts` bounds it. A shell runtime whose behaviour per scene comes from
//! the scene's args, and a real pytest with the scenerun plugin.

use super::*;

/// `rt.sh`: per scene, what its first arg says. A scene whose behaviour ends in `_once`
/// does it the first time only (a marker in logs/) and passes when it runs again. After
/// asking for a restart it waits to be stopped: had it gone on to the next scene, that
/// scene's lines could reach scenerun in the same poll as the restart line (a race the
/// tests lost under load).
const RUNTIME: &str = r#"#!/bin/sh
echo "start pid=$$ devices=$SCENERUN_DEVICES" >> logs/lane-starts.log
emit() { printf '%s\n' "$1" >> "$SCENERUN_RESULTS"; }
while IFS= read -r line; do
    scene=$(printf '%s' "$line" | sed -n 's/.*"scene":"\([^"]*\)".*/\1/p')
    what=$(printf '%s' "$line" | sed -n 's/.*"args":\["\([^"]*\)".*/\1/p')
    echo "run $scene" >> logs/lane-runs.log
    emit "{\"scene\":\"$scene\",\"event\":\"start\"}"
    case $what in
        *_once) if [ -e "logs/done-$scene" ]; then what=pass; else touch "logs/done-$scene"; fi ;;
    esac
    case $what in
        pass) ;;
        poison)
            emit "{\"scene\":\"$scene\",\"event\":\"end\",\"outcome\":\"failed\",\"message\":\"runtime poisoned by $scene\"}"
            emit '{"event":"restart","reason":"stream poisoned"}'
            # As a real runtime (the pytest plugin) does: nothing more after asking.
            sleep 600; continue ;;
        restart_mid*) emit '{"event":"restart","reason":"poisoned mid-scene"}'; sleep 600 ;;
        exit75*) exit 75 ;;
        say*) echo "E: RUNTIME POISONED in $scene"; sleep 600 ;;
        *) emit "{\"scene\":\"$scene\",\"event\":\"end\",\"outcome\":\"failed\",\"message\":\"unknown $what\"}"; continue ;;
    esac
    emit "{\"scene\":\"$scene\",\"event\":\"end\",\"outcome\":\"passed\"}"
done < "$SCENERUN_SCENES"
"#;

fn restart_suite(lane_keys: &str, list: &[(&str, &str)]) -> Suite {
    let s = Suite::with_logs();
    s.script("rt.sh", RUNTIME);
    let scenes: String = list
        .iter()
        .map(|(n, b)| format!("  - name: {n}\n    device:\n      lane: rt\n      args: [{b}]\n"))
        .collect();
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlock:\n  submit: \"{TASK_SUBMIT} --timeout 60 --device auto --device-num {{device_count}} --run {{run}}\"\n  grace: 2s\nlanes:\n  rt:\n    run: ./rt.sh\n    restarts: 0\n    timeout: 60s\n{lane_keys}scenes:\n{scenes}"
    ));
    s
}

fn attempts(r: &Value, name: &str) -> Vec<String> {
    scene_in(r, name)["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap().to_string())
        .collect()
}

/// Process start lines of the runtime, each with the ids it was given.
fn start_ids(s: &Suite) -> Vec<String> {
    s.read("logs/lane-starts.log")
        .lines()
        .map(|l| l.split("devices=").nth(1).unwrap_or("").to_string())
        .collect()
}

#[test]
fn a_restart_line_gives_the_rest_a_fresh_process_on_the_same_ids() {
    let s = restart_suite(
        "",
        &[
            ("a", "pass"),
            ("b", "poison"),
            ("c", "restart_mid_once"),
            ("d", "pass"),
        ],
    );
    let pool = Pool::new("0-3");
    let mut cmd = s.cmd(&["device"]);
    pool.apply(&mut cmd);
    let o = cmd.output().unwrap();
    expect_code(&o, 1);
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[
            ("a", "passed"),
            ("b", "failed"),
            ("c", "passed"),
            ("d", "passed")
        ]),
        "{}",
        show(&o)
    );
    // The scene before the restart keeps its own outcome and message.
    assert_eq!(message(&r, "b"), "runtime poisoned by b");
    // The scene cut short reran once, not counted as a retry (no flaky pass).
    assert_eq!(attempts(&r, "c"), ["cut_short", "passed"]);
    // The live counter counts it once, at its rerun's end.
    let err = stderr(&o);
    let cut = err
        .lines()
        .find(|l| l.contains("cut short") && l.contains(" c "))
        .unwrap_or_else(|| panic!("no cut-short line: {}", show(&o)));
    assert!(
        cut.contains("(runs again in the fresh lane process)") && !cut.contains('/'),
        "{cut}"
    );
    let counters: Vec<&str> = err
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix('[')?.split(']').next())
        .collect();
    assert_eq!(counters, ["1/4", "2/4", "3/4", "4/4"], "{}", show(&o));
    assert_eq!(
        attempts(&r, "b"),
        ["failed"],
        "the poisoned scene is not rerun"
    );
    // Three processes, all on the one id the batch got; nothing quarantined.
    let ids = start_ids(&s);
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    assert_eq!(r["device"]["quarantined"], serde_json::json!([]));
    let lanes = r["device"]["lanes"].as_array().unwrap();
    let reasons: Vec<&str> = lanes
        .iter()
        .map(|l| l["restart_reason"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        reasons,
        [
            "it asked for one: stream poisoned",
            "it asked for one: poisoned mid-scene",
            "-"
        ]
    );
    let counts: Vec<u64> = lanes
        .iter()
        .map(|l| l["restarts"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [0, 1, 2]);
    // One lock acquisition for all of it; the trace shows both restarts.
    assert_eq!(
        pool.events().iter().filter(|e| e.kind == "acquire").count(),
        1
    );
    let trace = s.record("trace.json").expect("trace.json");
    let restarts = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "restart")
        .count();
    assert_eq!(restarts, 2, "{trace:#}");
}

#[test]
fn max_restarts_bounds_the_restarts_then_the_rest_fail_with_the_reason() {
    let s = restart_suite(
        "    max_restarts: 1\n",
        &[("a", "poison"), ("b", "poison"), ("c", "pass")],
    );
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[("a", "failed"), ("b", "failed"), ("c", "not_run")]),
        "{}",
        show(&o)
    );
    let c = message(&r, "c");
    assert!(
        c.contains("asked for a restart (it asked for one: stream poisoned)")
            && c.contains("max_restarts (1)"),
        "{c}"
    );
    assert_eq!(starts(&s), 2);
}

#[test]
fn restart_on_exit_codes_and_output_patterns() {
    let s = restart_suite(
        "    restart_on:\n      exit_codes: [75]\n      patterns: [\"RUNTIME POISONED\"]\n",
        &[
            ("a", "pass"),
            ("b", "exit75_once"),
            ("c", "say_once"),
            ("d", "pass"),
        ],
    );
    let o = no_lock(&s, "3,5");
    expect_code(&o, 0);
    let r = report(&s);
    assert!(outcomes(&r).values().all(|o| o == "passed"), "{}", show(&o));
    assert_eq!(attempts(&r, "b"), ["cut_short", "passed"]);
    assert_eq!(attempts(&r, "c"), ["cut_short", "passed"]);
    let cut = &scene_in(&r, "c")["attempts"][0]["message"];
    assert!(
        cut.as_str()
            .unwrap()
            .contains("matches the restart pattern `RUNTIME POISONED`"),
        "{cut}"
    );
    assert_eq!(r["device"]["quarantined"], serde_json::json!([]));
    // Each batch's restarts stay on its own id.
    let runs = s.read("logs/lane-starts.log");
    for id in ["3", "5"] {
        let n = start_ids(&s).iter().filter(|i| *i == id).count();
        assert!(n >= 1, "{runs}");
    }
    assert_eq!(starts(&s), 2 + 2, "two batches, two restarts: {runs}");
}

#[test]
fn restart_keys_are_validated() {
    let s = restart_suite("    max_restarts: -1\n", &[("a", "pass")]);
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    let err = stderr(&o);
    assert!(
        err.contains("scenes.yaml:12:19: lanes.rt.max_restarts: expected a non-negative integer"),
        "{err}"
    );
    let s = restart_suite(
        "    restart_on:\n      exit_codes: [75]\n      patterns: [\"(\"]\n      signals: [9]\n",
        &[("a", "pass")],
    );
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    let err = stderr(&o);
    for want in [
        "scenes.yaml:14:18: lanes.rt.restart_on.patterns[0]: invalid regular expression",
        "scenes.yaml:15:7: lanes.rt.restart_on.signals: unknown field `signals`",
    ] {
        assert!(err.contains(want), "missing `{want}` in:\n{err}");
    }
}

/// A real pytest lane with the scenerun plugin: a test that poisons the device runtime
/// (an exception type the suite names, or its conftest hook's say-so) fails on its own,
/// and the tests after it run in a fresh process, where the runtime is healthy again.
#[test]
fn a_pytest_suite_maps_a_poisoned_runtime_to_a_restart() {
    let py = super::pytest::venv_python();
    let s = Suite::with_logs();
    s.write(
        "pytest.ini",
        "[pytest]\nscenerun_restart_on = devrt.RuntimePoisoned\n",
    );
    s.write(
        "tests/devrt.py",
        "class RuntimePoisoned(RuntimeError):\n    pass\n\nclass Runtime:\n    poisoned = False\n\n    def run(self):\n        assert not self.poisoned, 'the runtime is poisoned by an earlier test'\n",
    );
    s.write(
        "tests/conftest.py",
        r#"import os, sys
import pytest
sys.path.insert(0, os.path.dirname(__file__))
import devrt

def pytest_sessionstart(session):
    with open("logs/lane-starts.log", "a") as f:
        f.write("pytest %d devices=%s\n" % (os.getpid(), os.environ.get("SCENERUN_DEVICES")))

@pytest.fixture(scope="session")
def runtime():
    return devrt.Runtime()

def pytest_scenerun_restart(item, excinfo):
    if "NPU context lost" in str(excinfo.value):
        return "the NPU context is gone"
"#,
    );
    s.write(
        "tests/test_rt.py",
        r#"import devrt

def test_a(runtime):
    runtime.run()

def test_poison_type(runtime):
    runtime.poisoned = True
    raise devrt.RuntimePoisoned("stream 3 poisoned")

def test_b(runtime):
    runtime.run()

def test_poison_hook(runtime):
    runtime.poisoned = True
    raise RuntimeError("NPU context lost")

def test_c(runtime):
    runtime.run()
"#,
    );
    let names = ["a", "poison_type", "b", "poison_hook", "c"];
    let scenes: String = names
        .iter()
        .map(|n| {
            format!("  - name: {n}\n    device:\n      lane: py\n      args: [\"tests/test_rt.py::test_{n}\"]\n")
        })
        .collect();
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  py:\n    run: \"{} -m pytest -p no:cacheprovider -q {{args}}\"\n    timeout: 120s\nscenes:\n{scenes}",
        py.display()
    ));
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[
            ("a", "passed"),
            ("poison_type", "failed"),
            ("b", "passed"),
            ("poison_hook", "failed"),
            ("c", "passed"),
        ]),
        "{}",
        show(&o)
    );
    assert!(
        message(&r, "poison_type").contains("stream 3 poisoned"),
        "{r:#}"
    );
    let reasons: Vec<String> = r["device"]["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["restart_reason"].as_str().map(str::to_string))
        .collect();
    assert_eq!(reasons.len(), 2, "{reasons:?}");
    assert!(
        reasons[0].contains("devrt.RuntimePoisoned: stream 3 poisoned"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("the NPU context is gone"),
        "{reasons:?}"
    );
    let ids = start_ids(&s);
    assert_eq!(ids, ["0", "0", "0"], "three sessions on the same id");
}

/// The demo (a copy of `fixtures/demo`): its plan shows the runtime lane's restart
/// settings and the `order: last` scene; a poisoned runtime restarts on the same id.
#[test]
fn the_demo_shows_a_restart_and_an_order() {
    let s = Suite::new();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    copy_tree(&repo.join("fixtures/demo"), &s.path("demo"), &["build"]);
    copy_tree(&repo.join("fixtures/bin"), &s.path("bin"), &[]);
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = scenerun();
        c.current_dir(s.path("demo"))
            .args(["--manifest", "scenes.yaml"])
            .args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let plan = run(&["plan"], &[]);
    expect_code(&plan, 0);
    let text = stdout(&plan);
    assert!(
        text.contains("restarts (same ids, at most 3): exit status 75")
            && text.contains("stop: SIGUSR1, 1.0s, then SIGTERM"),
        "{text}"
    );
    let last = text
        .lines()
        .find(|l| l.contains("vector_small") && l.contains("slots"))
        .unwrap_or_default();
    assert!(last.contains("order last"), "{text}");
    expect_code(&run(&["warm", "--tag", "lane", "-q"], &[]), 0);
    let o = run(
        &["device", "--no-lock", "--devices", "0", "--tag", "lane"],
        &[
            ("DEMO_RUNTIME_POISON", "lane_vector_1"),
            ("DEMO_RUNTIME_STARTUP_MS", "100"),
        ],
    );
    expect_code(&o, 1);
    let r = read_json(&s.path("demo/build/scenerun/report.json")).expect("report.json");
    assert_eq!(
        outcome_list(&r),
        pairs(&[
            ("lane_vector_1", "failed"),
            ("lane_vector_2", "passed"),
            ("lane_vector_3", "passed"),
            ("lane_vector_4", "passed"),
        ]),
        "{}",
        show(&o)
    );
    let lanes = r["device"]["lanes"].as_array().unwrap();
    assert_eq!(lanes.len(), 2, "{lanes:#?}");
    assert!(lanes[0]["restart_reason"]
        .as_str()
        .unwrap_or("")
        .contains("stream poisoned by lane_vector_1"));
    assert_eq!(lanes[0]["devices"], lanes[1]["devices"]);
}
