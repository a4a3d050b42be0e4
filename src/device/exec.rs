//! The device executor: starts one process (a plain scene's device step, or a lane
//! process with its batch), watches it, and reports what happened as typed events. It
//! decides nothing about what runs next (the scheduler in `inner` does) and renders
//! nothing (the reporter in `live` does). A lane process's results file is read here
//! while it runs and handed line by line to the pure attribution in `lane`.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::time::{Duration, Instant};

use super::events::{Attempt, AttemptOutcome, Event, LaneRecord};
use super::lane::{Batch, BatchScene, Deadline, Effect, ProcessEnd};
use super::{Frozen, FrozenScene};
use crate::proc::{self, Ended};
use crate::template::{Ph, Val};

/// How often a running lane's results file is read.
const POLL: Duration = Duration::from_millis(5);
/// Lines of output kept under a failed scene.
const TAIL_LINES: usize = 20;
/// Warnings shown per lane process (ignored results lines); the rest are counted.
const MAX_WARNINGS: usize = 20;

/// `lock.device_fault`, compiled.
#[derive(Debug, Default)]
pub struct FaultRules {
    codes: Vec<i32>,
    patterns: Vec<regex::Regex>,
}

impl FaultRules {
    pub fn new(f: Option<&crate::manifest::DeviceFault>) -> FaultRules {
        let Some(f) = f else {
            return FaultRules::default();
        };
        FaultRules {
            codes: f.exit_codes.clone(),
            // Validated with the manifest; one that fails here is dropped.
            patterns: f
                .patterns
                .iter()
                .filter_map(|p| regex::Regex::new(p).ok())
                .collect(),
        }
    }

    /// Whether a step that ended this way with this output hit a device fault.
    pub fn matches(&self, ended: &Ended, output: &str) -> Option<String> {
        if let Ended::Exited(c) = ended {
            if self.codes.contains(c) {
                return Some(format!("exit status {c} is a device fault"));
            }
        }
        self.patterns
            .iter()
            .find(|p| p.is_match(output))
            .map(|p| format!("output matches the device-fault pattern `{}`", p.as_str()))
    }
}

/// What every execution shares.
pub struct Cx<'a> {
    pub frozen: &'a Frozen,
    pub granted: &'a [String],
    pub t0: Instant,
    pub faults: FaultRules,
    /// Numbers lane processes in start order.
    pub lane_procs: AtomicUsize,
}

