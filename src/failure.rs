//! Why a warm step failed or was not run, typed where it happens (the warm executor).
//! Worded here and nowhere else.
//!
//! Everything here goes through JSON (the warm record, the frozen plan), so paths are
//! kept as they are shown (lossily UTF-8: serde_json refuses a path that is not) and a
//! duration as serde's exact `{secs, nanos}`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::units::{short_duration, short_size};

/// Why a warm step failed (the step's own fault, never the cache's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// One of each variant, with the text each renders.
    fn every_cause() -> Vec<(FailCause, &'static str)> {
        let loss = |loss: WorkerLoss| FailCause::WorkerLost {
            worker: "py".into(),
            loss,
        };
        vec![
            (
                FailCause::CouldNotStart {
                    error: "No such file or directory (os error 2)".into(),
                },
                "could not start `sh -c`: No such file or directory (os error 2)",
            ),
            (
                FailCause::Exited { status: 1 },
                "exited with status 1",
            ),
            (
                FailCause::Signaled { signal: 9 },
                "killed by signal 9",
            ),
            (
                FailCause::TimedOut {
                    limit: Duration::new(4, 250_000_001),
                },
                "timed out after 4.3s (its timeout; process group killed)",
            ),
            (FailCause::Interrupted, "interrupted"),
            (
                FailCause::EmptyOut {
                    missing: true,
                    out: "/c/staging/x/out".into(),
                },
                "exited 0 but left {out} missing (/c/staging/x/out)",
            ),
            (
                FailCause::EmptyOut {
                    missing: false,
                    out: "/c/staging/x/out".into(),
                },
                "exited 0 but left {out} empty (/c/staging/x/out)",
            ),
            (
                FailCause::Uncacheable {
                    error: "out/l: not a regular file".into(),
                },
                "left {out} that cannot be cached: out/l: not a regular file",
            ),
            (
                FailCause::NoDepfile {
                    depfile: "/s/deps.d".into(),
                },
                "the toolchain's depfile option was given but no depfile was written at /s/deps.d",
            ),
            (
                FailCause::DepfileNotWritten {
                    depfile: "/s/deps.d".into(),
                },
                "depfile not written: the command has {depfile} but exited 0 without writing /s/deps.d",
            ),
            (
                FailCause::BadDepfileEntry {
                    path: "gone.h".into(),
                    error: "not found".into(),
                },
                "depfile names gone.h, which cannot be read: not found",
            ),
            (
                FailCause::Rekey {
                    input: "data.txt".into(),
                    error: "gone".into(),
                },
                "input changed during the step (data.txt), and its key cannot be recomputed: gone",
            ),
            (
                FailCause::InputChangedAgain {
                    input: "data.txt".into(),
                },
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
        ]
    }

    #[test]
    fn every_cause_round_trips_through_json_and_reads_the_same() {
        for (failure, text) in every_cause() {
            assert_eq!(failure.to_string(), text);
            let json = serde_json::to_string(&failure).unwrap();
            let back: FailCause = serde_json::from_str(&json).unwrap();
            assert_eq!(back, failure, "{json}");
            assert_eq!(back.to_string(), text, "{json}");
        }
    }

    #[test]
    fn causes_are_tagged_by_name_in_snake_case() {
        let v = serde_json::to_value(FailCause::WorkerLost {
            worker: "py".into(),
            loss: WorkerLoss::TimedOut {
                limit: Duration::new(2, 5),
            },
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"cause": "worker_lost", "worker": "py",
                "loss": {"loss": "timed_out", "limit": {"secs": 2, "nanos": 5}}})
        );
        let skip = SkipCause::DependencyFailed;
        let v = serde_json::to_value(skip).unwrap();
        assert_eq!(v, serde_json::json!({"cause": "dependency_failed"}));
        assert_eq!(serde_json::from_value::<SkipCause>(v).unwrap(), skip);
        assert_eq!(skip.to_string(), "not run: the fixture it needs failed");
    }
}
