//! Integration tests: selection, content keys and the plan preview (docs/cli.md, docs/cache.md).
//! Keys are read from `plan --format json` (`warm.steps[].key`); previews are checked to
//! run nothing by counting the logging compiler and scripts.
//!
//! This file holds the helpers the topic modules share.

mod keys;
mod preview;
mod selection;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;

// ---------------------------------------------------------------------------------------
// helpers

// Stricter than common's lossy readers: plan output must be UTF-8.
fn stdout(out: &std::process::Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// `plan --format json ARGS`, which must exit 0.
fn plan_json(s: &Suite, args: &[&str]) -> Value {
    let mut all = vec!["plan", "--format", "json"];
    all.extend_from_slice(args);
    let out = s.cmd(&all).assert().success().get_output().clone();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)))
}

/// Every step's key, by `kind/scene/name`.
fn keys_of(v: &Value) -> BTreeMap<String, String> {
    v["warm"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                format!(
                    "{}/{}/{}",
                    s["kind"].as_str().unwrap(),
                    s["scene"].as_str().unwrap(),
                    s["name"].as_str().unwrap()
                ),
                s["key"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn keys(s: &Suite) -> BTreeMap<String, String> {
    keys_of(&plan_json(s, &[]))
}

/// The step ids whose key differs between two key maps over the same steps.
fn changed(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Vec<String> {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "same steps"
    );
    a.iter()
        .filter(|(id, k)| b[*id] != **k)
        .map(|(id, _)| id.clone())
        .collect()
}

/// Replace `from` (which must occur) by `to` in the suite's scenes.yaml.
fn edit_manifest(s: &Suite, from: &str, to: &str) {
    let text = s.read("scenes.yaml");
    assert!(text.contains(from), "scenes.yaml has no `{from}`:\n{text}");
    s.manifest(&text.replace(from, to));
}

/// Replace `from` (which must occur) by `to` in a suite file.
fn edit_file(s: &Suite, rel: &str, from: &str, to: &str) {
    let text = s.read(rel);
    assert!(text.contains(from), "{rel} has no `{from}`");
    s.write(rel, &text.replacen(from, to, 1));
}

/// The keys of a one-scene basic suite before and after `change`.
fn keys_around(change: impl FnOnce(&Suite)) -> Vec<String> {
    let s = basic_suite(1);
    let before = keys(&s);
    assert_eq!(before.len(), 3, "{before:?}");
    change(&s);
    let after = keys(&s);
    // Nothing ran to get these keys.
    assert_eq!(s.count("logs/cc.log"), 0);
    changed(&before, &after)
}

const K: &str = "kernel/s0/k";
const F: &str = "fixture/s0/fixture";
const G: &str = "golden/s0/golden";

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Escape a literal for an insta filter regex.
fn re(lit: &str) -> String {
    let mut out = String::new();
    for c in lit.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn scenerun_exe() -> PathBuf {
    assert_cmd::cargo::cargo_bin("scenerun")
        .canonicalize()
        .unwrap()
}
