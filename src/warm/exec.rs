//! The warm executor: a pool of `-j` worker slots that build units, driven by the pure
//! scheduler (`sched`). It knows nothing of output or records: it emits typed `Event`s,
//! in order, to one callback on the calling thread. Nothing new starts once the cache
//! has failed or a signal arrived; what is running finishes (or is killed) first.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use super::events::{Event, SkipCause, UnitEnd, UnitOutcome};
use super::sched;
use crate::plan::Plan;
use crate::proc;

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

/// Run every unit of `plan` with `build` on `jobs` slots, within `memory`; emit events.
pub fn execute(
    plan: &Plan,
    jobs: usize,
    memory: u64,
    build: &(dyn Fn(&Plan, usize) -> UnitEnd + Sync),
    on_event: &mut dyn FnMut(Event),
) {
    let mut scheduler = sched::Scheduler::new(tasks(plan), jobs, memory);
    let (job_tx, job_rx) = mpsc::channel::<usize>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let (msg_tx, msg_rx) = mpsc::channel::<Msg>();
    let mut stop = false;
    std::thread::scope(|scope| {
        for slot in 0..jobs.max(1) {
            let rx = job_rx.clone();
            let tx = msg_tx.clone();
            scope.spawn(move || loop {
                let next = rx.lock().expect("job queue").recv();
                let Ok(unit) = next else { break };
                let t0 = Instant::now();
                let _ = tx.send(Msg::Started {
                    unit,
                    slot,
                    at: SystemTime::now(),
                });
                let end = build(plan, unit);
                let done = Msg::Done {
                    unit,
                    slot,
                    wall_secs: t0.elapsed().as_secs_f64(),
                    end,
                };
                if tx.send(done).is_err() {
                    break;
                }
            });
        }
        drop(msg_tx);
        let mut in_flight = 0usize;
        let mut skipped = vec![false; plan.units.len()];
        loop {
            if !stop && !proc::interrupted() {
                while let Some(u) = scheduler.next_task() {
                    in_flight += 1;
                    let _ = job_tx.send(u);
                }
            }
            if in_flight == 0 {
                break;
            }
            let Ok(msg) = msg_rx.recv() else { break };
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
                        },
                } => {
                    in_flight -= 1;
                    stop |= matches!(outcome, UnitOutcome::Infra(_));
                    let newly_skipped = scheduler.finish(unit, outcome.ok());
                    on_event(Event::Finished {
                        unit,
                        slot,
                        wall_secs,
                        outcome,
                        input_changed,
                    });
                    for u in newly_skipped {
                        if !std::mem::replace(&mut skipped[u], true) {
                            on_event(Event::Skipped {
                                unit: u,
                                cause: SkipCause::DependencyFailed,
                            });
                        }
                    }
                }
            }
        }
        drop(job_tx);
    });
}
