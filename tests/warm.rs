//! Integration tests: warm (DESIGN.md §1 invariants, §4 keys, §5 cache, §6 warm).
//!
//! Every suite here is written into a temp dir with a compiler wrapper and scripts that
//! use paths relative to the manifest's directory (commands run there), so a suite can be
//! moved and still produce the same keys. Each wrapper appends one line per run to a log
//! under `logs/`: the tests count those lines, never seconds. Overlap checks compare
//! timestamps the scripts themselves wrote.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as StdCommand, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use predicates::prelude::*;
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

/// A fixture whose inputs are only its own data file (so changing one scene's data
/// changes only that scene's keys).
fn gen_golden_own(scene: &str) -> String {
    format!(
        "    fixture:\n      run: \"./gen.sh {{out}} {{scene}}\"\n      inputs: [gen.sh, data/{scene}.txt]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}} {{scene}}\"\n      inputs: [golden.sh]\n"
    )
}

/// Wrapper, scripts, headers and sources shared by most tests.
fn base_suite() -> Suite {
    let s = Suite::new();
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
    fs::create_dir_all(s.path("logs")).unwrap();
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
        "warm {args:?} failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
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
    let text = fs::read_to_string(s.path("build/scenerun/warm.json")).expect("warm.json");
    let v: Value = serde_json::from_str(&text).expect("warm.json parses");
    v["steps"].as_array().expect("steps").clone()
}

fn record_of<'a>(rec: &'a [Value], kind: &str, scene: &str, name: &str) -> &'a Value {
    rec.iter()
        .find(|v| v["kind"] == kind && v["scene"] == scene && v["name"] == name)
        .unwrap_or_else(|| panic!("no record {kind} {scene}/{name} in {rec:?}"))
}

/// Entry directories of one kind in a cache root.
fn entries(cache: &Path, kind: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(shards) = fs::read_dir(cache.join("entries").join(kind)) else {
        return out;
    };
    for shard in shards.flatten() {
        for e in fs::read_dir(shard.path()).unwrap().flatten() {
            out.push(e.path());
        }
    }
    out.sort();
    out
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

/// Whether a process is alive (a zombie counts as dead: nobody may reap orphans here).
fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("?");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// Poll `cond` until true or `limit` passes; whether it became true.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t0.elapsed() > limit {
            return false;
        }
        sleep(Duration::from_millis(20));
    }
}

fn read_pid(p: &Path) -> Option<i32> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// The real binary as a child process (for signals), in the suite's directory.
fn spawn_warm(s: &Suite, args: &[&str]) -> Child {
    StdCommand::new(assert_cmd::cargo::cargo_bin("scenerun"))
        .current_dir(s.dir())
        .env("CI", "true")
        .env("NO_COLOR", "1")
        .env_remove("SCENERUN_MANIFEST")
        .env_remove("SCENERUN_CACHE_DIR")
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
fn wait_child(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("scenerun did not exit within {limit:?}");
        }
        sleep(Duration::from_millis(20));
    }
}

/// (start, end) pairs written by the timing scripts, one file per step.
fn intervals(dir: &Path) -> Vec<(String, f64, f64)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).expect("timing dir").flatten() {
        let text = fs::read_to_string(e.path()).unwrap();
        let nums: Vec<f64> = text
            .split_whitespace()
            .map(|w| w.parse().expect("timestamp"))
            .collect();
        assert_eq!(
            nums.len(),
            2,
            "start and end in {}: {text:?}",
            e.path().display()
        );
        out.push((
            e.file_name().to_string_lossy().to_string(),
            nums[0],
            nums[1],
        ));
    }
    out.sort_by(|a, b| a.1.total_cmp(&b.1));
    out
}

fn assert_no_overlap(iv: &[(String, f64, f64)]) {
    for w in iv.windows(2) {
        assert!(
            w[0].2 <= w[1].1,
            "{} ({}..{}) overlaps {} ({}..{})",
            w[0].0,
            w[0].1,
            w[0].2,
            w[1].0,
            w[1].1,
            w[1].2
        );
    }
}

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
    let mut y = head(true);
    y.push_str(&scene(
        "s0",
        &[("m", "kernels/m.c"), ("c", "kernels/c.c")],
        "",
    ));
    s.manifest(&y);
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

#[test]
fn new_header_that_shadows_an_old_one_rebuilds() {
    let s = base_suite();
    s.write("include2/shadow.h", "#define SHADOW 1\n");
    s.write(
        "kernels/sh.c",
        "#include \"shadow.h\"\nint sh(void) { return SHADOW; }\n",
    );
    let mut y = head(false);
    y.push_str("  - name: s0\n    kernels:\n      - name: sh\n        toolchain: cc\n        source: kernels/sh.c\n        include_dirs: [include, include2]\n");
    s.manifest(&y);
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 1);
    // A header of the same name in an earlier include dir: the compiler now reads it.
    s.write("include/shadow.h", "#define SHADOW 2\n");
    assert_eq!(
        status_of(&plan_steps(&s, &[]), "kernel", "s0", "sh"),
        "miss"
    );
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 2);
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

