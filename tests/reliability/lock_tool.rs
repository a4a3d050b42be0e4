//! The lock tool misbehaving (docs/guarantees.md row 6): exit 3 with a message and a
//! report.

use std::fs;
use std::process::{Command as StdCommand, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::*;
use crate::common::*;

/// Two warm scenes with quick device steps; `lock` is the manifest's lock section.
fn lock_suite(s: &Suite, lock: &str, slow_device: &str) {
    fs::create_dir_all(s.path("logs")).unwrap();
    s.script("gen.sh", "#!/bin/sh\necho \"$2\" > \"$1/v.txt\"\n");
    s.script(
        "device.sh",
        &format!("#!/bin/sh\necho \"$SCENERUN_SCENE $2\" >> logs/device-ran.log\n[ \"$SCENERUN_SCENE\" = slow ] && {{ {slow_device}; }}\nexit 0\n"),
    );
    let mut y = format!("version: 1\ncache:\n  dir: cache\n{lock}scenes:\n");
    for name in ["quick", "slow"] {
        y.push_str(&format!(
            "  - name: {name}\n    fixture:\n      run: \"./gen.sh {{out}} {name}\"\n      inputs: [gen.sh]\n    device:\n      run: \"./device.sh {{fixture}} {{devices}}\"\n"
        ));
    }
    s.manifest(&y);
}

/// Check the outcome of a device phase whose lock tool misbehaved.
fn lock_failed(
    faults: &mut Faults,
    what: &str,
    s: &Suite,
    r: &Run,
    lock_exit: Option<i64>,
    says: &str,
) {
    faults.check(r.is(3), || format!("{what}: expected exit 3: {}", r.desc()));
    faults.check(
        r.stderr.contains("lock command") && r.stderr.contains(says),
        || {
            format!(
                "{what}: the message must name the lock command and say `{says}`: {}",
                r.desc()
            )
        },
    );
    let rep = s.record("report.json");
    let Some(rep) = rep else {
        faults.add(format!("{what}: no report.json"));
        return;
    };
    faults.check(rep["exit_code"] == 3 && rep["error"].is_string(), || {
        format!("{what}: report.json exit_code/error: {}", rep)
    });
    let scenes = rep["scenes"].as_array().map(|a| a.len()).unwrap_or(0);
    faults.check(scenes == 2, || {
        format!("{what}: report.json lists {scenes} scenes")
    });
    if let Some(code) = lock_exit {
        faults.check(rep["lock"]["exit_code"] == code, || {
            format!(
                "{what}: report.json lock.exit_code {} (expected {code})",
                rep["lock"]["exit_code"]
            )
        });
    }
    faults.check(
        rep["lock"]["command"].is_string() && rep["lock"]["output_tail"].is_string(),
        || format!("{what}: report.json lock section: {}", rep["lock"]),
    );
}

#[test]
fn lock_tool_misbehaving_is_exit_3_with_a_report() {
    const T: &str = "lock_misbehaving";
    let mut faults = Faults::new(T);
    let s = Suite::new();
    let real = |flags: &str| lock_submit(flags);
    let fake = |script: &str| {
        format!(
            "lock:\n  submit: \"./fake-lock.sh --run {{run}}\"\n{}",
            script
        )
    };
    lock_suite(&s, &real("--timeout 10 --max-time 60"), "true");
    let r = exec(sr(&s, &["warm"]), LIMIT);
    assert!(r.is(0), "warm: {}", r.desc());
    let r = exec(sr(&s, &["device"]), LIMIT);
    assert!(r.is(0), "device with a working lock: {}", r.desc());
    let mut cases = 0;
    let mut check = |faults: &mut Faults,
                     what: &str,
                     lock: String,
                     slow: &str,
                     exit: Option<i64>,
                     says: &str,
                     ran_inner: bool| {
        lock_suite(&s, &lock, slow);
        let _ = fs::remove_file(s.path("logs/device-ran.log"));
        let _ = fs::remove_file(s.path("build/scenerun/report.json"));
        let r = exec(sr(&s, &["device"]), LIMIT);
        cases += 1;
        lock_failed(faults, what, &s, &r, exit, says);
        if !ran_inner {
            faults.check(!s.path("logs/device-ran.log").exists(), || {
                format!(
                    "{what}: a device step ran: {}",
                    s.read("logs/device-ran.log")
                )
            });
        }
    };
    // Not installed.
    check(
        &mut faults,
        "lock tool not installed",
        "lock:\n  submit: \"/nonexistent/task-submit --run {run}\"\n".into(),
        "true",
        Some(127),
        "not found",
        false,
    );
    // Refuses before running the inner command: usage error, and a plain exit 1.
    check(
        &mut faults,
        "lock tool refuses (usage)",
        format!(
            "lock:\n  submit: {}\n",
            yq(&format!(
                "{TASK_SUBMIT} --timeout 5 --device-num 99 --run {{run}}"
            ))
        ),
        "true",
        Some(64),
        "exceeds the pool",
        false,
    );
    s.script(
        "fake-lock.sh",
        "#!/bin/sh\necho 'fake-lock: quota exceeded for this project' >&2\nexit 1\n",
    );
    check(
        &mut faults,
        "lock tool refuses (exit 1)",
        fake(""),
        "true",
        Some(1),
        "quota exceeded",
        false,
    );
    // Returns 0 although the inner run never happened (and stale results are on disk).
    s.script(
        "fake-lock.sh",
        "#!/bin/sh\necho 'fake-lock: granted (not really)'\nexit 0\n",
    );
    check(
        &mut faults,
        "lock tool returns 0 without running",
        fake(""),
        "true",
        Some(0),
        "granted (not really)",
        false,
    );
    // Runs the inner command but hands over no device ids.
    s.script("fake-lock.sh", "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --run ] && run=$2; shift; done\necho 'fake-lock: running without ids'\nenv -u TASK_DEVICE sh -c \"$run\"\n");
    check(
        &mut faults,
        "lock tool hands over no ids",
        fake(""),
        "true",
        None,
        "TASK_DEVICE",
        false,
    );
    // Returns while the inner run goes on in the background, outside the lock. The inner
    // run must have started its step by then: under qemu-user it takes seconds to start.
    let (head_start, step) = match emulated() {
        Some(_) => ("3", "sleep 6"),
        None => ("0.3", "sleep 1.25"),
    };
    s.script("fake-lock.sh", &format!("#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --run ] && run=$2; shift; done\nTASK_DEVICE=0 setsid sh -c \"$run\" > /dev/null 2>&1 &\nsleep {head_start}\necho 'fake-lock: done (the run is still going)'\nexit 0\n"));
    check(
        &mut faults,
        "lock tool returns while the run goes on",
        fake(""),
        step,
        Some(0),
        "still running outside",
        true,
    );
    // Killed by a signal.
    s.script(
        "fake-lock.sh",
        "#!/bin/sh\necho 'fake-lock: dying'\nkill -9 $$\n",
    );
    check(
        &mut faults,
        "lock tool killed by SIGKILL",
        fake(""),
        "true",
        None,
        "fake-lock: dying",
        false,
    );
    // Queue timeout: another job holds every device.
    let mut holder = StdCommand::new(TASK_SUBMIT);
    holder
        .args([
            "--device",
            "auto",
            "--device-num",
            "4",
            "--run",
            "sleep 300.41",
        ])
        .env("TASK_SUBMIT_POOL", s.path("pool"))
        .env("TASK_SUBMIT_LOG", s.path("holder.log"))
        .env("TASK_SUBMIT_DEVICES", "0-3")
        .current_dir(s.dir())
        .stdin(Stdio::null());
    let (mut holder, _cap) = start(holder);
    let t = Instant::now();
    while !s.read("holder.log").contains("acquire") && t.elapsed() < secs(30) {
        sleep(Duration::from_millis(20));
    }
    check(
        &mut faults,
        "queue timeout",
        real("--timeout 0.3 --max-time 60"),
        "true",
        Some(75),
        "timed out",
        false,
    );
    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    let _ = wait_bounded(&mut holder, secs(20));
    // --max-time kills the inner run midway: the slow scene's device step sleeps (or
    // ignores SIGTERM too), the quick one has passed by then on the other device. The
    // lock tool's grace is longer than scenerun's, so the inner run gets to report.
    let max_time = format!(
        "lock:\n  submit: {}\n  device_count: 2\n",
        yq(&format!("TASK_SUBMIT_GRACE=6 {TASK_SUBMIT} --timeout 10 --max-time 2 --device auto --device-num {{device_count}} --run {{run}}"))
    );
    for (what, slow) in [
        ("--max-time kills the run", "sleep 300.42"),
        (
            "--max-time, step ignores SIGTERM",
            "trap '' TERM; sleep 300.43",
        ),
    ] {
        check(
            &mut faults,
            what,
            max_time.clone(),
            slow,
            Some(124),
            "max-time",
            true,
        );
        let rep = s.record("report.json").unwrap_or_default();
        let scene = |n: &str| report_scene(&rep, n).cloned().unwrap_or_default();
        faults.check(
            scene("quick")["outcome"] == "passed" && scene("slow")["outcome"] != "passed",
            || {
                format!(
                    "{what}: the report keeps what ran before the kill: {}\n{}",
                    rep["scenes"],
                    s.read("build/scenerun/lock.log")
                )
            },
        );
    }
    let left = survivors(|| procs_matching("sleep 300.4"), secs(15));
    faults.check(left.is_empty(), || {
        format!("device steps outlived the lock tool's kill: {left:?}")
    });
    // And it works again afterwards: nothing was left holding the lock.
    lock_suite(&s, &real("--timeout 5 --max-time 60"), "true");
    let r = exec(sr(&s, &["device"]), LIMIT);
    faults.check(r.is(0), || {
        format!("device after the failures: {}", r.desc())
    });
    figure(T, &format!("{cases} misbehaviours (not installed, refuses ×2, returns 0 without running, returns while the run goes on, no ids, SIGKILLed, queue timeout, --max-time ×2): each exit 3 naming the lock command with its output tail, report.json written with exit_code 3, the lock's exit code and every scene; no device step outlived a kill; failures: {}", faults.count()));
    faults.finish();
}
