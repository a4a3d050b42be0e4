//! The manifest (`scenes.yaml`, version 1): load, validate, and hand out a `Manifest`
//! in which every path is resolved, every command template parsed for its context, and
//! every default filled. Every error of a file is collected and reported together, each
//! with file:line:column where the YAML gives one (exit code 4).

pub mod depth;
pub mod generated;
pub mod lanes;
pub mod locate;
mod memo;
mod paths;
mod raw;
pub mod remote;
mod suite_args;
pub mod workers;
pub mod yaml;

pub use crate::error::{Diag, ManifestErrors};
pub use lanes::{DeviceFault, DeviceRun, LaneConfig, Order, RestartOn, Variant, Writes};
pub use paths::expand_vars;
pub use raw::{keys, Mapping};
pub use workers::WorkerConfig;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use yaml::Node as Value;

use crate::template::{allowed, Ph, Template};
use locate::Locations;

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
    /// `workers:` by name: persistent processes that serve steps naming them.
    #[serde(default)]
    pub workers: BTreeMap<String, WorkerConfig>,
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

/// Names of scenes, kernels and toolchains: `[A-Za-z0-9_.-]{1,128}`, not `.` or `..`
/// (names become directory names under logs/ and job/).
pub fn valid_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
        && name != "."
        && name != ".."
}

fn valid_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// What `discover` found: the manifest to use, and where and why the search upwards
/// ended when that was not at the file (for `-v` and the error that there is none).
#[derive(Debug, Default)]
pub struct Discovered {
    pub path: Option<PathBuf>,
    pub stopped: Option<String>,
}

/// The nearest `name` (a bare file name) in `dir` or one of its ancestors (docs/cli.md).
/// Returned as written when it is in `dir` itself, so messages name it as the user
/// would. The search upwards never enters a directory another user could have planted
/// the file in (not owned by the user, or writable by others), never leaves the
/// filesystem it started on, and ends at the repository's root (a directory with
/// `.git`); a file found must be the user's own too.
pub fn discover(dir: &Path, name: &Path) -> Discovered {
    use std::os::unix::fs::MetadataExt;
    let mut out = Discovered::default();
    if name.components().count() != 1 {
        return out;
    }
    if dir.join(name).is_file() {
        out.path = Some(name.to_path_buf());
        return out;
    }
    let Ok(start) = std::fs::metadata(dir) else {
        return out;
    };
    let mut at = dir;
    let stop = loop {
        if std::fs::symlink_metadata(at.join(".git")).is_ok() {
            break format!("{} is the repository root", at.display());
        }
        let Some(parent) = at.parent() else {
            break "reached /".to_string();
        };
        let m = match std::fs::metadata(parent) {
            Ok(m) => m,
            Err(e) => break format!("cannot read {}: {e}", parent.display()),
        };
        if m.dev() != start.dev() {
            break format!("{} is on another filesystem", parent.display());
        }
        if let Some(why) = untrusted(&m) {
            break format!("{} {why}", parent.display());
        }
        let file = parent.join(name);
        if let Ok(f) = std::fs::metadata(&file) {
            if f.is_file() {
                match untrusted(&f) {
                    Some(why) => break format!("{} {why}", file.display()),
                    None => {
                        out.path = Some(file);
                        return out;
                    }
                }
            }
        }
        at = parent;
    };
    out.stopped = Some(stop);
    out
}

/// Why a directory or file on the way up is not the user's to trust, if it is not:
/// owned by someone else (root excepted when running as root), writable by all, or
/// writable by a group other than the user's own.
fn untrusted(m: &std::fs::Metadata) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid and getegid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if m.uid() != uid {
        Some("is not owned by you")
    } else if m.mode() & 0o002 != 0 || (m.mode() & 0o020 != 0 && m.gid() != gid) {
        Some("is writable by other users")
    } else {
        None
    }
}

/// `file:line:column` of a key path in the manifest (`lock.device_count`,
/// `scenes[3].device.devices`), for errors found after loading; just the file when the
/// file cannot be read again or has no such key.
pub fn position(m: &Manifest, key: &str) -> String {
    let file = m.file.display();
    match crate::fsutil::read_capped_following(&m.file, crate::fsutil::Cap::MANIFEST)
        .ok()
        .and_then(|t| String::from_utf8(t).ok())
        .and_then(|t| Locations::index(&t).find(key))
    {
        Some(p) => format!("{file}:{}:{}", p.line, p.col),
        None => file.to_string(),
    }
}

