//! Building a plan, stage by stage (`Plan::build`): the stores, identity outputs and
//! include closures, the steps, their keys, the units, one lookup per unit, and each
//! step's status. It runs only identity commands and reads files; it never writes to the
//! cache (the stat memo beside the manifest is refreshed).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use rayon::prelude::*;

use super::StaleStep;
use super::{cache_dir, include_paths, Lookups, Plan, PlanScene, Status, Step, Unit};
use crate::base::layout;
use crate::base::record::{Failures, WarmRecord};
use crate::base::stepid::StepId;
use crate::cache::history::{History, HistoryId};
use crate::cache::{Entry, Kind, Lookup, Stale, Store};
use crate::key::inputs::KeyInputs;
use crate::key::Files;
use crate::manifest::{GenStep, Manifest, Toolchain};
use crate::select::Selection;

impl Plan {
    /// The plan of the selection; `files` is the checkout's stat memo ([`stat_memo`]).
    /// Its stages, in order: the stores; history and the warm record, read on a thread
    /// of their own; identity outputs and include closures; the steps; their keys; the
    /// units; one lookup per unit; each step's status and estimate.
    pub fn build(
        manifest: Manifest,
        sel: &Selection,
        cache_flag: Option<&Path>,
        files: Files,
        mode: Lookups,
    ) -> Result<Plan> {
        crate::select::check_selections(&manifest, sel)?;
        let selected = crate::select::select(&manifest.scenes, sel)?;
        let job_dir = layout::job_dir(&manifest.dir);
        // Signed entries (`signing:`): a signing key that cannot be read is exit 4
        // before anything is looked up. The job dir's own store is the checkout's.
        let keys = crate::cache::sign::Keys::of(&manifest.signing)?;
        let store = Store::at(cache_dir(&manifest, cache_flag)).with_keys(keys);
        // Not a cache, or a link at its own directories: exit 3 before anything is read.
        store.check()?;
        let job = Store::at(layout::job_store(&job_dir));
        // History and the warm record are first needed after the lookups: they are read
        // on a thread of their own meanwhile (a few MB of JSON on a big suite, which had
        // been the critical path of a no-op warm while the closures were restored).
        let loads = {
            let (root, job_dir) = (store.root.clone(), job_dir.clone());
            std::thread::spawn(move || (History::load(&root), WarmRecord::load(&job_dir)))
        };
        let (identities, gen_identities) = identities_and_closures(&manifest, &selected, &files)?;
        let (scenes, steps) = steps_of(&manifest, &selected);
        let mut plan = Plan {
            device_count: 0,
            manifest,
            scenes,
            steps,
            units: Vec::new(),
            store,
            job,
            job_dir,
            history: History::default(),
            files,
            no_lock: None,
            remote: None,
            identities,
            gen_identities,
            env_hashes: Vec::new(),
            record: WarmRecord::default(),
        };
        // Env as `explain` records it: hashed once per scene, shared by its steps.
        plan.env_hashes = plan
            .scenes
            .iter()
            .map(|ps| KeyInputs::env_hashes(&plan.manifest.scenes[ps.index].env))
            .collect();
        plan.compute_keys()?;
        plan.group_units();
        let lookups = plan.look_up(mode);
        let (history, record) = loads.join().expect("load thread");
        plan.set_statuses(&lookups, history, record);
        plan.files.save();
        plan.device_count = plan.resolve_device_count()?;
        Ok(plan)
    }

    /// Every step's key: kernels' and fixtures' in parallel, then goldens' (they hold
    /// their fixture's). The closure memo is written meanwhile (it needs no key).
    fn compute_keys(&mut self) -> Result<()> {
        std::thread::scope(|scope| -> Result<()> {
            let files = &self.files;
            scope.spawn(move || files.save_closures());
            for goldens in [false, true] {
                // An indexed collect writes each key into its slot: no per-thread lists
                // of (index, result, inputs) to concatenate, which set the plan's peak
                // memory.
                let keys: Vec<Option<Result<String>>> = (0..self.steps.len())
                    .into_par_iter()
                    .map(|i| {
                        ((self.steps[i].kind == Kind::Golden) == goldens)
                            .then(|| self.compute_key(i, false).map(|k| k.0))
                    })
                    .collect();
                for (i, k) in keys.into_iter().enumerate() {
                    if let Some(k) = k {
                        self.steps[i].key = k?;
                    }
                }
            }
            Ok(())
        })
    }

