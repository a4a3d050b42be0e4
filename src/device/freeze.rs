//! The plan frozen for the inner run (docs/device.md): each selected scene with the
//! artifacts the plan's own lookup found (or what is missing, or its warm failure), its
//! device step and the lanes it uses; then everything the inner run reads laid out
//! before the lock — private copies for `device.writes`, the frozen plan, the
//! `{kernels}` links. Invariant: the inner run reads only this, never the manifest.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use super::not_warm::Missing;
use super::runs;
use super::{Artifact, Frozen, FrozenDevice, FrozenScene, TestVerdict};
use crate::base::failure::{StepFailure, WarmFailure, WarmWhy};
use crate::manifest::LaneConfig;
use crate::plan::{Plan, Status, Step};

/// Freeze the plan into `run_dir`, and list what is missing (the lock is never taken
/// then).
pub fn freeze(plan: &Plan, report_dir: &Path, run_dir: &Path) -> (Frozen, Vec<Missing>) {
    let mut missing = Vec::new();
    let mut scenes = Vec::new();
    for ps in &plan.scenes {
        let mut scene = freeze_scene(plan, ps, scenes.len(), &mut missing);
        crate::compiled::put_shims_first(&plan.manifest, run_dir, &mut scene.env);
        scenes.push(scene);
    }
    let lock = plan.manifest.lock.as_ref();
    let frozen = Frozen {
        version: super::FROZEN_VERSION,
        manifest_dir: plan.manifest.dir.clone(),
        job_dir: plan.job_dir.clone(),
        run_dir: run_dir.to_path_buf(),
        report_dir: report_dir.to_path_buf(),
        results: runs::results_path(run_dir),
        device_env: lock
            .map(|l| l.device_env.clone())
            .unwrap_or_else(|| "TASK_DEVICE".into()),
        device_count: plan.device_count as usize,
        grace_secs: grace(plan).as_secs_f64(),
        outer: super::ProcId::me(),
        lock_tool: None,
        through_lock: false,
        lanes: frozen_lanes(plan, &scenes, run_dir),
        lane_startup: super::packing::input::startup_estimates(plan),
        device_fault: plan
            .manifest
            .lock
            .as_ref()
            .and_then(|l| l.device_fault.clone()),
        scenes,
        prestarted: Vec::new(),
        readonly: Vec::new(),
    };
    (frozen, missing)
}

/// One plan scene frozen as scene number `n`: its artifacts as the plan's own lookup
/// found them, its warm failure or its test's verdict; what is not there goes to
/// `missing`.
fn freeze_scene(
    plan: &Plan,
    ps: &crate::plan::PlanScene,
    n: usize,
    missing: &mut Vec<Missing>,
) -> FrozenScene {
    let scene = &plan.manifest.scenes[ps.index];
    let mut warm_failure = None;
    let mut arts: Vec<Option<Artifact>> = Vec::new();
    // Prepare steps leave nothing the device step reads, but a scene runs only once
    // they are done: failed, the scene failed in warm; not built, it is not warm.
    for &si in &ps.prepare {
        let step = &plan.steps[si];
        match (&step.status, &step.entry) {
            (Status::Failed(why), _) => {
                warm_failure.get_or_insert_with(|| failed(step, why));
            }
            (_, Some(_)) => {}
            (_, None) => missing.push(Missing::of(n, step)),
        }
    }
    for &si in ps.kernels.iter().chain(&ps.fixture).chain(&ps.golden) {
        let step = &plan.steps[si];
        if let Status::Failed(why) = &step.status {
            warm_failure.get_or_insert_with(|| failed(step, why));
            arts.push(None);
            continue;
        }
        // The plan's own lookup, moments ago, is the cheap check before the lock.
        match step.entry.clone() {
            Some(e) => arts.push(Some(Artifact {
                name: step.name.clone(),
                key: step.key.clone(),
                out: e.out(),
                files: e.meta.files.clone(),
            })),
            None => {
                missing.push(Missing::of(n, step));
                arts.push(None);
            }
        }
    }
    let verdict = ps
        .test
        .and_then(|ti| test_verdict(plan, ti, n, &mut warm_failure, missing));
    let mut it = arts.into_iter();
    let kernels: Vec<Artifact> = ps
        .kernels
        .iter()
        .filter_map(|_| it.next().flatten())
        .collect();
    let fixture = ps.fixture.and_then(|_| it.next().flatten());
    let golden = ps.golden.and_then(|_| it.next().flatten());
    FrozenScene {
        name: ps.name.clone(),
        nodeid: scene.nodeid.clone(),
        case: scene.case.clone(),
        selection: scene.selection.clone(),
        platform: scene.platform.clone(),
        env: scene.env.clone(),
        device: ps
            .device
            .as_ref()
            .map(|d| FrozenDevice::of(d, ps.device_estimate)),
        kernels,
        fixture,
        golden,
        warm_failure,
        verdict,
    }
}

