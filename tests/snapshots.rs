//! Whole-output snapshots of the CLI on the bundled demo suite (docs/cli.md, "Output
//! snapshots"): `list`, `plan`, `warm`, `explain`, `device` and error outputs, each run
//! as a user runs it, its whole stdout, stderr and exit code compared with a checked-in
//! file under tests/snapshots/ after one redactor (times, sizes, hashes, temp paths, run
//! ids, pids). Invariant: any change to what these commands print fails here and is
//! either a fix (re-blessed with `SCENERUN_BLESS_SNAPSHOTS=1`, the diff reviewed) or a
//! regression. One snapshot helper for the whole crate: insta, as the unit tests' own.

use std::fs;
use std::path::Path;
use std::process::Output;
use std::sync::Once;

use crate::common::*;

/// Compare `o` (run in `tmp`) whole with snapshot `name`, redacted. With
/// `SCENERUN_BLESS_SNAPSHOTS=1` the snapshot is rewritten instead.
pub fn assert_output(name: &str, o: &Output, tmp: &Path) {
    static BLESS: Once = Once::new();
    BLESS.call_once(|| {
        if std::env::var("SCENERUN_BLESS_SNAPSHOTS").as_deref() == Ok("1") {
            // Before insta reads its settings (once per process): write in place.
            std::env::set_var("INSTA_UPDATE", "always");
        }
    });
    let text = format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        code(o),
        stdout(o),
        stderr(o)
    );
    let text = redact(&text, tmp);
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.bind(|| insta::assert_snapshot!(name, text));
}

/// What differs between two runs of the same command, made stable: the temp dir, the
/// checkout's and the binary's paths, run ids, hashes, measured times, sizes, percentages and other measured
/// numbers, and what depends on the machine.
pub fn redact(text: &str, tmp: &Path) -> String {
    let bin = assert_cmd::cargo::cargo_bin("scenerun");
    let mut t = text
        .replace(&bin.display().to_string(), "[scenerun]")
        .replace(&tmp.display().to_string(), "[tmp]")
        .replace(env!("CARGO_MANIFEST_DIR"), "[repo]");
    // Canonical spellings of the temp dir (a /tmp that is a link) too.
    if let Ok(real) = tmp.canonicalize() {
        t = t.replace(&real.display().to_string(), "[tmp]");
    }
    for (re, with) in [
        // Where the test virtualenv's packages are (its place, its Python's version).
        (
            r"\S*/lib/python3\.[0-9]+/site-packages/",
            "[site-packages]/",
        ),
        // A run's directory: pid-start-counter.
        (r"runs/[0-9]+-[0-9]+-[0-9]+", "runs/[run]"),
        (r"\bpid [0-9]+", "pid [pid]"),
        (r"\b[0-9a-f]{12,64}\b", "[hash]"),
        (
            r"\b[0-9]+(\.[0-9]+)? ?(B|KiB|MiB|GiB|TiB|bytes)\b",
            "[size]",
        ),
        // Measured times only (`0.48s`, `258ms`, `160 ms`): a message's own `30s` stays.
        (r"\b[0-9]+\.[0-9]+(s|m|h)\b", "[time]"),
        (r"\b[0-9]+ ?(ns|µs|us|ms)\b", "[time]"),
        // How device steps see entries depends on the machine (a mount namespace or
        // not): `plan` says which.
        (r"(entries as device steps see them:).*", "$1 [view]"),
        (r"\b[0-9]+%", "[pct]"),
        (r"\b[0-9]+\.[0-9]+\b", "[num]"),
    ] {
        t = regex::Regex::new(re)
            .expect("a redaction pattern")
            .replace_all(&t, with)
            .into_owned();
    }
    t
}

/// A copy of the demo suite beside the stand-in lock tool (as its lock command
/// expects: `../bin/task-submit`), and a lock pool of four ids.
struct Demo {
    suite: Suite,
    pool: Pool,
}

