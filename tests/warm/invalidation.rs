//! Warm builds each unique key once, and a change rebuilds exactly what it reaches:
//! headers (also through the depfile), scripts, fixture inputs.

use std::fs;

use serde_json::Value;

use super::*;
use crate::common::*;

// ---------------------------------------------------------------------------------------
// Build once, hit after
// ---------------------------------------------------------------------------------------

#[test]
fn first_warm_builds_each_unique_key_once_and_second_runs_nothing() {
    let s = three_scene_suite();
    let out = warm(&s, &[]);
    // a, b and c once each, though a and b appear in two scenes.
    assert_eq!(
        sorted(compiled(&s)),
        strs(&["kernels/a.c", "kernels/b.c", "kernels/c.c"]),
        "{}",
        stderr(&out)
    );
    assert_eq!(sorted(lines(&s, "logs/gen.log")), strs(&["s0", "s1", "s2"]));
    assert_eq!(
        sorted(lines(&s, "logs/golden.log")),
        strs(&["s0", "s1", "s2"])
    );
    assert_eq!(entries(&s.path("cache"), "kernel").len(), 3);
    assert!(
        all_hits(&plan_steps(&s, &[])),
        "after warm, the plan is all hits"
    );

    let out = warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 3, "second warm compiled");
    assert_eq!(s.count("logs/gen.log"), 3, "second warm generated");
    assert_eq!(
        s.count("logs/golden.log"),
        3,
        "second warm computed goldens"
    );
    assert!(
        stderr(&out).contains("0 built"),
        "summary: {}",
        stderr(&out)
    );
    let rec = warm_record(&s);
    assert_eq!(rec.len(), 5 + 6, "every step recorded: {rec:?}");
    assert!(rec.iter().all(|r| r["outcome"] == "hit"), "{rec:?}");
}

#[test]
fn basic_suite_compiles_its_shared_kernel_once() {
    // basic_suite's compile command runs cc twice (compile, link) per kernel build.
    let s = basic_suite(3);
    s.cmd(&["warm"]).assert().success();
    assert_eq!(s.count("logs/cc.log"), 2, "{}", s.read("logs/cc.log"));
    assert_eq!(s.count("logs/gen.log"), 3);
    assert_eq!(s.count("logs/golden.log"), 3);
    s.cmd(&["warm"]).assert().success();
    assert_eq!(s.count("logs/cc.log"), 2);
    assert_eq!(s.count("logs/gen.log"), 3);
    assert_eq!(s.count("logs/golden.log"), 3);
}

// ---------------------------------------------------------------------------------------
// What a change rebuilds
// ---------------------------------------------------------------------------------------

#[test]
fn transitive_header_change_rebuilds_only_kernels_that_include_it() {
    let s = three_scene_suite();
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 3);
    // inner.h is reached through common.h, which only a.c includes.
    s.write("include/inner.h", "#define OFFSET 2\n");
    let steps = plan_steps(&s, &[]);
    assert_eq!(status_of(&steps, "kernel", "s0", "a"), "miss");
    assert_eq!(status_of(&steps, "kernel", "s1", "a"), "miss");
    assert_eq!(status_of(&steps, "kernel", "s0", "b"), "hit");
    assert_eq!(status_of(&steps, "kernel", "s1", "c"), "hit");
    warm(&s, &[]);
    assert_eq!(compiled(&s)[3..], strs(&["kernels/a.c"]));
    assert_eq!(s.count("logs/gen.log"), 3);
    assert_eq!(s.count("logs/golden.log"), 3);
    // A header nobody includes changes nothing.
    s.write("include/unused.h", "#define UNUSED 1\n");
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 4);
}

