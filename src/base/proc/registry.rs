//! The registry of live process groups: each one's deadline, stop signal and grace, one
//! timer thread that moves them along, interrupts and the panic hook. Invariant: a group
//! is forgotten (and what is left of it killed) only once its leader has been reaped.

use std::collections::HashMap;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ChildStdin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::signals::{group_alive, signal_group, Stop};
use super::watchdog::forget_group;
use crate::base::units::later;

/// Between SIGTERM and SIGKILL, unless a phase sets its own (`set_grace`).
pub const GRACE: Duration = Duration::from_secs(2);

static GRACE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(2000);

/// The grace period for every group of this process from now on (the device phase's
/// cancellation grace, docs/device.md).
pub fn set_grace(grace: Duration) {
    GRACE_MS.store(grace.as_millis() as u64, Ordering::SeqCst);
}

pub fn grace() -> Duration {
    Duration::from_millis(GRACE_MS.load(Ordering::SeqCst))
}

/// How a step's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
    TimedOut,
    Interrupted,
}

impl Ended {
    pub fn describe(&self) -> String {
        match self {
            Ended::Exited(c) => format!("exited with status {c}"),
            Ended::Signaled(s) => format!("killed by signal {s}"),
            Ended::TimedOut => "timed out (process group killed)".into(),
            Ended::Interrupted => "interrupted".into(),
        }
    }
}

pub(super) struct Group {
    pub(super) deadline: Option<Instant>,
    pub(super) stop: Option<Stop>,
    /// Its log: where the output after the stop signal starts is taken from it.
    pub(super) log: Option<std::path::PathBuf>,
    /// When the stop signal was sent, and the log's length then.
    pub(super) stopped: Option<(Instant, u64)>,
    /// When SIGTERM was sent: SIGKILL follows after the grace period.
    pub(super) termed: Option<Instant>,
    pub(super) timed_out: bool,
}

impl Group {
    pub(super) fn new(deadline: Option<Instant>, stop: Option<Stop>, log: Option<&Path>) -> Group {
        Group {
            deadline,
            stop,
            log: stop.and(log).map(Path::to_path_buf),
            stopped: None,
            termed: None,
            timed_out: false,
        }
    }

    /// Begin stopping it (once): its stop signal, SIGTERM after the stop's wait; or
    /// SIGTERM now.
    pub(super) fn begin_stop(&mut self, pgid: i32, now: Instant) {
        if self.stopped.is_some() || self.termed.is_some() {
            return;
        }
        let Some(stop) = self.stop else {
            return self.term(pgid, now);
        };
        let mark = self
            .log
            .as_ref()
            .and_then(|l| std::fs::metadata(l).ok())
            .map_or(0, |m| m.len());
        signal_group(pgid, stop.signal);
        self.stopped = Some((now, mark));
    }

    /// SIGTERM now (once); SIGKILL follows after the grace.
    pub(super) fn term(&mut self, pgid: i32, now: Instant) {
        if self.termed.is_none() {
            signal_group(pgid, libc::SIGTERM);
            self.termed = Some(now);
        }
    }

    /// Move it along at `now` (its timeout, the stop's wait, the grace); the next moment
    /// it needs a look, if any.
    pub(super) fn tick(&mut self, pgid: i32, now: Instant, grace: Duration) -> Option<Instant> {
        if let Some(t) = self.termed {
            if now >= later(t, grace) {
                signal_group(pgid, libc::SIGKILL);
                return None;
            }
            return Some(later(t, grace));
        }
        if let Some((at, _)) = self.stopped {
            let until = later(at, self.stop.map_or(Duration::ZERO, |s| s.wait));
            if now < until {
                return Some(until);
            }
            self.term(pgid, now);
            return Some(later(now, grace));
        }
        match self.deadline {
            Some(d) if now >= d => {
                self.timed_out = true;
                self.begin_stop(pgid, now);
                self.tick(pgid, now, grace)
            }
            other => other,
        }
    }

    /// When it will have had its whole stop wait and grace, once stopping began.
    pub(super) fn grace_end(&self, grace: Duration) -> Option<Instant> {
        match (self.termed, self.stopped) {
            (Some(t), _) => Some(later(t, grace)),
            (None, Some((at, _))) => Some(later(
                later(at, self.stop.map_or(Duration::ZERO, |s| s.wait)),
                grace,
            )),
            _ => None,
        }
    }
}

