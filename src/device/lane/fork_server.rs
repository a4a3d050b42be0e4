//! The fork server of `fork_server:` (docs/lanes.md, "A fork server"): one process that
//! imported a lane runtime's modules once, so the lane processes started before the lock
//! fork from it instead of each importing them again. `scenerun device` starts it before
//! those processes and stops it once the lock command has returned and they are gone.
//! Invariant: no lane depends on it. Its socket lives in a directory only this user can
//! enter; a lane that finds no server there, or one that cannot serve it, starts its own
//! interpreter (`scenerun_pytest fork` does that); a server that is not ready in time is
//! stopped and said once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::manifest::ForkServer;
use crate::proc::piped::{self, Piped, Received};

/// Where a lane finds the server: `SCENERUN_FORK_SERVER`.
pub const ENV: &str = "SCENERUN_FORK_SERVER";

/// The server's socket for the device run in `run_dir`: in a directory of its own under
/// the system's temp dir (a UNIX socket's path has room for ~100 bytes; a checkout's run
/// dir may not), named from the run dir, which no other run shares.
pub fn socket(run_dir: &Path) -> PathBuf {
    let tag = blake3::hash(run_dir.as_os_str().as_encoded_bytes()).to_hex();
    std::env::temp_dir()
        .join(format!("scenerun-fork-{}", &tag[..16]))
        .join("s")
}

/// A started server, ready.
pub struct Running {
    piped: Option<Piped>,
    dir: PathBuf,
}

/// Start the server and wait for its `ready` line. Err: why it is not there (nothing of
/// it is left running); the lanes then start their own interpreters.
pub fn start(
    config: &ForkServer,
    dir: &Path,
    env: &std::collections::BTreeMap<String, String>,
    run_dir: &Path,
    log: &Path,
) -> Result<Running, String> {
    let sock = socket(run_dir);
    let sock_dir = sock
        .parent()
        .expect("the socket has a directory")
        .to_path_buf();
    make_private_dir(&sock_dir).map_err(|e| format!("cannot make {}: {e}", sock_dir.display()))?;
    let mut running = Running {
        piped: None,
        dir: sock_dir,
    };
    let mut env = env.clone();
    env.insert(ENV.into(), sock.display().to_string());
    let command = config.run.render(|_| crate::template::Val::Raw("".into()));
    if let Some(logs) = log.parent() {
        std::fs::create_dir_all(logs)
            .map_err(|e| format!("cannot make {}: {e}", logs.display()))?;
    }
    let piped = match piped::spawn(&command, dir, &env, log) {
        Ok(Some(p)) => p,
        Ok(None) => return Err("interrupted".into()),
        Err(e) => return Err(format!("cannot start `{command}`: {e}")),
    };
    let until = Instant::now() + config.start_timeout;
    let piped = running.piped.insert(piped);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "not ready within {:.0?} (its log: {})",
                config.start_timeout,
                log.display()
            ));
        }
        match piped.recv(left.min(Duration::from_millis(100))) {
            Received::Line(l) if l.trim() == "ready" => return Ok(running),
            Received::Line(_) | Received::Nothing => {}
            Received::Closed => {
                return Err(format!(
                    "it ended before it was ready (its log: {})",
                    log.display()
                ))
            }
        }
        if crate::proc::interrupted() {
            return Err("interrupted".into());
        }
    }
}

/// A directory only this user can enter; an existing one (planted, or left by a run
/// that was killed) is used only if it is a real directory of this user's, mode 0700.
fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let m = std::fs::symlink_metadata(dir)?;
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            if m.is_dir() && m.uid() == me && m.permissions().mode() & 0o077 == 0 {
                Ok(())
            } else {
                Err(std::io::Error::other(
                    "it exists and is not a private directory of this user's",
                ))
            }
        }
        Err(e) => Err(e),
    }
}

impl Running {
    /// No new children; wait for the server to end (it ends once the children it forked
    /// have), at most `within`, then kill it; remove its socket's directory.
    pub fn stop(mut self, within: Duration) {
        if let Some(p) = self.piped.take() {
            let _ = p.close(within);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(p) = self.piped.take() {
            p.kill();
            let _ = p.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
