//! The one Python server as the lanes' fork server (docs/lanes.md, "A fork server"),
//! with real pytest lanes through the lock stand-in: a forked lane observes what the
//! lane run as written observes (its command line's umask, limits, niceness, affinity
//! and variables), a lane whose settings a fork cannot take runs as written and `plan`
//! says why, a server that says ready and never serves costs each lane a bounded wait
//! (the lock is taken once and released), and the socket's directory is gone after
//! every end, a SIGKILLed run's included (the next run removes it).

use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

use super::prestart::{
    device_with, fields, forked, forking_suite, holder, preloading, suite_procs_alive,
};
use super::pytest::venv_python;
use super::*;

/// Lane `a`'s scenes log what the process observes; lane `a` sets a umask, a limit, a
/// variable, a niceness and a CPU before `python`; lane `b` sets what only a fresh
/// interpreter takes (`PYTHONHASHSEED` in its env, `-O`).
fn observing_suite(server: Option<&str>) -> Suite {
    let s = forking_suite(server);
    s.write(
        "tests/test_f.py",
        r#"import os, resource, sys

def _log(name):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    mask = os.umask(0)
    os.umask(mask)
    with open("logs/ran.log", "a") as f:
        f.write("%s umask=%o nofile=%d/%d nice=%d cpus=%s cwd=%s x=%s optimize=%d hash=%d forked=%d pid=%d\n" % (
            name, mask, soft, hard, os.getpriority(os.PRIO_PROCESS, 0),
            ",".join(map(str, sorted(os.sched_getaffinity(0)))), os.getcwd(),
            os.environ.get("PROBE_X"), sys.flags.optimize, hash("scenerun"),
            hasattr(sys, "_scenerun_forked"), os.getpid()))

def test_a1(): _log("a1")
def test_a2(): _log("a2")
def test_b1(): _log("b1")
def test_b2(): _log("b2")
"#,
    );
    // A fixed hash seed for everyone (the server included): then `hash()` is comparable.
    let text = s.read("scenes.yaml").replace(
        "env:\n  LANE_TOKEN",
        "env:\n  PYTHONHASHSEED: \"3\"\n  LANE_TOKEN",
    );
    let py = venv_python().display().to_string();
    let plain = format!("run: \"{py} -m scenerun_pytest fork");
    let mut lanes = text.split(&plain);
    let (head, a, b) = (
        lanes.next().unwrap(),
        lanes.next().unwrap(),
        lanes.next().unwrap(),
    );
    let text = format!(
        "{head}run: \"umask 027; ulimit -n 512; PROBE_X=1 nice -n 3 taskset -c 0 {py} -m scenerun_pytest fork{a}run: \"{py} -O -m scenerun_pytest fork{}",
        b.replace("env: {ONLY_B: \"yes\"}", "env: {ONLY_B: \"yes\", PYTHONHASHSEED: \"7\"}")
    );
    s.manifest(&text);
    s
}

