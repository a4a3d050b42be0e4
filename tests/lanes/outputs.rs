//! Per-scene outputs (docs/reports.md, "What a scene writes"): every device scene gets
//! its own `<report dir>/outputs/<scene>/`, as `$SCENERUN_SCENE_OUTPUTS` (in a pytest
//! lane, set by the plugin around the scene's test) and `{outputs}` (a plain step).
//! Two scenes that run at once (each waits until the other has started, so they cannot
//! run one after the other) write a file of the same name; both survive and report.json
//! names each under its scene.

use serde_json::json;

use super::pytest::venv_python;
use super::*;

const TESTS: &str = r#"import json, os, time

def meet(me, other):
    # Both tests run at once, or neither passes: each waits for the other's start.
    open(f"logs/started-{me}", "w").close()
    for _ in range(600):
        if os.path.exists(f"logs/started-{other}"):
            return
        time.sleep(0.05)
    raise AssertionError(f"{other} never started while {me} ran")

def write(me):
    out = os.environ["SCENERUN_SCENE_OUTPUTS"]
    with open(os.path.join(out, "deps.json"), "w") as f:
        json.dump({"scene": me}, f)
    os.makedirs(os.path.join(out, "trace"), exist_ok=True)
    open(os.path.join(out, "trace", "swimlane.json"), "w").write(me)

def test_a():
    meet("a", "b")
    write("a")

def test_b():
    meet("b", "a")
    write("b")
"#;

#[test]
fn scenes_running_at_once_write_the_same_name_into_their_own_dirs() {
    let py = venv_python();
    let s = Suite::with_logs();
    s.write("tests/test_w.py", TESTS);
    s.manifest(&format!(
        r#"version: 1
cache:
  dir: cache
lanes:
  py:
    run: "{} -m pytest -q -p no:cacheprovider {{args}}"
scenes:
  - name: a
    device: {{lane: py, args: ["tests/test_w.py::test_a"]}}
  - name: b
    device: {{lane: py, args: ["tests/test_w.py::test_b"]}}
  - name: plain
    device:
      run: "test \"$SCENERUN_SCENE_OUTPUTS\" = {{outputs}} && echo plain > {{outputs}}/deps.json"
      order: last
"#,
        py.display()
    ));
    // What an earlier run left there is gone before this one runs.
    s.write("build/scenerun/outputs/a/stale.txt", "old");
    let dry = stdout(&s.cmd(&["device", "--dry-run"]).output().unwrap());
    assert!(
        dry.contains("test \"$SCENERUN_SCENE_OUTPUTS\" = <outputs>"),
        "{dry}"
    );
    let o = no_lock(&s, "0,1");
    expect_code(&o, 0);
    let r = report(&s);
    for name in ["a", "b"] {
        assert_eq!(
            scene_in(&r, name)["outputs"],
            json!([
                format!("outputs/{name}/deps.json"),
                format!("outputs/{name}/trace/swimlane.json")
            ]),
            "{name}: {r:#}"
        );
        let kept = s.read(&format!("build/scenerun/outputs/{name}/deps.json"));
        assert_eq!(kept, format!("{{\"scene\": \"{name}\"}}"));
    }
    assert_eq!(
        scene_in(&r, "plain")["outputs"],
        json!(["outputs/plain/deps.json"])
    );
    assert!(!s.path("build/scenerun/outputs/a/stale.txt").exists());
    // Two processes, one per scene (they met, so they ran at once).
    assert_eq!(r["device"]["lanes"].as_array().unwrap().len(), 2, "{r:#}");
}