impl Cx<'_> {
    fn ids(&self, slots: &[usize]) -> Vec<String> {
        slots.iter().map(|&s| self.granted[s].clone()).collect()
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

/// The last `TAIL_LINES` lines of `text`.
pub fn tail_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

fn log_tail(log: &Path) -> String {
    tail_lines(&proc::log_tail(log, 8000))
}

pub fn scene_log(frozen: &Frozen, scene: &str, attempt: usize) -> PathBuf {
    let dir = frozen.report_dir.join("logs").join(scene);
    if attempt <= 1 {
        dir.join("device.log")
    } else {
        dir.join(format!("device.attempt{attempt}.log"))
    }
}

/// Run one plain scene's device step on `slots`; this is attempt number `attempt`.
pub fn run_plain(
    cx: &Cx,
    job: usize,
    scene: usize,
    slots: &[usize],
    attempt: usize,
    tx: &Sender<Event>,
) {
    let s = &cx.frozen.scenes[scene];
    let devices = cx.ids(slots);
    let log = scene_log(cx.frozen, &s.name, attempt);
    let start = cx.now();
    let ended = start_plain(cx.frozen, s, &devices.join(","), &log);
    let duration = cx.now() - start;
    let output = log_tail(&log);
    let (outcome, message) = match &ended {
        Ok(Ended::Exited(0)) => (AttemptOutcome::Passed, None),
        Ok(Ended::TimedOut) => (
            AttemptOutcome::TimedOut,
            Some(format!(
                "timed out after {} (process group killed)",
                crate::units::short_duration(Duration::from_secs_f64(
                    s.device().timeout_secs.unwrap_or(0.0)
                ))
            )),
        ),
        Ok(Ended::Interrupted) => (AttemptOutcome::Interrupted, Some("interrupted".into())),
        Ok(e) => match cx.faults.matches(e, &proc::log_tail(&log, 64 * 1024)) {
            Some(why) => (
                AttemptOutcome::DeviceFault,
                Some(format!("device fault on {}: {why}", devices.join(","))),
            ),
            None => (
                AttemptOutcome::Failed,
                Some(format!("device step {}", e.describe())),
            ),
        },
        Err(e) => (
            AttemptOutcome::Failed,
            Some(format!("could not start the device step: {e}")),
        ),
    };
    if outcome == AttemptOutcome::DeviceFault {
        let _ = tx.send(Event::Fault {
            slots: slots.to_vec(),
        });
    }
    let _ = tx.send(Event::Attempt {
        scene,
        attempt: Attempt {
            outcome,
            devices,
            start_secs: start,
            duration_secs: duration,
            message,
            output_tail: (outcome != AttemptOutcome::Passed).then_some(output),
            log: Some(log),
            lane_process: None,
        },
    });
    let _ = tx.send(Event::Done {
        job,
        handback: Vec::new(),
    });
}

fn scene_env(
    frozen: &Frozen,
    s: &FrozenScene,
    devices: &str,
) -> std::collections::BTreeMap<String, String> {
    let kernels = super::kernels_dir(&frozen.run_dir, &s.name);
    let mut env = s.env.clone();
    env.insert("SCENERUN_KERNELS".into(), kernels.display().to_string());
    env.insert("SCENERUN_DEVICES".into(), devices.to_string());
    env.insert("SCENERUN_SCENE".into(), s.name.clone());
    if let Some(f) = &s.fixture {
        env.insert("SCENERUN_FIXTURE".into(), f.out.display().to_string());
    }
    if let Some(g) = &s.golden {
        env.insert("SCENERUN_GOLDEN".into(), g.out.display().to_string());
    }
    env
}

fn start_plain(
    frozen: &Frozen,
    s: &FrozenScene,
    devices: &str,
    log: &Path,
) -> std::io::Result<Ended> {
    let kernels = super::kernels_dir(&frozen.run_dir, &s.name);
    let crate::manifest::DeviceRun::Command(template) = &s.device().run else {
        unreachable!("a plain scene has a device command")
    };
    let command = crate::plan::render_device_template(
        template,
        &s.name,
        &s.platform,
        &kernels,
        s.fixture.as_ref().map(|a| a.out.as_path()),
        s.golden.as_ref().map(|a| a.out.as_path()),
        Some(devices),
    );
    let env = scene_env(frozen, s, devices);
    if let Some(d) = log.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(log, format!("$ {command}\n"))?;
    proc::run(&proc::Spec {
        command: &command,
        dir: &frozen.manifest_dir,
        env: &env,
        log,
        timeout: s.device().timeout_secs.map(Duration::from_secs_f64),
    })
}

/// Longest line of a results file (docs/lanes.md): a longer one is a protocol error.
pub const MAX_RESULTS_LINE: usize = 1 << 20;
/// Bytes of a results file read per poll: what a lane writes faster is read over
/// several polls, so the deadlines and the cancel are checked in between.
const READ_CHUNK: u64 = 1 << 20;

/// Reads what a lane appends to its results file, whole lines at a time. The file is the
/// lane's to damage: it is opened without following a link or blocking on a FIFO, and
/// read only when it is a regular file; each poll reads a bounded chunk; a line is
/// capped. A file truncated meanwhile is read again from its start, and one replaced by
/// a new file at the path is read from the new one's start: lines already read keep
/// their results either way.
struct Tail {
    path: PathBuf,
    /// The open file and its (device, inode).
    file: Option<(std::fs::File, (u64, u64))>,
    pos: u64,
    partial: Vec<u8>,
    /// A protocol error was reported: nothing more is read.
    broken: bool,
    /// Ignored lines (warnings) so far.
    warned: usize,
}

impl Tail {
    fn new(path: PathBuf) -> Tail {
        Tail {
            path,
            file: None,
            pos: 0,
            partial: Vec::new(),
            broken: false,
            warned: 0,
        }
    }

    /// Open the file at the path when it is not the one open (first seen, or replaced).
    /// A path that is gone keeps the file open as it is. Err: why the path breaks the
    /// protocol.
    fn follow(&mut self) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let here = match std::fs::symlink_metadata(&self.path) {
            Ok(m) => (m.dev(), m.ino()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("cannot stat {}: {e}", self.path.display())),
        };
        if self.file.as_ref().is_some_and(|(_, id)| *id == here) {
            return Ok(());
        }
        let f = match crate::fsutil::open_regular_nofollow(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("its results path {e}")),
        };
        let id = f
            .metadata()
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| e.to_string())?;
        self.file = Some((f, id));
        self.pos = 0;
        self.partial.clear();
        Ok(())
    }

    /// What the lane wrote since the last poll, attributed at `now`: its effects, past
    /// the first `MAX_WARNINGS` warnings only counted. A protocol error marks the process
    /// to be stopped.
    fn results(
        &mut self,
        finished: bool,
        now: f64,
        machine: &mut Batch,
        killing: &mut Option<ProcessEnd>,
    ) -> Vec<Effect> {
        let lines = self.lines(finished).unwrap_or_else(|why| {
            killing.get_or_insert(ProcessEnd::Protocol(why));
            Vec::new()
        });
        let mut out = Vec::new();
        for line in lines {
            for e in machine.feed(&line, now) {
                if matches!(e, Effect::Warn(_)) {
                    self.warned += 1;
                    if self.warned > MAX_WARNINGS {
                        continue;
                    }
                }
                out.push(e);
            }
        }
        out
    }

    /// One warning that counts the warnings not shown, if any.
    fn report_unshown(&self, lane: &str, n: usize, tx: &Sender<Event>) {
        if let Some(more) = self.warned.checked_sub(MAX_WARNINGS).filter(|&m| m > 0) {
            let _ = tx.send(Event::Warning(format!(
                "{more} more ignored results lines of lane `{lane}` (process {n}) not shown"
            )));
        }
    }

    /// Complete lines appended since the last call (and, at the end, a last line
    /// without its newline). Err: the lane broke the protocol (said once).
    fn lines(&mut self, at_end: bool) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        if self.broken {
            return Ok(out);
        }
        let r = self.read(at_end, &mut out);
        if r.is_err() {
            self.broken = true;
        }
        r.map(|()| out)
    }

    fn read(&mut self, at_end: bool, out: &mut Vec<String>) -> Result<(), String> {
        self.follow()?;
        let Some((f, _)) = self.file.as_mut() else {
            return Ok(());
        };
        // At the end the process is gone: read what is there, not what might follow.
        let mut stop: Option<u64> = None;
        loop {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len < self.pos {
                // Truncated: what is there now was written since.
                self.pos = 0;
                self.partial.clear();
            }
            let stop = *stop.get_or_insert(len);
            let want = len.min(stop).saturating_sub(self.pos).min(READ_CHUNK);
            let mut buf = Vec::new();
            if want > 0 && f.seek(SeekFrom::Start(self.pos)).is_ok() {
                let _ = f.by_ref().take(want).read_to_end(&mut buf);
            }
            self.pos += buf.len() as u64;
            self.partial.extend_from_slice(&buf);
            while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.partial.drain(..=nl).collect();
                if line.len() - 1 > MAX_RESULTS_LINE {
                    return Err(too_long());
                }
                out.push(String::from_utf8_lossy(&line[..line.len() - 1]).to_string());
            }
            if self.partial.len() > MAX_RESULTS_LINE {
                return Err(too_long());
            }
            if !at_end || buf.is_empty() || self.pos >= stop || proc::interrupted() {
                break;
            }
        }
        if at_end && !self.partial.is_empty() {
            out.push(String::from_utf8_lossy(&std::mem::take(&mut self.partial)).to_string());
        }
        Ok(())
    }
}

