//! `scenerun warm`: build every missing artifact outside the lock, in parallel, into the
//! cache (or the job dir for `persist: false`). Invariants kept here: a key is built at
//! most once per cache (per-key lock, look again after acquiring it); a failure is never
//! cached and fails only its scene; nothing partial is ever published.

pub mod depfile;
mod inputs;
pub mod record;
pub mod sched;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Result;

use crate::cache::history::History;
use crate::cache::maintain::{self, LastWarm};
use crate::cache::{Dep, Kind, Lookup};
use crate::manifest::units::{short_duration, short_size};
use crate::plan::{Fill, Plan};
use crate::proc::{self, Ended};
use crate::report::term::Ui;
use record::{Outcome, StepRecord, WarmRecord};

pub struct Options {
    pub jobs: usize,
    pub memory: u64,
}

/// Default `--memory`: 80 % of physical memory.
pub fn default_memory() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|kb| kb.parse::<u64>().ok())
                })
        })
        .map(|kb| kb * 1024)
        .unwrap_or(8 << 30);
    total / 10 * 8
}

/// What one warm did.
#[derive(Debug, Default)]
pub struct Summary {
    pub built: usize,
    pub hits: usize,
    pub failed: usize,
    pub skipped: usize,
    pub wall_secs: f64,
    pub saved_secs: f64,
    /// (scene, why)
    pub failed_scenes: Vec<(String, String)>,
    /// What the remote cache moved, when one is configured.
    pub remote: Option<crate::cache::remote::Totals>,
}

/// One unique artifact to produce, and the steps (scenes) that want it.
struct Unit {
    steps: Vec<usize>,
}

enum Done {
    /// `sent`: bytes uploaded to the remote cache afterwards.
    Built {
        secs: f64,
        sent: u64,
    },
    Hit,
    /// Downloaded from the remote cache and published locally, in `secs`.
    Downloaded {
        bytes: u64,
        secs: f64,
    },
    Failed {
        error: String,
        tail: String,
    },
}

struct UnitResult {
    unit: usize,
    done: Result<Done>,
}

pub fn log_path(plan: &Plan, step: &crate::plan::Step) -> PathBuf {
    let file = match step.kind {
        Kind::Kernel => format!("compile-{}.log", step.name),
        k => format!("{}.log", k.name()),
    };
    plan.job_dir
        .join("logs")
        .join(&plan.scenes[step.scene].name)
        .join(file)
}

