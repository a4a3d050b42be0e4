//! `device.lane_args` / `device.lane_env` (docs/lanes.md): session options a scene needs
//! from its lane process. A real pytest lane whose conftest takes a runtime option
//! (`--enable-dep-gen`, as a DFX run needs) and reads an env variable, and logs both per
//! session with the tests it ran.

use super::pytest::venv_python;
use super::*;

const CONFTEST: &str = r#"import json, os

def pytest_addoption(parser):
    parser.addoption("--enable-dep-gen", action="store_true", default=False)

def pytest_sessionfinish(session):
    ran = sorted(i.name for i in session.items)
    with open("logs/sessions.jsonl", "a") as f:
        f.write(json.dumps({
            "dep_gen": session.config.getoption("--enable-dep-gen"),
            "dump": os.environ.get("DFX_DUMP"),
            "ran": ran,
        }) + "\n")
"#;

#[test]
fn scenes_of_different_variants_never_share_a_process() {
    let py = venv_python();
    let s = Suite::with_logs();
    s.write("tests/conftest.py", CONFTEST);
    s.write(
        "tests/test_ops.py",
        "def test_add():\n    pass\n\ndef test_mul():\n    pass\n\ndef test_dfx_a():\n    pass\n\ndef test_dfx_b():\n    pass\n\ndef test_dump():\n    pass\n",
    );
    let scene = |name: &str, keys: &str| {
        format!(
            "  - name: {name}\n    device:\n      lane: py\n      args: [\"tests/test_ops.py::test_{name}\"]\n{keys}"
        )
    };
    let dfx = "      lane_args: [--enable-dep-gen]\n      lane_env: {DFX_DUMP: args}\n";
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  py:\n    run: \"{} -m pytest -p no:cacheprovider -q {{args}} --report-log {{results}}\"\nscenes:\n{}{}{}{}{}",
        py.display(),
        scene("add", ""),
        scene("dfx_a", dfx),
        scene("mul", ""),
        scene("dfx_b", dfx),
        scene("dump", "      lane_env: {DFX_DUMP: tensors}\n"),
    ));
    // --plan shows each variant as a process of its own.
    let plan = s.cmd(&["plan"]).output().unwrap();
    expect_code(&plan, 0);
    let text = stdout(&plan);
    assert!(
        text.contains("lane py [DFX_DUMP=args --enable-dep-gen] (2 scenes)")
            && text.contains("lane py [DFX_DUMP=tensors] (1 scene)")
            && text.contains("lane py (2 scenes)"),
        "{text}"
    );
    let procs = planned_processes(&s);
    assert_eq!(procs.len(), 3, "{procs:#?}");
    assert!(procs.iter().any(
        |p| p["lane_args"] == serde_json::json!(["--enable-dep-gen"])
            && p["scenes"] == serde_json::json!(["dfx_a", "dfx_b"])
    ));
    let dry = stdout(&s.cmd(&["device", "--dry-run"]).output().unwrap());
    assert!(
        dry.contains("DFX_DUMP=args ")
            && dry.contains("-q --enable-dep-gen tests/test_ops.py::test_dfx_a"),
        "{dry}"
    );

    let o = no_lock(&s, "0");
    expect_code(&o, 0);
    let mut sessions: Vec<(bool, Option<String>, Vec<String>)> = s
        .read("logs/sessions.jsonl")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["dep_gen"].as_bool().unwrap(),
                v["dump"].as_str().map(str::to_string),
                v["ran"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect();
    sessions.sort();
    let strs = |v: &[&str]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
    assert_eq!(
        sessions,
        [
            (false, None, strs(&["test_add", "test_mul"])),
            (false, Some("tensors".into()), strs(&["test_dump"])),
            (
                true,
                Some("args".into()),
                strs(&["test_dfx_a", "test_dfx_b"])
            ),
        ],
        "{}",
        show(&o)
    );
    let r = report(&s);
    assert!(outcomes(&r).values().all(|o| o == "passed"), "{r:#}");
    let lanes = r["device"]["lanes"].as_array().unwrap();
    assert!(lanes
        .iter()
        .any(|l| l["variant"]["args"] == serde_json::json!(["--enable-dep-gen"])));
}

#[test]
fn variant_keys_belong_to_lane_scenes() {
    let s = lane_suite(
        "",
        "  - name: a\n    device:\n      run: \"true\"\n      lane_args: [-x]\n      lane_env: {A: b}\n  - name: b\n    device:\n      lane: l\n      lane_env: {\"1x\": b}\n",
    );
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    let err = stderr(&o);
    for want in [
        "scenes.yaml:13:7: scenes[0].device.lane_args: `lane_args` belongs to a lane scene",
        "scenes.yaml:14:7: scenes[0].device.lane_env: `lane_env` belongs to a lane scene",
        "scenes[1].device.lane_env.1x: `1x` is not a valid environment variable name",
    ] {
        assert!(err.contains(want), "missing `{want}` in:\n{err}");
    }
}
