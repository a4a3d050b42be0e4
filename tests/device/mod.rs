//! Integration tests: `scenerun device` and `scenerun run` (docs/device.md, docs/reports.md, docs/guarantees.md).
//!
//! Every test has its own stand-in lock pool (`TASK_SUBMIT_POOL`) and event log
//! (`TASK_SUBMIT_LOG`). Assertions count events — lock acquisitions in the stand-in's
//! log, compiler / generator / device runs in the logging wrappers — and check the
//! reports; none depends on how long something took. Timestamps written by scripts are
//! only compared with each other (did two intervals overlap?).
//!
//! This file holds the helpers the topic modules share: running against a pool,
//! manifest edits, report and junit readers, the recording device script.

mod endings;
mod ids;
mod lock;
mod lock_failures;
mod modes;
mod reports;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::common::*;

// ------------------------------------------------------------------ helpers

/// `scenerun [--manifest ..] ARGS` in the suite dir, against `pool`.
fn run_in(s: &Suite, pool: &Pool, args: &[&str]) -> Output {
    let mut c = s.cmd(args);
    pool.apply(&mut c);
    c.output().expect("run scenerun")
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
/// Wait (bounded) until `cond` holds; the bound only keeps a broken run from hanging.
fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    assert!(
        wait_until(Duration::from_secs(30), cond),
        "gave up waiting for {what}"
    );
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
