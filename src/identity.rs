//! Identity commands (a toolchain's `identity:`, docs/cache-trust.md): their output and
//! success go into keys. Invariants kept here: each distinct command (per manifest
//! directory) runs at most once per process, even when asked for from many threads at
//! once; and it is bounded by its timeout (`identity_timeout`, default 60 s) — when that
//! expires its whole process group is killed and the caller gets `TimedOut` (exit 3),
//! never a hang.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// `identity_timeout` when the manifest does not set one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

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
    let start_err = |e: std::io::Error| IdentityError::Start {
        command: command.to_string(),
        why: e.to_string(),
    };
    let (mut reader, writer) = std::io::pipe().map_err(start_err)?;
    let cmd = crate::proc::sh(command, dir, env)
        .stderr_to_stdout()
        .stdout_file(writer)
        // Its own process group: a timeout kills everything it started.
        .before_spawn(|c| {
            c.process_group(0);
            Ok(())
        });
    let deadline = crate::units::later(Instant::now(), timeout);
    let child = cmd.start().map_err(start_err)?;
    // The write end now lives only in the child (and what it starts).
    drop(cmd);
    STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = reader.read_to_end(&mut out);
        let _ = tx.send(out);
    });
    let kill = |child: &duct::Handle| {
        crate::proc::signal_group(crate::proc::leader(child), libc::SIGKILL);
        let _ = child.wait();
    };
    let timed_out = || IdentityError::TimedOut {
        command: command.to_string(),
        limit: timeout,
    };
    // The output is whole once every holder of the pipe has closed it (the command and
    // anything it left running): waited for first, up to the deadline, so a command
    // that takes 2 ms is not found 5 ms later by polling its status (a plan waits for
    // its identities before any key).
    let left = deadline.saturating_duration_since(Instant::now());
    let output = match rx.recv_timeout(left) {
        Ok(out) => out,
        Err(_) => {
            kill(&child);
            return Err(timed_out());
        }
    };
    // It closed its output; it exits at once, or within what is left of the deadline
    // (polled at 1, 2, 4, then every 5 ms).
    let mut nap = Duration::from_millis(1);
    let status = loop {
        match child.try_wait().map_err(start_err)? {
            Some(out) => break out.status,
            None if Instant::now() >= deadline => {
                kill(&child);
                return Err(timed_out());
            }
            None => {
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(5));
            }
        }
    };
    if !status.success() {
        return Err(IdentityError::Failed {
            command: command.to_string(),
            status: status.to_string(),
            output: String::from_utf8_lossy(&output).trim().to_string(),
        });
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

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
