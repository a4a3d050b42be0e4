//! Manifest + selection → Plan: every step, its content key, its dependencies and its
//! cache status. The plan is the one place that knows which steps exist and what their
//! keys are; warm, device and `--plan` all read it, and nothing recomputes a key its own
//! way. Its stages are in `build`, its parts in `types`, its commands in `render`;
//! `scenes_from` expands generated scenes before it is built.

mod build;
mod render;
pub mod scenes_from;
mod types;

pub use build::start_identities;
pub use render::render_device_template;
pub use types::{Fill, Lookups, PlanScene, StaleStep, Status, Step, Unit};

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;

use crate::base::error::Error;
use crate::base::layout;
use crate::base::record::WarmRecord;
use crate::cache::history::History;
use crate::cache::{Entry, Kind, Lookup, Store};
use crate::key::inputs::KeyInputs;
use crate::key::{self, Files, KeyHasher};
use crate::manifest::{GenStep, Kernel, Manifest, Scene, Toolchain};

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

impl Plan {
    /// Run the device phase without the lock on these ids: `device_count` becomes their
    /// number, as the inner run will pack on exactly them.
    pub fn no_lock(&mut self, ids: Vec<String>) {
        self.device_count = ids.len() as u32;
        self.no_lock = Some(ids);
    }

    /// `--no-workers`: every step runs as a process of its own (docs/warm.md, "Workers").
    pub fn no_workers(&mut self) {
        for w in self.manifest.workers.values_mut() {
            w.enabled = false;
        }
    }

    /// The runner has `jobs` slots: no step's `threads` hint asks for more (the
    /// scheduler, `{threads}` and `$SCENERUN_THREADS` all see the clamped value; it is
    /// in no key).
    pub fn fit_threads(&mut self, jobs: usize) {
        let most = u32::try_from(jobs.max(1)).unwrap_or(u32::MAX);
        for s in &mut self.steps {
            s.threads = s.threads.min(most);
        }
    }

    /// The enabled worker that serves a fixture, golden or prepare step, if it names one.
    /// The selection of a step's scene (none for a prepare step or a scene of no
    /// selection): its words fill a worker's `{selection_paths}` / `{selection_args}`.
    pub fn selection_of(&self, step: &Step) -> Option<&crate::manifest::NamedSelection> {
        if step.kind == Kind::Prepare {
            return None;
        }
        let name = self.scene(step).selection.as_ref()?;
        self.manifest.selections.iter().find(|s| &s.name == name)
    }

    /// A worker's command for `step`: `{platform}` and the selection's words filled.
    pub fn worker_command(&self, w: &crate::manifest::WorkerConfig, step: &Step) -> String {
        use crate::base::template::{Ph, Val};
        let platform = self.step_context(step).0;
        let sel = self.selection_of(step);
        let paths = sel.map(|s| s.paths_for(platform)).unwrap_or_default();
        let args = sel.map(|s| s.args_for(platform)).unwrap_or_default();
        w.run.render(|ph| match ph {
            Ph::Platform => Val::One(platform.into()),
            Ph::SelectionPaths => Val::Many(paths.as_slice().into()),
            Ph::SelectionArgs => Val::Many(args.as_slice().into()),
            _ => Val::Raw("".into()),
        })
    }

    pub fn worker_of(&self, step: &Step) -> Option<&crate::manifest::WorkerConfig> {
        if step.kind == Kind::Kernel {
            return None;
        }
        let name = self.gen(step).worker.as_ref()?;
        self.manifest.workers.get(name).filter(|w| w.enabled)
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
            Kind::Test => s.test.as_ref(),
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
            let err = match crate::base::fsutil::is_not_regular(&e) {
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
            Kind::Compiled => unreachable!("{}", Kind::NOT_A_STEP),
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
            Kind::Fixture | Kind::Golden | Kind::Prepare | Kind::Test => {
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
                // A test's key holds every artifact it reads (its fixture's and golden's).
                if step.kind == Kind::Test {
                    for &d in &step.deps {
                        h.field("dep-key", self.steps[d].key.as_bytes());
                    }
                } else if let Some(fk) = step.deps.first().map(|&f| self.steps[f].key.clone()) {
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

/// A kernel's include dirs as `Files::closure` takes them.
pub(crate) fn include_paths(k: &Kernel) -> Vec<PathBuf> {
    k.include_dirs.iter().map(|d| d.abs.clone()).collect()
}
