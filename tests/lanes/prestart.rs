//! Lanes started before the lock (docs/lanes.md): `prestart: true` lane processes start
//! before `scenerun device` calls the lock command, wait for their ids on their go file,
//! and run their batch inside the lock; a cancel, a refused lock or a lost lock stops
//! them. Real processes through the stand-in lock tool: another holder keeps the ids
//! until the lanes say they are ready, so the order of events (lane start, acquire,
//! go, release) is what the tests count, from the lanes' and the lock tool's own logs.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::process::{Child, Stdio};
use std::time::Duration;

use super::pytest::venv_python;
use super::*;

/// The stand-in lane: `lane.sh SCENES RESULTS DEVICES`. Logs its start (the ids it was
/// given, in `{devices}` and `$SCENERUN_DEVICES`); started before the lock it says
/// ready, waits for its go file and takes the ids from it (the protocol of
/// docs/lanes.md), then runs each scene as its first arg says (pass, crash, hang).
/// `LANE_REFUSES_SENTINEL`: exit 3 at once on the sentinel; `LANE_SILENT_GO`: say
/// nothing, wait for the ids, exit 3; `LANE_IGNORES_GO`: run at once, on the sentinel.
const PRESTART_LANE: &str = r#"#!/bin/bash
scenes=$1 results=$2 devices=$3
echo "start pid=$$ devices=$devices env=$SCENERUN_DEVICES t=$EPOCHREALTIME" >> logs/lane-starts.log
if [ -n "${SCENERUN_GO:-}" ] && [ -z "${LANE_IGNORES_GO:-}" ]; then
    if [ -n "${LANE_REFUSES_SENTINEL:-}" ]; then echo "bad device id: $devices" >&2; exit 3; fi
    if [ -z "${LANE_SILENT_GO:-}" ]; then
        printf '{"event":"ready","unix_secs":%s}\n' "$EPOCHREALTIME" >> "$results"
    fi
    echo "ready pid=$$ t=$EPOCHREALTIME" >> logs/lane-ready.log
    while [ ! -e "$SCENERUN_GO" ]; do sleep 0.01; done
    devices=$(sed -n 's/.*"devices": *"\([^"]*\)".*/\1/p' "$SCENERUN_GO")
    export SCENERUN_DEVICES=$devices
    echo "go pid=$$ devices=$devices env=$SCENERUN_DEVICES t=$EPOCHREALTIME" >> logs/lane-go.log
    if [ -n "${LANE_SILENT_GO:-}" ]; then exit 3; fi
fi
emit() { printf '%s\n' "$1" >> "$results"; }
while IFS= read -r line; do
    scene=$(printf '%s' "$line" | sed -n 's/.*"scene":"\([^"]*\)".*/\1/p')
    what=$(printf '%s' "$line" | sed -n 's/.*"args":\["\([^"]*\)".*/\1/p')
    echo "run scene=$scene devices=$devices env=$SCENERUN_DEVICES t=$EPOCHREALTIME" >> logs/lane-runs.log
    emit "{\"scene\":\"$scene\",\"event\":\"start\"}"
    case $what in
        pass) emit "{\"scene\":\"$scene\",\"event\":\"end\",\"outcome\":\"passed\"}" ;;
        crash) kill -9 $$ ;;
        hang) sleep 600 ;;
        slow_term)
            trap 'sleep 0.5; echo "cleaned pid=$$" >> logs/lane-cleaned.log; exit 143' TERM
            while :; do sleep 0.05; done ;;
    esac
done < "$scenes"
"#;

/// A suite of lane `l` (`prestart` as given, `lane_env` its env) on `ids` ids, with
/// these scenes (`name`, behaviour), whose processes carry a token of their own.
fn prestart_suite(prestart: bool, ids: usize, lane_env: &str, scenes: &[(&str, &str)]) -> Suite {
    let s = Suite::with_logs();
    s.script("lane.sh", PRESTART_LANE);
    let token = format!("pre{}x{}", std::process::id(), s.dir().display());
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nenv:\n  LANE_TOKEN: \"{token}\"\nlock:\n  submit: \"{TASK_SUBMIT} --timeout 60 --device auto --device-num {{device_count}} --run {{run}}\"\n  device_count: {ids}\n  grace: 2s\nlanes:\n  l:\n    run: \"./lane.sh {{scenes}} {{results}} {{devices}}\"\n    prestart: {prestart}\n    env: {{{lane_env}}}\nscenes:\n{}",
        lane_scenes(scenes)
    ));
    s
}

/// `scenerun device` on the pool, running; cancelled (SIGTERM) and waited for if the test
/// fails before it ends, so that no lane is left behind.
pub(super) struct Device(pub(super) Option<Child>);

fn device(s: &Suite, pool: &Pool) -> Device {
    device_with(s, pool, &[])
}

/// `device`, with these variables set for it.
pub(super) fn device_with(s: &Suite, pool: &Pool, env: &[(&str, &str)]) -> Device {
    let c = scenerun_process()
        .envs(env.iter().copied())
        .current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .arg("device")
        .env("TASK_SUBMIT_DEVICES", &pool.devices)
        .env("TASK_SUBMIT_POOL", pool.path("pool"))
        .env("TASK_SUBMIT_LOG", pool.log())
        .env("TASK_SUBMIT_GRACE", "1")
        .env_remove("TASK_DEVICE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start scenerun device");
    Device(Some(c))
}

impl Device {
    pub(super) fn signal(&self, sig: i32) {
        let pid = self.0.as_ref().expect("running").id();
        unsafe { libc::kill(pid as i32, sig) };
    }