fn too_long() -> String {
    format!(
        "a results line is longer than {} MiB",
        MAX_RESULTS_LINE >> 20
    )
}

/// The output a lane process wrote since `mark` (its scene's share of the log).
fn output_since(log: &Path, mark: &mut u64) -> String {
    let Ok(mut f) = std::fs::File::open(log) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = (*mark).max(len.saturating_sub(16 * 1024));
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(from)).is_ok() {
        let _ = f.take(len - from).read_to_end(&mut buf);
    }
    *mark = len;
    tail_lines(&String::from_utf8_lossy(&buf))
}

/// Run a lane's batch in a process on `slots`: restarts in fresh processes on the same
/// ids after a crash or a scene timeout, at most the lane's `restarts` times.
pub fn run_lane(
    cx: &Cx,
    job: usize,
    lane: &str,
    scenes: Vec<usize>,
    slots: &[usize],
    tx: &Sender<Event>,
) {
    let cfg = &cx.frozen.lanes[lane];
    let devices = cx.ids(slots);
    let mut batch = scenes;
    let mut restart = 0u32;
    let mut handback = Vec::new();
    while !batch.is_empty() {
        let n = cx.lane_procs.fetch_add(1, Ordering::SeqCst);
        let (end, rest) = lane_process(cx, lane, n, &batch, slots, restart, tx);
        if rest.is_empty() {
            break;
        }
        if end == ProcessEnd::Fault {
            handback = rest;
            break;
        }
        if restart < cfg.restarts && !proc::interrupted() {
            restart += 1;
            batch = rest;
            continue;
        }
        for i in rest {
            let _ = tx.send(Event::Attempt {
                scene: i,
                attempt: Attempt {
                    outcome: AttemptOutcome::NotRun,
                    devices: devices.clone(),
                    start_secs: cx.now(),
                    duration_secs: 0.0,
                    message: Some(format!(
                        "not run: lane restarts exhausted ({} restart{} of lane `{lane}` used)",
                        cfg.restarts,
                        if cfg.restarts == 1 { "" } else { "s" }
                    )),
                    output_tail: None,
                    log: None,
                    lane_process: None,
                },
            });
        }
        break;
    }
    let _ = tx.send(Event::Done { job, handback });
}

