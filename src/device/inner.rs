//! The inner run, inside the lock: read the granted ids, re-check artifacts by `stat`,
//! pack scenes onto the ids and run their device steps. It reads only the frozen plan:
//! it never parses the manifest, hashes a source, runs an identity command, compiles,
//! generates or computes a golden.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::events::{self, Accumulator, Attempt, AttemptOutcome, Event, FollowUp, Outcome};
use super::exec::{self, Cx, FaultRules};
use super::live::Writer;
use super::packing::packer::Unit;
use super::packing::scheduler::{Scheduler, Start};
use super::{Frozen, Results, SceneOutcome, SceneResult};
use crate::base::exit::Exit;
use crate::base::notice::Notice;
use crate::base::proc;
use crate::manifest::Prestart;

/// `scenerun inner FROZEN`: run, write the results file, exit 0, 1, 2 or 3. `say`:
/// where what it has to say about the lock goes (report/ writes it on its stderr, which
/// the lock tool keeps).
pub fn main(frozen_path: &Path, say: fn(Notice)) -> Result<Exit> {
    let bytes = crate::base::fsutil::read_capped(frozen_path, crate::base::fsutil::Cap::DEVICE_RUN)
        .with_context(|| format!("reading the frozen plan {}", frozen_path.display()))?;
    let frozen = read_frozen(&bytes)
        .with_context(|| format!("reading the frozen plan {}", frozen_path.display()))?;
    // Held until this process exits (the kernel drops it even on SIGKILL).
    let _alive = match super::runs::claim_inner(&frozen.run_dir)? {
        super::runs::Claim::First(lock) => lock,
        super::runs::Claim::Repeat => return Ok(repeat_exit(&frozen, say)),
    };
    proc::set_grace(crate::base::units::secs(frozen.grace_secs));
    super::watch::start(&frozen, frozen_path, say);
    let granted = std::env::var(&frozen.device_env).ok();
    let ids =
        crate::base::device_ids::parse_grant(granted.as_deref().unwrap_or(""), frozen.device_count)
            .map_err(|e| {
                crate::base::device_ids::grant_error(&frozen.device_env, granted.as_deref(), &e)
            });
    let results = match ids {
        Err(why) => {
            say(Notice::GrantRefused { why: why.clone() });
            super::ending::refused(&frozen, why)
        }
        Ok(ids) => {
            let mut r = run(&frozen, ids);
            super::ending::classify(
                &frozen,
                &mut r,
                super::watch::lock_lost(),
                proc::interrupted(),
            );
            r
        }
    };
    let bytes = serde_json::to_vec_pretty(&results).expect("results serialize");
    crate::base::fsutil::write_atomic(&frozen.results, &bytes)
        .with_context(|| format!("writing {}", frozen.results.display()))?;
    if proc::interrupted() && !super::watch::lock_lost() {
        return Ok(Exit::Interrupted);
    }
    Ok(super::ending::exit_of(&results))
}

/// A second inner run of one invocation runs nothing: it says so and exits as the
/// first run's results call for (3 when there are none), so that a lock tool passing
/// on the last exit code hides nothing.
fn repeat_exit(frozen: &Frozen, say: fn(Notice)) -> Exit {
    say(Notice::InnerAgain);
    crate::base::fsutil::read_capped(&frozen.results, crate::base::fsutil::Cap::DEVICE_RUN)
        .ok()
        .and_then(|b| serde_json::from_slice::<Results>(&b).ok())
        .map(|r| super::ending::exit_of(&r))
        .unwrap_or(Exit::Infra)
}

/// A frozen plan of this scenerun's version (the outer and the inner are the same
/// binary; a plan written by another version is refused, not misread).
fn read_frozen(bytes: &[u8]) -> Result<Frozen> {
    #[derive(serde::Deserialize)]
    struct Version {
        version: u32,
    }
    let v: Version = serde_json::from_slice(bytes).context("no version")?;
    if v.version != super::FROZEN_VERSION {
        anyhow::bail!(
            "it is version {}, this scenerun reads version {}",
            v.version,
            super::FROZEN_VERSION
        );
    }
    Ok(serde_json::from_slice(bytes)?)
}