    /// Wait for it to end: what it printed.
    pub(super) fn output(mut self) -> Output {
        let child = self.0.take().expect("running");
        let pid = child.id();
        let o = child.wait_with_output().expect("scenerun device ends");
        assert!(!pid_alive(pid));
        o
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = wait_bounded(&mut c, Duration::from_secs(60));
        }
    }
}

/// Another job holding `ids` in the pool until `release`d (or dropped: a failed test
/// leaves no holder behind).
pub(super) struct Holder {
    child: Option<Child>,
    release: std::path::PathBuf,
}

pub(super) fn holder(pool: &Pool, ids: &str) -> Holder {
    let release = pool.path(&format!("release-{ids}"));
    let wait = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done",
        release.display()
    );
    let c = pool.spawn(&["--device", ids, "--run", &wait]);
    assert!(
        wait_until(Duration::from_secs(30), || pool.acquisitions() == 1),
        "the holder never got the ids: {}",
        fs::read_to_string(pool.log()).unwrap_or_default()
    );
    Holder {
        child: Some(c),
        release,
    }
}

impl Holder {
    /// Let go of the ids, and wait until it has.
    pub(super) fn release(&mut self) {
        let _ = fs::write(&self.release, "");
        if let Some(mut c) = self.child.take() {
            assert!(wait_bounded(&mut c, Duration::from_secs(30)).is_some());
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = fs::write(&self.release, "");
        if let Some(mut c) = self.child.take() {
            let _ = wait_bounded(&mut c, Duration::from_secs(30));
        }
    }
}

/// The suite's lane processes alive now (pid: command), found by their token.
fn lanes_alive(s: &Suite) -> Vec<String> {
    alive_with_token(s, true)
}

/// The suite's processes alive now (pid: command), found by the token in the
/// environment each started with; `lanes`: only those started as a lane process (a
/// child forked by a fork server started with the server's environment, not a lane's).
fn alive_with_token(s: &Suite, lanes: bool) -> Vec<String> {
    let token = format!("LANE_TOKEN=pre{}x{}", std::process::id(), s.dir().display());
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let env = fs::read(e.path().join("environ")).unwrap_or_default();
        let env = String::from_utf8_lossy(&env);
        let mine = env.split('\0').any(|v| v == token)
            && (!lanes || env.split('\0').any(|v| v.starts_with("SCENERUN_LANE=")));
        let cmd = fs::read(e.path().join("cmdline")).unwrap_or_default();
        if mine && !cmd.is_empty() && pid_alive(&name) {
            out.push(format!(
                "{name}: {}",
                String::from_utf8_lossy(&cmd).replace('\0', " ")
            ));
        }
    }
    out
}

