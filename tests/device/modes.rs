//! `device --no-lock`, `--devices`, `--report-dir`, `run` (= warm + device) and
//! `--dry-run`.

use std::fs;

use super::*;
use crate::common::*;

// ------------------------------------------------------------------ --no-lock, --report-dir

#[test]
fn no_lock_runs_without_the_lock_tool_and_report_dir_moves_reports() {
    let s = basic_suite(3);
    // Even a lock tool that does not exist is never needed.
    edit_manifest(&s, TASK_SUBMIT, "no-such-tool");
    let pool = Pool::new("0-7");
    warm(&s, &pool, &[]);
    let ci = s.path("ci");
    fs::create_dir_all(&ci).unwrap();
    let mut c = s.cmd(&[
        "device",
        "--no-lock",
        "--devices",
        "0-3",
        "--report-dir",
        "out/rep",
    ]);
    pool.apply(&mut c).current_dir(&ci);
    let o = c.output().unwrap();
    expect_code(&o, 0);
    assert_eq!(pool.count("request"), 0);
    assert_eq!(s.count("logs/device.log"), 3);
    for ids in s.read("logs/device.log").lines() {
        for id in ids.split(',') {
            assert!(
                ["0", "1", "2", "3"].contains(&id),
                "id {id} not in --devices 0-3"
            );
        }
    }
    // --report-dir is relative to the current directory, not the manifest.
    let rep = ci.join("out/rep");
    let r = json_file(&rep.join("report.json"));
    assert_eq!(r["exit_code"], 0);
    assert!(r["lock"].is_null(), "no lock was used: {r:#}");
    assert_eq!(
        r["device"]["granted"],
        serde_json::json!(["0", "1", "2", "3"])
    );
    let eff = num(&r["device"]["efficiency"], "efficiency");
    assert!((0.0..=1.0).contains(&eff), "efficiency {eff}");
    assert_eq!(junit_cases(&rep.join("junit.xml")).len(), 3);
    assert!(
        rep.join("logs/s0/device.log").is_file(),
        "device logs follow --report-dir"
    );
    assert!(!s.path("build/scenerun/report.json").exists());
    assert!(!s.path("build/scenerun/junit.xml").exists());
}

#[test]
fn devices_requires_no_lock() {
    let s = basic_suite(1);
    let pool = Pool::new("0-3");
    let o = run_in(&s, &pool, &["device", "--devices", "0-3"]);
    expect_code(&o, 4);
    assert_eq!(pool.count("request"), 0);
}

/// `--devices` takes device ids only, refused by the command line's own parser (exit 4)
/// before anything is planned, frozen or run; a preview is refused alike.
#[test]
fn devices_that_are_not_ids_are_refused_before_a_plan() {
    let s = basic_suite(1);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    for args in [
        &["device", "--no-lock", "--devices", "gpu0"][..],
        &["plan", "--no-lock", "--devices", "gpu0"][..],
        &["device", "--no-lock", "--devices", "0,00"][..],
    ] {
        let o = run_in(&s, &pool, args);
        expect_code(&o, 4);
        assert!(
            stderr(&o).contains("invalid value") && stderr(&o).contains("--devices"),
            "{args:?}: {}",
            show(&o)
        );
        assert!(
            stdout(&o).is_empty(),
            "{args:?} printed a plan: {}",
            show(&o)
        );
    }
    assert_eq!(s.count("logs/device.log"), 0);
    assert!(
        !s.path("build/scenerun/device").exists(),
        "a run directory (frozen plan) was made"
    );
}

// ------------------------------------------------------------------ run = warm + device

#[test]
fn run_on_a_cold_cache_warms_then_takes_the_lock_once() {
    let s = basic_suite(3);
    let pool = Pool::new("0-3");
    let o = run_in(&s, &pool, &["run"]);
    expect_code(&o, 0);
    assert!(s.count("logs/cc.log") > 0, "run compiled nothing");
    assert_eq!(s.count("logs/gen.log"), 3);
    assert_eq!(s.count("logs/golden.log"), 3);
    assert_eq!(s.count("logs/device.log"), 3);
    assert_eq!(pool.acquisitions(), 1);
    assert!(outcomes(&report(&s)).values().all(|o| o == "passed"));

    // Warm again with nothing changed: no compiler, no generator; still one acquisition.
    let cc = s.count("logs/cc.log");
    let o = run_in(&s, &pool, &["run"]);
    expect_code(&o, 0);
    assert_eq!(s.count("logs/cc.log"), cc);
    assert_eq!(s.count("logs/gen.log"), 3);
    assert_eq!(pool.acquisitions(), 2);
}

#[test]
fn run_goes_on_to_the_device_phase_after_a_warm_failure() {
    let s = basic_suite(3);
    failing_fixture(&s, 0);
    let pool = Pool::new("0-3");
    let o = run_in(&s, &pool, &["run"]);
    expect_code(&o, 1);
    assert_eq!(pool.acquisitions(), 1);
    assert_eq!(s.count("logs/device.log"), 2);
    let r = report(&s);
    let o_ = outcomes(&r);
    assert_eq!(o_["s0"], "failed_in_warm", "{r:#}");
    assert_eq!(o_["s1"], "passed");
    assert_eq!(o_["s2"], "passed");
    assert_eq!(r["exit_code"], 1);
}

// ------------------------------------------------------------------ --dry-run

#[test]
fn dry_run_prints_the_lock_and_device_commands_and_runs_nothing() {
    let s = basic_suite(2);
    let pool = Pool::new("0-3");
    // Cold: it still shows everything and exits 0.
    let o = run_in(&s, &pool, &["device", "--dry-run"]);
    expect_code(&o, 0);
    let out = stdout(&o);
    let lock_line = out
        .lines()
        .find(|l| l.contains(TASK_SUBMIT))
        .unwrap_or_else(|| panic!("no lock command:\n{out}"));
    assert!(lock_line.contains("--device-num 1"), "{lock_line}");
    assert!(lock_line.contains("inner"), "{lock_line}");
    let device_lines: Vec<&str> = out.lines().filter(|l| l.contains("device.sh")).collect();
    assert_eq!(device_lines.len(), 2, "{out}");
    assert!(
        device_lines.iter().all(|l| l.contains("<devices>")),
        "{out}"
    );
    assert_eq!(pool.count("request"), 0);
    assert_eq!(s.count("logs/cc.log"), 0);
    assert_eq!(s.count("logs/gen.log"), 0);
    assert_eq!(s.count("logs/device.log"), 0);
    assert!(!s.path("build/scenerun/report.json").exists());

    // Warm: still nothing runs.
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device", "--dry-run"]);
    expect_code(&o, 0);
    assert_eq!(pool.count("request"), 0);
    assert_eq!(s.count("logs/device.log"), 0);
    assert!(
        !s.path("build/scenerun/device-plan.json").exists(),
        "dry run froze a plan"
    );
}
