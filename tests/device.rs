//! Integration tests: `scenerun device` and `scenerun run` (DESIGN.md §1, §7–§10).
//!
//! Every test has its own stand-in lock pool (`TASK_SUBMIT_POOL`) and event log
//! (`TASK_SUBMIT_LOG`). Assertions count events — lock acquisitions in the stand-in's
//! log, compiler / generator / device runs in the logging wrappers — and check the
//! reports; none depends on how long something took. Timestamps written by scripts are
//! only compared with each other (did two intervals overlap?).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

use crate::common::*;

// ------------------------------------------------------------------ helpers

/// One isolated stand-in lock pool: its lock directory and its event log.
struct Pool {
    tmp: tempfile::TempDir,
    devices: String,
}

/// One line of the stand-in's event log: `KIND key=value ...`.
#[derive(Debug, Clone)]
struct Event {
    kind: String,
    fields: HashMap<String, String>,
}

impl Event {
    fn get(&self, key: &str) -> &str {
        self.fields
            .get(key)
            .unwrap_or_else(|| panic!("event {self:?} has no field {key}"))
    }
    fn t(&self) -> f64 {
        self.get("t").parse().expect("t is a number")
    }
}

impl Pool {
    fn new(devices: &str) -> Pool {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::create_dir(tmp.path().join("pool")).unwrap();
        Pool {
            tmp,
            devices: devices.to_string(),
        }
    }

    fn log(&self) -> PathBuf {
        self.tmp.path().join("events.log")
    }

    /// Point a command at this pool.
    fn apply<'a>(&self, c: &'a mut Command) -> &'a mut Command {
        c.env("TASK_SUBMIT_DEVICES", &self.devices)
            .env("TASK_SUBMIT_POOL", self.tmp.path().join("pool"))
            .env("TASK_SUBMIT_LOG", self.log())
            .env("TASK_SUBMIT_GRACE", "1")
            .env_remove("TASK_DEVICE")
    }

    fn events(&self) -> Vec<Event> {
        fs::read_to_string(self.log())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let kind = words.next()?.to_string();
                let fields = words
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                Some(Event { kind, fields })
            })
            .collect()
    }

    fn count(&self, kind: &str) -> usize {
        self.events().iter().filter(|e| e.kind == kind).count()
    }

    fn acquisitions(&self) -> usize {
        self.count("acquire")
    }
}

/// `scenerun [--manifest ..] ARGS` in the suite dir, against `pool`.
fn run_in(s: &Suite, pool: &Pool, args: &[&str]) -> Output {
    let mut c = s.cmd(args);
    pool.apply(&mut c);
    c.output().expect("run scenerun")
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn show(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    )
}

#[track_caller]
fn expect_code(o: &Output, want: i32) {
    assert_eq!(code(o), want, "{}", show(o));
}

/// `scenerun warm` must succeed (outside any lock).
fn warm(s: &Suite, pool: &Pool, args: &[&str]) {
    let mut a = vec!["warm"];
    a.extend_from_slice(args);
    let o = run_in(s, pool, &a);
    expect_code(&o, 0);
}

/// Replace `from` (which must be present) in scenes.yaml.
fn edit_manifest(s: &Suite, from: &str, to: &str) {
    let text = s.read("scenes.yaml");
    assert!(text.contains(from), "`{from}` not in the manifest:\n{text}");
    s.manifest(&text.replacen(from, to, 1));
}

/// Add a key to the `lock:` section (it is the last section before `scenes:`).
fn lock_option(s: &Suite, line: &str) {
    edit_manifest(s, "\nscenes:\n", &format!("\n  {line}\nscenes:\n"));
}

/// The basic suite's header (toolchain, lock through the stand-in) with these scenes,
/// which need not compile anything.
fn suite_with(scenes: &str) -> Suite {
    let s = basic_suite(0);
    let text = s.read("scenes.yaml");
    assert!(text.ends_with("scenes:\n"));
    s.manifest(&format!("{text}{scenes}"));
    s
}