/// `key=value` fields of each line of a log under the suite.
pub(super) fn fields(s: &Suite, rel: &str) -> Vec<BTreeMap<String, String>> {
    s.read(rel)
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn t(f: &BTreeMap<String, String>) -> f64 {
    f["t"].parse().expect("t is a number")
}

/// The acquisition and release times of scenerun's own lock call (the one that
/// wanted `auto:N`), if it got the lock.
fn window(pool: &Pool) -> Option<(f64, f64)> {
    let ev = pool.events();
    let pid = ev
        .iter()
        .find(|e| e.kind == "request" && e.get("want").starts_with("auto:"))?
        .get("pid")
        .to_string();
    let at = |kind: &str| {
        ev.iter()
            .find(|e| e.kind == kind && e.fields.get("pid") == Some(&pid))
            .map(Event::t)
    };
    Some((at("acquire")?, at("release")?))
}

/// How many lane processes started inside the lock window.
fn started_inside(s: &Suite, (acquire, release): (f64, f64)) -> usize {
    fields(s, "logs/lane-starts.log")
        .iter()
        .filter(|f| (acquire..=release).contains(&t(f)))
        .count()
}

fn sorted_outcomes(s: &Suite) -> Vec<(String, String)> {
    outcome_list(&report(s))
}

const FOUR: [(&str, &str); 4] = [("a", "pass"), ("b", "pass"), ("c", "pass"), ("d", "pass")];

#[test]
fn lanes_started_before_the_lock_start_none_inside_it_and_get_their_ids() {
    let pool = Pool::new("5,6");
    let s = prestart_suite(true, 2, "", &FOUR);
    let mut blocker = holder(&pool, "5,6");
    let child = device(&s, &pool);
    // Both lane processes get ready while another job holds the ids.
    assert!(wait_until(Duration::from_secs(60), || s
        .count("logs/lane-ready.log")
        == 2));
    blocker.release();
    let o = child.output();
    expect_code(&o, 0);
    let lock = window(&pool).expect("scenerun took the lock");
    assert_eq!(s.count("logs/lane-starts.log"), 2, "{}", show(&o));
    assert_eq!(
        started_inside(&s, lock),
        0,
        "{}",
        s.read("logs/lane-starts.log")
    );
    // Each started on the sentinel, and got one of the granted ids on its go file.
    for f in fields(&s, "logs/lane-starts.log") {
        assert_eq!(f["devices"], "__scenerun_devices__");
        assert_eq!(f["env"], "__scenerun_devices__");
    }
    let mut got: Vec<String> = fields(&s, "logs/lane-go.log")
        .iter()
        .map(|f| {
            assert_eq!(f["devices"], f["env"]);
            assert!(
                (lock.0..=lock.1).contains(&t(f)),
                "the ids came inside the lock"
            );
            f["devices"].clone()
        })
        .collect();
    got.sort();
    assert_eq!(got, ["5", "6"]);
    for f in fields(&s, "logs/lane-runs.log") {
        assert!(["5", "6"].contains(&f["devices"].as_str()), "{f:?}");
    }
    let r = report(&s);
    let lanes = r["device"]["lanes"].as_array().expect("lanes");
    assert_eq!(lanes.len(), 2);
    for l in lanes {
        assert_eq!(l["prestarted"], true, "{l:#}");
        assert!(num(&l["startup_before_lock_secs"], "before the lock") >= 0.0);
        assert!(l["log"].as_str().unwrap().ends_with(".log"), "{l:#}");
    }
    let prestarted = sorted_outcomes(&s);
    assert!(lanes_alive(&s).is_empty());

    // The same suite, its lanes started inside the lock: the same results, and every
    // lane process started inside the window (so the count above can fail).
    let pool = Pool::new("5,6");
    let s = prestart_suite(false, 2, "", &FOUR);
    let o = device(&s, &pool).output();
    expect_code(&o, 0);
    let lock = window(&pool).expect("scenerun took the lock");
    assert_eq!(
        started_inside(&s, lock),
        2,
        "{}",
        s.read("logs/lane-starts.log")
    );
    assert_eq!(sorted_outcomes(&s), prestarted);
    assert!(report(&s)["device"]["lanes"][0].get("prestarted").is_none());
}

#[test]
fn a_crash_inside_the_lock_restarts_the_lane_the_normal_way() {
    let pool = Pool::new("5");
    let s = prestart_suite(true, 1, "", &[("a", "pass"), ("b", "crash"), ("c", "pass")]);
    let o = device(&s, &pool).output();
    expect_code(&o, 1);
    assert_eq!(
        sorted_outcomes(&s),
        pairs(&[("a", "passed"), ("b", "failed"), ("c", "passed")])
    );
    let starts = fields(&s, "logs/lane-starts.log");
    assert_eq!(starts.len(), 2, "{}", show(&o));
    assert_eq!(starts[0]["devices"], "__scenerun_devices__");
    // The fresh process for the rest starts inside the lock, on the ids themselves.
    assert_eq!(starts[1]["devices"], "5");
    let lock = window(&pool).expect("scenerun took the lock");
    assert!((lock.0..=lock.1).contains(&t(&starts[1])));
    let lanes = r_lanes(&s);
    assert_eq!(lanes[0]["prestarted"], true);
    assert!(lanes[1].get("prestarted").is_none(), "{:#}", lanes[1]);
}

fn r_lanes(s: &Suite) -> Vec<Value> {
    report(s)["device"]["lanes"]
        .as_array()
        .expect("lanes")
        .clone()
}

/// A pytest lane with the plugin: collection happens before the lock, the session
/// fixture (a device runtime's init) only once the ids came, with the real id in the
/// suite's own `--device` option and in `$SCENERUN_DEVICES`.
#[test]
fn a_pytest_lane_collects_before_the_lock_and_starts_its_runtime_on_its_ids() {
    let py = venv_python();
    let pool = Pool::new("5");
    let s = Suite::with_logs();
    s.write(
        "tests/conftest.py",
        r#"import os, time, pytest

def pytest_addoption(parser):
    parser.addoption("--device", action="store", default="0")

def _log(what):
    with open("logs/events.log", "a") as f:
        f.write("%s t=%.6f\n" % (what, time.time()))

def pytest_collection_finish(session):
    _log("collected device=%s" % session.config.getoption("--device"))

@pytest.fixture(scope="session")
def runtime(pytestconfig):
    _log("runtime device=%s env=%s" % (pytestconfig.getoption("--device"), os.environ["SCENERUN_DEVICES"]))
    return pytestconfig.getoption("--device")
"#,
    );
    s.write(
        "tests/test_rt.py",
        "def test_one(runtime):\n    assert runtime == '5'\n\ndef test_two(runtime):\n    assert runtime == '5'\n",
    );
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlock:\n  submit: \"{TASK_SUBMIT} --timeout 60 --device auto --device-num {{device_count}} --run {{run}}\"\nlanes:\n  py:\n    run: \"{} -m pytest -p no:cacheprovider -q {{args}} --device {{devices}}\"\n    prestart: true\nscenes:\n  - name: one\n    device:\n      lane: py\n      args: [\"tests/test_rt.py::test_one\"]\n  - name: two\n    device:\n      lane: py\n      args: [\"tests/test_rt.py::test_two\"]\n",
        py.display()
    ));
    let mut blocker = holder(&pool, "5");
    let child = device(&s, &pool);
    assert!(wait_until(Duration::from_secs(60), || s
        .read("logs/events.log")
        .contains("collected")));
    blocker.release();
    let o = child.output();
    expect_code(&o, 0);
    let (acquire, _) = window(&pool).expect("scenerun took the lock");
    let ev = fields(&s, "logs/events.log");
    let text = s.read("logs/events.log");
    assert_eq!(ev.len(), 2, "one collection, one runtime init:\n{text}");
    let (collected, runtime) = (&ev[0], &ev[1]);
    assert!(text.starts_with("collected"), "{text}");
    assert_eq!(collected["device"], "__scenerun_devices__");
    assert!(t(collected) < acquire, "collected before the lock:\n{text}");
    assert!(
        t(runtime) > acquire,
        "the runtime starts inside the lock:\n{text}"
    );
    assert_eq!(
        (runtime["device"].as_str(), runtime["env"].as_str()),
        ("5", "5")
    );
    assert_eq!(
        sorted_outcomes(&s),
        pairs(&[("one", "passed"), ("two", "passed")])
    );
    let lanes = r_lanes(&s);
    assert_eq!(lanes.len(), 1, "{}", show(&o));
    assert_eq!(lanes[0]["prestarted"], true);
}