pub fn run(plan: &Plan, opts: &Options, ui: &Ui) -> Result<Summary> {
    let started = Instant::now();
    plan.store.ensure()?;
    if plan.steps.iter().any(|s| !s.persist) {
        plan.job.ensure()?;
    }
    plan.store.sweep_tmp();
    plan.job.sweep_tmp();

    // One unit per unique (store, kind, key).
    let mut units: Vec<Unit> = Vec::new();
    let mut by_key: HashMap<(bool, Kind, &str), usize> = HashMap::new();
    let mut unit_of = vec![0; plan.steps.len()];
    for (i, s) in plan.steps.iter().enumerate() {
        let u = *by_key
            .entry((s.persist, s.kind, s.key.as_str()))
            .or_insert_with(|| {
                units.push(Unit { steps: Vec::new() });
                units.len() - 1
            });
        units[u].steps.push(i);
        unit_of[i] = u;
    }
    let known: Vec<f64> = plan.steps.iter().filter_map(|s| s.estimate).collect();
    let mean = if known.is_empty() {
        1.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    };
    let tasks: Vec<sched::Task> = units
        .iter()
        .map(|u| {
            let s = &plan.steps[u.steps[0]];
            let mut deps: Vec<usize> = u
                .steps
                .iter()
                .flat_map(|&i| plan.steps[i].deps.iter().map(|&d| unit_of[d]))
                .collect();
            deps.sort();
            deps.dedup();
            sched::Task {
                estimate: if s.status.is_hit() {
                    0.0
                } else {
                    s.estimate.unwrap_or(mean)
                },
                threads: s.threads as usize,
                memory: s.memory,
                deps,
            }
        })
        .collect();
    let total_steps = plan.steps.len();
    let mut scheduler = sched::Scheduler::new(tasks, opts.jobs, opts.memory);

    let (job_tx, job_rx) = mpsc::channel::<usize>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let (done_tx, done_rx) = mpsc::channel::<UnitResult>();
    let bar = ui.bars.then(|| {
        let pb = indicatif::ProgressBar::new(total_steps as u64);
        pb.set_style(
            indicatif::ProgressStyle::with_template("warm [{bar:30}] {pos}/{len} {wide_msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb
    });
    // What the bar shows as running (scheduler thread only).
    let mut running_names: BTreeMap<usize, String> = BTreeMap::new();
    let show_running = |pb: &indicatif::ProgressBar, names: &BTreeMap<usize, String>| {
        pb.set_message(names.values().cloned().collect::<Vec<_>>().join(", "));
    };

    // One finished step's line: above the bar on a TTY (only failures unless -v), else on
    // stderr (all but `keep: false` lines under -q).
    let say = |line: &str, keep: bool| match &bar {
        Some(pb) => {
            if keep || ui.verbose > 0 {
                pb.println(line);
            }
            pb.inc(1);
        }
        None if keep => ui.always(line),
        None => ui.info(line),
    };
    let mut records: Vec<StepRecord> = Vec::new();
    let mut summary = Summary::default();
    let mut history: Vec<(String, f64)> = Vec::new();
    let mut infra: Option<anyhow::Error> = None;
    let mut finished = 0usize;

    std::thread::scope(|scope| {
        for _ in 0..opts.jobs.max(1) {
            let rx = job_rx.clone();
            let tx = done_tx.clone();
            let units = &units;
            scope.spawn(move || loop {
                let next = rx.lock().expect("job queue").recv();
                let Ok(u) = next else { break };
                let done = build_unit(plan, &units[u]);
                if tx.send(UnitResult { unit: u, done }).is_err() {
                    break;
                }
            });
        }
        drop(done_tx);
        let mut in_flight = 0usize;
        let mut skipped_units: Vec<usize> = Vec::new();
        loop {
            if infra.is_none() && !proc::interrupted() {
                while let Some(u) = scheduler.next_task() {
                    in_flight += 1;
                    if let Some(pb) = &bar {
                        running_names.insert(u, plan.steps[units[u].steps[0]].id(plan));
                        show_running(pb, &running_names);
                    }
                    let _ = job_tx.send(u);
                }
            }
            if in_flight == 0 {
                break;
            }
            let Ok(res) = done_rx.recv() else { break };
            in_flight -= 1;
            if let Some(pb) = &bar {
                running_names.remove(&res.unit);
                show_running(pb, &running_names);
            }
            let ok = matches!(
                res.done,
                Ok(Done::Built { .. }) | Ok(Done::Hit) | Ok(Done::Downloaded { .. })
            );
            let moved = match &res.done {
                Ok(Done::Built { sent, .. }) if *sent > 0 => {
                    format!(", {} up", short_size(*sent))
                }
                Ok(Done::Downloaded { bytes, .. }) => format!(" {}", short_size(*bytes)),
                _ => String::new(),
            };
            let newly_skipped = scheduler.finish(res.unit, ok);
            let remote_hit = matches!(res.done, Ok(Done::Downloaded { .. }));
            let (outcome, secs, error, tail) = match res.done {
                Ok(Done::Built { secs, .. }) => (Outcome::Built, secs, None, None),
                Ok(Done::Downloaded { secs, .. }) => (Outcome::Hit, secs, None, None),
                Ok(Done::Hit) => (Outcome::Hit, 0.0, None, None),
                Ok(Done::Failed { error, tail }) => (Outcome::Failed, 0.0, Some(error), Some(tail)),
                Err(e) => {
                    let msg = format!("{e:#}");
                    if infra.is_none() {
                        infra = Some(e);
                    }
                    (Outcome::Failed, 0.0, Some(msg), None)
                }
            };
            for &si in &units[res.unit].steps {
                let s = &plan.steps[si];
                finished += 1;
                match outcome {
                    Outcome::Built => {
                        summary.built += 1;
                        history.push((s.id(plan), secs));
                    }
                    Outcome::Hit => {
                        summary.hits += 1;
                        summary.saved_secs += s.estimate.unwrap_or(0.0);
                    }
                    _ => summary.failed += 1,
                }
                let line = format!(
                    "[{finished}/{total_steps}] {} {}/{} {} {}{moved}",
                    s.label(),
                    plan.scenes[s.scene].name,
                    s.name,
                    short_duration(std::time::Duration::from_secs_f64(secs)),
                    match outcome {
                        Outcome::Built => "built".to_string(),
                        Outcome::Hit if remote_hit => "remote-hit".to_string(),
                        Outcome::Hit => "hit".to_string(),
                        _ => ui.red("FAILED"),
                    }
                );
                let log = log_path(plan, s);
                if outcome == Outcome::Failed {
                    let why = error.clone().unwrap_or_default();
                    say(&format!("{line}\n  {why}\n  log: {}", log.display()), true);
                    summary.failed_scenes.push((
                        plan.scenes[s.scene].name.clone(),
                        format!("{} {}: {why}", s.label(), s.name),
                    ));
                } else {
                    say(&line, false);
                }
                records.push(step_record(
                    plan,
                    s,
                    outcome,
                    secs,
                    Some(&log),
                    error.clone(),
                    tail.clone(),
                ));
            }
            for u in newly_skipped {
                if skipped_units.contains(&u) {
                    continue;
                }
                skipped_units.push(u);
                for &si in &units[u].steps {
                    let s = &plan.steps[si];
                    finished += 1;
                    summary.skipped += 1;
                    say(
                        &format!(
                            "[{finished}/{total_steps}] {} {}/{} skipped (a step it needs failed)",
                            s.label(),
                            plan.scenes[s.scene].name,
                            s.name
                        ),
                        true,
                    );
                    records.push(step_record(
                        plan,
                        s,
                        Outcome::Skipped,
                        0.0,
                        None,
                        Some("not run: the fixture it needs failed".into()),
                        None,
                    ));
                }
            }
        }
        drop(job_tx);
    });
    if let Some(pb) = bar {
        pb.finish_and_clear();
    }
    summary.wall_secs = started.elapsed().as_secs_f64();

    if proc::interrupted() {
        return Err(crate::coded!(
            crate::exit::Exit::Interrupted,
            "interrupted: nothing partial was published"
        ));
    }
    if let Some(e) = infra {
        // Keep what is known, but an unusable cache is exit 3.
        let _ = WarmRecord::merge_and_save(&plan.job_dir, records);
        return Err(e);
    }
    History::record(&plan.store.root, &history);
    plan.files.save();
    WarmRecord::merge_and_save(&plan.job_dir, records).map_err(|e| {
        crate::coded!(
            crate::exit::Exit::Infra,
            "cannot write the warm record in {}: {e}",
            plan.job_dir.display()
        )
    })?;
    LastWarm {
        hits: summary.hits,
        built: summary.built,
        failed: summary.failed + summary.skipped,
        wall_secs: summary.wall_secs,
    }
    .save(&plan.store);
    crate::cache::remote::save_totals(&plan.store, plan.remote.as_deref());
    summary.remote = plan.remote.as_ref().map(|r| r.totals());
    let cfg = &plan.manifest.cache;
    let mut notes = Vec::new();
    maintain::prune(&plan.store, cfg.max_age, cfg.max_size, &mut |l| {
        notes.push(l)
    })?;
    if ui.verbose > 0 {
        for n in notes {
            ui.info(&n);
        }
    }
    summary.failed_scenes.sort();
    summary.failed_scenes.dedup();
    Ok(summary)
}

fn step_record(
    plan: &Plan,
    s: &crate::plan::Step,
    outcome: Outcome,
    duration_secs: f64,
    log: Option<&std::path::Path>,
    error: Option<String>,
    log_tail: Option<String>,
) -> StepRecord {
    StepRecord {
        kind: s.kind,
        scene: plan.scenes[s.scene].name.clone(),
        name: s.name.clone(),
        key: s.key.clone(),
        outcome,
        duration_secs,
        log: log.map(|l| l.display().to_string()),
        error,
        log_tail,
    }
}

/// Build one unit: lock its key, look again, run the step into staging, publish.
/// Err only for infrastructure (the cache); a failing step is `Done::Failed`.
fn build_unit(plan: &Plan, unit: &Unit) -> Result<Done> {
    let step = &plan.steps[unit.steps[0]];
    match build_as(plan, unit, &step.key)? {
        Attempt::Done(done) => Ok(done),
        Attempt::InputChanged(path) => inputs::rerun(plan, unit, &path),
    }
}

/// One try at a unit under `key`.
enum Attempt {
    Done(Done),
    /// A file the key read changed while the step ran: nothing was published.
    InputChanged(PathBuf),
}

fn build_as(plan: &Plan, unit: &Unit, key: &str) -> Result<Attempt> {
    let step = &plan.steps[unit.steps[0]];
    let store = plan.store_of(step);
    // A hit, too, is decided and touched under the key lock: `cache prune` takes the same
    // lock before it evicts, so it can never remove an entry this warm reports as a hit.
    let _lock = store.lock_key(step.kind, key)?;
    // The plan, moments ago in this process, already re-checked a hit's dependencies;
    // under the lock it is enough that the entry is still whole.
    let hit = if step.status.is_hit() && key == step.key {
        store.present(step.kind, key)
    } else {
        None
    };
    // A stale step is rebuilt even if its own entry still checks out (a golden whose
    // fixture is rebuilt); at worst a concurrent warm's fresh entry is built again.
    let relook = !matches!(step.status, crate::plan::Status::Stale(_));
    let found = || match store.lookup(step.kind, key, &plan.manifest.dir, &plan.files) {
        Lookup::Hit(e) => Some(e),
        _ => None,
    };
    if let Some(e) = hit.or_else(|| relook.then(found).flatten()) {
        store.touch(&e);
        // Write-through: a local hit the shared cache lacks is offered to the fleet.
        if let Some(r) = plan
            .remote
            .as_deref()
            .filter(|r| step.persist && r.writes())
        {
            r.upload(&e, true)?;
        }
        return Ok(Attempt::Done(Done::Hit));
    }
    // Local miss: the shared cache (not for a stale step: its entry there is as stale),
    // then a build.
    if let Some(r) = plan.remote.as_deref().filter(|_| step.persist && relook) {
        let t0 = Instant::now();
        let fetched = r.fetch(store, step.kind, key, &plan.manifest.dir, &plan.files)?;
        if let crate::cache::remote::Fetched::Published(bytes) = fetched {
            let secs = t0.elapsed().as_secs_f64();
            return Ok(Attempt::Done(Done::Downloaded { bytes, secs }));
        }
    }
    let staging = store.stage(step.kind)?;
    let out = staging.out();
    let depfile = staging.dir.join("deps.d");
    let command = plan.command(
        step,
        &Fill::Real {
            out: &out,
            depfile: &depfile,
        },
    );
    let scene = plan.scene(step);
    let mut env = scene.env.clone();
    env.insert("SCENERUN_OUT".into(), out.display().to_string());
    env.insert("SCENERUN_SCENE".into(), scene.name.clone());
    env.insert("SCENERUN_THREADS".into(), step.threads.to_string());
    if step.kind != Kind::Kernel {
        env.insert("SCENERUN_DEPFILE".into(), depfile.display().to_string());
    }
    if let Some(&f) = step.deps.first() {
        env.insert(
            "SCENERUN_FIXTURE".into(),
            plan.artifact(&plan.steps[f]).display().to_string(),
        );
    }
    let log = log_path(plan, step);
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::create_dir_all(log.parent().expect("log has a dir"));
    let _ = std::fs::write(&log, format!("$ {command}\n"));
    let t0 = Instant::now();
    let ended = proc::run(&proc::Spec {
        command: &command,
        dir: &plan.manifest.dir,
        env: &env,
        log: &log,
        timeout: step.timeout,
    });
    let secs = t0.elapsed().as_secs_f64();
    let fail = |error: String| -> Result<Attempt> {
        Ok(Attempt::Done(Done::Failed {
            error,
            tail: proc::log_tail(&log, 4000),
        }))
    };
    match ended {
        Err(e) => return fail(format!("could not start `sh -c`: {e}")),
        Ok(Ended::Exited(0)) => {}
        Ok(Ended::Interrupted) => return fail("interrupted".into()),
        Ok(other) => return fail(other.describe()),
    }
    let empty = match std::fs::metadata(&out) {
        Ok(m) if m.is_file() => m.len() == 0,
        Ok(m) if m.is_dir() => std::fs::read_dir(&out)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true),
        _ => true,
    };
    if empty {
        return fail(format!(
            "exited 0 but left {{out}} {} ({})",
            if out.exists() { "empty" } else { "missing" },
            out.display()
        ));
    }
    // An artifact the cache cannot hold (a symlink, a fifo) fails this step, not the warm.
    if let Err(e) = crate::fsutil::walk_files(&out) {
        return fail(format!("left {{out}} that cannot be cached: {e}"));
    }
    let deps = match recorded_deps(plan, step, &depfile, &staging.dir) {
        Ok(d) => d,
        Err(why) => return fail(why),
    };
    // What was built from an input edited meanwhile is not what the key names.
    if let Some(path) = inputs::changed_during(plan, step) {
        drop(staging);
        return Ok(Attempt::InputChanged(path));
    }
    let built_by = step.id(plan);
    let entry = store.publish(staging, step.kind, key, &built_by, secs, deps)?;
    store.touch(&entry);
    let sent = match plan.remote.as_deref().filter(|_| step.persist) {
        Some(r) => r.upload(&entry, false)?,
        None => 0,
    };
    Ok(Attempt::Done(Done::Built { secs, sent }))
}

/// The files a step reported reading through its depfile (kernels whose toolchain has
/// `depfile`, fixtures and goldens whose command has `{depfile}`), with their content
/// hashes, to be re-checked on every lookup. Err: why the step fails.
fn recorded_deps(
    plan: &Plan,
    step: &crate::plan::Step,
    depfile: &std::path::Path,
    staging: &std::path::Path,
) -> std::result::Result<Vec<Dep>, String> {
    let scene = plan.scene(step);
    let (wants, make_only) = match step.kind {
        Kind::Kernel => {
            let k = scene.kernels.iter().find(|k| k.name == step.name);
            let tc = k.and_then(|k| plan.manifest.toolchains.get(&k.toolchain));
            (tc.is_some_and(|tc| tc.depfile.is_some()), true)
        }
        Kind::Fixture => (
            scene.fixture.as_ref().is_some_and(|g| g.has_depfile()),
            false,
        ),
        Kind::Golden => (
            scene.golden.as_ref().is_some_and(|g| g.has_depfile()),
            false,
        ),
    };
    if !wants {
        return Ok(Vec::new());
    }
    // The step made it: a FIFO or link there must not block or lead out.
    let Ok(text) =
        crate::fsutil::read_nofollow(depfile).map(|t| String::from_utf8_lossy(&t).into_owned())
    else {
        return Err(if make_only {
            format!(
                "the toolchain's depfile option was given but no depfile was written at {}",
                depfile.display()
            )
        } else {
            format!(
                "depfile not written: the command has {{depfile}} but exited 0 without writing {}",
                depfile.display()
            )
        });
    };
    let paths = if make_only {
        depfile::parse(&text)
    } else {
        depfile::parse_any(&text)
    };
    let mut deps = Vec::new();
    for p in paths {
        let path = crate::key::normalize(&plan.manifest.dir.join(&p));
        if path.starts_with(staging) {
            continue;
        }
        // An artifact of this warm (a golden reads its fixture) may have been rebuilt
        // since the plan hashed it: read it again rather than trust the memo.
        let built_here = path.starts_with(&plan.store.root) || path.starts_with(&plan.job.root);
        let hash = if built_here {
            crate::key::hash_file(&path)
        } else {
            plan.files.hash(&path)
        };
        match hash {
            Ok(h) => deps.push(Dep {
                path: crate::key::key_name(&plan.manifest.dir, &path),
                blake3: h,
            }),
            Err(e) => return Err(format!("depfile names {p}, which cannot be read: {e}")),
        }
    }
    Ok(deps)
}

/// The failed scenes and the final line.
pub fn print_summary(s: &Summary, ui: &Ui) {
    for (scene, why) in &s.failed_scenes {
        ui.always(&format!("{} scene {scene}: {why}", ui.red("failed:")));
    }
    ui.always(&format!(
        "warm: {} built, {} hit, {} failed{} in {:.1}s; hits saved ~{:.1}s of CPU time",
        s.built,
        s.hits,
        s.failed,
        if s.skipped > 0 {
            format!(", {} skipped", s.skipped)
        } else {
            String::new()
        },
        s.wall_secs,
        s.saved_secs
    ));
    if let Some(t) = &s.remote {
        ui.always(&format!("remote cache: {}", t.line()));
    }
}
