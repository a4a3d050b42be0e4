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