// ---------------------------------------------------------------------------------------
// Relocation, concurrency, kill -9
// ---------------------------------------------------------------------------------------

#[test]
fn moved_suite_and_cache_are_all_hits() {
    let parent = tempfile::tempdir().unwrap();
    let s = three_scene_suite_with(true);
    warm(&s, &[]);
    // Move the checkout (cache.dir is relative: the cache moves with it). The original
    // path is gone afterwards.
    let moved = parent.path().join("elsewhere/checkout two");
    fs::create_dir_all(moved.parent().unwrap()).unwrap();
    let status = StdCommand::new("cp")
        .arg("-a")
        .arg(s.dir())
        .arg(&moved)
        .status()
        .unwrap();
    assert!(status.success());
    let old = s.dir().to_path_buf();
    let s2 = Suite {
        tmp: tempfile::TempDir::new_in(parent.path()).unwrap(),
    };
    fs::remove_dir_all(s2.dir()).unwrap();
    fs::rename(&moved, s2.dir()).unwrap();
    drop(s);
    assert!(!old.exists());

    let steps = plan_steps(&s2, &[]);
    assert!(all_hits(&steps), "moved checkout: {steps:#?}");
    warm(&s2, &[]);
    assert_eq!(s2.count("logs/cc.log"), 3);
    assert_eq!(s2.count("logs/gen.log"), 3);
    assert_eq!(s2.count("logs/golden.log"), 3);

    // Now the cache alone moves elsewhere (as actions/cache restores it), via --cache-dir.
    let cache = parent.path().join("restored-cache");
    fs::rename(s2.path("cache"), &cache).unwrap();
    let flag = cache.display().to_string();
    let steps = plan_steps(&s2, &["--cache-dir", &flag]);
    assert!(all_hits(&steps), "moved cache: {steps:#?}");
    warm(&s2, &["--cache-dir", &flag]);
    assert_eq!(s2.count("logs/cc.log"), 3);
    assert_eq!(s2.count("logs/gen.log"), 3);
    assert_eq!(s2.count("logs/golden.log"), 3);
}

#[test]
fn concurrent_warms_on_one_cache_build_each_key_once() {
    let shared = tempfile::tempdir().unwrap();
    let cache = shared.path().join("cache");
    let suites: Vec<Suite> = (0..3)
        .map(|_| {
            let s = three_scene_suite_with(true);
            // Slow steps, so that the three runs overlap.
            s.script(
                "bin/cc-log",
                "#!/bin/sh\necho \"$*\" >> logs/cc.log\nsleep 0.3\nexec cc \"$@\"\n",
            );
            s.script(
                "gen.sh",
                "#!/bin/sh\necho \"$2\" >> logs/gen.log\nsleep 0.3\ncp \"data/$2.txt\" \"$1/input.txt\"\n",
            );
            s
        })
        .collect();
    let flag = cache.display().to_string();
    let children: Vec<Child> = suites
        .iter()
        .map(|s| spawn_warm(s, &["--cache-dir", &flag]))
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "warm {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let total = |rel: &str| suites.iter().map(|s| s.count(rel)).sum::<usize>();
    assert_eq!(total("logs/cc.log"), 3, "each kernel key compiled once");
    assert_eq!(total("logs/gen.log"), 3, "each fixture key generated once");
    assert_eq!(total("logs/golden.log"), 3, "each golden key computed once");
    for s in &suites {
        assert!(all_hits(&plan_steps(s, &["--cache-dir", &flag])));
    }
}