fn read_json(path: &Path) -> Value {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

fn report(s: &Suite) -> Value {
    read_json(&s.path("build/scenerun/report.json"))
}

/// scene name -> outcome, from report.json.
fn outcomes(r: &Value) -> BTreeMap<String, String> {
    r["scenes"]
        .as_array()
        .expect("scenes is an array")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn scene<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["scenes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no scene {name} in {r:#}"))
}

fn num(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// Wait (bounded) until `cond` holds; the bound only keeps a broken run from hanging.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "gave up waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A minimal XML reader: checks that tags are balanced and properly nested, that there is
/// one root, and returns the elements in document order.
#[derive(Debug)]
struct Elem {
    name: String,
    attrs: String,
    parent: Option<usize>,
}

impl Elem {
    fn attr(&self, key: &str) -> Option<String> {
        let pat = format!("{key}=\"");
        let i = self
            .attrs
            .match_indices(&pat)
            .find(|(i, _)| *i == 0 || self.attrs.as_bytes()[i - 1].is_ascii_whitespace())?
            .0
            + pat.len();
        let end = self.attrs[i..].find('"')?;
        Some(self.attrs[i..i + end].to_string())
    }
}

fn parse_xml(xml: &str) -> Vec<Elem> {
    let mut elems: Vec<Elem> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut roots = 0;
    let mut rest = xml;
    while let Some(i) = rest.find('<') {
        rest = &rest[i..];
        if let Some(r) = rest.strip_prefix("<![CDATA[") {
            rest = &r[r.find("]]>").expect("CDATA is closed") + 3..];
            continue;
        }
        if let Some(r) = rest.strip_prefix("<!--") {
            rest = &r[r.find("-->").expect("comment is closed") + 3..];
            continue;
        }
        if let Some(r) = rest.strip_prefix("<?") {
            rest = &r[r.find("?>").expect("declaration is closed") + 2..];
            continue;
        }
        let end = rest.find('>').expect("tag is closed");
        let tag = &rest[1..end];
        rest = &rest[end + 1..];
        assert!(!tag.contains('<'), "`<` inside a tag: {tag}");
        if let Some(name) = tag.strip_prefix('/') {
            let open = stack.pop().unwrap_or_else(|| panic!("stray </{name}>"));
            assert_eq!(elems[open].name, name.trim(), "mismatched close tag");
            continue;
        }
        let self_closing = tag.ends_with('/');
        let body = tag.trim_end_matches('/').trim();
        let (name, attrs) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
        assert!(!name.is_empty(), "empty tag name");
        assert_eq!(
            attrs.matches('"').count() % 2,
            0,
            "unbalanced quotes in <{body}>"
        );
        if stack.is_empty() {
            roots += 1;
        }
        elems.push(Elem {
            name: name.to_string(),
            attrs: attrs.to_string(),
            parent: stack.last().copied(),
        });
        if !self_closing {
            stack.push(elems.len() - 1);
        }
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    assert_eq!(roots, 1, "one root element");
    elems
}

/// junit.xml: testcase name -> names of its status children (failure/error/skipped).
fn junit_cases(path: &Path) -> BTreeMap<String, Vec<String>> {
    let xml = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elems = parse_xml(&xml);
    let n = elems.iter().filter(|e| e.name == "testcase").count();
    assert_eq!(n, xml.matches("<testcase").count(), "{xml}");
    let mut cases = BTreeMap::new();
    for (i, e) in elems
        .iter()
        .enumerate()
        .filter(|(_, e)| e.name == "testcase")
    {
        let name = e.attr("name").expect("testcase has a name");
        let status: Vec<String> = elems
            .iter()
            .filter(|c| c.parent == Some(i))
            .map(|c| c.name.clone())
            .filter(|n| matches!(n.as_str(), "failure" | "error" | "skipped"))
            .collect();
        assert!(cases.insert(name, status).is_none(), "duplicate testcase");
    }
    cases
}

/// A script that records `{devices}`, `$SCENERUN_DEVICES` and start/end timestamps
/// into logs/rec.log, then holds its ids for a moment.
fn recording_script(s: &Suite) {
    s.script(
        "rec.sh",
        "#!/bin/sh\n\
         echo \"start $1 $(date +%s.%N) $2 $SCENERUN_DEVICES\" >> logs/rec.log\n\
         sleep 0.4\n\
         echo \"end $1 $(date +%s.%N)\" >> logs/rec.log\n",
    );
}

#[derive(Debug)]
struct Interval {
    start: f64,
    end: f64,
    ids: Vec<String>,
}

/// Parse logs/rec.log into scene -> interval; checks `{devices}` == `$SCENERUN_DEVICES`.
fn intervals(s: &Suite) -> BTreeMap<String, Interval> {
    let mut out: BTreeMap<String, Interval> = BTreeMap::new();
    let text = s.read("logs/rec.log");
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[0] {
            "start" => {
                assert_eq!(w.len(), 5, "{line}");
                assert_eq!(
                    w[3], w[4],
                    "{{devices}} and $SCENERUN_DEVICES differ: {line}"
                );
                let prev = out.insert(
                    w[1].to_string(),
                    Interval {
                        start: w[2].parse().unwrap(),
                        end: f64::NAN,
                        ids: w[3].split(',').map(String::from).collect(),
                    },
                );
                assert!(prev.is_none(), "scene {} ran twice:\n{text}", w[1]);
            }
            "end" => out.get_mut(w[1]).expect("end after start").end = w[2].parse().unwrap(),
            _ => panic!("bad line {line}"),
        }
    }
    for (name, i) in &out {
        assert!(i.end >= i.start, "{name} did not finish: {text}");
    }
    out
}

fn overlap(a: &Interval, b: &Interval) -> bool {
    a.start < b.end && b.start < a.end
}

fn pid_is_gone(pid: &str) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie is dead too (its parent just has not reaped it yet).
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

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
    for what in [
        "s0: compile k",
        "s0: fixture",
        "s0: golden",
        "s1: fixture",
        "s1: golden",
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
    assert!(err.contains("s1: fixture"), "{err}");
    assert!(err.contains("s1: golden"), "{err}");
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

// ------------------------------------------------------------------ granted ids

#[test]
fn scenes_receive_the_granted_ids() {
    let s = suite_with(
        "  - name: solo\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n      exclusive: true\n\
         \x20 - name: pair\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n      devices: 2\n\
         \x20 - name: a0\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: a1\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: a2\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: a3\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: a4\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n",
    );
    lock_option(&s, "device_count: 4");
    recording_script(&s);
    let pool = Pool::new("4-7");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    let acq = pool.events();
    let acq: Vec<&Event> = acq.iter().filter(|e| e.kind == "acquire").collect();
    assert_eq!(acq.len(), 1);
    assert_eq!(acq[0].get("devices"), "4,5,6,7");

    let runs = intervals(&s);
    assert_eq!(runs.len(), 7, "{runs:?}");
    let pool_ids: BTreeSet<String> = (4..=7).map(|i| i.to_string()).collect();
    for (name, i) in &runs {
        let ids: BTreeSet<String> = i.ids.iter().cloned().collect();
        assert_eq!(
            ids.len(),
            i.ids.len(),
            "{name} got a repeated id: {:?}",
            i.ids
        );
        assert!(
            ids.is_subset(&pool_ids),
            "{name} got {:?}, not granted",
            i.ids
        );
        let want = if name == "pair" { 2 } else { 1 };
        assert_eq!(i.ids.len(), want, "{name} got {:?}", i.ids);
    }
    for (name, i) in &runs {
        // The exclusive scene overlaps nothing.
        if name != "solo" {
            assert!(
                !overlap(&runs["solo"], i),
                "solo overlapped {name}: {runs:?}"
            );
        }
        // Scenes that overlap hold disjoint ids, so concurrency never exceeds the grant.
        let mut in_use: BTreeSet<&String> = i.ids.iter().collect();
        for (other, j) in &runs {
            if other != name && overlap(i, j) && j.start <= i.start {
                for id in &j.ids {
                    assert!(
                        in_use.insert(id),
                        "{name} and {other} both held {id}: {runs:?}"
                    );
                }
            }
        }
        assert!(in_use.len() <= 4);
    }
    // At any scene start, the ids held by running scenes fit in the grant.
    for i in runs.values() {
        let held: usize = runs
            .values()
            .filter(|j| j.start <= i.start && i.start < j.end)
            .map(|j| j.ids.len())
            .sum();
        assert!(held <= 4, "{held} ids in use at once: {runs:?}");
    }
    // The report says the same.
    let r = report(&s);
    assert_eq!(
        r["device"]["granted"],
        serde_json::json!(["4", "5", "6", "7"])
    );
    for (name, i) in &runs {
        assert_eq!(
            scene(&r, name)["devices"],
            serde_json::json!(i.ids),
            "{name}"
        );
    }
}

#[test]
fn a_timed_out_scene_is_killed_and_reported() {
    let s = suite_with(
        "  - name: slow\n    device:\n      run: \"./slow.sh\"\n      timeout: 1s\n\
         \x20 - name: quick\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n",
    );
    recording_script(&s);
    s.script(
        "slow.sh",
        "#!/bin/sh\nsleep 30 &\necho $! > logs/slow.pid\nwait\necho survived >> logs/slow.log\n",
    );
    let pool = Pool::new("0-1");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 1);
    assert_eq!(pool.acquisitions(), 1);
    let r = report(&s);
    assert_eq!(r["exit_code"], 1);
    let slow = scene(&r, "slow");
    assert_eq!(slow["outcome"], "timed_out", "{r:#}");
    assert!(
        slow["message"].as_str().unwrap_or("").contains("timed out"),
        "{slow:#}"
    );
    assert_eq!(
        scene(&r, "quick")["outcome"],
        "passed",
        "the other scene still ran"
    );
    assert!(stdout(&o).contains("timed out"), "{}", show(&o));
    let cases = junit_cases(&s.path("build/scenerun/junit.xml"));
    assert_eq!(cases["slow"], ["failure"], "{cases:?}");
    assert!(cases["quick"].is_empty());
    // The whole process group was killed: the background sleep is gone too.
    let pid = s.read("logs/slow.pid");
    let pid = pid.trim();
    assert!(!pid.is_empty(), "slow.sh did not start");
    wait_for("the timed-out scene's child to die", || pid_is_gone(pid));
    assert_eq!(
        s.read("logs/slow.log"),
        "",
        "the scene's script went on after its timeout"
    );
}

#[test]
fn a_scene_needing_more_ids_than_granted_fails_cleanly() {
    let s = suite_with(
        "  - name: wide\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n      devices: 2\n\
         \x20 - name: narrow\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n",
    );
    recording_script(&s);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);

    // Fewer ids granted than the scene needs: it fails with a message, the rest run.
    let o = run_in(&s, &pool, &["device", "--no-lock", "--devices", "0"]);
    expect_code(&o, 1);
    let r = report(&s);
    let wide = scene(&r, "wide");
    assert_eq!(wide["outcome"], "failed", "{r:#}");
    let msg = wide["message"].as_str().unwrap_or("");
    assert!(msg.contains("needs 2 devices"), "{msg}");
    assert!(stdout(&o).contains("needs 2 devices"), "{}", show(&o));
    assert_eq!(scene(&r, "narrow")["outcome"], "passed");
    let runs = intervals(&s);
    assert!(!runs.contains_key("wide"), "wide ran on too few ids");
    assert_eq!(runs["narrow"].ids, ["0"]);

    // lock.device_count below a scene's need: a usage error before the lock.
    lock_option(&s, "device_count: 1");
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 4);
    let err = stderr(&o);
    assert!(err.contains("device_count"), "{err}");
    assert!(err.contains("needs 2"), "{err}");
    assert_eq!(pool.count("request"), 0);
}

