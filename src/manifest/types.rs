//! The manifest as loaded: the `Manifest` every command gets, and its parts, each with
//! its paths resolved, its command templates parsed for their context and its defaults
//! filled. Invariant: a value of these
//! types passed validation (or came from a memo of a manifest that did).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::lanes::{DeviceFault, DeviceStep, LaneConfig};
use super::paths::FileRef;
use super::remote;
use super::workers::WorkerConfig;
use super::yaml::{Kind, Node, Pos};
use crate::base::template::{Ph, Template};

pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(14 * 86400);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// The manifest file as the user named it (for messages).
    pub file: PathBuf,
    /// The manifest's directory, absolute and canonical: commands run here.
    pub dir: PathBuf,
    pub platform: String,
    pub env: BTreeMap<String, String>,
    pub cache: CacheConfig,
    pub toolchains: BTreeMap<String, Toolchain>,
    pub lock: Option<LockConfig>,
    /// `lanes:` by name (docs/lanes.md).
    pub lanes: BTreeMap<String, LaneConfig>,
    pub scenes: Vec<Scene>,
    /// `scenes_from:` generators; their scenes join `scenes` in `plan::scenes_from::expand`.
    pub generators: Vec<Generator>,
    /// Top-level `prepare:` steps: run by warm for every selected scene, keyed once.
    #[serde(default)]
    pub prepare: Vec<Prepare>,
    /// `workers:` by name: persistent processes that serve steps naming them.
    #[serde(default)]
    pub workers: BTreeMap<String, WorkerConfig>,
    /// `compile_cache.compilers`: the compilers whose runs inside lane processes and
    /// device steps go through the cache (`compiled`).
    #[serde(default)]
    pub compile_cache: Vec<String>,
    /// `fork_server:`: the process lane processes started before the lock fork from.
    #[serde(default)]
    pub fork_server: Option<ForkServer>,
    /// `selections:` in declaration order, the profile applied (docs/manifest.md,
    /// "Selections"); empty without them.
    #[serde(default)]
    pub selections: Vec<super::NamedSelection>,
    /// The profile in use (`--profile`, `$SCENERUN_PROFILE`).
    #[serde(default)]
    pub profile: Option<String>,
    /// `signing:` (or the deprecated keys standing for it): one key pair for local
    /// entries and remote records (docs/cache-trust.md, "Signed entries").
    #[serde(default)]
    pub signing: super::signing::SigningConfig,
    /// Things `plan -v` mentions: include dirs that do not exist and were skipped.
    pub notes: Vec<String>,
    /// Where its parts are in the file, for what is said about them after loading.
    #[serde(default)]
    pub layout: Layout,
}

/// Where parts of the manifest are in its file, taken from its nodes when it was
/// parsed (a memo is of the same text): what `affected` and the messages made after
/// loading point at, without reading the file again.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Layout {
    /// Lines of the text.
    pub lines: usize,
    /// The lines of the top-level keys.
    pub top_lines: Vec<usize>,
    /// The manifest's own scenes, in order (generated scenes have none).
    pub scenes: Vec<SceneAt>,
    /// `scenes` (or the document): where a scene that is not the manifest's points.
    pub scenes_key: Option<Pos>,
    /// `lock.device_count` (or its nearest ancestor).
    pub device_count: Option<Pos>,
}

/// Where one of the manifest's scenes is.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SceneAt {
    /// Where its entry starts.
    pub start: Option<Pos>,
    /// Its `device.devices` (or the nearest ancestor of it that is written).
    pub devices: Option<Pos>,
}

