//! A real pytest lane: `pytest {args} --report-log {results}` with the pytest-reportlog
//! plugin, no harness change. Needs the virtualenv `.ci/venv` (pytest, pytest-reportlog)
//! that `.ci/run` creates; without it this test fails rather than passing unseen.

use std::path::PathBuf;

use super::*;

pub(super) fn venv_python() -> PathBuf {
    let py = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/venv/bin/python");
    let ok = std::process::Command::new(&py)
        .args(["-c", "import pytest, pytest_reportlog"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the pytest lane test needs {} with pytest and pytest-reportlog: run .ci/run, or \
         `python3 -m venv .ci/venv && .ci/venv/bin/pip install pytest pytest-reportlog`",
        py.display()
    );
    py
}

#[test]
fn a_pytest_suite_with_reportlog_is_a_lane() {
    let py = venv_python();
    let s = Suite::with_logs();
    s.write(
        "tests/st/conftest.py",
        "import os\n\ndef pytest_sessionstart(session):\n    with open('logs/pytest-starts.log', 'a') as f:\n        f.write('start %s\\n' % os.environ.get('SCENERUN_DEVICES'))\n",
    );
    s.write(
        "tests/st/test_vadd.py",
        "import pytest\n\nclass TestVadd:\n    @pytest.mark.parametrize('n', [1, 2])\n    def test_add(self, n):\n        assert n + n == 2 * n\n\nclass TestOther:\n    def test_never_selected(self):\n        assert False\n",
    );
    s.write(
        "tests/st/test_mm.py",
        "def test_mm():\n    got, want = 3, 4\n    assert got == want, 'MISMATCH with golden: line 1'\n",
    );
    s.write(
        "tests/st/test_skip.py",
        "import pytest\n\n@pytest.mark.skip(reason='no such device type')\ndef test_skipped():\n    pass\n",
    );
    s.write(
        "tests/st/test_crash.py",
        "import os, signal\n\ndef test_die():\n    print('runtime lost the device', flush=True)\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    );
    s.write("tests/st/test_after.py", "def test_after():\n    pass\n");
    let scene = |name: &str, arg: &str| {
        format!("  - name: {name}\n    device:\n      lane: py\n      args: [\"{arg}\"]\n")
    };
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  py:\n    run: \"{} -m pytest -p no:cacheprovider -q {{args}} --report-log {{results}}\"\n    restarts: 1\nscenes:\n{}{}{}{}{}",
        py.display(),
        scene("vadd", "tests/st/test_vadd.py::TestVadd"),
        scene("mm", "tests/st/test_mm.py"),
        scene("skip", "tests/st/test_skip.py"),
        scene("crash", "tests/st/test_crash.py"),
        scene("after", "tests/st/test_after.py"),
    ));
    let o = no_lock(&s, "0");
    expect_code(&o, 1);
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[
            ("vadd", "passed"),
            ("mm", "failed"),
            ("skip", "skipped"),
            ("crash", "failed"),
            ("after", "passed"),
        ]),
        "{}",
        show(&o)
    );
    assert!(
        message(&r, "mm").contains("MISMATCH with golden: line 1"),
        "{r:#}"
    );
    let crash = message(&r, "crash");
    assert!(crash.contains("crashed the lane process"), "{crash}");
    // One pytest session for the first four scenes, one restart for the rest.
    assert_eq!(s.count("logs/pytest-starts.log"), 2, "{}", show(&o));
    let versions = std::process::Command::new(&py)
        .args(["-m", "pip", "list", "--format=freeze"])
        .output()
        .unwrap();
    eprintln!(
        "pytest lane ran with: {}",
        String::from_utf8_lossy(&versions.stdout)
            .lines()
            .filter(|l| l.starts_with("pytest"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The two combining rules (docs/pytest.md: rule 1, a node's phases; rule 2, the tests of
/// one scene) give the same scene verdicts whether the lane reports through plain
/// `pytest --report-log` or through the scenerun-pytest plugin: each scene here runs
/// once in each kind of lane. One passed and one skipped test make a passed scene.
#[test]
fn a_reportlog_lane_and_a_plugin_lane_give_a_scene_the_same_verdict() {
    let py = crate::pytest_suite::venv().join("bin/python");
    let s = Suite::with_logs();
    s.write(
        "tests/st/test_mixed.py",
        "import pytest\n\ndef test_ran():\n    pass\n\n@pytest.mark.skip(reason='needs a2a3')\ndef test_skipped():\n    pass\n",
    );
    s.write(
        "tests/st/test_skip_first.py",
        "import pytest\n\ndef test_skipped():\n    pytest.skip('not on sim')\n\ndef test_ran():\n    pass\n",
    );
    s.write(
        "tests/st/test_all_skipped.py",
        "import pytest\n\n@pytest.mark.skip(reason='a')\ndef test_a():\n    pass\n\n@pytest.mark.skip(reason='b')\ndef test_b():\n    pass\n",
    );
    s.write(
        "tests/st/test_teardown.py",
        "import pytest\n\n@pytest.fixture\ndef res():\n    yield 1\n    raise RuntimeError('teardown broke')\n\ndef test_uses(res):\n    pass\n\ndef test_other():\n    pass\n",
    );
    s.write(
        "tests/st/test_xfail.py",
        "import pytest\n\n@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert False\n\n@pytest.mark.skip(reason='x')\ndef test_skipped():\n    pass\n",
    );
    let files = ["mixed", "skip_first", "all_skipped", "teardown", "xfail"];
    let mut scenes = String::new();
    for lane in ["reportlog", "plugin"] {
        for f in files {
            scenes.push_str(&format!(
                "  - name: {lane}_{f}\n    device:\n      lane: {lane}\n      args: [\"tests/st/test_{f}.py\"]\n"
            ));
        }
    }
    let pytest = format!("{} -m pytest -p no:cacheprovider -q", py.display());
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  reportlog:\n    run: \"{pytest} -p no:scenerun {{args}} --report-log {{results}}\"\n  plugin:\n    run: \"{pytest} {{args}}\"\nscenes:\n{scenes}"
    ));
    let o = no_lock(&s, "0");
    let r = report(&s);
    let got = outcomes(&r);
    let verdict = |lane: &str, f: &str| got[&format!("{lane}_{f}")].clone();
    for f in files {
        assert_eq!(
            verdict("reportlog", f),
            verdict("plugin", f),
            "scene of tests/st/test_{f}.py: {got:?}\n{}",
            show(&o)
        );
    }
    let want = [
        ("mixed", "passed"),
        ("skip_first", "passed"),
        ("all_skipped", "skipped"),
        ("teardown", "error"),
        ("xfail", "xfailed"),
    ];
    for (f, w) in want {
        assert_eq!(verdict("plugin", f), w, "{got:?}\n{}", show(&o));
    }
    expect_code(&o, 1);
}