// ------------------------------------------------------------------ warm failures, reports

/// basic_suite(n) whose scene `s{i}` has a fixture that fails in warm.
fn failing_fixture(s: &Suite, i: usize) {
    s.script(
        "fail.sh",
        "#!/bin/sh\necho \"fixture generator exploded\" >&2\nexit 3\n",
    );
    edit_manifest(
        s,
        &format!("run: \"./gen.sh {{out}} {i}\""),
        "run: \"./fail.sh {out}\"",
    );
}

#[test]
fn warm_failures_are_reported_in_junit_report_and_github() {
    let s = basic_suite(3);
    failing_fixture(&s, 1);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);

    let summary = s.path("summary.md");
    fs::write(&summary, "previous step\n").unwrap();
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary);
    let o = c.output().unwrap();
    expect_code(&o, 1);
    assert_eq!(
        pool.acquisitions(),
        1,
        "the other scenes still take the lock once"
    );
    assert_eq!(s.count("logs/device.log"), 2, "s1 must not run on a device");

    let r = report(&s);
    assert_eq!(r["exit_code"], 1);
    let o_ = outcomes(&r);
    assert_eq!(o_["s0"], "passed");
    assert_eq!(o_["s1"], "failed_in_warm");
    assert_eq!(o_["s2"], "passed");
    assert!(
        scene(&r, "s1")["message"]
            .as_str()
            .unwrap_or("")
            .contains("fixture"),
        "{r:#}"
    );

    let cases = junit_cases(&s.path("build/scenerun/junit.xml"));
    assert_eq!(cases.len(), 3, "one testcase per scene: {cases:?}");
    assert!(
        cases["s0"].is_empty() && cases["s2"].is_empty(),
        "{cases:?}"
    );
    assert_eq!(cases["s1"].len(), 1, "{cases:?}");
    assert!(matches!(cases["s1"][0].as_str(), "failure" | "error"));

    let out = stdout(&o);
    let errors: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("::error title="))
        .collect();
    assert!(!errors.is_empty(), "{out}");
    assert!(errors.iter().any(|l| l.contains("s1")), "{errors:?}");
    assert!(
        !errors.iter().any(|l| l.contains("s0") || l.contains("s2")),
        "{errors:?}"
    );

    let md = fs::read_to_string(&summary).unwrap();
    assert!(
        md.starts_with("previous step\n"),
        "the summary is appended to:\n{md}"
    );
    assert!(md.contains("| scene |"), "{md}");
    assert!(md.contains("|---"), "{md}");
    let row = |name: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{md}"))
            .to_string()
    };
    assert!(row("s1").contains("failed in warm"), "{md}");
    assert!(row("s0").contains("passed"), "{md}");
    assert!(row("s2").contains("passed"), "{md}");
}

