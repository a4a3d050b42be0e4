//! Sizes, durations, device counts, step and type shapes, malformed YAML, the manifest
//! file and its version; arbitrary input never panics.

use std::fs;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;
use crate::common::*;

#[test]
fn bad_size() {
    let (s, yaml) = suite_with(|b| {
        b.replace(
            "inputs: [gen.sh, \"data/*.json\"]",
            "inputs: [gen.sh]\n      memory: 40 gigs",
        )
        .replace("  dir: cache\n", "  dir: cache\n  max_size: lots\n")
    });
    let err = manifest_errors(&s, 2);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "memory:"),
        "scenes[0].fixture.memory",
        "bad size `40 gigs`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "max_size"),
        "cache.max_size",
        "bad size `lots`",
    );
}

#[test]
fn bad_duration() {
    let (s, yaml) = suite_with(|b| {
        b.replace(
            "inputs: [golden.sh]",
            "inputs: [golden.sh]\n      timeout: soon",
        )
        .replace(
            "{golden} {devices}\"",
            "{golden} {devices}\"\n      timeout: 0s",
        )
        .replace("  dir: cache\n", "  dir: cache\n  max_age: forever\n")
    });
    let err = manifest_errors(&s, 3);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "timeout: soon"),
        "scenes[0].golden.timeout",
        "bad duration `soon`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "timeout: 0s"),
        "scenes[0].device.timeout",
        "bad duration `0s`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "max_age"),
        "cache.max_age",
        "bad duration `forever`",
    );
}

#[test]
fn devices_zero() {
    let (s, yaml) = replaced(
        "{golden} {devices}\"\n",
        "{golden} {devices}\"\n      devices: 0\n",
    );
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "devices: 0"),
        "scenes[0].device.devices",
        "at least 1",
    );
}

/// A device count no fleet has must be a manifest error, not a plan that allocates one
/// slot per id (it used to take minutes and gigabytes, or abort).
#[test]
fn absurd_device_counts_are_rejected() {
    let (s, yaml) = suite_with(|b| {
        b.replace(
            "{golden} {devices}\"\n",
            "{golden} {devices}\"\n      devices: 4000000000\n",
        )
        .replace(
            "scenes:\n",
            "lock:\n  submit: \"task-submit --run {run}\"\n  device_count: 100000000\nscenes:\n",
        )
    });
    // Bounded: before the check this ran for minutes or aborted.
    s.cmd(&["plan"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(4);
    let err = manifest_errors(&s, 2);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "devices: 4000000000"),
        "scenes[0].device.devices",
        "at most",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "device_count"),
        "lock.device_count",
        "at most",
    );
}

#[test]
fn scene_with_no_steps() {
    let (s, yaml) = suite_with(|b| {
        format!("{b}  - name: empty\n    tags: [x]\n  - name: empty2\n    kernels: []\n")
    });
    let err = manifest_errors(&s, 2);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "name: empty"),
        "scenes[1]",
        "scene `empty` has no steps",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "name: empty2"),
        "scenes[2]",
        "scene `empty2` has no steps",
    );
}

#[test]
fn wrong_type_is_reported_once_at_its_key() {
    let (s, yaml) = replaced("    tags: [smoke]\n", "    tags: smoke\n");
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "tags: smoke"),
        "scenes[0].tags",
        "expected a sequence, found a string `smoke`",
    );
    assert!(
        !err.contains("scenes[0]: scenes[0]"),
        "the path is printed twice:\n{err}"
    );
}

#[test]
fn wrong_type_names_the_key_and_what_was_found() {
    let (s, yaml) = replaced(
        "{golden} {devices}\"\n",
        "{golden} {devices}\"\n      devices: -2\n",
    );
    let err = manifest_errors(&s, 1);
    let col = assert_diag(
        &s,
        &err,
        line_of(&yaml, "devices: -2"),
        "scenes[0].device.devices",
        "expected a non-negative integer, found -2",
    );
    assert_eq!(col, 16, "the column of `-2`:\n{err}");
    // The offending line is shown under the message, with a caret under the value.
    let o = s.cmd(&["plan"]).output().unwrap();
    crate::snapshots::assert_output("error_manifest_wrong_type", &o, s.dir());
}

