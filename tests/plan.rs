//! Integration tests: selection, content keys and the plan preview (DESIGN.md §2, §4, §8).
//! Keys are read from `plan --format json` (`warm.steps[].key`); previews are checked to
//! run nothing by counting the logging compiler and scripts.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
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

// ---------------------------------------------------------------------------------------
// selection

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

#[test]
fn nothing_selected_exits_5_naming_each_filter() {
    let s = selection_suite();
    let out = s
        .cmd(&["plan", "-k", "vector", "--tag", "slow", "--platform", "a5"])
        .assert()
        .code(5)
        .get_output()
        .clone();
    let err = stderr(&out);
    assert!(out.stdout.is_empty());
    assert!(err.contains("no scene selected"), "{err}");
    assert!(err.contains("of 4 scenes"), "{err}");
    assert!(err.contains("-k vector removed 2"), "{err}");
    assert!(err.contains("--tag slow removed 1"), "{err}");
    assert!(err.contains("--platform a5 removed 1"), "{err}");

    let err = stderr(
        s.cmd(&[
            "warm",
            "--skip-tag",
            "smoke",
            "--skip-tag",
            "slow",
            "-k",
            "zzz",
        ])
        .assert()
        .code(5)
        .get_output(),
    );
    assert!(err.contains("-k zzz removed 4"), "{err}");
    assert!(
        err.contains("--skip-tag smoke --skip-tag slow removed 0"),
        "{err}"
    );

    // --partition too, on device (which must not get as far as the lock).
    let err = stderr(
        s.cmd(&[
            "device",
            "-k",
            "matmul",
            "--partition",
            "1/1",
            "--skip-tag",
            "x",
            "--platform",
            "zz",
        ])
        .assert()
        .code(5)
        .get_output(),
    );
    assert!(err.contains("--platform zz removed 1"), "{err}");
    assert!(err.contains("--partition 1/1 removed 0"), "{err}");
}