#[derive(Default)]
pub(super) struct Registry {
    pub(super) groups: Mutex<HashMap<i32, Group>>,
    pub(super) changed: Condvar,
    pub(super) interrupted: AtomicBool,
    pub(super) watchdog: Mutex<Option<ChildStdin>>,
}

pub(super) fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        std::thread::spawn(timer_loop);
        Registry::default()
    })
}

pub fn interrupted() -> bool {
    registry().interrupted.load(Ordering::SeqCst)
}

/// SIGTERM every live group now, SIGKILL after the grace period.
pub fn interrupt_all() {
    signal_all(libc::SIGTERM);
}

/// Mark the run interrupted and stop every live group: SIGTERM once per group (its stop
/// signal first where it has one; the timer loop follows with SIGTERM and SIGKILL), or
/// SIGKILL to every group.
fn signal_all(sig: i32) {
    let r = registry();
    r.interrupted.store(true, Ordering::SeqCst);
    let mut g = r
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = Instant::now();
    for (pgid, grp) in g.iter_mut() {
        if sig == libc::SIGKILL {
            signal_group(*pgid, sig);
            grp.termed.get_or_insert(now);
        } else {
            grp.begin_stop(*pgid, now);
        }
    }
    r.changed.notify_all();
}

/// SIGKILL every live group at once, and start nothing any more: the lock may be gone,
/// so no grace is left to give.
pub fn kill_all_now() {
    signal_all(libc::SIGKILL);
}

fn timer_loop() {
    let r = registry();
    let mut g = r
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let now = Instant::now();
        let grace = grace();
        let next = g
            .iter_mut()
            .filter_map(|(pgid, grp)| grp.tick(*pgid, now, grace))
            .min();
        g = match next {
            Some(n) => {
                r.changed
                    .wait_timeout(g, n.saturating_duration_since(now))
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0
            }
            None => r
                .changed
                .wait(g)
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        };
    }
}

/// How a step ended, and where in its log the output after its stop signal starts (when
/// one was sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub ended: Ended,
    pub stopped_at: Option<u64>,
}

/// A check every spawn must pass (the device phase's watch over the lock): false
/// means start nothing more.
pub(super) static SPAWN_GATE: OnceLock<fn() -> bool> = OnceLock::new();

pub fn set_spawn_gate(gate: fn() -> bool) {
    let _ = SPAWN_GATE.set(gate);
}

/// SIGTERM group `pgid` (a step of ours) now, SIGKILL after the grace period: a lane
/// process whose device failed, or that broke the protocol.
pub fn terminate(pgid: i32) {
    with_group(pgid, Group::term);
}

/// Stop group `pgid` as a timeout does: its stop signal first (SIGTERM after the stop's
/// wait), or SIGTERM now; SIGKILL after the grace.
pub fn stop(pgid: i32) {
    with_group(pgid, Group::begin_stop);
}

fn with_group(pgid: i32, f: fn(&mut Group, i32, Instant)) {
    let r = registry();
    let mut g = r
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(grp) = g.get_mut(&pgid) {
        f(grp, pgid, Instant::now());
    }
    r.changed.notify_all();
}

/// SIGKILL group `pgid` now if it is one of ours (still registered: never a group
/// whose id the system may have handed out again).
pub(super) fn kill_registered(pgid: i32) {
    let groups = registry()
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if groups.contains_key(&pgid) {
        signal_group(pgid, libc::SIGKILL);
    }
}

/// A panic in any thread ends scenerun at once with exit 3: the panic is printed as Rust
/// prints it, every process group this process registered is SIGKILLed (the watchdog
/// kills them too once this process is gone), and the process exits. Without it, a
/// worker's panic left its phase waiting for it for ever, SIGTERM included. Installed
/// by `main` before anything else runs.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        eprintln!(
            "error: internal error: scenerun panicked (a bug; please report it); its step processes were killed"
        );
        kill_registered_groups();
        std::process::exit(crate::base::exit::Exit::Infra.code());
    }));
}

/// SIGKILL every registered group, from a panicking thread: the registry's lock may be
/// held by a thread that will never let go (or by this one), so it is only tried for a
/// moment; the watchdog covers what this misses.
fn kill_registered_groups() {
    let r = registry();
    r.interrupted.store(true, Ordering::SeqCst);
    for _ in 0..50 {
        let g = match r.groups.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        for pgid in g.keys() {
            signal_group(*pgid, libc::SIGKILL);
        }
        return;
    }
}

