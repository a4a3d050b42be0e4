//! What the warm executor reports: typed events about units (unique artifacts), what a
//! finished unit says about its worker, and the warm's notices; report/ renders them. The causes of
//! failures and skips are `crate::base::failure`'s, which carries them on to the device phase.

use std::path::PathBuf;
use std::time::SystemTime;

use std::sync::Arc;

use crate::base::failure::{FailCause, SkipCause, WorkerLoss};
use crate::cache::Entry;
use crate::plan::Plan;

/// What a finished unit says about its worker besides its outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerNote {
    /// The worker could not start: this step and the next ones for it ran as processes.
    CouldNotStart { worker: String, why: String },
    /// The step ended well, then its worker was stopped (the next step starts a fresh one).
    Replaced { worker: String, why: WorkerLoss },
    /// The worker took no request, or did not answer one within the bounded wait: it was
    /// stopped, and this step and the next ones for it ran as processes.
    Stopped { worker: String, why: String },
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

/// Where a warm's events and notices go, in order: the command hands in report/'s
/// renderer (`report::warm::Reporter`); the warm itself prints nothing.
pub trait Shown {
    /// The executor starts on the plan's steps.
    fn start(&mut self, plan: &Plan);
    /// One event of the executor.
    fn event(&mut self, plan: &Plan, ev: &Event);
    /// The executor has ended: what showed the running steps goes.
    fn stop(&mut self);
    fn notice(&mut self, n: crate::base::notice::Notice);
}