/// Each frozen scene that is settled before anything runs — failed in warm, without a
/// device step, needing more ids than granted, its artifacts gone since warm — with its
/// result; the rest are runnable, in frozen order.
struct Admitted {
    fixed: Vec<Option<SceneResult>>,
    runnable: Vec<usize>,
}

fn admit(frozen: &Frozen, granted: &[String]) -> Admitted {
    let mut fixed: Vec<Option<SceneResult>> = vec![None; frozen.scenes.len()];
    let mut runnable = Vec::new();
    for (i, s) in frozen.scenes.iter().enumerate() {
        fixed[i] = if let Some(w) = &s.warm_failure {
            Some(SceneResult::unrun(
                s,
                SceneOutcome::FailedInWarm,
                Some(w.to_string()),
            ))
        } else if let Some(v) = &s.verdict {
            Some(SceneResult {
                duration_secs: v.secs,
                log: Some(v.log.clone()),
                ..SceneResult::unrun(s, v.outcome, v.message.clone())
            })
        } else if s.device.is_none() {
            Some(SceneResult::unrun(
                s,
                SceneOutcome::Test(Outcome::Passed),
                Some("no device step".into()),
            ))
        } else if s.device().devices > granted.len() {
            Some(SceneResult::unrun(
                s,
                SceneOutcome::Test(Outcome::Failed),
                Some(format!(
                    "needs {} devices but {} granted ({})",
                    s.device().devices,
                    if granted.len() == 1 {
                        "only 1 was".to_string()
                    } else {
                        format!("only {} were", granted.len())
                    },
                    granted.join(",")
                )),
            ))
        } else if let Err(e) = super::recheck::scene(frozen, s) {
            Some(SceneResult::unrun(
                s,
                SceneOutcome::Test(Outcome::Failed),
                Some(e.to_string()),
            ))
        } else {
            runnable.push(i);
            None
        };
    }
    Admitted { fixed, runnable }
}

/// What waiting for the next event gave.
enum Wait {
    Event(Box<Event>),
    /// The results were written instead (none came within the snapshot interval).
    Snapshot,
    /// Every sender is gone.
    Closed,
}

/// One inner run's results as they accrue: the scenes settled before it, every event
/// (the accumulator), the live reporter, and when the results file was last written.
struct Run<'a> {
    frozen: &'a Frozen,
    granted: &'a [String],
    /// Unix seconds.
    started: f64,
    t0: Instant,
    fixed: Vec<Option<SceneResult>>,
    acc: Accumulator,
    live: Writer,
    /// Scenes were left unrun because no healthy id was left.
    no_healthy: bool,
    last_snapshot: Instant,
    /// Events arrived since the results file was last written.
    dirty: bool,
}

