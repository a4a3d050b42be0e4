//! `scenerun device` (outer): verify that every selected scene is warm, freeze the plan,
//! and call the lock command — exactly once, here, and only when something can run. A
//! scene with missing artifacts never costs a card: the check happens before the lock.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{Artifact, Frozen, FrozenScene, Results, SceneOutcome};
use crate::cache::history::History;
use crate::exit::Exit;
use crate::plan::{Plan, Status};
use crate::report::term::Ui;
use crate::report::{DeviceReport, LockReport, Report, SceneReport, StepReport};
use crate::template::{Ph, Val};

pub struct Options {
    pub no_lock: bool,
    pub devices: String,
    pub report_dir: PathBuf,
}

/// Freeze the plan, or list what is missing.
pub fn freeze(plan: &Plan, report_dir: &Path) -> Result<Frozen, Vec<String>> {
    let mut missing = Vec::new();
    let mut scenes = Vec::new();
    for ps in &plan.scenes {
        let scene = &plan.manifest.scenes[ps.index];
        let mut warm_failure = None;
        let mut arts: Vec<Option<Artifact>> = Vec::new();
        for &si in ps.kernels.iter().chain(&ps.fixture).chain(&ps.golden) {
            let step = &plan.steps[si];
            if let Status::Failed(why) = &step.status {
                warm_failure
                    .get_or_insert_with(|| format!("{} {}: {why}", step.label(), step.name));
                arts.push(None);
                continue;
            }
            // The plan's own lookup, moments ago, is the cheap check before the lock.
            match step.entry.clone() {
                Some(e) => arts.push(Some(Artifact {
                    name: step.name.clone(),
                    key: step.key.clone(),
                    out: e.out(),
                    files: e.meta.files,
                })),
                None => {
                    missing.push(format!(
                        "{}: {} {} (key {}) is not warm",
                        ps.name,
                        step.label(),
                        step.name,
                        &step.key[..12]
                    ));
                    arts.push(None);
                }
            }
        }
        let mut it = arts.into_iter();
        let kernels: Vec<Artifact> = ps
            .kernels
            .iter()
            .filter_map(|_| it.next().flatten())
            .collect();
        let fixture = ps.fixture.and_then(|_| it.next().flatten());
        let golden = ps.golden.and_then(|_| it.next().flatten());
        let d = ps.device.as_ref();
        let (run, lane, args) = super::lanes::frozen_run(d);
        scenes.push(FrozenScene {
            name: ps.name.clone(),
            platform: scene.platform.clone(),
            env: scene.env.clone(),
            run,
            lane,
            args,
            retries: d.map(|d| d.retries).unwrap_or(0),
            devices: d.map(|d| d.devices as usize).unwrap_or(0),
            exclusive: d.is_some_and(|d| d.exclusive),
            timeout_secs: d.and_then(|d| d.timeout).map(|t| t.as_secs_f64()),
            estimate: ps.device_estimate,
            kernels,
            fixture,
            golden,
            warm_failure,
        });
    }
    if !missing.is_empty() {
        return Err(missing);
    }
    Ok(Frozen {
        version: super::FROZEN_VERSION,
        manifest_dir: plan.manifest.dir.clone(),
        job_dir: plan.job_dir.clone(),
        report_dir: report_dir.to_path_buf(),
        results: super::results_path(&plan.job_dir),
        device_env: plan
            .manifest
            .lock
            .as_ref()
            .map(|l| l.device_env.clone())
            .unwrap_or_else(|| "TASK_DEVICE".into()),
        lanes: super::lanes::frozen_lanes(plan, &scenes),
        lane_startup: super::lanes::startup_estimates(plan),
        device_fault: plan
            .manifest
            .lock
            .as_ref()
            .and_then(|l| l.device_fault.clone()),
        scenes,
    })
}

fn device_report(r: &Results, held: f64) -> DeviceReport {
    DeviceReport {
        granted: r.granted.clone(),
        inner_secs: r.ended - r.started,
        busy_secs: r.busy_secs,
        device_secs_used: r.device_secs_used,
        device_secs_held: r.granted.len() as f64 * held,
        startup_secs: r.startup_secs,
        quarantined: r.quarantined.clone(),
        lanes: r.lanes.clone(),
        efficiency: if held > 0.0 {
            (r.busy_secs / held).min(1.0)
        } else {
            0.0
        },
    }
}

