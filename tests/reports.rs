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

/// A lock tool that SIGKILLs the whole inner run (its process group) once the slow
/// scene has started and a results snapshot has had time to be written: that scene is
/// `interrupted` in report.json, the one that never started is `not_run`.
#[test]
fn a_scene_running_when_the_lock_tool_kills_the_inner_run_is_interrupted() {
    let s = Suite::with_logs();
    let marker = format!("30.{}", std::process::id());
    s.script(
        "kill-lock.sh",
        "#!/bin/sh\n# kill-lock.sh RUN: start RUN in a group of its own, SIGKILL the group once\n# logs/started appears (and 0.5 s more: the inner writes results every 100 ms).\nTASK_DEVICE=0 setsid sh -c \"$1\" &\npid=$!\ni=0\nwhile [ ! -e logs/started ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\nsleep 0.5\nkill -KILL -$pid\nwait $pid\nexit 137\n",
    );
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlock:\n  submit: \"./kill-lock.sh {{run}}\"\nscenes:\n  - name: slow\n    device:\n      run: \"touch logs/started; sleep {marker}\"\n      order: first\n  - name: later\n    device:\n      run: \"true\"\n"
    ));
    let o = s
        .cmd(&["device"])
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    // The step the kill orphaned (if the watchdog died with the group): ours to end,
    // found by its unique command line, killed by pid.
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd)
            .replace('\0', " ")
            .contains(&format!("sleep {marker}"))
        {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    }
    assert_eq!(code(&o), 3, "{}", show(&o));
    let report = s.record("report.json").expect("report.json");
    let outcome = |name: &str| outcomes(&report)[name].clone();
    assert_eq!(
        (outcome("slow"), outcome("later")),
        ("interrupted".to_string(), "not_run".to_string()),
        "{report}"
    );
}
