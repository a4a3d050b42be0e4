//! Every ending of `device` has its report and its exit code: unusable grants, two
//! runs in one checkout, lock tools that run `{run}` twice or never return, an
//! interrupted `--no-lock` run, an artifact that vanished during the phase, exits 4, 5
//! and 6 (docs/device.md).

use std::fs;
use std::process::Stdio;

use super::*;
use crate::common::*;

/// A lock command that hands over `$GRANT` in TASK_DEVICE and runs `{run}` `$TIMES`
/// times, then sleeps `$HANG` seconds.
fn fake_lock(s: &Suite) {
    s.script(
        "fake-lock.sh",
        "#!/bin/sh\nn=0\nwhile [ $n -lt ${TIMES:-1} ]; do TASK_DEVICE=\"$GRANT\" sh -c \"$2\"; st=$?; n=$((n+1)); done\n\
         [ -n \"$HANG\" ] && sleep \"$HANG\"\nexit $st\n",
    );
    set_submit(s, "./fake-lock.sh --run {run}");
}

/// `scenerun ARGS` as Suite::cmd and Pool::apply set it up, started in the background.
fn spawn_in(s: &Suite, pool: &Pool, args: &[&str]) -> std::process::Child {
    let mut c = scenerun_process();
    c.current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .args(args)
        .env("TASK_SUBMIT_DEVICES", "0-3")
        .env("TASK_SUBMIT_POOL", pool.path("pool"))
        .env("TASK_SUBMIT_LOG", pool.log())
        .env_remove("TASK_DEVICE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c.spawn().expect("spawn scenerun")
}

fn junit_text(s: &Suite) -> String {
    fs::read_to_string(s.path("build/scenerun/junit.xml")).expect("junit.xml written")
}

#[test]
fn unusable_grants_are_exit_3_before_any_step() {
    let s = basic_suite(1);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    fake_lock(&s);
    let cases = [
        (Some("0,0"), "more than once"),
        (Some("00,0"), "more than once"),
        (Some("garbage"), "not a device id"),
        (Some("a,b"), "not a device id"),
        (Some("3-1"), "not a valid range"),
        (None, "not set"),
    ];
    for (grant, says) in cases {
        let mut c = s.cmd(&["device"]);
        pool.apply(&mut c);
        match grant {
            Some(g) => c.env("GRANT", g),
            None => c.env_remove("GRANT"),
        };
        let o = c.output().unwrap();
        let err = stderr(&o);
        assert_eq!(code(&o), 3, "grant {grant:?}: {}", show(&o));
        assert!(
            err.contains("lock.device_env") && err.contains("TASK_DEVICE") && err.contains(says),
            "grant {grant:?}: the message names the key, the variable and why:\n{err}"
        );
        if let Some(g) = grant {
            assert!(err.contains(g), "grant {g:?}: the value is shown:\n{err}");
        }
        assert_eq!(s.count("logs/device.log"), 0, "grant {grant:?}: a step ran");
        let r = report(&s);
        assert_eq!(r["exit_code"], 3);
        assert_eq!(scene_in(&r, "s0")["infra"], "bad_device_ids", "{r:#}");
        assert!(junit_text(&s).contains("type=\"bad_device_ids\""));
    }
    // Fewer ids than device_count.
    lock_option(&s, "device_count: 2");
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c).env("GRANT", "3");
    let o = c.output().unwrap();
    assert_eq!(code(&o), 3, "{}", show(&o));
    assert!(stderr(&o).contains("needs 2"), "{}", show(&o));
    assert_eq!(s.count("logs/device.log"), 0);
    // A good grant still works.
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c).env("GRANT", "4, 6");
    let o = c.output().unwrap();
    expect_code(&o, 0);
    // --no-lock uses the same rules: a usage error there.
    let o = run_in(&s, &pool, &["device", "--no-lock", "--devices", "0,00"]);
    expect_code(&o, 4);
    assert!(stderr(&o).contains("more than once"), "{}", show(&o));
}

