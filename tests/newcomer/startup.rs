//! A pytest lane's start-up (the session's fixtures: a device runtime's init) is counted
//! as start-up, not as the first scene's time, so "busy" excludes it as the summary says.

use super::*;

/// A session fixture that takes 1 s (the runtime), two scenes of ~0.1 s in one lane
/// process: the lane's start-up holds the second, and neither scene does; busy time is
/// below the start-up.
#[test]
fn a_pytest_lanes_runtime_init_is_start_up_not_the_first_scene() {
    let s = Suite::new();
    s.write(
        "tests/conftest.py",
        "import time\nimport pytest\n\n@pytest.fixture(scope='session')\ndef runtime():\n    time.sleep(1.0)\n    yield 'rt'\n",
    );
    s.write(
        "tests/test_first.py",
        "import time\n\ndef test_first(runtime):\n    time.sleep(0.1)\n",
    );
    s.write(
        "tests/test_second.py",
        "import time\n\ndef test_second(runtime):\n    time.sleep(0.1)\n",
    );
    s.manifest(
        "version: 1\nlanes:\n  py:\n    run: \"python -m pytest -q -p no:cacheprovider {args}\"\n    devices: 1\nscenes:\n  - name: first\n    device: { lane: py, args: [tests/test_first.py] }\n  - name: second\n    device: { lane: py, args: [tests/test_second.py] }\n",
    );
    let o = s
        .cmd(&["device", "--no-lock", "--devices", "0"])
        .env("PATH", venv_path())
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let r = s.record("report.json").expect("report.json");
    let d = &r["device"];
    let lanes = d["lanes"].as_array().unwrap();
    assert_eq!(lanes.len(), 1, "one lane process: {r:#}");
    let startup = lanes[0]["startup_secs"].as_f64().expect("a start-up");
    assert!(
        startup >= 1.0,
        "the runtime's 1 s init is start-up: {startup} s: {r:#}"
    );
    for name in ["first", "second"] {
        let secs = report_scene(&r, name).expect(name)["duration_secs"]
            .as_f64()
            .unwrap();
        assert!(
            secs < startup - 0.5,
            "{name}: {secs} s includes the runtime's init ({startup} s): {r:#}"
        );
    }
    let busy = d["busy_secs"].as_f64().unwrap();
    assert!(
        busy < startup,
        "busy {busy} s counts start-up {startup} s: {r:#}"
    );
}

/// The bundled pytest demo (its runtime takes DEMO_RUNTIME_STARTUP_SECS to start, in the
/// `scene_device` fixture that SceneTest cases use): in one lane process on one id, the
/// start-up holds the runtime's 1 s and no scene does.
#[test]
fn the_pytest_demos_runtime_start_up_is_not_in_its_first_scene() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = tmp.path().join("pytest-demo");
    copy_tree(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/pytest-demo")),
        &demo,
        &["build"],
    );
    let run = |args: &[&str]| {
        let mut c = scenerun();
        c.current_dir(&demo)
            .env("PATH", venv_path())
            .env("DEMO_RUNTIME_STARTUP_SECS", "1.0")
            .args(args);
        c.output().unwrap()
    };
    let o = run(&["warm", "-k", "TestVectorAdd"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let o = run(&[
        "device",
        "-k",
        "TestVectorAdd",
        "--no-lock",
        "--devices",
        "0",
    ]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let r = read_json(&demo.join("build/scenerun/report.json")).expect("report.json");
    let lanes = r["device"]["lanes"].as_array().unwrap();
    assert_eq!(lanes.len(), 1, "{r:#}");
    let startup = lanes[0]["startup_secs"].as_f64().unwrap();
    assert!(startup >= 1.0, "start-up {startup} s: {r:#}");
    let scenes = r["scenes"].as_array().unwrap();
    assert_eq!(scenes.len(), 3, "{r:#}");
    for sc in scenes {
        let secs = sc["duration_secs"].as_f64().unwrap();
        assert!(
            secs < startup - 0.5,
            "{}: {secs} s holds the runtime's start-up ({startup} s): {r:#}",
            sc["name"]
        );
    }
}