/// Step `step`, failed in warm (`why`), as the frozen scene keeps it.
fn failed(step: &Step, why: &StepFailure) -> WarmFailure {
    WarmFailure {
        kind: step.kind,
        name: step.name.clone(),
        why: WarmWhy::Step(why.clone()),
    }
}

/// The verdict warm left for test step `ti` of scene number `n`; a failed step or an
/// unreadable verdict is the scene's warm failure, a step not run is missing.
fn test_verdict(
    plan: &Plan,
    ti: usize,
    n: usize,
    warm_failure: &mut Option<WarmFailure>,
    missing: &mut Vec<Missing>,
) -> Option<TestVerdict> {
    let step = &plan.steps[ti];
    match (&step.status, &step.entry) {
        (Status::Failed(why), _) => {
            warm_failure.get_or_insert_with(|| failed(step, why));
            None
        }
        (_, Some(e)) => match crate::base::verdict::read(&e.out()) {
            Ok(v) => {
                let log = step.id.log_path(&plan.job_dir);
                Some(TestVerdict::of(v, log, e.meta.duration_secs))
            }
            Err(why) => {
                warm_failure.get_or_insert(WarmFailure {
                    kind: step.kind,
                    name: step.name.clone(),
                    why: WarmWhy::Verdict(why),
                });
                None
            }
        },
        (_, None) => {
            missing.push(Missing::of(n, step));
            None
        }
    }
}

/// Between SIGTERM and SIGKILL for device steps when cancelled.
pub(super) fn grace(plan: &Plan) -> Duration {
    plan.manifest
        .lock
        .as_ref()
        .and_then(|l| l.grace)
        .unwrap_or(super::DEFAULT_GRACE)
}

/// The lanes the frozen scenes use, each with the manifest's env under its own.
/// The compiler shims (`compile_cache:`) come first on each one's `PATH`.
fn frozen_lanes(
    plan: &Plan,
    scenes: &[FrozenScene],
    run_dir: &Path,
) -> BTreeMap<String, LaneConfig> {
    let mut out = BTreeMap::new();
    for s in scenes {
        let Some(name) = s.lane() else { continue };
        if out.contains_key(name) {
            continue;
        }
        if let Some(l) = plan.manifest.lanes.get(name) {
            let mut l = l.clone();
            let mut env = plan.manifest.env.clone();
            env.extend(std::mem::take(&mut l.env));
            crate::compiled::put_shims_first(&plan.manifest, run_dir, &mut env);
            if plan.manifest.fork_server.is_some() {
                let sock = super::lane::fork_server::socket(run_dir);
                env.insert(
                    super::lane::fork_server::ENV.into(),
                    sock.display().to_string(),
                );
            }
            l.env = env;
            out.insert(name.to_string(), l);
        }
    }
    out
}

/// Write the frozen plan where the inner run reads it.
pub(super) fn write_frozen(frozen: &Frozen) -> Result<()> {
    let path = runs::plan_path(&frozen.run_dir);
    crate::base::fsutil::write_atomic(
        &path,
        &serde_json::to_vec_pretty(frozen).expect("frozen serializes"),
    )
    .map_err(|e| crate::base::error::err!(Infra, "cannot write {}: {e}", path.display()))
}

/// Everything the inner run reads, laid out before the lock: the private copies of the
/// artifacts `device.writes` names, the frozen plan, the `{kernels}` links.
pub(super) fn lay_out(frozen: &mut Frozen) -> Result<()> {
    super::outputs::make(frozen)?;
    super::private::copy_for_writers(frozen)?;
    write_frozen(frozen)?;
    link_kernels(frozen)
}

