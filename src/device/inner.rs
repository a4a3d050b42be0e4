//! The inner run, inside the lock: read the granted ids, re-check artifacts by `stat`,
//! pack scenes onto the ids and run their device steps. It reads only the frozen plan:
//! it never parses the manifest, hashes a source, runs an identity command, compiles,
//! generates or computes a golden.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::events::{self, Accumulator, Attempt, AttemptOutcome, Event, FollowUp};
use super::exec::{self, Cx, FaultRules};
use super::live::Reporter;
use super::pack::{self, LaneSpec, Packer, SceneSpec, Unit};
use super::{Frozen, FrozenScene, Results, SceneOutcome, SceneResult};
use crate::exit::Exit;
use crate::proc;

/// `scenerun inner FROZEN`: run, write the results file, exit 0, 1, 2 or 3.
pub fn main(frozen_path: &Path) -> Result<Exit> {
    let bytes = std::fs::read(frozen_path)
        .with_context(|| format!("reading the frozen plan {}", frozen_path.display()))?;
    let frozen: Frozen = serde_json::from_slice(&bytes)
        .with_context(|| format!("parsing the frozen plan {}", frozen_path.display()))?;
    // Held until this process exits (the kernel drops it even on SIGKILL).
    let _alive = match super::runs::claim_inner(&frozen.run_dir)? {
        super::runs::Claim::First(lock) => lock,
        super::runs::Claim::Repeat => return Ok(super::runs::repeat_exit(&frozen)),
    };
    proc::set_grace(Duration::from_secs_f64(frozen.grace_secs));
    super::watch::start(&frozen, frozen_path);
    let granted = std::env::var(&frozen.device_env).ok();
    let ids = super::ids::parse_grant(granted.as_deref().unwrap_or(""), frozen.device_count)
        .map_err(|e| super::ids::grant_error(&frozen.device_env, granted.as_deref(), &e));
    let results = match ids {
        Err(why) => {
            eprintln!("scenerun inner: {why}");
            super::ending::refused(&frozen, why)
        }
        Ok(ids) => {
            let mut r = run(&frozen, Ok(ids));
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
    crate::fsutil::write_atomic(&frozen.results, &bytes)
        .with_context(|| format!("writing {}", frozen.results.display()))?;
    if proc::interrupted() && !super::watch::lock_lost() {
        return Ok(Exit::Interrupted);
    }
    Ok(super::ending::exit_of(&results))
}

/// A scene's result before (or without) a run: no devices, no time, no log.
pub(super) fn result(
    s: &FrozenScene,
    outcome: SceneOutcome,
    message: Option<String>,
) -> SceneResult {
    SceneResult {
        name: s.name.clone(),
        outcome,
        devices: Vec::new(),
        start_secs: 0.0,
        duration_secs: 0.0,
        message,
        log: None,
        log_tail: None,
        infra: None,
        attempts: Vec::new(),
        lane: s.lane.clone(),
    }
}

/// Check every artifact by `stat` (presence and size), and the `{kernels}` links.
pub(super) fn prepare(frozen: &Frozen, s: &FrozenScene) -> Result<(), String> {
    for a in s.kernels.iter().chain(&s.fixture).chain(&s.golden) {
        for f in &a.files {
            let p = if f.path.is_empty() {
                a.out.clone()
            } else {
                a.out.join(&f.path)
            };
            match std::fs::metadata(&p) {
                Ok(m) if m.len() == f.size => {}
                _ => {
                    return Err(format!(
                    "artifact {} ({}) is missing or damaged since warm: run `scenerun warm` again",
                    a.name,
                    p.display()
                ))
                }
            }
        }
    }
    // The outer laid out `{kernels}` before the lock; only check it here.
    let dir = super::kernels_dir(&frozen.run_dir, &s.name);
    for k in &s.kernels {
        if std::fs::metadata(dir.join(&k.name)).is_err() {
            return Err(format!(
                "kernel link {} is missing in {}",
                k.name,
                dir.display()
            ));
        }
    }
    Ok(())
}

/// A job's place in the queue: what it runs and which ids it should avoid (a retry
/// goes to other ids when some are free).
struct Queued {
    unit: Unit,
    avoid: Vec<usize>,
}

/// The scheduling loop: pack jobs (plain scenes and lane processes) onto the granted ids
/// through one packer, start them on the executor, and feed its events to the
/// accumulator and the reporter; retries, device-fault reruns and handed-back lane
/// scenes become new jobs. Ids reported faulty are never used again in this run.
pub fn run(frozen: &Frozen, ids: Result<Vec<String>, String>) -> Results {
    let started = super::unix_now();
    let t0 = Instant::now();
    let granted = ids.clone().unwrap_or_default();
    let mut fixed: Vec<Option<SceneResult>> = vec![None; frozen.scenes.len()];
    let mut runnable = Vec::new();
    for (i, s) in frozen.scenes.iter().enumerate() {
        let r = if let Some(w) = &s.warm_failure {
            Some(result(s, SceneOutcome::FailedInWarm, Some(w.clone())))
        } else if s.run.is_none() && s.lane.is_none() {
            Some(result(
                s,
                SceneOutcome::Passed,
                Some("no device step".into()),
            ))
        } else if let Err(e) = &ids {
            Some(result(s, SceneOutcome::NotRun, Some(e.clone())))
        } else if s.devices > granted.len() {
            Some(result(
                s,
                SceneOutcome::Failed,
                Some(format!(
                    "needs {} devices but {} granted ({})",
                    s.devices,
                    if granted.len() == 1 {
                        "only 1 was".to_string()
                    } else {
                        format!("only {} were", granted.len())
                    },
                    granted.join(",")
                )),
            ))
        } else if let Err(e) = prepare(frozen, s) {
            Some(result(s, SceneOutcome::Failed, Some(e)))
        } else {
            runnable.push(i);
            None
        };
        fixed[i] = r;
    }
    let mut reporter = Reporter::new(&super::live_path(&frozen.run_dir), frozen.scenes.len());
    if !granted.is_empty() {
        reporter.note(format!(
            "device: {} scene{} on id{} {}",
            frozen.scenes.len(),
            if frozen.scenes.len() == 1 { "" } else { "s" },
            if granted.len() == 1 { "" } else { "s" },
            granted.join(",")
        ));
    }
    for (i, r) in fixed.iter().enumerate() {
        if let Some(r) = r {
            reporter.settled(
                &frozen.scenes[i].name,
                r.outcome.word(),
                r.outcome.passed(),
                r.message.as_deref(),
            );
        }
    }

    let specs: Vec<SceneSpec> = runnable
        .iter()
        .map(|&i| {
            let s = &frozen.scenes[i];
            SceneSpec {
                devices: s.devices,
                exclusive: s.exclusive,
                estimate: s.estimate,
                lane: s.lane.clone(),
            }
        })
        .collect();
    let lane_specs: BTreeMap<String, LaneSpec> = frozen
        .lanes
        .iter()
        .map(|(n, l)| {
            (
                n.clone(),
                LaneSpec {
                    devices: l.devices as usize,
                    startup: frozen.lane_startup.get(n).copied(),
                },
            )
        })
        .collect();
    let (units, mut jobs) = pack::units(&specs, &lane_specs, granted.len());
    let mut queue: Vec<Queued> = units
        .into_iter()
        .map(|u| Queued {
            unit: match u {
                Unit::Scene(i) => Unit::Scene(runnable[i]),
                Unit::Lane { lane, scenes } => Unit::Lane {
                    lane,
                    scenes: scenes.into_iter().map(|i| runnable[i]).collect(),
                },
            },
            avoid: Vec::new(),
        })
        .collect();
    let estimates: Vec<f64> = jobs.iter().map(|j| j.estimate).collect();
    let mean = pack::mean_estimate(estimates.iter().map(|e| Some(*e)));
    let mut packer = Packer::new(&jobs);
    let mut free: BTreeSet<usize> = (0..granted.len()).collect();
    let mut running: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut exclusive_running = 0usize;
    let mut acc = Accumulator::new(frozen.scenes.len());
    let mut no_healthy = false;
    // Lane scenes to try again, by the job they came from (one fresh process for them).
    let mut lane_again: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut last_snapshot = Instant::now();
    let mut dirty = false;
    let cx = Cx {
        frozen,
        granted: &granted,
        t0,
        faults: FaultRules::new(frozen.device_fault.as_ref()),
        lane_procs: Default::default(),
    };
    let (tx, rx) = mpsc::channel::<Event>();

    std::thread::scope(|scope| loop {
        let healthy = granted.len() - acc.quarantined.len();
        if !acc.quarantined.is_empty() {
            for j in packer.take_unfit(&jobs, healthy) {
                no_healthy = true;
                for scene in queue[j].unit.scenes() {
                    let ev = Event::Attempt {
                        scene,
                        attempt: not_run(t0, "not run: no healthy device"),
                    };
                    acc.apply(&ev);
                    reporter.event(&ev, &frozen.scenes[scene].name, FollowUp::Final);
                }
            }
        }
        if !proc::interrupted() {
            while let Some(j) = packer.next(&jobs, free.len(), running.len(), exclusive_running > 0)
            {
                let slots = pack::take_ids(&mut free, jobs[j].devices, &queue[j].avoid)
                    .expect("the packer checked the free ids");
                if jobs[j].exclusive {
                    exclusive_running += 1;
                }
                running.insert(j, slots.clone());
                let unit = queue[j].unit.clone();
                let attempt_no = match &unit {
                    Unit::Scene(i) => acc.attempts[*i].len() + 1,
                    Unit::Lane { .. } => 0,
                };
                let (tx, cx) = (tx.clone(), &cx);
                scope.spawn(move || match unit {
                    Unit::Scene(i) => exec::run_plain(cx, j, i, &slots, attempt_no, &tx),
                    Unit::Lane { lane, scenes } => {
                        exec::run_lane(cx, j, &lane, scenes, &slots, &tx)
                    }
                });
            }
        }
        if running.is_empty() {
            break;
        }
        // Results are written at most every 100 ms (cheap for big lanes), and never left
        // more than 100 ms behind the last event: a lock tool may kill this run any time,
        // and what finished before must be in the file.
        let ev = if dirty {
            let wait = SNAPSHOT_EVERY.saturating_sub(last_snapshot.elapsed());
            match rx.recv_timeout(wait) {
                Ok(ev) => ev,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    snapshot(frozen, &fixed, &acc, &granted, started, no_healthy);
                    last_snapshot = Instant::now();
                    dirty = false;
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        } else {
            let Ok(ev) = rx.recv() else { break };
            ev
        };
        dirty = true;
        acc.apply(&ev);
        let mut follow = FollowUp::Final;
        match &ev {
            Event::Fault { slots } => {
                for s in slots {
                    free.remove(s);
                }
            }
            Event::Attempt { scene, .. } => {
                let s = &frozen.scenes[*scene];
                follow = events::follow_up(&acc.attempts[*scene], s.retries);
                if follow != FollowUp::Final && proc::interrupted() {
                    follow = FollowUp::Final;
                }
            }
            _ => {}
        }
        let name = match &ev {
            Event::Attempt { scene, .. } => frozen.scenes[*scene].name.as_str(),
            _ => "",
        };
        reporter.event(&ev, name, follow);
        match ev {
            Event::Attempt { scene, attempt } if follow != FollowUp::Final => {
                let avoid: Vec<usize> = attempt
                    .devices
                    .iter()
                    .filter_map(|d| granted.iter().position(|g| g == d))
                    .collect();
                match &frozen.scenes[scene].lane {
                    Some(_) => {
                        let from = running
                            .iter()
                            .find(|(_, slots)| *slots == &avoid)
                            .map(|(j, _)| *j)
                            .unwrap_or(usize::MAX);
                        lane_again.entry(from).or_default().push(scene);
                    }
                    None => {
                        let s = &frozen.scenes[scene];
                        jobs.push(pack::Job {
                            devices: s.devices,
                            exclusive: s.exclusive,
                            estimate: s.estimate.unwrap_or(mean),
                        });
                        queue.push(Queued {
                            unit: Unit::Scene(scene),
                            avoid,
                        });
                        packer.push(&jobs, jobs.len() - 1);
                    }
                }
            }
            Event::Done { job, handback } => {
                let slots = running.remove(&job).expect("a finished job was running");
                if jobs[job].exclusive {
                    exclusive_running -= 1;
                }
                free.extend(slots.iter().filter(|s| !acc.quarantined.contains(s)));
                let lane = match &queue[job].unit {
                    Unit::Lane { lane, .. } => Some(lane.clone()),
                    Unit::Scene(_) => None,
                };
                if let Some(lane) = lane {
                    let again = lane_again.remove(&job).unwrap_or_default();
                    for (scenes, avoid) in [(again, slots.clone()), (handback, Vec::new())] {
                        if scenes.is_empty() {
                            continue;
                        }
                        let cfg = &frozen.lanes[&lane];
                        jobs.push(pack::Job {
                            devices: cfg.devices as usize,
                            exclusive: false,
                            estimate: scenes
                                .iter()
                                .map(|&i| frozen.scenes[i].estimate.unwrap_or(mean))
                                .sum(),
                        });
                        queue.push(Queued {
                            unit: Unit::Lane {
                                lane: lane.clone(),
                                scenes,
                            },
                            avoid,
                        });
                        packer.push(&jobs, jobs.len() - 1);
                    }
                }
            }
            _ => {}
        }
        if last_snapshot.elapsed() >= SNAPSHOT_EVERY {
            snapshot(frozen, &fixed, &acc, &granted, started, no_healthy);
            last_snapshot = Instant::now();
            dirty = false;
        }
    });

    collect(
        frozen,
        &fixed,
        &acc,
        &granted,
        started,
        no_healthy,
        "interrupted",
    )
}

fn not_run(t0: Instant, why: &str) -> Attempt {
    Attempt {
        outcome: AttemptOutcome::NotRun,
        devices: Vec::new(),
        start_secs: t0.elapsed().as_secs_f64(),
        duration_secs: 0.0,
        message: Some(why.into()),
        output_tail: None,
        log: None,
        lane_process: None,
    }
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
            let mut r = result(s, events::outcome(attempts), None);
            r.lane = s.lane.clone();
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

/// Write the results so far: if the lock tool kills this run, the outer still reports
/// what had finished.
fn snapshot(
    frozen: &Frozen,
    fixed: &[Option<SceneResult>],
    acc: &Accumulator,
    granted: &[String],
    started: f64,
    no_healthy: bool,
) {
    let partial = collect(
        frozen,
        fixed,
        acc,
        granted,
        started,
        no_healthy,
        "not finished when the inner run was ended",
    );
    if let Ok(bytes) = serde_json::to_vec_pretty(&partial) {
        let _ = crate::fsutil::write_atomic(&frozen.results, &bytes);
    }
}

/// How often the results file is rewritten while scenes run.
const SNAPSHOT_EVERY: Duration = Duration::from_millis(100);

pub fn log_path(frozen: &Frozen, scene: &str) -> std::path::PathBuf {
    frozen
        .report_dir
        .join("logs")
        .join(scene)
        .join("device.log")
}