/// A small xorshift generator: kill moments vary per round, and the seed is printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn kill_9_at_random_moments_never_leaves_a_servable_partial_entry() {
    let s = base_suite();
    // Steps that write several files with pauses in between, so kills land mid-write.
    s.script(
        "gen.sh",
        "#!/bin/sh\necho \"$2\" >> logs/gen.log\nfor i in 1 2 3; do cat data/$2.txt data/round.txt > \"$1/part$i\"; sleep 0.05; done\n",
    );
    s.script(
        "golden.sh",
        "#!/bin/sh\necho \"$3\" >> logs/golden.log\nfor f in \"$1\"/*; do wc -c < \"$f\" > \"$2/$(basename \"$f\").len\"; sleep 0.03; done\n",
    );
    let mut y = head(false);
    let scenes = ["k0", "k1", "k2", "k3"];
    for n in scenes {
        data(&s, n, &format!("{n}\n"));
        y.push_str(&scene(
            n,
            &[("a", "kernels/a.c"), ("b", "kernels/b.c")],
            &format!(
                "    fixture:\n      run: \"./gen.sh {{out}} {{scene}}\"\n      inputs: [gen.sh, data/{n}.txt, data/round.txt]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}} {{scene}}\"\n      inputs: [golden.sh]\n"
            ),
        ));
    }
    s.manifest(&y);
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill -9 seed: {seed}");
    let mut rng = Rng(seed);
    for round in 0..10 {
        // New fixture input every round: there is always work to interrupt.
        s.write("data/round.txt", &format!("round {round}\n"));
        // Every other round a new kernel source too.
        if round % 2 == 0 {
            s.write(
                "kernels/b.c",
                &format!("#include \"other.h\"\nint b(int x) {{ return x + OTHER + {round}; }}\n"),
            );
        }
        let mut child = spawn_warm(&s, &["-j", "2"]);
        sleep(Duration::from_millis(rng.below(700)));
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = wait_child(&mut child, Duration::from_secs(10));
        let (code, text) = verify_code(&s, &[]);
        assert_eq!(code, 0, "round {round} (seed {seed}): verify found\n{text}");
    }
    // The step groups of the last killed run die with it (the watchdog); then a full warm
    // completes over whatever the kills left behind.
    let out = warm(&s, &["--strict"]);
    let rec = warm_record(&s);
    for n in scenes {
        for (kind, name) in [
            ("kernel", "a"),
            ("kernel", "b"),
            ("fixture", "fixture"),
            ("golden", "golden"),
        ] {
            let r = record_of(&rec, kind, n, name);
            assert!(
                r["outcome"] == "built" || r["outcome"] == "hit",
                "{kind} {n}/{name}: {r}\n{}",
                stderr(&out)
            );
        }
    }
    assert!(all_hits(&plan_steps(&s, &[])));
    assert_verify_clean(&s);
    // Every published fixture is whole: three parts, each with this round's data.
    for e in entries(&s.path("cache"), "fixture") {
        let meta: Value = serde_json::from_slice(&fs::read(e.join("meta.json")).unwrap()).unwrap();
        assert_eq!(
            meta["files"].as_array().unwrap().len(),
            3,
            "{}",
            e.display()
        );
    }
}

// ---------------------------------------------------------------------------------------
// Damaged entries
// ---------------------------------------------------------------------------------------

#[test]
fn damaged_entries_are_found_removed_and_rebuilt_never_served() {
    let s = three_scene_suite();
    warm(&s, &[]);
    let cache = s.path("cache");

    // 1. A kernel truncated: the plan calls it stale (the size check), warm rebuilds it.
    let kernels = entries(&cache, "kernel");
    let victim = kernels
        .iter()
        .find(|e| {
            let m: Value = serde_json::from_slice(&fs::read(e.join("meta.json")).unwrap()).unwrap();
            m["built_by"].as_str().unwrap().ends_with("/c")
        })
        .expect("kernel c's entry")
        .clone();
    let out = victim.join("out");
    let len = fs::metadata(&out).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&out)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (code, text) = verify_code(&s, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("corrupt"), "{text}");
    let steps = plan_steps(&s, &[]);
    assert_eq!(status_of(&steps, "kernel", "s1", "c"), "stale");
    assert_eq!(status_of(&steps, "kernel", "s0", "a"), "hit");
    s.cmd(&["warm", "--dry-run"])
        .assert()
        .success()
        .stdout(predicate::str::contains("# compile s1/c\n"));
    warm(&s, &[]);
    assert_eq!(compiled(&s)[3..], strs(&["kernels/c.c"]));
    assert_verify_clean(&s);

    // 2. A fixture file altered in place (same size): only verify can tell. It exits 1,
    //    also with --fix, which removes the entry; the next warm rebuilds it.
    let fixtures = entries(&cache, "fixture");
    let victim = fixtures[0].clone();
    let file = victim.join("out/input.txt");
    let mut bytes = fs::read(&file).unwrap();
    bytes[0] ^= 0x20;
    fs::write(&file, &bytes).unwrap();
    let (code, text) = verify_code(&s, &[]);
    assert_eq!(code, 1, "{text}");
    let (code, text) = verify_code(&s, &["--fix"]);
    assert_eq!(code, 1, "--fix still reports what it found: {text}");
    assert!(text.contains("removed"), "{text}");
    assert!(!victim.exists(), "the damaged entry is gone");
    assert_verify_clean(&s);
    let steps = plan_steps(&s, &[]);
    let missing: Vec<&Value> = steps.iter().filter(|v| v["status"] != "hit").collect();
    assert!(
        missing.iter().any(|v| v["kind"] == "fixture")
            && missing
                .iter()
                .all(|v| v["kind"] == "fixture" || v["kind"] == "golden"),
        "{missing:?}"
    );
    warm(&s, &[]);
    assert_eq!(
        s.count("logs/gen.log"),
        4,
        "the removed fixture was generated again"
    );
    assert_eq!(s.count("logs/cc.log"), 4);
    assert_eq!(
        s.count("logs/golden.log"),
        3,
        "the golden's key did not change"
    );
    assert!(all_hits(&plan_steps(&s, &[])));
    assert_verify_clean(&s);

    // 3. An entry with a file removed, and one with an extra file: not servable / corrupt.
    let golden = entries(&cache, "golden")[0].clone();
    fs::remove_file(golden.join("out/expected.txt")).unwrap();
    let steps = plan_steps(&s, &[]);
    assert_eq!(
        steps.iter().filter(|v| v["status"] == "stale").count(),
        1,
        "{steps:#?}"
    );
    warm(&s, &[]);
    assert_eq!(
        s.count("logs/golden.log"),
        4,
        "the damaged golden was computed again"
    );
    let golden = entries(&cache, "golden")[0].clone();
    fs::write(golden.join("out/extra.txt"), "stray").unwrap();
    assert_eq!(verify_code(&s, &[]).0, 1);
}

