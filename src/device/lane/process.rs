//! One lane process at a time (docs/lanes.md): start it with its batch, read its
//! results file as it runs (`results_tail`), hand each line to the pure attribution in
//! `batch`, keep its deadlines, stop it, and report every scene it settles as an event.
//! `run_lane` restarts a batch in fresh processes on the same ids.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Sender};
use std::time::{Duration, Instant};

use super::adopt::Pool;
use super::batch::{Batch, BatchScene, Deadline, Effect, ProcessEnd};
use super::files::{lane_command, prepare_files, variant, LaneFiles};
use super::restart::{OutputScan, RestartRules};
use super::results_tail::Tail;
use crate::base::notice::LaneNotice;
use crate::base::proc::output::OutputFile;
use crate::base::proc::{self, Ended};
use crate::device::events::{Attempt, AttemptOutcome, Event, LaneRecord, Outcome};
use crate::device::exec::{log_tail, tail_lines, Cx};
use crate::device::FrozenScene;

/// How often a running lane's results file is read.
const POLL: Duration = Duration::from_millis(5);

/// The last lines of the output a lane process wrote since `mark` (its scene's share of
/// the log), up to where the process said that scene's output ends, if it did, and then
/// the failure in its framework's words, if it gave them.
fn output_since(log: &Path, mark: &mut u64, end: Option<u64>, failure: Option<&str>) -> String {
    let mut out = OutputFile::from(log, *mark);
    let got = match end {
        Some(end) => out.read_last_before(16 * 1024, end),
        None => out.read_last(16 * 1024),
    }
    .unwrap_or_default();
    *mark = out.pos();
    let mut text = String::from_utf8_lossy(&got.bytes).into_owned();
    if let Some(f) = failure {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(f);
    }
    tail_lines(&text)
}

/// Run a lane's batch in a process on `slots`, and the rest of it in fresh processes on
/// the same ids: after a crash or a scene timeout (at most the lane's `restarts` times),
/// and when the process asks for a restart (at most its `max_restarts` times).
pub fn run_lane(
    cx: &Cx,
    pool: &Pool,
    job: usize,
    lane: &str,
    scenes: Vec<usize>,
    slots: &[usize],
    tx: &Sender<Event>,
) {
    let mut slot = Slot {
        cx,
        pool,
        lane,
        slots,
        tx,
        processes: 0,
        crashes: 0,
        asked: 0,
        cut_once: HashSet::new(),
        adopting: true,
    };
    // Scenes whose artifacts changed since the plan saw them (an earlier step wrote into
    // a cache entry they share) fail here, before a process starts on them.
    let mut batch = Vec::with_capacity(scenes.len());
    for i in scenes {
        let frozen = cx.frozen;
        match crate::device::recheck::scene(frozen, &frozen.scenes[i]) {
            Ok(()) => batch.push(i),
            Err(gone) => slot.failed_before_start(i, &gone.to_string()),
        }
    }
    let mut handback = Vec::new();
    while !batch.is_empty() {
        // None: a process started before the lock ended before it was ready; the whole
        // batch runs in a fresh one, no restart used.
        let Some((end, rest)) = slot.process(&batch) else {
            continue;
        };
        if rest.is_empty() {
            break;
        }
        match slot.next(&end) {
            Next::Again => batch = rest,
            Next::Repack => {
                handback = rest;
                break;
            }
            Next::GiveUp(why) => {
                slot.give_up(&rest, &why);
                break;
            }
        }
    }
    let _ = tx.send(Event::Done { job, handback });
}

/// What follows a lane process that left scenes unfinished.
enum Next {
    /// A fresh process on the same ids for them.
    Again,
    /// Hand them back to be packed on healthy ids (a device fault).
    Repack,
    /// They are not run, for this reason.
    GiveUp(String),
}

/// The successive processes of one batch on one set of ids (a lane process slot): how
/// many there were, how many restarts each kind used, and which scenes a restart cut
/// short once already.
struct Slot<'a> {
    cx: &'a Cx<'a>,
    /// The processes started before the lock, one of which its first process may adopt.
    pool: &'a Pool,
    lane: &'a str,
    slots: &'a [usize],
    tx: &'a Sender<Event>,
    processes: u32,
    /// Fresh processes after a crash or a scene timeout (`restarts`).
    crashes: u32,
    /// Fresh processes the process asked for (`max_restarts`).
    asked: u32,
    cut_once: HashSet<usize>,
    /// Its first process may be one started before the lock (docs/lanes.md); every
    /// later one starts here, the normal way.
    adopting: bool,
}

