//! Manifest + selection → Plan: every step, its content key, its dependencies and its
//! cache status. The plan is the one place that knows which steps exist and what their
//! keys are; warm, device and `--plan` all read it, and nothing recomputes a key its own
//! way. Building a plan runs only identity commands and reads files; it never writes to
//! the cache (the stat memo beside the manifest is refreshed).

pub mod scenes_from;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use rayon::prelude::*;

use crate::cache::history::{History, HistoryId};
use crate::cache::{Entry, Kind, Lookup, Stale, Store};
use crate::error::Error;
use crate::key::inputs::KeyInputs;
use crate::key::{self, Files, KeyHasher};
use crate::layout;
use crate::manifest::{DeviceStep, GenStep, Kernel, Manifest, Scene, Toolchain};
use crate::record::{Failures, WarmRecord};
use crate::select::Selection;
use crate::stepid::StepId;
use crate::template::{Ph, Template, Val};

/// A step's key and, when asked for, what went into it.
type Keyed = (String, Option<KeyInputs>);

/// The stat memo of the checkout whose manifest is in `manifest_dir` (docs/cache.md).
pub fn stat_memo(manifest_dir: &Path) -> Files {
    let files = Files::new(Some(layout::stat_memo(&layout::job_dir(manifest_dir))));
    files.restore_closures(manifest_dir);
    files
}

/// The cache directory of a manifest (`flag`: `--cache-dir`), as `layout` decides it.
pub fn cache_dir(manifest: &Manifest, flag: Option<&Path>) -> PathBuf {
    layout::cache_dir(&manifest.dir, manifest.cache.dir.as_deref(), flag)
}

#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    Hit,
    Miss,
    /// Not in the local cache, but the remote cache has its record (`--plan` only: a HEAD
    /// request, nothing downloaded).
    RemoteHit,
    /// In the cache but built again.
    Stale(StaleStep),
    /// The last warm failed this step with this very key.
    Failed(String),
}

/// Why a step whose entry is in the cache is built again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaleStep {
    /// Its own entry cannot be served (damaged, or a file its depfile recorded changed).
    Entry(Stale),
    /// A golden whose fixture is rebuilt because a file the fixture's depfile recorded
    /// changed: the fixture may come out different, so the golden is computed again.
    Fixture(Stale),
}

impl std::fmt::Display for StaleStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaleStep::Entry(why) => write!(f, "{why}"),
            StaleStep::Fixture(why) => write!(f, "its fixture is rebuilt: {why}"),
        }
    }
}

impl Status {
    pub fn word(&self) -> &'static str {
        match self {
            Status::Hit => "hit",
            Status::Miss => "miss",
            Status::RemoteHit => "remote-hit",
            Status::Stale(_) => "stale",
            Status::Failed(_) => "failed-in-warm",
        }
    }

    pub fn is_hit(&self) -> bool {
        *self == Status::Hit
    }
}

/// A warm step: compile one kernel, generate one fixture, compute one golden.
#[derive(Debug, Clone)]
pub struct Step {
    /// Stable identity across content changes, for history, records, logs and lines.
    pub id: StepId,
    /// Index into `Plan::units`: the steps that share this step's artifact.
    pub unit: usize,
    pub kind: Kind,
    /// Index into `Plan::scenes`.
    pub scene: usize,
    /// The kernel's name, or `fixture` / `golden`.
    pub name: String,
    pub key: String,
    /// false: lives in the job dir, never in the shared cache.
    pub persist: bool,
    /// Steps that must be published first (a golden's fixture).
    pub deps: Vec<usize>,
    pub threads: u32,
    pub memory: u64,
    pub timeout: Option<std::time::Duration>,
    pub status: Status,
    /// The published entry, when `status` is a hit: shared by the steps of its unit
    /// (one record of ~80 dependencies, not one copy per scene).
    pub entry: Option<Arc<Entry>>,
    /// Seconds, from history.
    pub estimate: Option<f64>,
}

