//! Cache entries are read-only to the steps they are handed: published files lose their
//! write bits (0444, 0555 when executable), directories are 0555. A step that writes
//! into `{fixture}` anyway (as root, which mode bits do not stop) is caught: each file's
//! stamp (size, mtime, ctime, inode) is recorded at publish and compared before the
//! entry is served again — by the device phase before each later scene, and by the next
//! lookup, which re-hashes the file and rebuilds the entry. A step that declares
//! `device.writes` gets a private copy instead. These tests run as root, the case mode
//! bits cannot cover.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use super::*;

/// Two scenes with the same fixture (one shared entry): `a`'s device step runs first
/// and rewrites the fixture's file in place (same size); `b`'s checks it.
fn shared_fixture_suite(a_writes: bool) -> Suite {
    let s = Suite::with_logs();
    s.script(
        "gen.sh",
        "#!/bin/sh\necho run >> logs/gen.log\necho original > \"$1/data.txt\"\nmkdir \"$1/sub\"\necho deep > \"$1/sub/more.txt\"\n",
    );
    s.script(
        "scribble.sh",
        "#!/bin/sh\necho run >> logs/scribble.log\nprintf 'ORIGINAL\\n' > \"$1/data.txt\" || exit 1\n",
    );
    s.script(
        "check.sh",
        "#!/bin/sh\necho run >> logs/check.log\ngrep -qx original \"$1/data.txt\"\n",
    );
    let writes = if a_writes {
        "      writes: [fixture]\n"
    } else {
        ""
    };
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nscenes:\n  - name: a\n    fixture:\n      run: \"./gen.sh {{out}}\"\n      inputs: [gen.sh]\n    device:\n      run: \"./scribble.sh {{fixture}}\"\n      order: first\n{writes}  - name: b\n    fixture:\n      run: \"./gen.sh {{out}}\"\n      inputs: [gen.sh]\n    device:\n      run: \"./check.sh {{fixture}}\"\n"
    ));
    s
}

/// `scenerun ARGS` with the mount namespace refused (debug builds), so the detection
/// that stays where none can be made is tested on a machine where one can.
fn run_detecting(s: &Suite, args: &[&str]) -> Output {
    let mut c = scenerun_process();
    c.current_dir(s.dir())
        .env("SCENERUN_DEBUG_NO_NAMESPACE", "1")
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .args(args);
    run_bounded(c, Duration::from_secs(120))
}