impl Slot<'_> {
    /// One lane process: start it (or adopt the one started before the lock for this
    /// batch), attribute its results, report every scene it settles. How it ended and
    /// the scenes it left to a fresh process; None when an adopted process ended before
    /// it was ready (it wrote no results line at all and was not stopped): it is
    /// reported, and the whole batch runs in a fresh process.
    fn process(&mut self, batch: &[usize]) -> Option<(ProcessEnd, Vec<usize>)> {
        let adopted = match std::mem::take(&mut self.adopting) {
            true => self.pool.take(self.lane, batch),
            false => None,
        };
        let adopted = match adopted {
            Some(Err(why)) => {
                let _ = self.tx.send(Event::Warning(LaneNotice::NotAdopted {
                    lane: self.lane.to_string(),
                    why,
                }));
                None
            }
            Some(Ok(a)) => Some(a),
            None => None,
        };
        let n = match &adopted {
            Some(a) => a.n(),
            None => self.cx.lane_procs.fetch_add(1, Ordering::SeqCst),
        };
        let mut p = LaneProcess::new(self.cx, self.lane, n, batch, self.slots, self.tx);
        for (k, i) in batch.iter().enumerate() {
            if self.cut_once.contains(i) {
                p.machine.rerun_after_cut(k);
            }
        }
        let ended = match adopted {
            Some(a) => p.adopt(a),
            None => {
                let (command, env) = p.command();
                p.prepare(&command).and_then(|()| p.run(&command, &env))
            }
        };
        let now = p.t.elapsed().as_secs_f64();
        let unready = p.prestart.is_some() && p.machine.silent() && p.killing.is_none();
        if unready && !proc::interrupted() && !crate::device::watch::lock_lost() {
            p.unready(&ended);
            return None;
        }
        let (end, how) = p.ending(&ended);
        let (rest, cut) = p.finish(&end, how, now, self.processes);
        self.cut_once.extend(cut);
        self.processes += 1;
        Some((end, rest))
    }

    fn next(&mut self, end: &ProcessEnd) -> Next {
        let cfg = &self.cx.frozen.lanes[self.lane];
        let lane = self.lane;
        match end {
            ProcessEnd::Fault => Next::Repack,
            _ if proc::interrupted() => Next::GiveUp("not run: interrupted".into()),
            ProcessEnd::Restart(_) if self.asked < cfg.max_restarts => {
                self.asked += 1;
                Next::Again
            }
            ProcessEnd::Restart(why) => Next::GiveUp(format!(
                "not run: lane `{lane}` asked for a restart ({why}) after its max_restarts ({}) were used",
                cfg.max_restarts
            )),
            _ if self.crashes < cfg.restarts => {
                self.crashes += 1;
                Next::Again
            }
            _ => Next::GiveUp(format!(
                "not run: lane restarts exhausted ({} restart{} of lane `{lane}` used)",
                cfg.restarts,
                if cfg.restarts == 1 { "" } else { "s" }
            )),
        }
    }

    /// The scenes left are not run, for `why`.
    /// A scene that cannot start: failed, with why.
    fn failed_before_start(&self, scene: usize, why: &str) {
        self.unrun(scene, AttemptOutcome::Test(Outcome::Failed), why);
    }

    /// Scene `scene` ends with an attempt that ran nothing, on this process's ids.
    fn unrun(&self, scene: usize, outcome: AttemptOutcome, why: &str) {
        let attempt = Attempt::unrun(outcome, self.cx.ids(self.slots), self.cx.now(), why);
        let _ = self.tx.send(Event::Attempt { scene, attempt });
    }

    fn give_up(&self, rest: &[usize], why: &str) {
        for &i in rest {
            self.unrun(i, AttemptOutcome::NotRun, why);
        }
    }
}

