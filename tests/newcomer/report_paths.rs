//! scenerun says where its reports went: they are beside the manifest (or in
//! `--report-dir`), not in the current directory. One line at the end of `warm` and of
//! `device`, not under `-q`.

use super::*;

#[test]
fn warm_and_device_say_where_their_reports_are() {
    let s = Suite::new();
    s.manifest(
        "version: 1\nscenes:\n  - name: one\n    fixture: { run: \"echo x > {out}/f\" }\n    device: { run: \"true\" }\n",
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let job = s.path("build/scenerun");
    let o = s
        .cmd(&["warm"])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let line = stderr(&o).lines().last().unwrap_or_default().to_string();
    assert!(line.starts_with("warm records: "), "{}", show(&o));
    assert!(
        line.contains(&job.display().to_string()) && line.contains("warm.json"),
        "{line}"
    );

    let o = s
        .cmd(&["device", "--no-lock"])
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let line = stderr(&o).lines().last().unwrap_or_default().to_string();
    assert!(line.starts_with("reports: "), "{}", show(&o));
    for want in ["report.json", "junit.xml"] {
        assert!(line.contains(want), "{line}");
    }
    assert!(line.contains(&job.display().to_string()), "{line}");

    let reports = elsewhere.path().join("r");
    let o = s
        .cmd(&["device", "--no-lock", "--report-dir"])
        .arg(&reports)
        .current_dir(elsewhere.path())
        .output()
        .unwrap();
    assert!(
        stderr(&o).contains(&format!("reports: {}/", reports.display())),
        "{}",
        show(&o)
    );

    let o = s.cmd(&["-q", "device", "--no-lock"]).output().unwrap();
    assert!(!stderr(&o).contains("reports: "), "-q: {}", show(&o));
}
