//! The results protocol and attribution rules, line by line.

use super::*;

fn batch(names: &[(&str, &[&str], Option<f64>)]) -> Batch {
    Batch::new(
        names
            .iter()
            .map(|(n, a, t)| BatchScene {
                name: n.to_string(),
                args: a.iter().map(|s| s.to_string()).collect(),
                timeout: *t,
                cut_before: false,
            })
            .collect(),
        None,
    )
}

fn verdicts(effects: &[Effect]) -> Vec<(usize, AttemptOutcome)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Scene { scene, verdict, .. } => Some((*scene, *verdict)),
            _ => None,
        })
        .collect()
}

fn report(nodeid: &str, when: &str, outcome: &str) -> String {
    format!(
        r#"{{"$report_type": "TestReport", "nodeid": "{nodeid}", "when": "{when}", "outcome": "{outcome}", "duration": 0.5, "longrepr": null}}"#
    )
}

#[test]
fn start_and_end_events_give_outcomes() {
    let mut b = batch(&[("a", &[], None), ("b", &[], None)]);
    assert_eq!(
        b.feed(r#"{"scene": "a", "event": "start"}"#, 1.0),
        vec![Effect::Started { scene: 0 }]
    );
    assert_eq!(b.startup(), Some(1.0));
    let e = b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "passed", "duration_secs": 0.25}"#,
        1.3,
    );
    assert_eq!(
        e,
        vec![Effect::Scene {
            scene: 0,
            verdict: AttemptOutcome::Test(Outcome::Passed),
            started: 1.0,
            duration: 0.25,
            message: None
        }]
    );
    let e = b.feed(
        r#"{"scene": "b", "event": "end", "outcome": "skipped"}"#,
        1.5,
    );
    assert_eq!(
        verdicts(&e),
        vec![(1, AttemptOutcome::Test(Outcome::Skipped))]
    );
    let (e, requeue) = b.finish(
        &ProcessEnd::Exited {
            ok: true,
            how: "exited with status 0".into(),
        },
        2.0,
        "",
    );
    assert!(e.is_empty() && requeue.is_empty());
}

/// An end line's `output_bytes` says where its scene's output ends, just before the
/// scene's effect; an end line that ends nothing says nothing of the output.
#[test]
fn an_end_that_says_where_its_output_ends_is_followed_by_the_scene() {
    let mut b = batch(&[("a", &[], None)]);
    b.feed(r#"{"scene": "a", "event": "start"}"#, 0.1);
    let end = r#"{"scene": "a", "event": "end", "outcome": "failed", "output_bytes": 812, "failure_text": "E   assert 1 == 0"}"#;
    let e = b.feed(end, 0.2);
    assert!(
        matches!(
            &e[..],
            [
                Effect::SceneOutput {
                    up_to: Some(812),
                    failure_text: Some(_)
                },
                Effect::Scene { scene: 0, .. }
            ]
        ),
        "{e:?}"
    );
    let e = b.feed(end, 0.3);
    assert!(
        matches!(&e[..], [Effect::Warn(LaneNotice::SecondEnd { .. })]),
        "{e:?}"
    );
}

#[test]
fn unknown_scenes_and_garbage_are_warnings_only() {
    let mut b = batch(&[("a", &[], None)]);
    let e = b.feed(
        r#"{"scene": "zzz", "event": "end", "outcome": "passed"}"#,
        0.1,
    );
    assert!(
        matches!(&e[..], [Effect::Warn(LaneNotice::NotInBatch { scene })] if scene == "zzz"),
        "{e:?}"
    );
    let e = b.feed("not json at all", 0.2);
    assert!(matches!(&e[..], [Effect::Warn(_)]));
    let e = b.feed(&report("other.py::x", "call", "passed"), 0.3);
    assert!(
        matches!(&e[..], [Effect::Warn(LaneNotice::ReportNoOwner { nodeid })] if nodeid == "other.py::x"),
        "{e:?}"
    );
    // Nothing counted as a result.
    assert_eq!(b.startup(), None);
}

#[test]
fn start_without_end_crashes_and_the_rest_is_handed_back() {
    let mut b = batch(&[("a", &[], None), ("b", &[], None), ("c", &[], None)]);
    b.feed(r#"{"scene": "a", "event": "start"}"#, 0.5);
    b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "passed"}"#,
        0.6,
    );
    b.feed(r#"{"scene": "b", "event": "start"}"#, 0.7);
    let (e, requeue) = b.finish(
        &ProcessEnd::Exited {
            ok: false,
            how: "was killed by signal 9".into(),
        },
        0.9,
        "segfault in runtime\n",
    );
    assert_eq!(
        verdicts(&e),
        vec![(1, AttemptOutcome::Test(Outcome::Failed))]
    );
    let Effect::Scene { message, .. } = &e[0] else {
        panic!()
    };
    let m = message.as_deref().unwrap();
    assert!(m.contains("crashed the lane process") && m.contains("signal 9"));
    assert!(m.contains("segfault in runtime"));
    assert_eq!(requeue, vec![2]);
}

#[test]
fn exit_zero_leaving_scenes_unreported_fails_them_without_restart() {
    let mut b = batch(&[("a", &[], None), ("b", &[], None)]);
    b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "passed"}"#,
        0.5,
    );
    let (e, requeue) = b.finish(
        &ProcessEnd::Exited {
            ok: true,
            how: "exited with status 0".into(),
        },
        0.6,
        "",
    );
    assert_eq!(
        verdicts(&e),
        vec![(1, AttemptOutcome::Test(Outcome::Failed))]
    );
    assert!(requeue.is_empty());
    let Effect::Scene { message, .. } = &e[0] else {
        panic!()
    };
    assert_eq!(
        message.as_deref(),
        Some("lane process ended without reporting it")
    );
}

