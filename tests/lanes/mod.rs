//! Integration tests: lanes, one device process running many scenes (docs/lanes.md),
//! with real processes: a shell lane runtime whose behaviour per scene comes from the
//! scene's `args` (pass, fail, crash, hang, exit early, garbage, flaky, device fault),
//! and a real pytest + pytest-reportlog lane (`pytest.rs`). Assertions count process
//! start-ups and runs from the runtime's own log, and read the reports.

mod compile_exact;
mod compiles;
mod faults;
mod order;
mod outputs;
mod prestart;
mod protocol;
mod pytest;
mod restart;
mod selections;
mod server;
mod stop;
mod variants;

use std::process::Output;

use serde_json::Value;

use crate::common::*;

/// The test lane runtime: `lane.sh SCENES RESULTS DEVICES`. Logs `start` per process and
/// `run` per scene into logs/, then does what the scene's first arg says.
const LANE_SH: &str = r#"#!/bin/sh
scenes=$1 results=$2 devices=$3
echo "start pid=$$ devices=$devices" >> logs/lane-starts.log
emit() { printf '%s\n' "$1" >> "$results"; }
end() { # SCENE OUTCOME [MESSAGE]
    emit "{\"scene\":\"$1\",\"event\":\"end\",\"outcome\":\"$2\",\"duration_secs\":0.01,\"message\":\"${3:-}\"}"
}
while IFS= read -r line; do
    scene=$(printf '%s' "$line" | sed -n 's/.*"scene":"\([^"]*\)".*/\1/p')
    what=$(printf '%s' "$line" | sed -n 's/.*"args":\["\([^"]*\)".*/\1/p')
    echo "run scene=$scene devices=$devices" >> logs/lane-runs.log
    emit "{\"scene\":\"$scene\",\"event\":\"start\"}"
    case $what in
        pass) echo "ran $scene"; end "$scene" passed ;;
        fail) echo "MISMATCH with golden: line 1 got 3 want 4"; end "$scene" failed "MISMATCH with golden" ;;
        crash) echo "runtime: segfault in $scene" >&2; kill -9 $$ ;;
        hang) sleep 600 ;;
        exit0) exit 0 ;;
        garbage) emit "this is not json"; emit '{"scene":"nosuch","event":"end","outcome":"passed"}'; end "$scene" passed ;;
        flaky) if [ -e "logs/flaky-$scene" ]; then end "$scene" passed; else touch "logs/flaky-$scene"; end "$scene" failed "first try fails"; fi ;;
        fault0) if [ "$devices" = 0 ]; then emit '{"event":"device_fault","devices":[0]}'; sleep 600; else end "$scene" passed; fi ;;
        *) end "$scene" failed "unknown behaviour $what" ;;
    esac
done < "$scenes"
"#;

/// A suite with the lane runtime, lane `l` (extra lane keys in `lane_keys`), and the
/// given scenes (YAML list items).
fn lane_suite(lane_keys: &str, scenes: &str) -> Suite {
    let s = Suite::with_logs();
    s.script("lane.sh", LANE_SH);
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlock:\n  submit: \"{TASK_SUBMIT} --timeout 60 --max-time 120 --device auto --device-num {{device_count}} --run {{run}}\"\nlanes:\n  l:\n    run: \"./lane.sh {{scenes}} {{results}} {{devices}}\"\n{lane_keys}scenes:\n{scenes}"
    ));
    s
}

/// Lane scenes `name: behaviour` in this order.
fn lane_scenes(list: &[(&str, &str)]) -> String {
    list.iter()
        .map(|(n, b)| format!("  - name: {n}\n    device:\n      lane: l\n      args: [{b}]\n"))
        .collect()
}

/// The device processes `plan --format json` lays out (its `device.processes`).
fn planned_processes(s: &Suite) -> Vec<Value> {
    let o = s.cmd(&["plan", "--format", "json"]).output().unwrap();
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&o)));
    v["device"]["processes"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("no device.processes: {v:#}"))
}

fn no_lock(s: &Suite, devices: &str) -> Output {
    s.cmd(&["device", "--no-lock", "--devices", devices])
        .output()
        .expect("run scenerun")
}

fn outcome_list(r: &Value) -> Vec<(String, String)> {
    outcomes(r).into_iter().collect()
}

