//! What the device executor reports (typed events), and the one accumulator that turns
//! them into results: every attempt of every scene, lane processes, quarantined ids,
//! and the decisions that follow an attempt (retry, rerun after a device fault). The
//! decisions are pure functions of a scene's attempts, tested here.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::base::notice::LaneNotice;
use serde::{Deserialize, Serialize};

pub use crate::base::verdict::Outcome;

/// How one try of a scene's device step ended: the test's own verdict (pytest's words,
/// `verdict::Outcome`), or one of scenerun's endings. JSON carries one word either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    TimedOut,
    DeviceFault,
    Interrupted,
    NotRun,
    /// A restart of its lane process cut it short: it runs once more in the fresh one.
    CutShort,
    /// The test ended with a verdict of its own (`not_reached`: the suite's own runner
    /// would not reach it, docs/pytest.md).
    #[serde(untagged)]
    Test(Outcome),
}

impl AttemptOutcome {
    pub const PASSED: AttemptOutcome = AttemptOutcome::Test(Outcome::Passed);
    pub const FAILED: AttemptOutcome = AttemptOutcome::Test(Outcome::Failed);

    /// The word table of scenerun's endings (what JSON carries).
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::TimedOut => "timed_out",
            AttemptOutcome::DeviceFault => "device_fault",
            AttemptOutcome::Interrupted => "interrupted",
            AttemptOutcome::NotRun => "not_run",
            AttemptOutcome::CutShort => "cut_short",
            AttemptOutcome::Test(o) => o.as_str(),
        }
    }

    pub fn word(self) -> Cow<'static, str> {
        crate::base::verdict::spoken(self.as_str())
    }

    /// A failure of the scene itself (what `retries` reruns).
    pub fn scene_failed(self) -> bool {
        matches!(
            self,
            AttemptOutcome::Test(Outcome::Failed | Outcome::Error) | AttemptOutcome::TimedOut
        )
    }

    /// The scene's own verdict, whatever it was, and not a failure (a pass, a skip, an
    /// expected failure, a case its node did not reach).
    pub fn not_a_failure(self) -> bool {
        matches!(self, AttemptOutcome::Test(o) if o.passed())
    }
}

/// One try of a scene's device step.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Attempt {
    pub outcome: AttemptOutcome,
    pub devices: Vec<String>,
    /// Seconds after the inner run started.
    pub start_secs: f64,
    pub duration_secs: f64,
    pub message: Option<String>,
    /// The last lines of its output.
    #[serde(default)]
    pub output_tail: Option<String>,
    pub log: Option<PathBuf>,
    /// Index into `Results::lanes` when it ran in a lane process.
    #[serde(default)]
    pub lane_process: Option<usize>,
}

impl Attempt {
    /// An attempt that ran nothing (not run, or failed before it could start): on
    /// `devices` at `start_secs`, no time, no output, `why` its message.
    pub fn unrun(
        outcome: AttemptOutcome,
        devices: Vec<String>,
        start_secs: f64,
        why: &str,
    ) -> Attempt {
        Attempt {
            outcome,
            devices,
            start_secs,
            duration_secs: 0.0,
            message: Some(why.to_string()),
            output_tail: None,
            log: None,
            lane_process: None,
        }
    }
}

/// One lane process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct LaneRecord {
    pub lane: String,
    pub devices: Vec<String>,
    /// Seconds after the inner run started.
    pub start_secs: f64,
    /// Process start → first result or start event; None when none came.
    pub startup_secs: Option<f64>,
    pub duration_secs: f64,
    /// Which restart of its batch this process was (0: the first process).
    pub restarts: u32,
    /// Why it was ended for a restart (a restart line, `restart_on`), if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_reason: Option<String>,
    /// Its `device.lane_args` / `lane_env` when not the plain process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<crate::manifest::Variant>,
    pub scenes: Vec<String>,
    /// How it ended ("exited with status 0", "killed after a scene timeout", ...).
    pub ended: String,
    pub log: PathBuf,
    /// It was started before the lock and adopted inside it (docs/lanes.md): its
    /// `start_secs` and `startup_secs` count from when it was handed its ids.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prestarted: bool,
    /// Its start-up before the lock: process start → its ready line, or → its ids when
    /// those came first (or it wrote no ready line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_before_lock_secs: Option<f64>,
}

/// Where the outer part of the device phase shows what it has to say: the command hands
/// in report/'s terminal (`report::live`); the phase itself prints nothing.
pub trait Shown: Sync {
    fn notice(&self, n: crate::base::notice::Notice);
    /// Show the live file at `path` as it grows, until the returned guard is dropped;
    /// `queued`: the lock command runs, so until the first line the wait is its queue's.
    fn follow(&self, path: PathBuf, queued: bool) -> Box<dyn std::any::Any>;
    /// The words of the error (and report.json's) when artifacts are missing: `cache`
    /// was checked, chosen by `from`.
    fn not_warm(
        &self,
        missing: &[super::not_warm::Missing],
        cache: &std::path::Path,
        from: crate::base::layout::CacheFrom,
    ) -> String;
}

/// What the executor tells the scheduler, the accumulator and the reporter.
#[derive(Debug, Clone)]
pub enum Event {
    /// Scene `scene` started running (its own command, or its lane process said so).
    Started { scene: usize },
    /// One attempt of scene `scene` (index into the frozen scenes) ended.
    Attempt { scene: usize, attempt: Attempt },
    /// A lane process ended.
    Lane(LaneRecord),
    /// These granted-id slots are faulty: quarantine them.
    Fault { slots: Vec<usize> },
    /// Something was ignored or worked around.
    Warning(LaneNotice),
    /// Job `job` ended; its ids are free. `handback`: scenes of a lane batch to run
    /// again in a fresh process on healthy ids (after a device fault).
    Done { job: usize, handback: Vec<usize> },
}

