//! What a plan is made of: steps with their status, the units warm builds (one per
//! artifact), the plan's scenes, and how lookups and commands are asked for.

use std::path::Path;
use std::sync::Arc;

use crate::base::stepid::StepId;
use crate::cache::{Entry, Kind, Stale};
use crate::manifest::DeviceStep;

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Hit,
    Miss,
    /// Not in the local cache, but the remote cache has its record (`--plan` only: a HEAD
    /// request, nothing downloaded).
    RemoteHit,
    /// In the cache but built again.
    Stale(StaleStep),
    /// The last warm failed this step with this very key.
    Failed(crate::base::failure::StepFailure),
}

/// Why a step whose entry is in the cache is built again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaleStep {
    /// Its own entry cannot be served (damaged, or a file its depfile recorded changed).
    Entry(Stale),
    /// A golden whose fixture is rebuilt because a file the fixture's depfile recorded
    /// changed: the fixture may come out different, so the golden is computed again.
    Fixture(Stale),
}

impl std::fmt::Display for StaleStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaleStep::Entry(why) => write!(f, "{why}"),
            StaleStep::Fixture(why) => write!(f, "its fixture is rebuilt: {why}"),
        }
    }
}

impl Status {
    pub fn word(&self) -> &'static str {
        match self {
            Status::Hit => "hit",
            Status::Miss => "miss",
            Status::RemoteHit => "remote-hit",
            Status::Stale(_) => "stale",
            Status::Failed(_) => "failed-in-warm",
        }
    }

    pub fn is_hit(&self) -> bool {
        *self == Status::Hit
    }
}

/// A warm step: compile one kernel, generate one fixture, compute one golden.
#[derive(Debug, Clone)]
pub struct Step {
    /// Stable identity across content changes, for history, records, logs and lines.
    pub id: StepId,
    /// Index into `Plan::units`: the steps that share this step's artifact.
    pub unit: usize,
    pub kind: Kind,
    /// Index into `Plan::scenes`.
    pub scene: usize,
    /// The kernel's name, or `fixture` / `golden`.
    pub name: String,
    pub key: String,
    /// false: lives in the job dir, never in the shared cache.
    pub persist: bool,
    /// Steps that must be published first (a golden's fixture).
    pub deps: Vec<usize>,
    pub threads: u32,
    pub memory: u64,
    pub timeout: Option<std::time::Duration>,
    pub status: Status,
    /// The published entry, when `status` is a hit: shared by the steps of its unit
    /// (one record of ~80 dependencies, not one copy per scene).
    pub entry: Option<Arc<Entry>>,
    /// Seconds, from history.
    pub estimate: Option<f64>,
}

impl Step {
    pub fn label(&self) -> &'static str {
        self.id.label()
    }
}

/// One unique artifact (persist, kind, key) and the steps, in plan order, that want it.
/// Scenes share identical steps; warm builds each unit once. Grouped here, once.
#[derive(Debug, Clone)]
pub struct Unit {
    pub steps: Vec<usize>,
    /// Units that must be published first (a golden's fixture).
    pub deps: Vec<usize>,
    /// Its hit was settled by the plan's lookup ([`Lookups::Settle`]): warm need not
    /// open the entry again.
    pub settled: bool,
}

/// What the plan's cache lookups do besides looking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookups {
    /// Look only: `plan`, previews, `device`, `explain`.
    Look,
    /// A warm follows: each lookup runs under its key's lock and a hit is touched there
    /// and then, which is all warm does for a hit it was handed (docs/cache-trust.md).
    Settle,
}

#[derive(Debug, Clone)]
pub struct PlanScene {
    pub name: String,
    /// Index into `Manifest::scenes`.
    pub index: usize,
    pub kernels: Vec<usize>,
    pub fixture: Option<usize>,
    pub golden: Option<usize>,
    /// Its `test:` step (a CPU-only test run in warm; its artifact is the verdict).
    pub test: Option<usize>,
    /// The manifest's `prepare:` steps, one per scene, all of a name in one unit.
    pub prepare: Vec<usize>,
    pub device: Option<DeviceStep>,
    pub device_estimate: Option<f64>,
}

/// How path placeholders are filled.
pub enum Fill<'a> {
    /// For keys: path placeholders masked.
    Mask,
    /// For `--dry-run`: run-time values shown as `<out>`, `<depfile>`, `<devices>`.
    DryRun,
    /// For running.
    Real { out: &'a Path, depfile: &'a Path },
}
