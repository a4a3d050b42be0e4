//! Content keys: what changes them and what does not (docs/cache.md).

use std::fs;

use super::*;
use crate::common::*;
// The strict (UTF-8) readers, not common's lossy ones.
use super::stdout;

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
