//! What the warm executor reports: typed events about units (unique artifacts), and the
//! causes of failures and skips, each rendered here and nowhere else.

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use std::sync::Arc;

use crate::cache::Entry;
use crate::units::short_duration;

/// Why a warm step failed (the step's own fault, never the cache's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailCause {
    CouldNotStart(String),
    Exited(i32),
    Signaled(i32),
    TimedOut {
        limit: Duration,
    },
    Interrupted,
    /// Exited 0 but `{out}` was empty (`missing`: not there at all).
    EmptyOut {
        missing: bool,
        out: PathBuf,
    },
    /// `{out}` holds something the cache cannot keep (a symlink, a fifo).
    Uncacheable(String),
    /// The toolchain's depfile option was given but no depfile was written.
    NoDepfile(PathBuf),
    /// A fixture or golden command with `{depfile}` exited 0 without writing it.
    DepfileNotWritten(PathBuf),
    /// The depfile names a file that cannot be read.
    BadDepfileEntry {
        path: String,
        error: String,
    },
    /// An input changed during the step and its key could not be recomputed.
    Rekey {
        input: String,
        error: String,
    },
    /// An input changed during the step, and again during its rerun.
    InputChangedAgain(String),
    /// The worker running the step was lost (docs/warm.md, "Workers"); it is replaced.
    WorkerLost {
        worker: String,
        loss: WorkerLoss,
    },
    /// Anything a later stage adds that has no variant of its own yet.
    Other(String),
}

impl fmt::Display for FailCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailCause::CouldNotStart(e) => write!(f, "could not start `sh -c`: {e}"),
            FailCause::Exited(c) => write!(f, "exited with status {c}"),
            FailCause::Signaled(s) => write!(f, "killed by signal {s}"),
            FailCause::TimedOut { limit } => write!(
                f,
                "timed out after {} (its timeout; process group killed)",
                short_duration(*limit)
            ),
            FailCause::Interrupted => write!(f, "interrupted"),
            FailCause::EmptyOut { missing, out } => write!(
                f,
                "exited 0 but left {{out}} {} ({})",
                if *missing { "missing" } else { "empty" },
                out.display()
            ),
            FailCause::Uncacheable(e) => write!(f, "left {{out}} that cannot be cached: {e}"),
            FailCause::NoDepfile(p) => write!(
                f,
                "the toolchain's depfile option was given but no depfile was written at {}",
                p.display()
            ),
            FailCause::DepfileNotWritten(p) => write!(
                f,
                "depfile not written: the command has {{depfile}} but exited 0 without writing {}",
                p.display()
            ),
            FailCause::BadDepfileEntry { path, error } => {
                write!(f, "depfile names {path}, which cannot be read: {error}")
            }
            FailCause::Rekey { input, error } => write!(
                f,
                "input changed during the step ({input}), and its key cannot be recomputed: {error}"
            ),
            FailCause::InputChangedAgain(input) => write!(
                f,
                "input changed during the step ({input} changed again on the rerun); nothing was published"
            ),
            FailCause::WorkerLost { worker, loss } => {
                write!(f, "worker {worker} replaced: {loss}")
            }
            FailCause::Other(m) => write!(f, "{m}"),
        }
    }
}

/// Why a worker was lost while it ran a step (or stopped after one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerLoss {
    /// It ended by itself (how, as `proc::Ended` describes it).
    Died(String),
    /// The step passed its timeout: the worker's whole process group was killed.
    TimedOut(Duration),
    /// A process past the worker's `memory_cap`: the step's (`step`) or the worker's.
    MemoryCap { cap: u64, rss: u64, step: bool },
    /// It printed something that is not an answer to the request.
    Protocol(String),
}

impl fmt::Display for WorkerLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerLoss::Died(how) => write!(f, "the worker died while running the step ({how})"),
            WorkerLoss::TimedOut(limit) => write!(
                f,
                "the step timed out after {} (its timeout; the worker's process group killed)",
                short_duration(*limit)
            ),
            WorkerLoss::MemoryCap { cap, rss, step } => write!(
                f,
                "{} exceeded memory cap {} (resident {})",
                if *step { "step" } else { "the worker" },
                crate::units::short_size(*cap),
                crate::units::short_size(*rss)
            ),
            WorkerLoss::Protocol(said) => {
                write!(f, "the worker broke the protocol: it said `{said}`")
            }
        }
    }
}

/// What a finished unit says about its worker besides its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerNote {
    /// The worker could not start: this step and the next ones for it ran as processes.
    CouldNotStart { worker: String, why: String },
    /// The step ended well, then its worker was stopped (the next step starts a fresh one).
    Replaced { worker: String, why: WorkerLoss },
}

impl fmt::Display for WorkerNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerNote::CouldNotStart { worker, why } => write!(
                f,
                "worker {worker} could not start ({why}): its steps run one process each"
            ),
            WorkerNote::Replaced { worker, why } => {
                write!(f, "worker {worker} replaced after the step: {why}")
            }
        }
    }
}

impl From<String> for FailCause {
    fn from(message: String) -> FailCause {
        FailCause::Other(message)
    }
}

/// Why a unit did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipCause {
    /// A unit it needs (a golden's fixture) failed.
    DependencyFailed,
}

impl fmt::Display for SkipCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipCause::DependencyFailed => write!(f, "not run: the fixture it needs failed"),
        }
    }
}

/// How one unit ended.
#[derive(Debug)]
pub enum UnitOutcome {
    /// Built and published; `secs` is the step's own run time (for history); `sent`:
    /// bytes uploaded to the remote cache afterwards.
    Built {
        secs: f64,
        entry: Arc<Entry>,
        sent: u64,
    },
    /// Already in the cache (another warm may have just built it).
    Hit {
        entry: Arc<Entry>,
    },
    /// Downloaded from the remote cache (`bytes`) and published locally, in `secs`.
    Downloaded {
        secs: f64,
        bytes: u64,
        entry: Arc<Entry>,
    },
    Failed {
        cause: FailCause,
        log: PathBuf,
    },
    /// The cache failed: the warm stops (exit 3).
    Infra(anyhow::Error),
}

impl UnitOutcome {
    pub fn ok(&self) -> bool {
        matches!(
            self,
            UnitOutcome::Built { .. } | UnitOutcome::Hit { .. } | UnitOutcome::Downloaded { .. }
        )
    }
}

/// What building one unit hands the executor.
#[derive(Debug)]
pub struct UnitEnd {
    pub outcome: UnitOutcome,
    /// An input of the step (shown relative to the manifest) changed while it ran: what
    /// it built was not published, and `outcome` is that of its one rerun under a key
    /// recomputed from the content as it is now.
    pub input_changed: Option<String>,
    /// What there is to say about the worker that ran it.
    pub worker: Option<WorkerNote>,
}

/// What the executor emits, in order, from the scheduler thread.
#[derive(Debug)]
pub enum Event {
    Started {
        unit: usize,
        slot: usize,
        at: SystemTime,
    },
    Finished {
        unit: usize,
        slot: usize,
        /// Wall time from start to end, whatever the outcome.
        wall_secs: f64,
        outcome: UnitOutcome,
        /// See `UnitEnd::input_changed`.
        input_changed: Option<String>,
        /// See `UnitEnd::worker`.
        worker: Option<WorkerNote>,
    },
    Skipped {
        unit: usize,
        cause: SkipCause,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_names_its_limit() {
        let c = FailCause::TimedOut {
            limit: Duration::from_secs(4),
        };
        assert_eq!(
            c.to_string(),
            "timed out after 4.0s (its timeout; process group killed)"
        );
    }
}