#[test]
fn reportlog_scene_is_in_progress_until_a_later_scene_reports() {
    let mut b = batch(&[
        ("vadd", &["t/test_vadd.py::TestVadd"], None),
        ("mm", &["t/test_mm.py"], None),
    ]);
    let e = b.feed(
        &report("t/test_vadd.py::TestVadd::test_x[1]", "setup", "passed"),
        1.0,
    );
    assert!(e.is_empty());
    b.feed(
        &report("t/test_vadd.py::TestVadd::test_x[1]", "call", "passed"),
        1.1,
    );
    b.feed(
        &report("t/test_vadd.py::TestVadd::test_x[2]", "call", "failed"),
        1.2,
    );
    // mm's first report closes vadd with the worst of its reports.
    let e = b.feed(&report("t/test_mm.py::test_mm", "call", "passed"), 1.5);
    assert_eq!(
        verdicts(&e),
        vec![(0, AttemptOutcome::Test(Outcome::Failed))]
    );
    // Exit 0 closes the one in progress.
    let (e, requeue) = b.finish(
        &ProcessEnd::Exited {
            ok: true,
            how: "exited with status 0".into(),
        },
        2.0,
        "",
    );
    assert_eq!(
        verdicts(&e),
        vec![(1, AttemptOutcome::Test(Outcome::Passed))]
    );
    assert!(requeue.is_empty());
}

#[test]
fn reportlog_crash_blames_the_scene_of_the_last_report() {
    let mut b = batch(&[
        ("a", &["t.py::A"], None),
        ("b", &["t.py::B"], None),
        ("c", &["t.py::C"], None),
    ]);
    b.feed(&report("t.py::A::x", "call", "passed"), 1.0);
    b.feed(&report("t.py::B::x", "call", "passed"), 1.2);
    let (e, requeue) = b.finish(
        &ProcessEnd::Exited {
            ok: false,
            how: "was killed by signal 11".into(),
        },
        1.5,
        "",
    );
    // a was closed by b's report; b was in progress and crashed; c is handed back.
    assert_eq!(
        verdicts(&e),
        vec![(1, AttemptOutcome::Test(Outcome::Failed))]
    );
    assert_eq!(requeue, vec![2]);
}