/// Lay out each scene's `{kernels}` directory: one symlink per kernel into the cache
/// (never a copy), before the lock is taken.
fn link_kernels(frozen: &Frozen) -> Result<()> {
    for s in frozen.scenes.iter().filter(|s| s.warm_failure.is_none()) {
        let dir = super::kernels_dir(&frozen.run_dir, &s.name);
        let _ = crate::base::fsutil::remove_any(&dir);
        std::fs::create_dir_all(&dir)
            .map_err(|e| crate::base::error::err!(Infra, "cannot create {}: {e}", dir.display()))?;
        for k in &s.kernels {
            std::os::unix::fs::symlink(&k.out, dir.join(&k.name)).map_err(|e| {
                crate::base::error::err!(Infra, "cannot link kernel {}: {e}", k.name)
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::failure::{FailCause, Failure, WorkerLoss};
    use crate::base::record::{Outcome, Recorded, StepRecord, WarmRecord};
    use crate::base::stepid::Kind;
    use crate::plan::Lookups;

    /// One scene with a kernel, a fixture, a golden and a device step, in `dir`.
    fn plan(dir: &Path) -> Plan {
        std::fs::write(dir.join("k.c"), "int k;\n").unwrap();
        let y = "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"cc -c {source} -o {out}\"\nscenes:\n  - name: a\n    kernels:\n      - name: k\n        toolchain: cc\n        source: k.c\n    fixture:\n      run: \"gen {out}\"\n    golden:\n      run: \"gold {fixture} {out}\"\n    device:\n      run: \"true\"\n";
        std::fs::write(dir.join("scenes.yaml"), y).unwrap();
        let m = crate::manifest::load(&dir.join("scenes.yaml")).unwrap();
        let memo = crate::plan::stat_memo(&m.dir);
        Plan::build(m, &Default::default(), None, memo, Lookups::Look).unwrap()
    }

    /// A failure in `warm.json` reaches the frozen scene as the variant warm recorded,
    /// and the inner run reads the same back from the frozen plan: never a string until
    /// the report words it.
    #[test]
    fn a_recorded_failure_reaches_the_frozen_scene_typed() {
        let t = tempfile::tempdir().unwrap();
        let p = plan(t.path());
        let f = p.steps.iter().find(|s| s.kind == Kind::Fixture).unwrap();
        let lost = Failure::Failed(FailCause::WorkerLost {
            worker: "py".into(),
            loss: WorkerLoss::MemoryCap {
                cap: 1 << 30,
                rss: 3 << 29,
                step: false,
            },
        });
        let rec = StepRecord {
            kind: f.kind,
            scene: "a".into(),
            name: f.name.clone(),
            key: f.key.clone(),
            outcome: Outcome::Failed,
            duration_secs: 2.0,
            log: None,
            failure: Some(lost.clone()),
            log_tail: Some("MemoryError\n".into()),
        };
        std::fs::create_dir_all(&p.job_dir).unwrap();
        let new = vec![Recorded::New(rec)];
        WarmRecord::merge_and_save(&p.job_dir, &WarmRecord::default(), new).unwrap();

        let p = plan(t.path());
        let (frozen, _) = freeze(&p, &t.path().join("report"), &t.path().join("run"));
        let want = WarmFailure {
            kind: Kind::Fixture,
            name: "fixture".into(),
            why: WarmWhy::Step(StepFailure {
                failure: lost,
                log_tail: Some("MemoryError\n".into()),
            }),
        };
        assert_eq!(frozen.scenes[0].warm_failure.as_ref(), Some(&want));
        let text = serde_json::to_vec(&frozen).unwrap();
        let back: super::super::Frozen = serde_json::from_slice(&text).unwrap();
        assert_eq!(back.scenes[0].warm_failure.as_ref(), Some(&want));
        assert_eq!(
            want.to_string(),
            "fixture fixture: worker py replaced: the worker exceeded memory cap 1.0 GiB (resident 1.5 GiB)\nMemoryError"
        );
    }
}
