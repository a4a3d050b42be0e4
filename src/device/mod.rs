//! The device phase (docs/device.md). `outer` checks that everything is warm and takes the
//! lock exactly once; `inner` runs inside it from the frozen plan and never builds
//! anything. This file holds what the two share: the frozen plan and the results.

mod ending;
pub mod events;
mod exec;
mod freeze;
pub mod inner;
pub mod lane;
pub mod live;
mod lockrun;
pub mod not_warm;
pub mod outer;
pub mod outputs;
pub mod packing;
mod private;
mod recheck;
pub mod report;
pub mod runs;
#[cfg(test)]
mod testing;
mod watch;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::base::verdict::Outcome;
use crate::cache::FileRecord;
use crate::manifest::{DeviceRun, DeviceStep};

/// 2: a scene's device step is one `device` object (its own command or a lane's batch),
/// no longer `run` / `lane` / `args` side by side. 3: a scene's `warm_failure` is typed
/// (`failure::WarmFailure`), no longer its text. 4: a lane's `prestart` is `off`,
/// `first_wave` or `every`, no longer a bool.
pub const FROZEN_VERSION: u32 = 4;
pub const RESULTS_VERSION: u32 = 1;

/// Between SIGTERM and SIGKILL when a device run is cancelled (`lock.grace`).
pub const DEFAULT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
/// How long the outer waits for the lock command after the inner run ended
/// (`lock.release_timeout`).
pub const DEFAULT_RELEASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// After forwarding a signal, the lock tool gets the grace plus this much to return.
pub const LOCK_EXTRA_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A process the inner run watches: its pid and its start time (clock ticks after boot,
/// field 22 of `/proc/<pid>/stat`), so that a reused pid is never taken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcId {
    pub pid: i32,
    pub start: u64,
}

impl ProcId {
    /// The process `pid` as it is now; None when there is no such process.
    pub fn of(pid: i32) -> Option<ProcId> {
        let s = crate::base::proc::stat(pid)?;
        s.running().then_some(ProcId {
            pid,
            start: s.start,
        })
    }

    pub fn me() -> Option<ProcId> {
        ProcId::of(std::process::id() as i32)
    }

    /// Still the same process, and not a zombie (a zombie runs nothing any more).
    pub fn alive(&self) -> bool {
        crate::base::proc::stat(self.pid).is_some_and(|s| s.start == self.start && s.running())
    }

    /// This process, as the leader of its process group, or any process left in that
    /// group. The lock command runs as `sh -c`: the shell may die of a forwarded signal
    /// while the lock tool it started is still forwarding it and holds the cards.
    pub fn group_alive(&self) -> bool {
        if self.alive() {
            return true;
        }
        // A pid stays allocated while its group has members; once it names another
        // process, that one leads a new group and the old group is gone.
        if crate::base::proc::stat(self.pid).is_some_and(|s| s.start != self.start) {
            return false;
        }
        crate::base::proc::group_alive(self.pid)
    }
}

/// Why a scene did not run, or was cut short, for a reason that is not the scene's own
/// fault. junit shows these as `<error>` testcases with the reason as `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub enum Infra {
    /// The lock command failed, timed out, or never ran the device steps.
    LockFailed,
    /// SIGINT/SIGTERM.
    Interrupted,
    /// An artifact was missing before the lock (exit 6).
    NotWarm,
    /// The granted ids were unusable.
    BadDeviceIds,
    /// An artifact vanished or changed size while the device phase ran.
    ArtifactMissing,
    /// The lock tool or `scenerun device` itself died: every step was killed at once.
    LockLost,
    /// Every granted id was quarantined as faulty; the scenes left were not run.
    NoHealthyDevice,
}

impl Infra {
    /// The machine-readable name (junit `type`, report.json `infra`).
    pub fn name(self) -> &'static str {
        match self {
            Infra::LockFailed => "lock_failed",
            Infra::Interrupted => "interrupted",
            Infra::NotWarm => "not_warm",
            Infra::BadDeviceIds => "bad_device_ids",
            Infra::ArtifactMissing => "artifact_missing",
            Infra::LockLost => "lock_lost",
            Infra::NoHealthyDevice => "no_healthy_device",
        }
    }
}

/// An artifact as the inner run receives it: where it is and what `stat` must find.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Artifact {
    pub name: String,
    pub key: String,
    pub out: PathBuf,
    pub files: Vec<FileRecord>,
}