impl Layout {
    /// The layout of the manifest `text` whose parsed tree is `root`, read from its
    /// nodes (a key path's position as `yaml::Positions::find` gives it: a written key,
    /// else its nearest written ancestor).
    pub(super) fn of(text: &str, root: &Node) -> Layout {
        let top = match &root.kind {
            Kind::Map(entries) => entries
                .iter()
                .filter(|(k, _)| {
                    let name = k.as_str().unwrap_or("?");
                    !name.is_empty() && !name.contains(['.', '['])
                })
                .map(|(k, _)| k.pos().line)
                .collect(),
            _ => Vec::new(),
        };
        let (scenes_key, scenes) = under(Some(root), "scenes", root.pos());
        let scenes = match scenes.map(|s| &s.kind) {
            Some(Kind::Seq(items)) => items
                .iter()
                .map(|item| {
                    let (device, d) = under(Some(item), "device", item.pos());
                    SceneAt {
                        start: Some(item.pos()),
                        devices: Some(under(d, "devices", device).0),
                    }
                })
                .collect(),
            _ => Vec::new(),
        };
        let (lock, l) = under(Some(root), "lock", root.pos());
        Layout {
            lines: text.lines().count(),
            top_lines: top,
            scenes,
            scenes_key: Some(scenes_key),
            device_count: Some(under(l, "device_count", lock).0),
        }
    }

