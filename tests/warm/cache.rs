//! The cache shared: a moved suite or cache is all hits, concurrent warms build each
//! key once, job-scoped fixtures, and `cache stats | prune | clean`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as StdCommand};
use std::time::{Duration, SystemTime};

use super::*;
use crate::common::*;

// ---------------------------------------------------------------------------------------
// Relocation and concurrency
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

// ---------------------------------------------------------------------------------------
// Job-scoped fixtures
// ---------------------------------------------------------------------------------------

#[test]
fn persist_false_fixture_lives_in_the_job_dir_and_is_reused() {
    let s = base_suite();
    data(&s, "big", "huge tensors\n");
    one_scene(
        &s,
        false,
        "big",
        &[],
        "    fixture:\n      run: \"./gen.sh {out} {scene}\"\n      inputs: [gen.sh, data/big.txt]\n      persist: false\n    golden:\n      run: \"./golden.sh {fixture} {out} {scene}\"\n      inputs: [golden.sh]\n",
    );
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

/// The kernel entry first built by `step` (`kind/scene/name`).
fn built_by(cache: &Path, step: &str) -> PathBuf {
    let want = format!("\"built_by\":\"{step}\"");
    entries(cache, "kernel")
        .into_iter()
        .find(|e| {
            fs::read_to_string(e.join("meta.json"))
                .unwrap()
                .contains(&want)
        })
        .unwrap_or_else(|| panic!("no entry built by {step}"))
}

/// Warm prunes after it adds to the cache; a warm that added nothing skips the walk
/// while a prune with the same limits is less than an hour old.
#[test]
fn warm_prunes_after_adding_and_a_no_op_warm_only_once_an_hour() {
    let s = three_scene_suite();
    let with_d = s.read("scenes.yaml") + &scene("s3", &[("d", "kernels/d.c")], "");
    s.write("kernels/d.c", "int d(int x) { return x * 3; }\n");
    s.manifest(&with_d);
    warm(&s, &[]);
    let cache = s.path("cache");
    let marker = cache.join("last-prune.json");
    assert!(marker.exists(), "a warm that built pruned");
    // Drop d from the manifest and make its entry three days unused: the next full
    // prune evicts it (max_age 14d by default, so a 1d limit in the manifest).
    let without_d = s
        .read("scenes.yaml")
        .replace("  - name: s3\n", "  - name: s3x\n")
        .replace("kernels/d.c", "kernels/c.c");
    let limits = |y: &str| y.replace("  dir: cache\n", "  dir: cache\n  max_age: 1d\n");
    s.manifest(&limits(&without_d));
    let d = built_by(&cache, "kernel/s3/d");
    warm(&s, &[]);
    let pruned_at = fs::metadata(&marker).unwrap().modified().unwrap();
    backdate(&d, Duration::from_secs(3 * 86400));

    // Nothing added, same limits, pruned a moment ago: not walked, d stays.
    let compiles = s.count("logs/cc.log");
    let out = warm(&s, &["-v"]);
    assert_eq!(s.count("logs/cc.log"), compiles);
    assert!(stderr(&out).contains("not pruned"), "{}", stderr(&out));
    assert!(d.exists());
    assert_eq!(
        fs::metadata(&marker).unwrap().modified().unwrap(),
        pruned_at
    );

    // The last prune over an hour ago: this no-op warm prunes, and d goes.
    fs::File::options()
        .write(true)
        .open(&marker)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(2 * 3600))
        .unwrap();
    warm(&s, &[]);
    assert!(
        !d.exists(),
        "a prune over an hour old: the no-op warm pruned"
    );

    // Other limits than the last prune's: pruned at once.
    s.manifest(&limits(&with_d));
    warm(&s, &[]);
    let d = built_by(&cache, "kernel/s3/d");
    s.manifest(&limits(&without_d));
    warm(&s, &[]);
    backdate(&d, Duration::from_secs(3 * 86400));
    let out = warm(&s, &["-v"]);
    assert!(
        d.exists() && stderr(&out).contains("not pruned"),
        "{}",
        stderr(&out)
    );
    s.manifest(&without_d.replace("  dir: cache\n", "  dir: cache\n  max_age: 2d\n"));
    warm(&s, &[]);
    assert!(!d.exists(), "new limits: the no-op warm pruned");

    // A warm that builds prunes whatever the marker says.
    s.manifest(&limits(&with_d));
    warm(&s, &[]);
    let d = built_by(&cache, "kernel/s3/d");
    s.manifest(&limits(&without_d));
    backdate(&d, Duration::from_secs(3 * 86400));
    s.write("kernels/c.c", "int c(int x) { return x - 2; }\n");
    warm(&s, &[]);
    assert!(!d.exists(), "a warm that built pruned");
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
    // Looking is not using: `plan` and the previews of warm and run leave it old.
    for args in [
        &["plan"][..],
        &["warm", "--plan"],
        &["warm", "--dry-run"],
        &["run", "--plan"],
    ] {
        let o = s.cmd(args).output().unwrap();
        assert_eq!(code(&o), 0, "{args:?}: {}", show(&o));
    }
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