#[test]
fn bad_selection_flags_are_usage_errors() {
    let s = selection_suite();
    for bad in [
        ["--partition", "0/2"],
        ["--partition", "3/2"],
        ["--partition", "1/0"],
        ["--partition", "x"],
        ["-k", "[abc"],
    ] {
        let mut args = vec!["plan"];
        args.extend_from_slice(&bad);
        let err = stderr(s.cmd(&args).assert().code(4).get_output());
        assert!(err.contains(bad[1]), "{bad:?}: {err}");
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

// ---------------------------------------------------------------------------------------
// keys

#[test]
fn same_inputs_same_keys_across_runs() {
    let s = basic_suite(2);
    let a = keys(&s);
    assert!(
        a.values()
            .all(|k| k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit())),
        "{a:?}"
    );
    let b = keys(&s);
    assert_eq!(a, b);
    // A rewrite with the same content (new mtime, new inode) keeps the keys.
    for f in ["kernels/k.c", "include/inner.h", "gen.sh"] {
        let text = s.read(f);
        fs::remove_file(s.path(f)).unwrap();
        s.script(f, &text);
    }
    assert_eq!(a, keys(&s));
}

#[test]
fn source_byte_changes_only_the_kernel_key() {
    let changed = keys_around(|s| edit_file(s, "kernels/k.c", "return 0;", "return 1;"));
    assert_eq!(changed, [K]);
}

#[test]
fn transitively_included_header_changes_the_kernel_key() {
    let changed = keys_around(|s| edit_file(s, "include/inner.h", "OFFSET 1", "OFFSET 2"));
    assert_eq!(changed, [K]);
}

#[test]
fn unrelated_header_changes_no_key() {
    let changed = keys_around(|s| edit_file(s, "include/unrelated.h", "NOTHING 0", "NOTHING 1"));
    assert!(changed.is_empty(), "{changed:?}");
}

#[test]
fn flag_changes_the_kernel_key() {
    let changed = keys_around(|s| edit_manifest(s, "flags: [\"-O1\"]", "flags: [\"-O2\"]"));
    assert_eq!(changed, [K]);
}

#[test]
fn env_changes_every_key() {
    let s = basic_suite(1);
    let a = keys(&s);
    edit_manifest(
        &s,
        "platform: a2a3\n",
        "platform: a2a3\nenv:\n  MODE: \"1\"\n",
    );
    let b = keys(&s);
    assert_eq!(changed(&a, &b), [F, G, K]);
    edit_manifest(&s, "MODE: \"1\"", "MODE: \"2\"");
    let c = keys(&s);
    assert_eq!(changed(&b, &c), [F, G, K]);
    // A scene's own env counts the same way.
    edit_manifest(
        &s,
        "    tags: [t0]\n",
        "    tags: [t0]\n    env: {EXTRA: x}\n",
    );
    assert_eq!(changed(&c, &keys(&s)), [F, G, K]);
}

#[test]
fn platform_changes_the_keys_of_its_scenes_only() {
    let s = basic_suite(2);
    let a = keys(&s);
    // Scene s1 overrides the platform; s0 keeps a2a3.
    edit_manifest(&s, "  - name: s1\n", "  - name: s1\n    platform: a5\n");
    let b = keys(&s);
    assert_eq!(
        changed(&a, &b),
        ["fixture/s1/fixture", "golden/s1/golden", "kernel/s1/k"]
    );
    // The same kernel on two platforms: two keys.
    assert_ne!(b["kernel/s0/k"], b["kernel/s1/k"]);
    edit_manifest(&s, "platform: a2a3\n", "platform: a3\n");
    assert_eq!(
        changed(&b, &keys(&s)),
        ["fixture/s0/fixture", "golden/s0/golden", "kernel/s0/k"]
    );
}

#[test]
fn identity_output_changes_the_kernel_key() {
    let changed = keys_around(|s| {
        s.write("ident.txt", "cc 1.0\n");
        edit_manifest(
            s,
            "identity: \"cc --version\"",
            "identity: \"cat ident.txt\"",
        );
        let a = keys(s);
        s.write("ident.txt", "cc 1.1\n");
        let b = keys(s);
        assert_eq!(changed(&a, &b), [K], "a new compiler version");
        s.write("ident.txt", "cc 1.0\n");
        assert_eq!(a, keys(s), "back to the old compiler");
    });
    assert_eq!(changed, [K]);
}

#[test]
fn keys_survive_moving_the_suite() {
    let s = basic_suite(2);
    // The compiler wrapper by a relative path: commands are part of keys, and the
    // checkout's absolute path must not be.
    let cc = s.path("bin/cc-log").display().to_string();
    let text = s.read("scenes.yaml");
    s.manifest(&text.replace(&cc, "./bin/cc-log"));
    let here = keys(&s);
    s.cmd(&["warm"]).assert().success();
    let built = s.count("logs/cc.log");
    assert!(built > 0);

    let other = tempfile::tempdir().unwrap();
    let moved = other.path().join("a much/longer/workspace path");
    copy_tree(s.dir(), &moved, &[]);
    let out = scenerun()
        .current_dir(&moved)
        .arg("--manifest")
        .arg(moved.join("scenes.yaml"))
        .args(["plan", "--format", "json"])
        .assert()
        .success()
        .get_output()
        .clone();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        here,
        keys_of(&v),
        "kernels, fixtures and goldens keep their keys"
    );
    // ... so the moved cache serves every step.
    let statuses: Vec<&str> = v["warm"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|st| st["status"].as_str().unwrap())
        .collect();
    assert!(statuses.iter().all(|st| *st == "hit"), "{statuses:?}");
    assert_eq!(s.count("logs/cc.log"), built);
}

#[test]
fn identical_kernels_in_two_scenes_share_one_key() {
    let s = basic_suite(2);
    let v = plan_json(&s, &[]);
    let k = keys_of(&v);
    assert_eq!(k["kernel/s0/k"], k["kernel/s1/k"]);
    assert_ne!(
        k["fixture/s0/fixture"], k["fixture/s1/fixture"],
        "their runs differ"
    );
    assert_ne!(
        k["golden/s0/golden"], k["golden/s1/golden"],
        "their fixtures differ"
    );
    assert_eq!(v["warm"]["steps"].as_array().unwrap().len(), 6);
    assert_eq!(v["warm"]["unique_keys"], 5);
    let text = stdout(s.cmd(&["plan"]).assert().success().get_output());
    assert!(text.contains("6 steps (5 unique keys)"), "{text}");

    // A kernel that names its scene in the command is no longer shared.
    edit_manifest(&s, "{flags} &&", "{flags} -DSCENE={scene} &&");
    let k = keys(&s);
    assert_ne!(k["kernel/s0/k"], k["kernel/s1/k"]);
}