    /// One lookup per unit (scenes share kernels), in unit order; `Settle` also marks
    /// which hits the lookup settled. After the first miss, a key its shard's listing
    /// does not hold is a miss without a lookup.
    fn look_up(&mut self, mode: Lookups) -> Vec<Lookup> {
        let snapshot = crate::cache::Snapshot::default();
        let plan = &*self;
        let looked: Vec<(Lookup, bool)> = plan
            .units
            .par_iter()
            .map(|u| {
                let s = &plan.steps[u.steps[0]];
                let store = plan.store_of(s);
                if store.listed_absent(&snapshot, s.kind, &s.key) {
                    return (Lookup::Miss, false);
                }
                let found = match mode {
                    Lookups::Look => (plan.lookup(s), false),
                    Lookups::Settle => {
                        store.lookup_settling(s.kind, &s.key, &plan.manifest.dir, &plan.files)
                    }
                };
                if matches!(found.0, Lookup::Miss) {
                    snapshot.missed();
                }
                found
            })
            .collect();
        looked
            .into_iter()
            .zip(&mut self.units)
            .map(|((found, settled), u)| {
                u.settled = settled;
                found
            })
            .collect()
    }

    /// Each step's status from its unit's lookup and the warm record's failures, its
    /// entry and history estimate; goldens of a fixture rebuilt after a depfile change
    /// are stale with it. The plan keeps the history and the record.
    fn set_statuses(&mut self, lookups: &[Lookup], history: History, record: WarmRecord) {
        self.history = history;
        for ps in &mut self.scenes {
            ps.device_estimate = self.history.estimate(HistoryId::Device(&ps.name));
        }
        let failures = record.failures();
        let plan = &*self;
        let statuses: Vec<(Status, Option<Arc<Entry>>)> = plan
            .steps
            .iter()
            .map(|s| {
                let lookup = &lookups[s.unit];
                let entry = match lookup {
                    Lookup::Hit(e) => Some(e.clone()),
                    _ => None,
                };
                (plan.status_of(s, lookup, &failures), entry)
            })
            .collect();
        for (i, (st, entry)) in statuses.into_iter().enumerate() {
            self.steps[i].status = st;
            self.steps[i].entry = entry;
            let id = HistoryId::Step(&self.steps[i].id);
            self.steps[i].estimate = self.history.estimate(id);
        }
        self.stale_with_fixture();
        drop(failures);
        self.record = record;
    }

    /// Group steps into units by (persist, kind, key), in plan order; the one grouping
    /// warm, `plan` and the summary count by.
    fn group_units(&mut self) {
        let mut by_key: HashMap<(bool, Kind, &str), usize> = HashMap::new();
        let mut units: Vec<Unit> = Vec::new();
        let mut unit_of = vec![0; self.steps.len()];
        for (i, s) in self.steps.iter().enumerate() {
            let u = *by_key
                .entry((s.persist, s.kind, s.key.as_str()))
                .or_insert_with(|| {
                    units.push(Unit {
                        steps: Vec::new(),
                        deps: Vec::new(),
                        settled: false,
                    });
                    units.len() - 1
                });
            units[u].steps.push(i);
            unit_of[i] = u;
        }
        for u in &mut units {
            let mut deps: Vec<usize> = u
                .steps
                .iter()
                .flat_map(|&i| self.steps[i].deps.iter().map(|&d| unit_of[d]))
                .collect();
            deps.sort();
            deps.dedup();
            u.deps = deps;
        }
        for (i, u) in unit_of.into_iter().enumerate() {
            self.steps[i].unit = u;
        }
        self.units = units;
    }

    fn status_of(&self, step: &Step, lookup: &Lookup, failures: &Failures) -> Status {
        match lookup {
            Lookup::Hit(_) => Status::Hit,
            other => {
                if let Some(f) = failures.get(&step.id, &step.key) {
                    return Status::Failed(f);
                }
                match other {
                    Lookup::Stale(why) => Status::Stale(StaleStep::Entry(why.clone())),
                    _ => Status::Miss,
                }
            }
        }
    }