impl Demo {
    fn new() -> Demo {
        let suite = Suite::new();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        copy_tree(&repo.join("fixtures/demo"), &suite.path("demo"), &["build"]);
        copy_tree(&repo.join("fixtures/bin"), &suite.path("bin"), &[]);
        Demo {
            suite,
            pool: Pool::new("0-3"),
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = scenerun();
        c.current_dir(self.suite.path("demo"));
        if !args.contains(&"--manifest") {
            c.args(["--manifest", "scenes.yaml"]);
        }
        c.args(args).env_remove("SCENERUN_SIGNING_KEY");
        self.pool.apply(&mut c);
        c.output().unwrap()
    }

    fn snap(&self, name: &str, args: &[&str]) -> Output {
        let o = self.run(args);
        assert_output(name, &o, self.suite.dir());
        o
    }
}

/// The demo's smoke scenes through every command a CI job runs, in order: each output
/// whole. Warm runs on one slot so its lines come in one order; each device run takes
/// one scene so its progress lines do too. One lock acquisition per device run that
/// gets as far as the lock.
#[test]
fn the_demo_suites_outputs_are_as_snapshotted() {
    let d = Demo::new();
    d.snap("list", &["list"]);
    d.snap("plan_fresh", &["plan", "--tag", "smoke"]);
    d.snap("warm_fresh", &["-j", "1", "warm", "--tag", "smoke"]);
    d.snap("warm_again", &["-j", "1", "warm", "--tag", "smoke"]);
    // One kernel edited: plan and explain say what changed.
    let vadd = d.suite.path("demo/kernels/vadd.c");
    let text = fs::read_to_string(&vadd).unwrap();
    fs::write(&vadd, format!("{text}/* edited */\n")).unwrap();
    d.snap("explain_edited", &["explain", "-k", "vector_ops"]);
    fs::write(&vadd, text).unwrap();
    d.snap("device_one", &["device", "-k", "vector_ops"]);
    // One scene of a lane: the runtime process's own line.
    d.snap("device_lane", &["device", "-k", "lane_vector_1"]);
    assert_eq!(d.pool.acquisitions(), 2, "{:?}", d.pool.events());
    // A broken kernel (the demo's `-DBROKEN`): warm builds it, its scene fails.
    let manifest = d.suite.path("demo/scenes.yaml");
    let text = fs::read_to_string(&manifest).unwrap();
    fs::write(
        &manifest,
        text.replacen(
            "source: kernels/vadd.c\n        include_dirs: [include]\n        flags: [\"-O2\"]",
            "source: kernels/vadd.c\n        include_dirs: [include]\n        flags: [\"-O2\", \"-DBROKEN\"]",
            1,
        ),
    )
    .unwrap();
    d.snap("warm_broken", &["-j", "1", "warm", "-k", "vector_ops"]);
    d.snap("device_failed", &["device", "-k", "vector_ops"]);
    // Before a warm of what changed: not warm, the lock not taken.
    fs::write(&manifest, text.replace("\"-O2\"", "\"-O1\"")).unwrap();
    d.snap("device_not_warm", &["device", "-k", "vector_ops"]);
    assert_eq!(d.pool.acquisitions(), 3, "{:?}", d.pool.events());
}

/// The errors a user meets first, whole: a malformed manifest, an unknown selection,
/// a selection that matches no scene, a missing manifest file.
#[test]
fn error_outputs_are_as_snapshotted() {
    let d = Demo::new();
    d.snap("error_unknown_selection", &["plan", "--selection", "nope"]);
    d.snap("error_no_scene_matches", &["plan", "-k", "no_such_scene"]);
    d.snap(
        "error_missing_manifest",
        &["--manifest", "missing.yaml", "warm"],
    );
    let manifest = d.suite.path("demo/scenes.yaml");
    let text = fs::read_to_string(&manifest).unwrap();
    fs::write(
        &manifest,
        text.replace("max_age: 14d", "max_age: fortnight").replacen(
            "    tags: [smoke]\n",
            "    tags: smoke\n    colour: blue\n",
            1,
        ),
    )
    .unwrap();
    d.snap("error_malformed_manifest", &["plan"]);
}

/// The pytest demo (fixtures/pytest-demo, its scenes collected by the plugin): `list`,
/// `plan`, a one-slot `warm`, and `device` on one case.
#[test]
fn the_pytest_demos_outputs_are_as_snapshotted() {
    let d = crate::pytest_suite::Demo::new();
    let tmp = d.dir().parent().expect("the copy's root").to_path_buf();
    let pool = Pool::new("0-3");
    let snap = |name: &str, args: &[&str]| {
        let mut c = d.scenerun(args);
        pool.apply(&mut c);
        let o = c.output().unwrap();
        assert_output(name, &o, &tmp);
        o
    };
    snap("pytest_list", &["list"]);
    snap("pytest_plan", &["plan"]);
    snap("pytest_warm", &["-j", "1", "warm"]);
    snap("pytest_device_passed", &["device", "-k", "TestClamp.unit"]);
    // The case that fails on purpose: under it, what its lane process wrote up to where
    // the plugin said that scene's output ends (`output_bytes`, its streams flushed
    // first), so one text on every run, never a part of what came after it.
    snap(
        "pytest_device_failed",
        &["device", "-k", "TestClamp.saturate"],
    );
    assert_eq!(pool.acquisitions(), 2, "{:?}", pool.events());
}
