//! The JSON Schemas of the formats that cross a process or a job boundary, generated from
//! the Rust types that write or read them (docs/reports.md, "Schemas"). Invariant: every
//! file under `schemas/` is exactly what its type generates; this test fails on any
//! drift, and `SCENERUN_BLESS_SCHEMAS=1 cargo test --lib schemas` rewrites the files.

use std::path::{Path, PathBuf};

use schemars::{schema_for, Schema};

/// Each format: its file under `schemas/` and the schema of its type.
fn all() -> Vec<(&'static str, Schema)> {
    vec![
        ("report", schema_for!(crate::report::ReportFile<'static>)),
        ("warm", schema_for!(crate::base::record::WarmRecord)),
        (
            "plan",
            schema_for!(crate::report::plan_view::PlanJson<'static>),
        ),
        ("explain", schema_for!(crate::explain::ExplainJson<'static>)),
        // The one server's protocol (warm steps and lanes alike): one file per message.
        (
            "server_ready",
            schema_for!(crate::base::proc::server_protocol::Ready),
        ),
        (
            "server_request",
            schema_for!(crate::base::proc::server_protocol::Request),
        ),
        (
            "server_started",
            schema_for!(crate::base::proc::server_protocol::Started),
        ),
        (
            "server_refused",
            schema_for!(crate::base::proc::server_protocol::Refused),
        ),
        (
            "server_ended",
            schema_for!(crate::base::proc::server_protocol::Ended),
        ),
        ("verdict", schema_for!(crate::base::verdict::Verdict)),
        ("trace", schema_for!(crate::report::trace::TraceFile)),
    ]
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

fn text(schema: &Schema) -> String {
    let mut t = serde_json::to_string_pretty(schema).expect("a schema serializes");
    t.push('\n');
    t
}

#[test]
fn the_committed_schemas_are_the_generated_ones() {
    let bless = std::env::var_os("SCENERUN_BLESS_SCHEMAS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (name, schema) in all() {
        let path = dir().join(format!("{name}.schema.json"));
        let want = text(&schema);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(want.as_str()) {
            continue;
        }
        if bless {
            std::fs::create_dir_all(dir()).unwrap();
            std::fs::write(&path, want).unwrap();
        } else {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "these schemas differ from what the Rust types generate: {stale:?}\n\
         rewrite them with `SCENERUN_BLESS_SCHEMAS=1 cargo test --lib schemas` and commit them"
    );
}

/// The lane results protocol keeps its hand-written schema (the plugin ships it, and it
/// says which wrong types scenerun tolerates, which serde cannot): it must name the same
/// events, with the same keys and the same required keys, as the types scenerun reads
/// them into, and the same outcome words.
#[test]
fn the_lane_results_schema_has_the_keys_of_the_types_that_read_it() {
    use serde_json::Value;
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python/scenerun-pytest/src/scenerun_pytest/lane_results.schema.json");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let keys = |v: &Value, of: &str| -> Vec<String> {
        let mut k: Vec<String> = match &v[of] {
            Value::Object(m) => m.keys().cloned().collect(),
            Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
            _ => Vec::new(),
        };
        k.sort();
        k
    };
    let events =
        serde_json::to_value(schema_for!(crate::device::lane::protocol::LaneEvent)).unwrap();
    let variants = events["oneOf"].as_array().expect("LaneEvent is a oneOf");
    let mut names = Vec::new();
    for v in variants {
        let name = v["properties"]["event"]["const"]
            .as_str()
            .unwrap()
            .to_string();
        let hand = &written["$defs"][&name];
        assert_eq!(
            keys(hand, "properties"),
            keys(v, "properties"),
            "event {name}"
        );
        assert_eq!(keys(hand, "required"), keys(v, "required"), "event {name}");
        names.push(name);
    }
    let mut hand_events: Vec<String> = written["$defs"]["event"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r["$ref"]
                .as_str()
                .unwrap()
                .trim_start_matches("#/$defs/")
                .to_string()
        })
        .collect();
    hand_events.sort();
    names.sort();
    assert_eq!(hand_events, names);
    let words: Vec<&str> = crate::base::verdict::Outcome::ALL
        .iter()
        .map(|o| o.as_str())
        .collect();
    let hand_words: Vec<&str> = written["$defs"]["outcome"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert_eq!(hand_words, words);
    let report =
        serde_json::to_value(schema_for!(crate::device::lane::protocol::TestReport)).unwrap();
    let mut hand = keys(&written["$defs"]["test_report"], "properties");
    hand.retain(|k| k != "$report_type");
    assert_eq!(hand, keys(&report, "properties"), "TestReport");
}