    /// A fixture rebuilt because a file it read changed (its depfile) may come out
    /// different under the same key: the goldens computed from it are rebuilt with it.
    /// A damaged fixture, rebuilt from unchanged inputs, comes out the same: its goldens
    /// stay.
    fn stale_with_fixture(&mut self) {
        for i in 0..self.steps.len() {
            let Some(&f) = self.steps[i].deps.first() else {
                continue;
            };
            let fixture = &self.steps[f].status;
            if let (true, Status::Stale(StaleStep::Entry(why @ Stale::DepChanged { .. }))) =
                (self.steps[i].status.is_hit(), fixture)
            {
                self.steps[i].status = Status::Stale(StaleStep::Fixture(why.clone()));
                self.steps[i].entry = None;
            }
        }
    }

    /// `{device_count}`: `lock.device_count`, else the largest `devices` among the
    /// selected scenes. A count below the largest need is a usage error.
    fn resolve_device_count(&self) -> Result<u32> {
        // The first selected scene with the largest need: the one an error names.
        let widest = self
            .scenes
            .iter()
            .filter_map(|s| s.device.as_ref().map(|d| (d.devices, s)))
            .fold(None::<(u32, &PlanScene)>, |best, (n, s)| match best {
                Some((b, _)) if b >= n => best,
                _ => Some((n, s)),
            });
        let need = widest.map(|(n, _)| n).unwrap_or(1);
        match self.manifest.lock.as_ref().and_then(|l| l.device_count) {
            Some(n) if n < need => {
                let scene = widest.map(|(_, s)| s).expect("a need above 1 has a scene");
                let m = &self.manifest;
                Err(crate::base::error::err!(Usage,
                    "{}: lock.device_count is {n}, but scene `{}` needs {need} devices\n  {}: scenes[{}].device.devices: {need}",
                    m.place(m.layout.device_count),
                    scene.name,
                    m.place(m.layout.devices_of(scene.index)),
                    scene.index,
                ))
            }
            Some(n) => Ok(n),
            None => Ok(need),
        }
    }
}

/// Identity outputs — once per toolchain the selection uses, and once per fixture and
/// golden `identity:` command — each on a thread of its own (they wait on a child
/// process, and a rayon worker must not), while the rayon pool finds the include
/// closures of the selected kernels (they need no identity).
#[allow(clippy::type_complexity)]
fn identities_and_closures(
    manifest: &Manifest,
    selected: &[usize],
    files: &Files,
) -> Result<(HashMap<String, Vec<u8>>, HashMap<String, Vec<u8>>)> {
    let used = toolchains_used(manifest, selected);
    let (identities, gen_identities) = std::thread::scope(|scope| {
        let ids = scope.spawn(|| {
            each_waiting(&used, |name| {
                let tc = &manifest.toolchains[*name];
                identity(tc, manifest).map(|id| (name.to_string(), id))
            })
            .into_iter()
            .collect::<Result<HashMap<String, Vec<u8>>>>()
        });
        let gens = scope.spawn(|| gen_identities(manifest, selected));
        find_closures(manifest, selected, files);
        (
            ids.join().expect("identity thread"),
            gens.join().expect("identity thread"),
        )
    });
    Ok((identities?, gen_identities?))
}

