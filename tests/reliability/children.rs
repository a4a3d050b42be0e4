//! Stubborn children (docs/guarantees.md row 7): killed after the grace, never waited
//! for.

use std::fs;

use super::*;
use crate::common::*;

#[test]
fn stubborn_children_are_killed_and_never_waited_for() {
    const T: &str = "stubborn_children";
    let mut faults = Faults::new(T);
    let mut cases = 0;
    let s = Suite::with_logs();
    s.script("stubborn.sh", "#!/bin/sh\ntrap '' TERM\necho started > logs/stubborn.started\nsleep 300.51\nsleep 300.51\n");
    s.script(
        "bg.sh",
        "#!/bin/sh\nsleep 300.52 &\n( trap '' TERM; sleep 300.52 ) &\necho x > \"$1/v.txt\"\n",
    );
    s.script("escape.sh", "#!/bin/sh\nsetsid sleep 300.53 > /dev/null 2>&1 &\necho $! > logs/escaped.pid\necho x > \"$1/v.txt\"\n");
    s.script("dev-stubborn.sh", "#!/bin/sh\ntrap '' TERM\nsleep 300.54\n");
    s.script(
        "dev-bg.sh",
        "#!/bin/sh\nsleep 300.55 &\n( trap '' TERM; exec sleep 300.55 ) &\nexit 0\n",
    );
    s.script("ok.sh", "#!/bin/sh\necho x > \"$1/v.txt\"\n");
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\n{}scenes:\n  - name: stubborn\n    tags: [stubborn]\n    fixture:\n      run: \"./stubborn.sh {{out}}\"\n      inputs: [stubborn.sh]\n      timeout: 1s\n  - name: bg\n    tags: [bg]\n    fixture:\n      run: \"./bg.sh {{out}}\"\n      inputs: [bg.sh]\n  - name: escape\n    tags: [escape]\n    fixture:\n      run: \"./escape.sh {{out}}\"\n      inputs: [escape.sh]\n  - name: devstubborn\n    tags: [dev]\n    fixture:\n      run: \"./ok.sh {{out}} 1\"\n      inputs: [ok.sh]\n    device:\n      run: \"./dev-stubborn.sh\"\n      timeout: 1s\n  - name: devbg\n    tags: [dev]\n    fixture:\n      run: \"./ok.sh {{out}} 2\"\n      inputs: [ok.sh]\n    device:\n      run: \"./dev-bg.sh\"\n",
        lock_submit("--timeout 5 --max-time 120")
    ));
    let gone = |marker: &str| survivors(|| procs_matching(marker), secs(10));

    // A warm step that ignores SIGTERM past its timeout: killed after the grace.
    let r = exec(sr(&s, &["warm", "--tag", "stubborn"]), secs(60));
    cases += 1;
    let st = warm_step(&s, "stubborn");
    faults.check(
        r.is(0)
            && st["outcome"] == "failed"
            && st["error"].as_str().unwrap_or("").contains("timed out"),
        || format!("warm step ignoring SIGTERM: {st}\n{}", r.desc()),
    );
    let left = gone("sleep 300.51");
    faults.check(left.is_empty(), || {
        format!("the stubborn warm step survived: {left:?}")
    });

    // A warm step that leaves background children (one ignoring SIGTERM): not waited for, killed.
    let r = exec(sr(&s, &["warm", "--tag", "bg"]), secs(60));
    cases += 1;
    faults.check(r.is(0) && warm_step(&s, "bg")["outcome"] == "built", || {
        format!("warm step with background children: {}", r.desc())
    });
    let left = gone("sleep 300.52");
    faults.check(left.is_empty(), || {
        format!("background children outlived their step: {left:?}")
    });

    // A child that leaves the step's process group (setsid) does not keep warm waiting either.
    let r = exec(sr(&s, &["warm", "--tag", "escape"]), secs(60));
    cases += 1;
    faults.check(r.is(0) && !r.hung, || {
        format!("warm step with a setsid child: {}", r.desc())
    });
    if let Ok(pid) = s.read("logs/escaped.pid").trim().parse::<i32>() {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    // SIGTERM to warm while a step ignores it: exit 2, the step killed, nothing published.
    let _ = fs::remove_dir_all(s.path("cache"));
    let _ = fs::remove_file(s.path("logs/stubborn.started"));
    s.script("stubborn.sh", "#!/bin/sh\ntrap '' TERM\necho started > logs/stubborn.started\nsleep 300.56\necho late > \"$1/v.txt\"\n");
    let (child, cap) = start(sr(&s, &["warm", "--tag", "stubborn"]));
    let started = wait_for_file(&s.path("logs/stubborn.started"), secs(30));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let r = finish(child, cap, secs(60));
    cases += 1;
    faults.check(started && r.is(2), || {
        format!("SIGTERM to warm: expected exit 2: {}", r.desc())
    });
    let left = gone("sleep 300.56");
    faults.check(left.is_empty(), || {
        format!("a step outlived the interrupted warm: {left:?}")
    });
    faults.check(
        entry_dirs(&s.path("cache")).is_empty() && tmp_leftovers(&s.path("cache")).is_empty(),
        || {
            format!(
                "interrupted warm left {:?} / tmp {:?}",
                entry_dirs(&s.path("cache")),
                tmp_leftovers(&s.path("cache"))
            )
        },
    );

    // kill -9 of warm: its steps die with it (the watchdog).
    let _ = fs::remove_file(s.path("logs/stubborn.started"));
    let (mut child, cap) = start(sr(&s, &["warm", "--tag", "stubborn"]));
    let started = wait_for_file(&s.path("logs/stubborn.started"), secs(30));
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    drop(cap);
    cases += 1;
    let left = gone("sleep 300.56");
    faults.check(started && left.is_empty(), || {
        format!("a step outlived kill -9 of warm: {left:?}")
    });

    // Device steps: ignoring SIGTERM past the timeout, and leaving background children;
    // without the lock and through it.
    let r = exec(sr(&s, &["warm", "--tag", "dev"]), secs(60));
    assert!(r.is(0), "warm dev: {}", r.desc());
    for no_lock in [true, false] {
        let mut args = vec!["device", "--tag", "dev"];
        if no_lock {
            args.push("--no-lock");
        }
        let r = exec(sr(&s, &args), secs(90));
        cases += 1;
        let rep = s.record("report.json").unwrap_or_default();
        let outcome = |n: &str| {
            report_scene(&rep, n)
                .map(|x| x["outcome"].clone())
                .unwrap_or_default()
        };
        faults.check(
            r.is(1) && outcome("devstubborn") == "timed_out" && outcome("devbg") == "passed",
            || {
                format!(
                    "device (no_lock={no_lock}): stubborn timed out, background passed: {rep}\n{}",
                    r.desc()
                )
            },
        );
        let left = gone("sleep 300.54");
        faults.check(left.is_empty(), || {
            format!("device step ignoring SIGTERM survived: {left:?}")
        });
        let left = gone("sleep 300.55");
        faults.check(left.is_empty(), || {
            format!("device step's background children survived: {left:?}")
        });
    }
    // The lock was released: an immediate second acquisition (timeout 5 s) succeeds.
    let events = s.read("lock-events.log");
    let acquires = events.lines().filter(|l| l.starts_with("acquire")).count();
    let releases = events.lines().filter(|l| l.starts_with("release")).count();
    faults.check(acquires == 1 && releases == 1, || {
        format!("lock events: {events}")
    });
    let r = exec(sr(&s, &["device", "-k", "devbg"]), secs(90));
    cases += 1;
    faults.check(r.is(0), || {
        format!("the lock is free after a step left children: {}", r.desc())
    });

    // kill -9 of the device phase (no lock): the running device step dies with it.
    s.script(
        "dev-stubborn.sh",
        "#!/bin/sh\ntrap '' TERM\necho started > logs/dev.started\nsleep 300.57\n",
    );
    let (mut child, cap) = start(sr(&s, &["device", "--no-lock", "-k", "devstubborn"]));
    let started = wait_for_file(&s.path("logs/dev.started"), secs(30));
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    drop(cap);
    cases += 1;
    let left = gone("sleep 300.57");
    faults.check(started && left.is_empty(), || {
        format!("a device step outlived kill -9 of device: {left:?}")
    });

    figure(T, &format!("{cases} cases (warm/device steps ignoring SIGTERM past their timeout, background children incl. ones ignoring SIGTERM and a setsid escapee, SIGTERM and kill -9 of warm and device, through the lock and without): every step group killed after the 2 s grace, scenerun never waited for a leftover child, the lock released; failures: {}", faults.count()));
    faults.finish();
}
