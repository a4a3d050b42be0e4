//! Selection: `-k`, tags, platform, nothing selected, bad flags and partitions
//! (docs/cli.md).

use std::collections::BTreeSet;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;
use crate::common::*;
// The strict (UTF-8) readers, not common's lossy ones.
use super::stderr;

/// Four scenes with only device steps (nothing to hash, no identity command).
fn selection_suite() -> Suite {
    let s = Suite::new();
    s.manifest(
        r#"version: 1
platform: a2a3
scenes:
  - name: vector_add
    tags: [smoke]
    device: {run: "true"}
  - name: vector_mul
    tags: [smoke, slow]
    device: {run: "true"}
  - name: matmul
    platform: a5
    device: {run: "true"}
  - name: reduce_sum
    tags: [slow]
    device: {run: "true"}
"#,
    );
    s
}

fn selected(s: &Suite, args: &[&str]) -> Vec<String> {
    plan_json(s, args)["device"]["scenes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sc| sc["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn select_k_substring() {
    let s = selection_suite();
    assert_eq!(selected(&s, &[]).len(), 4);
    assert_eq!(
        selected(&s, &["-k", "vector"]),
        ["vector_add", "vector_mul"]
    );
    assert_eq!(selected(&s, &["-k", "mul"]), ["vector_mul", "matmul"]);
    assert_eq!(selected(&s, &["-k", "_sum"]), ["reduce_sum"]);
}

#[test]
fn select_k_glob() {
    let s = selection_suite();
    assert_eq!(
        selected(&s, &["-k", "vector_*"]),
        ["vector_add", "vector_mul"]
    );
    assert_eq!(selected(&s, &["-k", "m?tmul"]), ["matmul"]);
    assert_eq!(
        selected(&s, &["-k", "*_[as]*"]),
        ["vector_add", "reduce_sum"]
    );
    // A glob matches the whole name, not a substring.
    s.cmd(&["plan", "-k", "mul*"]).assert().code(5);
}

#[test]
fn repeated_k_selects_any() {
    let s = selection_suite();
    assert_eq!(
        selected(&s, &["-k", "matmul", "-k", "vector_a*"]),
        ["vector_add", "matmul"],
        "manifest order, whichever pattern matched"
    );
}

#[test]
fn select_by_tag_and_skip_tag() {
    let s = selection_suite();
    assert_eq!(
        selected(&s, &["--tag", "smoke"]),
        ["vector_add", "vector_mul"]
    );
    assert_eq!(
        selected(&s, &["--tag", "smoke", "--tag", "slow"]),
        ["vector_add", "vector_mul", "reduce_sum"]
    );
    assert_eq!(
        selected(&s, &["--skip-tag", "slow"]),
        ["vector_add", "matmul"]
    );
    assert_eq!(
        selected(&s, &["--tag", "smoke", "--skip-tag", "slow"]),
        ["vector_add"]
    );
}

#[test]
fn select_by_platform() {
    let s = selection_suite();
    assert_eq!(selected(&s, &["--platform", "a5"]), ["matmul"]);
    assert_eq!(
        selected(&s, &["--platform", "a2a3"]),
        ["vector_add", "vector_mul", "reduce_sum"]
    );
    assert_eq!(selected(&s, &["--platform", "a5", "-k", "mat"]), ["matmul"]);
}

/// The whole error, exit 5: how many scenes there were and what each filter removed.
#[test]
fn nothing_selected_exits_5_naming_each_filter() {
    let s = selection_suite();
    let snap = |name: &str, args: &[&str]| {
        let o = s.cmd(args).output().unwrap();
        crate::snapshots::assert_output(name, &o, s.dir());
    };
    snap(
        "error_nothing_selected_plan",
        &["plan", "-k", "vector", "--tag", "slow", "--platform", "a5"],
    );
    snap(
        "error_nothing_selected_warm",
        &[
            "warm",
            "--skip-tag",
            "smoke",
            "--skip-tag",
            "slow",
            "-k",
            "zzz",
        ],
    );
    // --partition too, on device (which must not get as far as the lock).
    snap(
        "error_nothing_selected_device",
        &[
            "device",
            "-k",
            "matmul",
            "--partition",
            "1/1",
            "--skip-tag",
            "x",
            "--platform",
            "zz",
        ],
    );
}

/// Each a usage error (exit 4) that names the bad value, whole.
#[test]
fn bad_selection_flags_are_usage_errors() {
    let s = selection_suite();
    for (i, bad) in [
        ["--partition", "0/2"],
        ["--partition", "3/2"],
        ["--partition", "1/0"],
        ["--partition", "x"],
        ["-k", "[abc"],
    ]
    .iter()
    .enumerate()
    {
        let mut args = vec!["plan"];
        args.extend_from_slice(bad);
        let o = s.cmd(&args).output().unwrap();
        crate::snapshots::assert_output(&format!("error_bad_selection_flag_{i}"), &o, s.dir());
    }
    s.cmd(&["plan", "--format", "yaml"]).assert().code(4);
    s.cmd(&["plan", "--no-such-flag"]).assert().code(4);
}

/// Scenes with device steps only, named `names`.
fn write_named_scenes(s: &Suite, names: &[String]) {
    let mut y = String::from("version: 1\nscenes:\n");
    for n in names {
        y.push_str(&format!(
            "  - name: \"{n}\"\n    device: {{run: \"true\"}}\n"
        ));
    }
    s.manifest(&y);
}

/// The scene names of each partition 1/n..n/n (an empty one exits 5).
fn partitions(s: &Suite, n: u64) -> Vec<BTreeSet<String>> {
    (1..=n)
        .map(|k| {
            let part = format!("{k}/{n}");
            let out = s
                .cmd(&["plan", "--format", "json", "--partition", &part])
                .output()
                .unwrap();
            match out.status.code() {
                Some(5) => BTreeSet::new(),
                Some(0) => {
                    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                    v["device"]["scenes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|sc| sc["name"].as_str().unwrap().to_string())
                        .collect()
                }
                other => panic!("--partition {part}: exit {other:?}: {}", stderr(&out)),
            }
        })
        .collect()
}

#[test]
fn partitions_are_disjoint_complete_and_stable() {
    let s = Suite::new();
    let mut runner = TestRunner::new(Config {
        cases: 12,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        prop::collection::btree_set("[a-z][a-z0-9_.-]{0,12}", 1..10),
        "[A-Z][a-z0-9]{0,8}",
        1..=4u64,
    );
    runner
        .run(&strategy, |(names, extra, n)| {
            let names: Vec<String> = names.into_iter().collect();
            write_named_scenes(&s, &names);
            let parts = partitions(&s, n);
            let mut seen = BTreeSet::new();
            for (k, part) in parts.iter().enumerate() {
                for name in part {
                    prop_assert!(seen.insert(name.clone()), "{name} in two partitions");
                    prop_assert_eq!(scenerun::select::shard_of(name, n), k as u64);
                }
            }
            let all: BTreeSet<String> = names.iter().cloned().collect();
            prop_assert_eq!(&seen, &all, "every scene in some partition");

            // Another scene (upper-case first letter: not among `names`) moves no one.
            let mut more = names.clone();
            more.insert(0, extra.clone());
            write_named_scenes(&s, &more);
            let after = partitions(&s, n);
            for (k, part) in after.iter().enumerate() {
                let mut without: BTreeSet<String> = part.clone();
                without.remove(&extra);
                prop_assert_eq!(&without, &parts[k], "partition {}/{} changed", k + 1, n);
            }
            prop_assert!(after.iter().any(|p| p.contains(&extra)));
            Ok(())
        })
        .unwrap();
}
