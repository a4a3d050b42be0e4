//! README's lane recipe (`pytest {args} --report-log {results}`) with the scenerun pytest
//! plugin installed beside pytest-reportlog, as `.ci/deps.sh` installs them: one writer
//! of the results file, real durations, no "ignored a results line".

use super::*;

/// The first `yaml` block under README's "Lanes" heading, exactly as a newcomer copies it.
fn readme_lane_recipe() -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let from = readme
        .find("\n## Lanes")
        .expect("README has a Lanes section");
    let rest = &readme[from..];
    let fence = rest.find("```yaml").expect("a yaml block");
    let start = fence + rest[fence..].find('\n').unwrap() + 1;
    let end = start + rest[start..].find("```").unwrap();
    rest[start..end].to_string()
}

#[test]
fn readmes_lane_recipe_works_with_the_plugin_installed() {
    let recipe = readme_lane_recipe();
    assert!(recipe.contains("--report-log {results}"), "{recipe}");
    let s = Suite::new();
    s.manifest(&format!("version: 1\n{recipe}"));
    s.write(
        "tests/st/test_vadd.py",
        "import time\n\nclass TestVadd:\n    def test_a(self):\n        time.sleep(0.3)\n\n    def test_b(self):\n        time.sleep(0.3)\n\n    def test_c(self):\n        time.sleep(0.3)\n",
    );
    let path = venv_path();
    let o = s
        .cmd(&["device", "--no-lock", "--devices", "0"])
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(
        !stderr(&o).contains("ignored a results line"),
        "{}",
        show(&o)
    );
    let r = s.record("report.json").expect("report.json");
    let scene = report_scene(&r, "vector_add").expect("vector_add in the report");
    assert_eq!(scene["outcome"], "passed", "{r:#}");
    let secs = scene["duration_secs"].as_f64().unwrap();
    assert!(
        secs >= 0.8,
        "the scene's own time, three tests of 0.3 s: {secs} s: {r:#}"
    );
}
