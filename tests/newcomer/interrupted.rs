//! An interrupted `device` (SIGINT while the lock is held) still ends with its summary
//! table, the interrupted scene in it.

use std::process::Stdio;
use std::time::Duration;

use super::*;

#[test]
fn an_interrupted_device_run_prints_its_summary() {
    let s = Suite::new();
    let started = s.path("started");
    s.manifest(&format!(
        "version: 1\nlock:\n  submit: \"{TASK_SUBMIT} --timeout 60 --max-time 120 --device auto --device-num {{device_count}} --run {{run}}\"\n  grace: 1s\nscenes:\n  - name: waits\n    device: {{ run: \"touch {} && sleep 60\" }}\n",
        started.display()
    ));
    let pool = Pool::new("0");
    let mut c = scenerun_process();
    c.current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .arg("device")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.env("TASK_SUBMIT_DEVICES", "0")
        .env("TASK_SUBMIT_POOL", pool.path("pool"))
        .env("TASK_SUBMIT_LOG", pool.log())
        .env("TASK_SUBMIT_GRACE", "1")
        .env_remove("TASK_DEVICE");
    let mut child = c.spawn().unwrap();
    assert!(
        wait_for_file(&started, Duration::from_secs(60)),
        "the scene never started"
    );
    // SAFETY: a signal to the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert!(
        wait_bounded(&mut child, Duration::from_secs(60)).is_some(),
        "scenerun ended"
    );
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 2, "{}", show(&o));
    let out = stdout(&o);
    let row = out
        .lines()
        .find(|l| l.starts_with("waits "))
        .unwrap_or_else(|| panic!("the summary table: {}", show(&o)));
    assert!(row.contains("interrupted"), "{row}");
}