/// One lane process: start it, attribute its results, report every scene it settles.
/// Returns how it ended and the scenes handed back (never started).
fn lane_process(
    cx: &Cx,
    lane: &str,
    n: usize,
    batch: &[usize],
    slots: &[usize],
    restart: u32,
    tx: &Sender<Event>,
) -> (ProcessEnd, Vec<usize>) {
    let frozen = cx.frozen;
    let cfg = &frozen.lanes[lane];
    let devices = cx.ids(slots);
    let dir = frozen.run_dir.join("lanes");
    let scenes_file = dir.join(format!("{lane}.{n}.scenes.jsonl"));
    let results_file = dir.join(format!("{lane}.{n}.results.jsonl"));
    let log = frozen
        .report_dir
        .join("logs")
        .join("lanes")
        .join(format!("{lane}.{n}.log"));
    let members: Vec<&FrozenScene> = batch.iter().map(|&i| &frozen.scenes[i]).collect();
    let mut scenes_text = String::new();
    for s in &members {
        let kernels = (!s.kernels.is_empty()).then(|| super::kernels_dir(&frozen.run_dir, &s.name));
        scenes_text.push_str(
            &serde_json::json!({
                "scene": s.name,
                "args": s.device().args(),
                "kernels": kernels,
                "fixture": s.fixture.as_ref().map(|a| &a.out),
                "golden": s.golden.as_ref().map(|a| &a.out),
                "timeout_secs": s.device().timeout_secs,
            })
            .to_string(),
        );
        scenes_text.push('\n');
    }
    let args: Vec<String> = members
        .iter()
        .flat_map(|s| s.device().args().iter().cloned())
        .collect();
    let command = cfg.run.render(|ph| match ph {
        Ph::Devices => Val::One(devices.join(",").into()),
        Ph::Args => Val::Many(args.as_slice().into()),
        Ph::Scenes => Val::One(scenes_file.display().to_string().into()),
        Ph::Results => Val::One(results_file.display().to_string().into()),
        Ph::Platform => Val::One(members[0].platform.as_str().into()),
        _ => Val::Raw("".into()),
    });
    let mut env = cfg.env.clone();
    env.insert("SCENERUN_DEVICES".into(), devices.join(","));
    env.insert("SCENERUN_SCENES".into(), scenes_file.display().to_string());
    env.insert(
        "SCENERUN_RESULTS".into(),
        results_file.display().to_string(),
    );
    env.insert("SCENERUN_LANE".into(), lane.to_string());
    let prepared = std::fs::create_dir_all(&dir)
        .and_then(|_| std::fs::write(&scenes_file, &scenes_text))
        .and_then(|_| match std::fs::remove_file(&results_file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        })
        .and_then(|_| std::fs::create_dir_all(log.parent().expect("log has a dir")))
        .and_then(|_| std::fs::write(&log, format!("$ {command}\n")));
    let mut machine = Batch::new(
        members
            .iter()
            .map(|s| BatchScene {
                name: s.name.clone(),
                args: s.device().args().to_vec(),
                timeout: s.device().timeout_secs,
            })
            .collect(),
        cfg.timeout_secs,
    );
    let start = cx.now();
    let t = Instant::now();
    let mut mark = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let mut tail = Tail::new(results_file.clone());
    let mut killing: Option<ProcessEnd> = None;
    let (end_tx, end_rx) = mpsc::channel::<std::io::Result<Ended>>();
    let (pg_tx, pg_rx) = mpsc::channel::<i32>();
    let ended = std::thread::scope(|scope| {
        prepared?;
        let spec_env = env.clone();
        let (cmd, dir, log) = (&command, &frozen.manifest_dir, &log);
        scope.spawn(move || {
            let r = proc::run_observed(
                &proc::Spec {
                    command: cmd,
                    dir,
                    env: &spec_env,
                    log,
                    timeout: None,
                },
                |pg| {
                    let _ = pg_tx.send(pg);
                },
            );
            let _ = end_tx.send(r);
        });
        let mut pgid: Option<i32> = None;
        let mut terminated = false;
        loop {
            let got = end_rx.recv_timeout(POLL);
            if pgid.is_none() {
                pgid = pg_rx.try_recv().ok();
            }
            let finished = !matches!(got, Err(mpsc::RecvTimeoutError::Timeout));
            let now = t.elapsed().as_secs_f64();
            for e in tail.results(finished, now, &mut machine, &mut killing) {
                if let Effect::Fault { devices: named } = &e {
                    // Only a fault on ids of its own ends the process.
                    if fault_slots(cx, slots, named, tx) && killing.is_none() {
                        killing = Some(ProcessEnd::Fault);
                    }
                }
                emit(cx, &e, batch, &devices, start, n, log, &mut mark, tx);
            }
            if finished {
                return got.unwrap_or(Ok(Ended::Exited(-1)));
            }
            if killing.is_none() {
                match machine.deadline() {
                    Some(Deadline::Scene { scene, at }) if now >= at => {
                        for e in machine.expire_scene(scene, now) {
                            emit(cx, &e, batch, &devices, start, n, log, &mut mark, tx);
                        }
                        killing = Some(ProcessEnd::SceneTimeout);
                    }
                    Some(Deadline::Lane { at }) if now >= at => {
                        killing = Some(ProcessEnd::LaneTimeout);
                    }
                    _ => {}
                }
            }
            // Stop the process once it is to be killed and its group is known (a
            // deadline may pass before the spawn reported it).
            if killing.is_some() && !terminated {
                if let Some(pg) = pgid {
                    proc::terminate(pg);
                    terminated = true;
                }
            }
        }
    });
    let now = t.elapsed().as_secs_f64();
    let (end, how) = match (&killing, &ended) {
        (Some(k), _) => (
            k.clone(),
            match k {
                ProcessEnd::SceneTimeout => "killed after a scene timeout".to_string(),
                ProcessEnd::LaneTimeout => "killed at the lane timeout".to_string(),
                ProcessEnd::Protocol(why) => format!("killed after a lane protocol error: {why}"),
                _ => "killed after a device fault".to_string(),
            },
        ),
        (None, Ok(Ended::Interrupted)) => (ProcessEnd::Interrupted, "interrupted".to_string()),
        (None, Ok(e)) if proc::interrupted() => (
            ProcessEnd::Interrupted,
            format!("interrupted ({})", e.describe()),
        ),
        (None, Ok(e)) => {
            let how = e.describe();
            let unreported = {
                let mut m = mark;
                output_since(&log, &mut m)
            };
            match (e, cx.faults.matches(e, &unreported)) {
                (Ended::Exited(c), _) if *c == 0 => (
                    ProcessEnd::Exited {
                        ok: true,
                        how: how.clone(),
                    },
                    how,
                ),
                (_, Some(why)) => {
                    // None named: every id of the process.
                    fault_slots(cx, slots, &[], tx);
                    machine.fault_scene = None;
                    (ProcessEnd::Fault, format!("{how}; {why}"))
                }
                _ => (
                    ProcessEnd::Exited {
                        ok: false,
                        how: how.clone(),
                    },
                    how,
                ),
            }
        }
        (None, Err(e)) => (
            ProcessEnd::Exited {
                ok: false,
                how: format!("could not start ({e})"),
            },
            format!("could not start ({e})"),
        ),
    };
    tail.report_unshown(lane, n, tx);
    // What the process said last: the cause of a crash is usually there.
    let crash_tail = log_tail(&log);
    let (effects, requeue) = machine.finish(&end, now, &crash_tail);
    for e in &effects {
        emit(cx, e, batch, &devices, start, n, &log, &mut mark, tx);
    }
    let _ = tx.send(Event::Lane(LaneRecord {
        lane: lane.to_string(),
        devices,
        start_secs: start,
        startup_secs: machine.startup(),
        duration_secs: now,
        restarts: restart,
        scenes: members.iter().map(|s| s.name.clone()).collect(),
        ended: how,
        log,
    }));
    (end, requeue.into_iter().map(|i| batch[i]).collect())
}