/// One lane process on its ids: its files, command and environment, the attribution
/// of its results (`lane::Batch`), how much of its log earlier scenes' output took, and
/// why it is being stopped once that is decided. Every scene it settles goes out as an
/// event.
struct LaneProcess<'a> {
    cx: &'a Cx<'a>,
    lane: &'a str,
    /// Its number among the run's lane processes.
    n: usize,
    /// Frozen scene indices, in batch order.
    batch: &'a [usize],
    slots: &'a [usize],
    devices: Vec<String>,
    files: LaneFiles,
    log: PathBuf,
    machine: Batch,
    /// Reads its results file.
    tail: Tail,
    /// When it started, in seconds after the inner run started.
    start: f64,
    /// Its own clock, for the attribution's deadlines.
    t: Instant,
    /// The end of the log shown with a scene so far.
    mark: u64,
    /// What the process said of the output of the scene ending next: where it ends,
    /// and the failure in its framework's words.
    told: (Option<u64>, Option<String>),
    killing: Option<ProcessEnd>,
    /// A scene's timeout, said once the process has been stopped (its stop signal's
    /// output belongs to it).
    expired: Vec<Effect>,
    /// Where in its log the output after its stop signal starts, once one was sent.
    stopped_at: Option<u64>,
    /// Its lane's `restart_on`, and the reader of its output those patterns scan.
    restart: RestartRules,
    scan: OutputScan,
    /// Started before the lock and adopted here: when it started and when it was handed
    /// its ids (Unix seconds).
    prestart: Option<(f64, f64)>,
    tx: &'a Sender<Event>,
}