fn lane_logs(s: &Suite) -> String {
    fs::read_dir(s.path("build/scenerun/logs/lanes"))
        .map(|d| {
            d.flatten()
                .map(|e| fs::read_to_string(e.path()).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// What each scene observed, by scene (the pid and whether it was forked aside).
fn observed(s: &Suite) -> BTreeMap<String, BTreeMap<String, String>> {
    s.read("logs/ran.log")
        .lines()
        .zip(fields(s, "logs/ran.log"))
        .map(|(line, mut f)| {
            f.remove("pid");
            f.remove("forked");
            // The suite's own directory, whichever temp dir it is.
            let dir = fs::canonicalize(s.dir()).unwrap();
            if let Some(cwd) = f.get_mut("cwd") {
                if fs::canonicalize(&*cwd).is_ok_and(|c| c == dir) {
                    *cwd = "<suite>".into();
                }
            }
            (line.split(' ').next().unwrap().to_string(), f)
        })
        .collect()
}

#[test]
fn a_forked_lane_observes_what_the_lane_run_as_written_observes() {
    if !std::process::Command::new("taskset")
        .args(["-c", "0", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        panic!("this test needs taskset (util-linux) and CPU 0");
    }
    let py = venv_python();
    let run = |server: Option<String>| {
        let s = observing_suite(server.as_deref());
        let pool = Pool::new("5");
        let o = device_with(&s, &pool, &[]).output();
        expect_code(&o, 0);
        assert!(
            outcomes(&report(&s)).values().all(|o| o == "passed"),
            "{}\n{}",
            show(&o),
            lane_logs(&s)
        );
        assert!(suite_procs_alive(&s).is_empty());
        s
    };
    let plain = run(None);
    let served = run(Some(preloading(&py)));
    let (before, after) = (observed(&plain), observed(&served));
    assert_eq!(before.len(), 4, "{}", plain.read("logs/ran.log"));
    assert_eq!(before, after);
    let a1 = &before["a1"];
    assert_eq!(
        (
            a1["umask"].as_str(),
            a1["nofile"].as_str(),
            a1["nice"].as_str()
        ),
        ("27", "512/512", "3")
    );
    assert_eq!((a1["cpus"].as_str(), a1["x"].as_str()), ("0", "1"));
    assert_eq!(a1["cwd"], "<suite>");
    assert_eq!(before["b1"]["optimize"], "1");
    assert_ne!(before["a1"]["hash"], before["b1"]["hash"], "b's own seed");
    // Lane a was forked (the server took its settings); lane b ran as written, saying why.
    let ran = served.read("logs/ran.log");
    for line in ran.lines() {
        let forked = line.contains("forked=1");
        assert_eq!(forked, line.starts_with('a'), "{ran}");
    }
    let logs = lane_logs(&served);
    assert!(
        logs.contains("the lane's PYTHONHASHSEED differs from the server's (read only when an interpreter starts); running it as written"),
        "{logs}"
    );
    // The server's import, and lane b's own.
    assert_eq!(
        served.count("logs/heavy.log"),
        2,
        "{}",
        served.read("logs/heavy.log")
    );
    // The plan says so before the run, a line per lane.
    let o = served.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 0);
    let out = stdout(&o);
    assert_eq!(
        out.matches("      forked from the fork server (with the lane's umask, limits, niceness, CPU affinity, directory and environment)").count(),
        1,
        "{out}"
    );
    assert_eq!(
        out.matches("      runs as written, not forked from the fork server: it sets PYTHONHASHSEED, which is read only when an interpreter starts").count(),
        1,
        "{out}"
    );
}

#[test]
fn a_server_that_says_ready_and_never_serves_costs_a_bounded_wait_and_the_lock_is_released() {
    let py = venv_python();
    let s = forking_suite(None);
    // Listens, says ready, and never answers: the requests sit in its backlog.
    s.write(
        "stalled.py",
        "import json, os, socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind(os.environ['SCENERUN_FORK_SERVER'])\ns.listen(64)\nprint(json.dumps({'ready': True, 'pid': os.getpid()}), flush=True)\ntime.sleep(600)\n",
    );
    let text = s.read("scenes.yaml").replace(
        "lock:\n",
        &format!(
            "fork_server:\n  run: \"{} stalled.py\"\n  start_timeout: 60s\nlock:\n",
            py.display()
        ),
    );
    s.manifest(&text);
    let pool = Pool::new("5");
    let mut device = device_with(&s, &pool, &[]);
    let Some(mut child) = device.0.take() else {
        unreachable!()
    };
    // Bounded: two 5 s waits (one per lane, at once) and the lanes' own work.
    let ended = wait_bounded(&mut child, Duration::from_secs(90));
    if ended.is_none() {
        let _ = child.kill();
        panic!(
            "scenerun device hung on a server that never serves: {}",
            lane_logs(&s)
        );
    }
    let o = child.wait_with_output().unwrap();
    expect_code(&o, 0);
    assert!(
        outcomes(&report(&s)).values().all(|o| o == "passed"),
        "{}",
        show(&o)
    );
    // Each lane imported its own (no fork), after saying why.
    assert_eq!(s.count("logs/heavy.log"), 2);
    assert_eq!(
        lane_logs(&s)
            .matches("the fork server did not answer within 5s; running it as written")
            .count(),
        2,
        "{}",
        lane_logs(&s)
    );
    // One acquisition, released; nothing of the suite left, the stalled server included.
    assert_eq!(pool.acquisitions(), 1);
    assert_eq!(pool.count("release"), 1);
    assert!(
        suite_procs_alive(&s).is_empty(),
        "{:?}",
        suite_procs_alive(&s)
    );
}

/// The socket directories under `tmp`.
fn socket_dirs(tmp: &std::path::Path) -> Vec<String> {
    fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("scenerun-fork-"))
        .collect()
}

#[test]
fn the_socket_dir_is_gone_after_every_end_and_a_killed_runs_is_removed_by_the_next() {
    let py = venv_python();
    let tmp = tempfile::tempdir().unwrap();
    let tmp_env = tmp.path().display().to_string();
    let env = [("TMPDIR", tmp_env.as_str())];
    // A normal end.
    let s = forking_suite(Some(&preloading(&py)));
    expect_code(&device_with(&s, &Pool::new("5"), &env).output(), 0);
    assert_eq!(socket_dirs(tmp.path()), Vec::<String>::new());
    // SIGTERM while the forked lanes wait in the queue.
    let pool = Pool::new("5");
    let s = forking_suite(Some(&preloading(&py)));
    let mut blocker = holder(&pool, "5");
    let child = device_with(&s, &pool, &env);
    assert!(wait_until(Duration::from_secs(60), || forked(&s) == 3));
    assert_eq!(socket_dirs(tmp.path()).len(), 1, "made while it runs");
    child.signal(libc::SIGTERM);
    expect_code(&child.output(), 2);
    assert_eq!(socket_dirs(tmp.path()), Vec::<String>::new());
    blocker.release();
    // SIGKILL: left behind, then removed by the next run, which leaves none itself.
    let pool = Pool::new("5");
    let s = forking_suite(Some(&preloading(&py)));
    let mut blocker = holder(&pool, "5");
    let child = device_with(&s, &pool, &env);
    assert!(wait_until(Duration::from_secs(60), || forked(&s) == 3));
    child.signal(libc::SIGKILL);
    let _ = child.output();
    blocker.release();
    assert!(wait_until(Duration::from_secs(10), || suite_procs_alive(
        &s
    )
    .is_empty()));
    let left = socket_dirs(tmp.path());
    assert_eq!(left.len(), 1, "a SIGKILLed run cannot remove it");
    let s = forking_suite(Some(&preloading(&py)));
    expect_code(&device_with(&s, &Pool::new("5"), &env).output(), 0);
    assert_eq!(socket_dirs(tmp.path()), Vec::<String>::new());
}

#[test]
fn plan_json_says_per_lane_process_whether_it_forks_and_why_not_in_the_texts_words() {
    let py = venv_python();
    let s = observing_suite(Some(&preloading(&py)));
    let o = s.cmd(&["plan", "--format", "json"]).output().unwrap();
    expect_code(&o, 0);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let mut by_lane = BTreeMap::new();
    for p in v["device"]["processes"].as_array().unwrap() {
        let lane = p["lane"].as_str().expect("every process here is a lane's");
        by_lane.insert(lane.to_string(), p["fork"].clone());
    }
    let text = stdout(&s.cmd(&["plan"]).output().unwrap());
    let forked: Vec<_> = by_lane.values().filter(|f| f["forked"] == true).collect();
    let written: Vec<_> = by_lane.values().filter(|f| f["forked"] == false).collect();
    assert_eq!((forked.len(), written.len()), (1, 1), "{by_lane:?}");
    assert!(forked[0]["reason"].is_null(), "{by_lane:?}");
    let why = written[0]["reason"].as_str().unwrap();
    assert_eq!(
        why,
        "it sets PYTHONHASHSEED, which is read only when an interpreter starts"
    );
    assert!(
        text.contains(&format!(
            "runs as written, not forked from the fork server: {why}\n"
        )),
        "{text}"
    );
    // Without a fork server, no lane says anything about one.
    let plain = observing_suite(None);
    let o = plain.cmd(&["plan", "--format", "json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["device"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["fork"].is_null()));
}