/// Quarantine the ids a lane named (only its own; none named: all of them). A fault
/// naming only ids the process does not hold is ignored, as its warning says: false.
fn fault_slots(cx: &Cx, slots: &[usize], named: &[String], tx: &Sender<Event>) -> bool {
    let mine: Vec<usize> = slots
        .iter()
        .copied()
        .filter(|&s| named.is_empty() || named.contains(&cx.granted[s]))
        .collect();
    let foreign: Vec<&String> = named
        .iter()
        .filter(|id| !slots.iter().any(|&s| &cx.granted[s] == *id))
        .collect();
    if !foreign.is_empty() {
        let _ = tx.send(Event::Warning(format!(
            "a lane process reported a device fault on ids it does not hold ({}); ignored",
            foreign
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(",")
        )));
    }
    if mine.is_empty() {
        return false;
    }
    let _ = tx.send(Event::Fault { slots: mine });
    true
}

#[allow(clippy::too_many_arguments)]
fn emit(
    cx: &Cx,
    e: &Effect,
    batch: &[usize],
    devices: &[String],
    start: f64,
    n: usize,
    log: &Path,
    mark: &mut u64,
    tx: &Sender<Event>,
) {
    let _ = cx;
    match e {
        Effect::Warn(w) => {
            let _ = tx.send(Event::Warning(w.clone()));
        }
        Effect::Fault { .. } => {}
        Effect::Scene {
            scene,
            verdict,
            started,
            duration,
            message,
        } => {
            let outcome = *verdict;
            let output = output_since(log, mark);
            let _ = tx.send(Event::Attempt {
                scene: batch[*scene],
                attempt: Attempt {
                    outcome,
                    devices: devices.to_vec(),
                    start_secs: start + started,
                    duration_secs: *duration,
                    message: message.clone(),
                    output_tail: (!matches!(
                        outcome,
                        AttemptOutcome::Passed | AttemptOutcome::Skipped | AttemptOutcome::NotRun
                    ))
                    .then_some(output),
                    log: Some(log.to_path_buf()),
                    lane_process: Some(n),
                },
            });
        }
    }
}
