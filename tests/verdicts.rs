//! Verdict for verdict: a suite with every kind of pytest node (scene-class cases, a
//! class's other test, a class with its own `test_run` and the base's `generate_args`
//! stub, plain functions, a skip, an xfail, a setup error, parameters) gives the same
//! verdict per node under `scenerun warm && scenerun device` as under plain pytest
//! (docs/pytest.md). Real pytest from `.ci/venv`; plain pytest's verdicts come from the
//! plugin's own recorder (`-p scenerun_pytest.verdicts`), the comparison from its
//! `python -m scenerun_pytest.verdicts`.

use std::path::{Path, PathBuf};

use crate::common::*;

const CONFTEST: &str = r#"import faulthandler, json, os, signal
import pytest

def pytest_addoption(parser):
    parser.addoption("--platform", default=None)
    parser.addoption("--device", default="0")
    parser.addoption("--manual", default="exclude", choices=["exclude", "include", "only"])

def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(secs): the node's own limit")
    # As simpler does: SIGUSR1 dumps every thread's stack (to the captured stderr).
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)

_POISONED = []

@pytest.fixture(scope="session")
def runtime(request):
    log = os.environ.get("NODES_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"runtime {os.getpid()}\n")
    return request.config.getoption("--device")

@pytest.fixture
def worker(runtime, request):
    # simpler's st_worker: after a poisoning error the rest of the process is skipped,
    # and the skipped class is registered in $SIMPLER_L2_POISON_SINK for a rerun.
    if _POISONED:
        sink = os.environ.get("SIMPLER_L2_POISON_SINK")
        if sink:
            with open(sink, "a") as f:
                f.write(json.dumps({"selector": f"{request.node.cls.__name__}::", "nodeid": request.node.nodeid}) + "\n")
        pytest.skip("runtime poisoned by an earlier device error")
    yield runtime

@pytest.fixture
def poison():
    _POISONED.append(True)

@pytest.fixture
def broken():
    raise RuntimeError("setup broke")
"#;

const BASE: &str = r#"import copy
import pytest

class SceneCase:
    CASES = []

    def generate_args(self, params):
        raise NotImplementedError

    def compute_golden(self, args, params):
        raise NotImplementedError

    def test_run(self, runtime, request):
        platform = request.config.getoption("--platform")
        cases = [c for c in self.CASES if platform in c.get("platforms", [platform])]
        if not cases:
            pytest.skip("no case for this platform")
        for case in cases:
            params = case.get("params", {})
            args = self.generate_args(params)
            golden = copy.deepcopy(args)
            self.compute_golden(golden, params)
            out = [x * params.get("k", 1) for x in args["x"]]
            if params.get("broken"):
                out[0] += 1
            assert out == golden["out"], f"golden mismatch in {case['name']}"
"#;

const TESTS: &str = r#"import pytest
from scenebase import SceneCase

class TestScale(SceneCase):
    CASES = [
        {"name": "one", "params": {"k": 1}},
        {"name": "bad", "params": {"k": 2, "broken": True}},
        {"name": "after", "params": {"k": 3}},
    ]

    def generate_args(self, params):
        return {"x": [1.0, 2.0, 3.0]}

    def compute_golden(self, args, params, *, extra=0):
        args["out"] = [x * params["k"] + extra for x in args["x"]]

    def test_extra_keyword(self):
        args = self.generate_args({"k": 2})
        self.compute_golden(args, {"k": 2}, extra=1)
        assert args["out"] == [3.0, 5.0, 7.0]

class TestOwnRun(SceneCase):
    CASES = [{"name": "only"}]

    def test_run(self, runtime):
        assert runtime is not None

def test_plain(runtime):
    pass

@pytest.mark.skip(reason="not on this platform")
def test_skipped():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

def test_setup_error(broken):
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n == 1
"#;

const MANIFEST: &str = r#"version: 1
platform: sim
suite_args: [--platform, "{platform}"]
lanes:
  pytest:
    run: "python -m pytest -q -p no:cacheprovider {args} {suite_args} --device {devices}"
    stop_signal: USR1
    stop_wait: 3s
scenes_from:
  - run: "python -m scenerun_pytest collect tests {suite_args}"
    inputs: ["tests/*.py", conftest.py, scenebase.py]
"#;

struct Nodes {
    suite: Suite,
    venv: PathBuf,
}

impl Nodes {
    fn new(tests: &str) -> Nodes {
        let suite = Suite::new();
        suite.write("conftest.py", CONFTEST);
        suite.write("scenebase.py", BASE);
        suite.write("tests/test_scenes.py", tests);
        suite.manifest(MANIFEST);
        Nodes {
            suite,
            venv: crate::pytest_suite::venv(),
        }
    }

    fn path_env(&self) -> String {
        format!(
            "{}:{}",
            self.venv.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    fn scenerun(&self, args: &[&str]) -> std::process::Output {
        let mut c = self.suite.cmd(args);
        c.env("PATH", self.path_env())
            .env("NODES_LOG", self.suite.path("nodes.log"))
            .env_remove("PYTHONPATH");
        c.output().unwrap()
    }

    fn python(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(self.venv.join("bin/python"));
        c.current_dir(self.suite.dir())
            .args(args)
            .env("PATH", self.path_env())
            .env_remove("PYTHONPATH");
        c
    }

    /// Plain pytest over the suite, its verdicts recorded by the plugin's recorder.
    fn pytest_verdicts(&self) -> PathBuf {
        self.pytest_verdicts_with(&[])
    }

    fn pytest_verdicts_with(&self, env: &[(&str, PathBuf)]) -> PathBuf {
        let file = self.suite.path("pytest-verdicts.jsonl");
        let o = self
            .python(&["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p"])
            .args(["scenerun_pytest.verdicts", "tests", "--platform", "sim"])
            .env("SCENERUN_VERDICTS", &file)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(file.exists(), "the recorder wrote nothing: {}", show(&o));
        file
    }

    fn compare(&self, verdicts: &Path) -> std::process::Output {
        self.python(&["-m", "scenerun_pytest.verdicts"])
            .arg(verdicts)
            .arg(self.suite.path("build/scenerun/report.json"))
            .output()
            .unwrap()
    }
}

#[test]
fn every_node_gets_the_verdict_plain_pytest_gives_it() {
    let n = Nodes::new(TESTS);
    let verdicts = n.pytest_verdicts();
    let text = std::fs::read_to_string(&verdicts).unwrap();
    // The reference run itself: nine nodes, each kind of verdict.
    for want in [
        r#""verdict": "failed""#,
        r#""verdict": "skipped""#,
        r#""verdict": "xfailed""#,
        r#""verdict": "error""#,
    ] {
        assert!(text.contains(want), "{want} in {text}");
    }
    assert_eq!(text.lines().count(), 9, "{text}");

    let o = n.scenerun(&["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let summary = n.suite.path("step-summary.md");
    let o = n
        .suite
        .cmd(&["device", "--no-lock", "--devices", "0"])
        .env("PATH", n.path_env())
        .env_remove("PYTHONPATH")
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(
        code(&o),
        1,
        "a failed node fails the run, as in pytest: {}",
        show(&o)
    );
    // Annotations for the two failures and the error only; the step summary marks skips
    // as skips and counts them apart.
    let out = stdout(&o);
    let annotations: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("::error title=scenerun%3A "))
        .collect();
    assert_eq!(annotations.len(), 3, "{annotations:#?}");
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(md.contains("| test_skipped | ⏭️ skipped |"), "{md}");
    assert!(md.contains("| test_xfail | ⏭️ xfailed |"), "{md}");
    assert!(
        md.contains("9 test nodes: 4 passed, 1 skipped, 1 xfailed, 2 failed, 1 error"),
        "{md}"
    );
    let cmp = n.compare(&verdicts);
    assert_eq!(code(&cmp), 0, "{}\n{}", show(&cmp), show(&o));
    assert!(
        stdout(&cmp).contains("; 9 scenerun nodes; 0 differences"),
        "{}",
        show(&cmp)
    );
    // Skips are counted on their own, never as passes; the cases after the failing one
    // are not reached.
    assert!(
        out.contains("9 test nodes: 4 passed, 1 skipped, 1 xfailed, 2 failed, 1 error"),
        "{out}"
    );
    let r = report(&n.suite);
    let o = outcomes(&r);
    assert_eq!(o["TestScale.after"], "not_reached", "{o:#?}");
    assert_eq!(o["TestScale.test_extra_keyword"], "passed", "{o:#?}");
    assert_eq!(o["test_skipped"], "skipped", "{o:#?}");
    let junit = n.suite.read("build/scenerun/junit.xml");
    let skipped = junit.matches("<skipped").count();
    assert_eq!(skipped, 3, "skipped, xfailed and not reached: {junit}");
    assert!(junit.contains(r#"name="nodeid""#), "{junit}");
}

#[test]
fn a_node_the_hook_drops_without_a_reason_is_uncovered_and_stops_the_plan() {
    let n = Nodes::new(TESTS);
    n.suite.write(
        "conftest.py",
        &format!(
            "{CONFTEST}\ndef pytest_scenerun_scene(item, case):\n    if item.name == 'test_plain':\n        return {{'skip': True}}\n"
        ),
    );
    let o = n.scenerun(&["plan"]);
    assert_eq!(code(&o), 4, "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("8 of 9 pytest nodes covered"), "{err}");
    assert!(
        err.contains("uncovered: tests/test_scenes.py::test_plain"),
        "{err}"
    );

    // Excluded with a reason, it is named and the plan goes on.
    let m = MANIFEST.replace(
        "collect tests {suite_args}",
        "collect tests {suite_args} --exclude 'tests/test_scenes.py::test_plain=runs on the nightly job'",
    );
    n.suite.manifest(&m);
    let o = n.scenerun(&["plan", "-v"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
}

#[test]
fn a_poisoned_runtime_reruns_the_skipped_node_in_a_fresh_process() {
    let tests = format!(
        "{TESTS}\ndef test_a_poisoner(poison):\n    raise RuntimeError('run failed with code 507899')\n\nclass TestVictim:\n    def test_after(self, worker):\n        pass\n"
    );
    let n = Nodes::new(&tests);
    let verdicts = n.pytest_verdicts();
    // Plain pytest (no dispatcher to rerun it): the victim is skipped in the same process.
    assert!(
        std::fs::read_to_string(&verdicts).unwrap().contains(
            r#"{"nodeid": "tests/test_scenes.py::TestVictim::test_after", "verdict": "skipped""#
        ),
        "the suite poisons its runtime when run plainly"
    );
    assert_eq!(code(&n.scenerun(&["warm"])), 0);
    let o = n.scenerun(&[
        "device",
        "--no-lock",
        "--devices",
        "0",
        "-k",
        "test_a_poisoner",
        "-k",
        "TestVictim.*",
    ]);
    let r = report(&n.suite);
    let o2 = outcomes(&r);
    // Under scenerun the poison-skip is a restart, and the fresh process runs it.
    assert_eq!(o2["TestVictim.test_after"], "passed", "{}", show(&o));
    assert_eq!(o2["test_a_poisoner"], "failed", "{}", show(&o));
    let restarts: u64 = r["device"]["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["restarts"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(restarts, 1, "{r:#}");
}

#[test]
fn a_timeout_marker_cuts_its_scene_and_the_stop_signal_dump_reaches_the_log() {
    let tests = format!(
        "{TESTS}\nimport time\n\ndef wedged_in_here():\n    time.sleep(120)\n\n@pytest.mark.timeout(2)\ndef test_hangs():\n    wedged_in_here()\n"
    );
    let n = Nodes::new(&tests);
    assert_eq!(code(&n.scenerun(&["warm"])), 0);
    let o = n.scenerun(&["device", "--no-lock", "--devices", "0", "-k", "test_hangs"]);
    assert_eq!(code(&o), 1, "{}", show(&o));
    let r = report(&n.suite);
    let s = scene_in(&r, "test_hangs");
    assert_eq!(s["outcome"], "timed_out", "{s:#}");
    let message = s["message"].as_str().unwrap_or("");
    assert!(
        message.contains("timed out after 2.0s"),
        "the marker's limit, not the lane's: {s:#}"
    );
    // The suite's own SIGUSR1 handler dumped under pytest's capture, and the dump is in
    // the scene's output, not lost with the capture.
    let log = std::fs::read_to_string(s["log"].as_str().unwrap()).unwrap();
    assert!(log.contains("wedged_in_here"), "{log}");
}

const CPU_TESTS: &str = r#"import os
import pytest

def _ran(name):
    with open(os.environ["RAN_LOG"], "a") as f:
        f.write(name + "\n")

def test_cpu_pass():
    _ran("pass")

@pytest.mark.skip(reason="cpu skip")
def test_cpu_skip():
    pass

def test_cpu_fail():
    _ran("fail")
    assert False, "cpu broke"

def test_device(runtime):
    pass
"#;

const CPU_HOOK: &str = "\ndef pytest_scenerun_scene(item, case):\n    if item.name.startswith('test_cpu'):\n        return {'phase': 'warm'}\n";

#[test]
fn a_node_the_hook_calls_cpu_only_runs_in_warm_and_device_reports_its_verdict_without_the_lock() {
    let n = Nodes::new(CPU_TESTS);
    n.suite
        .write("conftest.py", &format!("{CONFTEST}{CPU_HOOK}"));
    let m = MANIFEST.replace(
        "lanes:",
        "lock:\n  submit: \"echo taken >> lock.log; TASK_DEVICE=0 sh -c {run}\"\n  device_env: TASK_DEVICE\nlanes:",
    );
    n.suite.manifest(&m);
    let ran_log = n.suite.path("ran.log");
    let ran = || std::fs::read_to_string(&ran_log).unwrap_or_default();
    let run = |args: &[&str]| {
        let mut c = n.suite.cmd(args);
        c.env("PATH", n.path_env())
            .env("RAN_LOG", &ran_log)
            .env_remove("PYTHONPATH");
        c.output().unwrap()
    };
    let verdicts = n.pytest_verdicts_with(&[("RAN_LOG", n.suite.path("plain.log"))]);

    let plan = run(&["plan", "--format", "json"]);
    assert_eq!(code(&plan), 0, "{}", show(&plan));
    let steps = stdout(&plan).matches(r#""kind": "test""#).count();
    assert_eq!(
        steps,
        3,
        "one test step per CPU-only node: {}",
        stdout(&plan)
    );

    let o = run(&["warm"]);
    assert_eq!(
        code(&o),
        0,
        "a failed test is a verdict, not a failed warm: {}",
        show(&o)
    );
    let mut lines: Vec<String> = ran().lines().map(str::to_string).collect();
    lines.sort();
    assert_eq!(lines, ["fail", "pass"], "each CPU test ran once in warm");
    assert!(
        !n.suite.path("lock.log").exists(),
        "warm never takes the lock"
    );

    // Only CPU nodes selected: their verdicts, no lock.
    let o = run(&["device", "-k", "test_cpu"]);
    assert_eq!(code(&o), 1, "the failed test fails the run: {}", show(&o));
    assert!(
        !n.suite.path("lock.log").exists(),
        "no device work, no lock: {}",
        show(&o)
    );
    assert!(
        stdout(&o).contains("3 test nodes: 1 passed, 1 skipped, 1 failed"),
        "{}",
        show(&o)
    );

    // The whole suite: the device node runs under one lock, the CPU nodes keep their
    // warm verdicts, node for node as plain pytest gives them.
    let o = run(&["device"]);
    assert_eq!(code(&o), 1, "{}", show(&o));
    assert_eq!(n.suite.read("lock.log").lines().count(), 1, "one lock");
    let r = report(&n.suite);
    let s = scene_in(&r, "test_cpu_fail");
    assert_eq!(s["outcome"], "failed", "{s:#}");
    assert!(
        s["message"].as_str().unwrap().contains("cpu broke"),
        "{s:#}"
    );
    let log = std::fs::read_to_string(s["log"].as_str().unwrap()).unwrap();
    assert!(
        log.contains("cpu broke"),
        "the scene's log is its warm step's: {log}"
    );
    assert_eq!(scene_in(&r, "test_cpu_skip")["outcome"], "skipped");
    assert_eq!(scene_in(&r, "test_device")["outcome"], "passed");
    let cmp = n.compare(&verdicts);
    assert!(stdout(&cmp).contains("0 differences"), "{}", show(&cmp));
    assert_eq!(ran().lines().count(), 2, "device ran no CPU test again");

    // Nothing changed: warm keeps the verdicts; an edited conftest runs them again.
    assert_eq!(code(&run(&["warm"])), 0);
    assert_eq!(
        ran().lines().count(),
        2,
        "an unchanged test is not run again"
    );
    n.suite
        .write("conftest.py", &format!("{CONFTEST}{CPU_HOOK}\n# edited\n"));
    assert_eq!(code(&run(&["warm"])), 0);
    assert_eq!(
        ran().lines().count(),
        4,
        "a test reads its conftest: {}",
        ran()
    );
}

/// A hook that returns garbage stops `collect` with exit 4 naming the node and what is
/// wrong; a class with the scene methods but no `CASES` is a node of its own and runs as
/// plain pytest runs it.
#[test]
fn a_hook_returning_garbage_is_exit_4_naming_the_node_and_a_class_without_cases_still_runs() {
    let tests = format!(
        "{TESTS}\nclass TestNoCases:\n    def generate_args(self, params):\n        return {{}}\n\n    def test_run(self):\n        pass\n"
    );
    for (ret, says) in [
        ("['lane']", "returned a list for tests/test_scenes.py::test_plain, not a dict or None"),
        ("{'devices': 'two'}", "pytest_scenerun_scene for tests/test_scenes.py::test_plain: devices = 'two' is not valid"),
        ("{'phase': 'later'}", "pytest_scenerun_scene for tests/test_scenes.py::test_plain: phase must be 'device' or 'warm'"),
    ] {
        let n = Nodes::new(&tests);
        n.suite.write(
            "conftest.py",
            &format!(
                "{CONFTEST}\ndef pytest_scenerun_scene(item, case):\n    if item.name == 'test_plain':\n        return {ret}\n"
            ),
        );
        let o = n.scenerun(&["plan"]);
        assert_eq!(code(&o), 4, "{ret}: {}", show(&o));
        assert!(stderr(&o).contains(says), "{ret}: {}", show(&o));
    }

    let n = Nodes::new(&tests);
    let verdicts = n.pytest_verdicts();
    assert_eq!(code(&n.scenerun(&["warm"])), 0);
    let o = n.scenerun(&["device", "--no-lock", "--devices", "0"]);
    assert_eq!(code(&o), 1, "{}", show(&o));
    let r = report(&n.suite);
    assert_eq!(
        scene_in(&r, "TestNoCases.test_run")["outcome"],
        "passed",
        "{r:#}"
    );
    let cmp = n.compare(&verdicts);
    assert!(
        stdout(&cmp).contains("; 10 scenerun nodes; 0 differences"),
        "{}",
        show(&cmp)
    );
}
