//! The warm executor: a pool of `-j` worker slots that build units, driven by the pure
//! scheduler (`sched`). It knows nothing of output or records: it emits typed `Event`s,
//! in order, to one callback on the calling thread. Nothing new starts once the cache
//! has failed or a signal arrived; what is running finishes (or is killed) first.
//!
//! Units the plan already found as hits are first settled in one batch (`settle`, on
//! `-j` threads that each take runs of units, no hand-off per unit): a no-op warm is
//! thousands of hits, and a thread round trip per hit cost as much as the check itself.
//! A unit is settled only when its dependencies were too; every other unit (a miss, a
//! hit that no longer checks out) goes to the pool as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use super::events::{Event, UnitEnd, UnitOutcome};
use super::sched;
use crate::base::failure::SkipCause;
use crate::base::proc;
use crate::plan::Plan;

enum Msg {
    Started {
        unit: usize,
        slot: usize,
        at: SystemTime,
    },
    Done {
        unit: usize,
        slot: usize,
        wall_secs: f64,
        end: UnitEnd,
    },
}

/// The scheduler's view of the plan's units: estimates, resources, dependencies.
pub fn tasks(plan: &Plan) -> Vec<sched::Task> {
    let known: Vec<f64> = plan.steps.iter().filter_map(|s| s.estimate).collect();
    let mean = if known.is_empty() {
        1.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    plan.units
        .iter()
        .map(|u| {
            let s = &plan.steps[u.steps[0]];
            sched::Task {
                estimate: if s.status.is_hit() {
                    0.0
                } else {
                    s.estimate.unwrap_or(mean)
                },
                threads: s.threads as usize,
                memory: s.memory,
                deps: u.deps.clone(),
            }
        })
        .collect()
}

/// What settling one unit in the batch gave: when it started, its wall time, its end.
type Settled = (SystemTime, f64, UnitEnd);

/// Units taken at a time by a batch thread (one atomic add per run, not per unit).
const BATCH_RUN: usize = 32;

/// Try `settle` on every unit, on `jobs` threads; `None` where it declined (or a signal
/// arrived first).
fn settle_batch(
    plan: &Plan,
    jobs: usize,
    settle: &(dyn Fn(&Plan, usize) -> Option<UnitEnd> + Sync),
) -> Vec<Option<(usize, Settled)>> {
    let n = plan.units.len();
    let next = AtomicUsize::new(0);
    let work = |slot: usize| {
        let mut got = Vec::new();
        loop {
            let from = next.fetch_add(BATCH_RUN, Ordering::Relaxed);
            if from >= n || proc::interrupted() {
                break;
            }
            for unit in from..(from + BATCH_RUN).min(n) {
                let at = SystemTime::now();
                let t0 = Instant::now();
                if let Some(end) = settle(plan, unit) {
                    got.push((unit, (slot, (at, t0.elapsed().as_secs_f64(), end))));
                }
            }
        }
        got
    };
    let threads = jobs.clamp(1, n.div_ceil(BATCH_RUN).max(1));
    let parts: Vec<_> = if threads == 1 {
        vec![work(0)]
    } else {
        std::thread::scope(|scope| {
            let work = &work;
            let handles: Vec<_> = (1..threads)
                .map(|slot| scope.spawn(move || work(slot)))
                .collect();
            let mut parts = vec![work(0)];
            parts.extend(handles.into_iter().map(|h| h.join().expect("batch thread")));
            parts
        })
    };
    let mut out: Vec<Option<(usize, Settled)>> = (0..n).map(|_| None).collect();
    for (unit, done) in parts.into_iter().flatten() {
        out[unit] = Some(done);
    }
    out
}

/// What each slot thread builds with: `S` is made on the slot's thread when it starts
/// (`new`, given the slot's number) and dropped there when the pool ends (warm workers
/// live in it: started lazily, stopped with their slot).
pub struct Builder<'a, S> {
    pub new: &'a (dyn Fn(usize) -> S + Sync),
    pub build: &'a (dyn Fn(&Plan, usize, &mut S) -> UnitEnd + Sync),
}

/// Run every unit of `plan` with `build` on `jobs` slots, within `memory`; emit events.
/// `settle` ends a unit without the pool when it can (a hit the plan saw, still whole).
pub fn execute<S>(
    plan: &Plan,
    jobs: usize,
    memory: u64,
    build: Builder<S>,
    settle: &(dyn Fn(&Plan, usize) -> Option<UnitEnd> + Sync),
    on_event: &mut dyn FnMut(Event),
) {
    let mut scheduler = sched::Scheduler::new(tasks(plan), jobs, memory);
    let mut skipped = vec![false; plan.units.len()];
    let (done, stop) = emit_settled(plan, jobs, settle, on_event);
    let newly_skipped = scheduler.settle(&done);
    skip(&mut skipped, newly_skipped, on_event);
    if done.len() == plan.units.len() {
        return;
    }
    let mut pool = Pool {
        plan,
        scheduler,
        skipped,
        stop,
        clock: Instant::now(),
    };
    pool.run(jobs, build, on_event);
}