impl Step {
    pub fn label(&self) -> &'static str {
        self.id.label()
    }
}

/// One unique artifact (persist, kind, key) and the steps, in plan order, that want it.
/// Scenes share identical steps; warm builds each unit once. Grouped here, once.
#[derive(Debug, Clone)]
pub struct Unit {
    pub steps: Vec<usize>,
    /// Units that must be published first (a golden's fixture).
    pub deps: Vec<usize>,
    /// Its hit was settled by the plan's lookup ([`Lookups::Settle`]): warm need not
    /// open the entry again.
    pub settled: bool,
}

/// What the plan's cache lookups do besides looking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookups {
    /// Look only: `plan`, previews, `device`, `explain`.
    Look,
    /// A warm follows: each lookup runs under its key's lock and a hit is touched there
    /// and then, which is all warm does for a hit it was handed (docs/cache-trust.md).
    Settle,
}

#[derive(Debug, Clone)]
pub struct PlanScene {
    pub name: String,
    /// Index into `Manifest::scenes`.
    pub index: usize,
    pub kernels: Vec<usize>,
    pub fixture: Option<usize>,
    pub golden: Option<usize>,
    /// The manifest's `prepare:` steps, one per scene, all of a name in one unit.
    pub prepare: Vec<usize>,
    pub device: Option<DeviceStep>,
    pub device_estimate: Option<f64>,
}

pub struct Plan {
    pub manifest: Manifest,
    pub scenes: Vec<PlanScene>,
    pub steps: Vec<Step>,
    pub units: Vec<Unit>,
    pub store: Store,
    pub job: Store,
    pub job_dir: PathBuf,
    pub device_count: u32,
    pub history: History,
    pub files: Files,
    /// `--no-lock --devices`: the ids the device phase runs on directly. Set by
    /// `no_lock`; previews then pack on these ids and show no lock command.
    pub no_lock: Option<Vec<String>>,
    /// The shared remote cache, when one is configured (attached by the command).
    pub remote: Option<std::sync::Arc<crate::cache::remote::Remote>>,
    /// Toolchain name → identity output, as it went into kernel keys.
    identities: HashMap<String, Vec<u8>>,
    /// The output of every fixture and golden `identity:` command, by command.
    gen_identities: HashMap<String, Vec<u8>>,
    /// Per plan scene: its env as `explain` records it (names, hashed values).
    env_hashes: Vec<Arc<BTreeMap<String, String>>>,
    /// The warm record as this plan read it (warm merges its results into it).
    pub record: WarmRecord,
}

/// A fixture, golden or prepare step with its resource hints.
fn gen_step(mut st: Step, g: &GenStep) -> Step {
    st.threads = g.threads;
    st.memory = g.memory.unwrap_or(0);
    st.timeout = g.timeout;
    st
}

/// How path placeholders are filled.
pub enum Fill<'a> {
    /// For keys: path placeholders masked.
    Mask,
    /// For `--dry-run`: run-time values shown as `<out>`, `<depfile>`, `<devices>`.
    DryRun,
    /// For running.
    Real { out: &'a Path, depfile: &'a Path },
}

