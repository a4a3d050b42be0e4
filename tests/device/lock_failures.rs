//! A lock command that is missing, fails, times out, kills the run, never runs the
//! inner command or hands over no ids: exit 3 with a report.

use std::fs;
use std::process::{Output, Stdio};

use serde_json::Value;

use super::*;
use crate::common::*;

// ------------------------------------------------------------------ lock command failures

/// A warmed one-scene suite whose lock command is `submit`; runs `device`, expects 3.
fn lock_fails(pool: &Pool, submit: &str) -> (Suite, Output, Value) {
    let s = basic_suite(1);
    set_submit(&s, submit);
    warm(&s, pool, &[]);
    let o = run_in(&s, pool, &["device"]);
    expect_code(&o, 3);
    assert_eq!(s.count("logs/device.log"), 0, "a device step ran");
    let r = report(&s);
    assert_eq!(r["exit_code"], 3, "{r:#}");
    assert_eq!(r["scenes"].as_array().map(Vec::len), Some(1), "{r:#}");
    assert_ne!(scene_in(&r, "s0")["outcome"], "passed");
    assert!(r["lock"]["command"].as_str().is_some(), "{r:#}");
    (s, o, r)
}

#[test]
fn lock_command_missing_exits_3() {
    let pool = Pool::new("0-3");
    let (_s, o, r) = lock_fails(&pool, "no-such-tool --run {run}");
    let err = stderr(&o);
    assert!(err.contains("no-such-tool"), "{err}");
    assert!(err.contains("not found"), "the cause is shown:\n{err}");
    assert!(
        r["error"].as_str().unwrap_or("").contains("not found"),
        "{r:#}"
    );
}

#[test]
fn lock_command_failing_before_the_run_exits_3() {
    let pool = Pool::new("0-3");
    let (_s, o, r) = lock_fails(&pool, "sh -c 'echo no cards for you >&2; exit 9' {run}");
    let err = stderr(&o);
    assert!(
        err.contains("no cards for you"),
        "the lock output tail is shown:\n{err}"
    );
    assert_eq!(r["lock"]["exit_code"], 9, "{r:#}");
    assert!(
        r["lock"]["output_tail"]
            .as_str()
            .unwrap_or("")
            .contains("no cards for you"),
        "{r:#}"
    );
}

#[test]
fn lock_command_false_exits_3() {
    let pool = Pool::new("0-3");
    let (_s, _o, r) = lock_fails(&pool, "false {run}");
    assert_eq!(r["lock"]["exit_code"], 1, "{r:#}");
}

#[test]
fn lock_queue_timeout_exits_3() {
    let pool = Pool::new("0");
    let stop = pool.path("stop");
    // Another job holds the only id until told to stop.
    let wait_stop = format!("while [ ! -e '{}' ]; do sleep 0.1; done", stop.display());
    let mut holder = pool
        .command(&["--device-num", "1", "--run", &wait_stop])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the holder");
    wait_for("the holder to acquire", || pool.acquisitions() == 1);

    let submit = format!(
        "{TASK_SUBMIT} --timeout 1 --device auto --device-num {{device_count}} --run {{run}}"
    );
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (_s, o, r) = lock_fails(&pool, &submit);
        (o, r)
    }));
    fs::write(&stop, "").unwrap();
    let status = holder.wait().unwrap();
    let (o, r) = result.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert!(status.success());
    let err = stderr(&o);
    assert!(
        err.contains("timed out"),
        "the lock's own message is shown:\n{err}"
    );
    assert_eq!(r["lock"]["exit_code"], 75, "{r:#}");
    assert_eq!(pool.count("timeout"), 1);
    assert_eq!(pool.acquisitions(), 1, "only the holder acquired");
}

#[test]
fn lock_max_time_killing_the_run_exits_3() {
    let s = suite_with(
        "  - name: slow\n    device:\n      run: \"./slow.sh\"\n\
         \x20 - name: later\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n",
    );
    recording_script(&s);
    s.script(
        "slow.sh",
        "#!/bin/sh\nsleep 30 &\necho $! > logs/slow.pid\nwait\necho survived >> logs/slow.log\n",
    );
    // The lock tool must kill the run while slow.sh runs: under qemu-user the inner run
    // takes more than a second to start its first step.
    let max_time = if emulated().is_some() { 5 } else { 1 };
    edit_manifest(&s, "--max-time 120", &format!("--max-time {max_time}"));
    let pool = Pool::new("0");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 3);
    assert_eq!(pool.count("kill"), 1, "{:?}", pool.events());
    let err = stderr(&o);
    assert!(
        err.contains("max-time"),
        "the lock output tail is shown:\n{err}"
    );
    let r = report(&s);
    assert_eq!(r["exit_code"], 3, "{r:#}");
    assert_eq!(r["lock"]["exit_code"], 124, "{r:#}");
    assert!(outcomes(&r).values().all(|o| o != "passed"), "{r:#}");
    // The device step does not outlive the lock.
    let pid = s.read("logs/slow.pid");
    let pid = pid.trim();
    assert!(!pid.is_empty(), "slow.sh did not start");
    wait_for("the killed scene's child to die", || !pid_alive(pid));
    assert_eq!(s.read("logs/slow.log"), "");
}

#[test]
fn lock_command_that_never_runs_the_inner_command_exits_3() {
    let pool = Pool::new("0-3");
    let (_s, o, r) = lock_fails(&pool, "true {run}");
    let err = stderr(&o);
    assert!(err.contains("without running"), "{err}");
    assert_eq!(r["lock"]["exit_code"], 0, "{r:#}");
}

#[test]
fn lock_handing_over_no_ids_exits_3() {
    let pool = Pool::new("0-3");
    let (s, o, r) = lock_fails(&pool, "env -u TASK_DEVICE sh -c {run}");
    let err = stderr(&o);
    assert!(err.contains("TASK_DEVICE"), "the cause is named:\n{err}");
    assert!(
        r["error"].as_str().unwrap_or("").contains("TASK_DEVICE"),
        "{r:#}"
    );
    assert_eq!(s.count("logs/device.log"), 0);
}
