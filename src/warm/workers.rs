//! Warm workers (docs/warm.md, "Workers"): persistent processes that run fixture,
//! golden and prepare steps one request at a time, so a suite's interpreter, imports,
//! conftests and collection are paid once per worker instead of once per step.
//!
//! Invariants kept here:
//! - At most one worker process per slot for each (worker, platform, environment),
//!   started when the slot gets its first step for it (a warm with nothing to build
//!   starts none), and stopped when the slot ends with the warm.
//! - Per step nothing changes: the step keeps its key, command, log, depfile, timeout
//!   and publish rule; the worker is handed the step's rendered command, directory,
//!   environment and log, and answers with how it ended.
//! - A worker that dies, hangs past the step's timeout (its whole process group is
//!   killed, the step's fork included) or grows past its `memory_cap` is gone: that
//!   step fails saying so, and the slot's next step starts a fresh worker. A worker
//!   that cannot start, or a command it does not serve, falls back to a process.
//!
//! The protocol is one JSON line each way over the worker's stdin and stdout
//! (docs/warm.md): `Request` and `Reply` below.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::events::WorkerNote;
use crate::failure::WorkerLoss;
use crate::manifest::WorkerConfig;
use crate::plan::{Plan, Step};
use crate::proc::piped::{self, Piped, Received};
use crate::proc::server::NotReady;
use crate::proc::{self, Ended};

/// How often a running step's memory is looked at when its worker has a cap.
const MEMORY_POLL: Duration = Duration::from_millis(50);

/// How long a worker has to exit once told to (its stdin closed) at the end of a warm.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// One step, as the worker is asked to run it.
#[derive(Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Request<'a> {
    id: u64,
    /// The step's command as it would run under `sh -c`, placeholders filled.
    command: &'a str,
    cwd: &'a Path,
    /// Set on top of the worker's own environment for this step only.
    env: &'a BTreeMap<String, String>,
    /// The step's log: its output goes there.
    log: &'a Path,
    timeout_secs: Option<f64>,
}

/// A line a worker prints on its protocol channel.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) enum Reply {
    /// It does not serve this command: scenerun runs it as a process.
    Unsupported { id: u64, unsupported: String },
    /// It ran the step: its exit status, or the signal that killed it.
    Done {
        id: u64,
        status: i32,
        #[serde(default)]
        signal: Option<i32>,
    },
}

/// How a step run through `Slot::run` ended.
pub enum StepRun {
    /// How its process (or the worker's fork of it) ended.
    Ended(std::io::Result<Ended>),
    /// Its worker was lost while it ran: the step failed, the worker is replaced.
    Lost { worker: String, loss: WorkerLoss },
}

/// What a slot thread keeps between its steps: its live workers.
pub struct Slot {
    slot: usize,
    job_dir: PathBuf,
    workers: HashMap<PoolKey, Worker>,
    /// Workers that could not start in this warm: their steps run as processes.
    broken: HashSet<PoolKey>,
    /// Worker logs already started in this warm (a replacement appends to its log).
    logs: HashSet<PathBuf>,
    /// What the last step run here has to say about its worker (`take_note`).
    note: Option<WorkerNote>,
}

/// One worker process serves steps of one worker, platform and environment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    name: String,
    platform: String,
    env: BTreeMap<String, String>,
    /// Its command as started (the selection's words filled): one worker per selection
    /// that needs one.
    command: String,
}

struct Worker {
    piped: Piped,
    /// The process that forks the steps.
    pid: i32,
    next_id: u64,
}

/// What came back from one request.
enum Served {
    Done(Ended),
    Unsupported(String),
    /// The conversation ended without an answer; `over` when the memory cap ended it.
    Lost(Option<WorkerLoss>),
}

impl Slot {
    pub fn new(slot: usize, job_dir: &Path) -> Slot {
        Slot {
            slot,
            job_dir: job_dir.to_path_buf(),
            workers: HashMap::new(),
            broken: HashSet::new(),
            logs: HashSet::new(),
            note: None,
        }
    }

    /// What the steps run since the last call had to say about their worker (the
    /// first note, when a rerun had one too).
    pub fn take_note(&mut self) -> Option<WorkerNote> {
        self.note.take()
    }

    /// Run `step` as `spec` says: in its worker when it has one, else (or when the worker
    /// cannot start or does not serve the command) as a process. A note about the
    /// worker is kept for `take_note`.
    pub fn run(&mut self, plan: &Plan, step: &Step, spec: &proc::Spec) -> StepRun {
        let (run, note) = self.run_noted(plan, step, spec);
        if self.note.is_none() {
            self.note = note;
        }
        run
    }