/// A scene whose device step waits for `release` (after touching `started`).
fn waiting_suite() -> Suite {
    let s = suite_with(
        "  - name: w\n    device:\n      run: \"./wait.sh\"\n  - name: q\n    device:\n      run: \"true\"\n",
    );
    s.script(
        "wait.sh",
        "#!/bin/sh\necho run >> logs/wait.log\ntouch started\nwhile [ ! -e release ]; do sleep 0.05; done\n",
    );
    s
}

#[test]
fn two_device_runs_in_one_checkout_never_mix() {
    let s = waiting_suite();
    let pool = Pool::new("0-3");
    let mut first = spawn_in(&s, &pool, &["device", "--no-lock", "--devices", "0-1"]);
    wait_for("the first run's step", || s.path("started").exists());
    // Same report dir: refused before it writes anything.
    let o = run_in(&s, &pool, &["device", "--no-lock", "--devices", "2-3"]);
    expect_code(&o, 3);
    assert!(
        stderr(&o).contains("another `scenerun device`") && stderr(&o).contains("--report-dir"),
        "{}",
        show(&o)
    );
    assert!(
        !s.path("build/scenerun/report.json").exists(),
        "the refused run wrote a report"
    );
    // Its own report dir: runs side by side with its own plan and results.
    let o = run_in(
        &s,
        &pool,
        &[
            "device",
            "-k",
            "q",
            "--no-lock",
            "--devices",
            "2-3",
            "--report-dir",
            "other",
        ],
    );
    expect_code(&o, 0);
    let other = json_file(&s.path("other/report.json"));
    assert_eq!(outcomes(&other).len(), 1, "{other:#}");
    fs::write(s.path("release"), "").unwrap();
    let st = wait_bounded(&mut first, Duration::from_secs(60)).expect("first run ended");
    assert_eq!(st.code(), Some(0));
    let r = report(&s);
    assert_eq!(r["exit_code"], 0);
    assert_eq!(outcomes(&r).len(), 2, "the first run's own report: {r:#}");
    assert_eq!(s.count("logs/wait.log"), 1);
    // Nothing of either invocation is left behind.
    let runs = fs::read_dir(s.path("build/scenerun/device/runs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(runs, 0, "run directories left");
}

#[test]
fn a_lock_tool_running_the_inner_twice_runs_the_steps_once() {
    let s = suite_with("  - name: f\n    device:\n      run: \"./fail.sh\"\n");
    s.script("fail.sh", "#!/bin/sh\necho ran >> logs/fail.log\nexit 1\n");
    fake_lock(&s);
    let pool = Pool::new("0-3");
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c).env("GRANT", "0").env("TIMES", "2");
    let o = c.output().unwrap();
    // The second run's exit code follows the first run's results: the failure shows.
    expect_code(&o, 1);
    assert!(stderr(&o).contains("more than once"), "{}", show(&o));
    assert_eq!(s.count("logs/fail.log"), 1, "the step ran twice");
    assert_eq!(outcomes(&report(&s))["f"], "failed");
}

#[test]
fn a_lock_tool_that_never_returns_is_killed_after_release_timeout() {
    let s = suite_with("  - name: p\n    device:\n      run: \"true\"\n");
    fake_lock(&s);
    lock_option(&s, "release_timeout: 1s");
    let pool = Pool::new("0-3");
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c).env("GRANT", "0").env("HANG", "300.71");
    let o = c.output().unwrap();
    expect_code(&o, 0);
    assert!(stderr(&o).contains("had not returned"), "{}", show(&o));
    assert_eq!(outcomes(&report(&s))["p"], "passed");
    assert!(
        wait_until(Duration::from_secs(10), || !procs_with("300.71")),
        "the hanging lock command was not killed"
    );
}

/// Some live process has `marker` in its command line.
fn procs_with(marker: &str) -> bool {
    fs::read_dir("/proc").unwrap().flatten().any(|e| {
        fs::read(e.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains(marker))
            .unwrap_or(false)
    })
}