#[test]
fn a_cancel_while_queued_stops_the_waiting_lanes_and_takes_no_lock() {
    let pool = Pool::new("5,6");
    let s = prestart_suite(true, 2, "", &FOUR);
    let mut blocker = holder(&pool, "5,6");
    let child = device(&s, &pool);
    assert!(wait_until(Duration::from_secs(60), || s
        .count("logs/lane-ready.log")
        == 2));
    assert!(!lanes_alive(&s).is_empty(), "they wait");
    assert!(lock_tool_pid(&pool).is_some(), "queued");
    child.signal(libc::SIGTERM);
    let o = child.output();
    expect_code(&o, 2);
    assert!(lanes_alive(&s).is_empty(), "{:?}", lanes_alive(&s));
    blocker.release();
    assert_eq!(
        pool.acquisitions(),
        1,
        "only the holder's: {:?}",
        pool.events()
    );
    assert_eq!(pool.count("cancel"), 1);
    assert_eq!(s.count("logs/lane-go.log"), 0);
    assert!(outcomes(&report(&s)).values().all(|o| o == "not_run"));
}

#[test]
fn a_refused_lock_stops_the_waiting_lanes() {
    let s = prestart_suite(true, 2, "", &FOUR);
    // A lock tool that refuses once both lanes wait, without running `{run}`.
    s.script(
        "refuse.sh",
        "#!/bin/sh\nwhile [ \"$(wc -l < logs/lane-ready.log 2>/dev/null || echo 0)\" -lt 2 ]; do sleep 0.02; done\necho 'no devices for you' >&2\nexit 1\n",
    );
    let text = s
        .read("scenes.yaml")
        .replace(&format!("\"{TASK_SUBMIT} --timeout 60 --device auto --device-num {{device_count}} --run {{run}}\""), "\"./refuse.sh {run}\"");
    s.manifest(&text);
    let o = s.cmd(&["device"]).output().unwrap();
    expect_code(&o, 3);
    assert!(stderr(&o).contains("no devices for you"), "{}", show(&o));
    assert_eq!(s.count("logs/lane-ready.log"), 2);
    assert!(lanes_alive(&s).is_empty(), "{:?}", lanes_alive(&s));
    assert_eq!(s.count("logs/lane-go.log"), 0);
    let r = report(&s);
    assert_eq!(scene_in(&r, "a")["infra"], "lock_failed", "{r:#}");
}

/// The lock tool SIGKILLed while the lanes wait in the queue, and while they run; the
/// inner run SIGKILLed while they run: `device` exits 3 and no lane process is alive
/// 0.5 s after the lock tool (or the inner run) died.
#[test]
fn a_lost_lock_stops_the_lanes_waiting_or_running() {
    for case in ["queued", "running", "inner"] {
        let pool = Pool::new("5,6");
        let hang = [("a", "hang"), ("b", "hang"), ("c", "pass"), ("d", "pass")];
        let s = prestart_suite(true, 2, "", &hang);
        let mut blocker = (case == "queued").then(|| holder(&pool, "5,6"));
        let child = device(&s, &pool);
        let ready = match case {
            "queued" => "logs/lane-ready.log",
            _ => "logs/lane-runs.log",
        };
        assert!(
            wait_until(Duration::from_secs(60), || s.count(ready) == 2),
            "{case}: {}",
            s.read("logs/lane-starts.log")
        );
        let victim = match case {
            "inner" => inner_pid(&s).expect("the inner run"),
            _ => lock_tool_pid(&pool).expect("scenerun's lock request"),
        };
        let killed = unix_secs();
        unsafe { libc::kill(victim, libc::SIGKILL) };
        let wait = killed + 0.5 - unix_secs();
        if wait > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
        assert!(
            lanes_alive(&s).is_empty(),
            "{case}: lanes alive 0.5 s after the kill: {:?}",
            lanes_alive(&s)
        );
        let o = child.output();
        expect_code(&o, 3);
        if let Some(b) = blocker.as_mut() {
            b.release();
        }
        assert!(lanes_alive(&s).is_empty());
    }
}

/// `scenerun device` itself SIGKILLed while its lanes wait in the queue, and while they
/// run: none of them is alive 0.5 s later (its watchdog, and inside the lock the inner
/// run's watch over it, kill them), and the lock tool still releases the ids.
#[test]
fn a_killed_device_leaves_no_lane_waiting_or_running() {
    for case in ["queued", "running"] {
        let pool = Pool::new("5,6");
        let hang = [("a", "hang"), ("b", "hang"), ("c", "pass"), ("d", "pass")];
        let s = prestart_suite(true, 2, "", &hang);
        let mut blocker = (case == "queued").then(|| holder(&pool, "5,6"));
        let child = device(&s, &pool);
        let ready = match case {
            "queued" => "logs/lane-ready.log",
            _ => "logs/lane-runs.log",
        };
        assert!(wait_until(Duration::from_secs(60), || s.count(ready) == 2));
        assert!(lock_tool_pid(&pool).is_some());
        let killed = unix_secs();
        child.signal(libc::SIGKILL);
        let _ = child.output();
        let wait = killed + 0.5 - unix_secs();
        if wait > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(wait));
        }
        assert!(
            lanes_alive(&s).is_empty(),
            "{case}: lanes alive 0.5 s after the kill: {:?}",
            lanes_alive(&s)
        );
        if let Some(b) = blocker.as_mut() {
            b.release();
        }
        // Running: the lock tool had the ids, its inner run found scenerun gone:
        // released. Queued: the lock tool died with its device (the watchdog), so no
        // orphan request takes the ids later: the holder's is the only acquisition.
        assert!(
            wait_until(Duration::from_secs(60), || pool.count("release")
                == pool.acquisitions()
                && pool.acquisitions() == 1),
            "{case}: {:?}",
            pool.events()
        );
        assert_eq!(
            s.count("logs/lane-go.log"),
            if case == "queued" { 0 } else { 2 }
        );
        assert!(lanes_alive(&s).is_empty());
    }
}

