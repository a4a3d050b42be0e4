//! Every line of the device summary — the table on stdout, the GitHub step summary and
//! its annotations — for a report with a scene of every outcome, pinned by snapshots: a
//! change to what the user reads at the end of a run shows up here first.

use serde_json::{json, Value};

use super::*;
use crate::base::ui::BarSlot;

fn ui(color: bool) -> Ui {
    Ui {
        quiet: false,
        verbose: 0,
        color,
        bars: false,
        github: false,
        bar: BarSlot::default(),
        words: crate::report::notice::words,
    }
}

fn scene(name: &str, outcome: &str, message: Option<&str>, tail: Option<&str>) -> Value {
    json!({"name": name, "devices": ["0", "1"], "start_secs": 0.5, "duration_secs": 1.25,
           "outcome": outcome, "message": message, "log": message.map(|_| format!("logs/{name}.log")),
           "log_tail": tail, "lane": null, "attempts": [], "steps": [], "infra": null})
}

/// A scene of every outcome; some name test nodes (two cases of one node).
fn scenes() -> Vec<Value> {
    let node = |mut s: Value, nodeid: &str, case: &str| {
        s["nodeid"] = json!(nodeid);
        s["case"] = json!(case);
        s
    };
    vec![
        node(
            scene("vector_add", "passed", None, None),
            "t.py::T::test_add",
            "small",
        ),
        node(
            scene(
                "vector_add_big",
                "not_reached",
                Some("an earlier case of its node failed"),
                None,
            ),
            "t.py::T::test_add",
            "big",
        ),
        scene("retried", "flaky", None, None),
        scene("no_card", "skipped", Some("Skipped: no card"), None),
        scene("known_bug", "xfailed", Some("known bug"), None),
        scene("lucky", "xpassed", None, None),
        scene(
            "matmul",
            "failed",
            Some("exited with status 1"),
            Some("running\nMISMATCH with golden | line 3"),
        ),
        scene("conv", "error", Some("fixture setup failed"), None),
        scene(
            "slow",
            "timed_out",
            Some("killed after 30s"),
            Some("still computing"),
        ),
        scene("stopped", "interrupted", None, None),
        scene(
            "broken_build",
            "failed_in_warm",
            Some("cc exited 1"),
            Some("x.c:3: error"),
        ),
        scene("never", "not_run", None, None),
    ]
}

fn lane(before: Option<f64>) -> Value {
    json!({"lane": "npu", "devices": ["1"], "start_secs": 0.5, "startup_secs": 1.5,
           "duration_secs": 3.0, "restarts": 0, "scenes": ["matmul"], "ended": "exited with status 0",
           "log": "l", "startup_before_lock_secs": before})
}

fn report(lock: bool, lanes: Vec<Value>, quarantined: &[&str], scenes: Vec<Value>) -> Report {
    let lock = lock.then(|| {
        json!({"command": "x", "exit_code": 0, "called_at": 100.0, "inner_started_at": 102.0,
               "inner_ended_at": 109.0, "returned_at": 110.0, "queue_wait_secs": 2.0,
               "held_secs": 8.0, "output_tail": null, "signal_forwarded_at": null})
    });
    // Through the lock, the tests compiled too (`compile_cache:`).
    let compiles = lock
        .is_some()
        .then(|| json!({"hit": 19, "built": 1, "ran": 7}));
    serde_json::from_value(json!({
        "version": 1, "scenerun": "0", "manifest": "m", "exit_code": 1, "error": null,
        "lock": lock,
        "device": {
            "granted": ["0", "1"], "inner_secs": 7.0, "busy_secs": 3.0,
            "device_secs_used": 4.0, "device_secs_held": 16.0, "efficiency": 0.4,
            "startup_secs": 1.5, "quarantined": quarantined, "lanes": lanes,
            "compiles": compiles
        },
        "scenes": scenes
    }))
    .expect("a report")
}

/// Through the lock, with lanes (one started before it) and a quarantined id.
fn through_the_lock() -> Report {
    report(true, vec![lane(None), lane(Some(0.75))], &["1"], scenes())
}

#[test]
fn the_table_with_the_lock_lanes_and_quarantine() {
    insta::assert_snapshot!("table", through_the_lock().table(&ui(false)));
}

#[test]
fn the_table_in_colour() {
    let t = through_the_lock().table(&ui(true));
    insta::assert_snapshot!("table_colour", ui(true).safe(&t).replace('\x1b', "<ESC>"));
}

#[test]
fn the_table_without_a_lock_nor_lanes() {
    let r = report(false, vec![lane(None)], &[], scenes()[..3].to_vec());
    let one_lane = r.table(&ui(false));
    let r = report(false, vec![], &[], scenes()[..3].to_vec());
    insta::assert_snapshot!(
        "table_no_lock",
        format!("{one_lane}---\n{}", r.table(&ui(false)))
    );
}

#[test]
fn the_table_when_no_device_phase_ran() {
    let mut r = report(false, vec![], &[], vec![scenes().remove(10)]);
    r.device = None;
    insta::assert_snapshot!("table_no_device", r.table(&ui(false)));
}

#[test]
fn the_github_step_summary_and_annotations() {
    let mut r = through_the_lock();
    r.error = Some("the lock command exited 3".into());
    let text = format!("{}\n---\n{}", r.step_summary(), r.annotations().join("\n"));
    insta::assert_snapshot!("github", text);
}