impl Plan {
    /// The plan of the selection; `files` is the checkout's stat memo ([`stat_memo`]).
    pub fn build(
        manifest: Manifest,
        sel: &Selection,
        cache_flag: Option<&Path>,
        files: Files,
        mode: Lookups,
    ) -> Result<Plan> {
        let selected = crate::select::select(&manifest.scenes, sel)?;
        let job_dir = layout::job_dir(&manifest.dir);
        let store = Store::at(cache_dir(&manifest, cache_flag));
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
        // Identity commands: once per toolchain used by the selection, each on a thread
        // of its own (they wait on a child process, and a rayon worker must not), while
        // the rayon pool finds the include closures of the selected kernels (they need no
        // identity).
        let used = toolchains_used(&manifest, &selected);
        let (identities, gen_identities) = std::thread::scope(|scope| {
            let (manifest, selected) = (&manifest, &selected);
            let ids = scope.spawn(|| {
                each_waiting(&used, |name| {
                    let tc = &manifest.toolchains[*name];
                    identity(tc, manifest).map(|id| (name.to_string(), id))
                })
                .into_iter()
                .collect::<Result<HashMap<String, Vec<u8>>>>()
            });
            let gens = scope.spawn(|| gen_identities(manifest, selected));
            find_closures(manifest, selected, &files);
            (
                ids.join().expect("identity thread"),
                gens.join().expect("identity thread"),
            )
        });
        let (identities, gen_identities) = (identities?, gen_identities?);

        let mut scenes = Vec::new();
        let mut steps = Vec::with_capacity(
            selected
                .iter()
                .map(|&i| {
                    let s = &manifest.scenes[i];
                    s.kernels.len()
                        + usize::from(s.fixture.is_some())
                        + usize::from(s.golden.is_some())
                })
                .sum(),
        );
        for &i in &selected {
            let s = &manifest.scenes[i];
            let si = scenes.len();
            let mut ps = PlanScene {
                name: s.name.clone(),
                index: i,
                kernels: Vec::new(),
                fixture: None,
                golden: None,
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
            for p in &manifest.prepare {
                ps.prepare.push(steps.len());
                steps.push(gen_step(
                    blank(Kind::Prepare, &p.name, p.step.persist),
                    &p.step,
                ));
            }
            scenes.push(ps);
        }

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
        // The closure memo is written while the keys are computed (it needs no key).
        std::thread::scope(|scope| -> Result<()> {
            let files = &plan.files;
            scope.spawn(move || files.save_closures());
            // Kernel and fixture keys are independent: compute them in parallel; goldens
            // need their fixture's key.
            // An indexed collect writes each key into its slot: no per-thread lists of
            // (index, result, inputs) to concatenate, which set the plan's peak memory.
            let keys: Vec<Option<Result<String>>> = (0..plan.steps.len())
                .into_par_iter()
                .map(|i| {
                    (plan.steps[i].kind != Kind::Golden)
                        .then(|| plan.compute_key(i, false).map(|k| k.0))
                })
                .collect();
            for (i, k) in keys.into_iter().enumerate() {
                if let Some(k) = k {
                    plan.steps[i].key = k?;
                }
            }
            let golden_keys: Vec<Option<Result<String>>> = (0..plan.steps.len())
                .into_par_iter()
                .map(|i| {
                    (plan.steps[i].kind == Kind::Golden)
                        .then(|| plan.compute_key(i, false).map(|k| k.0))
                })
                .collect();
            for (i, k) in golden_keys.into_iter().enumerate() {
                if let Some(k) = k {
                    plan.steps[i].key = k?;
                }
            }
            Ok(())
        })?;

        plan.group_units();
        // One lookup per unit (scenes share kernels). After the first miss, a key its
        // shard's listing does not hold is a miss without a lookup.
        let snapshot = crate::cache::Snapshot::default();
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
        let lookups: Vec<Lookup> = looked
            .into_iter()
            .zip(&mut plan.units)
            .map(|((found, settled), u)| {
                u.settled = settled;
                found
            })
            .collect();
        let (history, record) = loads.join().expect("load thread");
        plan.history = history;
        for ps in &mut plan.scenes {
            ps.device_estimate = plan.history.estimate(HistoryId::Device(&ps.name));
        }
        let failures = record.failures();
        let entries: Vec<Option<Arc<Entry>>> = lookups
            .iter()
            .map(|l| match l {
                Lookup::Hit(e) => Some(e.clone()),
                _ => None,
            })
            .collect();
        let statuses: Vec<(Status, Option<Arc<Entry>>)> = plan
            .steps
            .iter()
            .map(|s| {
                let lookup = &lookups[s.unit];
                let entry = entries[s.unit].clone();
                (plan.status_of(s, lookup, &failures), entry)
            })
            .collect();
        for (i, (st, entry)) in statuses.into_iter().enumerate() {
            plan.steps[i].status = st;
            plan.steps[i].entry = entry;
            let id = HistoryId::Step(&plan.steps[i].id);
            plan.steps[i].estimate = plan.history.estimate(id);
        }
        plan.stale_with_fixture();
        drop(failures);
        plan.record = record;
        plan.files.save();
        plan.device_count = plan.resolve_device_count()?;
        Ok(plan)
    }

    /// Run the device phase without the lock on these ids: `device_count` becomes their
    /// number, as the inner run will pack on exactly them.
    pub fn no_lock(&mut self, ids: Vec<String>) {
        self.device_count = ids.len() as u32;
        self.no_lock = Some(ids);
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

    /// After warm: the units it published (or found) are hits now, the ones it failed
    /// are failed-in-warm, so the device phase reads an up-to-date plan without
    /// planning again. A unit warm re-keyed (an input changed while it ran) takes the
    /// key it was published under.
    pub fn apply_warm(&mut self, results: &[(usize, Status, Option<Arc<Entry>>)]) {
        for (u, status, entry) in results {
            for &si in &self.units[*u].steps {
                let step = &mut self.steps[si];
                step.status = status.clone();
                if let Some(e) = &entry {
                    step.key.clone_from(&e.meta.key);
                }
                step.entry = entry.clone();
            }
        }
    }

    pub fn scene(&self, step: &Step) -> &Scene {
        &self.manifest.scenes[self.scenes[step.scene].index]
    }

    fn kernel(&self, step: &Step) -> (&Kernel, &Toolchain) {
        let s = self.scene(step);
        let k = s
            .kernels
            .iter()
            .find(|k| k.name == step.name)
            .expect("kernel step names a kernel");
        (k, &self.manifest.toolchains[&k.toolchain])
    }

    fn gen(&self, step: &Step) -> &GenStep {
        let s = self.scene(step);
        match step.kind {
            Kind::Fixture => s.fixture.as_ref(),
            Kind::Prepare => self
                .manifest
                .prepare
                .iter()
                .find(|p| p.name == step.name)
                .map(|p| &p.step),
            _ => s.golden.as_ref(),
        }
        .expect("gen step has its manifest entry")
    }

    /// The platform and env a step runs with: a prepare step's are the manifest's own
    /// (every scene shares it), the others' their scene's.
    pub fn step_context(&self, step: &Step) -> (&str, &BTreeMap<String, String>) {
        match step.kind {
            Kind::Prepare => (&self.manifest.platform, &self.manifest.env),
            _ => {
                let s = self.scene(step);
                (&s.platform, &s.env)
            }
        }
    }

    /// The store a step's artifact lives in.
    pub fn store_of(&self, step: &Step) -> &Store {
        if step.persist {
            &self.store
        } else {
            &self.job
        }
    }

    /// Where a step's artifact is (or will be) once published.
    pub fn artifact(&self, step: &Step) -> PathBuf {
        self.store_of(step)
            .entry_dir(step.kind, &step.key)
            .join("out")
    }

    /// The step's command with everything filled but what `fill` decides.
    pub fn command(&self, step: &Step, fill: &Fill) -> String {
        let s = self.scene(step);
        match step.kind {
            Kind::Kernel => {
                let (k, tc) = self.kernel(step);
                let path = |ph: Ph| -> Val {
                    match (fill, ph) {
                        (Fill::Mask, _) => Val::Mask(ph),
                        (Fill::DryRun, Ph::Source) | (Fill::Real { .. }, Ph::Source) => {
                            Val::One(k.source.rel.clone().into())
                        }
                        (Fill::DryRun, _) => Val::Raw(format!("<{}>", ph.name()).into()),
                        (Fill::Real { out, .. }, Ph::Out) => {
                            Val::One(out.to_string_lossy().to_string().into())
                        }
                        (Fill::Real { depfile, .. }, _) => {
                            Val::One(depfile.to_string_lossy().to_string().into())
                        }
                    }
                };
                let mut value = |ph: Ph| match ph {
                    Ph::Source | Ph::Out | Ph::Depfile => path(ph),
                    Ph::Includes => Val::Many(include_words(tc, k).into()),
                    Ph::Flags => Val::Many(k.flags.as_slice().into()),
                    Ph::Platform => Val::One(s.platform.as_str().into()),
                    Ph::Scene => Val::One(s.name.as_str().into()),
                    Ph::Kernel => Val::One(k.name.as_str().into()),
                    _ => Val::Raw("".into()),
                };
                let mut cmd = tc.compile.render(&mut value);
                if let Some(dep) = &tc.depfile {
                    cmd.push(' ');
                    cmd.push_str(&dep.render(&mut value));
                }
                cmd
            }
            Kind::Fixture | Kind::Golden | Kind::Prepare => {
                let g = self.gen(step);
                let platform = self.step_context(step).0;
                let fixture = step.deps.first().map(|&f| self.artifact(&self.steps[f]));
                g.run.render(|ph| match (ph, fill) {
                    (Ph::Out, Fill::Mask)
                    | (Ph::Depfile, Fill::Mask)
                    | (Ph::Fixture, Fill::Mask)
                    | (Ph::Threads, Fill::Mask) => Val::Mask(ph),
                    (Ph::Out, Fill::DryRun) => Val::Raw("<out>".into()),
                    (Ph::Depfile, Fill::DryRun) => Val::Raw("<depfile>".into()),
                    (Ph::Out, Fill::Real { out, .. }) => {
                        Val::One(out.to_string_lossy().to_string().into())
                    }
                    (Ph::Depfile, Fill::Real { depfile, .. }) => {
                        Val::One(depfile.to_string_lossy().to_string().into())
                    }
                    (Ph::Fixture, _) => Val::One(
                        fixture
                            .as_ref()
                            .map(|p| p.to_string_lossy().to_string())
                            .unwrap_or_default()
                            .into(),
                    ),
                    (Ph::Threads, _) => Val::One(step.threads.to_string().into()),
                    (Ph::Scene, _) => Val::One(s.name.as_str().into()),
                    (Ph::Platform, _) => Val::One(platform.into()),
                    _ => Val::Raw("".into()),
                })
            }
        }
    }

    /// What went into step `i`'s key, compactly, for `explain` and the records warm keeps.
    /// Derived by the key's own computation, from the file hashes and closures this plan
    /// already read (nothing is read again), so it matches `key` — unless warm re-keyed
    /// the step after an input changed while it ran (`rekey`): then these are the inputs
    /// of the key it published, which is what the record must hold.
    pub fn key_inputs(&self, i: usize) -> Option<KeyInputs> {
        self.compute_key(i, true).ok()?.1
    }

    /// What step `i`'s key is made of when computed again now and it still comes out as
    /// `key` (None when it does not: a file changed since, or `key` is another one).
    pub fn inputs_of_key(&self, i: usize, key: &str) -> Option<KeyInputs> {
        match self.compute_key(i, true).ok()? {
            (now, inputs) if now == key => inputs,
            _ => None,
        }
    }

    /// Step `i`'s key and, when `want_inputs`, what went into it (kept out of the plan
    /// itself: a plan of 20,000 steps would carry them all for nothing). A golden's key
    /// holds its fixture's, which must be computed first.
    fn compute_key(&self, i: usize, want_inputs: bool) -> Result<Keyed> {
        let identities = &self.identities;
        let step = &self.steps[i];
        let s = self.scene(step);
        let base = &self.manifest.dir;
        let read_err = |e: std::io::Error, what: &str| {
            // A FIFO or device named as a source or input is a manifest error (exit 4).
            let what = format!("scene {}: reading {what}", s.name);
            let err = match crate::fsutil::is_not_regular(&e) {
                true => Error::Usage(what),
                false => Error::Infra(what),
            };
            anyhow::Error::new(e).context(err)
        };
        let mut h = KeyHasher::new(step.kind.name());
        let command = self.command(step, &Fill::Mask);
        let (platform, env) = self.step_context(step);
        let mut rec = want_inputs.then(|| {
            let env_hashes = match step.kind {
                Kind::Prepare => KeyInputs::env_hashes(env),
                _ => self.env_hashes[step.scene].clone(),
            };
            KeyInputs::new(String::new(), platform, env_hashes)
        });
        match step.kind {
            Kind::Kernel => {
                let (k, tc) = self.kernel(step);
                h.field("identity", &identities[&tc.name]);
                if let Some(r) = &mut rec {
                    r.set_identity(&tc.name, &identities[&tc.name]);
                }
                h.field("command", command.as_bytes());
                h.field("platform", s.platform.as_bytes());
                h.env(&s.env);
                let src = self
                    .files
                    .info(&k.source.abs)
                    .map_err(|e| read_err(e, &k.source.rel))?;
                h.file("source", &k.source.rel, &src.hash);
                if let Some(r) = &mut rec {
                    r.file(&k.source.rel, &src.hash);
                }
                let dirs = include_paths(k);
                let closure = self
                    .files
                    .closure(base, &k.source.abs, &dirs)
                    .map_err(|e| read_err(e, &format!("the includes of {}", k.source.rel)))?;
                h.field("include-closure", closure.digest.as_bytes());
                if let Some(r) = &mut rec {
                    r.closure = Some(closure);
                }
            }
            Kind::Fixture | Kind::Golden | Kind::Prepare => {
                let g = self.gen(step);
                h.field("command", command.as_bytes());
                if let Some(cmd) = &g.identity {
                    let out = &self.gen_identities[cmd];
                    h.field("identity", out);
                    if let Some(r) = &mut rec {
                        r.set_step_identity(cmd, out);
                    }
                }
                h.field("platform", platform.as_bytes());
                h.env(env);
                h.field("input-count", &(g.inputs.len() as u64).to_le_bytes());
                for f in &g.inputs {
                    let info = self.files.info(&f.abs).map_err(|e| read_err(e, &f.rel))?;
                    h.file("input", &f.rel, &info.hash);
                    if let Some(r) = &mut rec {
                        r.file(&f.rel, &info.hash);
                    }
                }
                if let Some(fk) = step.deps.first().map(|&f| self.steps[f].key.clone()) {
                    h.field("fixture-key", fk.as_bytes());
                    if let Some(r) = &mut rec {
                        r.fixture_key = Some(fk);
                    }
                }
            }
        }
        if let Some(r) = &mut rec {
            r.command = command;
        }
        Ok((h.finish(), rec))
    }

    /// The one cache-status decision, shared by plan, warm and device.
    pub fn lookup(&self, step: &Step) -> Lookup {
        self.store_of(step)
            .lookup(step.kind, &step.key, &self.manifest.dir, &self.files)
    }

    /// Every file a step's key read (its source and include closure, or its inputs):
    /// warm re-checks them after the step (docs/cache-trust.md).
    pub fn key_files(&self, step: &Step) -> Vec<PathBuf> {
        let base = &self.manifest.dir;
        match step.kind {
            Kind::Kernel => {
                let (k, _) = self.kernel(step);
                let dirs = include_paths(k);
                let mut out = vec![k.source.abs.clone()];
                if let Ok(c) = self.files.closure(base, &k.source.abs, &dirs) {
                    out.extend(c.files().map(|n| key::key_path(base, &n.name)));
                }
                out
            }
            _ => self
                .gen(step)
                .inputs
                .iter()
                .map(|f| f.abs.clone())
                .collect(),
        }
    }

    /// The key a step gets from its files as they are now, read anew (warm, after an
    /// input changed while the step ran).
    pub fn rekey(&self, step_index: usize) -> Result<String> {
        self.files.forget();
        // Identity commands run once per process: the plan's own are still current.
        Ok(self.compute_key(step_index, false)?.0)
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
                Err(crate::err!(Usage,
                    "{}: lock.device_count is {n}, but scene `{}` needs {need} devices\n  {}: scenes[{}].device.devices: {need}",
                    crate::manifest::position(m, "lock.device_count"),
                    scene.name,
                    crate::manifest::position(m, &format!("scenes[{}].device.devices", scene.index)),
                    scene.index,
                ))
            }
            Some(n) => Ok(n),
            None => Ok(need),
        }
    }

