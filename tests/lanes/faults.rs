//! Retries and flaky scenes, device faults and quarantine, and lanes sharing the
//! granted ids with plain and exclusive scenes.

use super::*;

const SHARE_SH: &str = r#"#!/bin/sh
# share.sh DEVICES [excl]: fail if another step holds one of these ids, or if
# exclusivity is broken, while it runs.
mode=-s; [ "${2:-}" = excl ] && mode=-x
exec 7>>logs/all.lock
flock -n $mode 7 || { echo "exclusivity broken on $1"; exit 1; }
fd=3
for id in $(echo "$1" | tr , ' '); do
    eval "exec $fd>>logs/dev-$id.lock"
    flock -n -x $fd || { echo "id $id double-booked"; exit 1; }
    fd=$((fd + 1))
done
echo "plain devices=$1" >> logs/plain-runs.log
sleep 0.3
"#;

/// The lane runtime, taking the same locks for its whole life (single-id lanes).
const LOCKING_LANE: &str = r#"#!/bin/sh
exec 7>>logs/all.lock
flock -n -s 7 || { echo "exclusivity broken under lane on $3" >&2; exit 3; }
exec 8>>"logs/dev-$3.lock"
flock -n -x 8 || { echo "id $3 double-booked by a lane" >&2; exit 3; }
sleep 0.3
exec ./lane.sh "$@"
"#;

#[test]
fn lanes_plain_and_exclusive_scenes_share_ids_through_one_lock() {
    let mut scenes = String::new();
    for i in 0..6 {
        scenes.push_str(&format!(
            "  - name: lane{i}\n    device:\n      lane: l\n      args: [pass]\n"
        ));
    }
    for i in 0..4 {
        scenes.push_str(&format!(
            "  - name: plain{i}\n    device:\n      run: \"./share.sh {{devices}}\"\n      devices: {}\n",
            1 + i % 2
        ));
    }
    scenes.push_str(
        "  - name: excl\n    device:\n      run: \"./share.sh {devices} excl\"\n      devices: 3\n      exclusive: true\n",
    );
    let s = lane_suite("", &scenes);
    s.script("share.sh", SHARE_SH);
    s.script("locking-lane.sh", LOCKING_LANE);
    let text = s
        .read("scenes.yaml")
        .replace("./lane.sh {scenes}", "./locking-lane.sh {scenes}");
    s.manifest(&text);
    let pool = Pool::new("0-2");
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c);
    let o = c.output().unwrap();
    expect_code(&o, 0);
    assert_eq!(
        pool.acquisitions(),
        1,
        "one lock for lanes and plain scenes"
    );
    let r = report(&s);
    assert!(outcomes(&r).values().all(|o| o == "passed"), "{r:#}");
    // 3 ids → 3 lane processes of 2 scenes each.
    assert_eq!(starts(&s), 3, "{}", s.read("logs/lane-starts.log"));
    assert_eq!(s.count("logs/plain-runs.log"), 5);
}

#[test]
fn a_flaky_scene_passes_on_a_retry_and_is_reported_flaky() {
    let s = lane_suite(
        "",
        "  - name: p\n    device:\n      run: \"if [ -e logs/flaky-p ]; then echo ok; else touch logs/flaky-p; echo 'boom: first try'; exit 1; fi\"\n      retries: 2\n  - name: q\n    device:\n      lane: l\n      args: [flaky]\n      retries: 1\n",
    );
    let o = no_lock(&s, "0,1");
    expect_code(&o, 0);
    let r = report(&s);
    assert_eq!(outcome_list(&r), pairs(&[("p", "flaky"), ("q", "flaky")]));
    for name in ["p", "q"] {
        let attempts = scene_in(&r, name)["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{attempts:#?}");
        assert_eq!(attempts[0]["outcome"], "failed");
        assert_eq!(attempts[1]["outcome"], "passed");
    }
    assert_eq!(starts(&s), 2, "the lane retry is a fresh process");
    let junit = s.read("build/scenerun/junit.xml");
    assert_eq!(junit.matches("<flakyFailure").count(), 2, "{junit}");
    assert!(junit.contains("boom: first try"), "{junit}");
    assert!(!junit.contains("<failure"), "{junit}");
}