#[test]
fn every_scene_failed_in_warm_exits_1_without_the_lock() {
    let s = basic_suite(2);
    s.script(
        "gen.sh",
        "#!/bin/sh\necho fixture >> logs/gen.log\necho nope >&2\nexit 1\n",
    );
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 1);
    assert_eq!(pool.count("request"), 0, "the lock was taken for nothing");
    assert_eq!(s.count("logs/device.log"), 0);
    let r = report(&s);
    assert_eq!(r["exit_code"], 1);
    assert!(
        outcomes(&r).values().all(|o| o == "failed_in_warm"),
        "{r:#}"
    );
    let cases = junit_cases(&s.path("build/scenerun/junit.xml"));
    assert_eq!(cases.len(), 2);
    assert!(cases.values().all(|st| st.len() == 1), "{cases:?}");
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
    assert_ne!(scene(&r, "s0")["outcome"], "passed");
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
    let stop = pool.tmp.path().join("stop");
    // Another job holds the only id until told to stop.
    let mut holder = std::process::Command::new(TASK_SUBMIT);
    holder
        .args(["--device-num", "1", "--run"])
        .arg(format!(
            "while [ ! -e '{}' ]; do sleep 0.1; done",
            stop.display()
        ))
        .env("TASK_SUBMIT_DEVICES", &pool.devices)
        .env("TASK_SUBMIT_POOL", pool.tmp.path().join("pool"))
        .env("TASK_SUBMIT_LOG", pool.log())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut holder = holder.spawn().expect("start the holder");
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
    edit_manifest(&s, "--max-time 120", "--max-time 1");
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
    wait_for("the killed scene's child to die", || pid_is_gone(pid));
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