#[test]
fn computed_include_is_caught_by_the_depfile_recheck() {
    let s = base_suite();
    s.write("include/hidden.h", "#define HIDDEN 1\n");
    s.write(
        "kernels/m.c",
        "#define H \"hidden.h\"\n#include H\nint m(void) { return HIDDEN; }\n",
    );
    one_scene(
        &s,
        true,
        "s0",
        &[("m", "kernels/m.c"), ("c", "kernels/c.c")],
        "",
    );
    warm(&s, &[]);
    assert_eq!(sorted(compiled(&s)), strs(&["kernels/c.c", "kernels/m.c"]));
    let before = plan_steps(&s, &[]);
    assert!(all_hits(&before));

    // The scanner cannot see `#include H`: the key stays, the recorded dependency does not.
    s.write("include/hidden.h", "#define HIDDEN 22\n");
    let steps = plan_steps(&s, &[]);
    assert_eq!(status_of(&steps, "kernel", "s0", "m"), "stale");
    assert_eq!(status_of(&steps, "kernel", "s0", "c"), "hit");
    let key = |st: &[Value]| {
        st.iter()
            .find(|v| v["name"] == "m")
            .map(|v| v["key"].clone())
            .unwrap()
    };
    assert_eq!(key(&before), key(&steps), "the key itself did not change");
    warm(&s, &[]);
    assert_eq!(compiled(&s)[2..], strs(&["kernels/m.c"]));
    // Replaced under the same key: a hit again, and nothing more compiles.
    assert!(all_hits(&plan_steps(&s, &[])));
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 3);
    assert_verify_clean(&s);
}

/// The record keeps only what the key does not already commit to: the source and the
/// scanned headers are in the key by name and content, a computed include is not.
#[test]
fn the_depfile_record_keeps_only_what_the_key_does_not_cover() {
    let s = base_suite();
    s.write("include/hidden.h", "#define HIDDEN 1\n");
    s.write(
        "kernels/m.c",
        "#include \"common.h\"\n#define H \"hidden.h\"\n#include H\nint m(void) { return HIDDEN + SCALE + OFFSET; }\n",
    );
    one_scene(&s, true, "s0", &[("m", "kernels/m.c")], "");
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 1);
    let entry = entries(&s.path("cache"), "kernel");
    let meta: Value =
        serde_json::from_str(&fs::read_to_string(entry[0].join("meta.json")).unwrap()).unwrap();
    let deps: Vec<&str> = meta["deps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert!(deps.contains(&"include/hidden.h"), "{deps:?}");
    for covered in ["kernels/m.c", "include/common.h", "include/inner.h"] {
        assert!(
            !deps.contains(&covered),
            "{covered} is in the key: {deps:?}"
        );
    }
    // Left out of the record, still in the key: an edit of either rebuilds, once.
    s.write("include/inner.h", "#define OFFSET 5\n");
    assert_eq!(status_of(&plan_steps(&s, &[]), "kernel", "s0", "m"), "miss");
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 2);
    s.write("include/hidden.h", "#define HIDDEN 7\n");
    assert_eq!(
        status_of(&plan_steps(&s, &[]), "kernel", "s0", "m"),
        "stale"
    );
    warm(&s, &[]);
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 3);
}

#[test]
fn golden_script_change_reruns_goldens_only() {
    let s = three_scene_suite();
    warm(&s, &[]);
    let golden = s.read("golden.sh") + "# a comment changes the key\n";
    s.script("golden.sh", &golden);
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 3);
    assert_eq!(s.count("logs/gen.log"), 3);
    assert_eq!(s.count("logs/golden.log"), 6);
}

#[test]
fn fixture_input_change_reruns_that_fixture_and_its_golden() {
    let s = three_scene_suite();
    warm(&s, &[]);
    data(&s, "s1", "new data of s1\n");
    warm(&s, &[]);
    assert_eq!(lines(&s, "logs/gen.log")[3..], strs(&["s1"]));
    assert_eq!(lines(&s, "logs/golden.log")[3..], strs(&["s1"]));
    assert_eq!(s.count("logs/cc.log"), 3);
}