/// A cancel inside the lock reaches the adopted lanes as it reaches any lane: SIGTERM
/// to their groups, their handlers get the grace, the scenes are interrupted, and no
/// lane process is alive 0.5 s after the lock tool released.
#[test]
fn a_cancel_inside_the_lock_gives_the_adopted_lanes_their_grace() {
    let pool = Pool::new("5,6");
    let scenes = [
        ("a", "slow_term"),
        ("b", "slow_term"),
        ("c", "pass"),
        ("d", "pass"),
    ];
    let s = prestart_suite(true, 2, "", &scenes);
    let child = device(&s, &pool);
    assert!(wait_until(Duration::from_secs(60), || s
        .count("logs/lane-runs.log")
        == 2));
    child.signal(libc::SIGTERM);
    let o = child.output();
    expect_code(&o, 2);
    assert_eq!(s.count("logs/lane-cleaned.log"), 2, "{}", show(&o));
    let release = pool
        .events()
        .iter()
        .find(|e| e.kind == "release" && e.get("devices") == "5,6")
        .map(Event::t)
        .expect("released");
    let wait = release + 0.5 - unix_secs();
    if wait > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(wait));
    }
    assert!(lanes_alive(&s).is_empty(), "{:?}", lanes_alive(&s));
    let r = report(&s);
    assert_eq!(scene_in(&r, "a")["outcome"], "interrupted", "{r:#}");
    assert_eq!(scene_in(&r, "c")["outcome"], "not_run", "{r:#}");
}

/// The pid of scenerun's lock tool, once it has asked for the ids.
fn lock_tool_pid(pool: &Pool) -> Option<i32> {
    let mut pid = None;
    wait_until(Duration::from_secs(30), || {
        pid = pool
            .events()
            .iter()
            .find(|e| e.kind == "request" && e.get("want").starts_with("auto:"))
            .and_then(|e| e.get("pid").parse().ok());
        pid.is_some()
    });
    pid
}

/// The pid of the suite's inner run (`scenerun inner <its plan>`).
fn inner_pid(s: &Suite) -> Option<i32> {
    let dir = s.dir().display().to_string();
    fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let cmd = fs::read(e.path().join("cmdline")).ok()?;
        let cmd = String::from_utf8_lossy(&cmd).to_string();
        let args: Vec<&str> = cmd.split('\0').collect();
        // Anywhere in the line: under qemu-user through binfmt_misc the kernel's command
        // line starts with the interpreter (docs/install.md#aarch64).
        let inner = args
            .windows(3)
            .any(|w| w[0].ends_with("scenerun") && w[1] == "inner" && w[2].contains(&dir));
        inner.then(|| e.file_name().to_string_lossy().parse().ok())?
    })
}

