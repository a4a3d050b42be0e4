//! Starting a step's command in a process group of its own, registered before it runs a
//! single instruction: run into its log, or captured. Invariant: `start` is the one
//! place a registered group is started.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::env::sh;
use super::registry::{
    finish, interrupted, kill_registered, registry, Ended, Finished, Group, SPAWN_GATE,
};
use super::signals::Stop;
use super::view;
use super::watchdog::{ensure_watchdog, register_self};
use crate::base::units::later;

/// What to run.
pub struct Spec<'a> {
    pub command: &'a str,
    pub dir: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    pub log: &'a Path,
    pub timeout: Option<Duration>,
    /// Sent before SIGTERM on a timeout, a `stop` or a cancel.
    pub stop: Option<Stop>,
}

/// Run `sh -c command` in its own process group, stdout and stderr appended to `log`,
/// and wait for it. After it ends, whatever it left running in its group is killed, so a
/// background child neither keeps us waiting nor outlives the step.
pub fn run(spec: &Spec) -> io::Result<Ended> {
    run_observed(spec, |_| {}).map(|f| f.ended)
}

/// As `run`, telling `started` the process group id once the step runs; also where the
/// output after a stop signal starts.
pub fn run_observed(spec: &Spec, started: impl FnOnce(i32)) -> io::Result<Finished> {
    // The caller started the log in a real directory (`fsutil::start_log`).
    let log = crate::base::fsutil::append_log(spec.log)?;
    // duct applies the outer redirection first: join stderr to stdout *after* stdout
    // points at the log (`>log 2>&1`), or stderr leaks to our stdout.
    let cmd = sh(spec.command, spec.dir, spec.env)
        .stderr_to_stdout()
        .stdout_file(log);
    let group = |deadline| Group::new(deadline, spec.stop, Some(spec.log));
    let Some(child) = start(cmd, spec.timeout, group)? else {
        return Ok(Finished {
            ended: Ended::Interrupted,
            stopped_at: None,
        });
    };
    let pgid = leader(&child);
    started(pgid);
    let waited = child.wait().map(|o| o.status);
    finish(pgid, waited)
}

/// What `capture` saw of a command.
#[derive(Debug)]
pub struct Captured {
    pub ended: Ended,
    /// Its standard output, at most the `max` it was allowed.
    pub stdout: Vec<u8>,
    /// It printed more than `max`: its group was killed at that point.
    pub overflowed: bool,
    /// The last `STDERR_TAIL` bytes of its standard error.
    pub stderr: Vec<u8>,
}

/// The end of a captured command's standard error that is kept.
const STDERR_TAIL: usize = 16 << 10;

/// Where `capture` puts a command's standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stderr {
    /// Apart: its last `STDERR_TAIL` bytes in `Captured::stderr`.
    Tail,
    /// Into its standard output, as `2>&1` would (`Captured::stderr` stays empty).
    IntoStdout,
}