/// A scene's device step as the inner run receives it, and as `--plan` packs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FrozenDevice {
    /// Its own command, or a lane's batch with the words it adds to `{args}`
    /// (docs/lanes.md).
    pub run: DeviceRun,
    /// Ids it holds while it runs.
    pub devices: usize,
    pub exclusive: bool,
    pub timeout_secs: Option<f64>,
    /// `device.retries`.
    pub retries: u32,
    /// Seconds, from history.
    pub estimate: Option<f64>,
    /// `stop_signal` / `stop_wait` of its own command.
    #[serde(default)]
    pub stop: Option<crate::base::proc::Stop>,
    #[serde(default)]
    pub order: crate::manifest::Order,
    /// The test node it runs: scenes of one node and lane share one lane process.
    #[serde(default)]
    pub node: Option<String>,
    /// `device.writes`: the artifacts it was handed private copies of.
    #[serde(default)]
    pub writes: Vec<crate::manifest::Writes>,
}

impl FrozenDevice {
    /// A manifest device step with its history estimate: the one conversion freezing and
    /// the `--plan` preview share.
    pub fn of(d: &DeviceStep, estimate: Option<f64>) -> FrozenDevice {
        FrozenDevice {
            run: d.run.clone(),
            devices: d.devices as usize,
            exclusive: d.exclusive,
            timeout_secs: d.timeout.map(|t| t.as_secs_f64()),
            retries: d.retries,
            estimate,
            stop: d.stop,
            order: d.order,
            node: d.node.clone(),
            writes: d.writes.clone(),
        }
    }

    /// The lane whose process runs it, if any.
    pub fn lane(&self) -> Option<&str> {
        self.run.lane()
    }

    /// The words it adds to its lane's `{args}` (none for its own command).
    pub fn args(&self) -> &[String] {
        match &self.run {
            DeviceRun::Lane { args, .. } => args,
            DeviceRun::Command(_) => &[],
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FrozenScene {
    pub name: String,
    /// The test node it runs and its case (reports name both).
    #[serde(default)]
    pub nodeid: Option<String>,
    #[serde(default)]
    pub case: Option<String>,
    /// The manifest's selection it belongs to (docs/manifest.md, "Selections").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<String>,
    pub platform: String,
    pub env: BTreeMap<String, String>,
    /// None: the scene has no device step (it passes once warm).
    pub device: Option<FrozenDevice>,
    pub kernels: Vec<Artifact>,
    pub fixture: Option<Artifact>,
    pub golden: Option<Artifact>,
    /// Set when a warm step of this scene failed with its current key: the first one.
    pub warm_failure: Option<crate::base::failure::WarmFailure>,
    /// Its `test:` ran in warm: the scene's verdict, reported without a device.
    #[serde(default)]
    pub verdict: Option<TestVerdict>,
}

/// A scene test's verdict as warm left it (`crate::base::verdict`), with its log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestVerdict {
    pub outcome: SceneOutcome,
    pub message: Option<String>,
    pub log: PathBuf,
    pub secs: f64,
}

impl TestVerdict {
    pub fn of(v: crate::base::verdict::Verdict, log: PathBuf, secs: f64) -> TestVerdict {
        let outcome = SceneOutcome::Test(v.outcome);
        TestVerdict {
            outcome,
            message: v.message,
            log,
            secs,
        }
    }
}

impl FrozenScene {
    /// Decided in warm (a failed step, or its test's verdict): never run on a device.
    pub fn settled_in_warm(&self) -> bool {
        self.warm_failure.is_some() || self.verdict.is_some()
    }

    /// Its device step; only scenes with one are ever run.
    pub fn device(&self) -> &FrozenDevice {
        self.device
            .as_ref()
            .expect("a scene that runs has a device step")
    }

    /// The lane whose process runs it, if any.
    pub fn lane(&self) -> Option<&str> {
        self.device.as_ref().and_then(FrozenDevice::lane)
    }
}

/// Everything the inner run needs, so that it never re-reads the manifest or sources.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Frozen {
    pub version: u32,
    pub manifest_dir: PathBuf,
    pub job_dir: PathBuf,
    /// This invocation's own directory (plan, results, kernel links): see `runs`.
    pub run_dir: PathBuf,
    pub report_dir: PathBuf,
    pub results: PathBuf,
    pub device_env: String,
    /// `{device_count}`: a grant with fewer ids is refused.
    pub device_count: usize,
    /// Between SIGTERM and SIGKILL for the device steps when cancelled.
    pub grace_secs: f64,
    /// `scenerun device` itself; the inner run kills every step at once if it dies. The
    /// inner watches it by the run dir's outer lock (`runs::outer_running`); the pid
    /// names it in the message.
    pub outer: Option<ProcId>,
    /// The lock command's process, likewise; recorded right after it was started.
    pub lock_tool: Option<ProcId>,
    /// The inner run runs through a lock command (so `lock_tool` will be recorded).
    pub through_lock: bool,
    pub scenes: Vec<FrozenScene>,
    /// The lanes the scenes use, and their start-up estimates from history.
    #[serde(default)]
    pub lanes: BTreeMap<String, crate::manifest::LaneConfig>,
    #[serde(default)]
    pub lane_startup: BTreeMap<String, f64>,
    #[serde(default)]
    pub device_fault: Option<crate::manifest::DeviceFault>,
    /// Lane processes `scenerun device` started before it called the lock command, for
    /// the inner run to adopt (docs/lanes.md, lanes started before the lock).
    #[serde(default)]
    pub prestarted: Vec<Prestarted>,
    /// The cache's entry directories device steps and lanes see read-only, where a
    /// private mount namespace can be made (`proc::view`).
    #[serde(default)]
    pub readonly: Vec<PathBuf>,
}

/// A lane process started before the lock, as the frozen plan tells the inner run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prestarted {
    pub lane: String,
    /// Its batch: frozen scene indices, in batch order.
    pub scenes: Vec<usize>,
    /// Its number among the run's lane processes (its files are named by it).
    pub n: usize,
    /// Its leader (`sh -c`), which leads its process group; `start` 0: it had ended
    /// before it could be looked at.
    pub leader: ProcId,
    /// Where its own output starts in its log (after the command line).
    pub log_mark: u64,
    /// When it was started (Unix seconds).
    pub started_at: f64,
}

