//! Why a warm step failed, typed from where it happens to the device's report: the
//! executor's cause, the warm record (`warm.json`), the plan's status, the frozen scene.
//! Worded here and nowhere else; the text is made only where it is shown or written for
//! people (reporters, reports, `explain`, the record's `error`).
//!
//! Everything here goes through JSON (the warm record, the frozen plan), so paths are
//! kept as they are shown (lossily UTF-8: serde_json refuses a path that is not) and a
//! duration as serde's exact `{secs, nanos}`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::base::stepid::Kind;
use crate::base::units::{short_duration, short_size};

/// Why a warm step failed (the step's own fault, never the cache's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub enum FailCause {
    /// `sh -c` could not be started.
    CouldNotStart {
        error: String,
    },
    Exited {
        status: i32,
    },
    Signaled {
        signal: i32,
    },
    TimedOut {
        limit: Duration,
    },
    Interrupted,
    /// Exited 0 but `{out}` was empty (`missing`: not there at all).
    EmptyOut {
        missing: bool,
        out: String,
    },
    /// `{out}` holds something the cache cannot keep (a symlink, a fifo).
    Uncacheable {
        error: String,
    },
    /// The toolchain's depfile option was given but no depfile was written.
    NoDepfile {
        depfile: String,
    },
    /// A fixture or golden command with `{depfile}` exited 0 without writing it.
    DepfileNotWritten {
        depfile: String,
    },
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
    InputChangedAgain {
        input: String,
    },
    /// The worker running the step was lost (docs/warm.md, "Workers"); it is replaced.
    WorkerLost {
        worker: String,
        loss: WorkerLoss,
    },
}

impl fmt::Display for FailCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailCause::CouldNotStart { error } => write!(f, "could not start `sh -c`: {error}"),
            FailCause::Exited { status } => write!(f, "exited with status {status}"),
            FailCause::Signaled { signal } => write!(f, "killed by signal {signal}"),
            FailCause::TimedOut { limit } => write!(
                f,
                "timed out after {} (its timeout; process group killed)",
                short_duration(*limit)
            ),
            FailCause::Interrupted => write!(f, "interrupted"),
            FailCause::EmptyOut { missing, out } => write!(
                f,
                "exited 0 but left {{out}} {} ({out})",
                if *missing { "missing" } else { "empty" },
            ),
            FailCause::Uncacheable { error } => {
                write!(f, "left {{out}} that cannot be cached: {error}")
            }
            FailCause::NoDepfile { depfile } => write!(
                f,
                "the toolchain's depfile option was given but no depfile was written at {depfile}"
            ),
            FailCause::DepfileNotWritten { depfile } => write!(
                f,
                "depfile not written: the command has {{depfile}} but exited 0 without writing {depfile}"
            ),
            FailCause::BadDepfileEntry { path, error } => {
                write!(f, "depfile names {path}, which cannot be read: {error}")
            }
            FailCause::Rekey { input, error } => write!(
                f,
                "input changed during the step ({input}), and its key cannot be recomputed: {error}"
            ),
            FailCause::InputChangedAgain { input } => write!(
                f,
                "input changed during the step ({input} changed again on the rerun); nothing was published"
            ),
            FailCause::WorkerLost { worker, loss } => {
                write!(f, "worker {worker} replaced: {loss}")
            }
        }
    }
}

/// Why a worker was lost while it ran a step (or stopped after one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "loss", rename_all = "snake_case")]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub enum WorkerLoss {
    /// It ended by itself (how, as `proc::Ended` describes it).
    Died { how: String },
    /// The step passed its timeout: the worker's whole process group was killed.
    TimedOut { limit: Duration },
    /// A process past the worker's `memory_cap`: the step's (`step`) or the worker's.
    MemoryCap { cap: u64, rss: u64, step: bool },
    /// It printed something that is not an answer to the request.
    Protocol { said: String },
}

