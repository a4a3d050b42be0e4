//! Integration tests of the lock-tool stand-in `fixtures/bin/task-submit`.
//!
//! Every test has its own pool directory (`TASK_SUBMIT_POOL`), event log
//! (`TASK_SUBMIT_LOG`) and working directory, so tests run in parallel without
//! sharing a lock. Assertions count events in the log and check files the
//! commands leave behind; none depends on how long something took.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::Duration;

use crate::common::*;

/// Waits (up to 10 s) until `path` exists.
fn wait_for(path: &Path) {
    assert!(
        wait_for_file(path, Duration::from_secs(10)),
        "{} never appeared",
        path.display()
    );
}

#[test]
fn task_device_carries_ids_of_the_pool() {
    let pool = Pool::strict("4-5");
    let out = pool.run(&[
        "--device",
        "auto",
        "--device-num",
        "2",
        "--run",
        "printf %s \"$TASK_DEVICE\" > granted",
    ]);
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(fs::read_to_string(pool.path("granted")).unwrap(), "4,5");

    let out = pool.run(&[
        "--device-num",
        "1",
        "--run",
        "printf %s \"$TASK_DEVICE\" > one",
    ]);
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let one = fs::read_to_string(pool.path("one")).unwrap();
    assert!(
        one == "4" || one == "5",
        "TASK_DEVICE={one:?} is not an id of the pool 4-5"
    );

    // an explicit list gets exactly those ids
    let out = pool.run(&[
        "--device",
        "5",
        "--run",
        "printf %s \"$TASK_DEVICE\" > five",
    ]);
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    assert_eq!(fs::read_to_string(pool.path("five")).unwrap(), "5");

    let acquires: Vec<String> = pool
        .events()
        .iter()
        .filter(|e| e.kind == "acquire")
        .map(|e| e.get("devices").to_string())
        .collect();
    assert_eq!(acquires, vec!["4,5".to_string(), one, "5".to_string()]);
    assert_eq!(pool.count("release"), 3);
}

#[test]
fn concurrent_calls_on_a_one_id_pool_queue() {
    let pool = Pool::strict("3");
    let body =
        "echo \"start $TASK_DEVICE $$\" >> marks; sleep 0.4; echo \"end $TASK_DEVICE $$\" >> marks";
    let a = pool.spawn(&["--timeout", "30", "--run", body]);
    let b = pool.spawn(&["--timeout", "30", "--run", body]);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_eq!(code(&a), 0, "first: {}", stderr(&a));
    assert_eq!(code(&b), 0, "second: {}", stderr(&b));

    // the runs did not interleave: start X, end X, start Y, end Y
    let marks = fs::read_to_string(pool.path("marks")).unwrap();
    let lines: Vec<Vec<&str>> = marks.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 4, "marks: {marks}");
    assert_eq!(
        (lines[0][0], lines[1][0], lines[2][0], lines[3][0]),
        ("start", "end", "start", "end"),
        "{marks}"
    );
    assert_eq!(lines[0][2], lines[1][2], "{marks}");
    assert_eq!(lines[2][2], lines[3][2], "{marks}");
    assert_ne!(lines[0][2], lines[2][2], "{marks}");
    assert!(lines.iter().all(|l| l[1] == "3"), "{marks}");

    // the log's hold intervals do not overlap
    let events = pool.events();
    let holds: Vec<(f64, f64)> = events
        .iter()
        .filter(|e| e.kind == "acquire")
        .map(|acq| {
            let rel = events
                .iter()
                .find(|e| e.kind == "release" && e.get("pid") == acq.get("pid"))
                .expect("every acquire has a release");
            assert_eq!(rel.get("status"), "0");
            assert_eq!(acq.get("devices"), "3");
            (acq.t(), rel.t())
        })
        .collect();
    assert_eq!(holds.len(), 2, "events: {events:?}");
    let (first, second) = if holds[0].0 <= holds[1].0 {
        (holds[0], holds[1])
    } else {
        (holds[1], holds[0])
    };
    assert!(
        first.1 <= second.0,
        "hold intervals overlap: {first:?} {second:?}"
    );
}

#[test]
fn max_time_kills_the_run() {
    let pool = Pool::strict("0");
    let out = pool.run(&[
        "--max-time",
        "1",
        "--run",
        "echo $$ > pid; sleep 30; touch marker",
    ]);
    assert_eq!(code(&out), 124, "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("task-submit:"),
        "stderr: {}",
        stderr(&out)
    );
    assert!(!pool.path("marker").exists());
    // (on a badly overloaded machine the shell may not have started within 1 s)
    if let Ok(pid) = fs::read_to_string(pool.path("pid")) {
        assert!(!pid_alive(pid.trim()), "the run's shell {pid} survived");
    }
    assert_eq!(pool.count("acquire"), 1);
    assert_eq!(pool.count("release"), 1);
    sleep(Duration::from_millis(200));
    assert!(
        !pool.path("marker").exists(),
        "the run went on after task-submit exited"
    );
}

#[test]
fn max_time_kills_the_whole_process_group() {
    let pool = Pool::strict("0");
    let out = pool.run(&[
        "--max-time",
        "2",
        "--run",
        "sleep 30 >/dev/null 2>&1 & echo $! > sleeper; wait; touch marker",
    ]);
    assert_eq!(code(&out), 124, "stderr: {}", stderr(&out));
    let sleeper = fs::read_to_string(pool.path("sleeper"))
        .expect("the run did not start its background sleep within --max-time")
        .trim()
        .to_string();
    // the orphan is reaped by init / the subreaper: give it a moment
    let alive = !wait_until(Duration::from_secs(2), || !pid_alive(&sleeper));
    if alive {
        let _ = Command::new("kill").arg(&sleeper).status();
    }
    assert!(!alive, "a grandchild of the run survived --max-time");
    assert!(!pool.path("marker").exists());
}