/// The plan scenes and their steps, in manifest order: each kernel, the fixture, the
/// golden (after its fixture), and the manifest's prepare steps.
fn steps_of(manifest: &Manifest, selected: &[usize]) -> (Vec<PlanScene>, Vec<Step>) {
    let mut scenes = Vec::new();
    let mut steps = Vec::with_capacity(
        selected
            .iter()
            .map(|&i| {
                let s = &manifest.scenes[i];
                s.kernels.len() + usize::from(s.fixture.is_some()) + usize::from(s.golden.is_some())
            })
            .sum(),
    );
    for &i in selected {
        let s = &manifest.scenes[i];
        let si = scenes.len();
        let mut ps = PlanScene {
            name: s.name.clone(),
            index: i,
            kernels: Vec::new(),
            fixture: None,
            golden: None,
            test: None,
            prepare: Vec::new(),
            device: s.device.clone(),
            device_estimate: None,
        };
        let blank = |kind: Kind, name: &str, persist: bool| Step {
            id: StepId::new(kind, &s.name, name),
            unit: 0,
            kind,
            scene: si,
            name: name.to_string(),
            key: String::new(),
            persist,
            deps: Vec::new(),
            threads: 1,
            memory: 0,
            timeout: None,
            status: Status::Miss,
            entry: None,
            estimate: None,
        };
        for k in &s.kernels {
            ps.kernels.push(steps.len());
            steps.push(blank(Kind::Kernel, &k.name, true));
        }
        for (kind, g, slot) in [
            (Kind::Fixture, &s.fixture, &mut ps.fixture),
            (Kind::Golden, &s.golden, &mut ps.golden),
        ] {
            if let Some(g) = g {
                *slot = Some(steps.len());
                steps.push(gen_step(blank(kind, kind.name(), g.persist), g));
            }
        }
        if let (Some(f), Some(g)) = (ps.fixture, ps.golden) {
            steps[g].deps.push(f);
        }
        if let Some(t) = &s.test {
            let deps: Vec<usize> = ps.fixture.iter().chain(&ps.golden).copied().collect();
            ps.test = Some(steps.len());
            let mut step = gen_step(blank(Kind::Test, Kind::Test.name(), false), t);
            step.deps = deps;
            steps.push(step);
        }
        // A selection's prepare step is its scenes' (and those of no selection).
        for p in manifest
            .prepare
            .iter()
            .filter(|p| p.is_for(s.selection.as_deref()))
        {
            ps.prepare.push(steps.len());
            steps.push(gen_step(
                blank(Kind::Prepare, &p.name, p.step.persist),
                &p.step,
            ));
        }
        scenes.push(ps);
    }
    (scenes, steps)
}

/// A fixture, golden or prepare step with its resource hints.
fn gen_step(mut st: Step, g: &GenStep) -> Step {
    st.threads = g.threads;
    st.memory = g.memory.unwrap_or(0);
    st.timeout = g.timeout;
    st
}

/// The include closures of the selected kernels, found ahead of their keys (`files`
/// keeps them); an error is left for the key computation to report.
fn find_closures(manifest: &Manifest, selected: &[usize], files: &Files) {
    // Scenes share kernels: each (source, include dirs) once. Told apart by the names
    // keys use (each a function of its path), which compare as bytes; paths compare
    // component by component.
    fn names(k: &crate::manifest::Kernel) -> (&str, impl Iterator<Item = &str>) {
        let dirs = k.include_dirs.iter().map(|d| d.rel.as_str());
        (k.source.rel.as_str(), dirs)
    }
    let mut kernels: Vec<&crate::manifest::Kernel> = selected
        .iter()
        .flat_map(|&i| &manifest.scenes[i].kernels)
        .collect();
    kernels.sort_unstable_by(|a, b| {
        let ((sa, da), (sb, db)) = (names(a), names(b));
        sa.cmp(sb).then_with(|| da.cmp(db))
    });
    kernels.dedup_by(|a, b| {
        let ((sa, da), (sb, db)) = (names(a), names(b));
        sa == sb && da.eq(db)
    });
    let dirs: Vec<Vec<PathBuf>> = kernels.iter().map(|k| include_paths(k)).collect();
    let wanted: Vec<(&Path, &[PathBuf])> = kernels
        .iter()
        .zip(&dirs)
        .map(|(k, d)| (k.source.abs.as_path(), d.as_slice()))
        .collect();
    // Errors are the keys' to report, kernel by kernel.
    let _ = files.closures(&manifest.dir, &wanted);
}

/// Run a toolchain's identity command (once per process, bounded by its
/// `identity_timeout`). Its output and exit status go into every key the toolchain builds.
fn identity(tc: &Toolchain, manifest: &Manifest) -> Result<Vec<u8>> {
    let Some(cmd) = &tc.identity else {
        return Ok(Vec::new());
    };
    crate::base::identity::run(cmd, &manifest.dir, &manifest.env, tc.identity_timeout)
        .map_err(|e| identity_error(e, &format!("toolchain `{}`", tc.name)))
}

/// An identity command that gave no identity: exit 2 when the run was interrupted
/// meanwhile (it was stopped by the cancel), else an infrastructure error (exit 3).
fn identity_error(e: crate::base::identity::IdentityError, what: &str) -> anyhow::Error {
    match e {
        crate::base::identity::IdentityError::Interrupted { .. } => {
            crate::base::error::err!(Interrupted, "interrupted: {what}: {e}")
        }
        _ => crate::base::error::err!(Infra, "{what}: {e}"),
    }
}