impl fmt::Display for WorkerLoss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerLoss::Died { how } => {
                write!(f, "the worker died while running the step ({how})")
            }
            WorkerLoss::TimedOut { limit } => write!(
                f,
                "the step timed out after {} (its timeout; the worker's process group killed)",
                short_duration(*limit)
            ),
            WorkerLoss::MemoryCap { cap, rss, step } => write!(
                f,
                "{} exceeded memory cap {} (resident {})",
                if *step { "step" } else { "the worker" },
                short_size(*cap),
                short_size(*rss)
            ),
            WorkerLoss::Protocol { said } => {
                write!(f, "the worker broke the protocol: it said `{said}`")
            }
        }
    }
}

/// Why a unit did not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
#[cfg_attr(test, derive(schemars::JsonSchema))]
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

/// Why a warm step left no artifact: what the warm record keeps of a failed or skipped
/// step (its `failure`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// Its command failed, or what it left cannot be published.
    Failed(FailCause),
    /// Not run: a step it needs failed.
    Skipped(SkipCause),
    /// The cache failed under it (the warm stopped, exit 3): the error's chain as one
    /// line (it comes as an `anyhow::Error`, whose sources are not kept apart).
    Infra(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Failed(cause) => write!(f, "{cause}"),
            Failure::Skipped(cause) => write!(f, "{cause}"),
            Failure::Infra(error) => write!(f, "{error}"),
        }
    }
}

/// A scene's failed step as the warm summary names it: `compile k: exited with status 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedStep {
    pub scene: String,
    pub kind: Kind,
    pub name: String,
    pub failure: Failure,
}

impl fmt::Display for FailedStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.kind.label(), self.name, self.failure)
    }
}

/// A step that failed in the last warm with its current key, as the plan sees it
/// (`Status::Failed`): why, and the end of its log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepFailure {
    pub failure: Failure,
    pub log_tail: Option<String>,
}

/// Why, then the log's tail (when it holds more than blanks) on the lines below.
impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.failure)?;
        match self.log_tail.as_deref().filter(|t| !t.trim().is_empty()) {
            Some(tail) => write!(f, "\n{}", tail.trim_end()),
            None => Ok(()),
        }
    }
}

/// The failure that settles a scene in warm, as the device phase reports it: the first
/// of its steps that failed (the scene is the frozen scene's own).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WarmFailure {
    pub kind: Kind,
    /// The step's name: the kernel's or the prepare step's, or `fixture`, `golden`, `test`.
    pub name: String,
    pub why: WarmWhy,
}

/// Why a scene's step leaves it failed in warm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WarmWhy {
    /// The step failed (or was not run) in the last warm with this key.
    Step(StepFailure),
    /// The scene's test ran, but the verdict it left cannot be read (`verdict::read`).
    Verdict(String),
}

impl fmt::Display for WarmWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WarmWhy::Step(failed) => write!(f, "{failed}"),
            WarmWhy::Verdict(why) => write!(f, "{why}"),
        }
    }
}

