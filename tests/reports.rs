//! What the records and reports say is so: every path a report names is a file that
//! exists (a shared step's log is its builder's; a hit, which ran nothing, names none),
//! and a scene cut short by the lock tool's SIGKILL is `interrupted`, not `not run`.

use std::fs;
use std::path::Path;

use crate::common::*;

/// Every `"log"` string in a JSON document, wherever it is.
fn logs_in(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("log", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => logs_in(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| logs_in(x, out)),
        _ => {}
    }
}

/// The logs `build/scenerun/<record>` names that do not exist.
fn missing_logs(s: &Suite, record: &str) -> Vec<String> {
    let v = s
        .record(record)
        .unwrap_or_else(|| panic!("{record} is there"));
    let mut logs = Vec::new();
    logs_in(&v, &mut logs);
    assert!(
        !logs.is_empty() || record == "warm.json",
        "{record} names no log: {v}"
    );
    logs.into_iter()
        .filter(|l| !Path::new(l).is_file())
        .collect()
}

#[test]
fn warm_json_and_report_json_name_only_logs_that_exist() {
    let s = Suite::new();
    s.manifest(
        "version: 1\ncache:\n  dir: cache\nprepare:\n  - name: warmup\n    run: \"echo prepping\"\nscenes:\n  - name: s0\n    fixture:\n      run: \"echo 0 > {out}/a\"\n    device:\n      run: \"true\"\n  - name: s1\n    fixture:\n      run: \"echo 1 > {out}/a\"\n    device:\n      run: \"true\"\n",
    );
    let mut missing = Vec::new();
    for round in ["built", "hits, fresh job dir"] {
        if round != "built" {
            fs::remove_dir_all(s.path("build")).unwrap();
        }
        let o = s.cmd(&["warm"]).output().unwrap();
        assert_eq!(code(&o), 0, "{}", show(&o));
        missing.extend(
            missing_logs(&s, "warm.json")
                .into_iter()
                .map(|l| format!("{round}: warm.json: {l}")),
        );
        let o = s
            .cmd(&["device", "--no-lock", "--devices", "0"])
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{}", show(&o));
        missing.extend(
            missing_logs(&s, "report.json")
                .into_iter()
                .map(|l| format!("{round}: report.json: {l}")),
        );
    }
    assert!(
        missing.is_empty(),
        "logs named that do not exist: {missing:#?}"
    );
}
