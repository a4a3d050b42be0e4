//! Manifest discovery (docs/cli.md): without `--manifest`, scenerun looks for
//! `scenes.yaml` in the current directory and then upwards, but never into a directory
//! another user could have planted it in (not owned by the user, or writable by others),
//! and never past the repository's root or the filesystem the search started on.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;

/// A manifest whose `plan` runs a generator that leaves `marker` behind: found and
/// loaded means run.
fn planted_manifest(dir: &Path, marker: &Path) {
    fs::write(
        dir.join("scenes.yaml"),
        format!(
            "version: 1\nscenes_from:\n  - run: \"touch {} && echo '[]'\"\nscenes:\n  - name: planted\n    device:\n      run: \"true\"\n",
            marker.display()
        ),
    )
    .unwrap();
}

/// `scenerun -v plan` in `cwd` without `--manifest`.
fn plan_in(cwd: &Path) -> std::process::Output {
    let mut c = scenerun_process();
    c.current_dir(cwd).args(["-v", "plan"]);
    run_bounded(c, Duration::from_secs(60))
}

fn chown(p: &Path, uid: u32) -> bool {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; chown touches no memory of ours.
    unsafe { libc::chown(c.as_ptr(), uid, u32::MAX) == 0 }
}

fn check_not_found(what: &str, cwd: &Path, marker: &Path, stop: &str) {
    let o = plan_in(cwd);
    assert_eq!(code(&o), 4, "{what}: {}", show(&o));
    assert!(!marker.exists(), "{what}: the planted manifest ran");
    assert!(
        stderr(&o).contains(stop),
        "{what}: -v says where the search stopped ({stop}): {}",
        show(&o)
    );
}

/// A `scenes.yaml` in a world-writable directory (like /tmp), or in one owned by
/// another user, above the current directory is never found; one in the current
/// directory's own parents (owned by the user, not writable by others) is, and `-v`
/// names it.
#[test]
fn discovery_never_climbs_into_a_directory_others_control() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("PWNED");

    // A world-writable (sticky) directory holding a planted manifest; ours below it.
    let shared = tmp.path().join("shared");
    fs::create_dir(&shared).unwrap();
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
    planted_manifest(&shared, &marker);
    let mine = shared.join("mine/deeper");
    fs::create_dir_all(&mine).unwrap();
    check_not_found(
        "world-writable parent",
        &mine,
        &marker,
        "is writable by other users",
    );

    // A directory owned by another user (root can hand it over; others report why not).
    let theirs = tmp.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    planted_manifest(&theirs, &marker);
    let mine = theirs.join("mine");
    fs::create_dir(&mine).unwrap();
    if chown(&theirs, 65534) {
        check_not_found(
            "another user's parent",
            &mine,
            &marker,
            "is not owned by you",
        );
    } else {
        eprintln!("skipped: another user's parent (chown needs root)");
    }

    // Our own parents: found, named by -v, and it runs.
    let home = tmp.path().join("home");
    fs::create_dir_all(home.join("proj/sub")).unwrap();
    fs::set_permissions(&home, fs::Permissions::from_mode(0o755)).unwrap();
    let ours = tmp.path().join("OURS");
    planted_manifest(&home.join("proj"), &ours);
    let o = plan_in(&home.join("proj/sub"));
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(ours.exists(), "our own manifest ran");
    assert!(
        stderr(&o).contains(&format!(
            "manifest: {}",
            home.join("proj/scenes.yaml").display()
        )),
        "{}",
        show(&o)
    );
}

/// The search stops at the repository's root: a `scenes.yaml` above a checkout is
/// someone else's business.
#[test]
fn discovery_stops_at_the_repository_root() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("PWNED");
    planted_manifest(tmp.path(), &marker);
    let repo = tmp.path().join("repo");
    fs::create_dir_all(repo.join("src/x")).unwrap();
    let st = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&repo)
        .status()
        .unwrap();
    assert!(st.success());
    check_not_found(
        "above the repository",
        &repo.join("src/x"),
        &marker,
        "repository root",
    );
}

/// The search does not leave the filesystem it started on: a `scenes.yaml` above a mount
/// point is not found from inside the mount (a tmpfs, where `mount` is permitted).
#[test]
fn discovery_stays_on_its_filesystem() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("PWNED");
    planted_manifest(tmp.path(), &marker);
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!(
            "skipped: discovery_stays_on_its_filesystem (mounting a tmpfs is not permitted here)"
        );
        return;
    }
    fs::create_dir(mnt.join("sub")).unwrap();
    let o = plan_in(&mnt.join("sub"));
    // Lazily: a process that ran there (a watchdog) may still be leaving.
    let _ = std::process::Command::new("umount")
        .arg("-l")
        .arg(&mnt)
        .status();
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(!marker.exists(), "the manifest above the mount ran");
    assert!(
        stderr(&o).contains("is on another filesystem"),
        "{}",
        show(&o)
    );
}