// ---------------------------------------------------------------------------------------
// Resources and timeouts
// ---------------------------------------------------------------------------------------

/// A suite of `n` kernel-less scenes whose fixtures write their start and end times to
/// `times/<scene>` (and `SCENERUN_THREADS` to `threads/<scene>`), with `hints` YAML.
fn timing_suite(n: usize, hints: &str) -> Suite {
    let s = base_suite();
    s.script(
        "timed.sh",
        "#!/bin/sh\nmkdir -p times threads\nstart=$(date +%s.%N)\necho \"$SCENERUN_THREADS\" > threads/$2\nsleep 0.3\necho x > \"$1/out\"\necho \"$start $(date +%s.%N)\" > times/$2\n",
    );
    let mut y = head(false);
    for i in 0..n {
        y.push_str(&scene(
            &format!("r{i}"),
            &[],
            &format!("    fixture:\n      run: \"./timed.sh {{out}} {{scene}}\"\n      inputs: [timed.sh]\n{hints}"),
        ));
    }
    s.manifest(&y);
    s
}

#[test]
fn memory_hints_keep_big_steps_from_overlapping() {
    let s = timing_suite(3, "      memory: 600MiB\n");
    warm(&s, &["-j", "4", "--memory", "1GiB"]);
    let iv = intervals(&s.path("times"));
    assert_eq!(iv.len(), 3);
    assert_no_overlap(&iv);
}

#[test]
fn threads_hint_takes_slots_and_is_exported() {
    let s = timing_suite(3, "      threads: 2\n");
    warm(&s, &["-j", "2"]);
    let iv = intervals(&s.path("times"));
    assert_eq!(iv.len(), 3);
    assert_no_overlap(&iv);
    for i in 0..3 {
        assert_eq!(s.read(&format!("threads/r{i}")).trim(), "2");
    }
}

#[test]
fn step_bigger_than_the_memory_budget_runs_alone_rather_than_never() {
    let s = timing_suite(2, "      memory: 2GiB\n");
    warm(&s, &["-j", "4", "--memory", "1GiB"]);
    let iv = intervals(&s.path("times"));
    assert_eq!(iv.len(), 2);
    assert_no_overlap(&iv);
}

#[test]
fn timeout_kills_the_whole_process_group_and_fails_the_scene() {
    let s = base_suite();
    // The grandchild would touch the marker after 2 s if it survived the timeout.
    s.script(
        "hang.sh",
        "#!/bin/sh\nsh -c 'echo $$ > grandchild.pid; sleep 2; touch survived' &\necho $$ > child.pid\nsleep 30\n",
    );
    let mut y = head(false);
    y.push_str(&scene(
        "hangs",
        &[],
        "    fixture:\n      run: \"./hang.sh {out}\"\n      inputs: [hang.sh]\n      timeout: 1s\n    golden:\n      run: \"./golden.sh {fixture} {out} {scene}\"\n      inputs: [golden.sh]\n",
    ));
    data(&s, "fine", "fine\n");
    y.push_str(&scene(
        "fine",
        &[("c", "kernels/c.c")],
        &gen_golden_own("fine"),
    ));
    s.manifest(&y);
    let t0 = Instant::now();
    let out = warm(&s, &[]);
    let err = stderr(&out);
    assert!(err.contains("hangs"), "{err}");
    assert!(err.contains("timed out"), "{err}");
    let rec = warm_record(&s);
    assert_eq!(
        record_of(&rec, "fixture", "hangs", "fixture")["outcome"],
        "failed"
    );
    assert!(record_of(&rec, "fixture", "hangs", "fixture")["error"]
        .as_str()
        .unwrap()
        .contains("timed out"));
    assert_eq!(
        record_of(&rec, "golden", "hangs", "golden")["outcome"],
        "skipped"
    );
    assert_eq!(
        record_of(&rec, "golden", "fine", "golden")["outcome"],
        "built"
    );
    assert_eq!(
        s.count("logs/golden.log"),
        1,
        "the golden of the timed-out fixture never ran"
    );
    let child = read_pid(&s.path("child.pid")).expect("the step wrote its pid");
    let grandchild = read_pid(&s.path("grandchild.pid")).expect("the grandchild wrote its pid");
    assert!(!alive(child), "the step's shell survived its timeout");
    assert!(
        wait_for(Duration::from_secs(2), || !alive(grandchild)),
        "the grandchild survived the timeout"
    );
    // Give a survivor the time to do harm, then check it did none.
    let until = Duration::from_millis(2500);
    if let Some(rest) = until.checked_sub(t0.elapsed()) {
        sleep(rest);
    }
    assert!(
        !s.path("survived").exists(),
        "a grandchild outlived the timeout"
    );
    assert!(
        entries(&s.path("cache"), "fixture").len() == 1,
        "only the fine fixture is published"
    );
}

