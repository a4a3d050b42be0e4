//! The lock is taken once per device phase, only when everything is warm, with
//! nothing built inside it; two jobs on one pool queue.

use std::process::Output;

use super::*;
use crate::common::*;

// ------------------------------------------------------------------ the lock, once

#[test]
fn one_acquisition_for_several_scenes() {
    let s = basic_suite(4);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    assert_eq!(pool.acquisitions(), 0, "warm never takes the lock");

    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    assert_eq!(pool.acquisitions(), 1, "{:?}", pool.events());
    assert_eq!(pool.count("release"), 1);
    assert_eq!(pool.count("request"), 1);
    assert_eq!(s.count("logs/device.log"), 4, "each scene ran once");
    let r = report(&s);
    assert_eq!(r["exit_code"], 0);
    assert!(outcomes(&r).values().all(|o| o == "passed"), "{r:#}");
    assert_eq!(outcomes(&r).len(), 4);

    // A second device run is a second (and only a second) acquisition.
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    assert_eq!(pool.acquisitions(), 2);
}

#[test]
fn device_before_warm_exits_6_without_the_lock() {
    let s = basic_suite(2);
    let pool = Pool::new("0-3");
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 6);
    let err = stderr(&o);
    // The summary lists each scene's missing steps on its line.
    for what in [
        "s0: compile k, fixture, golden",
        "s1: compile k, fixture, golden",
    ] {
        assert!(
            err.contains(what),
            "`{what}` is not listed as missing:\n{err}"
        );
    }
    assert!(err.contains("scenerun warm"), "hint missing:\n{err}");
    assert_eq!(pool.count("request"), 0, "the lock command was called");
    assert_eq!(s.count("logs/device.log"), 0);
    assert_eq!(s.count("logs/cc.log"), 0, "device compiled");
    assert_eq!(s.count("logs/gen.log"), 0, "device generated a fixture");
}

#[test]
fn device_after_partial_warm_lists_only_what_is_missing() {
    let s = basic_suite(2);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &["-k", "s0"]);
    assert_eq!(s.count("logs/gen.log"), 1, "only s0 was warmed");
    let (cc, gen, golden) = (
        s.count("logs/cc.log"),
        s.count("logs/gen.log"),
        s.count("logs/golden.log"),
    );

    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 6);
    let err = stderr(&o);
    assert!(err.contains("s1: fixture, golden\n"), "{err}");
    // s1's kernel is the same step as s0's (same key), so it is warm.
    assert!(!err.contains("compile"), "{err}");
    assert!(
        !err.contains("s0:"),
        "s0 is warm and must not be listed:\n{err}"
    );
    assert_eq!(pool.count("request"), 0);
    assert_eq!(s.count("logs/device.log"), 0, "no scene ran, not even s0");
    assert_eq!(
        (
            s.count("logs/cc.log"),
            s.count("logs/gen.log"),
            s.count("logs/golden.log")
        ),
        (cc, gen, golden),
        "device built something"
    );

    // Selecting only the warm scene works.
    let o = run_in(&s, &pool, &["device", "-k", "s0"]);
    expect_code(&o, 0);
    assert_eq!(pool.acquisitions(), 1);
}

#[test]
fn nothing_is_built_inside_the_lock() {
    let s = basic_suite(3);
    let pool = Pool::new("0-3");
    // Second proof: every build tool refuses to run inside the lock ($TASK_DEVICE set),
    // so a build in the inner run would fail its scene, not only bump a counter.
    let guard = format!(
        "if [ -n \"${{TASK_DEVICE:-}}\" ]; then echo \"$0 ran inside the lock\" >> '{}'; exit 97; fi\n",
        s.path("logs/inside.log").display()
    );
    for script in ["bin/cc-log", "gen.sh", "golden.sh"] {
        let text = s
            .read(script)
            .replacen("#!/bin/sh\n", &format!("#!/bin/sh\n{guard}"), 1);
        s.script(script, &text);
    }
    s.script(
        "ident.sh",
        "#!/bin/sh\necho \"identity TASK_DEVICE=${TASK_DEVICE:-}\" >> logs/ident.log\nexec cc --version\n",
    );
    edit_manifest(&s, "identity: \"cc --version\"", "identity: \"./ident.sh\"");

    warm(&s, &pool, &[]);
    let before = (
        s.count("logs/cc.log"),
        s.count("logs/gen.log"),
        s.count("logs/golden.log"),
    );
    assert!(before.0 > 0 && before.1 == 3 && before.2 == 3, "{before:?}");

    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    assert_eq!(pool.acquisitions(), 1);
    assert_eq!(s.count("logs/device.log"), 3);
    let after = (
        s.count("logs/cc.log"),
        s.count("logs/gen.log"),
        s.count("logs/golden.log"),
    );
    assert_eq!(
        after, before,
        "device compiled, generated or computed a golden"
    );
    assert_eq!(
        s.read("logs/inside.log"),
        "",
        "a build tool ran inside the lock"
    );
    for line in s.read("logs/ident.log").lines() {
        assert_eq!(
            line, "identity TASK_DEVICE=",
            "identity ran inside the lock"
        );
    }
}