#[test]
fn reportlog_crash_without_any_report_blames_the_first_scene() {
    let mut b = batch(&[("a", &["t.py::A"], None), ("b", &["t.py::B"], None)]);
    let (e, requeue) = b.finish(
        &ProcessEnd::Exited {
            ok: false,
            how: "exited with status 3".into(),
        },
        0.5,
        "",
    );
    assert_eq!(
        verdicts(&e),
        vec![(0, AttemptOutcome::Test(Outcome::Failed))]
    );
    assert_eq!(requeue, vec![1]);
}

#[test]
fn pytest_exit_1_after_session_finish_is_a_normal_end() {
    let mut b = batch(&[("a", &["t.py::A"], None), ("b", &["t.py::B"], None)]);
    b.feed(&report("t.py::A::x", "call", "failed"), 1.0);
    b.feed(&report("t.py::B::x", "call", "passed"), 1.2);
    b.feed(r#"{"$report_type": "SessionFinish", "exitstatus": 1}"#, 1.3);
    let (e, requeue) = b.finish(
        &ProcessEnd::Exited {
            ok: false,
            how: "exited with status 1".into(),
        },
        1.4,
        "",
    );
    assert_eq!(
        verdicts(&e),
        vec![(1, AttemptOutcome::Test(Outcome::Passed))]
    );
    assert!(requeue.is_empty());
}

#[test]
fn skipped_only_when_no_test_of_the_scene_ran() {
    let mut b = batch(&[("a", &["t.py::A"], None), ("b", &["t.py::B"], None)]);
    b.feed(&report("t.py::A::x", "setup", "skipped"), 1.0);
    b.feed(&report("t.py::A::x", "teardown", "passed"), 1.0);
    b.feed(&report("t.py::B::y", "setup", "skipped"), 1.1);
    b.feed(&report("t.py::B::z", "call", "passed"), 1.2);
    let (e, _) = b.finish(
        &ProcessEnd::Exited {
            ok: true,
            how: "exited with status 0".into(),
        },
        1.4,
        "",
    );
    let mut v = verdicts(&e);
    v.sort_by_key(|x| x.0);
    // a was closed by b's first report (skipped); b had a passing test.
    assert_eq!(v, vec![(1, AttemptOutcome::Test(Outcome::Passed))]);
}

#[test]
fn prefix_ownership_picks_the_longest_arg_at_a_boundary() {
    let b = batch(&[
        ("file", &["t/test_x.py"], None),
        ("class", &["t/test_x.py::TestA"], None),
        ("dir", &["t/sub"], None),
    ]);
    assert_eq!(b.owner("t/test_x.py::TestA::test_1[p]"), Some(1));
    assert_eq!(b.owner("t/test_x.py::TestB::test_1"), Some(0));
    assert_eq!(b.owner("t/test_x.py::TestAB::test_1"), Some(0));
    assert_eq!(b.owner("t/sub/test_y.py::test"), Some(2));
    assert_eq!(b.owner("t/subway.py::test"), None);
}

#[test]
fn timeout_counts_from_start_event_else_previous_result_else_process_start() {
    let mut b = batch(&[
        ("a", &[], Some(2.0)),
        ("b", &[], Some(5.0)),
        ("c", &[], Some(1.0)),
    ]);
    // First scene, no start event: from the process start.
    assert_eq!(b.deadline(), Some(Deadline::Scene { scene: 0, at: 2.0 }));
    b.feed(r#"{"scene": "a", "event": "start"}"#, 0.5);
    assert_eq!(b.deadline(), Some(Deadline::Scene { scene: 0, at: 2.5 }));
    b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "passed"}"#,
        1.0,
    );
    // b has no start event yet: from the previous result.
    assert_eq!(b.deadline(), Some(Deadline::Scene { scene: 1, at: 6.0 }));
    b.feed(r#"{"scene": "b", "event": "start"}"#, 1.5);
    assert_eq!(b.deadline(), Some(Deadline::Scene { scene: 1, at: 6.5 }));
    let e = b.expire_scene(1, 6.5);
    assert_eq!(verdicts(&e), vec![(1, AttemptOutcome::TimedOut)]);
    let (e, requeue) = b.finish(&ProcessEnd::SceneTimeout, 6.6, "");
    assert!(e.is_empty());
    assert_eq!(requeue, vec![2]);
}

#[test]
fn lane_timeout_times_out_the_running_scene_and_fails_the_rest() {
    let mut b = Batch::new(
        ["a", "b", "c"]
            .iter()
            .map(|n| BatchScene {
                name: n.to_string(),
                args: vec![],
                timeout: None,
                cut_before: false,
            })
            .collect(),
        Some(10.0),
    );
    assert_eq!(b.deadline(), Some(Deadline::Lane { at: 10.0 }));
    b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "passed"}"#,
        1.0,
    );
    b.feed(r#"{"scene": "b", "event": "start"}"#, 2.0);
    let (e, requeue) = b.finish(&ProcessEnd::LaneTimeout, 10.0, "");
    assert_eq!(
        verdicts(&e),
        vec![(1, AttemptOutcome::TimedOut), (2, AttemptOutcome::NotRun)]
    );
    assert!(requeue.is_empty());
}

