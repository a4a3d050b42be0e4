//! Not warm (exit 6) on a suite of many scenes: a summary of a few lines, not one line
//! per scene×step, naming the cache dir it checked and which setting chose it, so a warm
//! into another cache dir is told apart from no warm at all.

use super::*;

/// 20 scenes × 3 steps missing: at most 8 lines of error, counts per kind, "and 17 more
/// scenes", the cache dir checked and that `$SCENERUN_CACHE_DIR` chose it; with
/// `--cache-dir` the flag is named instead.
#[test]
fn not_warm_is_a_summary_naming_the_cache_dir_checked() {
    let s = basic_suite(20);
    let pool = Pool::new("0-1");
    let elsewhere = s.path("other-cache");
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c).env("SCENERUN_CACHE_DIR", &elsewhere);
    let o = c.output().unwrap();
    assert!(
        stderr(&o).lines().count() <= 8,
        "a summary, not 60 lines: {}",
        show(&o)
    );
    // Whole: exit 6, the counts per kind, the cache dir checked and what chose it.
    crate::snapshots::assert_output("not_warm_from_env", &o, s.dir());
    // Every missing artifact is still in the report, under its scene.
    let r = s.record("report.json").expect("report.json");
    let listed: usize = r["scenes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|sc| {
            sc["message"]
                .as_str()
                .unwrap_or("")
                .matches("is not warm")
                .count()
        })
        .sum();
    assert_eq!(listed, 60, "{r:#}");

    let mut c = s.cmd(&["--cache-dir", "flag-cache", "device"]);
    pool.apply(&mut c);
    let o = c.output().unwrap();
    crate::snapshots::assert_output("not_warm_from_flag", &o, s.dir());
    // The flag wins over the variable, and is named even when both say the same dir.
    let mut c = s.cmd(&["--cache-dir", elsewhere.to_str().unwrap(), "device"]);
    pool.apply(&mut c).env("SCENERUN_CACHE_DIR", &elsewhere);
    let o = c.output().unwrap();
    crate::snapshots::assert_output("not_warm_flag_over_env", &o, s.dir());
    assert!(
        pool.events().iter().all(|e| e.kind != "acquire"),
        "the lock was never taken"
    );
}