/// Call the lock command — the one acquisition — and read what the inner run left.
/// Anything but complete results from an inner run that ended inside the lock is an
/// infrastructure error (exit 3, or 2 when interrupted), with the report still written.
fn through_lock(
    plan: &Plan,
    frozen: &Frozen,
    opts: &Options,
    ui: &Ui,
    report: &mut Report,
) -> Result<Results> {
    let Some(command) = lock_command(plan) else {
        return Err(crate::coded!(
            Exit::Usage,
            "the manifest has no `lock:` section; add one, or run with --no-lock --devices LIST"
        ));
    };
    let log = plan.job_dir.join("lock.log");
    let _ = std::fs::remove_file(&log);
    ui.info(&format!("device: taking the lock once: {command}"));
    let called_at = super::unix_now();
    let live = super::live::Follower::start(super::live_path(&plan.job_dir), ui, true);
    let ended = crate::proc::run(&crate::proc::Spec {
        command: &command,
        dir: &plan.manifest.dir,
        env: &plan.manifest.env,
        log: &log,
        timeout: None,
    });
    let returned_at = super::unix_now();
    drop(live);
    // Read the results only once the inner run has really ended (bounded: it kills
    // its device steps within the grace period after a SIGTERM).
    let inner_ended = super::wait_for_inner(
        &plan.job_dir,
        crate::proc::GRACE * 2 + std::time::Duration::from_secs(1),
    );
    let tail = crate::proc::log_tail(&log, 3000);
    let results = std::fs::read(&frozen.results)
        .ok()
        .and_then(|b| serde_json::from_slice::<Results>(&b).ok())
        .filter(|r| r.started >= called_at - 1.0);
    let mut lock = LockReport {
        command: command.clone(),
        exit_code: match &ended {
            Ok(crate::proc::Ended::Exited(c)) => Some(*c),
            _ => None,
        },
        called_at,
        returned_at,
        output_tail: Some(tail.clone()),
        ..Default::default()
    };
    if let Some(r) = &results {
        let held = returned_at - r.started;
        lock.inner_started_at = Some(r.started);
        lock.inner_ended_at = Some(r.ended);
        lock.queue_wait_secs = Some((r.started - called_at).max(0.0));
        lock.held_secs = Some(held);
        report.device = Some(device_report(r, held));
    }
    report.lock = Some(lock);

    let how = match &ended {
        Ok(e) => e.describe(),
        Err(e) => format!("could not start: {e}"),
    };
    // The inner exits 0 or 1 and the lock tool passes that on. Any other ending, even
    // with results on disk, means the lock tool cut the run short (`--max-time`, a
    // signal); results without ids mean it handed none over.
    let no_ids = results
        .as_ref()
        .filter(|r| r.granted.is_empty())
        .and_then(|r| {
            r.scenes
                .iter()
                .find(|s| s.outcome == SceneOutcome::NotRun)
                .map(|s| s.message.clone().unwrap_or_default())
        });
    let cut_short = match &ended {
        Ok(crate::proc::Ended::Exited(c)) => !matches!(c, 0 | 1),
        Ok(crate::proc::Ended::Signaled(_)) => true,
        _ => false,
    };
    let still_running = !inner_ended || results.as_ref().is_some_and(|r| r.ended > returned_at);
    let failure = if crate::proc::interrupted() {
        Some((Exit::Interrupted, "was interrupted".to_string()))
    } else if results.is_none() && inner_ended {
        Some((
            Exit::Infra,
            format!("returned ({how}) without running the device steps"),
        ))
    } else if cut_short {
        Some((
            Exit::Infra,
            format!("ended ({how}) before the device steps finished"),
        ))
    } else if let Some(why) = no_ids {
        Some((
            Exit::Infra,
            format!("ran the device phase without device ids: {why}"),
        ))
    } else if still_running {
        Some((
            Exit::Infra,
            format!("returned ({how}) while the device steps were still running outside it"),
        ))
    } else {
        None
    };
    match (failure, results) {
        (None, Some(r)) => Ok(r),
        (failure, results) => {
            let (exit, what) = failure.expect("no failure means results are present");
            let msg = format!("the lock command {what}; lock command: {command}");
            report.scenes = scene_reports(plan, results.as_ref(), frozen);
            report.exit_code = exit.code();
            report.error = Some(format!("{msg}\n{tail}"));
            let _ = report.write(&opts.report_dir, ui.github);
            Err(crate::coded!(
                exit,
                "{msg}\n--- lock command output (last lines) ---\n{}",
                tail.trim_end()
            ))
        }
    }
}

/// Lay out each scene's `{kernels}` directory: one symlink per kernel into the cache
/// (never a copy), before the lock is taken.
fn link_kernels(frozen: &Frozen) -> Result<()> {
    for s in frozen.scenes.iter().filter(|s| s.warm_failure.is_none()) {
        let dir = super::kernels_dir(&frozen.job_dir, &s.name);
        let _ = crate::fsutil::remove_any(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| crate::coded!(Exit::Infra, "cannot create {}: {e}", dir.display()))?;
        for k in &s.kernels {
            std::os::unix::fs::symlink(&k.out, dir.join(&k.name))
                .map_err(|e| crate::coded!(Exit::Infra, "cannot link kernel {}: {e}", k.name))?;
        }
    }
    Ok(())
}

/// The lock command exactly as it will run, `{run}` re-entering this binary.
pub fn lock_command(plan: &Plan) -> Option<String> {
    let lock = plan.manifest.lock.as_ref()?;
    let inner = super::inner_command(&super::frozen_path(&plan.job_dir));
    Some(lock.submit.render(|ph| match ph {
        Ph::DeviceCount => Val::One(plan.device_count.to_string().into()),
        Ph::Run => Val::One(inner.clone().into()),
        _ => Val::Raw("".into()),
    }))
}