#[test]
fn hints_timeouts_tags_and_devices_are_not_in_keys() {
    let s = basic_suite(1);
    let a = keys(&s);
    edit_manifest(&s, "tags: [t0]", "tags: [t0, nightly]");
    edit_manifest(
        &s,
        "      inputs: [gen.sh]\n",
        "      inputs: [gen.sh]\n      threads: 4\n      memory: 2GiB\n      timeout: 5m\n",
    );
    edit_manifest(
        &s,
        "      inputs: [golden.sh]\n",
        "      inputs: [golden.sh]\n      threads: 2\n      memory: 512MiB\n      timeout: 1h\n",
    );
    edit_manifest(
        &s,
        "{devices}\"\n",
        "{devices}\"\n      devices: 2\n      exclusive: true\n      timeout: 1m\n",
    );
    let v = plan_json(&s, &[]);
    // The edits took: the plan sees them ...
    let steps = v["warm"]["steps"].as_array().unwrap();
    let fixture = steps.iter().find(|st| st["kind"] == "fixture").unwrap();
    assert_eq!(fixture["threads"], 4);
    assert_eq!(fixture["memory"], 2u64 << 30);
    assert_eq!(v["device"]["scenes"][0]["devices"], 2);
    assert_eq!(v["device"]["scenes"][0]["exclusive"], true);
    // ... and no key moved.
    assert_eq!(a, keys_of(&v));
}

#[test]
fn golden_key_follows_its_fixture() {
    let changed = keys_around(|s| edit_file(s, "gen.sh", "echo 20", "echo 21"));
    assert_eq!(changed, [F, G], "a new fixture needs a new golden");

    let changed = keys_around(|s| edit_manifest(s, "./gen.sh {out} 0", "./gen.sh {out} 1"));
    assert_eq!(changed, [F, G]);

    let changed = keys_around(|s| edit_file(s, "golden.sh", "x * 2 + 1", "x * 2 + 1 "));
    assert_eq!(changed, [G], "the fixture does not depend on its golden");
}

// ---------------------------------------------------------------------------------------
// the preview

