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
//! The transport is the one server's (`proc::server`, docs/warm.md "The protocol"): a
//! ready line on the worker's stdout, then per step one `Request` on the worker's private
//! UNIX socket with the step's stdin, stdout and stderr as descriptors, answered
//! `Started` or `Refused`, then `Ended` — the same request, socket and fork routine as
//! a lane's. Its stdin is only the sign to end (closed at the end of the warm).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::events::WorkerNote;
use crate::base::failure::WorkerLoss;
use crate::base::proc::piped::{self, Piped};
use crate::base::proc::server::{NotReady, SocketDir};
use crate::base::proc::server_protocol::{self as protocol, Answer, Request};
use crate::base::proc::{self, Ended};
use crate::manifest::WorkerConfig;
use crate::plan::{Plan, Step};

/// How often a running step's memory is looked at when its worker has a cap.
const MEMORY_POLL: Duration = Duration::from_millis(50);

/// How long a worker has to exit once told to (its stdin closed) at the end of a warm.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// How long a worker has to answer a request (`Started` or `Refused`); past it the
/// worker is stopped and the step runs as a process (nothing of it ran: a child runs
/// only once scenerun confirmed).
const ANSWER_WAIT: Duration = Duration::from_secs(5);

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
    /// Workers that could not start in this warm, or stopped answering: their steps run
    /// as processes.
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
    /// Where it takes requests, in a private directory removed with it.
    socket: PathBuf,
    _dir: SocketDir,
}