fn unix_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A process started before the lock that ends before its ids came (it refuses the
/// sentinel), or right after them without a word: its batch runs in a process started
/// inside the lock, with a warning, and no scene is lost.
#[test]
fn a_lane_that_ends_before_it_is_ready_runs_its_batch_in_a_fresh_process() {
    for (mode, warning) in [
        (
            "LANE_REFUSES_SENTINEL",
            "ended before its ids came (exited with status 3",
        ),
        (
            "LANE_SILENT_GO",
            "ended before it was ready (exited with status 3",
        ),
    ] {
        let pool = Pool::new("5");
        let s = prestart_suite(
            true,
            1,
            &format!("{mode}: \"1\""),
            &[("a", "pass"), ("b", "pass")],
        );
        let mut blocker = holder(&pool, "5");
        let child = device(&s, &pool);
        // The lock comes once the first process has ended and been reaped (or waits,
        // silent).
        assert!(wait_until(Duration::from_secs(60), || match mode {
            "LANE_SILENT_GO" => s.count("logs/lane-ready.log") == 1,
            _ => status_written(&s),
        }));
        blocker.release();
        let o = child.output();
        expect_code(&o, 0);
        let err = stderr(&o);
        assert_eq!(err.matches(warning).count(), 1, "{mode}: {err}");
        assert!(
            err.contains("its batch runs in a process started now"),
            "{err}"
        );
        assert_eq!(
            sorted_outcomes(&s),
            pairs(&[("a", "passed"), ("b", "passed")]),
            "{mode}"
        );
        let starts = fields(&s, "logs/lane-starts.log");
        assert_eq!(starts.len(), 2, "{mode}: {}", show(&o));
        assert_eq!(
            starts[1]["devices"], "5",
            "the fresh one gets the ids itself"
        );
        assert!(lanes_alive(&s).is_empty());
    }
}

/// A lane command that does not wait for its ids runs its batch before the lock, on the
/// sentinel: what it reported is not taken, it is stopped, and its batch runs in a process
/// started inside the lock.
#[test]
fn results_written_before_the_ids_came_are_not_taken() {
    let pool = Pool::new("5");
    let s = prestart_suite(
        true,
        1,
        "LANE_IGNORES_GO: \"1\"",
        &[("a", "pass"), ("b", "pass")],
    );
    let mut blocker = holder(&pool, "5");
    let child = device(&s, &pool);
    assert!(wait_until(Duration::from_secs(60), || s
        .count("logs/lane-runs.log")
        == 2));
    blocker.release();
    let o = child.output();
    expect_code(&o, 0);
    let err = stderr(&o);
    assert_eq!(
        err.matches("reported results before it had its ids")
            .count(),
        1,
        "{err}"
    );
    let runs: Vec<String> = fields(&s, "logs/lane-runs.log")
        .iter()
        .map(|f| f["devices"].clone())
        .collect();
    assert_eq!(
        runs,
        ["__scenerun_devices__", "__scenerun_devices__", "5", "5"]
    );
    let r = report(&s);
    for name in ["a", "b"] {
        assert_eq!(scene_in(&r, name)["outcome"], "passed");
        assert_eq!(scene_in(&r, name)["devices"], serde_json::json!(["5"]));
    }
    assert!(lanes_alive(&s).is_empty());
}

/// `scenerun device` wrote the exit status of a lane process it started (it ended).
fn status_written(s: &Suite) -> bool {
    let runs = s.path("build/scenerun/device/runs");
    fs::read_dir(runs)
        .into_iter()
        .flatten()
        .flatten()
        .any(|run| {
            fs::read_dir(run.path().join("lanes"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|f| f.file_name().to_string_lossy().ends_with(".status"))
        })
}

#[test]
fn plan_shows_which_lane_processes_start_before_the_lock() {
    let scenes = [("a", "pass"), ("b", "pass"), ("c", "pass")];
    let s = prestart_suite(true, 2, "", &scenes);
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 0);
    let out = stdout(&o);
    assert_eq!(
        out.matches("one process, started before the lock, start-up")
            .count(),
        2,
        "{out}"
    );
    let procs = planned_processes(&s);
    assert_eq!(procs.len(), 2);
    assert!(procs.iter().all(|p| p["prestart"] == true), "{procs:#?}");
    let o = s.cmd(&["device", "--dry-run"]).output().unwrap();
    assert!(
        stdout(&o).contains("started before the lock"),
        "{}",
        show(&o)
    );
    // Without it, or without the lock, none does.
    let s = prestart_suite(false, 2, "", &scenes);
    let out = stdout(&s.cmd(&["plan"]).output().unwrap());
    assert!(!out.contains("before the lock"), "{out}");
    let s = prestart_suite(true, 2, "", &scenes);
    let o = s
        .cmd(&["plan", "--format", "json", "--no-lock", "--devices", "0,1"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let procs = v["device"]["processes"].as_array().unwrap();
    assert!(procs.iter().all(|p| p["prestart"] == false), "{procs:#?}");
}

/// Lanes `l` (scenes a, b) and `m` (scenes c, d), both `prestart` as given, on one id:
/// the inner run starts `m`'s process only after `l`'s, in a later wave.
fn two_lane_suite(prestart: &str) -> Suite {
    let s = Suite::with_logs();
    s.script("lane.sh", PRESTART_LANE);
    let token = format!("pre{}x{}", std::process::id(), s.dir().display());
    let lane = |name: &str| {
        format!("  {name}:\n    run: \"./lane.sh {{scenes}} {{results}} {{devices}}\"\n    prestart: {prestart}\n")
    };
    let scenes = lane_scenes(&[("a", "pass"), ("b", "pass")])
        + &lane_scenes(&[("c", "pass"), ("d", "pass")]).replace("lane: l", "lane: m");
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nenv:\n  LANE_TOKEN: \"{token}\"\nlock:\n  submit: \"{TASK_SUBMIT} --timeout 60 --device auto --device-num {{device_count}} --run {{run}}\"\n  device_count: 1\n  grace: 2s\nlanes:\n{}{}scenes:\n{scenes}",
        lane("l"),
        lane("m"),
    ));
    s
}

#[test]
fn prestart_all_starts_the_later_waves_before_the_lock_too() {
    let mut inside = Vec::new();
    for prestart in ["all", "true"] {
        let pool = Pool::new("7");
        let s = two_lane_suite(prestart);
        let mut blocker = holder(&pool, "7");
        let child = device(&s, &pool);
        let ready = if prestart == "all" { 2 } else { 1 };
        assert!(
            wait_until(Duration::from_secs(60), || s.count("logs/lane-ready.log")
                == ready),
            "{prestart}: {} ready",
            s.count("logs/lane-ready.log")
        );
        blocker.release();
        let o = child.output();
        expect_code(&o, 0);
        let lock = window(&pool).expect("scenerun took the lock");
        assert_eq!(s.count("logs/lane-starts.log"), 2, "{}", show(&o));
        inside.push(started_inside(&s, lock));
        let outcomes = sorted_outcomes(&s);
        assert!(outcomes.iter().all(|(_, o)| o == "passed"), "{outcomes:?}");
        assert_eq!(outcomes.len(), 4);
        let before = planned_processes(&s)
            .iter()
            .filter(|p| p["prestart"] == true)
            .count();
        assert_eq!(before, ready, "{prestart}: --plan says as many as started");
        assert!(lanes_alive(&s).is_empty());
    }
    // `all`: no lane process started under the lock; `true`: the second wave's did.
    assert_eq!(inside, [0, 1]);
}

#[test]
fn a_prestart_that_is_neither_true_false_nor_all_is_a_manifest_error() {
    let s = two_lane_suite("sometimes");
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    let err = stderr(&o);
    assert!(
        err.contains("lanes.l.prestart") && err.contains("`sometimes` is not a prestart"),
        "{err}"
    );
}

/// A pytest lane run through `scenerun_pytest fork`, two lanes of two scenes on one id,
/// `prestart: all`: both processes start before the lock. `heavy.py` stands for torch: it
/// logs each import. `server`: the manifest has a `fork_server` that preloads it.
pub(super) fn forking_suite(server: Option<&str>) -> Suite {
    let py = venv_python();
    let s = Suite::with_logs();
    s.write(
        "heavy.py",
        "import os\nwith open('logs/heavy.log', 'a') as f:\n    f.write('imported pid=%d\\n' % os.getpid())\n",
    );
    s.write(
        "tests/conftest.py",
        "import heavy\n\ndef pytest_addoption(parser):\n    parser.addoption('--device', action='store', default='0')\n",
    );
    s.write(
        "tests/test_f.py",
        r#"import os, signal

def _log(name):
    with open("logs/ran.log", "a") as f:
        f.write("%s pid=%d pgid=%d devices=%s\n" % (name, os.getpid(), os.getpgrp(), os.environ["SCENERUN_DEVICES"]))

def test_a1(): _log("a1")
def test_a2(): _log("a2")
def test_b1(): _log("b1")
def test_b2():
    _log("b2")
    assert os.environ.get("ONLY_B") == "yes", "the lane's own env"
def test_crash():
    os.kill(os.getpid(), signal.SIGKILL)
"#,
    );
    let token = format!("pre{}x{}", std::process::id(), s.dir().display());
    let lane = |env: &str| {
        format!(
            "    run: \"{} -m scenerun_pytest fork pytest -p no:cacheprovider -q {{args}} --device {{devices}}\"\n    prestart: all\n    env: {{{env}}}\n",
            py.display()
        )
    };
    let scene = |name: &str, lane: &str| {
        format!("  - name: {name}\n    device:\n      lane: {lane}\n      args: [\"tests/test_f.py::test_{name}\"]\n")
    };
    let server = server
        .map(|run| format!("fork_server:\n  run: \"{run}\"\n  start_timeout: 60s\n"))
        .unwrap_or_default();
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nenv:\n  LANE_TOKEN: \"{token}\"\n{server}lock:\n  submit: \"{TASK_SUBMIT} --timeout 60 --device auto --device-num {{device_count}} --run {{run}}\"\n  device_count: 1\n  grace: 2s\nlanes:\n  a:\n{}  b:\n{}scenes:\n{}{}{}{}",
        lane(""),
        lane("ONLY_B: \"yes\""),
        scene("a1", "a"),
        scene("a2", "a"),
        scene("b1", "b"),
        scene("b2", "b"),
    ));
    s
}