fn message(r: &Value, name: &str) -> String {
    scene_in(r, name)["message"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Process start-ups of the lane runtime.
fn starts(s: &Suite) -> usize {
    s.count("logs/lane-starts.log")
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = v
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    v.sort();
    v
}

#[test]
fn one_process_runs_the_whole_lane_and_reports_each_scene() {
    let names: Vec<(String, &str)> = (0..6).map(|i| (format!("s{i}"), "pass")).collect();
    let list: Vec<(&str, &str)> = names.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    let s = lane_suite("", &lane_scenes(&list));
    let o = no_lock(&s, "0");
    expect_code(&o, 0);
    assert_eq!(starts(&s), 1, "one start-up for six scenes");
    assert_eq!(s.count("logs/lane-runs.log"), 6);
    let r = report(&s);
    assert!(outcomes(&r).values().all(|o| o == "passed"), "{r:#}");
    let lanes = r["device"]["lanes"].as_array().expect("device.lanes");
    assert_eq!(lanes.len(), 1);
    assert_eq!(lanes[0]["scenes"].as_array().unwrap().len(), 6);
    assert_eq!(lanes[0]["restarts"], 0);
    assert!(lanes[0]["startup_secs"].is_number(), "{:#}", lanes[0]);
    assert_eq!(scene_in(&r, "s3")["lane"], "l");
    // A live line per scene as it finished.
    let err = stderr(&o);
    assert_eq!(err.matches("/6] passed").count(), 6, "{err}");
    for i in 0..6 {
        assert!(err.contains(&format!(" s{i} ")), "{err}");
    }
}

#[test]
fn a_lane_splits_over_the_ids_one_process_per_id() {
    let names: Vec<(String, &str)> = (0..8).map(|i| (format!("s{i}"), "pass")).collect();
    let list: Vec<(&str, &str)> = names.iter().map(|(n, b)| (n.as_str(), *b)).collect();
    let s = lane_suite("", &lane_scenes(&list));
    let o = no_lock(&s, "3,5");
    expect_code(&o, 0);
    let starts_log = s.read("logs/lane-starts.log");
    assert_eq!(starts(&s), 2, "{starts_log}");
    assert!(starts_log.contains("devices=3") && starts_log.contains("devices=5"));
    let runs = s.read("logs/lane-runs.log");
    assert_eq!(runs.matches("devices=3").count(), 4, "{runs}");
    assert_eq!(runs.matches("devices=5").count(), 4, "{runs}");
}

#[test]
fn lane_validation_errors_are_exit_4_with_their_lines() {
    let s = lane_suite(
        "    devices: 2\n",
        "  - name: a\n    device:\n      lane: nosuch\n  - name: b\n    device:\n      lane: l\n      run: \"true\"\n  - name: c\n    device:\n      lane: l\n      devices: 1\n  - name: d\n    device:\n      lane: l\n      exclusive: true\n  - name: e\n    device:\n      run: \"true\"\n      args: [x]\n",
    );
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    let err = stderr(&o);
    for want in [
        "scenes.yaml:13:",
        "unknown lane `nosuch` (defined: l)",
        "scenes.yaml:16:",
        "either `run` or `lane`, not both",
        "scenes.yaml:21:",
        "devices is 1 but lane `l` holds 2",
        "scenes.yaml:25:",
        "cannot be exclusive",
        "`args` belongs to a lane scene",
    ] {
        assert!(err.contains(want), "missing `{want}` in:\n{err}");
    }
}

#[test]
fn plan_shows_which_scenes_share_a_process() {
    let s = lane_suite(
        "",
        &(lane_scenes(&[("a", "pass"), ("b", "pass"), ("c", "pass")])
            + "  - name: plain\n    device:\n      run: \"true\"\n"),
    );
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 0);
    let out = stdout(&o);
    assert!(out.contains("lane l (3 scenes)"), "{out}");
    assert!(
        out.contains("one process, start-up not measured yet: a, b, c"),
        "{out}"
    );
    let procs = planned_processes(&s);
    let lane = procs
        .iter()
        .find(|p| p["lane"] == "l")
        .expect("a lane process");
    assert_eq!(lane["scenes"], serde_json::json!(["a", "b", "c"]));
    let o = s.cmd(&["device", "--dry-run"]).output().unwrap();
    let out = stdout(&o);
    assert!(
        out.contains(
            "# lane l: one process (1 id) for a, b, c\n./lane.sh <scenes> <results> <devices>"
        ),
        "{out}"
    );
    // After a run (warm && device, as in CI), the start-up is measured and estimated.
    expect_code(&s.cmd(&["warm"]).output().unwrap(), 0);
    expect_code(&no_lock(&s, "0"), 0);
    let lane = planned_processes(&s)
        .into_iter()
        .find(|p| p["lane"] == "l")
        .unwrap();
    assert!(lane["startup_estimate_secs"].is_number(), "{lane:#}");
}

/// On a terminal (outside CI) a progress line with elapsed time runs while scenes run.
#[test]
fn a_tty_gets_a_progress_line_with_elapsed_time() {
    let has_script = std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        has_script,
        "`script` (util-linux) is needed to give scenerun a terminal"
    );
    let s = lane_suite("", &lane_scenes(&[("a", "pass"), ("b", "hang")]));
    // b hangs until its timeout: the progress line has time to show.
    let text = s
        .read("scenes.yaml")
        .replace("args: [hang]\n", "args: [hang]\n      timeout: 2s\n");
    s.manifest(&text);
    let exe = assert_cmd::cargo::cargo_bin("scenerun");
    let o = std::process::Command::new("script")
        .args(["-qec"])
        .arg(format!(
            "{} --manifest {} device --no-lock --devices 0",
            exe.display(),
            s.path("scenes.yaml").display()
        ))
        .arg("/dev/null")
        .current_dir(s.dir())
        .env_remove("CI")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).replace('\r', "\n");
    assert!(
        out.contains("device: 1/2 scenes done, 1s") || out.contains("device: 1/2 scenes done, 2s"),
        "{out}"
    );
}
