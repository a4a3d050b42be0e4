//! The inner run, inside the lock: read the granted ids, re-check artifacts by `stat`,
//! pack scenes onto the ids and run their device steps. It reads only the frozen plan:
//! it never parses the manifest, hashes a source, runs an identity command, compiles,
//! generates or computes a golden.

use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::pack::{self, Job, Packer};
use super::{Frozen, FrozenScene, Results, SceneOutcome, SceneResult};
use crate::exit::Exit;
use crate::proc::{self, Ended};

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

struct Finished {
    scene: usize,
    ended: std::io::Result<Ended>,
    secs: f64,
}

pub fn run(frozen: &Frozen, ids: Result<Vec<String>, String>) -> Results {
    let started = super::unix_now();
    let t0 = Instant::now();
    let granted = ids.clone().unwrap_or_default();
    let mut out: Vec<Option<SceneResult>> = vec![None; frozen.scenes.len()];
    let mut runnable = Vec::new();
    for (i, s) in frozen.scenes.iter().enumerate() {
        let r = if let Some(w) = &s.warm_failure {
            Some(result(s, SceneOutcome::FailedInWarm, Some(w.clone())))
        } else if s.run.is_none() {
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
        out[i] = r;
    }

    let jobs = Job::with_estimates(runnable.iter().map(|&i| {
        let s = &frozen.scenes[i];
        (s.devices, s.exclusive, s.estimate)
    }));
    let mut packer = Packer::new(&jobs);
    let mut free: Vec<usize> = (0..granted.len()).collect();
    let mut running: Vec<(usize, Vec<usize>, f64)> = Vec::new();
    let (tx, rx) = mpsc::channel::<Finished>();
    let mut busy = 0.0;
    let mut busy_since: Option<Instant> = None;
    let mut used = 0.0;

    std::thread::scope(|scope| loop {
        if !proc::interrupted() {
            loop {
                let excl = running.iter().any(|(j, ..)| jobs[*j].exclusive);
                let Some(j) = packer.next(&jobs, free.len(), running.len(), excl) else {
                    break;
                };
                let got = pack::take_ids(&mut free, jobs[j].devices);
                let scene_idx = runnable[j];
                let s = &frozen.scenes[scene_idx];
                let dev_ids: Vec<String> = got.iter().map(|&g| granted[g].clone()).collect();
                let devices = dev_ids.join(",");
                let start = t0.elapsed().as_secs_f64();
                if busy_since.is_none() {
                    busy_since = Some(Instant::now());
                }
                out[scene_idx] = Some(SceneResult {
                    devices: dev_ids,
                    start_secs: start,
                    ..result(s, SceneOutcome::NotRun, None)
                });
                running.push((j, got, start));
                let tx = tx.clone();
                scope.spawn(move || {
                    let t = Instant::now();
                    let ended = run_scene(frozen, s, &devices);
                    let _ = tx.send(Finished {
                        scene: j,
                        ended,
                        secs: t.elapsed().as_secs_f64(),
                    });
                });
            }
        }
        if running.is_empty() {
            break;
        }
        let Ok(f) = rx.recv() else { break };
        let pos = running
            .iter()
            .position(|(j, ..)| *j == f.scene)
            .expect("finished job was running");
        let (j, got, _) = running.remove(pos);
        used += got.len() as f64 * f.secs;
        free.extend(got);
        if running.is_empty() {
            if let Some(since) = busy_since.take() {
                busy += since.elapsed().as_secs_f64();
            }
        }
        let scene_idx = runnable[j];
        let s = &frozen.scenes[scene_idx];
        let log = log_path(frozen, &s.name);
        let r = out[scene_idx]
            .as_mut()
            .expect("started scenes have a result");
        r.duration_secs = f.secs;
        r.log = Some(log.clone());
        let (outcome, message) = match f.ended {
            Ok(Ended::Exited(0)) => (SceneOutcome::Passed, None),
            Ok(Ended::TimedOut) => (
                SceneOutcome::TimedOut,
                Some(format!(
                    "timed out after {} (process group killed)",
                    crate::manifest::units::short_duration(Duration::from_secs_f64(
                        s.timeout_secs.unwrap_or(0.0)
                    ))
                )),
            ),
            Ok(Ended::Interrupted) => (SceneOutcome::NotRun, Some("interrupted".into())),
            Ok(e) => (
                SceneOutcome::Failed,
                Some(format!("device step {}", e.describe())),
            ),
            Err(e) => (
                SceneOutcome::Failed,
                Some(format!("could not start the device step: {e}")),
            ),
        };
        r.outcome = outcome;
        r.message = message;
        if !outcome.passed() {
            r.log_tail = Some(proc::log_tail(&log, 4000));
        }
        snapshot(frozen, &out, &granted, started, busy, used);
    });

    // Scenes the packer never started (interrupted) are not run.
    collect(frozen, &out, &granted, started, busy, used, "interrupted")
}

/// The results as they stand: a scene not (yet) finished is `not_run`, with `unfinished`
/// as its message.
fn collect(
    frozen: &Frozen,
    out: &[Option<SceneResult>],
    granted: &[String],
    started: f64,
    busy: f64,
    used: f64,
    unfinished: &str,
) -> Results {
    let scenes = out
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut r = r
                .clone()
                .unwrap_or_else(|| result(&frozen.scenes[i], SceneOutcome::NotRun, None));
            if r.outcome == SceneOutcome::NotRun && r.message.is_none() {
                r.message = Some(unfinished.into());
            }
            r
        })
        .collect();
    Results {
        version: super::RESULTS_VERSION,
        granted: granted.to_vec(),
        started,
        ended: super::unix_now(),
        busy_secs: busy,
        device_secs_used: used,
        scenes,
        infra_error: None,
    }
}

