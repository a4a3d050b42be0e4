//! The Python distribution (pyproject.toml): maturin builds one wheel with the
//! `scenerun` binary and the pytest plugin; installed into a fresh virtualenv, the
//! `scenerun` on its PATH runs the demo and, through the installed plugin, the pytest
//! demo; and the wheel refuses to share the plugin with the plugin-only distribution.
//!
//! The wheel is built by the maturin of the test virtualenv (`.ci/venv`, installed by
//! .ci/deps.sh at the version pyproject.toml pins; without it these tests fail), with the
//! `wheel-test` cargo profile (a debug build, in its own target dir). Installing it fetches
//! pytest from PyPI (or pip's cache). A user's `pip install .` (build isolation, release
//! profile) is proven by .ci/fresh-clone.sh in a fresh clone.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::common::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const PLUGIN_SRC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/python/scenerun-pytest/src/scenerun_pytest"
);

fn test_venv() -> PathBuf {
    std::env::var_os("SCENERUN_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join(".ci/venv"))
}

/// `maturin==X` from pyproject.toml's `[build-system] requires`.
fn pinned_maturin() -> String {
    let text = fs::read_to_string(Path::new(REPO).join("pyproject.toml")).unwrap();
    let at = text
        .find("\"maturin==")
        .expect("pyproject.toml pins maturin (\"maturin==X\")");
    let rest = &text[at + "\"maturin==".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

fn run(cmd: &mut Command) -> Output {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?}:\n{}", show(&o));
    o
}

/// The wheel, built once for this test process.
pub struct Wheel {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

pub fn wheel() -> &'static Wheel {
    static WHEEL: OnceLock<Wheel> = OnceLock::new();
    WHEEL.get_or_init(|| {
        let maturin = test_venv().join("bin/maturin");
        assert!(
            maturin.exists(),
            "no maturin at {}: run `bash .ci/deps.sh` (it installs maturin=={} into .ci/venv), \
             or point SCENERUN_TEST_VENV at a virtualenv with it",
            maturin.display(),
            pinned_maturin()
        );
        let o = run(Command::new(&maturin).arg("--version"));
        assert_eq!(
            stdout(&o).trim(),
            format!("maturin {}", pinned_maturin()),
            "the test virtualenv's maturin is not the version pyproject.toml pins: run `bash .ci/deps.sh`"
        );
        let dir = tempfile::tempdir().unwrap();
        run(Command::new(&maturin)
            .args(["build", "--profile", "wheel-test", "--out"])
            .arg(dir.path())
            .current_dir(REPO)
            .env_remove("CARGO_BUILD_TARGET"));
        let wheels: Vec<PathBuf> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "whl"))
            .collect();
        assert_eq!(wheels.len(), 1, "maturin built {wheels:?}");
        Wheel {
            path: wheels[0].clone(),
            _dir: dir,
        }
    })
}

/// A new virtualenv in `dir/venv` with the wheel installed (and its dependency pytest).
fn venv_with_wheel(dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv));
    run(pip(&venv)
        .arg("install")
        .arg(&wheel().path)
        .env_remove("PIP_NO_INDEX"));
    venv
}

fn pip(venv: &Path) -> Command {
    let mut c = Command::new(venv.join("bin/python"));
    c.args(["-m", "pip", "--disable-pip-version-check", "-q"])
        .env_remove("PYTHONPATH");
    c
}

/// `bash -c SCRIPT` in `cwd` as a user of the virtualenv would run it: its bin/ first on
/// PATH (as `activate` does), then the lock stand-in, in the lock pool `pool`.
fn in_venv(venv: &Path, cwd: &Path, pool: &Pool, script: &str) -> Output {
    let path = format!(
        "{}:{}:{}",
        venv.join("bin").display(),
        Path::new(TASK_SUBMIT).parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = assert_cmd::Command::new("bash");
    c.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
        .current_dir(cwd)
        .env("PATH", path)
        .env("VIRTUAL_ENV", venv)
        .env("CI", "true")
        .env("NO_COLOR", "1")
        .env("DEMO_RUNTIME_STARTUP_SECS", "0.05")
        .env_remove("PYTHONPATH");
    for v in NOT_INHERITED {
        c.env_remove(v);
    }
    pool.apply(&mut c);
    c.output().unwrap()
}

fn wheel_files() -> Vec<String> {
    let o = run(Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))",
        ])
        .arg(&wheel().path));
    stdout(&o).lines().map(str::to_string).collect()
}

fn wheel_member(name: &str) -> String {
    let o = run(Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; sys.stdout.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]).decode())",
        ])
        .arg(&wheel().path)
        .arg(name));
    stdout(&o)
}