/// Start the identity commands the selection will need (toolchains of its kernels, its
/// fixture and golden identities), each on a scoped thread of `s`, as soon as the
/// manifest is known: they wait on child processes while the stat memo is still being
/// read, and `Plan::build` then finds their output in the process's identity memo (or
/// waits there for a run still going; `s` joins the threads only when the plan is
/// made). What goes wrong is left for `Plan::build` to report (it asks again and gets
/// the same result); scenes a generator adds later start theirs there.
pub fn start_identities<'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    manifest: &Manifest,
    sel: &Selection,
) {
    let Ok(selected) = crate::select::select(&manifest.scenes, sel) else {
        return;
    };
    // The same commands `Plan::build` runs, with the same timeouts.
    let toolchains = toolchains_used(manifest, &selected)
        .into_iter()
        .filter_map(|name| manifest.toolchains.get(name))
        .filter_map(|tc| Some((tc.identity.as_deref()?, tc.identity_timeout)));
    let gens = gen_identity_commands(manifest, &selected)
        .into_iter()
        .map(|(cmd, _)| (cmd, crate::base::identity::DEFAULT_TIMEOUT));
    for (cmd, timeout) in toolchains.chain(gens) {
        let (cmd, dir, env) = (cmd.to_string(), manifest.dir.clone(), manifest.env.clone());
        s.spawn(move || {
            let _ = crate::base::identity::run(&cmd, &dir, &env, timeout);
        });
    }
}

/// The toolchains the selected scenes' kernels use, each once.
fn toolchains_used<'m>(manifest: &'m Manifest, selected: &[usize]) -> Vec<&'m str> {
    let mut used: Vec<&str> = selected
        .iter()
        .flat_map(|&i| {
            manifest.scenes[i]
                .kernels
                .iter()
                .map(|k| k.toolchain.as_str())
        })
        .collect();
    used.sort();
    used.dedup();
    used
}

/// The selected fixture and golden identity commands, each once, with which step kind
/// first names it (for messages).
fn gen_identity_commands<'m>(
    manifest: &'m Manifest,
    selected: &[usize],
) -> Vec<(&'m str, &'static str)> {
    let mut cmds: Vec<(&str, &str)> = Vec::new();
    for &i in selected {
        let s = &manifest.scenes[i];
        for (what, g) in [("fixture", &s.fixture), ("golden", &s.golden)] {
            if let Some(cmd) = g.as_ref().and_then(|g| g.identity.as_deref()) {
                if !cmds.iter().any(|(c, _)| *c == cmd) {
                    cmds.push((cmd, what));
                }
            }
        }
    }
    cmds
}

/// The identity outputs of the selected fixture and golden steps, by command (each
/// distinct command runs once, bounded by the default identity timeout).
fn gen_identities(manifest: &Manifest, selected: &[usize]) -> Result<HashMap<String, Vec<u8>>> {
    each_waiting(
        &gen_identity_commands(manifest, selected),
        |&(cmd, what)| {
            crate::base::identity::run(
                cmd,
                &manifest.dir,
                &manifest.env,
                crate::base::identity::DEFAULT_TIMEOUT,
            )
            .map(|o| (cmd.to_string(), o))
            .map_err(|e| identity_error(e, &format!("{what} identity")))
        },
    )
    .into_iter()
    .collect()
}