    /// Where scene `index` of the manifest asks for its devices.
    pub fn devices_of(&self, index: usize) -> Option<Pos> {
        match self.scenes.get(index) {
            Some(s) => s.devices,
            None => self.scenes_key,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheConfig {
    /// `cache.dir` resolved against the manifest's directory.
    pub dir: Option<PathBuf>,
    pub max_size: Option<u64>,
    pub max_age: Duration,
    /// `cache.remote` (docs/remote-cache.md).
    pub remote: remote::RemoteConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Toolchain {
    pub name: String,
    pub compile: Template,
    pub identity: Option<String>,
    /// How long the identity command may run (exit 3 past it).
    pub identity_timeout: Duration,
    pub depfile: Option<Template>,
    pub include_flag: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockConfig {
    pub submit: Template,
    pub device_env: String,
    pub device_count: Option<u32>,
    /// How long to wait for the lock command after the inner run ended.
    pub release_timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL for device steps when the run is cancelled.
    pub grace: Option<Duration>,
    pub device_fault: Option<DeviceFault>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scene {
    pub name: String,
    /// The test node the scene runs (a pytest node id), for reports that are compared
    /// with the suite's own run node for node (docs/reports.md).
    #[serde(default)]
    pub nodeid: Option<String>,
    /// Which case of that node it runs, when the node runs several.
    #[serde(default)]
    pub case: Option<String>,
    /// The selection it belongs to (its name then starts with `<selection>/`).
    #[serde(default)]
    pub selection: Option<String>,
    pub platform: String,
    pub tags: Vec<String>,
    /// Top-level env with the scene's env merged over it.
    pub env: BTreeMap<String, String>,
    pub kernels: Vec<Kernel>,
    pub fixture: Option<GenStep>,
    pub golden: Option<GenStep>,
    /// `test:`: a CPU-only test run in warm, without the lock; its verdict is the scene's
    /// (docs/manifest.md "A scene's test"). Never with `device:`, never in the shared cache.
    #[serde(default)]
    pub test: Option<GenStep>,
    pub device: Option<DeviceStep>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kernel {
    pub name: String,
    pub toolchain: String,
    pub source: FileRef,
    /// Existing include dirs, in order.
    pub include_dirs: Vec<FileRef>,
    pub flags: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GenStep {
    pub run: Template,
    pub inputs: Vec<FileRef>,
    pub persist: bool,
    pub memory: Option<u64>,
    pub threads: u32,
    pub timeout: Option<Duration>,
    /// A command whose output and success go into the step's key (interpreter and
    /// library versions), run once per process.
    pub identity: Option<String>,
    /// `worker:`: the worker (of `workers:`) that serves the step; in no key.
    #[serde(default)]
    pub worker: Option<String>,
}

impl GenStep {
    /// The step writes the files it read into `{depfile}` (see docs/pytest.md).
    pub fn has_depfile(&self) -> bool {
        self.run.uses(Ph::Depfile)
    }
}

/// A `prepare:` step: a project's own warm-up (filling its kernel cache, say), keyed
/// like a fixture from the manifest's platform and env, and shared by every scene it is
/// for: when it fails, each of them has failed in warm.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prepare {
    pub name: String,
    pub step: GenStep,
    /// The selections whose scenes it is for (with those of no selection): the one it
    /// runs for when its command names the selection's placeholders, else its
    /// `selections:`. Empty: every scene.
    #[serde(default)]
    pub selections: Vec<String>,
}

impl Prepare {
    /// Whether it is a step of a scene of `selection` (None: a scene of no selection).
    pub fn is_for(&self, selection: Option<&str>) -> bool {
        match selection {
            Some(s) if !self.selections.is_empty() => self.selections.iter().any(|p| p == s),
            _ => true,
        }
    }
}

/// One entry of `scenes_from:`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Generator {
    pub index: usize,
    /// The command as run: `{platform}` filled.
    pub run: String,
    /// Files whose content is part of the generator's key.
    pub inputs: Vec<FileRef>,
    /// How long it may run (`timeout`, default 10 min); then its group is killed.
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    /// The selection it runs for (its command names the selection's placeholders):
    /// every scene it prints belongs to it.
    #[serde(default)]
    pub selection: Option<String>,
}

/// A generator's `timeout` when the manifest gives none.
pub const GENERATOR_TIMEOUT: Duration = Duration::from_secs(600);

fn default_timeout() -> Duration {
    GENERATOR_TIMEOUT
}

impl Generator {
    /// `scenes_from[0] (`python -m ... collect tests`)`: how every message names it.
    pub fn label(&self) -> String {
        format!("scenes_from[{}] (`{}`)", self.index, self.run)
    }
}

impl Manifest {
    /// `file:line:column` of `at`, or the file alone.
    pub fn place(&self, at: Option<Pos>) -> String {
        let file = self.file.display();
        match at {
            Some(p) => format!("{file}:{}:{}", p.line, p.col),
            None => file.to_string(),
        }
    }

    /// The variables the manifest names as secret: the remote cache's token, the
    /// token's default name (docs/remote-cache.md) and the signing key. They never reach
    /// a child (`proc::hide_from_children`).
    pub fn secret_env(&self) -> Vec<String> {
        let r = &self.cache.remote;
        [r.token_env.clone(), remote::DEFAULT_TOKEN_ENV.to_string()]
            .into_iter()
            .chain(self.signing.key_env.clone())
            .collect()
    }
}

/// `key` of mapping `parent` (which is at `at`): where the key is written and its value,
/// else `at` (a path's nearest written ancestor).
fn under<'n>(parent: Option<&'n Node>, key: &str, at: Pos) -> (Pos, Option<&'n Node>) {
    match parent.and_then(|p| p.entry(key)) {
        Some((k, v)) => (k.pos(), Some(v)),
        None => (at, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_points_where_positions_point() {
        let text = "version: 1\nlock:\n  submit: x\n  device_count: 2\nscenes:\n  - name: a\n    device:\n      run: r\n      devices: 2\n  - name: b\n    device:\n      run: r\n";
        let root = super::super::yaml::parse(text).unwrap();
        let l = Layout::of(text, &root);
        let mut at = super::super::yaml::Positions::of(&root);
        assert_eq!(l.lines, 12);
        assert_eq!(l.top_lines, [1, 2, 5]);
        assert_eq!(l.device_count, at.find("lock.device_count"));
        assert_eq!(l.scenes_key, at.find("scenes"));
        for i in 0..2 {
            assert_eq!(l.scenes[i].start, at.find_exact(&format!("scenes[{i}]")));
            assert_eq!(
                l.devices_of(i),
                at.find(&format!("scenes[{i}].device.devices"))
            );
        }
        assert_eq!(l.devices_of(1).unwrap().line, 11);
        assert_eq!(l.devices_of(2), l.scenes_key);
    }
}

/// `fork_server:` (docs/lanes.md, "A fork server").
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForkServer {
    /// Starts it; it listens on `$SCENERUN_FORK_SERVER` and prints `ready`.
    pub run: crate::base::template::Template,
    /// From its start to its ready line; past it, the lanes start their own interpreters.
    pub start_timeout: std::time::Duration,
}
