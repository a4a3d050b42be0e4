//! `scenerun warm`: build every missing artifact outside the lock, in parallel, into the
//! cache (or the job dir for `persist: false`). Invariants kept here: a key is built at
//! most once per cache (per-key lock, look again after acquiring it); a failure is never
//! cached and fails only its scene; nothing partial is ever published.
//!
//! One pipeline: the plan's units (grouped once, in `plan`) go to the executor (`exec`,
//! driven by the pure scheduler `sched`), which runs `build_unit` on its slots and emits
//! typed events (`events`); one accumulator (`accum`) turns them into the summary, the
//! warm record, history, key-input records and trace spans; one reporter, handed in as
//! `events::Shown` (report/'s `report::warm::Reporter`), renders them. `run` hands back what it published so `scenerun run` updates its plan.

pub mod accum;
pub mod depfile;
pub mod events;
pub mod exec;
mod inputs;
pub mod sched;
#[cfg(test)]
pub(crate) mod testing;
pub mod workers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;

use crate::base::failure::FailCause;
use crate::base::notice::Notice;
use crate::base::proc::{self, Ended};
use crate::base::record::WarmRecord;
use crate::cache::history::History;
use crate::cache::maintain::{self, LastWarm};
use crate::cache::{Dep, Entry, Kind, Lookup};
use crate::key::inputs::Records;
use crate::plan::{Fill, Plan, Status, Unit};
use accum::{Accumulator, Summary};
pub use events::Shown;
use events::{UnitEnd, UnitOutcome};

pub struct Options<'a> {
    pub jobs: usize,
    pub memory: u64,
    /// Writes the trace of the warm's spans (the command hands in the report's writer:
    /// a phase renders no report itself).
    pub trace: &'a (dyn Fn(&[accum::Span]) -> std::io::Result<()> + Sync),
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

/// What a warm did, and what it published (for `Plan::apply_warm`).
pub struct Warmed {
    pub summary: Summary,
    pub published: Published,
}

/// Warm every unit of the plan: the executor runs them and emits events; the reporter
/// renders each event, the accumulator keeps what it means; then records, history, key
/// inputs and the trace are written and the cache is pruned.
pub fn run(plan: &Plan, opts: &Options, shown: &mut dyn Shown) -> Result<Warmed> {
    let started = Instant::now();
    plan.store.ensure()?;
    let mut stores = vec![&plan.store];
    if plan.steps.iter().any(|s| !s.persist) {
        plan.job.ensure()?;
        stores.push(&plan.job);
    }
    for x in stores.into_iter().filter_map(|s| s.exposed()) {
        shown.notice(Notice::CacheExposed(x));
    }
    plan.store.sweep_tmp();
    plan.job.sweep_tmp();

    shown.start(plan);
    let mut acc = Accumulator::new(plan);
    exec::execute(
        plan,
        opts.jobs,
        opts.memory,
        exec::Builder {
            new: &|slot| workers::Slot::new(slot, &plan.job_dir),
            build: &build_or_fail,
        },
        &settle_hit,
        &mut |ev| {
            shown.event(plan, &ev);
            acc.on(plan, ev);
        },
    );
    shown.stop();
    acc.finish(started.elapsed().as_secs_f64());

    if proc::interrupted() {
        return Err(crate::base::error::err!(
            Interrupted,
            "interrupted: nothing partial was published"
        ));
    }
    if let Some(e) = acc.infra.take() {
        // Keep what is known, but an unusable cache is exit 3.
        let _ = WarmRecord::merge_and_save(&plan.job_dir, &plan.record, acc.records);
        return Err(e);
    }
    // Prune walks every entry of the cache; nothing written below is an entry, so it
    // runs beside the records. An error of theirs still wins over one of its. A warm
    // that put nothing in the cache leaves a recent prune with the same limits be.
    let cfg = &plan.manifest.cache;
    let added = acc.summary.units_built + acc.summary.remote_hits > 0;
    let due = added || !maintain::pruned_lately(&plan.store, cfg.max_age, cfg.max_size);
    let (pruned, recorded) = std::thread::scope(|scope| {
        let pruned = scope.spawn(|| {
            let mut notes = Vec::new();
            if !due {
                notes.push(Notice::NotPruned);
                return Ok(notes);
            }
            maintain::prune(&plan.store, cfg.max_age, cfg.max_size, &mut |n| {
                notes.push(n)
            })
            .map(|()| notes)
        });
        let recorded = record(plan, acc, opts.trace, &mut *shown);
        (pruned.join().expect("prune thread"), recorded)
    });
    let (summary, published) = recorded?;
    let notes = pruned?;
    for n in notes {
        shown.notice(n);
    }
    Ok(Warmed { summary, published })
}

