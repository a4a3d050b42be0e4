//! The one accumulator of a warm: turns the executor's events into the summary, the
//! warm record's step records, history durations, the key-input records to keep, the
//! trace spans and what was published (so `run` updates its plan instead of planning
//! again). Outcome logic lives here and is unit-tested without a process.

use std::sync::Arc;
use std::time::SystemTime;

use super::events::{Event, UnitOutcome};
use crate::base::failure::{FailedStep, Failure, SkipCause, StepFailure};
use crate::base::proc;
use crate::base::record::{Outcome, Recorded, StepRecord};
use crate::cache::history::HistoryId;
use crate::cache::Entry;
use crate::plan::{Plan, Status};

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
    /// What this warm's builds took, summed over its slots (once per key).
    pub built_secs: f64,
    /// What building the entries it hit took (once per key): never more than a warm
    /// that built them spent.
    pub saved_secs: f64,
    /// Steps served by the remote cache (counted in `hits` too).
    pub remote_hits: usize,
    /// Each scene's failed steps, typed: the reporter words them.
    pub failed_scenes: Vec<FailedStep>,
    /// What the remote cache moved, when one is configured.
    pub remote: Option<crate::cache::remote::Totals>,
}

/// One unit's time on one slot, for the trace.
#[derive(Debug, Clone)]
pub struct Span {
    pub slot: usize,
    pub unit: usize,
    pub start: SystemTime,
    pub secs: f64,
    pub outcome: Outcome,
    /// Bytes downloaded from the remote cache, when it served the unit.
    pub remote_bytes: Option<u64>,
}

/// What a unit's ending means for each of its steps.
struct UnitEnd {
    outcome: Outcome,
    secs: f64,
    failure: Option<Failure>,
    tail: Option<String>,
    log: Option<std::path::PathBuf>,
    /// Its new status in the plan (`Plan::apply_warm`).
    status: Status,
    entry: Option<Arc<Entry>>,
}

