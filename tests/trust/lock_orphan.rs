//! No lock request outlives its `device` (docs/guarantees.md, "No orphan lock
//! request"): the lock command's process group is known to scenerun's watchdog from
//! its first instruction, so a `device` SIGKILLed while the lock command is queued
//! leaves no lock command that later takes the ids; and a `device` signalled before it
//! calls the lock command (during the fork server's start-up) never calls it. Counted
//! in the stand-in's own event log (fixtures/bin/task-submit).

use std::process::Stdio;

use super::*;

fn suite(extra: &str) -> Suite {
    let s = Suite::with_logs();
    s.script(
        "lane.sh",
        "#!/bin/sh\nwhile IFS= read -r l; do n=$(printf '%s' \"$l\" | sed -n 's/.*\"scene\":\"\\([^\"]*\\)\".*/\\1/p'); echo ran >> logs/ran.log; printf '{\"scene\":\"%s\",\"event\":\"end\",\"outcome\":\"passed\"}\\n' \"$n\" >> \"$2\"; done < \"$1\"\n",
    );
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlock:\n  submit: \"{TASK_SUBMIT} --device auto --device-num {{device_count}} --run {{run}}\"\n{extra}scenes:\n  - name: a\n    device:\n      run: \"echo ran >> logs/ran.log\"\n"
    ));
    s
}

fn device(s: &Suite, pool: &Pool) -> std::process::Child {
    let mut c = scenerun_process();
    c.current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .arg("device")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.env("TASK_SUBMIT_DEVICES", &pool.devices)
        .env("TASK_SUBMIT_POOL", pool.path("pool"))
        .env("TASK_SUBMIT_LOG", pool.log())
        .env("TASK_SUBMIT_GRACE", "1")
        .env_remove("TASK_DEVICE");
    c.spawn().expect("start scenerun device")
}

/// Hold id 0 in the pool until `release` exists.
fn hold(pool: &Pool, release: &Path) -> std::process::Child {
    let wait = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done",
        release.display()
    );
    let c = pool.spawn(&["--device", "0", "--run", &wait]);
    assert!(
        wait_until(Duration::from_secs(30), || pool.acquisitions() == 1),
        "the holder never got the id"
    );
    c
}

#[test]
fn a_device_killed_while_its_lock_command_is_queued_leaves_no_lock_request() {
    let pool = Pool::new("0");
    let s = suite("");
    let release = pool.path("release");
    let mut holder = hold(&pool, &release);
    let mut child = device(&s, &pool);
    assert!(
        wait_until(Duration::from_secs(30), || pool.count("request") == 2),
        "device's lock command never queued: {}",
        std::fs::read_to_string(pool.log()).unwrap_or_default()
    );
    let queued: Vec<String> = pool
        .events()
        .iter()
        .filter(|e| e.kind == "request")
        .map(|e| e.get("pid").to_string())
        .collect();
    let queued = queued[1].clone();
    child.kill().unwrap(); // SIGKILL
    let _ = child.wait();
    // The queued lock command is gone soon after its device (the watchdog's SIGKILL).
    let gone = wait_until(Duration::from_secs(10), || !pid_alive(&queued));
    std::fs::write(&release, "").unwrap();
    assert!(wait_bounded(&mut holder, Duration::from_secs(30)).is_some());
    // Had it survived, it would take the id now that the holder let go.
    let took = wait_until(Duration::from_secs(3), || pool.acquisitions() > 1);
    let log = std::fs::read_to_string(pool.log()).unwrap_or_default();
    assert!(gone, "the queued lock command outlived its device: {log}");
    assert!(!took, "an orphan lock request took the ids: {log}");
    assert_eq!(s.count("logs/ran.log"), 0);
}

#[test]
fn sigterm_during_the_fork_servers_start_up_never_calls_the_lock_command() {
    let pool = Pool::new("0");
    let s = suite(
        "fork_server:\n  run: \"echo started >> logs/server.log; sleep 30; echo ready\"\n  start_timeout: 60s\nlanes:\n  l:\n    run: \"./lane.sh {scenes} {results}\"\n    prestart: all\n",
    );
    // The lock command logs that it was called before anything else (the stand-in logs
    // a request only once it has parsed its flags).
    s.script(
        "lock.sh",
        &format!("#!/bin/sh\necho called >> logs/lock.log\nexec {TASK_SUBMIT} \"$@\"\n"),
    );
    let text = s
        .read("scenes.yaml")
        .replace(&format!("submit: \"{TASK_SUBMIT} "), "submit: \"./lock.sh ")
        + "  - name: in-lane\n    device:\n      lane: l\n";
    s.manifest(&text);
    let mut child = device(&s, &pool);
    assert!(
        wait_until(Duration::from_secs(30), || s.count("logs/server.log") == 1),
        "the fork server never started"
    );
    // SAFETY: kill takes plain integers; the child is ours and not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_bounded(&mut child, Duration::from_secs(30)).expect("device ended");
    let o = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(status.code(), Some(2), "interrupted: {said}");
    // scenerun says so before it starts the lock command (which a forwarded SIGTERM may
    // kill before it logs a thing).
    assert!(!said.contains("taking the lock"), "{said}");
    let log = std::fs::read_to_string(pool.log()).unwrap_or_default();
    assert_eq!(
        s.count("logs/lock.log"),
        0,
        "the lock command was called: {log}"
    );
    assert_eq!(pool.count("request"), 0, "{log}");
    assert_eq!(pool.acquisitions(), 0, "{log}");
    assert_eq!(s.count("logs/ran.log"), 0);
}
