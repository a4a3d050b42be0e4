//! Resource hints and timeouts, and a cache that cannot be written (`ulimit -f`).

use std::fs;
use std::path::Path;
use std::process::{Command as StdCommand, Output};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::*;
use crate::common::*;
use serde_json::Value;

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

/// `threads: 8` on a 2-slot runner: the step takes both slots and is told it has 2 (in
/// `$SCENERUN_THREADS` and `--plan`), not 8; `scenerun plan` without `-j` shows the hint.
#[test]
fn a_threads_hint_wider_than_the_runner_is_clamped_to_its_slots() {
    let s = timing_suite(3, "      threads: 8\n");
    let threads_of = |args: &[&str]| {
        let o = s.cmd(args).output().unwrap();
        assert_eq!(code(&o), 0, "{}", show(&o));
        let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
        v["warm"]["steps"][0]["threads"].clone()
    };
    assert_eq!(
        threads_of(&["-j", "2", "warm", "--plan", "--format", "json"]),
        2
    );
    assert_eq!(threads_of(&["plan", "--format", "json"]), 8);
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
    assert!(!pid_alive(child), "the step's shell survived its timeout");
    assert!(
        wait_until(Duration::from_secs(2), || !pid_alive(grandchild)),
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
// An unusable cache
// ---------------------------------------------------------------------------------------

/// The base suite with one kernel-less scene `name` whose fixture is `{name}.sh {out}`.
fn one_fixture_suite(name: &str, script: &str) -> Suite {
    let s = base_suite();
    s.script(&format!("{name}.sh"), script);
    one_scene(
        &s,
        false,
        name,
        &[],
        &format!("    fixture:\n      run: \"./{name}.sh {{out}}\"\n      inputs: [{name}.sh]\n"),
    );
    s
}

/// `scenerun --manifest scenes.yaml warm` under `ulimit -f 1` (512-byte blocks).
fn warm_under_ulimit_f1(s: &Suite) -> Output {
    let bin = assert_cmd::cargo::cargo_bin("scenerun");
    StdCommand::new("sh")
        .arg("-c")
        .arg("ulimit -f 1; exec \"$0\" --manifest scenes.yaml warm")
        .arg(&bin)
        .current_dir(s.dir())
        .env("CI", "true")
        .env_remove("SCENERUN_CACHE_DIR")
        .output()
        .unwrap()
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
    // Many small files: each fits under the limit, the integrity record does not.
    let s = one_fixture_suite(
        "many",
        "#!/bin/sh\necho many >> logs/gen.log\nfor i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do echo \"part $i\" > \"$1/a-rather-long-file-name-number-$i.txt\"; done\n",
    );
    let out = warm_under_ulimit_f1(&s);
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
    let s = one_fixture_suite(
        "big",
        "#!/bin/sh\nhead -c 65536 /dev/zero > \"$1/big.bin\"\n",
    );
    let out = warm_under_ulimit_f1(&s);
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
