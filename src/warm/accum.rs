//! The one accumulator of a warm: turns the executor's events into the summary, the
//! warm record's step records, history durations, the key-input records to keep, the
//! trace spans and what was published (so `run` updates its plan instead of planning
//! again). Outcome logic lives here and is unit-tested without a process.

use std::time::SystemTime;

use super::events::{Event, FailCause, SkipCause, UnitOutcome};
use super::record::{Outcome, StepRecord};
use crate::cache::Entry;
use crate::plan::{Plan, Status};
use crate::proc;

/// Bytes of a failed step's log kept in the warm record.
const RECORD_TAIL: usize = 4000;

/// What one warm did. Step counts count every scene's step; unit counts count unique
/// artifacts (scenes share identical kernels).
#[derive(Debug, Default)]
pub struct Summary {
    pub built: usize,
    pub hits: usize,
    pub failed: usize,
    pub skipped: usize,
    pub units: usize,
    pub units_built: usize,
    pub units_hit: usize,
    pub wall_secs: f64,
    pub saved_secs: f64,
    /// (scene, why)
    pub failed_scenes: Vec<(String, String)>,
}

/// One unit's time on one slot, for the trace.
#[derive(Debug, Clone)]
pub struct Span {
    pub slot: usize,
    pub unit: usize,
    pub start: SystemTime,
    pub secs: f64,
    pub outcome: Outcome,
}

#[derive(Default)]
pub struct Accumulator {
    pub summary: Summary,
    pub records: Vec<StepRecord>,
    /// (step record key, seconds) of built steps.
    pub history: Vec<(String, f64)>,
    /// Steps built by this warm (their key inputs are recorded).
    pub built_steps: Vec<usize>,
    /// Per unit that ended: its new status and entry, for `Plan::apply_warm`.
    pub published: Vec<(usize, Status, Option<Entry>)>,
    pub spans: Vec<Span>,
    /// The first cache failure: the warm exits 3 after recording what it knows.
    pub infra: Option<anyhow::Error>,
    started: std::collections::HashMap<usize, SystemTime>,
}

impl Accumulator {
    pub fn new(plan: &Plan) -> Accumulator {
        Accumulator {
            summary: Summary {
                units: plan.units.len(),
                ..Summary::default()
            },
            ..Accumulator::default()
        }
    }

    pub fn on(&mut self, plan: &Plan, ev: Event) {
        match ev {
            Event::Started { unit, at, .. } => {
                self.started.insert(unit, at);
            }
            Event::Finished {
                unit,
                slot,
                wall_secs,
                outcome,
            } => {
                let is_infra = matches!(outcome, UnitOutcome::Infra(_));
                let (kind, secs, error, tail, log, status, entry) = match outcome {
                    UnitOutcome::Built { secs, entry } => {
                        self.summary.units_built += 1;
                        (
                            Outcome::Built,
                            secs,
                            None,
                            None,
                            None,
                            Status::Hit,
                            Some(entry),
                        )
                    }
                    UnitOutcome::Hit { entry } => {
                        self.summary.units_hit += 1;
                        (
                            Outcome::Hit,
                            0.0,
                            None,
                            None,
                            None,
                            Status::Hit,
                            Some(entry),
                        )
                    }
                    UnitOutcome::Failed { cause, log } => {
                        let tail = proc::log_tail(&log, RECORD_TAIL);
                        let status = Status::Failed(failure_text(&cause, &tail));
                        let why = cause.to_string();
                        (
                            Outcome::Failed,
                            wall_secs,
                            Some(why),
                            Some(tail),
                            Some(log),
                            status,
                            None,
                        )
                    }
                    UnitOutcome::Infra(e) => {
                        let msg = format!("{e:#}");
                        self.infra.get_or_insert(e);
                        (
                            Outcome::Failed,
                            wall_secs,
                            Some(msg),
                            None,
                            None,
                            Status::Failed(String::new()),
                            None,
                        )
                    }
                };
                if let Some(start) = self.started.remove(&unit) {
                    self.spans.push(Span {
                        slot,
                        unit,
                        start,
                        secs: wall_secs,
                        outcome: kind,
                    });
                }
                if !is_infra {
                    self.published.push((unit, status, entry));
                }
                for &si in &plan.units[unit].steps {
                    let s = &plan.steps[si];
                    match kind {
                        Outcome::Built => {
                            self.summary.built += 1;
                            self.history.push((s.id.record_key(), secs));
                            self.built_steps.push(si);
                        }
                        Outcome::Hit => {
                            self.summary.hits += 1;
                            self.summary.saved_secs += s.estimate.unwrap_or(0.0);
                        }
                        _ => {
                            self.summary.failed += 1;
                            self.summary.failed_scenes.push((
                                s.id.scene.clone(),
                                format!(
                                    "{} {}: {}",
                                    s.label(),
                                    s.name,
                                    error.as_deref().unwrap_or("")
                                ),
                            ));
                        }
                    }
                    let log = log.clone().unwrap_or_else(|| s.id.log_path(&plan.job_dir));
                    self.records.push(StepRecord {
                        kind: s.kind,
                        scene: s.id.scene.clone(),
                        name: s.name.clone(),
                        key: s.key.clone(),
                        outcome: kind,
                        duration_secs: secs,
                        log: Some(log.display().to_string()),
                        error: error.clone(),
                        log_tail: tail.clone(),
                    });
                }
            }
            Event::Skipped { unit, cause } => {
                let SkipCause::DependencyFailed = cause;
                self.published
                    .push((unit, Status::Failed(cause.to_string()), None));
                for &si in &plan.units[unit].steps {
                    let s = &plan.steps[si];
                    self.summary.skipped += 1;
                    self.records.push(StepRecord {
                        kind: s.kind,
                        scene: s.id.scene.clone(),
                        name: s.name.clone(),
                        key: s.key.clone(),
                        outcome: Outcome::Skipped,
                        duration_secs: 0.0,
                        log: None,
                        error: Some(cause.to_string()),
                        log_tail: None,
                    });
                }
            }
        }
    }

    /// The failed scenes, once each, sorted.
    pub fn finish(&mut self, wall_secs: f64) {
        self.summary.wall_secs = wall_secs;
        self.summary.failed_scenes.sort();
        self.summary.failed_scenes.dedup();
    }
}

/// The failure as the device phase shows it: the cause, then the log's tail.
fn failure_text(cause: &FailCause, tail: &str) -> String {
    let mut msg = cause.to_string();
    if !tail.trim().is_empty() {
        msg.push('\n');
        msg.push_str(tail.trim_end());
    }
    msg
}