/// Replace the lock command of a suite.
fn set_submit(s: &Suite, submit: &str) {
    let text = s.read("scenes.yaml");
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("submit:"))
        .expect("a submit line")
        .to_string();
    edit_manifest(s, &line, &format!("  submit: \"{submit}\""));
}

#[test]
fn ids_come_from_lock_device_env_and_may_be_ranges() {
    let s = suite_with(
        "  - name: a\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: b\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: c\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n",
    );
    recording_script(&s);
    // A lock tool of another make: hands over a range in its own variable.
    set_submit(&s, "env -u TASK_DEVICE MY_IDS=8-9 sh -c {run}");
    lock_option(&s, "device_env: MY_IDS");
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    let runs = intervals(&s);
    assert_eq!(runs.len(), 3);
    for (name, i) in &runs {
        assert!(
            i.ids == ["8"] || i.ids == ["9"],
            "{name} got {:?}, not one of the granted 8-9",
            i.ids
        );
    }
    assert_eq!(
        report(&s)["device"]["granted"],
        serde_json::json!(["8", "9"])
    );
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

// ------------------------------------------------------------------ --no-lock, --report-dir

#[test]
fn no_lock_runs_without_the_lock_tool_and_report_dir_moves_reports() {
    let s = basic_suite(3);
    // Even a lock tool that does not exist is never needed.
    edit_manifest(&s, TASK_SUBMIT, "no-such-tool");
    let pool = Pool::new("0-7");
    warm(&s, &pool, &[]);
    let ci = s.path("ci");
    fs::create_dir_all(&ci).unwrap();
    let mut c = s.cmd(&[
        "device",
        "--no-lock",
        "--devices",
        "0-3",
        "--report-dir",
        "out/rep",
    ]);
    pool.apply(&mut c).current_dir(&ci);
    let o = c.output().unwrap();
    expect_code(&o, 0);
    assert_eq!(pool.count("request"), 0);
    assert_eq!(s.count("logs/device.log"), 3);
    for ids in s.read("logs/device.log").lines() {
        for id in ids.split(',') {
            assert!(
                ["0", "1", "2", "3"].contains(&id),
                "id {id} not in --devices 0-3"
            );
        }
    }
    // --report-dir is relative to the current directory, not the manifest.
    let rep = ci.join("out/rep");
    let r = read_json(&rep.join("report.json"));
    assert_eq!(r["exit_code"], 0);
    assert!(r["lock"].is_null(), "no lock was used: {r:#}");
    assert_eq!(
        r["device"]["granted"],
        serde_json::json!(["0", "1", "2", "3"])
    );
    let eff = num(&r["device"]["efficiency"], "efficiency");
    assert!((0.0..=1.0).contains(&eff), "efficiency {eff}");
    assert_eq!(junit_cases(&rep.join("junit.xml")).len(), 3);
    assert!(
        rep.join("logs/s0/device.log").is_file(),
        "device logs follow --report-dir"
    );
    assert!(!s.path("build/scenerun/report.json").exists());
    assert!(!s.path("build/scenerun/junit.xml").exists());
}

#[test]
fn devices_requires_no_lock() {
    let s = basic_suite(1);
    let pool = Pool::new("0-3");
    let o = run_in(&s, &pool, &["device", "--devices", "0-3"]);
    expect_code(&o, 4);
    assert_eq!(pool.count("request"), 0);
}

// ------------------------------------------------------------------ run = warm + device

#[test]
fn run_on_a_cold_cache_warms_then_takes_the_lock_once() {
    let s = basic_suite(3);
    let pool = Pool::new("0-3");
    let o = run_in(&s, &pool, &["run"]);
    expect_code(&o, 0);
    assert!(s.count("logs/cc.log") > 0, "run compiled nothing");
    assert_eq!(s.count("logs/gen.log"), 3);
    assert_eq!(s.count("logs/golden.log"), 3);
    assert_eq!(s.count("logs/device.log"), 3);
    assert_eq!(pool.acquisitions(), 1);
    assert!(outcomes(&report(&s)).values().all(|o| o == "passed"));

    // Warm again with nothing changed: no compiler, no generator; still one acquisition.
    let cc = s.count("logs/cc.log");
    let o = run_in(&s, &pool, &["run"]);
    expect_code(&o, 0);
    assert_eq!(s.count("logs/cc.log"), cc);
    assert_eq!(s.count("logs/gen.log"), 3);
    assert_eq!(pool.acquisitions(), 2);
}

#[test]
fn run_goes_on_to_the_device_phase_after_a_warm_failure() {
    let s = basic_suite(3);
    failing_fixture(&s, 0);
    let pool = Pool::new("0-3");
    let o = run_in(&s, &pool, &["run"]);
    expect_code(&o, 1);
    assert_eq!(pool.acquisitions(), 1);
    assert_eq!(s.count("logs/device.log"), 2);
    let r = report(&s);
    let o_ = outcomes(&r);
    assert_eq!(o_["s0"], "failed_in_warm", "{r:#}");
    assert_eq!(o_["s1"], "passed");
    assert_eq!(o_["s2"], "passed");
    assert_eq!(r["exit_code"], 1);
}

// ------------------------------------------------------------------ --dry-run

#[test]
fn dry_run_prints_the_lock_and_device_commands_and_runs_nothing() {
    let s = basic_suite(2);
    let pool = Pool::new("0-3");
    // Cold: it still shows everything and exits 0.
    let o = run_in(&s, &pool, &["device", "--dry-run"]);
    expect_code(&o, 0);
    let out = stdout(&o);
    let lock_line = out
        .lines()
        .find(|l| l.contains(TASK_SUBMIT))
        .unwrap_or_else(|| panic!("no lock command:\n{out}"));
    assert!(lock_line.contains("--device-num 1"), "{lock_line}");
    assert!(lock_line.contains("inner"), "{lock_line}");
    let device_lines: Vec<&str> = out.lines().filter(|l| l.contains("device.sh")).collect();
    assert_eq!(device_lines.len(), 2, "{out}");
    assert!(
        device_lines.iter().all(|l| l.contains("<devices>")),
        "{out}"
    );
    assert_eq!(pool.count("request"), 0);
    assert_eq!(s.count("logs/cc.log"), 0);
    assert_eq!(s.count("logs/gen.log"), 0);
    assert_eq!(s.count("logs/device.log"), 0);
    assert!(!s.path("build/scenerun/report.json").exists());

    // Warm: still nothing runs.
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device", "--dry-run"]);
    expect_code(&o, 0);
    assert_eq!(pool.count("request"), 0);
    assert_eq!(s.count("logs/device.log"), 0);
    assert!(
        !s.path("build/scenerun/device-plan.json").exists(),
        "dry run froze a plan"
    );
}

// ------------------------------------------------------------------ lock timings

#[test]
fn report_has_lock_timings() {
    let s = basic_suite(2);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    let r = report(&s);
    let lock = &r["lock"];
    let dev = &r["device"];
    let queue = num(&lock["queue_wait_secs"], "queue_wait_secs");
    let held = num(&lock["held_secs"], "held_secs");
    let busy = num(&dev["busy_secs"], "busy_secs");
    let eff = num(&dev["efficiency"], "efficiency");
    assert!(queue >= 0.0 && held >= 0.0 && busy >= 0.0, "{r:#}");
    assert!((0.0..=1.0).contains(&eff), "efficiency {eff}: {r:#}");
    assert!(
        busy > 0.0,
        "device steps ran, so the devices were busy: {r:#}"
    );
    assert!(busy <= held + 0.05, "busy longer than held: {r:#}");
    // The instants are ordered: called, inner started, inner ended, returned.
    let called = num(&lock["called_at"], "called_at");
    let started = num(&lock["inner_started_at"], "inner_started_at");
    let ended = num(&lock["inner_ended_at"], "inner_ended_at");
    let returned = num(&lock["returned_at"], "returned_at");
    assert!(
        called <= started && started <= ended && ended <= returned,
        "{lock:#}"
    );
    // The lock tool's own log brackets the inner run: scenerun called it before it asked
    // for ids, and the inner run started after it got them.
    let ev = pool.events();
    let t = |kind: &str| ev.iter().find(|e| e.kind == kind).expect(kind).t();
    assert!(called <= t("request") + 0.01, "{ev:?} {lock:#}");
    assert!(started + 0.01 >= t("acquire"), "{ev:?} {lock:#}");
    assert!(ended <= t("release") + 0.01, "{ev:?} {lock:#}");
    assert!(
        queue + 0.02 >= t("acquire") - t("request"),
        "{ev:?} {lock:#}"
    );
    assert_eq!(lock["exit_code"], 0);
    assert_eq!(dev["granted"], serde_json::json!(["0"]));
}