/// The inner run does not take a live `scenerun device` for dead, however it was
/// started: here its parent waits 0.3 s between fork and exec. A process's start time is
/// its fork; under qemu-user a process reading its own `/proc/<pid>/stat` gets qemu's
/// own start instead, so a check by pid and start time took every outer for dead there
/// at once ("scenerun device (pid N) died", every step killed; docs/install.md).
#[test]
fn the_inner_never_takes_a_live_outer_for_dead() {
    use std::os::unix::process::CommandExt;
    let s = suite_with(
        "  - name: a\n    device:\n      run: \"./slow.sh a\"\n  - name: b\n    device:\n      run: \"./slow.sh b\"\n",
    );
    // Each step runs for ten of the watcher's looks at least.
    s.script(
        "slow.sh",
        "#!/bin/sh\nsleep 0.5\necho \"$1\" >> logs/dev.log\n",
    );
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    let mut std = scenerun_process();
    std.current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .arg("device");
    // SAFETY: the child only sleeps before exec (nanosleep is async-signal-safe).
    unsafe {
        std.pre_exec(|| {
            std::thread::sleep(Duration::from_millis(300));
            Ok(())
        });
    }
    let mut c = assert_cmd::Command::from_std(std);
    pool.apply(&mut c);
    let o = c.output().expect("run scenerun");
    assert!(!stderr(&o).contains("died"), "{}", show(&o));
    expect_code(&o, 0);
    assert_eq!(s.count("logs/dev.log"), 2, "each step ran to its end");
    assert_eq!(pool.acquisitions(), 1);
}

// ------------------------------------------------------------------ two jobs, one pool

#[test]
fn two_jobs_on_one_pool_queue_instead_of_overlapping() {
    let pool = Pool::new("0-1");
    let log = pool.log();
    let suites: Vec<Suite> = (0..2).map(|_| basic_suite(1)).collect();
    for s in &suites {
        lock_option(s, "device_count: 2");
        // Hold the lock until the other job has asked for it, so it must queue.
        let text = s.read("device.sh").replacen(
            "#!/bin/sh\n",
            &format!(
                "#!/bin/sh\nn=0\nwhile [ \"$(grep -c '^request ' '{}')\" -lt 2 ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done\n",
                log.display()
            ),
            1,
        );
        s.script("device.sh", &text);
        warm(s, &pool, &[]);
    }
    let outs: Vec<Output> = std::thread::scope(|scope| {
        let handles: Vec<_> = suites
            .iter()
            .map(|s| scope.spawn(|| run_in(s, &pool, &["device"])))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in &outs {
        expect_code(o, 0);
    }
    let ev = pool.events();
    let of = |kind: &str| -> Vec<&Event> { ev.iter().filter(|e| e.kind == kind).collect() };
    assert_eq!(of("acquire").len(), 2, "{ev:?}");
    assert_eq!(of("release").len(), 2, "{ev:?}");
    let mut acq = of("acquire");
    acq.sort_by(|a, b| a.t().total_cmp(&b.t()));
    for a in &acq {
        assert_eq!(a.get("devices"), "0,1");
    }
    let (first, second) = (acq[0], acq[1]);
    let release_of = |pid: &str| {
        *of("release")
            .iter()
            .find(|e| e.get("pid") == pid)
            .expect("every acquire has a release")
    };
    let request_of = |pid: &str| {
        *of("request")
            .iter()
            .find(|e| e.get("pid") == pid)
            .expect("every acquire has a request")
    };
    let first_release = release_of(first.get("pid"));
    assert!(
        first_release.t() <= second.t(),
        "the two jobs held the pool at once: {ev:?}"
    );
    assert!(
        request_of(second.get("pid")).t() < first_release.t(),
        "the second job did not queue: {ev:?}"
    );
    for s in &suites {
        assert_eq!(report(s)["exit_code"], 0);
        assert_eq!(s.count("logs/device.log"), 1);
    }
}
