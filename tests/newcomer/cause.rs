//! A failed scene's cause is in view: the summary table, the live line and the GitHub
//! annotation show the last lines of its output (where the error is), not the first
//! ones, and not only "exited with status 1".

use super::*;

/// The device step prints 30 lines, then the mismatch, and exits 1: the table, the
/// `::error` annotation and the step summary all carry the mismatch line, and the
/// command echo is not shown as the cause.
#[test]
fn a_failed_device_step_carries_its_last_output_lines() {
    let s = Suite::new();
    s.script(
        "device.sh",
        "#!/bin/sh\nfor i in $(seq 1 30); do echo \"progress $i\"; done\necho 'mismatch: got 41, golden 42'\nexit 1\n",
    );
    s.manifest("version: 1\nscenes:\n  - name: bad\n    device: { run: \"./device.sh\" }\n");
    let summary = s.path("summary.md");
    let o = s
        .cmd(&["device", "--no-lock"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(code(&o), 1, "{}", show(&o));
    let out = stdout(&o);
    let annotation = out
        .lines()
        .find(|l| l.starts_with("::error title=scenerun%3A bad"))
        .unwrap_or_else(|| panic!("an annotation: {}", show(&o)));
    assert!(
        annotation.contains("mismatch: got 41, golden 42"),
        "{annotation}"
    );
    assert!(!annotation.contains("$ ./device.sh"), "{annotation}");
    let table = &out[out.find("scene ").expect("the table")..];
    assert!(table.contains("| mismatch: got 41, golden 42"), "{table}");
    assert!(
        std::fs::read_to_string(&summary)
            .unwrap()
            .contains("mismatch: got 41, golden 42"),
        "step summary"
    );
}

/// A lane process prints 20 lines, starts a scene and dies with "fatal error in scene":
/// the table under the crashed scene ends with that line, not with the first lines.
#[test]
fn a_crashed_lane_shows_its_fatal_line_in_the_table() {
    let s = Suite::new();
    s.script(
        "lane.sh",
        "#!/bin/sh\nfor i in $(seq 1 20); do echo \"init step $i\"; done\nprintf '{\"scene\":\"crashy\",\"event\":\"start\"}\\n' >> \"$1\"\necho 'runtime: fatal error in scene crashy' >&2\nkill -9 $$\n",
    );
    s.manifest(
        "version: 1\nlanes:\n  rt:\n    run: \"./lane.sh {results}\"\n    devices: 1\n    restarts: 0\nscenes:\n  - name: crashy\n    device: { lane: rt }\n",
    );
    let o = s.cmd(&["device", "--no-lock"]).output().unwrap();
    assert_eq!(code(&o), 1, "{}", show(&o));
    let out = stdout(&o);
    let table = &out[out.find("scene ").expect("the table")..];
    assert!(
        table.contains("runtime: fatal error in scene crashy"),
        "the cause in the table: {table}"
    );
    assert!(
        stderr(&o).contains("runtime: fatal error in scene crashy"),
        "live line: {}",
        show(&o)
    );
}