/// The units a warm published or found, for `Plan::apply_warm`.
type Published = Vec<(usize, Status, Option<Arc<Entry>>)>;

/// What a warm leaves behind besides its entries: history, key inputs, the stat memo,
/// the trace, the warm record and the cache's last-warm summary.
fn record(
    plan: &Plan,
    acc: Accumulator,
    trace: &(dyn Fn(&[accum::Span]) -> std::io::Result<()> + Sync),
    shown: &mut dyn Shown,
) -> Result<(Summary, Published)> {
    // The trace (one span per unit, thousands in a no-op warm) is written on a thread
    // of its own while the rest is saved; it shares no file with them.
    let spans = acc.spans;
    let traced = std::thread::scope(|scope| {
        let traced = scope.spawn(|| trace(&spans));
        History::record(&plan.store.root, &acc.history);
        let built: Vec<(String, crate::key::inputs::KeyInputs)> = acc
            .built_steps
            .iter()
            .filter_map(|&i| Some((plan.steps[i].id.record_key(), plan.key_inputs(i)?)))
            .collect();
        Records::record(&plan.store.root, &built);
        plan.files.save();
        let saved = WarmRecord::merge_and_save(&plan.job_dir, &plan.record, acc.records);
        (traced.join().expect("trace thread"), saved)
    });
    let (traced, saved) = traced;
    if let Err(e) = traced {
        shown.notice(Notice::TraceNotWritten {
            error: e.to_string(),
        });
    }
    saved.map_err(|e| {
        let what = format!("cannot write the warm record in {}", plan.job_dir.display());
        crate::base::error::infra(what, e)
    })?;
    let mut summary = acc.summary;
    LastWarm {
        hits: summary.hits,
        built: summary.built,
        failed: summary.failed + summary.skipped,
        wall_secs: summary.wall_secs,
    }
    .save(&plan.store);
    crate::cache::remote::save_totals(&plan.store, plan.remote.as_deref());
    summary.remote = plan.remote.as_ref().map(|r| r.totals());
    Ok((summary, acc.published))
}

/// A unit the plan found as a hit, settled without the pool: under its key lock (which
/// `cache prune` and `clean` take before they evict) the entry is still whole — the same
/// `still_present` check and `touch` as `build_as` makes for such a hit. `None` (left to
/// the pool, which does all of `build_as`) for anything else: a miss, a stale step, an
/// entry no longer whole, a lock that cannot be taken, a remote cache to write through.
/// A hit the plan's lookup settled already ([`crate::plan::Lookups::Settle`]) is taken
/// as it is.
fn settle_hit(plan: &Plan, unit: usize) -> Option<UnitEnd> {
    let step = &plan.steps[plan.units[unit].steps[0]];
    let seen = step.entry.as_ref().filter(|_| step.status.is_hit())?;
    if plan
        .remote
        .as_deref()
        .is_some_and(|r| step.persist && r.writes())
    {
        return None;
    }
    let hit = || {
        Some(UnitEnd {
            outcome: UnitOutcome::Hit {
                entry: seen.clone(),
            },
            input_changed: None,
            worker: None,
        })
    };
    if plan.units[unit].settled {
        return hit();
    }
    let store = plan.store_of(step);
    let _lock = store.lock_key(step.kind, &step.key).ok()?;
    if !store.settle_present(step.kind, &step.key, seen) {
        return None;
    }
    hit()
}