pub(super) fn preloading(py: &std::path::Path) -> String {
    format!("{} -m scenerun_pytest zygote heavy pytest", py.display())
}

/// Every process of the suite alive now (a lane, the server, what it forked): its
/// token is in the environment each started with.
pub(super) fn suite_procs_alive(s: &Suite) -> Vec<String> {
    alive_with_token(s, false)
}

/// The fork server and the children it forked, alive now (they carry its command line;
/// the `sh -c` that started the server, when it stays, is not one of them).
pub(super) fn forked(s: &Suite) -> usize {
    suite_procs_alive(s)
        .iter()
        .filter(|p| p.contains("scenerun_pytest zygote") && !p.contains(": sh -c "))
        .count()
}

#[test]
fn lane_processes_fork_from_the_fork_server_and_import_its_modules_once() {
    let py = venv_python();
    for server in [None, Some(preloading(&py))] {
        let pool = Pool::new("5");
        let s = forking_suite(server.as_deref());
        let mut blocker = holder(&pool, "5");
        let child = device(&s, &pool);
        // Both lanes collect before the lock (the conftest imported `heavy`).
        assert!(wait_until(Duration::from_secs(60), || s
            .count("logs/heavy.log")
            >= if server.is_some() { 1 } else { 2 }));
        std::thread::sleep(Duration::from_millis(300));
        blocker.release();
        let o = child.output();
        expect_code(&o, 0);
        assert!(
            outcomes(&report(&s)).values().all(|o| o == "passed"),
            "{}",
            show(&o)
        );
        let ran = fields(&s, "logs/ran.log");
        assert_eq!(ran.len(), 4, "{}", s.read("logs/ran.log"));
        assert!(
            ran.iter().all(|f| f["devices"] == "5"),
            "{}",
            s.read("logs/ran.log")
        );
        let lanes = r_lanes(&s);
        assert_eq!(lanes.len(), 2, "{}", show(&o));
        assert!(lanes.iter().all(|l| l["prestarted"] == true), "{lanes:?}");
        // The tests ran in the group of the process scenerun started for their lane.
        let pgids: BTreeSet<&str> = ran.iter().map(|f| f["pgid"].as_str()).collect();
        assert_eq!(pgids.len(), 2, "{}", s.read("logs/ran.log"));
        let imports = s.count("logs/heavy.log");
        match &server {
            None => assert_eq!(imports, 2, "one per process"),
            Some(_) => {
                assert_eq!(
                    imports,
                    1,
                    "once, in the server: {}\n{}\n{}",
                    s.read("logs/heavy.log"),
                    s.read("build/scenerun/logs/fork-server.log"),
                    show(&o)
                );
                assert!(
                    ran.iter().all(|f| f["pid"] != f["pgid"]),
                    "forked, not started"
                );
            }
        }
        assert!(
            suite_procs_alive(&s).is_empty(),
            "{:?}",
            suite_procs_alive(&s)
        );
    }
}