    /// `run`, with what is worth saying about the worker beside the end.
    fn run_noted(
        &mut self,
        plan: &Plan,
        step: &Step,
        spec: &proc::Spec,
    ) -> (StepRun, Option<WorkerNote>) {
        let Some(cfg) = plan.worker_of(step) else {
            return (StepRun::Ended(proc::run(spec)), None);
        };
        let (platform, env) = plan.step_context(step);
        let key = PoolKey {
            name: cfg.name.clone(),
            platform: platform.to_string(),
            env: env.clone(),
            command: plan.worker_command(cfg, step),
        };
        if self.broken.contains(&key) {
            return (StepRun::Ended(proc::run(spec)), None);
        }
        // One that ended between two steps is no step's loss: a fresh one takes over.
        if let Some(gone) = self.workers.remove(&key) {
            if gone.piped.exited() || gone.piped.stopping() {
                let _ = gone.piped.wait();
            } else {
                self.workers.insert(key.clone(), gone);
            }
        }
        if !self.workers.contains_key(&key) {
            match self.start(plan, cfg, &key) {
                Ok(w) => {
                    self.workers.insert(key.clone(), w);
                }
                Err(why) => {
                    self.broken.insert(key);
                    let note = WorkerNote::CouldNotStart {
                        worker: cfg.name.clone(),
                        why,
                    };
                    return (StepRun::Ended(proc::run(spec)), Some(note));
                }
            }
        }
        let worker = self.workers.get_mut(&key).expect("started above");
        append(
            spec.log,
            &format!("# run by worker {} (pid {})\n", cfg.name, worker.pid),
        );
        match serve(worker, spec, cfg.memory_cap) {
            Served::Done(ended) => {
                let note = self.retire_if_over(&key, cfg);
                (StepRun::Ended(Ok(ended)), note)
            }
            Served::Unsupported(why) => {
                append(
                    spec.log,
                    &format!(
                        "# worker {} does not serve it ({why}): run as a process\n",
                        cfg.name
                    ),
                );
                (StepRun::Ended(proc::run(spec)), None)
            }
            Served::Lost(over) => {
                let worker = self.workers.remove(&key).expect("served above");
                let ended = worker.piped.wait();
                (lost(cfg, spec, over, ended), None)
            }
        }
    }

    /// Start a worker for `key` and wait for its ready line (at most its
    /// `start_timeout`). Err: why it could not start.
    fn start(&mut self, plan: &Plan, cfg: &WorkerConfig, key: &PoolKey) -> Result<Worker, String> {
        let command = key.command.clone();
        let log = self
            .job_dir
            .join("logs/workers")
            .join(format!("{}.{}.log", cfg.name, self.slot));
        let header = format!("$ {command}\n");
        let logged = if self.logs.insert(log.clone()) {
            crate::fsutil::start_log(&self.job_dir, &log, &header)
        } else {
            crate::fsutil::append_log(&log).and_then(|mut f| f.write_all(header.as_bytes()))
        };
        logged.map_err(|e| format!("cannot start its log {}: {e}", log.display()))?;
        let mut env = key.env.clone();
        env.insert("SCENERUN_WORKER".into(), cfg.name.clone());
        let piped = match piped::spawn(&command, &plan.manifest.dir, &env, &log) {
            Ok(Some(p)) => p,
            Ok(None) => return Err("interrupted".into()),
            Err(e) => return Err(format!("could not start `sh -c`: {e}")),
        };
        let ready = crate::proc::server::await_ready(&piped, cfg.start_timeout);
        match ready {
            Ok(pid) if !piped.stopping() => Ok(Worker {
                piped,
                pid,
                next_id: 0,
            }),
            Ok(_) | Err(_) => {
                piped.kill();
                let ended = piped.wait();
                let how = match (ready, ended) {
                    (Err(NotReady::Said(s)), _) => format!("said `{s}` before it was ready"),
                    (Err(NotReady::TimedOut), _) => format!(
                        "not ready within its start_timeout ({})",
                        crate::units::short_duration(cfg.start_timeout)
                    ),
                    (_, Ok(e)) => e.describe(),
                    (_, Err(e)) => e.to_string(),
                };
                Err(format!("{how}; see {}", log.display()))
            }
        }
    }

    /// After a step it ran: a worker grown past its memory cap is stopped (the next
    /// step starts a fresh one).
    fn retire_if_over(&mut self, key: &PoolKey, cfg: &WorkerConfig) -> Option<WorkerNote> {
        let cap = cfg.memory_cap?;
        let w = self.workers.get(key)?;
        let rss = piped::resident(w.pid).filter(|&r| r > cap);
        if rss.is_none() && !w.piped.stopping() {
            return None;
        }
        let w = self.workers.remove(key)?;
        let _ = w.piped.close(CLOSE_WAIT);
        rss.map(|rss| WorkerNote::Replaced {
            worker: cfg.name.clone(),
            why: WorkerLoss::MemoryCap {
                cap,
                rss,
                step: false,
            },
        })
    }
}

impl Drop for Slot {
    /// The warm is over for this slot: every worker is told to exit (its stdin closed),
    /// and stopped like a step if it does not.
    fn drop(&mut self) {
        for (_, w) in self.workers.drain() {
            let _ = w.piped.close(CLOSE_WAIT);
        }
    }
}