/// One unit's end: a failing step is `Failed`, a cache error `Infra`; an input that
/// changed during the step is named beside the outcome of its one rerun.
fn build_or_fail(plan: &Plan, unit: usize, slot: &mut workers::Slot) -> UnitEnd {
    let step = &plan.steps[plan.units[unit].steps[0]];
    let (done, input_changed) = match build_as(plan, &plan.units[unit], &step.key, slot) {
        Ok(Attempt::Done(done)) => (Ok(done), None),
        Ok(Attempt::InputChanged(path)) => {
            let shown = crate::key::key_name(&plan.manifest.dir, &path);
            (
                inputs::rerun(plan, &plan.units[unit], &shown, slot),
                Some(shown),
            )
        }
        Err(e) => (Err(e), None),
    };
    let outcome = match done {
        Ok(Done::Built { secs, entry, sent }) => UnitOutcome::Built { secs, entry, sent },
        Ok(Done::Hit(entry)) => UnitOutcome::Hit { entry },
        Ok(Done::Downloaded { secs, bytes, entry }) => {
            UnitOutcome::Downloaded { secs, bytes, entry }
        }
        Ok(Done::Failed(cause)) => UnitOutcome::Failed {
            cause,
            log: step.id.log_path(&plan.job_dir),
        },
        Err(e) => UnitOutcome::Infra(e),
    };
    UnitEnd {
        outcome,
        input_changed,
        worker: slot.take_note(),
    }
}

enum Done {
    /// `sent`: bytes uploaded to the remote cache afterwards.
    Built {
        secs: f64,
        entry: Arc<Entry>,
        sent: u64,
    },
    Hit(Arc<Entry>),
    /// Downloaded from the remote cache and published locally, in `secs`.
    Downloaded {
        secs: f64,
        bytes: u64,
        entry: Arc<Entry>,
    },
    Failed(FailCause),
}

/// One try at a unit under `key`.
enum Attempt {
    Done(Done),
    /// A file the key read changed while the step ran: nothing was published.
    InputChanged(PathBuf),
}

/// Build one unit under `key`: lock it, look again (locally, then in the remote cache),
/// run the step into staging, check its inputs did not change meanwhile, publish, upload.
/// Err only for infrastructure (the cache); a failing step is `Done::Failed`.
fn build_as(plan: &Plan, unit: &Unit, key: &str, slot: &mut workers::Slot) -> Result<Attempt> {
    let step = &plan.steps[unit.steps[0]];
    let store = plan.store_of(step);
    // A hit, too, is decided and touched under the key lock: `cache prune` takes the same
    // lock before it evicts, so it can never remove an entry this warm reports as a hit.
    let _lock = store.lock_key(step.kind, key)?;
    // The plan, moments ago in this process, already re-checked a hit's dependencies;
    // under the lock it is enough that the entry is still whole.
    let hit = match &step.entry {
        Some(seen) if step.status.is_hit() && key == step.key => store
            .still_present(step.kind, key, seen)
            .then(|| seen.clone()),
        _ => None,
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
        return Ok(Attempt::Done(Done::Hit(e)));
    }
    // Local miss: the shared cache (not for a stale step: its entry there is as stale),
    // then a build.
    if let Some(r) = plan.remote.as_deref().filter(|_| step.persist && relook) {
        let t0 = Instant::now();
        let fetched = r.fetch(store, step.kind, key, &plan.manifest.dir, &plan.files)?;
        if let crate::cache::remote::Fetched::Published(bytes) = fetched {
            if let Some(entry) = store.present(step.kind, key) {
                store.touch(&entry);
                let secs = t0.elapsed().as_secs_f64();
                let entry = Arc::new(entry);
                return Ok(Attempt::Done(Done::Downloaded { secs, bytes, entry }));
            }
        }
    }
    build_in_staging(plan, unit, key, slot)
}

