//! Integration tests: warm (docs/guarantees.md, docs/cache.md, docs/warm.md).
//!
//! Every suite here is written into a temp dir with a compiler wrapper and scripts that
//! use paths relative to the manifest's directory (commands run there), so a suite can be
//! moved and still produce the same keys. Each wrapper appends one line per run to a log
//! under `logs/`: the tests count those lines, never seconds. Overlap checks compare
//! timestamps the scripts themselves wrote.
//!
//! This file holds the suite builders and observations the topic modules share.

mod cache;
mod faults;
mod invalidation;
mod prepare;
mod resources;
mod workers;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

// ---------------------------------------------------------------------------------------
// Suite building
// ---------------------------------------------------------------------------------------

/// The manifest's head: cache `cache/` beside it, one `cc` toolchain through the relative
/// logging wrapper `bin/cc-log` (one line per compile in `logs/cc.log`).
fn head(depfile: bool) -> String {
    format!(
        "version: 1\nplatform: a2a3\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"./bin/cc-log -c {{source}} -o {{out}} {{includes}} {{flags}}\"\n    identity: \"cc --version\"\n{}scenes:\n",
        if depfile {
            "    depfile: \"-MD -MF {depfile}\"\n"
        } else {
            ""
        }
    )
}

/// One scene: its kernels as (name, source), then extra YAML (4-space indented keys).
fn scene(name: &str, kernels: &[(&str, &str)], extra: &str) -> String {
    let mut y = format!("  - name: {name}\n");
    if !kernels.is_empty() {
        y.push_str("    kernels:\n");
        for (k, src) in kernels {
            y.push_str(&format!(
                "      - name: {k}\n        toolchain: cc\n        source: {src}\n        include_dirs: [include]\n        flags: [\"-O1\"]\n"
            ));
        }
    }
    y.push_str(extra);
    y
}

/// Write a manifest of the head (see `head`) and this one scene.
fn one_scene(s: &Suite, depfile: bool, name: &str, kernels: &[(&str, &str)], extra: &str) {
    let mut y = head(depfile);
    y.push_str(&scene(name, kernels, extra));
    s.manifest(&y);
}

/// A fixture whose inputs are only its own data file (so changing one scene's data
/// changes only that scene's keys).
fn gen_golden_own(scene: &str) -> String {
    format!(
        "    fixture:\n      run: \"./gen.sh {{out}} {{scene}}\"\n      inputs: [gen.sh, data/{scene}.txt]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}} {{scene}}\"\n      inputs: [golden.sh]\n"
    )
}

/// Wrapper, scripts, headers and sources shared by most tests.
fn base_suite() -> Suite {
    let s = Suite::with_logs();
    s.script(
        "bin/cc-log",
        "#!/bin/sh\necho \"$*\" >> logs/cc.log\nexec cc \"$@\"\n",
    );
    s.script(
        "gen.sh",
        "#!/bin/sh\necho \"$2\" >> logs/gen.log\ncp \"data/$2.txt\" \"$1/input.txt\"\n",
    );
    s.script(
        "golden.sh",
        "#!/bin/sh\necho \"$3\" >> logs/golden.log\nwc -c < \"$1/input.txt\" > \"$2/expected.txt\"\n",
    );
    s.write(
        "include/common.h",
        "#include \"inner.h\"\n#define SCALE 2\n",
    );
    s.write("include/inner.h", "#define OFFSET 1\n");
    s.write("include/other.h", "#define OTHER 3\n");
    s.write(
        "kernels/a.c",
        "#include \"common.h\"\nint a(int x) { return x * SCALE + OFFSET; }\n",
    );
    s.write(
        "kernels/b.c",
        "#include \"other.h\"\nint b(int x) { return x + OTHER; }\n",
    );
    s.write("kernels/c.c", "int c(int x) { return x - 1; }\n");
    s
}

fn data(s: &Suite, scene: &str, text: &str) {
    s.write(&format!("data/{scene}.txt"), text);
}

/// Three scenes: s0 {a, b}, s1 {a (identical to s0's), c}, s2 {b}; each with the standard
/// fixture and golden on its own data file. Unique kernel keys: a, b, c.
fn three_scene_suite() -> Suite {
    three_scene_suite_with(false)
}

/// The same, optionally with the toolchain's `depfile` (the compiler reports what it read).
fn three_scene_suite_with(depfile: bool) -> Suite {
    let s = base_suite();
    let mut y = head(depfile);
    y.push_str(&scene(
        "s0",
        &[("a", "kernels/a.c"), ("b", "kernels/b.c")],
        &gen_golden_own("s0"),
    ));
    y.push_str(&scene(
        "s1",
        &[("a", "kernels/a.c"), ("c", "kernels/c.c")],
        &gen_golden_own("s1"),
    ));
    y.push_str(&scene("s2", &[("b", "kernels/b.c")], &gen_golden_own("s2")));
    for (i, n) in ["s0", "s1", "s2"].iter().enumerate() {
        data(&s, n, &format!("data of {n}: {}\n", "x".repeat(i + 1)));
    }
    s.manifest(&y);
    s
}

// ---------------------------------------------------------------------------------------
// Observations
// ---------------------------------------------------------------------------------------

fn lines(s: &Suite, rel: &str) -> Vec<String> {
    s.read(rel).lines().map(str::to_string).collect()
}