// ---------------------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------------------

#[test]
fn failing_kernel_fails_its_scene_only_and_is_never_cached() {
    let s = three_scene_suite();
    s.write(
        "kernels/b.c",
        "int b(int x) { return x + ; } /* BROKEN */\n",
    );
    let out = warm(&s, &[]);
    let err = stderr(&out);
    assert!(err.contains("scene s0"), "names the failed scene: {err}");
    assert!(err.contains("scene s2"), "names the failed scene: {err}");
    assert!(!err.contains("scene s1"), "s1 did not fail: {err}");
    // A step's output goes to its log, never to scenerun's stdout (results only).
    assert!(!stdout(&out).contains("error"), "stdout: {}", stdout(&out));
    // Every other step completed.
    let rec = warm_record(&s);
    for (kind, scene, name) in [
        ("kernel", "s0", "a"),
        ("kernel", "s1", "a"),
        ("kernel", "s1", "c"),
        ("fixture", "s0", "fixture"),
        ("golden", "s2", "golden"),
    ] {
        assert_eq!(
            record_of(&rec, kind, scene, name)["outcome"],
            "built",
            "{kind} {scene}/{name}"
        );
    }
    let failed = record_of(&rec, "kernel", "s0", "b");
    assert_eq!(failed["outcome"], "failed");
    let tail = failed["log_tail"].as_str().expect("a log tail");
    assert!(
        tail.contains("error"),
        "the compiler's message is in the tail: {tail}"
    );
    let log = failed["log"].as_str().unwrap();
    assert!(
        log.ends_with("build/scenerun/logs/s0/compile-b.log") || log.contains("logs/s0/"),
        "{log}"
    );
    assert!(fs::read_to_string(log).unwrap().contains("error"));
    assert!(
        entries(&s.path("cache"), "kernel").len() == 2,
        "a failure is not an entry"
    );
    assert_eq!(
        status_of(&plan_steps(&s, &[]), "kernel", "s0", "b"),
        "failed-in-warm"
    );

    // --strict: the same pass, exit 1. The failure is retried (never cached).
    let before = s.count("logs/cc.log");
    let strict = s.cmd(&["warm", "--strict"]).output().unwrap();
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    assert_eq!(compiled(&s)[before..], strs(&["kernels/b.c"]));

    // Fixed: built by the next warm, and the record forgets the failure.
    s.write(
        "kernels/b.c",
        "#include \"other.h\"\nint b(int x) { return x + OTHER; }\n",
    );
    let out = warm(&s, &["--strict"]);
    assert_eq!(
        compiled(&s)[before + 1..],
        strs(&["kernels/b.c"]),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("failed:"), "{}", stderr(&out));
    let rec = warm_record(&s);
    assert_eq!(record_of(&rec, "kernel", "s0", "b")["outcome"], "built");
    assert_eq!(record_of(&rec, "kernel", "s2", "b")["outcome"], "built");
    assert!(all_hits(&plan_steps(&s, &[])));
}

#[test]
fn step_that_leaves_out_empty_fails_saying_so() {
    let s = base_suite();
    let mut y = head(false);
    y.push_str(&scene(
        "lazy",
        &[],
        "    fixture:\n      run: \"true {out}\"\n      inputs: []\n",
    ));
    s.manifest(&y);
    let out = warm(&s, &[]);
    let err = stderr(&out);
    assert!(err.contains("lazy"), "{err}");
    assert!(err.contains("empty"), "{err}");
    let rec = warm_record(&s);
    let r = record_of(&rec, "fixture", "lazy", "fixture");
    assert_eq!(r["outcome"], "failed");
    assert!(r["error"].as_str().unwrap().contains("empty"), "{r}");
    assert!(entries(&s.path("cache"), "fixture").is_empty());
    s.cmd(&["warm", "--strict"]).assert().code(1);
}