/// Run a unit's step into a fresh staging directory (as a process, or in its worker on
/// this slot) and publish what it made under `key` (then upload it when writes are on):
/// the step fails when it exits non-zero, leaves `{out}` empty or uncacheable, or names
/// a bad depfile entry; nothing is published when a file its key read changed meanwhile.
fn build_in_staging(
    plan: &Plan,
    unit: &Unit,
    key: &str,
    slot: &mut workers::Slot,
) -> Result<Attempt> {
    let step = &plan.steps[unit.steps[0]];
    let store = plan.store_of(step);
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
    let env = step_env(plan, step, &out, &depfile);
    let log = step.id.log_path(&plan.job_dir);
    let started = inputs::start_log(&plan.job_dir, &log, &command);
    let t0 = Instant::now();
    let spec = proc::Spec {
        command: &command,
        dir: &plan.manifest.dir,
        env: &env,
        log: &log,
        timeout: step.timeout,
        stop: None,
    };
    let ran = slot.run(plan, step, &spec);
    let secs = t0.elapsed().as_secs_f64();
    fn fail(cause: FailCause) -> Result<Attempt> {
        Ok(Attempt::Done(Done::Failed(cause)))
    }
    let ended = match ran {
        workers::StepRun::Ended(ended) => ended,
        workers::StepRun::Lost { worker, loss } => {
            return fail(FailCause::WorkerLost { worker, loss })
        }
    };
    match ended {
        Err(e) => {
            return fail(FailCause::CouldNotStart {
                error: e.to_string(),
            })
        }
        Ok(Ended::Exited(0)) => {}
        Ok(Ended::Exited(c)) => return fail(FailCause::Exited { status: c }),
        Ok(Ended::Signaled(s)) => return fail(FailCause::Signaled { signal: s }),
        Ok(Ended::TimedOut) => {
            return fail(FailCause::TimedOut {
                limit: step.timeout.unwrap_or_default(),
            })
        }
        Ok(Ended::Interrupted) => return fail(FailCause::Interrupted),
    }
    stamp_empty_out(step, &out);
    if let Some(cause) = unpublishable(&out) {
        return fail(cause);
    }
    let deps = match recorded_deps(plan, step, &depfile, &staging.dir) {
        Ok(d) => uncommitted(plan, unit.steps[0], key, d),
        Err(why) => return fail(why),
    };
    // What was built from an input edited meanwhile is not what the key names.
    if let Some(path) = inputs::changed_during(plan, step, &deps, started) {
        drop(staging);
        return Ok(Attempt::InputChanged(path));
    }
    let built_by = step.id.record_key();
    let entry = store.publish(staging, step.kind, key, &built_by, secs, deps)?;
    store.touch(&entry);
    let sent = match plan.remote.as_deref().filter(|_| step.persist) {
        Some(r) => r.upload(&entry, false)?,
        None => 0,
    };
    Ok(Attempt::Done(Done::Built {
        secs,
        entry: Arc::new(entry),
        sent,
    }))
}

/// Why a step's `{out}` cannot be published: empty or missing, or holding what the
/// cache cannot hold (a symlink, a FIFO: that fails this step, not the warm).
fn unpublishable(out: &std::path::Path) -> Option<FailCause> {
    let empty = match std::fs::metadata(out) {
        Ok(m) if m.is_file() => m.len() == 0,
        Ok(m) if m.is_dir() => std::fs::read_dir(out)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true),
        _ => true,
    };
    if empty {
        return Some(FailCause::EmptyOut {
            missing: !out.exists(),
            out: out.display().to_string(),
        });
    }
    crate::base::fsutil::walk_files(out)
        .err()
        .map(|e| FailCause::Uncacheable {
            error: e.to_string(),
        })
}

/// `deps` without the files `key` itself commits to by name and content (the source, a
/// declared input, a member of the include closure): a lookup that arrives at this key
/// computed it from those very files, so re-checking them on every hit proves nothing
/// and only makes the record (a kernel's: ~80 headers) longer to read (docs/cache.md,
/// "Depfile re-check"). All of `deps` when the key computed again is not `key`.
fn uncommitted(plan: &Plan, step: usize, key: &str, mut deps: Vec<Dep>) -> Vec<Dep> {
    if deps.is_empty() {
        return deps;
    }
    if let Some(inputs) = plan.inputs_of_key(step, key) {
        let committed = inputs.committed();
        deps.retain(|d| !committed.contains(&(&*d.path, &*d.blake3)));
    }
    deps
}

