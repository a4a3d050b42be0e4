//! The results protocol against a misbehaving lane process: crashes, early exit 0,
//! hangs, lane timeouts, garbage and unknown scenes; failure output in every report.

use super::*;

#[test]
fn a_crash_fails_the_running_scene_and_the_rest_runs_in_a_fresh_process() {
    let s = lane_suite(
        "",
        &lane_scenes(&[("a", "pass"), ("b", "crash"), ("c", "pass"), ("d", "pass")]),
    );
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[
            ("a", "passed"),
            ("b", "failed"),
            ("c", "passed"),
            ("d", "passed")
        ])
    );
    let m = message(&r, "b");
    assert!(m.contains("crashed the lane process"), "{m}");
    assert!(m.contains("signal 9") || m.contains("status 137"), "{m}");
    assert!(m.contains("runtime: segfault in b"), "{m}");
    assert_eq!(starts(&s), 2, "one restart");
    let lanes = r["device"]["lanes"].as_array().unwrap();
    assert_eq!(lanes.len(), 2);
    assert_eq!(lanes[1]["restarts"], 1);
    assert_eq!(lanes[1]["scenes"], serde_json::json!(["c", "d"]));
}

#[test]
fn restarts_are_bounded() {
    let s = lane_suite(
        "    restarts: 1\n",
        &lane_scenes(&[("a", "crash"), ("b", "crash"), ("c", "pass"), ("d", "pass")]),
    );
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[
            ("a", "failed"),
            ("b", "failed"),
            ("c", "not_run"),
            ("d", "not_run")
        ])
    );
    assert!(message(&r, "c").contains("not run: lane restarts exhausted"));
    assert_eq!(starts(&s), 2, "the first process and one restart");
}

#[test]
fn exit_0_without_reporting_fails_the_rest_without_a_restart() {
    let s = lane_suite(
        "",
        &lane_scenes(&[("a", "pass"), ("b", "exit0"), ("c", "pass")]),
    );
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    // b had a start event and no end: it crashed the process (which exited 0).
    assert!(
        message(&r, "b").contains("crashed the lane process"),
        "{r:#}"
    );
    assert_eq!(message(&r, "c"), "lane process ended without reporting it");
    assert_eq!(starts(&s), 1);
}

#[test]
fn a_hanging_scene_times_out_and_the_rest_is_requeued() {
    let s = lane_suite(
        "",
        "  - name: a\n    device:\n      lane: l\n      args: [pass]\n  - name: b\n    device:\n      lane: l\n      args: [hang]\n      timeout: 2s\n  - name: c\n    device:\n      lane: l\n      args: [pass]\n",
    );
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[("a", "passed"), ("b", "timed_out"), ("c", "passed")])
    );
    assert_eq!(starts(&s), 2);
    // The killed process's group is gone (no `sleep 600` left behind).
    let lanes = r["device"]["lanes"].as_array().unwrap();
    assert_eq!(lanes[0]["ended"], "killed after a scene timeout");
}

#[test]
fn the_lane_timeout_times_out_the_running_scene_and_fails_the_rest() {
    let s = lane_suite(
        "    timeout: 2s\n",
        &lane_scenes(&[("a", "pass"), ("b", "hang"), ("c", "pass")]),
    );
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[("a", "passed"), ("b", "timed_out"), ("c", "not_run")])
    );
    assert_eq!(message(&r, "c"), "not run: lane timeout");
    assert_eq!(starts(&s), 1, "a lane timeout is not restarted");
}

#[test]
fn garbage_and_unknown_scenes_are_ignored_with_a_warning() {
    let s = lane_suite("", &lane_scenes(&[("a", "garbage"), ("b", "pass")]));
    let o = no_lock(&s, "0");
    expect_code(&o, 0);
    let err = stderr(&o);
    assert!(err.contains("warning: ignored a results line"), "{err}");
    assert!(
        err.contains("scene `nosuch`, which is not in this lane process's batch"),
        "{err}"
    );
}

#[test]
fn a_failed_scene_shows_its_output_tail_everywhere() {
    let s = lane_suite("", &lane_scenes(&[("a", "fail"), ("b", "pass")]));
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let want = "MISMATCH with golden: line 1 got 3 want 4";
    assert!(stderr(&o).contains(want), "live line: {}", stderr(&o));
    assert!(stdout(&o).contains(want), "summary: {}", stdout(&o));
    let r = report(&s);
    assert!(
        scene_in(&r, "a")["log_tail"]
            .as_str()
            .unwrap_or("")
            .contains(want),
        "{r:#}"
    );
    let junit = s.read("build/scenerun/junit.xml");
    assert!(junit.contains(want), "{junit}");
    assert!(junit.contains("<system-out>"), "{junit}");
}

#[test]
fn plain_scene_failure_shows_the_cause_not_only_the_status() {
    let s = lane_suite(
        "",
        "  - name: p\n    device:\n      run: \"echo 'MISMATCH with golden: line 7'; exit 1\"\n",
    );
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    assert!(
        stderr(&o).contains("MISMATCH with golden: line 7"),
        "{}",
        show(&o)
    );
    let junit = s.read("build/scenerun/junit.xml");
    assert!(junit.contains("MISMATCH with golden: line 7"), "{junit}");
}