#[test]
fn kernel_that_writes_no_out_fails_saying_so() {
    let s = base_suite();
    let mut y = head(false).replace(
        "./bin/cc-log -c {source} -o {out}",
        "./bin/cc-log -c {source} -o {out}.elsewhere",
    );
    y.push_str(&scene("k", &[("c", "kernels/c.c")], ""));
    s.manifest(&y);
    let out = warm(&s, &[]);
    let err = stderr(&out);
    assert!(err.contains("scene k"), "{err}");
    assert!(err.contains("missing") || err.contains("empty"), "{err}");
    assert!(entries(&s.path("cache"), "kernel").is_empty());
}

// ---------------------------------------------------------------------------------------
// Job-scoped fixtures
// ---------------------------------------------------------------------------------------

#[test]
fn persist_false_fixture_lives_in_the_job_dir_and_is_reused() {
    let s = base_suite();
    data(&s, "big", "huge tensors\n");
    let mut y = head(false);
    y.push_str(&scene(
        "big",
        &[],
        "    fixture:\n      run: \"./gen.sh {out} {scene}\"\n      inputs: [gen.sh, data/big.txt]\n      persist: false\n    golden:\n      run: \"./golden.sh {fixture} {out} {scene}\"\n      inputs: [golden.sh]\n",
    ));
    s.manifest(&y);
    warm(&s, &[]);
    assert_eq!(s.count("logs/gen.log"), 1);
    assert!(
        entries(&s.path("cache"), "fixture").is_empty(),
        "never in the cache"
    );
    let job = entries(&s.path("build/scenerun/job"), "fixture");
    assert_eq!(job.len(), 1, "in the job dir");
    assert_eq!(
        fs::read_to_string(job[0].join("out/input.txt")).unwrap(),
        "huge tensors\n"
    );
    // The golden (persist by default) is in the cache.
    assert_eq!(entries(&s.path("cache"), "golden").len(), 1);
    let steps = plan_steps(&s, &[]);
    let f = steps.iter().find(|v| v["kind"] == "fixture").unwrap();
    assert_eq!(f["status"], "hit");
    assert_eq!(f["scope"], "job");

    warm(&s, &[]);
    assert_eq!(
        s.count("logs/gen.log"),
        1,
        "reused while its key is unchanged"
    );
    assert_eq!(s.count("logs/golden.log"), 1);

    data(&s, "big", "other tensors\n");
    warm(&s, &[]);
    assert_eq!(s.count("logs/gen.log"), 2, "a new key: generated again");
    assert_eq!(s.count("logs/golden.log"), 2);
    assert!(entries(&s.path("cache"), "fixture").is_empty());
}

// ---------------------------------------------------------------------------------------
// An unusable cache
// ---------------------------------------------------------------------------------------

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

#[test]
fn cache_dir_that_cannot_be_created_is_exit_3_naming_it() {
    let s = three_scene_suite();
    s.write(
        "blocker",
        "a regular file where the cache's parent should be\n",
    );
    let y = s
        .read("scenes.yaml")
        .replace("  dir: cache\n", "  dir: blocker/cache\n");
    s.manifest(&y);
    let out = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("cache unusable"), "{err}");
    assert!(err.contains("blocker/cache"), "names the path: {err}");
    assert_eq!(
        s.count("logs/cc.log"),
        0,
        "nothing ran against an unusable cache"
    );
    assert_eq!(s.count("logs/gen.log"), 0);
}

#[test]
fn write_limit_in_the_cache_is_exit_3_and_publishes_nothing() {
    let s = base_suite();
    // Many small files: each fits under the limit, the integrity record does not.
    s.script(
        "many.sh",
        "#!/bin/sh\necho many >> logs/gen.log\nfor i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do echo \"part $i\" > \"$1/a-rather-long-file-name-number-$i.txt\"; done\n",
    );
    let mut y = head(false);
    y.push_str(&scene(
        "many",
        &[],
        "    fixture:\n      run: \"./many.sh {out}\"\n      inputs: [many.sh]\n",
    ));
    s.manifest(&y);
    let bin = assert_cmd::cargo::cargo_bin("scenerun");
    let out = StdCommand::new("sh")
        .arg("-c")
        .arg("ulimit -f 1; exec \"$0\" --manifest scenes.yaml warm")
        .arg(&bin)
        .current_dir(s.dir())
        .env("CI", "true")
        .env_remove("SCENERUN_CACHE_DIR")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(s.count("logs/gen.log"), 1, "the step ran: {err}");
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("cache unusable") && err.contains("File too large"),
        "{err}"
    );
    let cache = s.path("cache");
    assert!(
        entries(&cache, "fixture").is_empty(),
        "nothing half-published"
    );
    assert!(
        staging_left(&cache).is_empty(),
        "{:?}",
        staging_left(&cache)
    );
    assert_verify_clean(&s);
    // Without the limit, the next warm builds it whole.
    warm(&s, &["--strict"]);
    assert_eq!(entries(&cache, "fixture").len(), 1);
    assert_verify_clean(&s);
}