/// The sources the compiler was run on, one per compile (in log order).
fn compiled(s: &Suite) -> Vec<String> {
    lines(s, "logs/cc.log")
        .iter()
        .map(|l| {
            l.split_whitespace()
                .find(|w| w.ends_with(".c"))
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// Run `warm ARGS` and require exit 0.
fn warm(s: &Suite, args: &[&str]) -> Output {
    let mut a = vec!["warm"];
    a.extend_from_slice(args);
    let out = s.cmd(&a).output().expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "warm {args:?} failed\n{}",
        show(&out)
    );
    out
}

/// `warm --plan --format json` → the warm steps.
fn plan_steps(s: &Suite, extra: &[&str]) -> Vec<Value> {
    let mut a = vec!["warm", "--plan", "--format", "json"];
    a.extend_from_slice(extra);
    let out = s.cmd(&a).output().expect("runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).expect("plan json");
    v["warm"]["steps"].as_array().expect("steps").clone()
}

/// Status of one step in the plan: ("kernel", "s0", "a") → "hit" / "miss" / "stale" / ...
fn status_of(steps: &[Value], kind: &str, scene: &str, name: &str) -> String {
    steps
        .iter()
        .find(|v| v["kind"] == kind && v["scene"] == scene && v["name"] == name)
        .unwrap_or_else(|| panic!("no step {kind} {scene}/{name} in {steps:?}"))["status"]
        .as_str()
        .unwrap()
        .to_string()
}

fn all_hits(steps: &[Value]) -> bool {
    steps.iter().all(|v| v["status"] == "hit")
}

/// `build/scenerun/warm.json` → its step records.
fn warm_record(s: &Suite) -> Vec<Value> {
    let v = s.record("warm.json").expect("warm.json parses");
    v["steps"].as_array().expect("steps").clone()
}

fn record_of<'a>(rec: &'a [Value], kind: &str, scene: &str, name: &str) -> &'a Value {
    rec.iter()
        .find(|v| v["kind"] == kind && v["scene"] == scene && v["name"] == name)
        .unwrap_or_else(|| panic!("no record {kind} {scene}/{name} in {rec:?}"))
}

/// Entry directories of one kind in a cache root.
fn entries(cache: &Path, kind: &str) -> Vec<PathBuf> {
    entry_dirs(cache)
        .into_iter()
        .filter(|((k, _), _)| k == kind)
        .map(|(_, dir)| dir)
        .collect()
}

fn verify_code(s: &Suite, args: &[&str]) -> (i32, String) {
    let mut a = vec!["cache", "verify"];
    a.extend_from_slice(args);
    let out = s.cmd(&a).output().expect("runs");
    (
        out.status.code().unwrap_or(-1),
        stdout(&out) + &stderr(&out),
    )
}

fn assert_verify_clean(s: &Suite) {
    let (code, text) = verify_code(s, &[]);
    assert_eq!(code, 0, "cache verify not clean:\n{text}");
}

fn read_pid(p: &Path) -> Option<i32> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// The real binary as a child process (for signals), in the suite's directory.
fn spawn_warm(s: &Suite, args: &[&str]) -> Child {
    scenerun_process()
        .current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .arg("warm")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn scenerun")
}

/// Wait for a child with a bound; kill it (and fail) if it does not end.
fn wait_child(child: &mut Child, limit: Duration) -> ExitStatus {
    wait_bounded(child, limit).unwrap_or_else(|| panic!("scenerun did not exit within {limit:?}"))
}

/// Directories left in a cache's tmp dir (staging of a build that did not publish).
fn staging_left(cache: &Path) -> Vec<String> {
    let Ok(rd) = fs::read_dir(cache.join("tmp")) else {
        return Vec::new();
    };
    rd.flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| !n.starts_with(".probe"))
        .collect()
}

/// Under `-v` one line per step on stderr, hits included; without it, no hit line (a
/// no-op warm in a CI log is its summary); `-q` keeps only the summary (and would keep
/// failures). The hit lines of a no-op warm are not even formatted then, so this pins
/// what each mode prints.
#[test]
fn every_step_has_its_line_and_quiet_keeps_only_the_summary() {
    let s = basic_suite(2);
    warm(&s, &[]);
    let plain = warm(&s, &[]);
    assert!(
        !stderr(&plain).lines().any(|l| l.starts_with('[')),
        "no hit lines without -v: {}",
        show(&plain)
    );
    let loud = s.cmd(&["-v", "warm"]).output().unwrap();
    assert_eq!(code(&loud), 0, "{}", show(&loud));
    let err = stderr(&loud);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with('[')).collect();
    // 2 scenes × (kernel, fixture, golden).
    assert_eq!(lines.len(), 6, "{err}");
    for n in 1..=6 {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("[{n}/6] ")) && l.ends_with(" hit")),
            "no hit line [{n}/6]:\n{err}"
        );
    }
    assert!(err.contains("6 hit"), "{err}");

    let quiet = s.cmd(&["-q", "warm"]).output().unwrap();
    assert_eq!(code(&quiet), 0, "{}", show(&quiet));
    let err = stderr(&quiet);
    assert!(!err.lines().any(|l| l.starts_with('[')), "{err}");
    assert!(err.contains("6 hit"), "the summary stays: {err}");
}