    /// `--plan`: ask the remote (HEAD only) about every local miss it could serve.
    pub fn mark_remote_hits(&mut self) -> Result<()> {
        let Some(remote) = self.remote.clone() else {
            return Ok(());
        };
        let mut keys: Vec<&str> = self
            .steps
            .iter()
            .filter(|s| s.persist && s.status == Status::Miss)
            .map(|s| s.key.as_str())
            .collect();
        keys.sort();
        keys.dedup();
        let found = remote.has_records(&keys)?;
        let there: std::collections::HashSet<String> = keys
            .iter()
            .zip(found)
            .filter(|(_, f)| *f)
            .map(|(k, _)| k.to_string())
            .collect();
        for s in &mut self.steps {
            if s.persist && s.status == Status::Miss && there.contains(&s.key) {
                s.status = Status::RemoteHit;
            }
        }
        Ok(())
    }

    /// How many distinct artifacts the steps name (scenes share identical steps); the
    /// same grouping warm builds by.
    pub fn unique_keys(&self) -> usize {
        self.units.len()
    }
}

fn include_words(tc: &Toolchain, k: &Kernel) -> Vec<String> {
    let flag = &tc.include_flag;
    let mut out = Vec::new();
    for d in &k.include_dirs {
        if flag.ends_with(char::is_whitespace) {
            out.push(flag.trim_end().to_string());
            out.push(d.rel.clone());
        } else {
            out.push(format!("{flag}{}", d.rel));
        }
    }
    out
}