#[test]
fn device_fault_blames_the_running_scene_and_hands_back_the_rest() {
    let mut b = batch(&[("a", &[], None), ("b", &[], None), ("c", &[], None)]);
    b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "passed"}"#,
        1.0,
    );
    b.feed(r#"{"scene": "b", "event": "start"}"#, 1.1);
    let e = b.feed(r#"{"event": "device_fault", "devices": [1]}"#, 1.2);
    assert_eq!(
        e,
        vec![Effect::Fault {
            devices: vec!["1".into()]
        }]
    );
    let (e, requeue) = b.finish(&ProcessEnd::Fault, 1.3, "");
    assert_eq!(verdicts(&e), vec![(1, AttemptOutcome::DeviceFault)]);
    assert_eq!(requeue, vec![2]);
}

#[test]
fn second_end_and_late_reports_are_ignored() {
    let mut b = batch(&[("a", &["t.py::A"], None)]);
    b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "passed"}"#,
        1.0,
    );
    let e = b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "failed"}"#,
        1.1,
    );
    assert!(matches!(&e[..], [Effect::Warn(_)]));
    let e = b.feed(&report("t.py::A::x", "call", "failed"), 1.2);
    assert!(matches!(&e[..], [Effect::Warn(_)]));
}

#[test]
fn a_protocol_error_fails_the_running_scene_and_does_not_requeue() {
    let mut b = batch(&[("a", &[], None), ("b", &[], None), ("c", &[], None)]);
    b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "passed"}"#,
        1.0,
    );
    b.feed(r#"{"scene": "b", "event": "start"}"#, 1.1);
    let why = ProtocolError::LineTooLong { mib: 1 };
    assert_eq!(why.to_string(), "a results line is longer than 1 MiB");
    let (e, requeue) = b.finish(&ProcessEnd::Protocol(why), 1.2, "");
    assert_eq!(
        verdicts(&e),
        vec![
            (1, AttemptOutcome::Test(Outcome::Failed)),
            (2, AttemptOutcome::NotRun)
        ]
    );
    assert!(requeue.is_empty(), "the same lane would break it again");
}