impl Frozen {
    /// The longest `stop_wait` of a step or lane it runs: a cancel takes that much
    /// longer than the grace.
    pub fn longest_stop_wait(&self) -> std::time::Duration {
        let steps = self.scenes.iter().filter_map(|s| s.device.as_ref()?.stop);
        let lanes = self.lanes.values().filter_map(|l| l.stop);
        steps.chain(lanes).map(|s| s.wait).max().unwrap_or_default()
    }
}

/// How a scene ended: its test's own verdict (pytest's words, `verdict::Outcome`), or
/// one of scenerun's endings. JSON carries one word either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SceneOutcome {
    /// Passed on a retry after failing (docs/lanes.md).
    Flaky,
    TimedOut,
    Interrupted,
    FailedInWarm,
    NotRun,
    /// The test's own verdict. `not_reached`: not run because the suite's own runner
    /// would have stopped before it, an earlier case of the same node ended the node
    /// (docs/pytest.md); not a failure of its own.
    #[serde(untagged)]
    Test(Outcome),
}

impl SceneOutcome {
    pub const PASSED: SceneOutcome = SceneOutcome::Test(Outcome::Passed);
    pub const FAILED: SceneOutcome = SceneOutcome::Test(Outcome::Failed);

    /// A scene's outcome from its attempts: the last one decides; a pass after a failed
    /// attempt is flaky (a device fault before it does not count: the card failed).
    pub fn of(attempts: &[events::Attempt]) -> SceneOutcome {
        use events::AttemptOutcome;
        let Some(last) = attempts.last() else {
            return SceneOutcome::NotRun;
        };
        match last.outcome {
            AttemptOutcome::Test(Outcome::Passed) => {
                if attempts.iter().any(|a| a.outcome.scene_failed()) {
                    SceneOutcome::Flaky
                } else {
                    SceneOutcome::PASSED
                }
            }
            AttemptOutcome::Test(o) => SceneOutcome::Test(o),
            AttemptOutcome::DeviceFault | AttemptOutcome::CutShort => SceneOutcome::FAILED,
            AttemptOutcome::TimedOut => SceneOutcome::TimedOut,
            AttemptOutcome::Interrupted => SceneOutcome::Interrupted,
            AttemptOutcome::NotRun => SceneOutcome::NotRun,
        }
    }