#[test]
fn the_wheel_holds_the_binary_the_plugin_and_its_entry_point() {
    let files = wheel_files();
    let version = env!("CARGO_PKG_VERSION");
    let dist_info = format!("scenerun-{version}.dist-info");
    assert!(
        files.contains(&format!("scenerun-{version}.data/scripts/scenerun")),
        "no scenerun binary among the wheel's scripts: {files:#?}"
    );
    for e in fs::read_dir(PLUGIN_SRC).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".py") {
            let member = format!("scenerun_pytest/{name}");
            assert!(files.contains(&member), "{member} missing: {files:#?}");
            assert_eq!(
                wheel_member(&member),
                fs::read_to_string(e.path()).unwrap(),
                "{member} differs from the checkout"
            );
        }
    }
    let entry_points = wheel_member(&format!("{dist_info}/entry_points.txt"));
    let squeezed: String = entry_points.split_whitespace().collect();
    assert!(
        squeezed.contains("[pytest11]scenerun=scenerun_pytest.plugin"),
        "{entry_points}"
    );
    let metadata = wheel_member(&format!("{dist_info}/METADATA"));
    assert!(
        metadata
            .lines()
            .any(|l| l.starts_with("Requires-Dist: pytest")),
        "{metadata}"
    );
    // The plugin-only distribution has the same version, so the two never drift apart.
    let plugin_only =
        fs::read_to_string(Path::new(REPO).join("python/scenerun-pytest/pyproject.toml")).unwrap();
    assert!(
        plugin_only.contains(&format!("version = \"{version}\"")),
        "python/scenerun-pytest/pyproject.toml: version is not {version}"
    );
}

#[test]
fn the_installed_wheel_runs_the_demo_and_the_pytest_demo() {
    let tmp = tempfile::tempdir().unwrap();
    let venv = venv_with_wheel(tmp.path());
    let fixtures = tmp.path().join("fixtures");
    copy_tree(
        &Path::new(REPO).join("fixtures"),
        &fixtures,
        &["build", "__pycache__"],
    );

    // The demo: `scenerun` is the wheel's, found on PATH.
    let pool = Pool::new("0-3");
    let o = in_venv(
        &venv,
        tmp.path(),
        &pool,
        "command -v scenerun; scenerun --version; \
         scenerun --manifest fixtures/demo/scenes.yaml warm && scenerun --manifest fixtures/demo/scenes.yaml device",
    );
    expect_code(&o, 0);
    let mut lines = stdout(&o).lines().map(str::to_string).collect::<Vec<_>>();
    lines.truncate(2);
    assert_eq!(
        lines,
        [
            venv.join("bin/scenerun").display().to_string(),
            format!("scenerun {}", env!("CARGO_PKG_VERSION"))
        ],
        "{}",
        show(&o)
    );
    assert_eq!(pool.acquisitions(), 1, "{}", show(&o));
    let report = json_file(&fixtures.join("demo/build/scenerun/report.json"));
    let demo_outcomes = outcomes(&report);
    let demo: serde_yaml::Value =
        serde_yaml::from_str(&fs::read_to_string(format!("{DEMO}/scenes.yaml")).unwrap()).unwrap();
    let listed = demo["scenes"].as_sequence().unwrap().len();
    assert!(listed > 0);
    assert!(
        demo_outcomes.values().all(|o| o == "passed") && demo_outcomes.len() >= listed,
        "{demo_outcomes:#?}"
    );

    // The pytest demo through the installed plugin: collect, fixtures, goldens and the
    // lanes all run the virtualenv's python; one case fails on purpose.
    let pool = Pool::new("0-3");
    let o = in_venv(
        &venv,
        &fixtures.join("pytest-demo"),
        &pool,
        "command -v python; scenerun warm && scenerun device",
    );
    expect_code(&o, 1);
    assert_eq!(
        stdout(&o).lines().next(),
        Some(venv.join("bin/python").display().to_string().as_str()),
        "{}",
        show(&o)
    );
    assert_eq!(pool.acquisitions(), 1, "{}", show(&o));
    let report = json_file(&fixtures.join("pytest-demo/build/scenerun/report.json"));
    let outcomes = outcomes(&report);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for o in outcomes.values() {
        *counts.entry(o.as_str()).or_default() += 1;
    }
    assert_eq!(
        counts,
        BTreeMap::from([("failed", 1), ("passed", 22)]),
        "{outcomes:#?}"
    );
    assert_eq!(outcomes["TestClamp.saturate"], "failed");
}

#[test]
fn the_wheel_and_the_plugin_only_package_in_one_venv_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let venv = venv_with_wheel(tmp.path());
    let plugin = Path::new(REPO).join("python/scenerun-pytest");
    let probe = ["-m", "scenerun_pytest", "collect", "--help"];

    // The wheel alone: the plugin runs.
    let o = Command::new(venv.join("bin/python"))
        .args(probe)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));

    // Both: every entry refuses (exit 4 for the module, pytest's usage error for the plugin).
    run(pip(&venv).args(["install", "--no-deps"]).arg(&plugin));
    let o = Command::new(venv.join("bin/python"))
        .args(probe)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));
    assert!(
        stderr(&o).contains("pip uninstall -y scenerun-pytest"),
        "{}",
        show(&o)
    );
    let o = Command::new(venv.join("bin/python"))
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--co"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", show(&o));

    // What the message says restores a working environment.
    run(pip(&venv).args(["uninstall", "-y", "scenerun-pytest"]));
    run(pip(&venv)
        .args(["install", "--force-reinstall", "--no-deps"])
        .arg(&wheel().path));
    let o = Command::new(venv.join("bin/python"))
        .args(probe)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
}
