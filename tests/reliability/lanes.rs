//! Lanes that misbehave on purpose (docs/guarantees.md, "Bounds"): a lane process owns
//! its results file and what it writes there, so nothing it does to the file or says in
//! it may hang `device`, exhaust its memory, lose results already read, or quarantine
//! ids the lane does not hold.

use super::*;

/// A suite with lane `l` running `lane.sh` (the given script body) on `{scenes}
/// {results} {devices}`, its extra keys in `lane_keys`, and `n` lane scenes `s0..`.
fn lane_suite(script: &str, lane_keys: &str, n: usize) -> Suite {
    let s = Suite::with_logs();
    s.script(
        "lane.sh",
        &format!("#!/bin/sh\nscenes=$1 results=$2 devices=$3\n{script}"),
    );
    let mut y = format!(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  l:\n    run: \"./lane.sh {{scenes}} {{results}} {{devices}}\"\n{lane_keys}scenes:\n"
    );
    for i in 0..n {
        y.push_str(&format!(
            "  - name: s{i}\n    device:\n      lane: l\n      args: [a{i}]\n"
        ));
    }
    s.manifest(&y);
    s
}

/// `device --no-lock --devices IDS`, bounded.
fn device(s: &Suite, ids: &str, limit: Duration) -> Run {
    exec(sr(s, &["device", "--no-lock", "--devices", ids]), limit)
}

fn report(s: &Suite) -> serde_json::Value {
    read_json(&s.path("build/scenerun/report.json")).unwrap_or_default()
}

fn outcome(r: &serde_json::Value, scene: &str) -> String {
    report_scene(r, scene)
        .and_then(|s| s["outcome"].as_str())
        .unwrap_or("(none)")
        .to_string()
}

/// A `device_fault` naming only ids the lane process does not hold is ignored, as the
/// warning says: no id is quarantined, the process is not killed, its scenes keep their
/// own results.
#[test]
fn a_device_fault_on_foreign_ids_quarantines_nothing() {
    let s = lane_suite(
        r#"emit() { printf '%s\n' "$1" >> "$results"; }
emit '{"event":"device_fault","devices":[7, "9"]}'
sleep 0.2
for sc in s0 s1; do
  emit "{\"scene\":\"$sc\",\"event\":\"start\"}"
  emit "{\"scene\":\"$sc\",\"event\":\"end\",\"outcome\":\"passed\"}"
done
"#,
        "",
        2,
    );
    let r = device(&s, "0,1", secs(60));
    assert!(r.is(0), "{}", r.desc());
    let rep = report(&s);
    assert_eq!(
        rep["device"]["quarantined"],
        serde_json::json!([]),
        "{rep:#}"
    );
    for sc in ["s0", "s1"] {
        assert_eq!(outcome(&rep, sc), "passed", "{rep:#}");
    }
    assert!(
        r.stderr.contains("ids it does not hold (7,9); ignored"),
        "{}",
        r.desc()
    );
}