#[test]
fn a_restart_line_is_read_with_its_reason() {
    let mut b = batch(&[("a", &[], None)]);
    assert_eq!(
        b.feed(r#"{"event": "restart", "reason": "  "}"#, 1.0),
        [Effect::Restart {
            reason: "the lane process asked for it".into()
        }]
    );
    let mut b = batch(&[("a", &[], None)]);
    assert_eq!(
        b.feed(r#"{"event": "restart", "reason": "r"}"#, 1.0),
        [Effect::Restart { reason: "r".into() }]
    );
}

/// The scene before a restart keeps its outcome; the one in progress is cut short and
/// goes back first, with those never started; a second cut of a rerun scene fails it.
#[test]
fn a_restart_cuts_the_running_scene_short_once() {
    let mut b = batch(&[("a", &[], None), ("b", &[], None), ("c", &[], None)]);
    b.feed(r#"{"scene": "a", "event": "start"}"#, 0.5);
    let e = b.feed(
        r#"{"scene": "a", "event": "end", "outcome": "failed", "message": "poisoned"}"#,
        1.0,
    );
    assert_eq!(verdicts(&e), [(0, AttemptOutcome::Test(Outcome::Failed))]);
    b.feed(r#"{"scene": "b", "event": "start"}"#, 1.5);
    let (e, again) = b.finish(&ProcessEnd::Restart("r".into()), 2.0, "tail");
    assert_eq!(verdicts(&e), [(1, AttemptOutcome::CutShort)]);
    assert!(
        matches!(&e[0], Effect::Scene { message: Some(m), .. } if m.contains("cut short by a restart of the lane process (r)"))
    );
    assert_eq!(again, [1, 2]);

    // In the fresh process b reruns (marked), and a second restart under it fails it.
    let mut b = batch(&[("b", &[], None), ("c", &[], None)]);
    b.rerun_after_cut(0);
    b.feed(r#"{"scene": "b", "event": "start"}"#, 0.1);
    let (e, again) = b.finish(&ProcessEnd::Restart("r2".into()), 1.0, "");
    assert_eq!(verdicts(&e), [(0, AttemptOutcome::Test(Outcome::Failed))]);
    assert!(matches!(&e[0], Effect::Scene { message: Some(m), .. } if m.contains("again (r2)")));
    assert_eq!(again, [1]);
}

/// What a process writes after its restart line is not read: the scene it went on to
/// run is cut short and reruns in the fresh process, however the lines were batched.
#[test]
fn lines_after_a_restart_line_are_not_read() {
    let mut b = batch(&[("a", &[], None), ("b", &[], None)]);
    b.feed(r#"{"scene": "a", "event": "start"}"#, 0.5);
    b.feed(r#"{"event": "restart", "reason": "r"}"#, 1.0);
    for line in [
        r#"{"scene": "a", "event": "end", "outcome": "passed"}"#,
        r#"{"scene": "b", "event": "start"}"#,
        r#"{"scene": "b", "event": "end", "outcome": "passed"}"#,
        r#"{"event": "device_fault", "devices": [0]}"#,
    ] {
        assert_eq!(b.feed(line, 1.1), [], "{line}");
    }
    let (e, again) = b.finish(&ProcessEnd::Restart("r".into()), 2.0, "");
    assert_eq!(verdicts(&e), [(0, AttemptOutcome::CutShort)]);
    assert_eq!(again, [0, 1]);
}

/// Without start events, the scene of the last reports keeps what they said.
#[test]
fn a_restart_after_reportlog_lines_keeps_the_reported_scene() {
    let mut b = batch(&[("a", &["t.py::a"], None), ("b", &["t.py::b"], None)]);
    b.feed(&report("t.py::a", "call", "passed"), 1.0);
    let (e, again) = b.finish(&ProcessEnd::Restart("r".into()), 2.0, "");
    assert_eq!(verdicts(&e), [(0, AttemptOutcome::Test(Outcome::Passed))]);
    assert_eq!(again, [1]);
}

#[test]
fn a_ready_line_is_no_result_and_says_when() {
    let mut b = batch(&[("a", &["x"], None)]);
    assert!(b.silent());
    assert!(b
        .feed(r#"{"event": "ready", "unix_secs": 1700000000.25}"#, 0.0)
        .is_empty());
    assert!(!b.silent());
    assert_eq!(b.ready_unix(), Some(1_700_000_000.25));
    assert_eq!(b.startup(), None, "a ready line is not a result");
    assert!(b.feed(r#"{"event": "ready"}"#, 0.5).is_empty());
    assert_eq!(
        b.ready_unix(),
        Some(1_700_000_000.25),
        "the first time stays"
    );
}