/// Settle what can be settled without the pool (one batch over the slots), and emit
/// each such unit's start and finish. A settled unit counts only if every unit it needs
/// was settled too (otherwise it waits for them in the pool, where it is checked
/// again). The units done, with whether each succeeded, and whether an infrastructure
/// failure stops the warm.
fn emit_settled(
    plan: &Plan,
    jobs: usize,
    settle: &(dyn Fn(&Plan, usize) -> Option<UnitEnd> + Sync),
    on_event: &mut dyn FnMut(Event),
) -> (Vec<(usize, bool)>, bool) {
    let mut batch = settle_batch(plan, jobs, settle);
    let mut accepted: Vec<Option<bool>> = vec![None; plan.units.len()];
    fn accept(
        u: usize,
        plan: &Plan,
        batch: &[Option<(usize, Settled)>],
        memo: &mut [Option<bool>],
    ) -> bool {
        if let Some(a) = memo[u] {
            return a;
        }
        let a = batch[u].is_some()
            && plan.units[u]
                .deps
                .iter()
                .all(|&d| accept(d, plan, batch, memo));
        memo[u] = Some(a);
        a
    }
    let mut done = Vec::new();
    let mut stop = false;
    for u in 0..plan.units.len() {
        if !accept(u, plan, &batch, &mut accepted) {
            continue;
        }
        let Some((slot, (at, wall_secs, end))) = batch[u].take() else {
            continue;
        };
        let ok = end.outcome.ok();
        stop |= matches!(end.outcome, UnitOutcome::Infra(_));
        on_event(Event::Started { unit: u, slot, at });
        on_event(Event::Finished {
            unit: u,
            slot,
            wall_secs,
            outcome: end.outcome,
            input_changed: end.input_changed,
            worker: end.worker,
        });
        done.push((u, ok));
    }
    (done, stop)
}

/// Emit `Skipped` once for each of `units` (a unit whose dependency failed).
fn skip(skipped: &mut [bool], units: Vec<usize>, on_event: &mut dyn FnMut(Event)) {
    for u in units {
        if !std::mem::replace(&mut skipped[u], true) {
            on_event(Event::Skipped {
                unit: u,
                cause: SkipCause::DependencyFailed,
            });
        }
    }
}

/// The units left for the slots: the scheduler picks what runs next; an
/// infrastructure failure (or an interrupt) starts nothing more.
struct Pool<'a> {
    plan: &'a Plan,
    scheduler: sched::Scheduler,
    skipped: Vec<bool>,
    stop: bool,
    /// The scheduler's clock (its decisions take the time as a number).
    clock: Instant,
}

impl Pool<'_> {
    /// Run the units on `jobs` slot threads, emitting each unit's start and finish and
    /// the units skipped after a failure, until nothing is in flight.
    fn run<S>(&mut self, jobs: usize, build: Builder<S>, on_event: &mut dyn FnMut(Event)) {
        let plan = self.plan;
        let (job_tx, job_rx) = mpsc::channel::<usize>();
        let job_rx = Arc::new(Mutex::new(job_rx));
        let (msg_tx, msg_rx) = mpsc::channel::<Msg>();
        std::thread::scope(|scope| {
            for slot in 0..jobs.max(1) {
                let rx = job_rx.clone();
                let tx = msg_tx.clone();
                let (new, build) = (build.new, build.build);
                scope.spawn(move || slot_loop(plan, slot, (new(slot), build), &rx, &tx));
            }
            drop(msg_tx);
            let mut in_flight = 0usize;
            loop {
                if !self.stop && !proc::interrupted() {
                    let now = self.clock.elapsed().as_secs_f64();
                    while let Some(u) = self.scheduler.next_task(now) {
                        in_flight += 1;
                        let _ = job_tx.send(u);
                    }
                }
                if in_flight == 0 {
                    break;
                }
                let Ok(msg) = msg_rx.recv() else { break };
                if let Msg::Done { .. } = msg {
                    in_flight -= 1;
                }
                self.on_msg(msg, on_event);
            }
            drop(job_tx);
        });
    }

    /// What a slot said: a unit started, or ended (which may skip its dependents).
    fn on_msg(&mut self, msg: Msg, on_event: &mut dyn FnMut(Event)) {
        match msg {
            Msg::Started { unit, slot, at } => on_event(Event::Started { unit, slot, at }),
            Msg::Done {
                unit,
                slot,
                wall_secs,
                end:
                    UnitEnd {
                        outcome,
                        input_changed,
                        worker,
                    },
            } => {
                self.stop |= matches!(outcome, UnitOutcome::Infra(_));
                let newly_skipped = self.scheduler.finish(unit, outcome.ok());
                on_event(Event::Finished {
                    unit,
                    slot,
                    wall_secs,
                    outcome,
                    input_changed,
                    worker,
                });
                skip(&mut self.skipped, newly_skipped, on_event);
            }
        }
    }
}

/// One slot: take a unit, say it started, build it (with the slot's own state), say how
/// it ended. The state is dropped here, on the slot's thread, when the pool ends.
type SlotBuild<'a, S> = (S, &'a (dyn Fn(&Plan, usize, &mut S) -> UnitEnd + Sync));

fn slot_loop<S>(
    plan: &Plan,
    slot: usize,
    (mut state, build): SlotBuild<S>,
    rx: &Mutex<mpsc::Receiver<usize>>,
    tx: &mpsc::Sender<Msg>,
) {
    loop {
        let next = rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .recv();
        let Ok(unit) = next else { break };
        let t0 = Instant::now();
        let _ = tx.send(Msg::Started {
            unit,
            slot,
            at: SystemTime::now(),
        });
        let end = build(plan, unit, &mut state);
        let done = Msg::Done {
            unit,
            slot,
            wall_secs: t0.elapsed().as_secs_f64(),
            end,
        };
        if tx.send(done).is_err() {
            break;
        }
    }
}