fn filters(s: &Suite) -> Vec<(String, String)> {
    let mut f = Vec::new();
    let canon = s.dir().canonicalize().unwrap().display().to_string();
    let raw = s.dir().display().to_string();
    f.push((re(&canon), "[SUITE]".to_string()));
    if raw != canon {
        f.push((re(&raw), "[SUITE]".to_string()));
    }
    f.push((re(TASK_SUBMIT), "[TASK_SUBMIT]".to_string()));
    f.push((
        re(&scenerun_exe().display().to_string()),
        "[SCENERUN]".to_string(),
    ));
    f.push((
        r"entries/(\w+)/[0-9a-f]{2}/".into(),
        "entries/$1/[KK]/".into(),
    ));
    f.push((r"\b[0-9a-f]{64}\b".into(), "[KEY]".into()));
    f.push((r"\b[0-9a-f]{12}\b".into(), "[KEY12]".into()));
    // Right-aligned durations: the padding depends on the digits.
    f.push((r" +\d+\.\d+s\b".into(), " [DUR]".into()));
    f.push((r"\d+\.\d+s\b".into(), "[DUR]".into()));
    f.push((r#"("\w+_secs": )\d+(\.\d+)?"#.into(), "$1[DUR]".into()));
    f
}

/// Name each distinct key `#1`, `#2`, ... in plan order (full and 12-digit forms), so a
/// snapshot shows which steps share a key without depending on the compiler's version.
fn label_keys(text: &str, plan: &Value) -> String {
    let mut out = text.to_string();
    let mut seen: Vec<String> = Vec::new();
    for st in plan["warm"]["steps"].as_array().unwrap() {
        let k = st["key"].as_str().unwrap().to_string();
        if !seen.contains(&k) {
            seen.push(k);
        }
    }
    for (i, k) in seen.iter().enumerate() {
        out = out.replace(k, &format!("#{}", i + 1));
        out = out.replace(&k[..12], &format!("#{:<11}", i + 1));
    }
    out
}

#[test]
fn plan_text_snapshot() {
    let s = basic_suite(2);
    let text = stdout(s.cmd(&["plan"]).assert().success().get_output());
    let text = label_keys(&text, &plan_json(&s, &[]));
    let mut settings = insta::Settings::clone_current();
    for (from, to) in filters(&s) {
        settings.add_filter(&from, to);
    }
    settings.bind(|| insta::assert_snapshot!("plan_text", text));

    // After a warm: every step a hit, with its time from history.
    s.cmd(&["warm"]).assert().success();
    let text = stdout(s.cmd(&["plan"]).assert().success().get_output());
    let text = label_keys(&text, &plan_json(&s, &[]));
    settings.bind(|| insta::assert_snapshot!("plan_text_warm", text));
}

#[test]
fn plan_json_snapshot() {
    let s = basic_suite(2);
    let v = plan_json(&s, &[]);
    assert_eq!(v["schema"], "scenerun-plan");
    assert_eq!(v["version"], 1);
    let v: Value = serde_json::from_str(&label_keys(&v.to_string(), &v)).unwrap();
    let mut settings = insta::Settings::clone_current();
    for (from, to) in filters(&s) {
        settings.add_filter(&from, to);
    }
    settings.bind(|| insta::assert_json_snapshot!("plan_json", v));
}

#[test]
fn plan_and_dry_run_run_nothing() {
    let s = basic_suite(2);
    let submit_log = s.path("task-submit.log");
    let runs: &[&[&str]] = &[
        &["plan"],
        &["plan", "--format", "json"],
        &["warm", "--plan"],
        &["warm", "--plan", "--format", "json"],
        &["warm", "--dry-run"],
        &["device", "--plan"],
        &["device", "--dry-run"],
        &["device", "--plan", "--no-lock", "--devices", "0-3"],
        &["run", "--plan"],
        &["run", "--dry-run"],
        &["run", "--dry-run", "--no-lock"],
    ];
    for args in runs {
        let out = s
            .cmd(args)
            .env("TASK_SUBMIT_LOG", &submit_log)
            .assert()
            .success()
            .get_output()
            .clone();
        assert!(!out.stdout.is_empty(), "{args:?} printed nothing");
    }
    assert_eq!(s.count("logs/cc.log"), 0, "the compiler ran");
    assert_eq!(s.count("logs/gen.log"), 0, "a fixture ran");
    assert_eq!(s.count("logs/golden.log"), 0, "a golden ran");
    assert_eq!(s.count("logs/device.log"), 0, "a device step ran");
    assert!(!submit_log.exists(), "the lock command was called");
    let entries = files_under(&s.path("cache/entries"));
    assert!(entries.is_empty(), "cache entries appeared: {entries:?}");
    for written in [
        "build/scenerun/device-plan.json",
        "build/scenerun/warm.json",
        "build/scenerun/logs",
        "build/scenerun/job",
    ] {
        assert!(!s.path(written).exists(), "{written} was written");
    }

    // Still nothing after a warm: the previews show hits and run no more.
    s.cmd(&["warm"]).assert().success();
    let (cc, gen) = (s.count("logs/cc.log"), s.count("logs/gen.log"));
    assert!(cc > 0 && gen == 2);
    for args in runs {
        s.cmd(args)
            .env("TASK_SUBMIT_LOG", &submit_log)
            .assert()
            .success();
    }
    assert_eq!((s.count("logs/cc.log"), s.count("logs/gen.log")), (cc, gen));
    assert_eq!(s.count("logs/device.log"), 0);
    assert!(!submit_log.exists());
    let dry = stdout(
        s.cmd(&["warm", "--dry-run"])
            .assert()
            .success()
            .get_output(),
    );
    assert_eq!(dry.matches("# hit: would not run").count(), 6, "{dry}");
}

/// A suite in a directory whose name needs quoting; returns it and its canonical path.
fn odd_dir_suite() -> (Suite, PathBuf) {
    let s = Suite::new();
    let root = s.path("my suite;$(touch pwned)");
    fs::create_dir_all(root.join("kernels")).unwrap();
    fs::write(root.join("kernels/k.c"), "int main(void) { return 0; }\n").unwrap();
    fs::write(
        root.join("scenes.yaml"),
        format!(
            r#"version: 1
cache: {{dir: cache}}
toolchains:
  cc:
    compile: "cc {{source}} -o {{out}} {{flags}}"
lock:
  submit: "{TASK_SUBMIT} --device-num {{device_count}} --run {{run}}"
scenes:
  - name: s0
    kernels:
      - {{name: k, toolchain: cc, source: kernels/k.c, flags: ["-O1"]}}
    fixture:
      run: "./gen.sh {{out}}"
    golden:
      run: "./golden.sh {{fixture}} {{out}}"
    device:
      run: "./device.sh {{kernels}} {{fixture}} {{golden}} {{devices}}"
      devices: 2
"#
        ),
    )
    .unwrap();
    let canon = root.canonicalize().unwrap();
    (s, canon)
}

fn odd_cmd(root: &Path, args: &[&str]) -> std::process::Output {
    scenerun()
        .current_dir(root)
        .arg("--manifest")
        .arg(root.join("scenes.yaml"))
        .args(args)
        .assert()
        .success()
        .get_output()
        .clone()
}

#[test]
fn dry_run_shows_quoted_real_paths_and_run_time_placeholders() {
    let (s, root) = odd_dir_suite();
    let v: Value =
        serde_json::from_slice(&odd_cmd(&root, &["plan", "--format", "json"]).stdout).unwrap();
    let k = keys_of(&v);
    let text = stdout(&odd_cmd(&root, &["run", "--dry-run"]));
    let line = |start: &str| -> Vec<String> {
        let l = text
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no `{start}` line in:\n{text}"));
        shell_words::split(l).unwrap()
    };
    let root_s = root.display().to_string();
    assert!(
        text.contains(&format!("'{root_s}/")),
        "paths are quoted:\n{text}"
    );

    assert_eq!(line("cc "), ["cc", "kernels/k.c", "-o", "<out>", "-O1"]);
    assert_eq!(line("./gen.sh "), ["./gen.sh", "<out>"]);

    let golden = line("./golden.sh ");
    assert_eq!(golden.len(), 3, "{golden:?}");
    let fixture_path = &golden[1];
    assert!(
        fixture_path.starts_with(&format!("{root_s}/cache/")),
        "{fixture_path}"
    );
    assert!(
        fixture_path.contains(&k["fixture/s0/fixture"]),
        "{fixture_path}"
    );
    assert_eq!(golden[2], "<out>");

    let device = line("./device.sh ");
    assert_eq!(device.len(), 5, "{device:?}");
    assert!(
        device[1].starts_with(&root_s) && device[1].ends_with("kernels"),
        "{device:?}"
    );
    assert_eq!(&device[2], fixture_path);
    assert!(
        device[3].starts_with(&format!("{root_s}/cache/")),
        "{device:?}"
    );
    assert!(device[3].contains(&k["golden/s0/golden"]), "{device:?}");
    assert_eq!(device[4], "<devices>");

    let pwned: Vec<PathBuf> = files_under(s.dir())
        .into_iter()
        .filter(|p| p.ends_with("pwned"))
        .collect();
    assert!(pwned.is_empty(), "{pwned:?}");
}

#[test]
fn lock_command_runs_this_binary_inner_once() {
    let (_s, root) = odd_dir_suite();
    let v: Value =
        serde_json::from_slice(&odd_cmd(&root, &["plan", "--format", "json"]).stdout).unwrap();
    let lock = v["device"]["lock_command"].as_str().unwrap().to_string();
    let words = shell_words::split(&lock).unwrap();
    assert_eq!(words[0], TASK_SUBMIT);
    assert_eq!(
        words[1..3],
        ["--device-num", "2"],
        "{{device_count}} is the largest `devices`"
    );
    assert_eq!(words[3], "--run");
    assert_eq!(words.len(), 5, "{{run}} is one word: {words:?}");
    let inner = shell_words::split(&words[4]).unwrap();
    assert_eq!(inner.len(), 3, "{inner:?}");
    assert_eq!(
        PathBuf::from(&inner[0]),
        scenerun_exe(),
        "the absolute path of this binary"
    );
    assert_eq!(inner[1], "inner");
    assert!(
        Path::new(&inner[2]).starts_with(root.join("build/scenerun")),
        "the frozen plan in the job dir: {inner:?}"
    );

    let text = stdout(&odd_cmd(&root, &["device", "--plan"]));
    assert!(
        text.contains(&format!("lock command (called once):\n  {lock}\n")),
        "{text}"
    );
    let dry = stdout(&odd_cmd(&root, &["device", "--dry-run"]));
    assert!(dry.lines().any(|l| l == lock), "{dry}");
}

#[test]
fn failing_identity_command_is_an_infrastructure_error() {
    let s = basic_suite(1);
    edit_manifest(
        &s,
        "identity: \"cc --version\"",
        "identity: \"echo broken; exit 3\"",
    );
    for args in [
        &["plan"][..],
        &["warm"],
        &["warm", "--dry-run"],
        &["device", "--plan"],
    ] {
        let err = stderr(s.cmd(args).assert().code(3).get_output());
        assert!(err.contains("toolchain `cc`"), "{args:?}: {err}");
        assert!(err.contains("identity"), "{err}");
        assert!(err.contains("broken"), "the command's output: {err}");
    }
    assert_eq!(s.count("logs/cc.log"), 0);
    assert_eq!(s.count("logs/gen.log"), 0);
    // A selection without kernels needs no identity.
    edit_manifest(&s, "    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/k.c\n        include_dirs: [include]\n        flags: [\"-O1\"]\n", "");
    edit_manifest(&s, "{kernels} ", "");
    s.cmd(&["plan"]).assert().success();
}