    /// The word table of scenerun's endings (what JSON carries).
    pub fn as_str(self) -> &'static str {
        match self {
            SceneOutcome::Flaky => "flaky",
            SceneOutcome::TimedOut => "timed_out",
            SceneOutcome::Interrupted => "interrupted",
            SceneOutcome::FailedInWarm => "failed_in_warm",
            SceneOutcome::NotRun => "not_run",
            SceneOutcome::Test(o) => o.as_str(),
        }
    }

    pub fn word(self) -> Cow<'static, str> {
        crate::base::verdict::spoken(self.as_str())
    }

    /// Not a failure: exit 0 as far as this scene goes (pytest: skips, xfails and
    /// xpasses alone exit 0).
    pub fn passed(self) -> bool {
        self.tally().passed()
    }

    /// pytest's verdict for the node (what a comparison with pytest's own run reads, and
    /// which count of the summary it goes into: "6 passed, 4 skipped, 1 failed"): flaky
    /// is passed; a timeout or a crash is `failed`, as pytest-timeout and a dead worker
    /// report it.
    pub fn tally(self) -> Outcome {
        match self {
            SceneOutcome::Test(o) => o,
            SceneOutcome::Flaky => Outcome::Passed,
            SceneOutcome::TimedOut
            | SceneOutcome::Interrupted
            | SceneOutcome::FailedInWarm
            | SceneOutcome::NotRun => Outcome::Failed,
        }
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
    /// Set when infrastructure, not the scene, decided its ending.
    #[serde(default)]
    pub infra: Option<Infra>,
    /// Every try of the device step, in order (retries, device-fault reruns).
    #[serde(default)]
    pub attempts: Vec<events::Attempt>,
    /// The lane it ran in.
    #[serde(default)]
    pub lane: Option<String>,
}

impl SceneResult {
    /// Scene `s`'s result before (or without) a run: no devices, no time, no log.
    pub fn unrun(s: &FrozenScene, outcome: SceneOutcome, message: Option<String>) -> SceneResult {
        SceneResult {
            name: s.name.clone(),
            outcome,
            devices: Vec::new(),
            start_secs: 0.0,
            duration_secs: 0.0,
            message,
            log: None,
            log_tail: None,
            infra: None,
            attempts: Vec::new(),
            lane: s.lane().map(str::to_string),
        }
    }
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
    /// Set when the whole inner run failed for infrastructure (unusable ids, the lock
    /// lost): the outer exits 3 with this message.
    #[serde(default)]
    pub infra_error: Option<String>,
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

/// The inner run's live lines, which the outer follows (docs/lanes.md).
pub fn live_path(run_dir: &Path) -> PathBuf {
    run_dir.join("live.jsonl")
}

/// Where a scene's device step gets its `{kernels}` directory of links (per invocation,
/// so that two `device` runs never relink each other's).
pub fn kernels_dir(run_dir: &Path, scene: &str) -> PathBuf {
    run_dir.join("scenes").join(scene).join("kernels")
}

/// The command that re-enters this binary inside the lock. A lock tool runs it with
/// `sh -c`; `exec` makes the inner run that shell's process, so the lock tool's run *is*
/// the inner run: a signal the lock tool forwards (to its run alone, or to the run's
/// whole process group) reaches the inner run, and no shell around it dies of the
/// signal first and makes the lock tool release the cards under running steps.
pub fn inner_command(frozen: &Path) -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "scenerun".into());
    format!(
        "exec {} inner {}",
        crate::base::template::quote(&exe),
        crate::base::template::quote(&frozen.display().to_string())
    )
}

#[cfg(test)]
mod tests {
    use super::events::{Attempt, AttemptOutcome::*};
    use super::SceneOutcome;
    use crate::base::verdict::Outcome::*;

    fn a(outcome: super::events::AttemptOutcome) -> Attempt {
        super::testing::attempt(outcome, &["0"])
    }

    #[test]
    fn the_last_attempt_decides_and_a_pass_after_a_failure_is_flaky() {
        assert_eq!(SceneOutcome::of(&[]), SceneOutcome::NotRun);
        assert_eq!(
            SceneOutcome::of(&[a(Test(Failed)), a(Test(Passed))]),
            SceneOutcome::Flaky
        );
        assert_eq!(
            SceneOutcome::of(&[a(Test(Failed)), a(Test(Failed))]),
            SceneOutcome::Test(Failed)
        );
        assert_eq!(
            SceneOutcome::of(&[a(Test(Passed))]),
            SceneOutcome::Test(Passed)
        );
        // A device fault is the card's failure, not the scene's.
        assert_eq!(
            SceneOutcome::of(&[a(DeviceFault), a(Test(Passed))]),
            SceneOutcome::Test(Passed)
        );
    }
}