impl<'a> Run<'a> {
    /// Announce the run and the scenes settled before it.
    fn new(frozen: &'a Frozen, granted: &'a [String], fixed: Vec<Option<SceneResult>>) -> Run<'a> {
        let mut live = Writer::new(&super::live_path(&frozen.run_dir), frozen.scenes.len());
        if !granted.is_empty() {
            live.run(granted);
        }
        for (i, r) in fixed.iter().enumerate() {
            if let Some(r) = r {
                live.settled(&frozen.scenes[i].name, r.outcome, r.message.as_deref());
            }
        }
        Run {
            frozen,
            granted,
            started: super::unix_now(),
            t0: Instant::now(),
            fixed,
            acc: Accumulator::new(frozen.scenes.len()),
            live,
            no_healthy: false,
            last_snapshot: Instant::now(),
            dirty: false,
        }
    }

    /// Scenes no healthy ids are left for are not run (once an id was quarantined).
    fn drop_unfit(&mut self, sched: &mut Scheduler) {
        if self.acc.quarantined.is_empty() {
            return;
        }
        let healthy = self.granted.len() - self.acc.quarantined.len();
        for scene in sched.take_unfit(healthy) {
            self.no_healthy = true;
            let ev = Event::Attempt {
                scene,
                attempt: not_run(self.t0, "not run: no healthy device"),
            };
            self.acc.apply(&ev);
            let name = &self.frozen.scenes[scene].name;
            self.live.event(&ev, name, FollowUp::Final);
        }
    }

    /// The attempt number a job's run of `unit` is (lane processes count their own).
    fn attempt_no(&self, unit: &Unit) -> usize {
        match unit {
            Unit::Scene(i) => self.acc.attempts[*i].len() + 1,
            Unit::Lane { .. } => 0,
        }
    }

    /// The next event. Results are written at most every 100 ms (cheap for big lanes),
    /// and never left more than 100 ms behind the last event: a lock tool may kill this
    /// run any time, and what finished before must be in the file.
    fn wait(&mut self, rx: &mpsc::Receiver<Event>) -> Wait {
        if !self.dirty {
            return rx
                .recv()
                .map_or(Wait::Closed, |ev| Wait::Event(Box::new(ev)));
        }
        let wait = SNAPSHOT_EVERY.saturating_sub(self.last_snapshot.elapsed());
        match rx.recv_timeout(wait) {
            Ok(ev) => Wait::Event(Box::new(ev)),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.snapshot();
                Wait::Snapshot
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Wait::Closed,
        }
    }

    /// Take in one event: keep it, decide what follows an attempt (no retry once
    /// interrupted), show it, and tell the scheduler.
    fn on_event(&mut self, ev: Event, sched: &mut Scheduler) {
        self.dirty = true;
        self.acc.apply(&ev);
        let mut follow = FollowUp::Final;
        let mut name = "";
        if let Event::Attempt { scene, .. } = &ev {
            let s = &self.frozen.scenes[*scene];
            follow = events::follow_up(&self.acc.attempts[*scene], s.device().retries);
            // A cut-short scene's lane reports it again either way (its rerun, or "not
            // run: interrupted").
            if follow.requeues() && proc::interrupted() {
                follow = FollowUp::Final;
            }
            name = s.name.as_str();
        }
        self.live.event(&ev, name, follow);
        sched.on_event(&ev, follow, &self.acc.quarantined);
        if self.last_snapshot.elapsed() >= SNAPSHOT_EVERY {
            self.snapshot();
        }
    }

    /// Write the results so far: if the lock tool kills this run, the outer still
    /// reports what had finished.
    fn snapshot(&mut self) {
        let partial = self.results("not finished when the inner run was ended");
        if let Ok(bytes) = serde_json::to_vec_pretty(&partial) {
            let _ = crate::base::fsutil::write_atomic(&self.frozen.results, &bytes);
        }
        self.last_snapshot = Instant::now();
        self.dirty = false;
    }

    /// The results as they stand: a scene not (yet) finished is `not_run`, with
    /// `unfinished` as its message.
    fn results(&self, unfinished: &str) -> Results {
        collect(
            self.frozen,
            &self.fixed,
            &self.acc,
            self.granted,
            self.started,
            self.no_healthy,
            unfinished,
        )
    }
}

/// The scheduling loop: pack jobs (plain scenes and lane processes) onto the granted ids
/// through one packer, start them on the executor, and feed its events to the
/// accumulator, the reporter and the scheduler. Ids reported faulty are never used
/// again in this run.
pub fn run(frozen: &Frozen, granted: Vec<String>) -> Results {
    // The read-only view of the entries the outer chose (a no-op when it set it here).
    crate::base::proc::view::enter_for_children(&frozen.readonly);
    let admitted = admit(frozen, &granted);
    let mut sched = Scheduler::new(frozen, &granted, &admitted.runnable);
    let mut run = Run::new(frozen, &granted, admitted.fixed);
    let cx = Cx {
        frozen,
        granted: &granted,
        t0: run.t0,
        faults: FaultRules::new(frozen.device_fault.as_ref()),
        lane_procs: frozen.prestarted.len().into(),
    };
    // The lane processes started before the lock, for their batches to adopt.
    let pool = super::lane::adopt::Pool::claim(frozen);
    let (tx, rx) = mpsc::channel::<Event>();
    std::thread::scope(|scope| loop {
        run.drop_unfit(&mut sched);
        if !proc::interrupted() {
            for Start { job, unit, slots } in sched.start_ready() {
                let attempt_no = run.attempt_no(&unit);
                let (tx, cx, pool) = (tx.clone(), &cx, &pool);
                scope.spawn(move || match unit {
                    Unit::Scene(i) => exec::run_plain(cx, job, i, &slots, attempt_no, &tx),
                    Unit::Lane { lane, scenes } => {
                        super::lane::process::run_lane(cx, pool, job, &lane, scenes, &slots, &tx)
                    }
                });
            }
        }
        if sched.idle() {
            break;
        }
        match run.wait(&rx) {
            Wait::Event(ev) => run.on_event(*ev, &mut sched),
            Wait::Snapshot => continue,
            Wait::Closed => break,
        }
    });
    for w in pool.stop_unused() {
        run.live.event(&Event::Warning(w), "", FollowUp::Final);
    }
    run.results("interrupted")
}