#[test]
fn unknown_key_gets_a_suggestion() {
    let (s, yaml) = replaced("    kernels:\n", "    kernals:\n");
    let err = manifest_errors(&s, 2);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "kernals:"),
        "scenes[0].kernals",
        "unknown field `kernals` (did you mean `kernels`?)",
    );
}

#[test]
fn repeated_key_is_an_error() {
    let (s, yaml) = replaced(
        "    tags: [smoke]\n",
        "    tags: [smoke]\n    tags: [slow]\n",
    );
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "tags: [slow]"),
        "scenes[0].tags",
        "`tags` is given twice",
    );
}

#[test]
fn malformed_yaml_reports_its_line() {
    // `device:` indented one space less than its siblings.
    let (s, _) = replaced("    device:\n", "   device:\n");
    manifest_errors(&s, 1);
    let o = s.cmd(&["plan"]).output().unwrap();
    crate::snapshots::assert_output("error_manifest_invalid_yaml", &o, s.dir());

    // An unclosed flow sequence.
    let (s, yaml) = replaced("inputs: [golden.sh]", "inputs: [golden.sh");
    let err = manifest_errors(&s, 1);
    let line = line_of(&yaml, "inputs: [golden.sh");
    let reported: usize = err
        .lines()
        .nth(1)
        .and_then(|l| l.split(':').nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no line in:\n{err}"));
    assert!(
        (line..=line + 2).contains(&reported),
        "unclosed `[` on line {line}, reported at {reported}:\n{err}"
    );
}

#[test]
fn missing_manifest_file() {
    let s = suite();
    let o = s.cmd(&["plan"]).output().unwrap();
    crate::snapshots::assert_output("error_manifest_file_missing", &o, s.dir());

    // The default, `scenes.yaml` in the current directory (where the search stops
    // depends on the temp dir's parents: not a snapshot).
    let out = scenerun()
        .current_dir(s.dir())
        .arg("plan")
        .assert()
        .code(4)
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("scenes.yaml") && err.contains("searched upwards"),
        "{err}"
    );
}

#[test]
fn version_2_is_not_read() {
    let (s, yaml) = replaced("version: 1\n", "version: 2\n");
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "version"),
        "version",
        "unsupported manifest version 2",
    );

    let (s, _) = replaced("version: 1\n", "");
    manifest_errors(&s, 1);
    let o = s.cmd(&["plan"]).output().unwrap();
    crate::snapshots::assert_output("error_manifest_no_version", &o, s.dir());
}

/// A manifest that mutations start from: no identity command (a mutated one could fail
/// with exit 3, which is right but not what this test is about).
const FUZZ_BASE: &str = r#"version: 1
platform: a2a3
env: {A: "1"}
cache: {dir: cache, max_size: 1GiB, max_age: 14d}
toolchains:
  cc:
    compile: "cc -c {source} -o {out} {includes} {flags}"
lock:
  submit: "task-submit --device-num {device_count} --run {run}"
  device_count: 2
scenes:
  - name: alpha
    tags: [smoke]
    kernels:
      - name: k
        toolchain: cc
        source: kernels/k.c
        include_dirs: [include]
        flags: ["-O1"]
    fixture:
      run: "./gen.sh {out}"
      inputs: [gen.sh, "data/*.json"]
      memory: 1GiB
      threads: 2
      timeout: 30m
    golden:
      run: "./golden.sh {fixture} {out}"
      inputs: [golden.sh]
    device:
      run: "./device.sh {kernels} {fixture} {golden} {devices}"
      devices: 2
      exclusive: true
      timeout: 10m
  - name: beta
    device: {run: "true {scene}", devices: 1}
"#;