/// `fixture fixture: exited with status 1` and the log's tail; a scene's test (there is
/// one per scene) is `test: …`.
impl fmt::Display for WarmFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Test => write!(f, "test: {}", self.why),
            kind => write!(f, "{} {}: {}", kind.label(), self.name, self.why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of each variant, with the text each renders.
    fn every_cause() -> Vec<(Failure, &'static str)> {
        let loss = |loss: WorkerLoss| {
            Failure::Failed(FailCause::WorkerLost {
                worker: "py".into(),
                loss,
            })
        };
        vec![
            (
                Failure::Failed(FailCause::CouldNotStart {
                    error: "No such file or directory (os error 2)".into(),
                }),
                "could not start `sh -c`: No such file or directory (os error 2)",
            ),
            (
                Failure::Failed(FailCause::Exited { status: 1 }),
                "exited with status 1",
            ),
            (
                Failure::Failed(FailCause::Signaled { signal: 9 }),
                "killed by signal 9",
            ),
            (
                Failure::Failed(FailCause::TimedOut {
                    limit: Duration::new(4, 250_000_001),
                }),
                "timed out after 4.3s (its timeout; process group killed)",
            ),
            (Failure::Failed(FailCause::Interrupted), "interrupted"),
            (
                Failure::Failed(FailCause::EmptyOut {
                    missing: true,
                    out: "/c/staging/x/out".into(),
                }),
                "exited 0 but left {out} missing (/c/staging/x/out)",
            ),
            (
                Failure::Failed(FailCause::EmptyOut {
                    missing: false,
                    out: "/c/staging/x/out".into(),
                }),
                "exited 0 but left {out} empty (/c/staging/x/out)",
            ),
            (
                Failure::Failed(FailCause::Uncacheable {
                    error: "out/l: not a regular file".into(),
                }),
                "left {out} that cannot be cached: out/l: not a regular file",
            ),
            (
                Failure::Failed(FailCause::NoDepfile {
                    depfile: "/s/deps.d".into(),
                }),
                "the toolchain's depfile option was given but no depfile was written at /s/deps.d",
            ),
            (
                Failure::Failed(FailCause::DepfileNotWritten {
                    depfile: "/s/deps.d".into(),
                }),
                "depfile not written: the command has {depfile} but exited 0 without writing /s/deps.d",
            ),
            (
                Failure::Failed(FailCause::BadDepfileEntry {
                    path: "gone.h".into(),
                    error: "not found".into(),
                }),
                "depfile names gone.h, which cannot be read: not found",
            ),
            (
                Failure::Failed(FailCause::Rekey {
                    input: "data.txt".into(),
                    error: "gone".into(),
                }),
                "input changed during the step (data.txt), and its key cannot be recomputed: gone",
            ),
            (
                Failure::Failed(FailCause::InputChangedAgain {
                    input: "data.txt".into(),
                }),
                "input changed during the step (data.txt changed again on the rerun); nothing was published",
            ),
            (
                loss(WorkerLoss::Died {
                    how: "killed by signal 9".into(),
                }),
                "worker py replaced: the worker died while running the step (killed by signal 9)",
            ),
            (
                loss(WorkerLoss::TimedOut {
                    limit: Duration::from_millis(1500),
                }),
                "worker py replaced: the step timed out after 1.5s (its timeout; the worker's process group killed)",
            ),
            (
                loss(WorkerLoss::MemoryCap {
                    cap: 1 << 30,
                    rss: 3 << 29,
                    step: true,
                }),
                "worker py replaced: step exceeded memory cap 1.0 GiB (resident 1.5 GiB)",
            ),
            (
                loss(WorkerLoss::MemoryCap {
                    cap: 1 << 30,
                    rss: 3 << 29,
                    step: false,
                }),
                "worker py replaced: the worker exceeded memory cap 1.0 GiB (resident 1.5 GiB)",
            ),
            (
                loss(WorkerLoss::Protocol {
                    said: "hello".into(),
                }),
                "worker py replaced: the worker broke the protocol: it said `hello`",
            ),
            (
                Failure::Skipped(SkipCause::DependencyFailed),
                "not run: the fixture it needs failed",
            ),
            (
                Failure::Infra("cannot publish: No space left on device".into()),
                "cannot publish: No space left on device",
            ),
        ]
    }

    #[test]
    fn every_cause_round_trips_through_json_and_reads_the_same() {
        for (failure, text) in every_cause() {
            assert_eq!(failure.to_string(), text);
            let json = serde_json::to_string(&failure).unwrap();
            let back: Failure = serde_json::from_str(&json).unwrap();
            assert_eq!(back, failure, "{json}");
            assert_eq!(back.to_string(), text, "{json}");
        }
    }

    /// Through the file itself: each failure recorded in `warm.json`, loaded back as the
    /// plan loads it, is the same variant and reads the same; the file's `error` is that
    /// text.
    #[test]
    fn every_cause_round_trips_through_the_warm_record() {
        use crate::base::record::{Outcome, Recorded, StepRecord, WarmRecord};
        use crate::base::stepid::StepId;
        let t = tempfile::tempdir().unwrap();
        let job = t.path();
        let causes = every_cause();
        let records = causes
            .iter()
            .enumerate()
            .map(|(i, (failure, _))| {
                Recorded::New(StepRecord {
                    kind: Kind::Fixture,
                    scene: format!("s{i}"),
                    name: "fixture".into(),
                    key: "k".into(),
                    outcome: match failure {
                        Failure::Skipped(_) => Outcome::Skipped,
                        _ => Outcome::Failed,
                    },
                    duration_secs: 1.5,
                    log: None,
                    failure: Some(failure.clone()),
                    log_tail: Some("last line\n".into()),
                })
            })
            .collect();
        WarmRecord::merge_and_save(job, &WarmRecord::default(), records).unwrap();
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(WarmRecord::path(job)).unwrap()).unwrap();
        let loaded = WarmRecord::load(job);
        let failures = loaded.failures();
        for (i, (failure, text)) in causes.into_iter().enumerate() {
            assert_eq!(file["steps"][i]["error"], text);
            let id = StepId::new(Kind::Fixture, &format!("s{i}"), "fixture");
            let got = failures.get(&id, "k").expect("recorded");
            assert_eq!(got.failure, failure);
            assert_eq!(got.to_string(), format!("{text}\nlast line"));
            assert!(failures.get(&id, "other key").is_none());
        }
    }

    /// A record an older scenerun wrote (version 1, the failure as text only) reads as
    /// empty: its failures are not taken for this version's.
    #[test]
    fn an_older_warm_record_reads_as_empty() {
        use crate::base::record::WarmRecord;
        let t = tempfile::tempdir().unwrap();
        let path = WarmRecord::path(t.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let v1 = r#"{"version": 1, "steps": [{"kind": "fixture", "scene": "a",
            "name": "fixture", "key": "k", "outcome": "failed", "duration_secs": 1.0,
            "log": null, "error": "exited with status 1", "log_tail": "boom"}]}"#;
        std::fs::write(&path, v1).unwrap();
        assert!(WarmRecord::load(t.path()).steps.is_empty());
        assert!(WarmRecord::read(&path).unwrap().steps.is_empty());
    }

    #[test]
    fn causes_are_tagged_by_name_in_snake_case() {
        let v = serde_json::to_value(Failure::Failed(FailCause::WorkerLost {
            worker: "py".into(),
            loss: WorkerLoss::TimedOut {
                limit: Duration::new(2, 5),
            },
        }))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"failed": {"cause": "worker_lost", "worker": "py",
                "loss": {"loss": "timed_out", "limit": {"secs": 2, "nanos": 5}}}})
        );
        let v = serde_json::to_value(Failure::Skipped(SkipCause::DependencyFailed)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"skipped": {"cause": "dependency_failed"}})
        );
    }

    #[test]
    fn a_step_failure_shows_its_log_tail_below_unless_it_is_blank() {
        let failed = |tail: Option<&str>| StepFailure {
            failure: Failure::Failed(FailCause::Exited { status: 2 }),
            log_tail: tail.map(String::from),
        };
        assert_eq!(failed(None).to_string(), "exited with status 2");
        assert_eq!(failed(Some(" \n")).to_string(), "exited with status 2");
        assert_eq!(
            failed(Some("cc: error\nld: error\n\n")).to_string(),
            "exited with status 2\ncc: error\nld: error"
        );
        let scene = |kind: Kind, name: &str, why: WarmWhy| WarmFailure {
            kind,
            name: name.into(),
            why,
        };
        let w = scene(Kind::Kernel, "k", WarmWhy::Step(failed(Some("oops\n"))));
        assert_eq!(w.to_string(), "compile k: exited with status 2\noops");
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(serde_json::from_str::<WarmFailure>(&json).unwrap(), w);
        let t = scene(Kind::Test, "test", WarmWhy::Verdict("unreadable".into()));
        assert_eq!(t.to_string(), "test: unreadable");
        let t = scene(Kind::Test, "test", WarmWhy::Step(failed(None)));
        assert_eq!(t.to_string(), "test: exited with status 2");
        let summary = FailedStep {
            scene: "s".into(),
            kind: Kind::Test,
            name: "test".into(),
            failure: Failure::Failed(FailCause::Exited { status: 2 }),
        };
        assert_eq!(summary.to_string(), "test test: exited with status 2");
    }
}