/// The lane processes `scenerun device` starts before the lock when `frozen` runs on
/// `ids` ids, as the inner run's scheduler will start them (docs/lanes.md): of a
/// `prestart: true` lane those it starts at once (its first wave), of a `prestart: all`
/// lane the first process of every batch, in the order the packing simulation starts
/// them.
pub(super) fn to_prestart(frozen: &Frozen, ids: usize) -> Vec<Unit> {
    let granted: Vec<String> = (0..ids).map(|i| i.to_string()).collect();
    let admitted = admit(frozen, &granted);
    let mut sched = Scheduler::new(frozen, &granted, &admitted.runnable);
    let planned = sched.planned_order();
    let first: Vec<Unit> = sched.start_ready().into_iter().map(|s| s.unit).collect();
    let mode = |u: &Unit| match u {
        Unit::Lane { lane, .. } => frozen.lanes.get(lane).map_or(Prestart::Off, |l| l.prestart),
        Unit::Scene(_) => Prestart::Off,
    };
    // The first wave first, then the later ones in planned order.
    let later: Vec<Unit> = planned.into_iter().filter(|u| !first.contains(u)).collect();
    let first_wave = first.into_iter().map(|u| (u, true));
    first_wave
        .chain(later.into_iter().map(|u| (u, false)))
        .filter(|(u, in_first)| mode(u).before_lock(*in_first))
        .map(|(u, _)| u)
        .collect()
}

fn not_run(t0: Instant, why: &str) -> Attempt {
    Attempt::unrun(
        AttemptOutcome::NotRun,
        Vec::new(),
        t0.elapsed().as_secs_f64(),
        why,
    )
}

/// The results as they stand: a scene not (yet) finished is `not_run`, with `unfinished`
/// as its message.
fn collect(
    frozen: &Frozen,
    fixed: &[Option<SceneResult>],
    acc: &Accumulator,
    granted: &[String],
    started: f64,
    no_healthy: bool,
    unfinished: &str,
) -> Results {
    let scenes = frozen
        .scenes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if let Some(r) = &fixed[i] {
                return r.clone();
            }
            let attempts = &acc.attempts[i];
            let mut r = SceneResult::unrun(s, SceneOutcome::of(attempts), None);
            if let Some(last) = attempts.last() {
                r.devices = last.devices.clone();
                r.start_secs = last.start_secs;
                r.duration_secs = last.duration_secs;
                r.message = last.message.clone();
                r.log = last.log.clone();
                r.log_tail = last.output_tail.clone();
            } else {
                r.message = Some(unfinished.into());
            }
            // Running now: if this snapshot is the last one (the lock tool killed the
            // run), the scene was cut short, not left unrun.
            if acc.running.contains(&i) {
                r.outcome = SceneOutcome::Interrupted;
                r.message = Some(RUNNING_WHEN_ENDED.into());
            }
            r.attempts = attempts.clone();
            r
        })
        .collect();
    let (busy, used, startup) = acc.timings();
    let mut lanes = acc.lanes.clone();
    lanes.sort_by(|a, b| a.start_secs.total_cmp(&b.start_secs));
    Results {
        version: super::RESULTS_VERSION,
        granted: granted.to_vec(),
        started,
        ended: super::unix_now(),
        busy_secs: busy,
        device_secs_used: used,
        scenes,
        infra_error: None,
        lanes,
        startup_secs: startup,
        quarantined: acc
            .quarantined
            .iter()
            .map(|&s| granted[s].clone())
            .collect(),
        no_healthy_device: no_healthy,
    }
}