#[test]
fn write_limit_hit_by_the_step_itself_fails_its_scene_cleanly() {
    let s = base_suite();
    s.script(
        "big.sh",
        "#!/bin/sh\nhead -c 65536 /dev/zero > \"$1/big.bin\"\n",
    );
    let mut y = head(false);
    y.push_str(&scene(
        "big",
        &[],
        "    fixture:\n      run: \"./big.sh {out}\"\n      inputs: [big.sh]\n",
    ));
    s.manifest(&y);
    let bin = assert_cmd::cargo::cargo_bin("scenerun");
    let out = StdCommand::new("sh")
        .arg("-c")
        .arg("ulimit -f 1; exec \"$0\" --manifest scenes.yaml warm")
        .arg(&bin)
        .current_dir(s.dir())
        .env("CI", "true")
        .env_remove("SCENERUN_CACHE_DIR")
        .output()
        .unwrap();
    let err = stderr(&out);
    // Either the cache write is what fails (3) or the step does (a failed scene, 0).
    match out.status.code() {
        Some(3) => assert!(err.contains("cache unusable"), "{err}"),
        Some(0) => {
            assert!(err.contains("scene big"), "{err}");
            let rec = warm_record(&s);
            let r = record_of(&rec, "fixture", "big", "fixture");
            assert_eq!(r["outcome"], "failed");
            let tail = r["log_tail"].as_str().unwrap_or_default();
            // EFBIG from write(2), or the kernel's SIGXFSZ (the default for steps).
            assert!(
                tail.contains("File too large") || tail.contains("File size limit exceeded"),
                "the cause is in the record: {r}"
            );
        }
        other => panic!("exit {other:?}: {err}"),
    }
    assert!(entries(&s.path("cache"), "fixture").is_empty());
    assert!(staging_left(&s.path("cache")).is_empty());
    assert_verify_clean(&s);
}

// ---------------------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------------------

/// One scene whose fixture, while the file `slow` exists, starts a grandchild and sleeps;
/// both write their pids. `slow` is not an input: removing it keeps the key.
fn long_fixture_suite() -> Suite {
    let s = base_suite();
    s.script(
        "long.sh",
        "#!/bin/sh\nif [ -f slow ]; then\n  sh -c 'echo $$ > grand.pid.tmp; mv grand.pid.tmp grand.pid; sleep 30; touch survived' &\n  echo $$ > step.pid.tmp; mv step.pid.tmp step.pid\n  for i in 1 2 3 4 5 6 7 8 9 10; do echo $i > \"$1/part$i\"; sleep 3; done\nfi\necho done > \"$1/all\"\n",
    );
    s.write("slow", "");
    let mut y = head(false);
    y.push_str(&scene(
        "long",
        &[("c", "kernels/c.c")],
        "    fixture:\n      run: \"./long.sh {out}\"\n      inputs: [long.sh]\n",
    ));
    s.manifest(&y);
    s
}

fn wait_for_pids(s: &Suite, child: &mut Child) -> (i32, i32) {
    let ok = wait_for(Duration::from_secs(20), || {
        s.path("step.pid").exists() && s.path("grand.pid").exists()
    });
    if !ok {
        let _ = child.kill();
        panic!("the long fixture never started");
    }
    (
        read_pid(&s.path("step.pid")).unwrap(),
        read_pid(&s.path("grand.pid")).unwrap(),
    )
}

#[test]
fn sigint_and_sigterm_kill_the_steps_publish_nothing_and_exit_2() {
    // In the third round the step ignores SIGTERM: SIGKILL follows after the grace period.
    for (sig, stubborn) in [
        (libc::SIGINT, false),
        (libc::SIGTERM, false),
        (libc::SIGINT, true),
    ] {
        let s = long_fixture_suite();
        if stubborn {
            // The group leader itself ignores SIGTERM, and so do its children.
            let y = s.read("scenes.yaml").replace(
                "run: \"./long.sh {out}\"",
                "run: \"trap '' TERM; ./long.sh {out}\"",
            );
            s.manifest(&y);
        }
        let mut child = spawn_warm(&s, &[]);
        let (step, grand) = wait_for_pids(&s, &mut child);
        assert!(alive(step) && alive(grand));
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = wait_child(&mut child, Duration::from_secs(10));
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(st.code(), Some(2), "signal {sig}: {err}");
        assert!(
            wait_for(Duration::from_secs(3), || !alive(step) && !alive(grand)),
            "signal {sig}: a step process outlived scenerun (step {step} {}, grandchild {grand} {})",
            alive(step),
            alive(grand)
        );
        let cache = s.path("cache");
        assert!(
            entries(&cache, "fixture").is_empty(),
            "signal {sig}: nothing partial published"
        );
        assert!(
            staging_left(&cache).is_empty(),
            "signal {sig}: staging left behind: {:?}",
            staging_left(&cache)
        );
        assert_verify_clean(&s);
        assert!(!s.path("survived").exists());
    }
}