/// Run `sh -c command` as `run` does (its own registered group: the timeout, a cancel
/// and scenerun's death kill the whole group), its output captured: stdout up to `max`
/// bytes (one more kills the group at once), stderr as `stderr` says. The output counts
/// as whole when every holder of the pipes closed them; a process that left the group
/// and holds them past the timeout makes it `TimedOut`.
pub fn capture(
    command: &str,
    dir: &Path,
    env: &BTreeMap<String, String>,
    timeout: Duration,
    max: usize,
    stderr: Stderr,
) -> io::Result<Captured> {
    use std::io::Read;
    let deadline = later(Instant::now(), timeout);
    let (mut out_r, out_w) = io::pipe()?;
    let (mut err_r, err_w) = io::pipe()?;
    let cmd = match stderr {
        // duct applies the outer redirection first: join stderr to stdout *after*
        // stdout points at the pipe (`>pipe 2>&1`).
        Stderr::IntoStdout => {
            drop(err_w);
            sh(command, dir, env).stderr_to_stdout().stdout_file(out_w)
        }
        Stderr::Tail => sh(command, dir, env).stdout_file(out_w).stderr_file(err_w),
    };
    let started = start(cmd, Some(timeout), |deadline| {
        Group::new(deadline, None, None)
    })?;
    // `cmd` held the write ends (`start` took it and dropped it): only the child has them now.
    let Some(child) = started else {
        return Ok(Captured {
            ended: Ended::Interrupted,
            stdout: Vec::new(),
            overflowed: false,
            stderr: Vec::new(),
        });
    };
    let pgid = leader(&child);
    let (tx, rx) = std::sync::mpsc::channel();
    let out_tx = tx.clone();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = (&mut out_r).take(max as u64 + 1).read_to_end(&mut out);
        let overflowed = out.len() > max;
        if overflowed {
            out.truncate(max);
            kill_registered(pgid);
        }
        let _ = out_tx.send((true, out, overflowed));
    });
    std::thread::spawn(move || {
        let mut tail = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = err_r.read(&mut buf) {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 2 * STDERR_TAIL {
                tail.drain(..tail.len() - STDERR_TAIL);
            }
        }
        let keep = tail.len().saturating_sub(STDERR_TAIL);
        let _ = tx.send((false, tail.split_off(keep), false));
    });
    let waited = child.wait().map(|o| o.status);
    let mut ended = finish(pgid, waited)?.ended;
    let mut got = Captured {
        ended: Ended::Exited(0),
        stdout: Vec::new(),
        overflowed: false,
        stderr: Vec::new(),
    };
    for _ in 0..2 {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((true, out, overflowed)) => (got.stdout, got.overflowed) = (out, overflowed),
            Ok((false, err, _)) => got.stderr = err,
            Err(_) => {
                ended = Ended::TimedOut;
                break;
            }
        }
    }
    got.ended = ended;
    Ok(got)
}

/// Start `cmd` (made by `sh`) in a process group of its own, registered (timeout,
/// interrupt, the watchdog) before it runs a single instruction of its own. None: the
/// run is interrupted (or the spawn gate closed), nothing started. `cmd` is consumed:
/// the files it was given are open in the child only once this returns.
pub(super) fn start(
    cmd: duct::Expression,
    timeout: Option<Duration>,
    group: impl FnOnce(Option<Instant>) -> Group,
) -> io::Result<Option<duct::Handle>> {
    if interrupted() || SPAWN_GATE.get().is_some_and(|gate| !gate()) {
        return Ok(None);
    }
    let cmd = own_group(cmd);
    let r = registry();
    // Register under the lock so a concurrent interrupt cannot miss this group.
    let mut groups = r
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if interrupted() {
        return Ok(None);
    }
    let child = cmd.start()?;
    drop(cmd);
    groups.insert(
        leader(&child),
        group(timeout.map(|t| later(Instant::now(), t))),
    );
    r.changed.notify_all();
    drop(groups);
    // Debug builds only: the tests of the panic hook make a thread that has just
    // started a step panic here.
    #[cfg(debug_assertions)]
    if std::env::var_os("SCENERUN_DEBUG_PANIC_AFTER_SPAWN").is_some() {
        panic!("SCENERUN_DEBUG_PANIC_AFTER_SPAWN is set: a test of the panic hook");
    }
    Ok(Some(child))
}

/// `cmd` (made by `sh`) as the leader of a process group of its own, known to the
/// watchdog before it runs a single instruction of its own, and killed when the thread
/// that starts it ends (the parent-death signal follows the thread).
pub(super) fn own_group(cmd: duct::Expression) -> duct::Expression {
    let watchdog_fd = ensure_watchdog();
    cmd.before_spawn(move |c| {
        // SAFETY: between fork and exec the closure calls only async-signal-safe
        // functions (setpgid, write via register_self, prctl, unshare, mount) on stack
        // values and memory prepared before the fork; it
        // allocates nothing and takes no lock. (`sh` made `cmd`: its own hook restores
        // the signal state.)
        unsafe {
            c.pre_exec(move || {
                libc::setpgid(0, 0);
                if let Some(fd) = watchdog_fd {
                    register_self(fd);
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The device phase's read-only view of the entries, once it is set.
                view::enter_in_child()
            });
        }
        Ok(())
    })
}

/// The process group a started `sh` leads (one command: one pid).
pub fn leader(child: &duct::Handle) -> i32 {
    child.pids()[0] as i32
}
