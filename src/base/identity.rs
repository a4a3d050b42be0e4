//! Identity commands (a toolchain's `identity:`, docs/cache-trust.md): their output and
//! success go into keys. Invariants kept here: each distinct command (per manifest
//! directory) runs at most once per process, even when asked for from many threads at
//! once; and it runs as every child does, through `proc`'s registry (`proc::capture`):
//! bounded by its timeout (`identity_timeout`, default 60 s; then its whole process
//! group is stopped and the caller gets `TimedOut`, exit 3, never a hang), stopped by a
//! cancel, and killed by the watchdog if scenerun dies.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `identity_timeout` when the manifest does not set one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Output an identity command may print (stdout and stderr together); one byte more
/// kills it and is an error: an identity is a version string, not a payload.
pub const MAX_OUTPUT: usize = 16 << 20;

/// Why an identity command gave no identity.
#[derive(Debug, Clone, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot run its identity command `{command}`: {why}")]
    Start { command: String, why: String },
    #[error("identity command `{command}` failed ({status}): {output}")]
    Failed {
        command: String,
        status: String,
        output: String,
    },
    #[error("identity command `{command}` did not finish within {}s (identity_timeout); it was killed", .limit.as_secs_f64())]
    TimedOut { command: String, limit: Duration },
    #[error("identity command `{command}` was stopped: the run was interrupted")]
    Interrupted { command: String },
    #[error("identity command `{command}` printed more than {max} bytes; it was killed")]
    TooLong { command: String, max: usize },
}

type Slot = Arc<Mutex<Option<Result<Vec<u8>, IdentityError>>>>;

static MEMO: Mutex<Option<HashMap<(PathBuf, String), Slot>>> = Mutex::new(None);

/// How many identity commands this process started (for tests and `-v`).
pub static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The output of `command` run by `sh -c` in `dir` with `env` (stderr merged into
/// stdout), memoized for the process: a second caller, even concurrent, waits for the
/// first run and shares its result (success or failure).
pub fn run(
    command: &str,
    dir: &Path,
    env: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<Vec<u8>, IdentityError> {
    let slot = MEMO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .entry((dir.to_path_buf(), command.to_string()))
        .or_default()
        .clone();
    let mut slot = slot
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(done) = &*slot {
        return done.clone();
    }
    let result = run_once(command, dir, env, timeout);
    *slot = Some(result.clone());
    result
}

fn run_once(
    command: &str,
    dir: &Path,
    env: &BTreeMap<String, String>,
    timeout: Duration,
) -> Result<Vec<u8>, IdentityError> {
    use crate::base::proc::Ended;
    let out = crate::base::proc::capture(
        command,
        dir,
        env,
        timeout,
        MAX_OUTPUT,
        crate::base::proc::Stderr::IntoStdout,
    )
    .map_err(|e| IdentityError::Start {
        command: command.to_string(),
        why: e.to_string(),
    })?;
    STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let status = match out.ended {
        Ended::TimedOut => {
            return Err(IdentityError::TimedOut {
                command: command.to_string(),
                limit: timeout,
            })
        }
        Ended::Interrupted => {
            return Err(IdentityError::Interrupted {
                command: command.to_string(),
            })
        }
        _ if out.overflowed => {
            return Err(IdentityError::TooLong {
                command: command.to_string(),
                max: MAX_OUTPUT,
            })
        }
        Ended::Exited(0) => return Ok(out.stdout),
        // As `ExitStatus` says it (`exit status: 3`, `signal: 9 (SIGKILL)`).
        Ended::Exited(c) => std::process::ExitStatus::from_raw((c & 0xff) << 8),
        Ended::Signaled(s) => std::process::ExitStatus::from_raw(s & 0x7f),
    };
    Err(IdentityError::Failed {
        command: command.to_string(),
        status: status.to_string(),
        output: String::from_utf8_lossy(&out.stdout).trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// `command` run in `/` with no extra environment.
    fn run_in_root(command: &str, timeout: Duration) -> Result<Vec<u8>, IdentityError> {
        run(command, Path::new("/"), &BTreeMap::new(), timeout)
    }

    /// `command`, given 300 ms, times out, and is killed long before it would end.
    fn assert_killed_at_timeout(command: &str) {
        let t0 = Instant::now();
        let r = run_in_root(command, Duration::from_millis(300));
        assert!(matches!(r, Err(IdentityError::TimedOut { .. })), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn a_hanging_identity_is_killed_at_its_timeout() {
        assert_killed_at_timeout("sleep 30 & sleep 30; echo never");
    }

    /// Its output closed, the command still runs: the deadline still holds, and what it
    /// printed and its failure are still told apart from a timeout.
    #[test]
    fn an_identity_that_closes_its_output_and_hangs_is_killed_at_its_timeout() {
        assert_killed_at_timeout("echo v1; exec >/dev/null 2>&1; sleep 30");
        let r = run_in_root("echo v1; exit 3", DEFAULT_TIMEOUT);
        assert!(
            matches!(&r, Err(IdentityError::Failed { output, .. }) if output == "v1"),
            "{r:?}"
        );
    }

    #[test]
    fn runs_once_per_process_even_concurrently() {
        let t = tempfile::tempdir().unwrap();
        let count = t.path().join("runs");
        let cmd = format!("echo run >> '{}'; echo v1", count.display());
        let outs: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| run(&cmd, t.path(), &BTreeMap::new(), DEFAULT_TIMEOUT)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
        });
        assert!(outs.iter().all(|o| o == b"v1\n"));
        run(&cmd, t.path(), &BTreeMap::new(), DEFAULT_TIMEOUT).unwrap();
        assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1);
    }
}