#[test]
fn max_time_kills_a_run_that_ignores_sigterm() {
    let pool = Pool::strict("0");
    let out = pool.run(&[
        "--max-time",
        "1",
        "--run",
        "trap '' TERM; echo $$ > pid; sleep 30; touch marker",
    ]);
    assert_eq!(code(&out), 124, "stderr: {}", stderr(&out));
    assert!(!pool.path("marker").exists());
    // `pid` is written after the trap is set: if it exists, SIGTERM was ignored
    // and only the SIGKILL after the grace can have ended the shell
    if let Ok(pid) = fs::read_to_string(pool.path("pid")) {
        assert!(
            !pid_alive(pid.trim()),
            "the run's shell {pid} survived SIGKILL"
        );
        assert_eq!(pool.count("kill"), 1, "events: {:?}", pool.events());
    }
    sleep(Duration::from_millis(200));
    assert!(
        !pool.path("marker").exists(),
        "the run went on after task-submit exited"
    );
    // the ids are free again
    let out = pool.run(&["--timeout", "5", "--run", "true"]);
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
}

#[test]
fn queue_timeout_exits_75_without_acquiring() {
    let pool = Pool::strict("7");
    let holder = pool.spawn(&[
        "--run",
        "touch holding; while [ ! -e done ]; do sleep 0.05; done",
    ]);
    wait_for(&pool.path("holding"));

    let out = pool.run(&["--timeout", "1", "--run", "touch ran"]);
    fs::write(pool.path("done"), "").unwrap();
    let holder = holder.wait_with_output().unwrap();

    assert_eq!(code(&out), 75, "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("task-submit:"),
        "stderr: {}",
        stderr(&out)
    );
    assert!(!pool.path("ran").exists(), "the queued command ran");
    assert_eq!(code(&holder), 0, "holder: {}", stderr(&holder));
    assert_eq!(pool.count("acquire"), 1, "events: {:?}", pool.events());
    assert_eq!(pool.count("timeout"), 1, "events: {:?}", pool.events());
}

#[test]
fn exit_status_of_the_command_is_passed_through() {
    let pool = Pool::strict("0-1");
    let out = pool.run(&["--run", "echo out; echo err >&2; exit 3"]);
    assert_eq!(code(&out), 3);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(stderr(&out).contains("err\n"), "stderr: {}", stderr(&out));
    let out = pool.run(&["--run", "true"]);
    assert_eq!(code(&out), 0);
    let statuses: Vec<String> = pool
        .events()
        .iter()
        .filter(|e| e.kind == "release")
        .map(|e| e.get("status").to_string())
        .collect();
    assert_eq!(statuses, vec!["3", "0"]);
}

#[test]
fn a_background_child_does_not_keep_the_ids() {
    let pool = Pool::strict("2");
    let out = pool.run(&["--run", "sleep 30 >/dev/null 2>&1 & echo $! > bgpid"]);
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
    let bg = fs::read_to_string(pool.path("bgpid"))
        .unwrap()
        .trim()
        .to_string();
    assert!(
        pid_alive(&bg),
        "the background child should still be running"
    );

    let out = pool.run(&["--timeout", "2", "--run", "true"]);
    let _ = Command::new("kill").arg(&bg).status();
    assert_eq!(
        code(&out),
        0,
        "the left-behind child held the id: {}",
        stderr(&out)
    );
    assert!(
        !stderr(&out).contains("waiting"),
        "had to queue: {}",
        stderr(&out)
    );
    assert_eq!(pool.count("acquire"), 2, "events: {:?}", pool.events());
    assert_eq!(pool.count("timeout"), 0);
}

#[test]
fn usage_errors_exit_64_without_acquiring() {
    let pool = Pool::strict("0-1");
    let no_run = pool.run(&["--device", "auto", "--device-num", "1"]);
    assert_eq!(code(&no_run), 64, "stderr: {}", stderr(&no_run));
    let too_many = pool.run(&["--device-num", "3", "--run", "touch ran"]);
    assert_eq!(code(&too_many), 64, "stderr: {}", stderr(&too_many));
    assert!(stderr(&too_many).contains("task-submit:"));
    let unknown = pool.run(&["--frobnicate", "--run", "touch ran"]);
    assert_eq!(code(&unknown), 64);
    let not_in_pool = pool.run(&["--device", "9", "--run", "touch ran"]);
    assert_eq!(code(&not_in_pool), 64);
    assert!(!pool.path("ran").exists());
    assert_eq!(pool.count("acquire"), 0);
}

#[test]
fn sigterm_is_forwarded_to_the_run_and_ids_are_released() {
    let pool = Pool::strict("0");
    let child = pool.spawn(&[
        "--run",
        "trap 'touch got_term; exit 0' TERM; touch started; while :; do sleep 0.05; done",
    ]);
    wait_for(&pool.path("started"));
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 143, "stderr: {}", stderr(&out));
    assert!(pool.path("got_term").exists(), "the run never saw SIGTERM");
    let rel: Vec<Event> = pool
        .events()
        .into_iter()
        .filter(|e| e.kind == "release")
        .collect();
    assert_eq!(rel.len(), 1);
    assert_eq!(rel[0].get("status"), "143");
    // and the id is free again
    let out = pool.run(&["--timeout", "5", "--run", "true"]);
    assert_eq!(code(&out), 0, "stderr: {}", stderr(&out));
}