#[test]
fn a_retry_goes_to_another_id_when_one_is_free() {
    let s = lane_suite(
        "",
        "  - name: p\n    device:\n      run: \"if [ -e logs/flaky-p ]; then echo ok; else touch logs/flaky-p; exit 1; fi\"\n      retries: 1\n",
    );
    expect_code(&no_lock(&s, "0,1"), 0);
    let r = report(&s);
    let p = &scene_in(&r, "p")["attempts"];
    assert_eq!(p[0]["devices"], serde_json::json!(["0"]), "{p:#}");
    assert_eq!(p[1]["devices"], serde_json::json!(["1"]), "{p:#}");
}

#[test]
fn without_retries_a_failure_is_final() {
    let s = lane_suite(
        "",
        "  - name: p\n    device:\n      run: \"if [ -e logs/flaky-p ]; then echo ok; else touch logs/flaky-p; exit 1; fi\"\n",
    );
    expect_code(&no_lock(&s, "0,1"), 1);
    let r = report(&s);
    assert_eq!(scene_in(&r, "p")["attempts"].as_array().unwrap().len(), 1);
}

/// `lock.device_fault` with an exit code and an output pattern.
fn fault_suite(scenes: &str) -> Suite {
    let s = lane_suite("", scenes);
    let text = s.read("scenes.yaml").replace(
        "--run {run}\"\n",
        "--run {run}\"\n  device_fault:\n    exit_codes: [42]\n    patterns: [\"NPU [0-9]+ lost\"]\n",
    );
    s.manifest(&text);
    s
}

#[test]
fn a_device_fault_quarantines_the_id_and_reruns_on_a_healthy_one() {
    let s = fault_suite(
        "  - name: f\n    device:\n      run: \"case {devices} in 0) exit 42;; esac; echo \\\"ran on {devices}\\\" >> logs/ok.log\"\n  - name: g\n    device:\n      run: \"case {devices} in 1) echo 'NPU 1 lost'; exit 1;; esac; echo \\\"ran on {devices}\\\" >> logs/ok.log\"\n  - name: h\n    device:\n      run: \"echo \\\"ran on {devices}\\\" >> logs/ok.log\"\n",
    );
    let o = no_lock(&s, "0-2");
    expect_code(&o, 0);
    let r = report(&s);
    // A pass after a device fault is a pass, not flaky: the card failed.
    assert!(outcomes(&r).values().all(|o| o == "passed"), "{r:#}");
    let mut q: Vec<String> = r["device"]["quarantined"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    q.sort();
    assert_eq!(q, ["0", "1"]);
    assert_eq!(scene_in(&r, "f")["attempts"][0]["outcome"], "device_fault");
    assert_eq!(
        scene_in(&r, "f")["attempts"][1]["devices"],
        serde_json::json!(["2"])
    );
    assert_eq!(scene_in(&r, "g")["attempts"][0]["outcome"], "device_fault");
    // Everything that passed ran on the one healthy id.
    let ok = s.read("logs/ok.log");
    assert_eq!(ok.lines().filter(|l| *l != "ran on 2").count(), 0, "{ok}");
}

#[test]
fn no_healthy_id_left_is_exit_3_and_the_rest_is_not_run() {
    let s = fault_suite(
        "  - name: f\n    device:\n      run: \"exit 42\"\n  - name: g\n    device:\n      run: \"true\"\n",
    );
    let o = no_lock(&s, "0");
    expect_code(&o, 3);
    let r = report(&s);
    assert_eq!(r["device"]["quarantined"], serde_json::json!(["0"]));
    let not_run: Vec<String> = r["scenes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["message"] == "not run: no healthy device")
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!not_run.is_empty(), "{r:#}");
    assert!(stderr(&o).contains("no healthy device"), "{}", show(&o));
}

#[test]
fn a_lane_device_fault_event_quarantines_and_repacks() {
    let s = lane_suite(
        "",
        &lane_scenes(&[("a", "fault0"), ("b", "pass"), ("c", "pass")]),
    );
    let o = no_lock(&s, "0,1");
    expect_code(&o, 0);
    let r = report(&s);
    assert!(outcomes(&r).values().all(|o| o == "passed"), "{r:#}");
    assert_eq!(r["device"]["quarantined"], serde_json::json!(["0"]));
    assert_eq!(scene_in(&r, "a")["attempts"][0]["outcome"], "device_fault");
    // After the fault nothing ran on id 0.
    let runs = s.read("logs/lane-runs.log");
    assert_eq!(runs.matches("devices=0").count(), 1, "{runs}");
}