#[test]
fn a_lane_forked_from_the_server_that_dies_of_a_signal_is_reported_as_one_that_was_started() {
    let py = venv_python();
    let verdict = |server: Option<String>| {
        let s = forking_suite(server.as_deref());
        let text = s.read("scenes.yaml").replace(
            "  - name: a2\n",
            "  - name: crash\n    device:\n      lane: a\n      args: [\"tests/test_f.py::test_crash\"]\n  - name: a2\n",
        );
        s.manifest(&text);
        let pool = Pool::new("5");
        let o = device(&s, &pool).output();
        let r = report(&s);
        let crash = scene_in(&r, "crash");
        assert!(
            suite_procs_alive(&s).is_empty(),
            "{:?}",
            suite_procs_alive(&s)
        );
        (
            code(&o),
            crash["outcome"].clone(),
            message(&r, "crash"),
            outcomes(&r),
        )
    };
    let started = verdict(None);
    let forked = verdict(Some(preloading(&py)));
    assert_eq!(started.1, "failed", "{started:?}");
    assert_eq!(forked, started);
}

#[test]
fn a_cancel_while_queued_stops_the_server_and_what_it_forked() {
    let py = venv_python();
    let pool = Pool::new("5");
    let s = forking_suite(Some(&preloading(&py)));
    let mut blocker = holder(&pool, "5");
    let child = device(&s, &pool);
    assert!(wait_until(Duration::from_secs(60), || s
        .count("logs/heavy.log")
        == 1));
    // The two lanes forked and waiting: the server and its two children.
    assert!(wait_until(Duration::from_secs(60), || forked(&s) == 3));
    child.signal(libc::SIGTERM);
    let o = child.output();
    expect_code(&o, 2);
    assert!(
        suite_procs_alive(&s).is_empty(),
        "{:?}",
        suite_procs_alive(&s)
    );
    blocker.release();
    assert!(outcomes(&report(&s)).values().all(|o| o == "not_run"));
    assert_eq!(s.count("logs/ran.log"), 0);
}

#[test]
fn a_server_that_never_gets_ready_is_said_and_the_lanes_start_their_own() {
    let pool = Pool::new("5");
    let s = forking_suite(Some("exit 3"));
    let o = device(&s, &pool).output();
    expect_code(&o, 0);
    assert!(
        stderr(&o).contains("the fork server is not there")
            && stderr(&o).contains("each lane process starts its own interpreter"),
        "{}",
        show(&o)
    );
    assert_eq!(s.count("logs/heavy.log"), 2);
    assert!(outcomes(&report(&s)).values().all(|o| o == "passed"));
}

#[test]
fn a_lane_whose_interpreter_differs_from_the_servers_starts_its_own() {
    let py = venv_python();
    let s = forking_suite(Some(&preloading(&py)));
    let text = s.read("scenes.yaml").replace(
        "env: {ONLY_B: \"yes\"}",
        "env: {ONLY_B: \"yes\", PYTHONPATH: \"tests\"}",
    );
    s.manifest(&text);
    let pool = Pool::new("5");
    let o = device(&s, &pool).output();
    expect_code(&o, 0);
    assert!(
        outcomes(&report(&s)).values().all(|o| o == "passed"),
        "{}",
        show(&o)
    );
    // The server's import, and lane b's own.
    assert_eq!(s.count("logs/heavy.log"), 2, "{}", s.read("logs/heavy.log"));
    let logs: String = fs::read_dir(s.path("build/scenerun/logs/lanes"))
        .unwrap()
        .flatten()
        .map(|e| fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(
        logs.contains(
            "the lane's PYTHONPATH differs from the server's (read only when an interpreter starts); running it as written"
        ),
        "{logs}"
    );
    assert!(
        suite_procs_alive(&s).is_empty(),
        "{:?}",
        suite_procs_alive(&s)
    );
}

/// `scenerun device` SIGKILLed while the forked lanes wait in the queue: its watchdog
/// kills every group it registered — the server's, and each lane's, which the forked
/// child joined — so nothing of the suite is alive 0.5 s later.
#[test]
fn a_killed_device_leaves_no_server_nor_forked_lane() {
    let py = venv_python();
    let pool = Pool::new("5");
    let s = forking_suite(Some(&preloading(&py)));
    let mut blocker = holder(&pool, "5");
    let child = device(&s, &pool);
    assert!(
        wait_until(Duration::from_secs(60), || forked(&s) == 3),
        "{:?}\n{}",
        suite_procs_alive(&s),
        s.read("build/scenerun/logs/fork-server.log")
    );
    let killed = unix_secs();
    child.signal(libc::SIGKILL);
    let _ = child.output();
    let wait = killed + 0.5 - unix_secs();
    if wait > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(wait));
    }
    // (The lock tool still queues: its own end is `a_killed_device_leaves_no_lane_...`'s.)
    let python: Vec<String> = suite_procs_alive(&s)
        .into_iter()
        .filter(|p| p.contains("scenerun_pytest"))
        .collect();
    assert!(python.is_empty(), "{python:?}");
    blocker.release();
    assert_eq!(s.count("logs/ran.log"), 0);
}