/// How device steps see entries here, as `plan` says it.
fn view(s: &Suite) -> String {
    let o = run(s, &["plan"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = stdout(&o);
    out.lines()
        .find_map(|l| l.strip_prefix("entries as device steps see them: "))
        .unwrap_or_else(|| panic!("plan does not say how entries are seen: {out}"))
        .to_string()
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Where no mount namespace can be made (forced here by SCENERUN_DEBUG_NO_NAMESPACE):
/// root's write is caught, not refused.
#[test]
fn an_entry_changed_in_place_by_a_device_step_is_caught_and_rebuilt() {
    let s = shared_fixture_suite(false);
    let o = run_detecting(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 1, "one shared entry");
    let out = only_entry(&s, "fixture").join("out");
    assert_eq!(
        (
            mode(&out),
            mode(&out.join("sub")),
            mode(&out.join("data.txt")),
            mode(&out.join("sub/more.txt"))
        ),
        (0o555, 0o555, 0o444, 0o444),
        "published read-only"
    );

    let o = run_detecting(&s, &["device", "--no-lock", "--devices", "0"]);
    assert_eq!(code(&o), 1, "b cannot pass: {}", show(&o));
    assert_eq!(s.count("logs/scribble.log"), 1);
    assert_eq!(
        s.count("logs/check.log"),
        0,
        "b never ran on the changed fixture: {}",
        show(&o)
    );
    let report = s.record("report.json").expect("report.json");
    let b = report["scenes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "b")
        .unwrap();
    assert!(
        b["message"]
            .as_str()
            .unwrap_or("")
            .contains("changed after it was published"),
        "{b}"
    );

    // `cache verify` finds it; the next warm rebuilds it instead of serving it.
    let o = run_detecting(&s, &["cache", "verify"]);
    assert_eq!(code(&o), 1, "{}", show(&o));
    let o = run_detecting(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2, "rebuilt: {}", show(&o));
    let o = run_detecting(&s, &["cache", "verify"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
}

#[test]
fn a_step_that_declares_writes_gets_a_private_copy() {
    let s = shared_fixture_suite(true);
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let o = run(&s, &["device", "--no-lock", "--devices", "0"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        (s.count("logs/scribble.log"), s.count("logs/check.log")),
        (1, 1)
    );
    let o = run(&s, &["cache", "verify"]);
    assert_eq!(code(&o), 0, "the entry is untouched: {}", show(&o));
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 1, "still a hit");
}

/// A cache copied elsewhere (as `actions/cache` restores one: new inodes and change
/// times, the same content) is served without a rebuild, and a step writing into it
/// is still caught.
#[test]
fn a_copied_cache_is_served_and_still_guarded() {
    let s = shared_fixture_suite(false);
    let o = run_detecting(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let st = std::process::Command::new("cp")
        .args(["-a", "cache", "restored"])
        .current_dir(s.dir())
        .status()
        .unwrap();
    assert!(st.success());
    let restored = s.path("restored");
    let restored = restored.to_str().unwrap();
    let o = run_detecting(&s, &["--cache-dir", restored, "warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 1, "served: {}", show(&o));
    let o = run_detecting(
        &s,
        &[
            "--cache-dir",
            restored,
            "device",
            "--no-lock",
            "--devices",
            "0",
        ],
    );
    assert_eq!(code(&o), 1, "{}", show(&o));
    assert_eq!(s.count("logs/check.log"), 0, "{}", show(&o));
    let o = run_detecting(&s, &["--cache-dir", restored, "warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2, "rebuilt: {}", show(&o));
}

/// As a user mode bits apply to (here `nobody`, through `setpriv`): a device step that
/// writes into `{fixture}` is refused by the file system, the scene sharing the
/// fixture passes on it intact, and `cache clean` still removes the read-only entries.
/// Skipped (said so) where the tests do not run as root or `setpriv` is missing.
#[test]
fn as_another_user_entries_cannot_be_written_and_can_still_be_removed() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: needs root and setpriv to run scenerun as another user");
        return;
    }
    let s = shared_fixture_suite(false);
    let chown = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(s.dir())
        .status()
        .unwrap();
    assert!(chown.success());
    fs::set_permissions(s.dir(), fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = |args: &[&str]| {
        let mut c = std::process::Command::new("/usr/bin/setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(assert_cmd::cargo::cargo_bin("scenerun"))
            .env("CI", "true")
            .env("NO_COLOR", "1")
            .env("HOME", s.dir())
            .current_dir(s.dir())
            .arg("--manifest")
            .arg(s.path("scenes.yaml"))
            .args(args);
        for v in NOT_INHERITED {
            c.env_remove(v);
        }
        run_bounded(c, Duration::from_secs(120))
    };
    let o = as_nobody(&["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let o = as_nobody(&["device", "--no-lock", "--devices", "0"]);
    assert_eq!(code(&o), 1, "a's step cannot write: {}", show(&o));
    let report = s.record("report.json").expect("report.json");
    let outcome = |name: &str| outcomes(&report)[name].clone();
    assert_eq!(
        (outcome("a"), outcome("b")),
        ("failed".into(), "passed".into())
    );
    assert!(s
        .read("build/scenerun/logs/a/device.log")
        .contains("Permission denied"));
    let o = as_nobody(&["cache", "clean"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(
        entry_dirs(&s.path("cache")).is_empty(),
        "every entry removed"
    );
}

/// As root, where a private mount namespace can be made (checked: `plan` says which),
/// the device step's write into `{fixture}` fails in that step (a read-only bind
/// mount), and the scene sharing the fixture reads the published bytes and passes;
/// nothing needs rebuilding. Where none can be made, the detection holds (the test
/// above covers it) and this one says which case it found.
#[test]
fn as_root_a_write_into_fixture_fails_in_its_step_and_other_scenes_read_the_published_bytes() {
    let s = shared_fixture_suite(false);
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let seen = view(&s);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    eprintln!("entries as device steps see them here: {seen} (root: {root})");
    let o = run(&s, &["device", "--no-lock", "--devices", "0"]);
    assert_eq!(code(&o), 1, "a cannot pass: {}", show(&o));
    assert_eq!(s.count("logs/scribble.log"), 1);
    if seen.starts_with("detection only") {
        assert!(root, "{seen}");
        assert_eq!(s.count("logs/check.log"), 0, "{}", show(&o));
        return;
    }
    assert!(
        seen.starts_with("read-only bind mount") || (!root && seen.starts_with("mode bits")),
        "{seen}"
    );
    let outcomes = outcomes(&s.record("report.json").expect("report.json"));
    assert_eq!(outcomes["a"], "failed", "{}", show(&o));
    assert_eq!(
        outcomes["b"],
        "passed",
        "b read the published bytes: {}",
        show(&o)
    );
    assert_eq!(s.count("logs/check.log"), 1);
    let out = only_entry(&s, "fixture").join("out");
    assert_eq!(
        fs::read_to_string(out.join("data.txt")).unwrap(),
        "original\n"
    );
    let o = run(&s, &["cache", "verify"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 1, "nothing to rebuild");
}