#[test]
fn sigkill_of_scenerun_alone_takes_its_step_groups_down() {
    let s = long_fixture_suite();
    let mut child = spawn_warm(&s, &[]);
    let (step, grand) = wait_for_pids(&s, &mut child);
    // Only scenerun itself: not its process group.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = wait_child(&mut child, Duration::from_secs(5));
    assert!(
        wait_for(Duration::from_secs(2), || !alive(step) && !alive(grand)),
        "orphaned steps still alive: step {step} {}, grandchild {grand} {}",
        alive(step),
        alive(grand)
    );
    assert!(entries(&s.path("cache"), "fixture").is_empty());
    assert_verify_clean(&s);
    // The next warm sweeps the dead run's staging and completes.
    fs::remove_file(s.path("slow")).unwrap();
    warm(&s, &["--strict"]);
    assert_eq!(entries(&s.path("cache"), "fixture").len(), 1);
    assert!(
        staging_left(&s.path("cache")).is_empty(),
        "{:?}",
        staging_left(&s.path("cache"))
    );
    assert_verify_clean(&s);
}

// ---------------------------------------------------------------------------------------
// cache stats | prune | clean
// ---------------------------------------------------------------------------------------

fn cache_out(s: &Suite, args: &[&str]) -> String {
    let mut a = vec!["cache"];
    a.extend_from_slice(args);
    let out = s.cmd(&a).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "cache {args:?}: {}",
        stderr(&out)
    );
    stdout(&out)
}

/// `cache stats` → entries of one kind ("kernel", "fixture", "golden", "total").
fn stat_entries(text: &str, kind: &str) -> usize {
    text.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(kind)).then(|| w.next().unwrap().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no {kind} line in {text}"))
}

fn backdate(entry: &Path, ago: Duration) {
    fs::File::options()
        .write(true)
        .open(entry.join("meta.json"))
        .unwrap()
        .set_modified(SystemTime::now() - ago)
        .unwrap();
}

#[test]
fn cache_stats_prune_and_clean() {
    let s = three_scene_suite();
    warm(&s, &[]);
    let stats = cache_out(&s, &["stats"]);
    assert_eq!(stat_entries(&stats, "kernel"), 3, "{stats}");
    assert_eq!(stat_entries(&stats, "fixture"), 3, "{stats}");
    assert_eq!(stat_entries(&stats, "golden"), 3, "{stats}");
    assert_eq!(stat_entries(&stats, "total"), 9, "{stats}");
    assert!(stats.contains("last warm: 0 hits"), "{stats}");
    warm(&s, &[]);
    let stats = cache_out(&s, &["stats"]);
    assert!(stats.contains("last warm: 11 hits, 0 misses"), "{stats}");

    // Older than --max-age but used in the last 24 h: kept.
    let cache = s.path("cache");
    let all: Vec<PathBuf> = ["kernel", "fixture", "golden"]
        .iter()
        .flat_map(|k| entries(&cache, k))
        .collect();
    for e in &all {
        backdate(e, Duration::from_secs(2 * 3600));
    }
    let out = cache_out(&s, &["prune", "--max-age", "1s"]);
    assert!(out.contains("pruned 0 entries"), "{out}");
    assert!(all.iter().all(|e| e.exists()), "a recent entry was pruned");

    // Over --max-size, but everything is recent: kept, and it says so.
    let out = cache_out(&s, &["prune", "--max-size", "1KiB"]);
    assert!(out.contains("pruned 0 entries"), "{out}");
    assert!(out.contains("over its cap"), "{out}");
    assert!(all.iter().all(|e| e.exists()));

    // Unused for three days: evicted by age, unless a warm hit it since.
    let old = entries(&cache, "kernel")[0].clone();
    backdate(&old, Duration::from_secs(3 * 86400));
    warm(&s, &[]);
    let out = cache_out(&s, &["prune", "--max-age", "1d"]);
    assert!(
        out.contains("pruned 0 entries"),
        "a hit refreshes the last use: {out}"
    );
    backdate(&old, Duration::from_secs(3 * 86400));
    let out = cache_out(&s, &["prune", "--max-age", "1d"]);
    assert!(out.contains("pruned 1 entries"), "{out}");
    assert!(!old.exists());
    assert_eq!(stat_entries(&cache_out(&s, &["stats"]), "kernel"), 2);
    warm(&s, &[]);
    assert_eq!(
        s.count("logs/cc.log"),
        4,
        "the pruned kernel was compiled again"
    );
    assert_verify_clean(&s);

    // clean removes all; the next warm rebuilds everything.
    let out = cache_out(&s, &["clean"]);
    assert!(out.contains("removed 9 entries"), "{out}");
    assert_eq!(stat_entries(&cache_out(&s, &["stats"]), "total"), 0);
    warm(&s, &[]);
    assert_eq!(s.count("logs/cc.log"), 7);
    assert_eq!(s.count("logs/gen.log"), 6);
    assert_eq!(s.count("logs/golden.log"), 6);
}
