//! Running the lock command, the one acquisition. It runs as `sh -c` in its own process
//! group, outside the step registry: a cancel must never SIGKILL it before it has
//! forwarded the signal to the inner run and waited for it, or the lock would be
//! released under running steps. The rules (docs/device.md, cancellation):
//! - SIGINT/SIGTERM to scenerun: SIGTERM to the lock command's group, then wait for the
//!   group to end, at most the grace plus `LOCK_EXTRA_WAIT`, then SIGKILL it.
//! - The inner run has ended but the lock command has not returned: wait at most
//!   `release_timeout`, then SIGKILL its group (the results are kept).
//! - Its pid and start time are recorded in the frozen plan right after the spawn; an
//!   inner run that starts before that waits for them (see `watch`).

use crate::base::proc::group_alive;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::ProcId;

/// How the lock command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockEnding {
    Exited(i32),
    Signaled(i32),
}

impl LockEnding {
    pub fn describe(self) -> String {
        match self {
            LockEnding::Exited(c) => format!("exited with status {c}"),
            LockEnding::Signaled(s) => format!("killed by signal {s}"),
        }
    }
}

/// Why scenerun itself killed the lock command's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Killed {
    /// It had not returned `release_timeout` after the inner run ended.
    ReleaseTimeout,
    /// It had not returned the grace plus the extra wait after the forwarded signal.
    AfterForward,
}

pub struct LockRun {
    pub ending: LockEnding,
    pub called_at: f64,
    pub returned_at: f64,
    /// When the signal was forwarded (Unix seconds).
    pub forwarded_at: Option<f64>,
    pub killed: Option<Killed>,
}

pub struct Limits {
    pub grace: Duration,
    pub release_timeout: Duration,
}

const POLL: Duration = Duration::from_millis(20);

/// Run `command`; `record(lock)` runs right after the spawn; `inner_done()`
/// says whether the inner run has started and ended.
pub fn run(
    command: &str,
    dir: &Path,
    env: &std::collections::BTreeMap<String, String>,
    log: &Path,
    limits: &Limits,
    record: impl FnOnce(Option<ProcId>) -> anyhow::Result<()>,
    inner_done: impl Fn() -> bool,
) -> anyhow::Result<LockRun> {
    if let Some(d) = log.parent() {
        std::fs::create_dir_all(d)?;
    }
    let out = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)?;
    // `sh` gives the lock tool the default signal state (scenerun's own threads block
    // SIGINT/SIGTERM and it ignores SIGXFSZ).
    // Its own group, known to the watchdog from its first instruction: if this process
    // is SIGKILLed, the watchdog sends the group SIGTERM (a queued request is cancelled,
    // held ids released by the lock tool itself), SIGKILL after a bounded wait; so no
    // lock request outlives its `device` and later takes the ids.
    let cmd = crate::base::proc::watched_group(
        crate::base::proc::sh(command, dir, env)
            .stderr_to_stdout()
            .stdout_file(out),
    );
    let called_at = super::unix_now();
    let child = cmd.start()?;
    drop(cmd);
    let pgid = crate::base::proc::leader(&child);
    let _forget = Disown(pgid);
    if let Err(e) = record(ProcId::of(pgid)) {
        crate::base::proc::signal_group(pgid, libc::SIGKILL);
        let _ = child.wait();
        return Err(e);
    }

    let mut forwarded: Option<Instant> = None;
    let mut forwarded_at = None;
    let mut inner_ended: Option<Instant> = None;
    let mut killed = None;
    let mut status = None;
    loop {
        if status.is_none() {
            status = child.try_wait()?.map(|o| o.status);
        }
        if let Some(st) = status {
            // The leader returned. Its group normally ends with it; after a forwarded
            // signal the rest of the group (the lock tool under a shell that died of
            // the signal) still gets its time; otherwise leftovers are killed.
            if forwarded.is_none() || !group_alive(pgid) || killed.is_some() {
                crate::base::proc::signal_group(pgid, libc::SIGKILL);
                let ending = match (st.code(), st.signal()) {
                    (Some(c), _) => LockEnding::Exited(c),
                    (None, Some(s)) => LockEnding::Signaled(s),
                    _ => LockEnding::Exited(-1),
                };
                return Ok(LockRun {
                    ending,
                    called_at,
                    returned_at: super::unix_now(),
                    forwarded_at,
                    killed,
                });
            }
        }
        if crate::base::proc::interrupted() && forwarded.is_none() {
            crate::base::proc::signal_group(pgid, libc::SIGTERM);
            forwarded = Some(Instant::now());
            forwarded_at = Some(super::unix_now());
        }
        if let Some(t) = forwarded {
            if killed.is_none() && t.elapsed() >= limits.grace + super::LOCK_EXTRA_WAIT {
                crate::base::proc::signal_group(pgid, libc::SIGKILL);
                killed = Some(Killed::AfterForward);
            }
        }
        if inner_ended.is_none() && inner_done() {
            inner_ended = Some(Instant::now());
        }
        if let Some(t) = inner_ended {
            if killed.is_none() && t.elapsed() >= limits.release_timeout {
                crate::base::proc::signal_group(pgid, libc::SIGKILL);
                killed = Some(Killed::ReleaseTimeout);
            }
        }
        std::thread::sleep(POLL);
    }
}

/// The lock command's group is forgotten by the watchdog once `run` returns (it has been
/// waited for and its leftovers killed): a later process reusing the id is not killed.
struct Disown(i32);

impl Drop for Disown {
    fn drop(&mut self) {
        crate::base::proc::disown(self.0);
    }
}