/// The group's leader has been waited for: kill what it left running in its group, forget
/// the group, and say how it ended.
pub(super) fn finish(
    pgid: i32,
    waited: io::Result<std::process::ExitStatus>,
) -> io::Result<Finished> {
    drain_if_stopping(pgid);
    // Leftovers of the step (background children) die with it.
    signal_group(pgid, libc::SIGKILL);
    let grp = registry()
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&pgid);
    forget_group(pgid);
    let status = waited?;
    let stopping = grp
        .as_ref()
        .is_some_and(|g| g.termed.is_some() || g.stopped.is_some());
    let ended = if grp.as_ref().is_some_and(|g| g.timed_out) {
        Ended::TimedOut
    } else if interrupted() && stopping {
        Ended::Interrupted
    } else {
        match (status.code(), status.signal()) {
            (Some(c), _) => Ended::Exited(c),
            (None, Some(s)) => Ended::Signaled(s),
            _ => Ended::Exited(-1),
        }
    };
    Ok(Finished {
        ended,
        stopped_at: grp.and_then(|g| g.stopped).map(|(_, mark)| mark),
    })
}

/// Past a stopped group's grace, how long its leader's caller still waits for members
/// that are dead but not yet reaped (orphans are reaped by init, not by us).
const DRAIN_MARGIN: Duration = Duration::from_millis(500);

/// The leader of a group that is being stopped has exited: the rest of the group still
/// gets its grace. A step runs as `sh -c`, and that shell dies of SIGTERM at once while
/// the program it started runs its own handler; killing the group when the shell is
/// gone would cut that handler short (docs/device.md, cancellation). Returns once the
/// group is empty or its grace has passed (the timer loop SIGKILLs it then).
fn drain_if_stopping(pgid: i32) {
    let until = {
        let g = registry()
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match g.get(&pgid).and_then(|grp| grp.grace_end(grace())) {
            Some(t) => later(t, DRAIN_MARGIN),
            None => return,
        }
    };
    while group_alive(pgid) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process group id no process can have (above any pid_max): signals to it fail.
    const NOBODY: i32 = i32::MAX;

    #[test]
    fn a_timeout_sends_the_stop_signal_then_term_after_its_wait_then_kill_after_the_grace() {
        let stop = Stop {
            signal: libc::SIGUSR1,
            wait: Duration::from_secs(3),
        };
        let grace = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut g = Group::new(Some(t0 + Duration::from_secs(10)), Some(stop), None);
        assert_eq!(
            g.tick(NOBODY, t0, grace),
            Some(t0 + Duration::from_secs(10))
        );
        assert_eq!(g.grace_end(grace), None, "nothing stopped yet");
        // The deadline: the stop signal, SIGTERM due after its wait.
        let at = t0 + Duration::from_secs(10);
        assert_eq!(g.tick(NOBODY, at, grace), Some(at + stop.wait));
        assert!(g.timed_out && g.stopped.is_some() && g.termed.is_none());
        assert_eq!(g.grace_end(grace), Some(at + stop.wait + grace));
        // The wait is over: SIGTERM, SIGKILL due after the grace.
        let term = at + stop.wait;
        assert_eq!(g.tick(NOBODY, term, grace), Some(term + grace));
        assert_eq!(g.termed, Some(term));
        assert_eq!(g.tick(NOBODY, term + grace, grace), None, "SIGKILL sent");
    }

    #[test]
    fn without_a_stop_a_timeout_terms_at_once_and_a_stop_is_begun_once() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(5);
        let mut g = Group::new(Some(t0), None, None);
        assert_eq!(g.tick(NOBODY, t0, grace), Some(t0 + grace));
        assert_eq!(g.termed, Some(t0));
        let stop = Stop {
            signal: libc::SIGUSR1,
            wait: Duration::from_secs(1),
        };
        let mut g = Group::new(None, Some(stop), None);
        g.begin_stop(NOBODY, t0);
        let first = g.stopped;
        g.begin_stop(NOBODY, t0 + Duration::from_secs(1));
        assert_eq!(
            g.stopped, first,
            "a second stop (a cancel after a timeout) changes nothing"
        );
        // `terminate` skips the rest of the wait.
        g.term(NOBODY, t0 + Duration::from_millis(10));
        assert_eq!(
            g.grace_end(grace),
            Some(t0 + Duration::from_millis(10) + grace)
        );
    }
}