fn step_reports(plan: &Plan, scene: usize) -> Vec<StepReport> {
    let ps = &plan.scenes[scene];
    ps.kernels
        .iter()
        .chain(&ps.fixture)
        .chain(&ps.golden)
        .map(|&i| {
            let s = &plan.steps[i];
            StepReport {
                kind: s.kind.name(),
                name: s.name.clone(),
                key: s.key.clone(),
                status: s.status.word(),
            }
        })
        .collect()
}

fn scene_reports(plan: &Plan, results: Option<&Results>, frozen: &Frozen) -> Vec<SceneReport> {
    frozen
        .scenes
        .iter()
        .enumerate()
        .map(|(i, fs)| {
            let r = results.and_then(|r| r.scenes.iter().find(|s| s.name == fs.name));
            SceneReport {
                name: fs.name.clone(),
                outcome: match (r, &fs.warm_failure) {
                    (Some(r), _) => r.outcome,
                    (None, Some(_)) => SceneOutcome::FailedInWarm,
                    (None, None) => SceneOutcome::NotRun,
                },
                message: r
                    .and_then(|r| r.message.clone())
                    .or_else(|| fs.warm_failure.clone()),
                devices: r.map(|r| r.devices.clone()).unwrap_or_default(),
                start_secs: r.map(|r| r.start_secs).unwrap_or(0.0),
                duration_secs: r.map(|r| r.duration_secs).unwrap_or(0.0),
                log: r.and_then(|r| r.log.clone()),
                log_tail: r.and_then(|r| r.log_tail.clone()),
                lane: fs.lane.clone(),
                attempts: r.map(|r| r.attempts.clone()).unwrap_or_default(),
                steps: step_reports(plan, i),
            }
        })
        .collect()
}

pub fn run(plan: &Plan, opts: &Options, ui: &Ui) -> Result<Exit> {
    let frozen = match freeze(plan, &opts.report_dir) {
        Ok(f) => f,
        Err(missing) => {
            return Err(anyhow::Error::new(
                crate::exit::Coded::new(
                    Exit::NotWarm,
                    format!(
                        "not warm: {} artifact{} missing, the lock was not taken:\n  {}",
                        missing.len(),
                        if missing.len() == 1 { " is" } else { "s are" },
                        missing.join("\n  ")
                    ),
                )
                .hint("run `scenerun warm` first"),
            ));
        }
    };
    let mut report = Report::new(&plan.manifest.file);
    if frozen.scenes.iter().all(|s| s.warm_failure.is_some()) {
        report.scenes = scene_reports(plan, None, &frozen);
        report.exit_code = Exit::Failed.code();
        report.error = Some("every selected scene failed in warm; the lock was not taken".into());
        report.write(&opts.report_dir, ui.github)?;
        ui.out(&report.table(ui));
        ui.always("device: every selected scene failed in warm; the lock was not taken");
        return Ok(Exit::Failed);
    }
    let frozen_file = super::frozen_path(&plan.job_dir);
    std::fs::create_dir_all(&plan.job_dir)?;
    crate::fsutil::write_atomic(
        &frozen_file,
        &serde_json::to_vec_pretty(&frozen).expect("frozen serializes"),
    )
    .map_err(|e| crate::coded!(Exit::Infra, "cannot write {}: {e}", frozen_file.display()))?;
    let _ = std::fs::remove_file(&frozen.results);
    let _ = std::fs::remove_file(super::live_path(&plan.job_dir));
    link_kernels(&frozen)?;

    let r = if opts.no_lock {
        let ids = super::pack::parse_ids(&opts.devices)
            .map_err(|e| crate::coded!(Exit::Usage, "--devices: {e}"))?;
        let live = super::live::Follower::start(super::live_path(&plan.job_dir), ui, false);
        let r = super::inner::run(&frozen, Ok(ids));
        drop(live);
        report.device = Some(device_report(&r, r.ended - r.started));
        r
    } else {
        through_lock(plan, &frozen, opts, ui, &mut report)?
    };
    report.scenes = scene_reports(plan, Some(&r), &frozen);
    let durations: Vec<(String, f64)> = r
        .scenes
        .iter()
        .filter(|s| s.outcome.passed() && s.duration_secs > 0.0)
        .map(|s| (format!("device/{}", s.name), s.duration_secs))
        .chain(super::lanes::startup_history(&r))
        .collect();
    if plan.store.root.join("locks").is_dir() {
        History::record(&plan.store.root, &durations);
    }
    let failed = report.scenes.iter().any(|s| !s.outcome.passed());
    let exit = if r.no_healthy_device {
        ui.always(&format!(
            "device: no healthy device left (quarantined: {}); the remaining scenes were not run",
            r.quarantined.join(",")
        ));
        Exit::Infra
    } else if failed {
        Exit::Failed
    } else {
        Exit::Ok
    };
    report.exit_code = exit.code();
    report.write(&opts.report_dir, ui.github)?;
    ui.out(&report.table(ui));
    Ok(exit)
}