/// The message of a scene a results snapshot found running.
const RUNNING_WHEN_ENDED: &str = "interrupted: it was running when the inner run was ended";

/// How often the results file is rewritten while scenes run.
const SNAPSHOT_EVERY: Duration = Duration::from_millis(100);

pub fn log_path(frozen: &Frozen, scene: &str) -> std::path::PathBuf {
    frozen
        .report_dir
        .join("logs")
        .join(scene)
        .join("device.log")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::failure::{FailCause, Failure, StepFailure, WarmFailure, WarmWhy};
    use crate::cache::FileRecord;
    use crate::device::testing::{frozen, in_lane, plain};
    use crate::device::Artifact;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| i.to_string()).collect()
    }

    fn attempt(outcome: AttemptOutcome, devices: &[&str]) -> Attempt {
        Attempt {
            devices: devices.iter().map(|d| d.to_string()).collect(),
            ..not_run(Instant::now(), "")
        }
        .with(outcome)
    }

    impl Attempt {
        fn with(mut self, outcome: AttemptOutcome) -> Attempt {
            self.outcome = outcome;
            self
        }
    }

    #[test]
    fn admit_settles_what_cannot_run_and_keeps_the_rest_in_order() {
        let t = tempfile::tempdir().unwrap();
        let mut warm_failed = plain("warm_failed", 1, false, 1.0);
        warm_failed.warm_failure = Some(WarmFailure {
            kind: crate::base::stepid::Kind::Kernel,
            name: "k".into(),
            why: WarmWhy::Step(StepFailure {
                failure: Failure::Failed(FailCause::Exited { status: 1 }),
                log_tail: None,
            }),
        });
        let mut no_device = plain("no_device", 1, false, 1.0);
        no_device.device = None;
        let mut gone = plain("gone", 1, false, 1.0);
        gone.fixture = Some(Artifact {
            name: "fixture".into(),
            key: "k".into(),
            out: t.path().join("nowhere"),
            files: vec![FileRecord::new(String::new(), 3, "b".into())],
        });
        let f = frozen(
            t.path(),
            vec![
                warm_failed,
                plain("a", 1, false, 1.0),
                no_device,
                plain("wide", 3, false, 1.0),
                gone,
                plain("b", 2, false, 1.0),
            ],
        );
        let Admitted { fixed, runnable } = admit(&f, &ids(2));
        assert_eq!(runnable, [1, 5]);
        let outcome = |i: usize| fixed[i].as_ref().map(|r| r.outcome);
        assert_eq!(outcome(0), Some(SceneOutcome::FailedInWarm));
        let message = |i: usize| fixed[i].as_ref().and_then(|r| r.message.as_deref());
        assert_eq!(message(0), Some("compile k: exited with status 1"));
        assert_eq!(outcome(2), Some(SceneOutcome::Test(Outcome::Passed)));
        assert_eq!(outcome(3), Some(SceneOutcome::Test(Outcome::Failed)));
        assert!(fixed[3]
            .as_ref()
            .unwrap()
            .message
            .as_ref()
            .unwrap()
            .contains("needs 3 devices but only 2 were granted (0,1)"));
        assert_eq!(outcome(4), Some(SceneOutcome::Test(Outcome::Failed)));
        assert!(fixed[4]
            .as_ref()
            .unwrap()
            .message
            .as_ref()
            .unwrap()
            .contains("missing or damaged"));
        assert!(fixed[1].is_none() && fixed[5].is_none());
    }

    #[test]
    fn run_decides_retries_keeps_results_and_drops_what_no_healthy_id_can_take() {
        let t = tempfile::tempdir().unwrap();
        let f = frozen(
            t.path(),
            vec![plain("a", 1, false, 1.0), plain("pair", 2, false, 5.0)],
        );
        let granted = ids(2);
        let mut s = Scheduler::new(&f, &granted, &[0, 1]);
        let mut r = Run::new(&f, &granted, vec![None, None]);
        let started = s.start_ready();
        assert_eq!(started[0].unit, Unit::Scene(1), "the longer job first");
        assert_eq!(r.attempt_no(&started[0].unit), 1);
        // The pair's first try fails (one retry allowed): it is queued again.
        let ev = Event::Attempt {
            scene: 1,
            attempt: attempt(AttemptOutcome::Test(Outcome::Failed), &["0", "1"]),
        };
        r.on_event(ev, &mut s);
        assert!(r.dirty);
        assert_eq!(r.attempt_no(&Unit::Scene(1)), 2);
        assert_eq!(s.job_count(), 3, "the retry is a job of its own");
        // Id 1 is found faulty: the pair cannot run again on one healthy id.
        r.on_event(Event::Fault { slots: vec![1] }, &mut s);
        let done = Event::Done {
            job: started[0].job,
            handback: Vec::new(),
        };
        r.on_event(done, &mut s);
        r.drop_unfit(&mut s);
        assert!(r.no_healthy);
        let results = r.results("unfinished");
        assert_eq!(results.quarantined, ["1"]);
        let pair = &results.scenes[1];
        assert_eq!(pair.attempts.len(), 2);
        assert_eq!(pair.outcome, SceneOutcome::NotRun);
        assert_eq!(pair.message.as_deref(), Some("not run: no healthy device"));
        // `a` never started: it is reported with the message given.
        assert_eq!(results.scenes[0].message.as_deref(), Some("unfinished"));
        assert_eq!(s.start_ready()[0].unit, Unit::Scene(0));
        // A snapshot writes the results file and clears the dirty mark.
        r.snapshot();
        assert!(!r.dirty && f.results.is_file());
    }

    #[test]
    fn prestart_true_starts_the_first_wave_and_prestart_all_every_batch() {
        let t = tempfile::tempdir().unwrap();
        let mut f = frozen(
            t.path(),
            vec![
                in_lane("x", "l", 1.0),
                in_lane("y", "l", 1.0),
                in_lane("z", "l", 1.0),
                plain("p", 1, false, 0.5),
            ],
        );
        f.device_count = 2;
        let lane = |scenes: &[usize]| Unit::Lane {
            lane: "l".into(),
            scenes: scenes.to_vec(),
        };
        let set = |f: &mut Frozen, p: Prestart| f.lanes.get_mut("l").unwrap().prestart = p;
        set(&mut f, Prestart::Off);
        assert_eq!(to_prestart(&f, 2), []);
        // Two lane processes fill both ids; the plain scene waits for one of them.
        set(&mut f, Prestart::FirstWave);
        assert_eq!(to_prestart(&f, 2), [lane(&[0, 2]), lane(&[1])]);
        let granted = ids(2);
        let mut s = Scheduler::new(&f, &granted, &[0, 1, 2, 3]);
        let started: Vec<Unit> = s.start_ready().into_iter().map(|st| st.unit).collect();
        assert_eq!(started[..2], to_prestart(&f, 2));
        // On one id, one process runs the lane's whole batch.
        assert_eq!(to_prestart(&f, 1), [lane(&[0, 1, 2])]);

        // A second lane, on one id: it starts after the first, in a later wave.
        let mut m = f.lanes["l"].clone();
        m.name = "m".into();
        f.lanes.insert("m".into(), m);
        f.scenes.push(in_lane("w", "m", 1.0));
        let m_batch = Unit::Lane {
            lane: "m".into(),
            scenes: vec![4],
        };
        let first = to_prestart(&f, 1);
        assert_eq!(first.len(), 1, "{first:?}");
        assert!(!first.contains(&m_batch));
        set(&mut f, Prestart::Every);
        f.lanes.get_mut("m").unwrap().prestart = Prestart::Every;
        let every = to_prestart(&f, 1);
        assert_eq!(every[0], first[0], "the first wave first");
        assert_eq!(every.len(), 2, "{every:?}");
        assert!(every.contains(&m_batch));
    }

    #[test]
    fn a_frozen_plan_of_another_version_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let f = frozen(t.path(), vec![plain("a", 1, false, 1.0)]);
        let mut v = serde_json::to_value(&f).unwrap();
        assert!(read_frozen(&serde_json::to_vec(&v).unwrap()).is_ok());
        v["version"] = 1.into();
        let e = read_frozen(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(e.to_string().contains("version 1"), "{e}");
    }
}