/// Ask `w` to run the step `spec` describes, and wait for its answer, keeping the step's
/// timeout (on the worker's whole group) and the worker's memory cap.
fn serve(w: &mut Worker, spec: &proc::Spec, cap: Option<u64>) -> Served {
    w.next_id += 1;
    let id = w.next_id;
    let request = Request {
        id,
        command: spec.command,
        cwd: spec.dir,
        env: spec.env,
        log: spec.log,
        timeout_secs: spec.timeout.map(|t| t.as_secs_f64()),
    };
    let line = serde_json::to_string(&request).expect("a request is JSON");
    w.piped.set_deadline(spec.timeout);
    if w.piped.send(&line).is_err() {
        w.piped.kill();
        return Served::Lost(None);
    }
    let wait = if cap.is_some() {
        MEMORY_POLL
    } else {
        Duration::from_secs(1)
    };
    let served = loop {
        match w.piped.recv(wait) {
            Received::Line(l) => match serde_json::from_str::<Reply>(&l) {
                Ok(Reply::Done {
                    id: got,
                    status,
                    signal,
                }) if got == id => {
                    break Served::Done(match signal {
                        Some(s) => Ended::Signaled(s),
                        None => Ended::Exited(status),
                    });
                }
                Ok(Reply::Unsupported {
                    id: got,
                    unsupported,
                }) if got == id => {
                    break Served::Unsupported(unsupported);
                }
                _ => {
                    w.piped.kill();
                    let said = crate::error::clip(&l, 120).to_string();
                    break Served::Lost(Some(WorkerLoss::Protocol { said }));
                }
            },
            Received::Nothing => {
                if let Some(over) = cap.and_then(|cap| over_cap(w.pid, cap)) {
                    w.piped.kill();
                    break Served::Lost(Some(over));
                }
            }
            Received::Closed => break Served::Lost(None),
        }
    };
    w.piped.set_deadline(None);
    served
}

/// The step past `cap`: the resident memory of its whole process tree (every descendant
/// of the worker `pid`: the step's fork, what it started, what it left running), summed;
/// or the worker itself past it.
fn over_cap(pid: i32, cap: u64) -> Option<WorkerLoss> {
    let tree: u64 = piped::descendants(pid)
        .into_iter()
        .filter_map(piped::resident)
        .sum();
    if tree > cap {
        return Some(WorkerLoss::MemoryCap {
            cap,
            rss: tree,
            step: true,
        });
    }
    let rss = piped::resident(pid).filter(|&r| r > cap)?;
    Some(WorkerLoss::MemoryCap {
        cap,
        rss,
        step: false,
    })
}

/// How a step ended whose worker was lost while it ran: an interrupt is the step's
/// interrupt; anything else fails the step with the worker's loss.
fn lost(
    cfg: &WorkerConfig,
    spec: &proc::Spec,
    over: Option<WorkerLoss>,
    ended: std::io::Result<Ended>,
) -> StepRun {
    let loss = match (over, ended) {
        (_, Ok(Ended::Interrupted)) => return StepRun::Ended(Ok(Ended::Interrupted)),
        (Some(loss), _) => loss,
        (None, Ok(Ended::TimedOut)) => WorkerLoss::TimedOut {
            limit: spec.timeout.unwrap_or_default(),
        },
        (None, Ok(e)) => WorkerLoss::Died { how: e.describe() },
        (None, Err(e)) => WorkerLoss::Died { how: e.to_string() },
    };
    append(
        spec.log,
        &format!("# worker {} replaced: {loss}\n", cfg.name),
    );
    StepRun::Lost {
        worker: cfg.name.clone(),
        loss,
    }
}

/// Add a line of scenerun's own to a step's log.
fn append(log: &Path, text: &str) {
    if let Ok(mut f) = crate::fsutil::append_log(log) {
        let _ = f.write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proc::server::tests::{def, required};

    #[test]
    fn a_step_request_and_its_answers_are_what_the_protocol_describes() {
        let env = BTreeMap::from([("A".to_string(), "1".to_string())]);
        let request = Request {
            id: 3,
            command: "python -m scenerun_pytest fixture t.py::C --case a --out o",
            cwd: Path::new("/d"),
            env: &env,
            log: Path::new("/d/l.log"),
            timeout_secs: Some(1.5),
        };
        let v = serde_json::to_value(&request).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        let described = def("step")["properties"].as_object().unwrap().clone();
        assert!(keys.iter().all(|k| described.contains_key(*k)), "{keys:?}");
        assert!(required("step").iter().all(|k| v.get(k).is_some()));
        assert!(required("ran")
            .iter()
            .all(|k| ["id", "status"].contains(&k.as_str())));
        assert!(matches!(
            serde_json::from_str::<Reply>(
                r#"{"id": 3, "status": 0, "signal": 9, "depfile_written": true, "note": null}"#
            ),
            Ok(Reply::Done {
                id: 3,
                status: 0,
                signal: Some(9)
            })
        ));
        assert!(matches!(
            serde_json::from_str::<Reply>(r#"{"id": 3, "unsupported": "why"}"#),
            Ok(Reply::Unsupported { id: 3, .. })
        ));
    }
}
