//! The one pre-imported Python server behind warm workers and the fork server
//! (docs/warm.md "Workers", docs/lanes.md "A fork server"), seen from scenerun: its
//! handshake and its private socket directory, one of each for both uses.
//!
//! Invariants: a server is used only after its one JSON ready line (the protocol's
//! messages are `server_protocol`'s types); a wait for it is bounded. Its socket lives in a directory that is a real directory, this user's,
//! mode 0700 (anything else there is refused, never used); the directory is removed when
//! the run that made it ends (its `Drop`, which runs on a normal end, an error and a
//! SIGTERM), and one left by a run that was SIGKILLed is removed by the next run that
//! makes one.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::piped::{Piped, Received};
use super::server_protocol::Ready;
use crate::base::units::later;

/// The prefix of every socket directory under the system's temp dir.
const DIR_PREFIX: &str = "scenerun-fork-";
/// The file in a socket directory naming the scenerun process that made it.
const OWNER: &str = "owner";

/// Why a server did not become ready.
#[derive(Debug)]
pub enum NotReady {
    /// It printed this line before its ready line.
    Said(String),
    /// Its stdout closed first (it ended).
    Closed,
    /// Not within the wait.
    TimedOut,
    Interrupted,
}

/// Wait at most `within` for the server's ready line; the pid that forks its children.
pub fn await_ready(piped: &Piped, within: Duration) -> Result<i32, NotReady> {
    let until = later(Instant::now(), within);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(NotReady::TimedOut);
        }
        match piped.recv(left.min(Duration::from_millis(100))) {
            Received::Line(l) => {
                return match serde_json::from_str::<Ready>(&l) {
                    Ok(Ready {
                        ready: true, pid, ..
                    }) => Ok(pid),
                    _ => Err(NotReady::Said(
                        crate::base::error::clip(&l, 120).to_string(),
                    )),
                }
            }
            Received::Nothing => {}
            Received::Closed => return Err(NotReady::Closed),
        }
        if super::interrupted() {
            return Err(NotReady::Interrupted);
        }
    }
}

/// The socket for the device run in `run_dir`: in a directory of its own under the
/// system's temp dir (a UNIX socket's path has room for ~100 bytes; a checkout's run dir
/// may not), named from the run dir, which no other run shares.
pub fn socket(run_dir: &Path) -> PathBuf {
    let tag = blake3::hash(run_dir.as_os_str().as_encoded_bytes()).to_hex();
    std::env::temp_dir()
        .join(format!("{DIR_PREFIX}{}", &tag[..16]))
        .join("s")
}

/// A socket directory of ours; removed when dropped.
pub struct SocketDir(PathBuf);

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Make `dir` private (0700, this user's, not a link) and name this process as its
/// owner; first remove every socket directory a SIGKILLed run of this user's left.
/// An existing `dir` is used only if it is such a private directory.
pub fn private_dir(dir: &Path) -> std::io::Result<SocketDir> {
    if let Some(parent) = dir.parent() {
        clean_stale(parent);
    }
    make_private_dir(dir)?;
    let made = SocketDir(dir.to_path_buf());
    std::fs::write(
        dir.join(OWNER),
        format!("{}\n", owner_tag(std::process::id())),
    )?;
    Ok(made)
}

fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let m = std::fs::symlink_metadata(dir)?;
            if m.is_dir() && m.uid() == euid() && m.permissions().mode() & 0o077 == 0 {
                Ok(())
            } else {
                Err(std::io::Error::other(
                    "it exists and is not a private directory of this user's (0700, not a link)",
                ))
            }
        }
        Err(e) => Err(e),
    }
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// `PID STARTTIME` of a live process (its start time tells a reused pid apart).
fn owner_tag(pid: u32) -> String {
    let start = super::stat(pid as i32).map(|s| s.start.to_string());
    format!("{pid} {}", start.unwrap_or_default())
}

/// Remove the socket directories under `tmp` that are this user's and whose owner is
/// not alive (its pid gone, or reused by another process). A directory without an
/// owner file is one being made right now, or not ours to judge: left alone.
fn clean_stale(tmp: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let path = e.path();
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !m.is_dir() || m.uid() != euid() {
            continue;
        }
        let Ok(owner) = std::fs::read_to_string(path.join(OWNER)) else {
            continue;
        };
        let owner = owner.trim();
        let alive = owner
            .split_whitespace()
            .next()
            .and_then(|p| p.parse::<u32>().ok())
            .is_some_and(|pid| owner_tag(pid) == owner);
        if !alive {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_ready_line_is_read_as_the_protocol_describes_it() {
        let r: Ready = serde_json::from_str(
            r#"{"ready": true, "pid": 7, "threads": 1, "modules": 3, "unknown": 0}"#,
        )
        .unwrap();
        assert!(r.ready && r.pid == 7);
        assert!(serde_json::from_str::<Ready>(r#"{"ready": true}"#).is_err());
    }

    #[test]
    fn a_link_or_a_shared_directory_is_refused_and_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        let link = tmp.path().join("scenerun-fork-link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(private_dir(&link).is_err());
        assert!(link.exists() && target.exists());
        let open = tmp.path().join("scenerun-fork-open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(private_dir(&open).is_err());
        assert!(open.exists());
    }

    #[test]
    fn a_private_dir_is_0700_and_gone_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("scenerun-fork-mine");
        let made = private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        drop(made);
        assert!(!dir.exists());
    }

    #[test]
    fn a_dir_left_by_a_dead_run_is_removed_and_a_live_runs_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dead = tmp.path().join("scenerun-fork-dead");
        std::fs::create_dir(&dead).unwrap();
        // A pid that is no process (pid_max is at most 2^22).
        std::fs::write(dead.join(OWNER), "99999999 1\n").unwrap();
        let live = tmp.path().join("scenerun-fork-live");
        std::fs::create_dir(&live).unwrap();
        std::fs::write(live.join(OWNER), owner_tag(std::process::id())).unwrap();
        let other = tmp.path().join("not-ours");
        std::fs::create_dir(&other).unwrap();
        let _made = private_dir(&tmp.path().join("scenerun-fork-new")).unwrap();
        assert!(!dead.exists());
        assert!(live.exists() && other.exists());
    }
}
