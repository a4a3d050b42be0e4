//! The manifest as loaded: the `Manifest` every command gets, and its parts, each with
//! its paths resolved, its command templates parsed for their context and its defaults
//! filled; and the bounds the loader holds every count to. Invariant: a value of these
//! types passed validation (or came from a memo of a manifest that did).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{generated, lanes::DeviceFault, lanes::DeviceRun, lanes::LaneConfig, lanes::Order};
use super::{lanes::Writes, remote};
use crate::template::{Ph, Template};

pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(14 * 86400);

/// The most device ids a scene or the lock may ask for (as many as `--devices 0-4095`
/// grants): the packer keeps one slot per id.
pub const MAX_DEVICES: u32 = 4096;

/// The longest `nodeid` or `case` a scene may carry, in bytes.
pub const MAX_LABEL: usize = 4096;
/// The most `threads` a warm step may claim.
pub const MAX_THREADS: u32 = 1024;

/// The most `retries` of a device step, and `restarts` / `max_restarts` of a lane: each
/// is a run of a scene or a process, so a count past these is a mistake, never a plan.
pub const MAX_RETRIES: u32 = 100;
pub const MAX_RESTARTS: u32 = 100;

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
    pub generators: Vec<generated::Generator>,
    /// Top-level `prepare:` steps: run by warm for every selected scene, keyed once.
    #[serde(default)]
    pub prepare: Vec<Prepare>,
    /// Things `plan -v` mentions: include dirs that do not exist and were skipped.
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheConfig {
    /// `cache.dir` resolved against the manifest's directory.
    pub dir: Option<PathBuf>,
    pub max_size: Option<u64>,
    pub max_age: Duration,
    /// `cache.remote` (docs/remote-cache.md).
    pub remote: remote::RemoteConfig,
    /// `cache.verify_key`: the ed25519 public key every local entry must be signed with
    /// (docs/cache-trust.md, "Signed entries").
    #[serde(default)]
    pub verify_key: Option<[u8; 32]>,
    /// `cache.sign_key_env`: the variable holding the key entries are signed with.
    #[serde(default)]
    pub sign_key_env: Option<String>,
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
    pub platform: String,
    pub tags: Vec<String>,
    /// Top-level env with the scene's env merged over it.
    pub env: BTreeMap<String, String>,
    pub kernels: Vec<Kernel>,
    pub fixture: Option<GenStep>,
    pub golden: Option<GenStep>,
    pub device: Option<DeviceStep>,
}

/// A file or directory named by the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileRef {
    /// How keys and commands name it: relative to the manifest's directory (with `/`)
    /// when it is inside it, else absolute.
    pub rel: String,
    /// Where to read it.
    pub abs: PathBuf,
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
}

impl GenStep {
    /// The step writes the files it read into `{depfile}` (see docs/pytest.md).
    pub fn has_depfile(&self) -> bool {
        self.run.uses(Ph::Depfile)
    }
}

/// A `prepare:` step: a project's own warm-up (filling its kernel cache, say), keyed
/// like a fixture from the manifest's platform and env, and shared by every scene: when
/// it fails, every selected scene has failed in warm.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Prepare {
    pub name: String,
    pub step: GenStep,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeviceStep {
    pub run: DeviceRun,
    pub devices: u32,
    pub exclusive: bool,
    pub timeout: Option<Duration>,
    /// Reruns of a failed device step in a fresh process (docs/lanes.md).
    pub retries: u32,
    /// `stop_signal` / `stop_wait` of its own command (a lane scene's process is its
    /// lane's).
    #[serde(default)]
    pub stop: Option<crate::proc::Stop>,
    /// `device.order`: before, among or after every other scene of the run.
    #[serde(default)]
    pub order: Order,
    /// The scene's `nodeid`: scenes of one node and lane run in one process, in
    /// manifest order (the node's own runner would run its cases one after the other).
    #[serde(default)]
    pub node: Option<String>,
    /// `device.writes`: the artifacts it gets private, writable copies of.
    #[serde(default)]
    pub writes: Vec<Writes>,
}

impl Manifest {
    /// The variables the manifest names as secret: the remote cache's token and signing
    /// key, and the token's default name (docs/remote-cache.md). They never reach a
    /// child (`proc::hide_from_children`).
    pub fn secret_env(&self) -> Vec<String> {
        let r = &self.cache.remote;
        [r.token_env.clone(), remote::DEFAULT_TOKEN_ENV.to_string()]
            .into_iter()
            .chain(r.sign_key_env.clone())
            .chain(self.cache.sign_key_env.clone())
            .collect()
    }
}