/// One kernel including `shadow.h`, found in `include2` behind an `include` that has none.
fn shadow_suite() -> Suite {
    let s = base_suite();
    s.write("include2/shadow.h", "#define SHADOW 1\n");
    s.write(
        "kernels/sh.c",
        "#include \"shadow.h\"\nint sh(void) { return SHADOW; }\n",
    );
    let mut y = head(false);
    y.push_str("  - name: s0\n    kernels:\n      - name: sh\n        toolchain: cc\n        source: kernels/sh.c\n        include_dirs: [include, include2]\n");
    s.manifest(&y);
    s
}

#[test]
fn new_header_that_shadows_an_old_one_rebuilds() {
    let s = shadow_suite();
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 1);
    // A header of the same name in an earlier include dir: the compiler now reads it.
    header_change_rebuilds(&s, "include/shadow.h", "#define SHADOW 2\n", 2);
}

/// Write `text` to `header`: the plan shows the shadow suite's kernel as a miss, and a
/// warm compiles it (`compiles` compiler runs in all since the suite was made).
fn header_change_rebuilds(s: &Suite, header: &str, text: &str, compiles: usize) {
    s.write(header, text);
    assert_eq!(status_of(&plan_steps(s, &[]), "kernel", "s0", "sh"), "miss");
    warm(s, &[]);
    assert_eq!(s.count("logs/cc.log"), compiles);
}

/// The same changes once the suite's directories are older than a racy tick, so the
/// closure memo (docs/cache.md) is trusted: a plan restores the closures instead of
/// walking headers, and still sees an edited member and a new header that shadows it.
#[test]
fn header_changes_are_seen_through_the_closure_memo() {
    use std::os::unix::fs::MetadataExt;
    let s = shadow_suite();
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 1);
    let memo = s.path("build/scenerun/closurememo.json");
    let ino = fs::metadata(&memo)
        .expect("the warm wrote the closure memo")
        .ino();
    // Restored, not computed: a plan that computed no closure does not write the memo.
    let steps = plan_steps(&s, &[]);
    assert_eq!(status_of(&steps, "kernel", "s0", "sh"), "hit");
    assert_eq!(fs::metadata(&memo).unwrap().ino(), ino);
    // An edited member: its closure is computed again.
    header_change_rebuilds(&s, "include2/shadow.h", "#define SHADOW 2\n", 2);
    // A header of the same name in an earlier include dir.
    header_change_rebuilds(&s, "include/shadow.h", "#define SHADOW 3\n", 3);
}

#[test]
fn header_found_through_the_toolchains_own_search_path_is_rechecked() {
    // `-Isys` in flags, not in include_dirs: the scanner cannot resolve the header, the
    // compiler's depfile names it.
    let s = base_suite();
    s.write("sys/vendor.h", "#define VENDOR 1\n");
    s.write(
        "kernels/v.c",
        "#include <vendor.h>\nint v(void) { return VENDOR; }\n",
    );
    let mut y = head(true);
    y.push_str("  - name: s0\n    kernels:\n      - name: v\n        toolchain: cc\n        source: kernels/v.c\n        flags: [\"-Isys\"]\n");
    s.manifest(&y);
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 1);
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 1);
    s.write("sys/vendor.h", "#define VENDOR 2\n");
    assert_eq!(
        status_of(&plan_steps(&s, &[]), "kernel", "s0", "v"),
        "stale"
    );
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 2);
    // Gone entirely: stale too, and the compile that follows fails the scene, never a hit.
    fs::remove_file(s.path("sys/vendor.h")).unwrap();
    assert_eq!(
        status_of(&plan_steps(&s, &[]), "kernel", "s0", "v"),
        "stale"
    );
    let out = warm(&s, &[]);
    assert!(stderr(&out).contains("scene s0"), "{}", stderr(&out));
    assert_eq!(s.count("logs/cc.log"), 3);
}