impl<'a> LaneProcess<'a> {
    fn new(
        cx: &'a Cx<'a>,
        lane: &'a str,
        n: usize,
        batch: &'a [usize],
        slots: &'a [usize],
        tx: &'a Sender<Event>,
    ) -> LaneProcess<'a> {
        let frozen = cx.frozen;
        let machine = Batch::new(
            batch
                .iter()
                .map(|&i| {
                    let s = &frozen.scenes[i];
                    BatchScene {
                        name: s.name.clone(),
                        args: s.device().args().to_vec(),
                        timeout: s.device().timeout_secs,
                        cut_before: false,
                    }
                })
                .collect(),
            frozen.lanes[lane].timeout_secs,
        );
        let files = LaneFiles::of(frozen, lane, n);
        LaneProcess {
            cx,
            lane,
            n,
            batch,
            slots,
            devices: cx.ids(slots),
            tail: Tail::new(files.results.clone()),
            log: files.log.clone(),
            files,
            machine,
            start: cx.now(),
            t: Instant::now(),
            mark: 0,
            told: (None, None),
            killing: None,
            expired: Vec::new(),
            stopped_at: None,
            restart: RestartRules::new(frozen.lanes[lane].restart_on.as_ref()),
            scan: OutputScan::default(),
            prestart: None,
            tx,
        }
    }

    fn members(&self) -> impl Iterator<Item = &'a FrozenScene> + '_ {
        self.batch.iter().map(|&i| &self.cx.frozen.scenes[i])
    }

    /// The lane process variant its batch needs.
    fn variant(&self) -> crate::manifest::Variant {
        variant(self.cx.frozen, self.batch)
    }

    /// Its command, every placeholder filled, and its environment.
    fn command(&self) -> (String, std::collections::BTreeMap<String, String>) {
        let ids = self.devices.join(",");
        lane_command(self.cx.frozen, self.lane, self.batch, &ids, &self.files)
    }

    /// Write its scenes file, clear an earlier results file, start its log with the
    /// command.
    fn prepare(&mut self, command: &str) -> std::io::Result<()> {
        self.mark = prepare_files(self.cx.frozen, self.batch, &self.files, command)?;
        self.scan = OutputScan::from(self.mark);
        Ok(())
    }

    /// Start it and watch it (see `watch`).
    fn run(
        &mut self,
        command: &str,
        env: &std::collections::BTreeMap<String, String>,
    ) -> std::io::Result<Ended> {
        let stop = self.cx.frozen.lanes[self.lane].stop;
        let (dir, log) = (&self.cx.frozen.manifest_dir, self.log.clone());
        self.watch(move |pg_tx| {
            let spec = proc::Spec {
                command,
                dir,
                env,
                log: &log,
                timeout: None,
                stop,
            };
            proc::run_observed(&spec, |pg| {
                let _ = pg_tx.send(pg);
            })
        })
    }

    /// Adopt a process started before the lock for this batch (docs/lanes.md): its
    /// files are this process's, its clocks start now, it gets its ids through its go
    /// file and is watched until its leader has ended.
    fn adopt(&mut self, a: super::adopt::Adopted) -> std::io::Result<Ended> {
        self.mark = a.log_mark();
        self.scan = OutputScan::from(self.mark);
        self.start = self.cx.now();
        self.t = Instant::now();
        self.prestart = Some((a.started_at(), crate::device::unix_now()));
        let pgid = a.pgid();
        if let Err(e) = a.go(&self.devices.join(",")) {
            // It waits for ever otherwise; it ends before it was ready, and its batch
            // runs in a fresh process.
            let _ = self.tx.send(Event::Warning(LaneNotice::CannotHandIds {
                lane: self.lane.to_string(),
                process: self.n,
                error: e.to_string(),
            }));
            proc::terminate(pgid);
        }
        self.watch(move |pg_tx| {
            let _ = pg_tx.send(pgid);
            a.wait()
        })
    }

    /// Watch it until it exits (`run` starts it, or waits for one adopted, and tells its
    /// process group): its results attributed as they come, its deadlines kept, and its
    /// process group stopped once `killing` is decided.
    fn watch(
        &mut self,
        run: impl FnOnce(mpsc::Sender<i32>) -> std::io::Result<proc::Finished> + Send,
    ) -> std::io::Result<Ended> {
        let (end_tx, end_rx) = mpsc::channel::<std::io::Result<proc::Finished>>();
        let (pg_tx, pg_rx) = mpsc::channel::<i32>();
        let finished = std::thread::scope(|scope| {
            scope.spawn(move || {
                let _ = end_tx.send(run(pg_tx));
            });
            let mut pgid: Option<i32> = None;
            let mut terminated = false;
            loop {
                let got = end_rx.recv_timeout(POLL);
                if pgid.is_none() {
                    pgid = pg_rx.try_recv().ok();
                }
                let finished = !matches!(got, Err(mpsc::RecvTimeoutError::Timeout));
                self.poll(finished);
                if finished {
                    return got.unwrap_or(Ok(proc::Finished {
                        ended: Ended::Exited(-1),
                        stopped_at: None,
                    }));
                }
                // Stop the process once it is to be killed and its group is known (a
                // deadline may pass before the spawn reported it): a timeout with the
                // lane's stop signal first, anything else with SIGTERM.
                if let (Some(k), Some(pg), false) = (&self.killing, pgid, terminated) {
                    match k {
                        ProcessEnd::SceneTimeout | ProcessEnd::LaneTimeout => proc::stop(pg),
                        _ => proc::terminate(pg),
                    }
                    terminated = true;
                }
            }
        });
        finished.map(|f| {
            self.stopped_at = f.stopped_at;
            f.ended
        })
    }

    /// One look at the process: the results it wrote since the last (a device fault on
    /// its own ids stops it), then, unless it is being stopped already, its deadlines.
    fn poll(&mut self, finished: bool) {
        let now = self.t.elapsed().as_secs_f64();
        let effects = (self.tail).results(finished, now, &mut self.machine, &mut self.killing);
        for e in effects {
            match &e {
                // Only a fault on ids of its own ends the process.
                Effect::Fault { devices: named }
                    if self.fault_slots(named) && self.killing.is_none() =>
                {
                    self.killing = Some(ProcessEnd::Fault);
                }
                Effect::Restart { reason } => {
                    let why = format!("it asked for one: {reason}");
                    self.killing.get_or_insert(ProcessEnd::Restart(why));
                }
                _ => {}
            }
            self.emit(&e);
        }
        self.scan_for_restart(finished);
        if finished || self.killing.is_some() {
            return;
        }
        match self.machine.deadline() {
            Some(Deadline::Scene { scene, at }) if now >= at => {
                self.expired = self.machine.expire_scene(scene, now);
                self.killing = Some(ProcessEnd::SceneTimeout);
            }
            Some(Deadline::Lane { at }) if now >= at => {
                self.killing = Some(ProcessEnd::LaneTimeout);
            }
            _ => {}
        }
    }

    /// Its new output lines against the `restart_on` patterns (while nothing else is
    /// ending it).
    fn scan_for_restart(&mut self, finished: bool) {
        if self.killing.is_some() || !self.restart.has_patterns() {
            return;
        }
        for line in self.scan.lines(&self.log, finished) {
            if let Some(why) = self.restart.on_line(&line) {
                self.killing = Some(ProcessEnd::Restart(why));
                return;
            }
        }
    }

    /// How it ended, and how to say so: the reason it was stopped for, an interrupt, a
    /// restart or a device fault its exit status or last output shows (a fault:
    /// every id of it quarantined), or its exit status.
    fn ending(&mut self, ended: &std::io::Result<Ended>) -> (ProcessEnd, String) {
        if let Some(k) = &self.killing {
            let how = match k {
                ProcessEnd::SceneTimeout => "killed after a scene timeout".to_string(),
                ProcessEnd::LaneTimeout => "killed at the lane timeout".to_string(),
                ProcessEnd::Protocol(why) => format!("killed after a lane protocol error: {why}"),
                ProcessEnd::Restart(why) => format!("restarted: {why}"),
                _ => "killed after a device fault".to_string(),
            };
            return (k.clone(), how);
        }
        let e = match ended {
            Ok(Ended::Interrupted) => return (ProcessEnd::Interrupted, "interrupted".into()),
            Ok(e) if proc::interrupted() => {
                let how = format!("interrupted ({})", e.describe());
                return (ProcessEnd::Interrupted, how);
            }
            Ok(e) => e,
            Err(e) => {
                let how = format!("could not start ({e})");
                let end = ProcessEnd::Exited {
                    ok: false,
                    how: how.clone(),
                };
                return (end, how);
            }
        };
        let how = e.describe();
        if *e == Ended::Exited(0) {
            let end = ProcessEnd::Exited {
                ok: true,
                how: how.clone(),
            };
            return (end, how);
        }
        if let Some(why) = match e {
            Ended::Exited(c) => self.restart.on_exit(*c),
            _ => None,
        } {
            return (
                ProcessEnd::Restart(why.clone()),
                format!("restarted: {why}"),
            );
        }
        let unreported = output_since(&self.log, &mut self.mark.clone(), None, None);
        match self.cx.faults.matches(e, &unreported) {
            Some(why) => {
                // None named: every id of the process.
                self.fault_slots(&[]);
                self.machine.fault_scene = None;
                (ProcessEnd::Fault, format!("{how}; {why}"))
            }
            None => {
                let end = ProcessEnd::Exited {
                    ok: false,
                    how: how.clone(),
                };
                (end, how)
            }
        }
    }

    /// Settle the batch after `end` (`now`: when it ended, on its clock): the scenes it
    /// left get their outcome, the process its lane record (`restart`: which restart of
    /// its batch it was). The scenes handed back (never started, or cut short by a
    /// restart), and those a restart cut short, as frozen scene indices.
    fn finish(
        mut self,
        end: &ProcessEnd,
        how: String,
        now: f64,
        restart: u32,
    ) -> (Vec<usize>, Vec<usize>) {
        self.tail.report_unshown(self.lane, self.n, self.tx);
        // What the process said last: the cause of a crash is usually there.
        let crash_tail = log_tail(&self.log);
        let (effects, requeue) = self.machine.finish(end, now, &crash_tail);
        for e in std::mem::take(&mut self.expired).iter().chain(&effects) {
            self.emit(e);
        }
        let cut = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Scene {
                    scene,
                    verdict: AttemptOutcome::CutShort,
                    ..
                } => Some(self.batch[*scene]),
                _ => None,
            })
            .collect();
        let scenes = self.members().map(|s| s.name.clone()).collect();
        let variant = Some(self.variant()).filter(|v| !v.is_plain());
        let _ = self.tx.send(Event::Lane(LaneRecord {
            lane: self.lane.to_string(),
            devices: self.devices,
            start_secs: self.start,
            startup_secs: self.machine.startup(),
            duration_secs: now,
            restarts: restart,
            restart_reason: match end {
                ProcessEnd::Restart(why) => Some(why.clone()),
                _ => None,
            },
            variant,
            scenes,
            ended: how,
            log: self.log,
            prestarted: self.prestart.is_some(),
            startup_before_lock_secs: self.prestart.map(|(started, go)| {
                let ready = self.machine.ready_unix().unwrap_or(go);
                (ready.min(go) - started).max(0.0)
            }),
        }));
        let rest = requeue.into_iter().map(|i| self.batch[i]).collect();
        (rest, cut)
    }

    /// An adopted process ended before it was ready (the suite refused the sentinel,
    /// say): say so once, and record it; its scenes are not settled here.
    fn unready(self, ended: &std::io::Result<Ended>) {
        let how = match ended {
            Ok(e) => e.describe(),
            Err(e) => e.to_string(),
        };
        let names: Vec<String> = self.members().map(|s| s.name.clone()).collect();
        let _ = self.tx.send(Event::Warning(LaneNotice::EndedBeforeReady {
            lane: self.lane.to_string(),
            scenes: names.clone(),
            how: how.clone(),
            log: self.log.clone(),
        }));
        let (started, go) = self.prestart.unwrap_or_default();
        let _ = self.tx.send(Event::Lane(LaneRecord {
            lane: self.lane.to_string(),
            devices: self.devices,
            start_secs: self.start,
            startup_secs: None,
            duration_secs: self.t.elapsed().as_secs_f64(),
            restarts: 0,
            restart_reason: None,
            variant: Some(variant(self.cx.frozen, self.batch)).filter(|v| !v.is_plain()),
            scenes: names,
            ended: format!("ended before it was ready: {how}"),
            log: self.log,
            prestarted: true,
            startup_before_lock_secs: Some((go - started).max(0.0)),
        }));
    }

    /// Quarantine the ids a lane named (only its own; none named: all of them). A fault
    /// naming only ids the process does not hold is ignored, as its warning says: false.
    fn fault_slots(&self, named: &[String]) -> bool {
        let granted = self.cx.granted;
        let mine: Vec<usize> = self
            .slots
            .iter()
            .copied()
            .filter(|&s| named.is_empty() || named.contains(&granted[s]))
            .collect();
        let foreign: Vec<String> = named
            .iter()
            .filter(|id| !self.slots.iter().any(|&s| &granted[s] == *id))
            .cloned()
            .collect();
        if !foreign.is_empty() {
            let _ = self
                .tx
                .send(Event::Warning(LaneNotice::ForeignFault { ids: foreign }));
        }
        if mine.is_empty() {
            return false;
        }
        let _ = self.tx.send(Event::Fault { slots: mine });
        true
    }

    /// Send what an attribution effect says: a warning, or a scene's attempt with its
    /// share of the output.
    fn emit(&mut self, e: &Effect) {
        match e {
            Effect::Warn(w) => {
                let _ = self.tx.send(Event::Warning(w.clone()));
            }
            Effect::Fault { .. } | Effect::Restart { .. } => {}
            Effect::SceneOutput {
                up_to,
                failure_text,
            } => self.told = (*up_to, failure_text.clone()),
            Effect::Started { scene } => {
                let _ = self.tx.send(Event::Started {
                    scene: self.batch[*scene],
                });
            }
            Effect::Scene {
                scene,
                verdict,
                started,
                duration,
                message,
            } => {
                let outcome = *verdict;
                let (end, failure) = std::mem::take(&mut self.told);
                let mut output = output_since(&self.log, &mut self.mark, end, failure.as_deref());
                let quiet = outcome.not_a_failure() || outcome == AttemptOutcome::NotRun;
                let mut message = message.clone();
                // The scene a stop signal was sent for gets what followed it.
                let stop = self.cx.frozen.lanes[self.lane].stop;
                if let (
                    Some(stop),
                    Some(from),
                    AttemptOutcome::TimedOut | AttemptOutcome::Interrupted,
                ) = (stop, self.stopped_at, outcome)
                {
                    output = crate::device::exec::stop_output(&stop, &self.log, from);
                    message = Some(match message {
                        Some(m) => format!("{m}; {}", crate::device::exec::stop_note(&stop)),
                        None => crate::device::exec::stop_note(&stop),
                    });
                }
                let _ = self.tx.send(Event::Attempt {
                    scene: self.batch[*scene],
                    attempt: Attempt {
                        outcome,
                        devices: self.devices.clone(),
                        start_secs: self.start + started,
                        duration_secs: *duration,
                        message,
                        output_tail: (!quiet).then_some(output),
                        log: Some(self.log.clone()),
                        lane_process: Some(self.n),
                    },
                });
            }
        }
    }
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;
