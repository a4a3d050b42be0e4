//! `stop_signal` / `stop_wait` (docs/lanes.md, docs/device.md): on a timeout, a hang or
//! a cancel the step's or lane's process group gets the stop signal first, its output is
//! kept for `stop_wait`, then SIGTERM, the grace, SIGKILL; what it printed after the
//! signal (a stack dump) is in the scene's log and under the report's message. Real
//! shells and a real pytest with `faulthandler`, as a device runtime's conftest sets it.

use super::pytest::venv_python;
use super::*;

/// A device step that prints a "stack dump" on SIGUSR1 and a line on SIGTERM, and
/// otherwise never ends. Run by `sh -c`, which itself dies of SIGUSR1.
const DUMPING_STEP: &str = r#"#!/bin/bash
trap 'echo "stack of $1: frame hang_here"; echo "stack of $1: frame main"' USR1
trap 'echo "got SIGTERM"; exit 143' TERM
echo "started $1"
while :; do sleep 0.05; done
"#;

fn dumping_suite(device_keys: &str) -> Suite {
    let s = Suite::with_logs();
    s.script("step.sh", DUMPING_STEP);
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nscenes:\n  - name: a\n    device:\n      run: \"./step.sh {{scene}}\"\n{device_keys}"
    ));
    s
}

/// The line numbers of `a` and then `b` in `text`, both present.
fn order(text: &str, a: &str, b: &str) -> (usize, usize) {
    let at = |needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in:\n{text}"))
    };
    (at(a), at(b))
}

#[test]
fn a_timed_out_step_gets_its_stop_signal_first_and_its_dump_is_reported() {
    let s = dumping_suite("      timeout: 1s\n      stop_signal: USR1\n      stop_wait: 1s\n");
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    let a = scene_in(&r, "a");
    assert_eq!(a["outcome"], "timed_out", "{a:#}");
    let msg = message(&r, "a");
    assert!(
        msg.contains("timed out after 1.0s") && msg.contains("SIGUSR1 was sent first"),
        "{msg}"
    );
    let tail = a["log_tail"].as_str().unwrap_or("");
    assert!(
        tail.contains("--- output after SIGUSR1 ---")
            && tail.contains("stack of a: frame hang_here"),
        "{tail}"
    );
    // The log has the dump, and SIGTERM came only after it.
    let log = s.read("build/scenerun/logs/a/device.log");
    let (dump, term) = order(&log, "stack of a: frame main", "got SIGTERM");
    assert!(dump < term, "{log}");
    // Without a stop signal the same step is never asked for a dump.
    let s = dumping_suite("      timeout: 1s\n");
    expect_code(&no_lock(&s, "0"), 1);
    let log = s.read("build/scenerun/logs/a/device.log");
    assert!(!log.contains("stack of a"), "{log}");
    assert!(log.contains("got SIGTERM"), "{log}");
}

#[test]
fn a_cancel_sends_the_stop_signal_first_too() {
    let s = dumping_suite("      stop_signal: SIGUSR1\n      stop_wait: 0.5s\n");
    let mut child = scenerun_process()
        .current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .args(["device", "--no-lock", "--devices", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let log = s.path("build/scenerun/logs/a/device.log");
    assert!(wait_until(std::time::Duration::from_secs(30), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.contains("started a"))
    }));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let st = wait_bounded(&mut child, std::time::Duration::from_secs(60)).expect("it ends");
    assert_eq!(st.code(), Some(2));
    let r = report(&s);
    let a = scene_in(&r, "a");
    assert_eq!(a["outcome"], "interrupted", "{a:#}");
    assert!(
        a["log_tail"]
            .as_str()
            .unwrap_or("")
            .contains("stack of a: frame hang_here"),
        "{a:#}"
    );
    let text = s.read("build/scenerun/logs/a/device.log");
    let (dump, term) = order(&text, "stack of a: frame main", "got SIGTERM");
    assert!(dump < term, "{text}");
}

/// A pytest lane whose conftest registers `faulthandler` on SIGUSR1, as a device
/// runtime's suite does for hang diagnosis: the hanging test's stack is in the report.
/// (`-s`: faulthandler writes to the process's stderr, which pytest's capture would
/// otherwise hold.)
#[test]
fn a_hanging_pytest_lane_dumps_its_stacks_before_it_is_killed() {
    let py = venv_python();
    let s = Suite::with_logs();
    s.write(
        "tests/conftest.py",
        "import faulthandler, signal\nfaulthandler.register(signal.SIGUSR1, all_threads=True)\n",
    );
    s.write(
        "tests/test_rt.py",
        "import time\n\ndef test_fine():\n    pass\n\ndef test_hang_in_runtime():\n    while True:\n        time.sleep(0.05)\n",
    );
    let lane_scene = |name: &str, arg: &str, timeout: &str| {
        format!("  - name: {name}\n    device:\n      lane: py\n      args: [\"{arg}\"]\n{timeout}")
    };
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  py:\n    run: \"{} -m pytest -p no:cacheprovider -q -s {{args}} --report-log {{results}}\"\n    stop_signal: USR1\n    stop_wait: 1s\nscenes:\n{}{}",
        py.display(),
        lane_scene("fine", "tests/test_rt.py::test_fine", ""),
        lane_scene("hang", "tests/test_rt.py::test_hang_in_runtime", "      timeout: 3s\n"),
    ));
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[("fine", "passed"), ("hang", "timed_out")]),
        "{}",
        show(&o)
    );
    let hang = scene_in(&r, "hang");
    let tail = hang["log_tail"].as_str().unwrap_or("");
    assert!(
        tail.contains("most recent call first") && tail.contains("test_hang_in_runtime"),
        "the faulthandler dump under the scene:\n{hang:#}"
    );
    assert!(
        message(&r, "hang").contains("SIGUSR1 was sent first"),
        "{hang:#}"
    );
    let lane_log = s.read("build/scenerun/logs/lanes/py.0.log");
    assert!(lane_log.contains("test_hang_in_runtime"), "{lane_log}");
}

#[test]
fn stop_keys_are_validated_with_their_lines() {
    let s = lane_suite(
        "    stop_signal: KILL\n    stop_wait: 2s\n",
        "  - name: a\n    device:\n      run: \"true\"\n      stop_wait: 1s\n  - name: b\n    device:\n      lane: l\n      stop_signal: USR1\n  - name: c\n    device:\n      run: \"true\"\n      stop_signal: USR7\n      stop_wait: soon\n",
    );
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    let err = stderr(&o);
    for want in [
        "scenes.yaml:9:5:",
        "lanes.l.stop_signal: `KILL` is not a signal a stop can send",
        "scenes.yaml:15:7:",
        "scenes[0].device.stop_wait: `stop_wait` is the time after `stop_signal`",
        "scenes.yaml:19:7:",
        "scenes[1].device.stop_signal: a lane scene runs in its lane's process",
        "scenes.yaml:23:7:",
        "scenes[2].device.stop_signal: `USR7` is not a signal",
        "scenes.yaml:24:7: scenes[2].device.stop_wait:",
    ] {
        assert!(err.contains(want), "missing `{want}` in:\n{err}");
    }
    assert!(err.contains("has 5 errors"), "{err}");
}
