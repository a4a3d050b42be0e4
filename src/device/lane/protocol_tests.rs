//! The protocol's types line by line, and held to the one description of the protocol:
//! the JSON Schema the pytest plugin ships, and the sample lines its tests share.

use super::*;

const SCHEMA: &str =
    include_str!("../../../python/scenerun-pytest/src/scenerun_pytest/lane_results.schema.json");
const SAMPLES: &str =
    include_str!("../../../python/scenerun-pytest/tests/lane_results_samples.json");

fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("valid JSON")
}

#[test]
fn parses_every_kind_of_line() {
    assert_eq!(
        parse_line(r#"{"scene": "a", "event": "start"}"#),
        Line::Event(LaneEvent::Start { scene: "a".into() })
    );
    assert_eq!(
        parse_line(
            r#"{"scene": "a", "event": "end", "outcome": "failed", "duration_secs": 1.5, "message": "MISMATCH", "output_bytes": 4096, "extra": 1}"#
        ),
        Line::Event(LaneEvent::End {
            scene: "a".into(),
            outcome: Outcome::Failed,
            duration_secs: Some(1.5),
            message: Some("MISMATCH".into()),
            output_bytes: Some(4096),
            failure_text: None
        })
    );
    assert_eq!(
        parse_line(r#"{"event": "device_fault", "devices": [3, "4"]}"#),
        Line::Event(LaneEvent::DeviceFault {
            devices: vec!["3".into(), "4".into()],
            scene: None
        })
    );
    assert_eq!(
        parse_line(r#"{"event": "ready", "unix_secs": 1700000000.25}"#),
        Line::Event(LaneEvent::Ready {
            unix_secs: Some(1_700_000_000.25)
        })
    );
    assert!(matches!(parse_line("garbage"), Line::Garbage(_)));
    assert!(matches!(parse_line("[1,2]"), Line::Garbage(_)));
    let Line::Garbage(why) = parse_line(r#"{"scene": "a", "event": "end", "outcome": "great"}"#)
    else {
        panic!("an unknown outcome is refused");
    };
    assert_eq!(
        why,
        "end event of `a`: `outcome` must be passed, failed, skipped, xfailed, xpassed, error or not_reached"
    );
    assert_eq!(
        parse_line(r#"{"$report_type": "SessionStart", "pytest_version": "8"}"#),
        Line::Reportlog(Reportlog::Other)
    );
    assert_eq!(
        parse_line(r#"{"$report_type": "SessionFinish", "exitstatus": 1}"#),
        Line::Reportlog(Reportlog::SessionFinish)
    );
    let Line::Reportlog(Reportlog::TestReport(r)) = parse_line(
        r#"{"$report_type": "TestReport", "nodeid": "t.py::T::x", "when": "call", "outcome": "failed", "duration": 0.1, "longrepr": {"reprcrash": {"path": "t.py", "lineno": 3, "message": "AssertionError: MISMATCH"}}}"#,
    ) else {
        panic!("a report")
    };
    assert_eq!(
        r.message().as_deref(),
        Some("t.py:3: AssertionError: MISMATCH")
    );
}

#[test]
fn optional_keys_of_the_wrong_type_are_read_as_absent() {
    assert_eq!(
        parse_line(
            r#"{"scene": "a", "event": "end", "outcome": "passed", "duration_secs": "1", "message": "", "output_bytes": -1}"#
        ),
        Line::Event(LaneEvent::End {
            scene: "a".into(),
            outcome: Outcome::Passed,
            duration_secs: None,
            message: None,
            output_bytes: None,
            failure_text: None
        })
    );
    assert_eq!(
        parse_line(r#"{"event": "device_fault", "devices": "3", "scene": 7}"#),
        Line::Event(LaneEvent::DeviceFault {
            devices: Vec::new(),
            scene: None
        })
    );
    let Line::Reportlog(Reportlog::TestReport(r)) = parse_line(
        r#"{"$report_type": "TestReport", "nodeid": "t", "outcome": "passed", "when": 3, "duration": "x"}"#,
    ) else {
        panic!("a report")
    };
    assert_eq!((r.when.as_str(), r.duration), ("call", None));
}

#[test]
fn a_reports_verdict_is_pytests_word() {
    let verdict = |when: &str, outcome: &str, xfail: bool| {
        let x = if xfail { r#", "wasxfail": null"# } else { "" };
        let line = format!(
            r#"{{"$report_type": "TestReport", "nodeid": "t", "when": "{when}", "outcome": "{outcome}"{x}}}"#
        );
        match parse_line(&line) {
            Line::Reportlog(Reportlog::TestReport(r)) => r.verdict(),
            other => panic!("{other:?}"),
        }
    };
    use crate::base::verdict::Outcome::*;
    assert_eq!(verdict("call", "failed", false), Failed);
    assert_eq!(verdict("setup", "failed", false), Error);
    assert_eq!(verdict("teardown", "failed", false), Error);
    assert_eq!(verdict("call", "skipped", false), Skipped);
    assert_eq!(verdict("call", "skipped", true), Xfailed);
    assert_eq!(verdict("call", "passed", true), Xpassed);
    assert_eq!(verdict("setup", "passed", true), Passed);
    assert_eq!(verdict("call", "passed", false), Passed);
}

/// Every variant of the two enums, so that a new one fails to compile here until the
/// schema has it too.
fn every_event() -> Vec<LaneEvent> {
    let all = vec![
        LaneEvent::Start { scene: "a".into() },
        LaneEvent::End {
            scene: "a".into(),
            outcome: Outcome::Passed,
            duration_secs: None,
            message: None,
            output_bytes: None,
            failure_text: None,
        },
        LaneEvent::Restart { reason: None },
        LaneEvent::DeviceFault {
            devices: Vec::new(),
            scene: None,
        },
        LaneEvent::Ready { unix_secs: None },
    ];
    for e in &all {
        match e {
            LaneEvent::Start { .. }
            | LaneEvent::End { .. }
            | LaneEvent::Restart { .. }
            | LaneEvent::DeviceFault { .. }
            | LaneEvent::Ready { .. } => {}
        }
    }
    all
}

fn every_outcome() -> Vec<Outcome> {
    use Outcome::*;
    let all = vec![Passed, Failed, Skipped, Xfailed, Xpassed, Error, NotReached];
    for o in &all {
        match o {
            Passed | Failed | Skipped | Xfailed | Xpassed | Error | NotReached => {}
        }
    }
    all
}

#[test]
fn the_schemas_event_names_and_outcome_words_are_the_enums() {
    let schema = json(SCHEMA);
    let defs = &schema["$defs"];
    let mut in_schema: Vec<String> = defs["event"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let name = r["$ref"].as_str().unwrap().trim_start_matches("#/$defs/");
            let event = defs[name]["properties"]["event"]["const"].as_str().unwrap();
            assert_eq!(event, name, "each event's definition is named after it");
            event.to_string()
        })
        .collect();
    let mut in_enum: Vec<String> = every_event()
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    in_schema.sort();
    in_enum.sort();
    assert_eq!(in_schema, in_enum);
    let words: Vec<Value> = every_outcome()
        .iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    assert_eq!(defs["outcome"]["enum"].as_array().unwrap(), &words);
}

/// The keywords of JSON Schema 2020-12 that the protocol's schema uses, checked as the
/// specification says; a keyword outside them fails the check rather than being skipped,
/// so the schema cannot grow past what this checks without the test saying so.
mod schema {
    use serde_json::Value;

    const ANNOTATIONS: [&str; 4] = ["$schema", "title", "description", "$defs"];

    pub fn valid(root: &Value, schema: &Value, v: &Value) -> bool {
        let Value::Object(s) = schema else {
            panic!("a schema is an object: {schema}");
        };
        s.iter().all(|(key, want)| match key.as_str() {
            k if ANNOTATIONS.contains(&k) => true,
            "$ref" => {
                let name = want.as_str().unwrap().strip_prefix("#/$defs/").unwrap();
                valid(root, &root["$defs"][name], v)
            }
            "type" => match want {
                Value::Array(types) => types.iter().any(|t| is_type(t, v)),
                t => is_type(t, v),
            },
            "enum" => want.as_array().unwrap().contains(v),
            "const" => want == v,
            "minimum" => v.as_f64().is_none_or(|n| n >= want.as_f64().unwrap()),
            "required" => v.as_object().is_none_or(|o| {
                want.as_array()
                    .unwrap()
                    .iter()
                    .all(|k| o.contains_key(k.as_str().unwrap()))
            }),
            "properties" => v.as_object().is_none_or(|o| {
                want.as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, sub)| o.get(k).is_none_or(|x| valid(root, sub, x)))
            }),
            "items" => v
                .as_array()
                .is_none_or(|a| a.iter().all(|x| valid(root, want, x))),
            "anyOf" => want
                .as_array()
                .unwrap()
                .iter()
                .any(|sub| valid(root, sub, v)),
            "oneOf" => {
                let subs = want.as_array().unwrap();
                subs.iter().filter(|sub| valid(root, sub, v)).count() == 1
            }
            "if" => {
                let branch = if valid(root, want, v) { "then" } else { "else" };
                s.get(branch).is_none_or(|sub| valid(root, sub, v))
            }
            "then" | "else" => true,
            other => panic!("the check knows no keyword `{other}`"),
        })
    }

    fn is_type(t: &Value, v: &Value) -> bool {
        match t.as_str().unwrap() {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "number" => v.is_number(),
            "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|n| n.fract() == 0.0),
            "null" => v.is_null(),
            "boolean" => v.is_boolean(),
            other => panic!("no JSON type `{other}`"),
        }
    }
}

#[test]
fn the_check_of_the_schema_takes_the_keywords_as_the_specification_does() {
    let root = json(SCHEMA);
    let ok = |s: &str, v: &str| schema::valid(&root, &json(s), &json(v));
    assert!(ok(r#"{"type": ["string", "null"]}"#, "null"));
    assert!(!ok(r#"{"type": "integer"}"#, "1.5"));
    assert!(ok(r#"{"type": "integer", "minimum": 0}"#, "3.0"));
    assert!(!ok(r#"{"minimum": 0}"#, "-1"));
    assert!(ok(r#"{"required": ["a"]}"#, "7"), "applies to objects only");
    assert!(
        !ok(r#"{"oneOf": [{}, {"type": "number"}]}"#, "1"),
        "one, not two"
    );
    assert!(ok(
        r#"{"if": {"const": 1}, "then": {"type": "string"}}"#,
        "2"
    ));
    assert!(!ok(
        r#"{"if": {"const": 1}, "else": {"type": "string"}}"#,
        "2"
    ));
    assert!(ok(r##"{"$ref": "#/$defs/outcome"}"##, r#""not_reached""#));
}

/// The samples' three kinds: `valid` lines the schema accepts and the parser reads,
/// `tolerated` ones the parser reads though the schema refuses them, and `refused` ones
/// both refuse.
#[test]
fn the_shared_samples_are_taken_by_the_schema_as_they_say() {
    let root = json(SCHEMA);
    let samples = json(SAMPLES);
    for (kind, accepted) in [("valid", true), ("tolerated", false), ("refused", false)] {
        for s in samples[kind].as_array().expect(kind) {
            let record = match s {
                Value::String(raw) => serde_json::from_str(raw).ok(),
                other => Some(other.clone()),
            };
            let got = record.is_some_and(|r| schema::valid(&root, &root, &r));
            assert_eq!(got, accepted, "{kind}: {s}");
        }
    }
}

#[test]
fn the_shared_samples_are_read_as_the_schema_says() {
    let samples = json(SAMPLES);
    let line = |v: &Value| match v {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    for (kind, read) in [("valid", true), ("tolerated", true), ("refused", false)] {
        let list = samples[kind].as_array().expect(kind);
        assert!(!list.is_empty(), "{kind}");
        for s in list {
            let text = line(s);
            let got = parse_line(&text);
            assert_eq!(
                !matches!(got, Line::Garbage(_)),
                read,
                "{kind}: {text} was read as {got:?}"
            );
        }
    }
}

/// The other direction: every line of a real `{scenes}` file (a scene with artifacts and
/// one without) is what the schema's `scenes_line` says, its own outputs dir included.
#[test]
fn the_scenes_file_is_what_the_schema_says() {
    let root = json(SCHEMA);
    let dir = tempfile::tempdir().unwrap();
    let scenes = vec![
        crate::device::testing::in_lane("a", "l", 1.0),
        crate::device::testing::in_lane("sel/b", "l", 1.0),
    ];
    let frozen = crate::device::testing::frozen(dir.path(), scenes);
    let text = super::super::files::scenes_text(&frozen, &[0, 1]);
    let lines: Vec<Value> = text.lines().map(json).collect();
    assert_eq!(lines.len(), 2);
    for (line, name) in lines.iter().zip(["a", "sel/b"]) {
        let def = &root["$defs"]["scenes_line"];
        assert!(schema::valid(&root, def, line), "{line}");
        let want = crate::device::outputs::dir(&frozen.report_dir, name);
        assert_eq!(line["outputs"], want.display().to_string());
    }
    assert!(!schema::valid(
        &root,
        &root["$defs"]["scenes_line"],
        &serde_json::json!({"scene": "a"})
    ));
}