/// The files a step reported reading through its depfile (kernels whose toolchain has
/// `depfile`, fixtures and goldens whose command has `{depfile}`), with their content
/// hashes, to be re-checked on every lookup. Err: why the step fails.
fn recorded_deps(
    plan: &Plan,
    step: &crate::plan::Step,
    depfile: &std::path::Path,
    staging: &std::path::Path,
) -> std::result::Result<Vec<Dep>, FailCause> {
    let scene = plan.scene(step);
    let (wants, make_only) = match step.kind {
        Kind::Compiled => unreachable!("{}", Kind::NOT_A_STEP),
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
        Kind::Test => (scene.test.as_ref().is_some_and(|g| g.has_depfile()), false),
        Kind::Prepare => (
            plan.manifest
                .prepare
                .iter()
                .any(|p| p.name == step.name && p.step.has_depfile()),
            false,
        ),
    };
    if !wants {
        return Ok(Vec::new());
    }
    // The step made it: a FIFO or link there must not block or lead out.
    let Ok(text) = crate::base::fsutil::read_capped(depfile, crate::base::fsutil::Cap::DEPFILE)
        .map(|t| String::from_utf8_lossy(&t).into_owned())
    else {
        return Err(if make_only {
            FailCause::NoDepfile {
                depfile: depfile.display().to_string(),
            }
        } else {
            FailCause::DepfileNotWritten {
                depfile: depfile.display().to_string(),
            }
        });
    };
    let paths = if make_only {
        depfile::parse(&text)
    } else {
        depfile::parse_any(&text)
    };
    depfile::recorded(paths, &plan.manifest.dir, staging, |path| {
        // An artifact of this warm (a golden reads its fixture) may have been rebuilt
        // since the plan hashed it: read it again rather than trust the memo.
        let built_here = path.starts_with(&plan.store.root) || path.starts_with(&plan.job.root);
        if built_here {
            crate::base::fsutil::open_regular(path)
                .and_then(|f| crate::cache::digest::Digester::new().read_all(f))
                .map(|d| d.blake3)
        } else {
            plan.files.hash(path)
        }
    })
    .map_err(|(path, e)| FailCause::BadDepfileEntry {
        path,
        error: e.to_string(),
    })
}

/// The environment a warm step runs with: its context's env (docs/manifest.md) and the
/// `SCENERUN_*` values of its placeholders.
fn step_env(
    plan: &Plan,
    step: &crate::plan::Step,
    out: &std::path::Path,
    depfile: &std::path::Path,
) -> std::collections::BTreeMap<String, String> {
    let mut env = plan.step_context(step).1.clone();
    env.insert("SCENERUN_OUT".into(), out.display().to_string());
    if step.kind != Kind::Prepare {
        env.insert("SCENERUN_SCENE".into(), plan.scene(step).name.clone());
    }
    env.insert("SCENERUN_THREADS".into(), step.threads.to_string());
    if step.kind != Kind::Kernel {
        env.insert("SCENERUN_DEPFILE".into(), depfile.display().to_string());
    }
    let ps = &plan.scenes[step.scene];
    let (fixture, golden) = match step.kind {
        Kind::Test => (ps.fixture, ps.golden),
        _ => (step.deps.first().copied(), None),
    };
    for (name, dep) in [("SCENERUN_FIXTURE", fixture), ("SCENERUN_GOLDEN", golden)] {
        if let Some(d) = dep {
            env.insert(
                name.into(),
                plan.artifact(&plan.steps[d]).display().to_string(),
            );
        }
    }
    env
}

/// A prepare step's product is usually a side effect in the checkout (a project's own
/// kernel cache): an empty `{out}` gets a stamp, so the step is published and keyed. A
/// test that exited 0 without writing its verdict passed (docs/manifest.md).
fn stamp_empty_out(step: &crate::plan::Step, out: &std::path::Path) {
    let empty = std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_none());
    match step.kind {
        Kind::Prepare if empty => {
            let _ = std::fs::write(out.join("prepared"), format!("{}\n", step.name));
        }
        Kind::Test if empty => {
            let _ = std::fs::write(
                out.join(crate::base::verdict::FILE),
                crate::base::verdict::PASSED,
            );
        }
        _ => {}
    }
}