/// A kernel's include dirs as `Files::closure` takes them.
fn include_paths(k: &Kernel) -> Vec<PathBuf> {
    k.include_dirs.iter().map(|d| d.abs.clone()).collect()
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
    crate::identity::run(cmd, &manifest.dir, &manifest.env, tc.identity_timeout)
        .map_err(|e| crate::err!(Infra, "toolchain `{}`: {e}", tc.name))
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
        .map(|(cmd, _)| (cmd, crate::identity::DEFAULT_TIMEOUT));
    for (cmd, timeout) in toolchains.chain(gens) {
        let (cmd, dir, env) = (cmd.to_string(), manifest.dir.clone(), manifest.env.clone());
        s.spawn(move || {
            let _ = crate::identity::run(&cmd, &dir, &env, timeout);
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
            crate::identity::run(
                cmd,
                &manifest.dir,
                &manifest.env,
                crate::identity::DEFAULT_TIMEOUT,
            )
            .map(|o| (cmd.to_string(), o))
            .map_err(|e| crate::err!(Infra, "{what} identity: {e}"))
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

/// A device step's command: every placeholder filled; `{devices}` shown as `<devices>`
/// when `devices` is None (`--dry-run`). The one renderer of device commands, for the
/// preview and for the inner run.
pub fn render_device_template(
    t: &Template,
    scene: &str,
    platform: &str,
    kernels: &Path,
    fixture: Option<&Path>,
    golden: Option<&Path>,
    devices: Option<&str>,
) -> String {
    let p = |p: Option<&Path>| {
        p.map(|p| p.to_string_lossy().to_string())
            .unwrap_or_default()
    };
    t.render(|ph| match ph {
        Ph::Kernels => Val::One(kernels.to_string_lossy().to_string().into()),
        Ph::Fixture => Val::One(p(fixture).into()),
        Ph::Golden => Val::One(p(golden).into()),
        Ph::Devices => match devices {
            Some(d) => Val::One(d.to_string().into()),
            None => Val::Raw("<devices>".into()),
        },
        Ph::Scene => Val::One(scene.to_string().into()),
        Ph::Platform => Val::One(platform.to_string().into()),
        _ => Val::Raw("".into()),
    })
}