/// `f` of each item, each on a scoped thread of its own, in item order: for work that
/// waits on a child process (identity commands), which a rayon worker must not.
fn each_waiting<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let f = &f;
        let runs: Vec<_> = items.iter().map(|i| s.spawn(move || f(i))).collect();
        runs.into_iter()
            .map(|h| h.join().expect("identity thread"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::base::failure::{FailCause, Failure, StepFailure};

    /// Two scenes sharing one kernel, each with a fixture and a golden.
    fn manifest(dir: &Path) -> Manifest {
        fs::write(dir.join("k.c"), "int k;\n").unwrap();
        let mut y = String::from(
            "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"cc -c {source} -o {out}\"\nscenes:\n",
        );
        for s in ["a", "b"] {
            y.push_str(&format!(
                "  - name: {s}\n    kernels:\n      - name: k\n        toolchain: cc\n        source: k.c\n    fixture:\n      run: \"gen {{out}}\"\n    golden:\n      run: \"gold {{fixture}} {{out}}\"\n"
            ));
        }
        fs::write(dir.join("scenes.yaml"), y).unwrap();
        crate::manifest::load(&dir.join("scenes.yaml")).unwrap()
    }

    fn plan(dir: &Path) -> Plan {
        let m = manifest(dir);
        let memo = super::super::stat_memo(&m.dir);
        Plan::build(m, &Selection::default(), None, memo, Lookups::Look).unwrap()
    }

    #[test]
    fn steps_of_lists_each_scenes_steps_in_order_with_the_golden_after_its_fixture() {
        let t = tempfile::tempdir().unwrap();
        let m = manifest(t.path());
        let (scenes, steps) = steps_of(&m, &[1]);
        assert_eq!(scenes.len(), 1);
        let ps = &scenes[0];
        assert_eq!((ps.name.as_str(), ps.index), ("b", 1));
        let ids: Vec<String> = steps.iter().map(|s| s.id.labelled()).collect();
        assert_eq!(ids, ["compile b/k", "fixture b/fixture", "golden b/golden"]);
        assert_eq!(
            (ps.kernels.clone(), ps.fixture, ps.golden),
            (vec![0], Some(1), Some(2))
        );
        assert_eq!(steps[2].deps, [1], "the golden needs its fixture");
        assert!(steps
            .iter()
            .all(|s| s.status == Status::Miss && s.key.is_empty()));
    }

    #[test]
    fn keys_units_and_lookups_make_one_unit_per_artifact() {
        let t = tempfile::tempdir().unwrap();
        let p = plan(t.path());
        assert_eq!(p.steps.len(), 6);
        // The scenes' kernels are the same step: one key, one unit; the fixture and
        // golden commands are the same too (no `{scene}` in them).
        assert_eq!(p.steps[0].key, p.steps[3].key);
        assert_eq!(p.units.len(), 3);
        assert_eq!(p.units[p.steps[0].unit].steps, [0, 3]);
        // A golden's key holds its fixture's: its unit depends on the fixture's.
        let golden = &p.units[p.steps[2].unit];
        assert_eq!(golden.deps, [p.steps[1].unit]);
        assert!(p.steps.iter().all(|s| s.status == Status::Miss));
    }

    #[test]
    fn statuses_tell_a_hit_a_damaged_entry_and_a_warm_failure_apart() {
        let t = tempfile::tempdir().unwrap();
        let p = plan(t.path());
        // Publish the kernel; record a warm failure of the fixture under its key.
        let k = &p.steps[0];
        p.store.ensure().unwrap();
        let staging = p.store.stage(k.kind).unwrap();
        fs::write(staging.out(), b"obj").unwrap();
        let entry = p
            .store
            .publish(staging, k.kind, &k.key, "kernel/a/k", 0.1, Vec::new())
            .unwrap();
        let f = &p.steps[1];
        let failed = crate::base::record::StepRecord {
            kind: f.kind,
            scene: "a".into(),
            name: f.name.clone(),
            key: f.key.clone(),
            outcome: crate::base::record::Outcome::Failed,
            duration_secs: 1.0,
            log: None,
            failure: Some(Failure::Failed(FailCause::Exited { status: 1 })),
            log_tail: Some("boom\n".into()),
        };
        let mut record = WarmRecord::default();
        record.version = crate::base::record::RECORD_VERSION;
        record.steps.push(failed);
        let p = {
            let mut p = plan(t.path());
            let lookups = p.look_up(Lookups::Look);
            p.set_statuses(&lookups, History::default(), record.clone());
            p
        };
        assert_eq!(
            (&p.steps[0].status, &p.steps[3].status),
            (&Status::Hit, &Status::Hit)
        );
        assert_eq!(
            p.steps[1].status,
            Status::Failed(StepFailure {
                failure: Failure::Failed(FailCause::Exited { status: 1 }),
                log_tail: Some("boom\n".into()),
            })
        );
        assert_eq!(
            p.steps[4].status,
            Status::Miss,
            "scene b's fixture did not fail"
        );
        // Damage the kernel's object: a stale entry, damaged (not a depfile change).
        fs::write(entry.dir.join("out"), b"longer").unwrap();
        let mut p = plan(t.path());
        let lookups = p.look_up(Lookups::Look);
        p.set_statuses(&lookups, History::default(), WarmRecord::default());
        assert!(
            matches!(
                &p.steps[0].status,
                Status::Stale(StaleStep::Entry(Stale::Damaged(_)))
            ),
            "{:?}",
            p.steps[0].status
        );
    }
}
