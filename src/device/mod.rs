//! The device phase (DESIGN.md §7). `outer` checks that everything is warm and takes the
//! lock exactly once; `inner` runs inside it from the frozen plan and never builds
//! anything. This file holds what the two share: the frozen plan and the results.

pub mod events;
mod exec;
pub mod inner;
pub mod lane;
pub mod lanes;
pub mod live;
pub mod outer;
pub mod pack;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cache::FileRecord;
use crate::template::Template;

pub const FROZEN_VERSION: u32 = 1;
pub const RESULTS_VERSION: u32 = 1;

/// An artifact as the inner run receives it: where it is and what `stat` must find.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Artifact {
    pub name: String,
    pub key: String,
    pub out: PathBuf,
    pub files: Vec<FileRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FrozenScene {
    pub name: String,
    pub platform: String,
    pub env: BTreeMap<String, String>,
    /// None: the scene has no device step (it passes once warm).
    pub run: Option<Template>,
    pub devices: usize,
    pub exclusive: bool,
    pub timeout_secs: Option<f64>,
    pub estimate: Option<f64>,
    pub kernels: Vec<Artifact>,
    pub fixture: Option<Artifact>,
    pub golden: Option<Artifact>,
    /// Set when a warm step of this scene failed with its current key.
    pub warm_failure: Option<String>,
    /// The lane whose process runs this scene (then `run` is None), and its words for
    /// `{args}` (docs/lanes.md).
    #[serde(default)]
    pub lane: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// `device.retries`.
    #[serde(default)]
    pub retries: u32,
}

/// Everything the inner run needs, so that it never re-reads the manifest or sources.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Frozen {
    pub version: u32,
    pub manifest_dir: PathBuf,
    pub job_dir: PathBuf,
    pub report_dir: PathBuf,
    pub results: PathBuf,
    pub device_env: String,
    pub scenes: Vec<FrozenScene>,
    /// The lanes the scenes use, and their start-up estimates from history.
    #[serde(default)]
    pub lanes: BTreeMap<String, crate::manifest::LaneConfig>,
    #[serde(default)]
    pub lane_startup: BTreeMap<String, f64>,
    #[serde(default)]
    pub device_fault: Option<crate::manifest::DeviceFault>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SceneOutcome {
    Passed,
    /// Passed on a retry after failing (docs/lanes.md).
    Flaky,
    Skipped,
    Failed,
    TimedOut,
    Interrupted,
    FailedInWarm,
    NotRun,
}

impl SceneOutcome {
    pub fn word(self) -> &'static str {
        match self {
            SceneOutcome::Passed => "passed",
            SceneOutcome::Flaky => "flaky",
            SceneOutcome::Skipped => "skipped",
            SceneOutcome::Failed => "failed",
            SceneOutcome::TimedOut => "timed out",
            SceneOutcome::Interrupted => "interrupted",
            SceneOutcome::FailedInWarm => "failed in warm",
            SceneOutcome::NotRun => "not run",
        }
    }

    /// Counts as a pass for the exit code.
    pub fn passed(self) -> bool {
        matches!(
            self,
            SceneOutcome::Passed | SceneOutcome::Flaky | SceneOutcome::Skipped
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SceneResult {
    pub name: String,
    pub outcome: SceneOutcome,
    pub devices: Vec<String>,
    /// Seconds after the inner run started.
    pub start_secs: f64,
    pub duration_secs: f64,
    pub message: Option<String>,
    pub log: Option<PathBuf>,
    pub log_tail: Option<String>,
    /// Every try of the device step, in order (retries, device-fault reruns).
    #[serde(default)]
    pub attempts: Vec<events::Attempt>,
    /// The lane it ran in.
    #[serde(default)]
    pub lane: Option<String>,
}

/// What the inner run writes into the job dir for the outer to read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    pub version: u32,
    pub granted: Vec<String>,
    /// Unix seconds.
    pub started: f64,
    pub ended: f64,
    /// Time with at least one device step running.
    pub busy_secs: f64,
    /// Sum over device steps of ids held × duration.
    pub device_secs_used: f64,
    pub scenes: Vec<SceneResult>,
    /// Lane processes, in start order.
    #[serde(default)]
    pub lanes: Vec<events::LaneRecord>,
    /// Sum of lane process start-ups (not in `busy_secs`).
    #[serde(default)]
    pub startup_secs: f64,
    /// Ids found faulty during the run.
    #[serde(default)]
    pub quarantined: Vec<String>,
    /// Scenes were left unrun because no healthy id was left: an infrastructure failure.
    #[serde(default)]
    pub no_healthy_device: bool,
}

pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

pub fn frozen_path(job_dir: &Path) -> PathBuf {
    job_dir.join("device-plan.json")
}

pub fn results_path(job_dir: &Path) -> PathBuf {
    job_dir.join("device-results.json")
}

/// Held (flock) by the inner run for its whole life, so the outer can tell when it ended.
pub fn inner_lock_path(job_dir: &Path) -> PathBuf {
    job_dir.join("inner.lock")
}

/// Wait, at most `limit`, until no inner run holds its lock. A lock tool may return
/// before the inner run has exited (it killed only the shell around it, or left it in
/// the background); its results are complete only once it has. False: still running.
pub fn wait_for_inner(job_dir: &Path, limit: std::time::Duration) -> bool {
    let Ok(f) = std::fs::File::options()
        .write(true)
        .open(inner_lock_path(job_dir))
    else {
        return true;
    };
    let start = std::time::Instant::now();
    loop {
        if f.try_lock().is_ok() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The inner run's live lines, which the outer follows (docs/lanes.md).
pub fn live_path(job_dir: &Path) -> PathBuf {
    job_dir.join("device-live.jsonl")
}

/// Where a scene's device step gets its `{kernels}` directory of links.
pub fn kernels_dir(job_dir: &Path, scene: &str) -> PathBuf {
    job_dir.join("device").join(scene).join("kernels")
}

/// The command that re-enters this binary inside the lock.
pub fn inner_command(frozen: &Path) -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "scenerun".into());
    format!(
        "{} inner {}",
        crate::template::quote(&exe),
        crate::template::quote(&frozen.display().to_string())
    )
}