#[test]
fn interrupted_no_lock_run_exits_2_with_a_report() {
    let s = waiting_suite();
    lock_option(&s, "grace: 1s");
    let pool = Pool::new("0-3");
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let _ = fs::remove_file(s.path("started"));
        let mut child = spawn_in(&s, &pool, &["device", "--no-lock", "--devices", "0"]);
        wait_for("the step", || s.path("started").exists());
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = wait_bounded(&mut child, Duration::from_secs(60)).expect("ended");
        assert_eq!(st.code(), Some(2), "signal {sig}");
        let r = report(&s);
        assert_eq!(r["exit_code"], 2);
        assert_eq!(scene_in(&r, "w")["infra"], "interrupted", "{r:#}");
        assert!(junit_text(&s).contains("type=\"interrupted\""));
    }
}

#[test]
fn an_artifact_vanishing_during_the_phase_is_exit_3() {
    let s = basic_suite(2);
    // s0's device step removes its fixture (as a `cache clean` meanwhile would) and fails.
    s.script(
        "vanish.sh",
        "#!/bin/sh\nrm -rf \"$1\"/*\necho 'input.txt: No such file or directory'\nexit 1\n",
    );
    edit_manifest(
        &s,
        "run: \"./device.sh {kernels} {fixture} {golden} {devices}\"\n",
        "run: \"./vanish.sh {fixture}\"\n",
    );
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    // Where device steps see the entries through a read-only mount (as root here), a
    // step cannot remove them: the view is refused for this run (debug builds), as on a
    // machine without mount namespaces, so the step stands in for a `cache clean`.
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c).env("SCENERUN_DEBUG_NO_NAMESPACE", "1");
    let o = c.output().expect("run scenerun");
    expect_code(&o, 3);
    let r = report(&s);
    assert_eq!(r["exit_code"], 3);
    assert_eq!(scene_in(&r, "s0")["infra"], "artifact_missing", "{r:#}");
    assert_eq!(outcomes(&r)["s1"], "passed");
    assert!(junit_text(&s).contains("type=\"artifact_missing\""));
}

#[test]
fn every_ending_leaves_a_current_report_or_none() {
    let s = basic_suite(2);
    let pool = Pool::new("0-3");
    // 6: not warm: a report listing what is missing, junit errors.
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 6);
    let r = report(&s);
    assert_eq!(r["exit_code"], 6);
    assert_eq!(scene_in(&r, "s0")["infra"], "not_warm", "{r:#}");
    assert!(scene_in(&r, "s0")["message"]
        .as_str()
        .unwrap_or("")
        .contains("not warm"));
    let junit = junit_text(&s);
    assert!(
        junit.contains("type=\"not_warm\"") && !junit.contains("<skipped"),
        "{junit}"
    );
    // 5 and 4: the earlier report is removed.
    let o = run_in(&s, &pool, &["device", "-k", "no-such-scene"]);
    expect_code(&o, 5);
    assert!(!s.path("build/scenerun/report.json").exists());
    assert!(!s.path("build/scenerun/junit.xml").exists());
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    assert!(s.path("build/scenerun/report.json").exists());
    let text = s.read("scenes.yaml");
    s.manifest(&text.replace("version: 1", "version: 1\nbogus_key: 1"));
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 4);
    assert!(!s.path("build/scenerun/report.json").exists());
    s.manifest(&text);
    // 3, queue timeout: errors typed lock_failed, the queue wait measured.
    set_submit(
        &s,
        &format!("{TASK_SUBMIT} --timeout 0.5 --device 0 --run {{run}}"),
    );
    let mut holder = pool.spawn(&["--device", "0", "--run", "touch held; sleep 300.72"]);
    wait_for("the holder", || pool.path("held").exists());
    let o = run_in(&s, &pool, &["device"]);
    let _ = std::process::Command::new("kill")
        .arg(holder.id().to_string())
        .status();
    let _ = wait_bounded(&mut holder, Duration::from_secs(30));
    expect_code(&o, 3);
    let r = report(&s);
    assert!(
        num(&r["lock"]["queue_wait_secs"], "queue wait") >= 0.4,
        "{r:#}"
    );
    let junit = junit_text(&s);
    assert!(
        junit.contains("type=\"lock_failed\"") && !junit.contains("<skipped"),
        "{junit}"
    );
}