/// What came back from one request.
enum Served {
    Done(Ended),
    /// It refused the request (the step runs as a process): why.
    Refused(String),
    /// It did not answer within `ANSWER_WAIT` (it was stopped; the step runs as a
    /// process): what happened.
    NoAnswer(String),
    /// The conversation ended without an answer; `over` when the memory cap ended it.
    Lost(Option<WorkerLoss>),
    /// The step's own files could not be opened (its log): the step's error.
    Failed(std::io::Error),
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
        let (module, args) = match served_form(spec.command) {
            Ok(m) => m,
            Err(why) => return (as_process(cfg, spec, &why), None),
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
        let mut env = proc::child_env(spec.env);
        // As `sh -c` sets it for the step's process: the directory it runs in.
        let cwd = std::fs::canonicalize(spec.dir).unwrap_or_else(|_| spec.dir.to_path_buf());
        env.insert("PWD".into(), cwd.display().to_string());
        let request = Request {
            module,
            args,
            cwd: spec.dir.display().to_string(),
            env,
            pgid: None,
            interpreter: None,
            process: None,
        };
        match serve(worker, spec, &request, cfg.memory_cap) {
            Served::Done(ended) => {
                let note = self.retire_if_over(&key, cfg);
                (StepRun::Ended(Ok(ended)), note)
            }
            Served::Refused(why) => (as_process(cfg, spec, &why), None),
            Served::Failed(e) => (StepRun::Ended(Err(e)), None),
            Served::NoAnswer(why) => {
                let worker = self.workers.remove(&key).expect("served above");
                worker.piped.kill();
                let _ = worker.piped.wait();
                self.broken.insert(key);
                let note = WorkerNote::Stopped {
                    worker: cfg.name.clone(),
                    why: why.clone(),
                };
                (as_process(cfg, spec, &why), Some(note))
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
            crate::base::fsutil::start_log(&self.job_dir, &log, &header)
        } else {
            crate::base::fsutil::append_log(&log).and_then(|mut f| f.write_all(header.as_bytes()))
        };
        logged.map_err(|e| format!("cannot start its log {}: {e}", log.display()))?;
        // A socket of its own: the warm's job dir, this slot and this process name it.
        let socket = crate::base::proc::server::socket(&self.job_dir.join(format!(
            "worker-{}-{}-{}",
            std::process::id(),
            self.slot,
            crate::base::fsutil::unique()
        )));
        let sock_dir = socket.parent().expect("the socket has a directory");
        let dir = crate::base::proc::server::private_dir(sock_dir)
            .map_err(|e| format!("cannot make {}: {e}", sock_dir.display()))?;
        let mut env = key.env.clone();
        env.insert("SCENERUN_WORKER".into(), cfg.name.clone());
        env.insert(protocol::SOCKET_ENV.into(), socket.display().to_string());
        let piped = match piped::spawn(&command, &plan.manifest.dir, &env, &log) {
            Ok(Some(p)) => p,
            Ok(None) => return Err("interrupted".into()),
            Err(e) => return Err(format!("could not start `sh -c`: {e}")),
        };
        let ready = crate::base::proc::server::await_ready(&piped, cfg.start_timeout);
        match ready {
            Ok(pid) if !piped.stopping() => Ok(Worker {
                piped,
                pid,
                socket,
                _dir: dir,
            }),
            Ok(_) | Err(_) => {
                piped.kill();
                let ended = piped.wait();
                let how = match (ready, ended) {
                    (Err(NotReady::Said(s)), _) => format!("said `{s}` before it was ready"),
                    (Err(NotReady::TimedOut), _) => format!(
                        "not ready within its start_timeout ({})",
                        crate::base::units::short_duration(cfg.start_timeout)
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

/// `(module, args)` of a command the worker serves: `[an interpreter] -m scenerun_pytest
/// fixture|golden ...` without shell syntax; Err: why it does not (the step then runs as
/// a process).
fn served_form(command: &str) -> Result<(String, Vec<String>), String> {
    if command.contains(|c| "|&;<>()`$".contains(c)) {
        return Err("the command uses shell syntax".into());
    }
    let argv = shell_words::split(command).map_err(|e| format!("cannot split the command: {e}"))?;
    if argv.len() < 4 || argv[0].contains('=') || argv[1..3] != ["-m", "scenerun_pytest"] {
        return Err("not a `python -m scenerun_pytest` command".into());
    }
    if !matches!(argv[3].as_str(), "fixture" | "golden") {
        return Err(format!(
            "`scenerun_pytest {}` is not served by a worker",
            argv[3]
        ));
    }
    Ok((argv[2].clone(), argv[3..].to_vec()))
}

/// Run the step as a process, its log saying why its worker did not.
fn as_process(cfg: &WorkerConfig, spec: &proc::Spec, why: &str) -> StepRun {
    append(
        spec.log,
        &format!(
            "# worker {} does not serve it ({why}): run as a process\n",
            cfg.name
        ),
    );
    StepRun::Ended(proc::run(spec))
}

/// Ask `w` for a child that runs `request`, its stdin /dev/null and its stdout and stderr
/// the step's log, and wait for its end, keeping the step's timeout (on the worker's
/// whole group) and the worker's memory cap.
fn serve(w: &mut Worker, spec: &proc::Spec, request: &Request, cap: Option<u64>) -> Served {
    let files = crate::base::fsutil::append_log(spec.log)
        .and_then(|log| Ok((log, std::fs::File::open("/dev/null")?)));
    let (log, null) = match files {
        Ok(f) => f,
        Err(e) => return Served::Failed(e),
    };
    let fds = [null.as_raw_fd(), log.as_raw_fd(), log.as_raw_fd()];
    let stream = match ask(&w.socket, request, &fds) {
        Ok(s) => s,
        Err(_) if w.piped.exited() => return Served::Lost(None),
        Err(e) => return Served::NoAnswer(format!("the worker took no request: {e}")),
    };
    match protocol::recv::<Answer>(&stream) {
        Ok(Some(Answer::Started(_))) => {}
        Ok(Some(Answer::Refused(r))) => return Served::Refused(r.error),
        Ok(None) if w.piped.exited() => return Served::Lost(None),
        Ok(None) => return Served::NoAnswer("the worker closed the request unanswered".into()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            return Served::NoAnswer(format!(
                "the worker did not answer within {}",
                crate::base::units::short_duration(ANSWER_WAIT)
            ))
        }
        Err(e) => {
            w.piped.kill();
            return Served::Lost(Some(WorkerLoss::Protocol {
                said: crate::base::error::clip(&e.to_string(), 120).to_string(),
            }));
        }
    }
    w.piped.set_deadline(spec.timeout);
    let served = if (&stream).write_all(b"1").is_err() {
        Served::Lost(None)
    } else {
        wait_ended(w, &stream, cap)
    };
    w.piped.set_deadline(None);
    served
}

/// Connect to `socket` and send `request` with `fds`; the connection, its waits bounded
/// by `ANSWER_WAIT`.
fn ask(socket: &Path, request: &Request, fds: &[i32]) -> std::io::Result<UnixStream> {
    let stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(ANSWER_WAIT))?;
    stream.set_write_timeout(Some(ANSWER_WAIT))?;
    protocol::send(&stream, request, fds)?;
    Ok(stream)
}

/// Wait for the child's `Ended`, looking at the memory cap meanwhile.
fn wait_ended(w: &Worker, stream: &UnixStream, cap: Option<u64>) -> Served {
    let wait = if cap.is_some() {
        MEMORY_POLL
    } else {
        Duration::from_secs(1)
    };
    if stream.set_read_timeout(Some(wait)).is_err() {
        w.piped.kill();
        return Served::Lost(None);
    }
    loop {
        match protocol::recv::<protocol::Ended>(stream) {
            Ok(Some(e)) => return Served::Done(e.ended()),
            Ok(None) => return Served::Lost(None),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if let Some(over) = cap.and_then(|cap| over_cap(w.pid, cap)) {
                    w.piped.kill();
                    return Served::Lost(Some(over));
                }
            }
            Err(e) => {
                w.piped.kill();
                if w.piped.exited() || w.piped.stopping() {
                    return Served::Lost(None);
                }
                return Served::Lost(Some(WorkerLoss::Protocol {
                    said: crate::base::error::clip(&e.to_string(), 120).to_string(),
                }));
            }
        }
    }
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
    if let Ok(mut f) = crate::base::fsutil::append_log(log) {
        let _ = f.write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_serves_a_plain_fixture_or_golden_command_and_says_why_not_otherwise() {
        let (m, a) =
            served_form("python -m scenerun_pytest fixture t.py::C --case 'a b' --out o").unwrap();
        assert_eq!(m, "scenerun_pytest");
        assert_eq!(a, ["fixture", "t.py::C", "--case", "a b", "--out", "o"]);
        for (command, why) in [
            ("python -c 'print(1)' > o", "the command uses shell syntax"),
            (
                "X=1 python -m scenerun_pytest fixture t",
                "not a `python -m scenerun_pytest` command",
            ),
            (
                "python -O -m scenerun_pytest fixture t",
                "not a `python -m scenerun_pytest` command",
            ),
            (
                "python -m scenerun_pytest collect t",
                "`scenerun_pytest collect` is not served by a worker",
            ),
        ] {
            assert_eq!(served_form(command).unwrap_err(), why, "{command}");
        }
    }
}
