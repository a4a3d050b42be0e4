//! Real outputs of the two demo suites (fixtures/demo, fixtures/pytest-demo) validate
//! against the committed JSON Schemas in `schemas/` (generated from the Rust types,
//! docs/reports.md "Schemas"): plan json, warm.json, report.json, trace.json and explain
//! json, each from a real `plan`, `warm`, `device` (through the lock stand-in) and
//! `explain`.
//! The validator is the Python `jsonschema` package of `.ci/venv` (the one the plugin's
//! own schema tests use): no second validator to build, the same draft 2020-12 rules on
//! both sides. Without the virtualenv these tests fail, they never pass unseen.

use std::path::{Path, PathBuf};

use crate::common::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The errors of validating `doc` against `schemas/<name>.schema.json`, one a line.
fn violations(name: &str, doc: &str) -> String {
    let py = crate::pytest_suite::venv().join("bin/python");
    let schema = Path::new(REPO).join(format!("schemas/{name}.schema.json"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("doc.json");
    std::fs::write(&file, doc).unwrap();
    let script = "import json, sys, jsonschema\n\
        schema = json.load(open(sys.argv[1]))\n\
        jsonschema.Draft202012Validator.check_schema(schema)\n\
        doc = json.load(open(sys.argv[2]))\n\
        for e in jsonschema.Draft202012Validator(schema).iter_errors(doc):\n\
        \x20   print('/'.join(map(str, e.absolute_path)) + ': ' + e.message[:300])\n";
    let o = std::process::Command::new(py)
        .args(["-c", script])
        .arg(&schema)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "the validator itself failed: {}",
        show(&o)
    );
    stdout(&o)
}

fn valid(name: &str, doc: &str, what: &str) {
    let errors = violations(name, doc);
    assert!(
        errors.is_empty(),
        "{what} does not validate against schemas/{name}.schema.json:\n{errors}"
    );
}

fn file(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// plan json, explain json (everything a miss, then one changed input), warm.json and
/// report.json of one suite, as `run` runs scenerun in it.
fn validate_a_suite(dir: &Path, run: &dyn Fn(&[&str]) -> std::process::Output, edit: &str) {
    let plan = run(&["plan", "--format", "json"]);
    assert_eq!(code(&plan), 0, "{}", show(&plan));
    valid("plan", &stdout(&plan), "plan --format json (cold)");
    // Its keys are sorted at every level, as when it was built as a `json!` value.
    let text = stdout(&plan);
    let sorted: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        text.trim_end(),
        serde_json::to_string_pretty(&sorted).unwrap(),
        "plan json keys out of order"
    );
    let explain = run(&["explain", "--format", "json"]);
    assert_eq!(code(&explain), 0, "{}", show(&explain));
    valid("explain", &stdout(&explain), "explain --format json (cold)");
    let warm = run(&["warm"]);
    assert_eq!(code(&warm), 0, "{}", show(&warm));
    valid(
        "warm",
        &file(dir.join("build/scenerun/warm.json")),
        "warm.json",
    );
    let device = run(&["device"]);
    assert!(
        [0, 1].contains(&code(&device)),
        "the demo's device phase ends 0 or 1: {}",
        show(&device)
    );
    valid(
        "report",
        &file(dir.join("build/scenerun/report.json")),
        "report.json",
    );
    let trace = file(dir.join("build/scenerun/trace.json"));
    assert!(
        trace.contains("\"scenerun warm\"") && trace.contains("\"scenerun device\""),
        "{trace}"
    );
    valid("trace", &trace, "trace.json (warm and device parts)");
    // A changed input: explain names it (`changes`), plan shows a stale step.
    let p = dir.join(edit);
    let mut text = file(p.clone());
    text.push('\n');
    std::fs::write(&p, text).unwrap();
    let explain = run(&["explain", "--format", "json"]);
    let doc = stdout(&explain);
    assert!(doc.contains("\"changes\": [\n        {"), "{doc}");
    valid("explain", &doc, "explain --format json (one input changed)");
    let plan = run(&["plan", "--format", "json"]);
    valid(
        "plan",
        &stdout(&plan),
        "plan --format json (one input changed)",
    );
}

#[test]
fn the_demos_outputs_validate_against_the_committed_schemas() {
    let s = Suite::new();
    copy_tree(
        &Path::new(REPO).join("fixtures/demo"),
        &s.path("demo"),
        &["build"],
    );
    copy_tree(&Path::new(REPO).join("fixtures/bin"), &s.path("bin"), &[]);
    let pool = Pool::new("0-3");
    let dir = s.path("demo");
    let run = |args: &[&str]| {
        let mut c = scenerun();
        c.current_dir(&dir).args(args);
        pool.apply(&mut c);
        c.output().unwrap()
    };
    validate_a_suite(&dir, &run, "kernels/saxpy.c");

    let d = crate::pytest_suite::Demo::new();
    let pool = Pool::new("0-3");
    let run = |args: &[&str]| {
        let mut c = d.scenerun(args);
        pool.apply(&mut c);
        c.output().unwrap()
    };
    validate_a_suite(&d.dir(), &run, "kernels/vadd.c");
}

/// The check is real: a report missing a required key is refused.
#[test]
fn a_document_missing_a_required_key_is_refused() {
    let errors = violations("warm", r#"{"steps": []}"#);
    assert!(
        errors.contains("'version' is a required property"),
        "{errors}"
    );
}