/// Write the results so far (after every finished scene): if the lock tool kills this
/// run, the outer still reports what had finished.
fn snapshot(
    frozen: &Frozen,
    out: &[Option<SceneResult>],
    granted: &[String],
    started: f64,
    busy: f64,
    used: f64,
) {
    let partial = collect(
        frozen,
        out,
        granted,
        started,
        busy,
        used,
        "not finished when the inner run was ended",
    );
    if let Ok(bytes) = serde_json::to_vec_pretty(&partial) {
        let _ = crate::fsutil::write_atomic(&frozen.results, &bytes);
    }
}

pub fn log_path(frozen: &Frozen, scene: &str) -> std::path::PathBuf {
    frozen
        .report_dir
        .join("logs")
        .join(scene)
        .join("device.log")
}

fn run_scene(frozen: &Frozen, s: &FrozenScene, devices: &str) -> std::io::Result<Ended> {
    let kernels = super::kernels_dir(&frozen.run_dir, &s.name);
    let template = s.run.as_ref().expect("runnable scenes have a device step");
    let fixture = s.fixture.as_ref().map(|a| a.out.as_path());
    let golden = s.golden.as_ref().map(|a| a.out.as_path());
    let command = crate::plan::render_device_template(
        template,
        &s.name,
        &s.platform,
        &kernels,
        fixture,
        golden,
        Some(devices),
    );
    let mut env = s.env.clone();
    env.insert("SCENERUN_KERNELS".into(), kernels.display().to_string());
    env.insert("SCENERUN_DEVICES".into(), devices.to_string());
    env.insert("SCENERUN_SCENE".into(), s.name.clone());
    if let Some(f) = fixture {
        env.insert("SCENERUN_FIXTURE".into(), f.display().to_string());
    }
    if let Some(g) = golden {
        env.insert("SCENERUN_GOLDEN".into(), g.display().to_string());
    }
    let log = log_path(frozen, &s.name);
    if let Some(d) = log.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(&log, format!("$ {command}\n"))?;
    proc::run(&proc::Spec {
        command: &command,
        dir: &frozen.manifest_dir,
        env: &env,
        log: &log,
        timeout: s.timeout_secs.map(Duration::from_secs_f64),
    })
}