/// What follows an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FollowUp {
    Final,
    /// `device.retries` allows another try.
    Retry,
    /// A device fault: once, on healthy ids, not counted against retries.
    FaultRerun,
    /// Cut short by a restart of its lane process: the lane itself runs it again in the
    /// fresh process (the scheduler has nothing to requeue).
    InLane,
}

impl FollowUp {
    /// The scheduler queues the scene again (a retry, a fault rerun); a scene cut short
    /// reruns inside its lane instead.
    pub fn requeues(self) -> bool {
        matches!(self, FollowUp::Retry | FollowUp::FaultRerun)
    }
}

pub fn follow_up(attempts: &[Attempt], retries: u32) -> FollowUp {
    let Some(last) = attempts.last() else {
        return FollowUp::Final;
    };
    match last.outcome {
        AttemptOutcome::DeviceFault => {
            let faults = attempts
                .iter()
                .filter(|a| a.outcome == AttemptOutcome::DeviceFault)
                .count();
            if faults == 1 {
                FollowUp::FaultRerun
            } else {
                FollowUp::Final
            }
        }
        AttemptOutcome::CutShort => FollowUp::InLane,
        o if o.scene_failed() => {
            let failed = attempts.iter().filter(|a| a.outcome.scene_failed()).count();
            if failed as u32 <= retries {
                FollowUp::Retry
            } else {
                FollowUp::Final
            }
        }
        _ => FollowUp::Final,
    }
}

/// Time covered by at least one of the intervals `(start, duration)`.
pub fn union_secs(mut spans: Vec<(f64, f64)>) -> f64 {
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for (s, d) in spans {
        let e = s + d.max(0.0);
        cur = match cur {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

/// Collects every event of one inner run.
#[derive(Debug, Default)]
pub struct Accumulator {
    pub attempts: Vec<Vec<Attempt>>,
    pub lanes: Vec<LaneRecord>,
    pub quarantined: BTreeSet<usize>,
    /// Scenes started and not ended yet: what a run killed now cut short.
    pub running: BTreeSet<usize>,
}

impl Accumulator {
    pub fn new(scenes: usize) -> Accumulator {
        Accumulator {
            attempts: vec![Vec::new(); scenes],
            ..Default::default()
        }
    }

    pub fn apply(&mut self, e: &Event) {
        match e {
            Event::Started { scene } => {
                self.running.insert(*scene);
            }
            Event::Attempt { scene, attempt } => {
                self.running.remove(scene);
                self.attempts[*scene].push(attempt.clone());
            }
            Event::Lane(r) => self.lanes.push(r.clone()),
            Event::Fault { slots } => self.quarantined.extend(slots.iter().copied()),
            Event::Warning(_) => {}
            Event::Done { .. } => {}
        }
    }

    /// Scene time only: the union of attempt spans, the device-seconds they used, and
    /// the lane start-ups beside them.
    pub fn timings(&self) -> (f64, f64, f64) {
        let spans: Vec<(f64, f64)> = self
            .attempts
            .iter()
            .flatten()
            .filter(|a| a.outcome != AttemptOutcome::NotRun)
            .map(|a| (a.start_secs, a.duration_secs))
            .collect();
        let used = self
            .attempts
            .iter()
            .flatten()
            .map(|a| a.devices.len() as f64 * a.duration_secs)
            .fold(0.0, |s, x| s + x);
        // `fold` from 0.0, not `sum`: an empty float sum is -0.0, printed "-0.00s".
        let startup = self
            .lanes
            .iter()
            .filter_map(|l| l.startup_secs)
            .fold(0.0, |s, x| s + x);
        (union_secs(spans), used, startup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(outcome: AttemptOutcome) -> Attempt {
        crate::device::testing::attempt(outcome, &["0"])
    }
    use crate::base::verdict::Outcome::*;
    use AttemptOutcome::*;

    #[test]
    fn a_failure_is_retried_while_retries_last() {
        assert_eq!(follow_up(&[a(Test(Failed))], 0), FollowUp::Final);
        assert_eq!(follow_up(&[a(Test(Failed))], 1), FollowUp::Retry);
        assert_eq!(
            follow_up(&[a(Test(Failed)), a(TimedOut)], 1),
            FollowUp::Final
        );
        assert_eq!(
            follow_up(&[a(Test(Failed)), a(Test(Passed))], 1),
            FollowUp::Final
        );
    }

    #[test]
    fn device_fault_reruns_once_and_a_pass_there_is_not_flaky() {
        assert_eq!(follow_up(&[a(DeviceFault)], 0), FollowUp::FaultRerun);
        assert_eq!(
            follow_up(&[a(DeviceFault), a(DeviceFault)], 5),
            FollowUp::Final
        );
        // The fault rerun does not use up retries.
        assert_eq!(
            follow_up(&[a(DeviceFault), a(Test(Failed))], 1),
            FollowUp::Retry
        );
        // A cut-short scene reruns in its lane, whatever the retries; its rerun's end
        // is what counts.
        assert_eq!(follow_up(&[a(CutShort)], 0), FollowUp::InLane);
        assert_eq!(follow_up(&[a(CutShort)], 2), FollowUp::InLane);
        assert_eq!(
            follow_up(&[a(CutShort), a(Test(Passed))], 0),
            FollowUp::Final
        );
    }

    #[test]
    fn busy_time_is_the_union_of_spans() {
        assert_eq!(union_secs(vec![(0.0, 1.0), (0.5, 1.0), (3.0, 1.0)]), 2.5);
        assert_eq!(union_secs(vec![]), 0.0);
    }
}