#[derive(Default)]
pub struct Accumulator {
    pub summary: Summary,
    /// Each step's warm record, in event order.
    pub records: Vec<Recorded>,
    /// (step record key, seconds) of built steps.
    pub history: Vec<(String, f64)>,
    /// Steps built by this warm (their key inputs are recorded).
    pub built_steps: Vec<usize>,
    /// Per unit that ended: its new status and entry, for `Plan::apply_warm`.
    pub published: Vec<(usize, Status, Option<Arc<Entry>>)>,
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
                ..
            } => self.finished(plan, unit, slot, wall_secs, outcome),
            Event::Skipped { unit, cause } => self.skipped(plan, unit, cause),
        }
    }

    /// A unit ended: its trace span, what it published, and each of its steps' counts
    /// and records.
    fn finished(
        &mut self,
        plan: &Plan,
        unit: usize,
        slot: usize,
        wall_secs: f64,
        outcome: UnitOutcome,
    ) {
        let remote_bytes = match &outcome {
            UnitOutcome::Downloaded { bytes, .. } => Some(*bytes),
            _ => None,
        };
        let is_infra = matches!(outcome, UnitOutcome::Infra(_));
        let end = self.unit_end(outcome, wall_secs);
        if let Some(start) = self.started.remove(&unit) {
            self.spans.push(Span {
                slot,
                unit,
                start,
                secs: wall_secs,
                outcome: end.outcome,
                remote_bytes,
            });
        }
        for &si in &plan.units[unit].steps {
            self.count_step(plan, si, &end, remote_bytes.is_some());
            self.record_step(plan, si, &end);
        }
        if !is_infra {
            self.published.push((unit, end.status, end.entry));
        }
    }

    /// What a unit's outcome means for its steps; unit counts and the first cache
    /// failure are kept here.
    fn unit_end(&mut self, outcome: UnitOutcome, wall_secs: f64) -> UnitEnd {
        let hit = |secs: f64, entry: Arc<Entry>| UnitEnd {
            outcome: Outcome::Hit,
            secs,
            failure: None,
            tail: None,
            log: None,
            status: Status::Hit,
            entry: Some(entry),
        };
        match outcome {
            UnitOutcome::Built { secs, entry, .. } => {
                self.summary.units_built += 1;
                self.summary.built_secs += secs;
                UnitEnd {
                    outcome: Outcome::Built,
                    ..hit(secs, entry)
                }
            }
            UnitOutcome::Hit { entry } => {
                self.summary.units_hit += 1;
                // What building it took, recorded in the entry: once per key, however
                // many steps share it, so never more than building them did take.
                self.summary.saved_secs += entry.meta.duration_secs;
                hit(0.0, entry)
            }
            UnitOutcome::Downloaded { secs, entry, .. } => {
                self.summary.units_hit += 1;
                self.summary.saved_secs += (entry.meta.duration_secs - secs).max(0.0);
                hit(secs, entry)
            }
            UnitOutcome::Failed { cause, log } => {
                let failed = StepFailure {
                    failure: Failure::Failed(cause),
                    log_tail: Some(proc::log_tail(&log, RECORD_TAIL)),
                };
                UnitEnd {
                    outcome: Outcome::Failed,
                    secs: wall_secs,
                    failure: Some(failed.failure.clone()),
                    tail: failed.log_tail.clone(),
                    status: Status::Failed(failed),
                    log: Some(log),
                    entry: None,
                }
            }
            UnitOutcome::Infra(e) => {
                let failure = Failure::Infra(format!("{e:#}"));
                self.infra.get_or_insert(e);
                UnitEnd {
                    outcome: Outcome::Failed,
                    secs: wall_secs,
                    // Never applied to the plan: the warm stops (exit 3).
                    status: Status::Failed(StepFailure {
                        failure: failure.clone(),
                        log_tail: None,
                    }),
                    failure: Some(failure),
                    tail: None,
                    log: None,
                    entry: None,
                }
            }
        }
    }

    /// Step `si`'s part of the summary (and history, for a build).
    fn count_step(&mut self, plan: &Plan, si: usize, end: &UnitEnd, remote_hit: bool) {
        let s = &plan.steps[si];
        match end.outcome {
            Outcome::Built => {
                self.summary.built += 1;
                self.history.push((HistoryId::Step(&s.id).key(), end.secs));
                self.built_steps.push(si);
            }
            Outcome::Hit => {
                self.summary.hits += 1;
                self.summary.remote_hits += usize::from(remote_hit);
            }
            _ => {
                self.summary.failed += 1;
                if let Some(failure) = &end.failure {
                    self.summary.failed_scenes.push(FailedStep {
                        scene: s.id.scene.clone(),
                        kind: s.kind,
                        name: s.name.clone(),
                        failure: failure.clone(),
                    });
                }
            }
        }
    }

    /// Step `si`'s warm record: the loaded one again when a hit would record the same
    /// (a no-op warm, every step: not built again to be compared), else a new one.
    fn record_step(&mut self, plan: &Plan, si: usize, end: &UnitEnd) {
        let s = &plan.steps[si];
        let at = self.records.len();
        let loaded = plan.record.steps.get(at);
        if end.outcome == Outcome::Hit
            && loaded.is_some_and(|r| r.is_hit_of(&s.id, &s.key, end.secs))
        {
            self.records.push(Recorded::Same(at));
            return;
        }
        let log = match end.outcome {
            // Nothing ran for a hit in this warm: no log of it to name.
            Outcome::Hit => None,
            // The unit's command ran as its first step, in that step's log.
            _ => end
                .log
                .clone()
                .or_else(|| {
                    let builder = &plan.steps[plan.units[s.unit].steps[0]];
                    Some(builder.id.log_path(&plan.job_dir))
                })
                .filter(|l| {
                    crate::base::fsutil::node(l).ok() == Some(crate::base::fsutil::Node::File)
                }),
        };
        self.records.push(Recorded::New(StepRecord {
            kind: s.kind,
            scene: s.id.scene.clone(),
            name: s.name.clone(),
            key: s.key.clone(),
            outcome: end.outcome,
            duration_secs: end.secs,
            log: log.map(|l| l.display().to_string()),
            failure: end.failure.clone(),
            log_tail: end.tail.clone(),
        }));
    }

    /// A unit skipped (a dependency failed): failed-in-warm for the device phase, and a
    /// skipped record per step.
    fn skipped(&mut self, plan: &Plan, unit: usize, cause: SkipCause) {
        let SkipCause::DependencyFailed = cause;
        let skipped = StepFailure {
            failure: Failure::Skipped(cause),
            log_tail: None,
        };
        self.published.push((unit, Status::Failed(skipped), None));
        for &si in &plan.units[unit].steps {
            let s = &plan.steps[si];
            self.summary.skipped += 1;
            self.records.push(Recorded::New(StepRecord {
                kind: s.kind,
                scene: s.id.scene.clone(),
                name: s.name.clone(),
                key: s.key.clone(),
                outcome: Outcome::Skipped,
                duration_secs: 0.0,
                log: None,
                failure: Some(Failure::Skipped(cause)),
                log_tail: None,
            }));
        }
    }

    /// The failed scenes, once each, sorted.
    pub fn finish(&mut self, wall_secs: f64) {
        self.summary.wall_secs = wall_secs;
        // By scene, then as the summary words them (the text the reporter prints).
        self.summary
            .failed_scenes
            .sort_by_cached_key(|f| (f.scene.clone(), f.to_string()));
        self.summary.failed_scenes.dedup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::failure::FailCause;
    use crate::base::record::WarmRecord;
    use crate::cache::Kind;
    use crate::plan::Lookups;
    use crate::warm::events::Event;
    use std::path::PathBuf;
    use std::time::Duration;

    use crate::warm::testing::{entry, plan, unit_of};

    #[test]
    fn a_shared_unit_counts_per_step_and_a_failure_skips_its_golden() {
        let (_d, p) = plan();
        assert_eq!((p.steps.len(), p.units.len()), (6, 5));
        let mut acc = Accumulator::new(&p);
        let k = unit_of(&p, Kind::Kernel, "a");
        let fa = unit_of(&p, Kind::Fixture, "a");
        let ga = unit_of(&p, Kind::Golden, "a");
        let fb = unit_of(&p, Kind::Fixture, "b");
        let at = SystemTime::now();
        acc.on(
            &p,
            Event::Started {
                unit: k,
                slot: 1,
                at,
            },
        );
        acc.on(
            &p,
            Event::Finished {
                unit: k,
                slot: 1,
                wall_secs: 2.5,
                input_changed: None,
                worker: None,
                outcome: UnitOutcome::Built {
                    secs: 2.0,
                    entry: entry(Kind::Kernel),
                    sent: 0,
                },
            },
        );
        acc.on(
            &p,
            Event::Finished {
                unit: fa,
                slot: 0,
                wall_secs: 4.0,
                input_changed: None,
                worker: None,
                outcome: UnitOutcome::Failed {
                    cause: FailCause::TimedOut {
                        limit: Duration::from_secs(4),
                    },
                    log: PathBuf::from("/nowhere/fixture.log"),
                },
            },
        );
        acc.on(
            &p,
            Event::Skipped {
                unit: ga,
                cause: SkipCause::DependencyFailed,
            },
        );
        acc.on(
            &p,
            Event::Finished {
                unit: fb,
                slot: 0,
                wall_secs: 0.0,
                input_changed: None,
                worker: None,
                outcome: UnitOutcome::Hit {
                    entry: entry(Kind::Fixture),
                },
            },
        );
        acc.finish(9.0);
        let s = &acc.summary;
        // The shared kernel: two steps built from one unit.
        assert_eq!((s.built, s.hits, s.failed, s.skipped), (2, 1, 1, 1));
        assert_eq!((s.units, s.units_built, s.units_hit), (5, 1, 1));
        assert_eq!(acc.history.len(), 2);
        assert_eq!(acc.history[0], ("kernel/a/k".to_string(), 2.0));
        assert_eq!(acc.built_steps.len(), 2);
        // A failure keeps its real duration and its cause, with the limit.
        let f = acc
            .records
            .iter()
            .find_map(|r| match r {
                Recorded::New(r) if r.kind == Kind::Fixture && r.scene == "a" => Some(r),
                _ => None,
            })
            .unwrap();
        assert_eq!(f.duration_secs, 4.0);
        let timed_out = Failure::Failed(FailCause::TimedOut {
            limit: Duration::from_secs(4),
        });
        assert_eq!(f.failure, Some(timed_out.clone()));
        assert_eq!(
            s.failed_scenes,
            [FailedStep {
                scene: "a".into(),
                kind: Kind::Fixture,
                name: "fixture".into(),
                failure: timed_out.clone(),
            }]
        );
        assert_eq!(
            s.failed_scenes[0].to_string(),
            "fixture fixture: timed out after 4.0s (its timeout; process group killed)"
        );
        // What the device phase will see.
        let status = |u: usize| {
            acc.published
                .iter()
                .find(|(x, ..)| *x == u)
                .map(|(_, s, e)| (s.word(), e.is_some()))
        };
        assert_eq!(status(k), Some(("hit", true)));
        assert_eq!(status(fa), Some(("failed-in-warm", false)));
        assert_eq!(status(ga), Some(("failed-in-warm", false)));
        assert_eq!(status(fb), Some(("hit", true)));
        // Typed, as the warm record keeps it.
        let failed = |u: usize| {
            acc.published.iter().find_map(|(x, s, _)| match s {
                Status::Failed(f) if *x == u => Some(f.failure.clone()),
                _ => None,
            })
        };
        assert_eq!(failed(fa), Some(timed_out));
        assert_eq!(
            failed(ga),
            Some(Failure::Skipped(SkipCause::DependencyFailed))
        );
        // The trace has a span only where a start was seen.
        assert_eq!(acc.spans.len(), 1);
        assert_eq!((acc.spans[0].slot, acc.spans[0].secs), (1, 2.5));
    }

    #[test]
    fn a_download_is_a_hit_counted_as_remote_and_a_rerun_publishes_its_entry() {
        let (_d, p) = plan();
        let mut acc = Accumulator::new(&p);
        let k = unit_of(&p, Kind::Kernel, "a");
        let fa = unit_of(&p, Kind::Fixture, "a");
        acc.on(
            &p,
            Event::Finished {
                unit: k,
                slot: 0,
                wall_secs: 0.3,
                outcome: UnitOutcome::Downloaded {
                    secs: 0.2,
                    bytes: 4096,
                    entry: entry(Kind::Kernel),
                },
                input_changed: None,
                worker: None,
            },
        );
        // An input changed during the fixture: what is reported is its rerun's build.
        acc.on(
            &p,
            Event::Finished {
                unit: fa,
                slot: 1,
                wall_secs: 1.0,
                outcome: UnitOutcome::Built {
                    secs: 0.5,
                    entry: entry(Kind::Fixture),
                    sent: 0,
                },
                input_changed: Some("data.txt".into()),
                worker: None,
            },
        );
        acc.finish(1.0);
        let s = &acc.summary;
        // The shared kernel: both scenes' steps came down once.
        assert_eq!((s.built, s.hits, s.remote_hits, s.units_hit), (1, 2, 2, 1));
        assert!(acc.history.iter().all(|(id, _)| id == "fixture/a/fixture"));
        assert_eq!(acc.published.len(), 2);
        assert!(acc
            .published
            .iter()
            .all(|(_, st, e)| st.is_hit() && e.is_some()));
    }

    /// Every unit of `p` a hit, in unit order.
    fn all_hits(p: &Plan, kernel_secs: f64) -> Accumulator {
        let mut acc = Accumulator::new(p);
        for unit in 0..p.units.len() {
            let kind = p.steps[p.units[unit].steps[0]].kind;
            let outcome = match kind {
                Kind::Kernel if kernel_secs > 0.0 => UnitOutcome::Downloaded {
                    secs: kernel_secs,
                    bytes: 1,
                    entry: entry(kind),
                },
                _ => UnitOutcome::Hit { entry: entry(kind) },
            };
            acc.on(
                p,
                Event::Finished {
                    unit,
                    slot: 0,
                    wall_secs: 0.0,
                    outcome,
                    input_changed: None,
                    worker: None,
                },
            );
        }
        acc
    }

    #[test]
    fn a_hit_recorded_alike_last_time_is_kept_by_its_place_and_anything_else_is_new() {
        let (d, p) = plan();
        std::fs::create_dir_all(&p.job_dir).unwrap();
        let first = all_hits(&p, 0.0);
        assert!(first.records.iter().all(|r| matches!(r, Recorded::New(_))));
        WarmRecord::merge_and_save(&p.job_dir, &p.record, first.records).unwrap();

        let m = crate::manifest::load(&d.path().join("scenes.yaml")).unwrap();
        let memo = crate::plan::stat_memo(&m.dir);
        let again = Plan::build(m, &Default::default(), None, memo, Lookups::Look).unwrap();
        assert_eq!(again.record.steps.len(), 6);
        let same = all_hits(&again, 0.0);
        let want: Vec<Recorded> = (0..6).map(Recorded::Same).collect();
        assert_eq!(same.records, want);
        // The shared kernel came down from the remote cache this time: its two records
        // change, the others do not.
        let changed = all_hits(&again, 0.5);
        let new = changed
            .records
            .iter()
            .filter(|r| matches!(r, Recorded::New(r) if r.kind == Kind::Kernel))
            .count();
        assert_eq!((new, changed.records.len()), (2, 6));
    }

    #[test]
    fn a_cache_failure_is_kept_once_and_publishes_nothing() {
        let (_d, p) = plan();
        let mut acc = Accumulator::new(&p);
        for u in 0..2 {
            acc.on(
                &p,
                Event::Finished {
                    unit: u,
                    slot: 0,
                    wall_secs: 0.1,
                    input_changed: None,
                    worker: None,
                    outcome: UnitOutcome::Infra(anyhow::anyhow!("disk full {u}")),
                },
            );
        }
        assert_eq!(format!("{}", acc.infra.unwrap()), "disk full 0");
        assert!(acc.published.is_empty());
    }
}