const TOKENS: &[&str] = &[
    ":",
    "-",
    "- ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "\n",
    "  ",
    "\t",
    "'",
    "\"",
    "#",
    "&a ",
    "*a",
    "!!binary ",
    "~",
    "null",
    "9999999999",
    "4000000000",
    "-1",
    "0",
    "1.5",
    "{out}",
    "{bogus}",
    "{{",
    "}}",
    "${X}",
    "..",
    "../",
    "*",
    "**/",
    "?",
    "/",
    "name: alpha",
    "version: 2",
    "é",
    "\u{0}",
    "<<: *a",
];

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let op = (
        0..4u8,
        any::<prop::sample::Index>(),
        0..40usize,
        0..TOKENS.len(),
    );
    prop::collection::vec(op, 1..6).prop_map(|ops| {
        let mut lines: Vec<String> = FUZZ_BASE.lines().map(str::to_string).collect();
        for (kind, at, len, tok) in ops {
            let i = at.index(lines.len().max(1));
            match kind {
                0 => {
                    // Insert a token inside a line.
                    let l = &mut lines[i];
                    let mut cut = len.min(l.len());
                    while !l.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    l.insert_str(cut, TOKENS[tok]);
                }
                1 => {
                    lines.remove(i);
                }
                2 => {
                    let l = lines[i].clone();
                    lines.insert(i, l);
                }
                _ => {
                    // Cut the tail of a line.
                    let l = &mut lines[i];
                    let mut cut = len.min(l.len());
                    while !l.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    l.truncate(cut);
                }
            }
            if lines.is_empty() {
                lines.push(String::new());
            }
        }
        (lines.join("\n") + "\n").into_bytes()
    })
}

#[test]
fn arbitrary_bytes_and_mutated_manifests_never_panic() {
    let s = suite();
    s.manifest(FUZZ_BASE);
    s.cmd(&["plan"]).assert().success();

    let strategy = prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..300),
        3 => mutated(),
    ];
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |text| {
            fs::write(s.path("scenes.yaml"), &text).unwrap();
            let out = s
                .cmd(&["plan"])
                .timeout(Duration::from_secs(30))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            prop_assert!(
                matches!(out.status.code(), Some(0 | 4 | 5)),
                "exit {:?} for:\n{}\nstderr:\n{err}",
                out.status,
                String::from_utf8_lossy(&text)
            );
            prop_assert!(!err.contains("panicked"), "{err}");
            if out.status.code() == Some(4) {
                prop_assert!(err.starts_with("error: "), "{err}");
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn manifest_is_found_in_a_parent_directory() {
    let s = suite();
    s.manifest(BASE);
    // Without --manifest, from a subdirectory: the nearest scenes.yaml above is used,
    // and its directory is where the suite lives (the kernel resolves beside it).
    let out = scenerun()
        .current_dir(s.path("kernels"))
        .args(["plan", "--format", "json"])
        .assert()
        .success()
        .get_output()
        .clone();
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = plan.to_string();
    assert!(text.contains("alpha"), "{text}");
    // An explicit --manifest is never searched for upwards.
    scenerun()
        .current_dir(s.path("kernels"))
        .args(["--manifest", "scenes.yaml", "plan"])
        .assert()
        .code(4);
}

#[test]
fn device_count_below_a_scene_names_both_places() {
    let (s, yaml) = suite_with(|b| {
        b.replace(
            "scenes:\n",
            "lock:\n  submit: \"task-submit -- {run}\"\n  device_count: 1\nscenes:\n",
        )
        .replace(
            "{golden} {devices}\"\n",
            "{golden} {devices}\"\n      devices: 2\n",
        )
    });
    let out = s.cmd(&["plan"]).assert().code(4).get_output().clone();
    let err = String::from_utf8(out.stderr).unwrap();
    let file = s.path("scenes.yaml").display().to_string();
    let count_at = format!("{file}:{}:", line_of(&yaml, "device_count: 1"));
    let devices_at = format!("{file}:{}:", line_of(&yaml, "devices: 2"));
    assert!(
        err.contains(&count_at)
            && err.contains("scene `alpha` needs 2 devices")
            && err.contains(&devices_at)
            && err.contains("scenes[0].device.devices"),
        "expected both positions and the scene:\n{err}"
    );
}