pub fn load(path: &Path) -> Result<Manifest, ManifestErrors> {
    let (m, memo) = load_deferred(path)?;
    if let Some(memo) = memo {
        memo.write(&m);
    }
    Ok(m)
}

/// `load`, leaving the memo of a manifest parsed from its text to the caller to keep
/// (it takes a while on a big suite, and can be written while the plan is made).
pub fn load_deferred(path: &Path) -> Result<(Manifest, Option<MemoWrite>), ManifestErrors> {
    let file = path.display().to_string();
    let single = |message: String| ManifestErrors {
        file: file.clone(),
        diags: vec![Diag {
            line: None,
            col: None,
            path: String::new(),
            message,
        }],
    };
    let bytes = crate::fsutil::read_capped_following(path, crate::fsutil::Cap::MANIFEST)
        .map_err(|e| single(format!("cannot read it: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| single("it is not UTF-8 text".into()))?;
    let dir = dir_of(path).map_err(|e| single(e.to_string()))?;
    let key = memo::Key::of(&text, path, &dir);
    if let Some(mut m) = memo::read(&key, path, &dir) {
        // Kept as written: the URL's variables, as they are now (the probes checked
        // they are what the kept parse saw).
        m.cache.remote.expand_url();
        guard_children(&m);
        return Ok((m, None));
    }
    let (m, probes) = parse_probed(&text, path, &dir)?;
    // Before anything of it runs (identity commands start as soon as it is loaded).
    guard_children(&m);
    Ok((m, Some(MemoWrite { key, dir, probes })))
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

/// What no child of this manifest may see: its secret variables (removed), and the
/// userinfo of the remote cache's URL in the variables that hold it (redacted).
fn guard_children(m: &Manifest) {
    crate::proc::hide_from_children(m.secret_env());
    crate::proc::strip_userinfo_for_children(m.cache.remote.url_env());
}

/// The memo of a manifest that was parsed from its text, to be kept.
pub struct MemoWrite {
    key: memo::Key,
    dir: PathBuf,
    probes: Vec<memo::Probe>,
}

impl MemoWrite {
    /// Keep `m` (the manifest this was loaded with) for the next run.
    pub fn write(self, m: &Manifest) {
        memo::write(self.key, &self.dir, self.probes, m);
    }
}

/// The directory a manifest's relative paths start from: its own, with links resolved.
/// Known before the manifest is read, so files kept beside it can be read meanwhile.
pub fn dir_of(path: &Path) -> Result<PathBuf, Unresolved> {
    let abs = std::path::absolute(path).map_err(Unresolved::Path)?;
    abs.parent()
        .unwrap_or(Path::new("/"))
        .canonicalize()
        .map_err(Unresolved::Dir)
}

/// A manifest path that cannot be resolved: the path itself, or its directory.
#[derive(Debug)]
pub enum Unresolved {
    Path(std::io::Error),
    Dir(std::io::Error),
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unresolved::Path(e) => write!(f, "cannot resolve it: {e}"),
            Unresolved::Dir(e) => write!(f, "cannot resolve its directory: {e}"),
        }
    }
}

/// Parse and validate manifest text as if it were the file `file` in directory `dir`.
pub fn parse(text: &str, file: &Path, dir: &Path) -> Result<Manifest, ManifestErrors> {
    parse_probed(text, file, dir).map(|(m, _)| m)
}

/// `parse`, with what validation looked at outside the text (for the memo).
fn parse_probed(
    text: &str,
    file: &Path,
    dir: &Path,
) -> Result<(Manifest, Vec<memo::Probe>), ManifestErrors> {
    // A UTF-8 byte order mark (editors on Windows write one) is not a second document.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut cx = Ctx::new(file.display().to_string(), dir);
    let value = match yaml::parse(text) {
        Ok(v) => v,
        Err(e) => {
            return Err(ManifestErrors {
                file: cx.file,
                diags: vec![Diag {
                    line: Some(e.pos.line),
                    col: Some(e.pos.col),
                    path: String::new(),
                    message: format!("invalid YAML: {}", e.message),
                }],
            });
        }
    };
    let manifest = cx.manifest(value);
    if cx.diags.is_empty() {
        return Ok((
            manifest.expect("no errors means a manifest"),
            cx.probes.take(),
        ));
    }
    // Positions are needed only to report errors: index the text then, not on every load.
    let locs = Locations::index(text);
    for d in cx.diags.iter_mut().filter(|d| d.line.is_none()) {
        if let Some(pos) = locs.find(&d.path) {
            d.line = Some(pos.line);
            d.col = Some(pos.col);
        }
    }
    // In file order, as an editor would walk them.
    cx.diags
        .sort_by_key(|d| (d.line.unwrap_or(usize::MAX), d.col.unwrap_or(0)));
    Err(ManifestErrors {
        file: cx.file,
        diags: cx.diags,
    })
}

struct Ctx {
    file: String,
    dir: PathBuf,
    diags: Vec<Diag>,
    notes: Vec<String>,
    /// Paths already resolved (kernels share include dirs and sources).
    resolved: std::cell::RefCell<HashMap<String, Result<Option<FileRef>, String>>>,
    /// Real paths of directories, and whether resolved paths are directories.
    canon: std::cell::RefCell<HashMap<PathBuf, Option<PathBuf>>>,
    kinds: std::cell::RefCell<HashMap<PathBuf, bool>>,
    /// What validation looked at outside the text, for the manifest memo.
    probes: memo::Probes,
    /// Toolchains that are defined but invalid: a kernel naming one is not told
    /// "unknown toolchain" on top of the toolchain's own error.
    broken_toolchains: Vec<String>,
    /// Lanes by name with their `devices` (None: the lane itself is invalid).
    lane_devices: BTreeMap<String, Option<u32>>,
    /// What `{suite_args}` expands to in a command (None: no `suite_args:`).
    suite_args: Option<String>,
    /// The names under `workers:` (a broken worker's too).
    worker_names: Vec<String>,
}

impl Ctx {
    fn new(file: String, dir: &Path) -> Ctx {
        Ctx {
            file,
            dir: dir.to_path_buf(),
            diags: Vec::new(),
            notes: Vec::new(),
            resolved: Default::default(),
            canon: Default::default(),
            kinds: Default::default(),
            probes: Default::default(),
            broken_toolchains: Vec::new(),
            lane_devices: Default::default(),
            suite_args: None,
            worker_names: Vec::new(),
        }
    }

    fn err(&mut self, path: &str, message: impl Into<String>) {
        self.diags.push(Diag {
            line: None,
            col: None,
            path: path.to_string(),
            message: message.into(),
        });
    }

    fn err_at(&mut self, path: &str, pos: locate::Pos, message: impl Into<String>) {
        self.diags.push(Diag {
            line: Some(pos.line),
            col: Some(pos.col),
            path: path.to_string(),
            message: message.into(),
        });
    }

    /// Report (and drop) every unknown key of a mapping, with a did-you-mean when one is
    /// close, and every repeated key, so that all of them are reported, not the first only.
    fn check_keys(&mut self, v: &mut Value, path: &str, known: &[&str]) {
        let yaml::Kind::Map(entries) = &mut v.kind else {
            return;
        };
        // The happy path allocates nothing: names are borrowed, paths built on error only.
        // Small mappings are scanned; big free-form ones (a long `env:`) use a set.
        let mut set = (entries.len() > 32).then(std::collections::HashSet::new);
        let bad: Vec<(usize, bool)> = entries
            .iter()
            .enumerate()
            .filter_map(|(i, (k, _))| {
                let name = k.as_str();
                let unknown = !known.is_empty() && !name.is_some_and(|n| known.contains(&n));
                let repeated = match &mut set {
                    Some(set) => !set.insert(name),
                    None => entries[..i].iter().any(|(e, _)| e.as_str() == name),
                };
                (unknown || repeated).then_some((i, unknown))
            })
            .collect();
        if bad.is_empty() {
            return;
        }
        let mut keep = Vec::with_capacity(entries.len());
        for (i, (k, val)) in std::mem::take(entries).into_iter().enumerate() {
            let Some(&(_, unknown)) = bad.iter().find(|(b, _)| *b == i) else {
                keep.push((k, val));
                continue;
            };
            let name = k
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| k.describe());
            let at = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            if unknown {
                self.err_at(&at, k.pos(), yaml::unknown_field(&name, known));
            } else {
                self.err_at(
                    &at,
                    k.pos(),
                    format!("`{name}` is given twice in this mapping"),
                );
            }
        }
        *entries = keep;
    }

    /// Deserialize a mapping into `T`, first reporting every unknown or repeated key: the
    /// keys `T` accepts are its own fields (`raw::fields_of`). `T` not a struct: a
    /// free-form mapping (env, toolchains) or a list, no field check.
    fn take<T: DeserializeOwned>(&mut self, mut v: Value, path: &str) -> Option<T> {
        let known = raw::fields_of::<T>().unwrap_or_default();
        debug_assert!(
            known.is_empty() || keys().iter().any(|m| m.keys == known),
            "{path}: a mapping the manifest accepts is missing from `keys()` (and the docs)"
        );
        self.check_keys(&mut v, path, known);
        match T::deserialize(v) {
            Ok(t) => Some(t),
            Err(e) => {
                let at = e.path(path);
                let msg = match &e.problem {
                    // The key path is printed with the error already; say "the manifest"
                    // only when there is none.
                    p if at.is_empty() => format!("the manifest: {p}"),
                    p => p.to_string(),
                };
                match e.pos {
                    Some(pos) => self.err_at(&at, pos, msg),
                    None => self.err(&at, msg),
                }
                None
            }
        }
    }

    fn templ(&mut self, text: &str, path: &str, allowed: &[Ph]) -> Option<Template> {
        let expanded = match suite_args::substitute(text, self.suite_args.as_deref()) {
            None => None,
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                self.err(path, e);
                return None;
            }
        };
        let text = expanded.as_deref().unwrap_or(text);
        match Template::parse(text, allowed) {
            Ok(t) => Some(t),
            Err(errs) => {
                for e in errs {
                    self.err(path, e.0);
                }
                None
            }
        }
    }

    fn size(&mut self, v: Option<raw::Scalar>, path: &str) -> Option<u64> {
        let v = v?;
        crate::units::parse_size(&v.text())
            .map_err(|e| self.err(path, e.to_string()))
            .ok()
    }

    /// A count past its documented maximum is an error at `path`.
    fn at_most(&mut self, v: Option<u32>, path: &str, max: u32) {
        if let Some(n) = v.filter(|&n| n > max) {
            let key = path.rsplit('.').next().unwrap_or(path);
            self.err(path, format!("{key} must be at most {max} (found {n})"));
        }
    }

    fn duration(&mut self, v: Option<raw::Scalar>, path: &str) -> Option<Duration> {
        let v = v?;
        crate::units::parse_duration(&v.text())
            .map_err(|e| self.err(path, e.to_string()))
            .ok()
    }

    fn env(&mut self, raw: BTreeMap<String, raw::Scalar>, path: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (k, v) in raw {
            if !valid_env_name(&k) {
                self.err(
                    &format!("{path}.{k}"),
                    format!("`{k}` is not a valid environment variable name"),
                );
            }
            let v = v.text();
            if v.contains('\0') {
                self.err(
                    &format!("{path}.{k}"),
                    format!("the value of `{k}` contains a NUL byte, which no environment variable can hold"),
                );
            }
            out.insert(k, v);
        }
        out
    }

    fn manifest(&mut self, mut top: Value) -> Option<Manifest> {
        if !matches!(top.kind, yaml::Kind::Map(_)) {
            self.err_at(
                "",
                top.pos(),
                "the manifest must be a mapping with `version: 1` and `scenes:`",
            );
            return None;
        }
        self.check_keys(
            &mut top,
            "",
            raw::fields_of::<raw::Top>().unwrap_or_default(),
        );
        let mut field = |name: &str| top.remove(name);

        match field("version") {
            None => self.err("", "missing field `version` (write `version: 1`)"),
            Some(v) if v.as_int() == Some(1) => {}
            Some(other) => self.err_at(
                "version",
                other.pos(),
                format!(
                    "unsupported manifest version {} (this scenerun reads version 1)",
                    crate::error::clip(other.as_str().unwrap_or("(not a number)"), 40)
                ),
            ),
        }
        let platform = match field("platform") {
            None => "default".to_string(),
            Some(v) => self.take::<String>(v, "platform").unwrap_or_default(),
        };
        let env_raw = field("env")
            .and_then(|v| self.take::<BTreeMap<String, raw::Scalar>>(v, "env"))
            .unwrap_or_default();
        let env = self.env(env_raw, "env");
        if let Some(words) =
            field("suite_args").and_then(|v| self.take::<Vec<String>>(v, "suite_args"))
        {
            match suite_args::expansion(&words) {
                Ok(e) => self.suite_args = Some(e),
                Err(e) => self.err("suite_args", e),
            }
        }

        let cache = self.cache_config(field("cache"));

        let toolchains = self.toolchains(field("toolchains"));

        let lanes = self.lanes(field("lanes"));
        let lock = self.lock(field("lock"));

        let generators = field("scenes_from")
            .map(|v| self.generators(v, &platform))
            .unwrap_or_default();
        let workers = self.workers(field("workers"));
        let prepare = self.prepare_steps(field("prepare"));
        let scenes = match field("scenes") {
            None if !generators.is_empty() => Vec::new(),
            None => {
                self.err("", "missing field `scenes`");
                Vec::new()
            }
            Some(v) => self.scenes(v, !generators.is_empty(), &platform, &env, &toolchains),
        };

        Some(Manifest {
            file: PathBuf::from(&self.file),
            dir: self.dir.clone(),
            platform,
            env,
            cache,
            toolchains,
            lock,
            lanes,
            scenes,
            generators,
            prepare,
            workers,
            notes: std::mem::take(&mut self.notes),
        })
    }

    /// `cache:`, resolved against the manifest's directory, with its defaults.
    fn cache_config(&mut self, v: Option<Value>) -> CacheConfig {
        let cache_raw = v
            .and_then(|v| self.take::<raw::Cache>(v, "cache"))
            .unwrap_or_default();
        CacheConfig {
            dir: cache_raw.dir.as_deref().map(|d| self.dir.join(d)),
            max_size: self.size(cache_raw.max_size, "cache.max_size"),
            max_age: self
                .duration(cache_raw.max_age, "cache.max_age")
                .unwrap_or(DEFAULT_MAX_AGE),
            remote: cache_raw
                .remote
                .and_then(|v| self.remote(v))
                .unwrap_or_default(),
            verify_key: cache_raw
                .verify_key
                .and_then(|k| self.verify_key(&k, "cache.verify_key")),
            sign_key_env: cache_raw.sign_key_env.filter(|n| {
                let ok = valid_env_name(n);
                if !ok {
                    self.err(
                        "cache.sign_key_env",
                        format!("`{n}` is not a valid variable name"),
                    );
                }
                ok
            }),
        }
    }

    /// `toolchains:` by name; a broken one is remembered so its kernels are not told
    /// "unknown toolchain" as well.
    fn toolchains(&mut self, v: Option<Value>) -> BTreeMap<String, Toolchain> {
        let mut toolchains = BTreeMap::new();
        if let Some(v) = v {
            if let Some(map) = self.take::<BTreeMap<String, Value>>(v, "toolchains") {
                for (name, v) in map {
                    let path = format!("toolchains.{name}");
                    if !valid_name(&name) {
                        self.err(&path, bad_name("toolchain", &name));
                    }
                    let Some(t) = self.take::<raw::Toolchain>(v, &path) else {
                        self.broken_toolchains.push(name);
                        continue;
                    };
                    let compile =
                        self.templ(&t.compile, &format!("{path}.compile"), allowed::COMPILE);
                    let depfile = t
                        .depfile
                        .as_deref()
                        .and_then(|d| self.templ(d, &format!("{path}.depfile"), allowed::DEPFILE));
                    if let Some(compile) = compile {
                        toolchains.insert(
                            name.clone(),
                            Toolchain {
                                name,
                                compile,
                                identity: t.identity,
                                identity_timeout: self
                                    .duration(
                                        t.identity_timeout,
                                        &format!("{path}.identity_timeout"),
                                    )
                                    .unwrap_or(crate::identity::DEFAULT_TIMEOUT),
                                depfile,
                                include_flag: t.include_flag.unwrap_or_else(|| "-I".into()),
                            },
                        );
                    } else {
                        self.broken_toolchains.push(name);
                    }
                }
            }
        }
        toolchains
    }

    /// `lock:`, checked: `{run}` in its command, its counts, its variable name.
    fn lock(&mut self, v: Option<Value>) -> Option<LockConfig> {
        v.and_then(|v| self.take::<raw::Lock>(v, "lock"))
            .and_then(|l| {
                let submit = self.templ(&l.submit, "lock.submit", allowed::LOCK)?;
                if !submit.uses(Ph::Run) {
                    self.err(
                        "lock.submit",
                        "the lock command must contain {run} (the device steps run through it)",
                    );
                }
                if l.device_count == Some(0) {
                    self.err("lock.device_count", "device_count must be at least 1");
                }
                if l.device_count.is_some_and(|n| n > MAX_DEVICES) {
                    self.err(
                        "lock.device_count",
                        format!("device_count must be at most {MAX_DEVICES}"),
                    );
                }
                let device_env = l.device_env.unwrap_or_else(|| "TASK_DEVICE".into());
                if !valid_env_name(&device_env) {
                    self.err(
                        "lock.device_env",
                        format!("`{device_env}` is not a valid variable name"),
                    );
                }
                let release_timeout = self.duration(l.release_timeout, "lock.release_timeout");
                let grace = self.duration(l.grace, "lock.grace");
                let device_fault = self.device_fault(l.device_fault);
                Some(LockConfig {
                    submit,
                    device_env,
                    device_count: l.device_count,
                    release_timeout,
                    grace,
                    device_fault,
                })
            })
    }

    /// `scenes:`, each validated, names unique (`generated`: `scenes_from` may add the
    /// scenes, so an empty list is fine).
    fn scenes(
        &mut self,
        v: Value,
        generated: bool,
        platform: &str,
        env: &BTreeMap<String, String>,
        toolchains: &BTreeMap<String, Toolchain>,
    ) -> Vec<Scene> {
        let mut scenes = Vec::new();
        if let Some(list) = self.take::<Vec<Value>>(v, "scenes") {
            if list.is_empty() && !generated {
                self.err("scenes", "the manifest has no scenes");
            }
            let mut seen: HashMap<String, usize> = HashMap::new();
            for (i, v) in list.into_iter().enumerate() {
                let path = format!("scenes[{i}]");
                if let Some(s) = self.scene(v, &path, platform, env, toolchains) {
                    if let Some(first) = seen.get(&s.name) {
                        self.err(
                            &format!("{path}.name"),
                            format!(
                                "duplicate scene name `{}` (first defined at scenes[{first}])",
                                s.name
                            ),
                        );
                    } else {
                        seen.insert(s.name.clone(), i);
                    }
                    scenes.push(s);
                }
            }
        }
        scenes
    }

    fn scene(
        &mut self,
        v: Value,
        path: &str,
        platform: &str,
        top_env: &BTreeMap<String, String>,
        toolchains: &BTreeMap<String, Toolchain>,
    ) -> Option<Scene> {
        let s = self.take::<raw::Scene>(v, path)?;
        if !valid_name(&s.name) {
            self.err(&format!("{path}.name"), bad_name("scene", &s.name));
        }
        let mut env = top_env.clone();
        env.extend(self.env(s.env, &format!("{path}.env")));

        // Which steps the scene has as written: an invalid fixture still makes `{fixture}`
        // a valid placeholder for its golden and device step (one error, not three).
        let has_kernels = !s.kernels.is_empty();
        let (has_fixture, has_golden, has_device) =
            (s.fixture.is_some(), s.golden.is_some(), s.device.is_some());
        // Exact sizes: 20,000 kernels with growth slack are megabytes of a plan's peak.
        let mut kernels = Vec::with_capacity(s.kernels.len());
        let mut kernel_names: HashMap<String, usize> = HashMap::new();
        for (i, kv) in s.kernels.into_iter().enumerate() {
            let kp = format!("{path}.kernels[{i}]");
            let Some(k) = self.take::<raw::Kernel>(kv, &kp) else {
                continue;
            };
            if !valid_name(&k.name) {
                self.err(&format!("{kp}.name"), bad_name("kernel", &k.name));
            }
            if let Some(first) = kernel_names.get(&k.name) {
                self.err(
                    &format!("{kp}.name"),
                    format!(
                        "duplicate kernel name `{}` in scene `{}` (first at kernels[{first}])",
                        k.name, s.name
                    ),
                );
            } else {
                kernel_names.insert(k.name.clone(), i);
            }
            if let Some(k) = self.kernel(k, &kp, toolchains) {
                kernels.push(k);
            }
        }

        let fixture = s
            .fixture
            .and_then(|v| self.gen_step(v, &format!("{path}.fixture"), allowed::FIXTURE));
        let golden_allowed: &[Ph] = if has_fixture {
            allowed::GOLDEN
        } else {
            allowed::FIXTURE
        };
        let golden = s
            .golden
            .and_then(|v| self.gen_step(v, &format!("{path}.golden"), golden_allowed));
        let steps = lanes::Steps {
            kernels: has_kernels,
            fixture: has_fixture,
            golden: has_golden,
        };
        let mut device = s
            .device
            .and_then(|v| self.device_step(v, &format!("{path}.device"), steps));
        for (key, value) in [("nodeid", &s.nodeid), ("case", &s.case)] {
            if let Some(v) = value {
                self.check_label(&format!("{path}.{key}"), v);
            }
        }
        if let Some(d) = device.as_mut() {
            d.node = s.nodeid.clone();
        }
        if !has_kernels && !has_fixture && !has_golden && !has_device {
            self.err(
                path,
                format!(
                    "scene `{}` has no steps (kernels, fixture, golden or device)",
                    s.name
                ),
            );
        }
        Some(Scene {
            name: s.name,
            nodeid: s.nodeid,
            case: s.case,
            platform: s.platform.unwrap_or_else(|| platform.to_string()),
            tags: s.tags,
            env,
            kernels,
            fixture,
            golden,
            device,
        })
    }

    /// A label a report carries as it is (`nodeid`, `case`): at most 4096 bytes, no
    /// control characters (a NUL or a newline would break junit and the terminal).
    fn check_label(&mut self, at: &str, value: &str) {
        if value.is_empty() || value.len() > MAX_LABEL {
            self.err(at, format!("must be 1 to {MAX_LABEL} bytes long"));
        } else if value.chars().any(char::is_control) {
            self.err(
                at,
                "must not contain control characters (NUL, newline, ...)",
            );
        }
    }

    /// One kernel at `kp`: its toolchain (defined), its source (a file) and its include
    /// dirs (one that does not exist is skipped, with a note).
    fn kernel(
        &mut self,
        k: raw::Kernel,
        kp: &str,
        toolchains: &BTreeMap<String, Toolchain>,
    ) -> Option<Kernel> {
        if !toolchains.contains_key(&k.toolchain) && !self.broken_toolchains.contains(&k.toolchain)
        {
            let known: Vec<&str> = toolchains.keys().map(String::as_str).collect();
            self.err(
                &format!("{kp}.toolchain"),
                format!(
                    "unknown toolchain `{}` (defined: {})",
                    k.toolchain,
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
            );
        }
        let source = match self.resolve(&k.source) {
            Ok(Some(f)) if !self.is_dir(&f) => Some(f),
            Ok(Some(_)) => {
                self.err(
                    &format!("{kp}.source"),
                    format!("`{}` is not a file", k.source),
                );
                None
            }
            Ok(None) => {
                self.err(
                    &format!("{kp}.source"),
                    format!("source file not found: `{}`", k.source),
                );
                None
            }
            Err(e) => {
                self.err(&format!("{kp}.source"), e);
                None
            }
        };
        let mut include_dirs = Vec::with_capacity(k.include_dirs.len());
        for (j, d) in k.include_dirs.iter().enumerate() {
            let expanded = self.expand(d);
            // `$VAR` of an unset variable names no dir: skipped, like a missing one.
            let resolved = if expanded.is_empty() && !d.is_empty() {
                Ok(None)
            } else {
                self.resolve(&expanded)
            };
            match resolved {
                Ok(Some(f)) if self.is_dir(&f) => include_dirs.push(f),
                Ok(_) => self.notes.push(format!(
                    "{}.include_dirs[{j}]: `{d}`{} does not exist; skipped",
                    kp,
                    if expanded != *d {
                        format!(" (= `{expanded}`)")
                    } else {
                        String::new()
                    }
                )),
                Err(e) => self.err(&format!("{kp}.include_dirs[{j}]"), e),
            }
        }
        Some(Kernel {
            name: k.name,
            toolchain: k.toolchain,
            source: source?,
            include_dirs,
            flags: k.flags,
        })
    }

    /// `<path>.inputs`: every pattern expanded (sorted, without duplicates); a pattern
    /// that matches nothing is an error at its position.
    pub(super) fn inputs(&mut self, patterns: &[String], path: &str) -> Vec<FileRef> {
        let mut inputs = Vec::new();
        for (i, pattern) in patterns.iter().enumerate() {
            let ip = format!("{path}.inputs[{i}]");
            match self.glob_inputs(pattern) {
                Ok(files) if files.is_empty() => {
                    self.err(&ip, format!("input `{pattern}` matches no file"))
                }
                Ok(files) => inputs.extend(files),
                Err(e) => self.err(&ip, e),
            }
        }
        inputs.sort();
        inputs.dedup();
        inputs
    }

    /// `prepare:`: a list of named steps, names unique.
    fn prepare_steps(&mut self, v: Option<Value>) -> Vec<Prepare> {
        let mut out: Vec<Prepare> = Vec::new();
        let mut seen: Vec<String> = Vec::new();
        let Some(list) = v.and_then(|v| self.take::<Vec<Value>>(v, "prepare")) else {
            return out;
        };
        for (i, v) in list.into_iter().enumerate() {
            let path = format!("prepare[{i}]");
            let Some(p) = self.take::<raw::Prepare>(v, &path) else {
                continue;
            };
            if !valid_name(&p.name) {
                self.err(&format!("{path}.name"), bad_name("prepare step", &p.name));
            } else if let Some(first) = seen.iter().position(|o| *o == p.name) {
                self.err(
                    &format!("{path}.name"),
                    format!(
                        "duplicate prepare step `{}` (first defined at prepare[{first}])",
                        p.name
                    ),
                );
            }
            seen.push(p.name.clone());
            let g = raw::GenStep {
                run: p.run,
                inputs: p.inputs,
                persist: Some(p.persist.unwrap_or(false)),
                memory: p.memory,
                threads: p.threads,
                timeout: p.timeout,
                identity: p.identity,
                worker: p.worker,
            };
            if let Some(step) = self.gen_fields(g, &path, allowed::PREPARE) {
                out.push(Prepare { name: p.name, step });
            }
        }
        out
    }

    fn gen_step(&mut self, v: Value, path: &str, allowed: &[Ph]) -> Option<GenStep> {
        let g = self.take::<raw::GenStep>(v, path)?;
        self.gen_fields(g, path, allowed)
    }

    fn gen_fields(&mut self, g: raw::GenStep, path: &str, allowed: &[Ph]) -> Option<GenStep> {
        let run = self.templ(&g.run, &format!("{path}.run"), allowed);
        let inputs = self.inputs(&g.inputs, path);
        if g.threads == Some(0) {
            self.err(&format!("{path}.threads"), "threads must be at least 1");
        }
        self.at_most(g.threads, &format!("{path}.threads"), MAX_THREADS);
        let memory = self.size(g.memory, &format!("{path}.memory"));
        let timeout = self.duration(g.timeout, &format!("{path}.timeout"));
        let worker = self.worker_ref(g.worker, path);
        Some(GenStep {
            run: run?,
            inputs,
            persist: g.persist.unwrap_or(true),
            memory,
            threads: g.threads.unwrap_or(1).max(1),
            timeout,
            identity: g.identity,
            worker,
        })
    }
}

fn bad_name(what: &str, name: &str) -> String {
    format!("bad {what} name `{name}`: use 1–128 characters from [A-Za-z0-9_.-] (not `.` or `..`)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("vector_add-2.v1"));
        assert!(!valid_name(""));
        assert!(!valid_name(".."));
        assert!(!valid_name("a b"));
        assert!(!valid_name("a;b"));
        assert!(!valid_name(&"x".repeat(129)));
    }

    #[test]
    fn env_expansion() {
        std::env::set_var("SCENERUN_TEST_HOME", "/opt/x");
        assert_eq!(expand_vars("$SCENERUN_TEST_HOME/include"), "/opt/x/include");
        assert_eq!(expand_vars("${SCENERUN_TEST_HOME}/inc"), "/opt/x/inc");
        assert_eq!(expand_vars("a$"), "a$");
    }
}
