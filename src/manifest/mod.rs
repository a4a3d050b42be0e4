//! The manifest (`scenes.yaml`, version 1): load, validate, and hand out a `Manifest`
//! in which every path is resolved, every command template parsed for its context, and
//! every default filled. Every error of a file is collected and reported together, each
//! with file:line:column where the YAML gives one (exit code 4).
//!
//! This file loads (from the text, or from the memo of the last load) and holds the
//! module list. What lives where: `yaml` reads the text into nodes, `raw` holds the
//! mappings as written, `validate` the validation context and its checks of single
//! values, `top` the top level and its sections, `scenes` the scenes and their warm
//! steps, `lanes` the device step and `lanes:`, `workers` `workers:`, `remote` the
//! remote cache, `signing` the one key pair of local and remote entries, `generated`
//! what `scenes_from:` printed, `paths` the paths, `types` the manifest as loaded, `discover` where the file is, `memo` the kept parse.

pub mod depth;
mod discover;
pub mod generated;
mod inherit;
pub mod lanes;
mod memo;
mod paths;
mod raw;
pub mod remote;
mod scenes;
pub mod selections;
pub mod signing;
mod suite_args;
mod top;
mod types;
mod validate;
pub mod workers;
pub mod yaml;

pub use crate::base::error::{Diag, ManifestErrors};
pub use discover::{dir_of, discover, Discovered, Unresolved};
pub use lanes::{
    DeviceFault, DeviceRun, DeviceStep, LaneConfig, Order, Prestart, RestartOn, Variant, Writes,
};
pub use paths::{expand_vars, FileRef};
pub use raw::{keys, Mapping};
pub use selections::NamedSelection;
pub use types::*;
pub use validate::{valid_name, MAX_DEVICES, MAX_LABEL, MAX_RESTARTS, MAX_RETRIES, MAX_THREADS};
pub use workers::WorkerConfig;

use std::path::{Path, PathBuf};

use validate::Ctx;

pub fn load(path: &Path) -> Result<Manifest, ManifestErrors> {
    load_as(path, None)
}

/// `load` with `profile` (`--profile`) applied.
pub fn load_as(path: &Path, profile: Option<&str>) -> Result<Manifest, ManifestErrors> {
    let (m, memo) = load_deferred(path, profile)?;
    if let Some(memo) = memo {
        memo.write(&m);
    }
    Ok(m)
}

/// `load`, leaving the memo of a manifest parsed from its text to the caller to keep
/// (it takes a while on a big suite, and can be written while the plan is made).
pub fn load_deferred(
    path: &Path,
    profile: Option<&str>,
) -> Result<(Manifest, Option<MemoWrite>), ManifestErrors> {
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
    let bytes =
        crate::base::fsutil::read_capped_following(path, crate::base::fsutil::Cap::MANIFEST)
            .map_err(|e| single(format!("cannot read it: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|_| single("it is not UTF-8 text".into()))?;
    let dir = dir_of(path).map_err(|e| single(e.to_string()))?;
    let key = memo::Key::of(&text, path, &dir, profile);
    if let Some(mut m) = memo::read(&key, &dir) {
        // Kept as written: the URL's variables, as they are now (the probes checked
        // they are what the kept parse saw).
        m.cache.remote.expand_url();
        guard_children(&m);
        warn_deprecated(&m);
        return Ok((m, None));
    }
    let (m, probes) = parse_probed(&text, path, &dir, profile)?;
    // Before anything of it runs (identity commands start as soon as it is loaded).
    guard_children(&m);
    warn_deprecated(&m);
    Ok((m, Some(MemoWrite { key, dir, probes })))
}

/// The deprecated keys `m` writes, posted as warnings on every load (the memo's too).
fn warn_deprecated(m: &Manifest) {
    for k in &m.signing.aliases {
        crate::base::warning::post(crate::base::notice::Notice::Deprecated {
            key: k.path(),
            instead: k.instead(),
        });
    }
}

/// What no child of this manifest may see: its secret variables (removed), and the
/// userinfo of the remote cache's URL in the variables that hold it (redacted).
fn guard_children(m: &Manifest) {
    crate::base::proc::hide_from_children(m.secret_env());
    crate::base::proc::strip_userinfo_for_children(m.cache.remote.url_env());
}

/// The memo of a manifest that was parsed from its text, to be kept.
pub struct MemoWrite {
    key: memo::Key,
    dir: PathBuf,
    probes: Vec<paths::Probe>,
}

impl MemoWrite {
    /// Keep `m` (the manifest this was loaded with) for the next run.
    pub fn write(self, m: &Manifest) {
        memo::write(self.key, &self.dir, self.probes, m);
    }
}

/// Parse and validate manifest text as if it were the file `file` in directory `dir`.
pub fn parse(text: &str, file: &Path, dir: &Path) -> Result<Manifest, ManifestErrors> {
    parse_probed(text, file, dir, None).map(|(m, _)| m)
}

/// `parse`, with what validation looked at outside the text (for the memo).
fn parse_probed(
    text: &str,
    file: &Path,
    dir: &Path,
    profile: Option<&str>,
) -> Result<(Manifest, Vec<paths::Probe>), ManifestErrors> {
    // A UTF-8 byte order mark (editors on Windows write one) is not a second document.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut cx = Ctx::new(file.display().to_string(), dir);
    cx.profile = profile.map(str::to_string);
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
    // Taken before validation consumes the nodes.
    let layout = Layout::of(text, &value);
    let mut at = yaml::Positions::of(&value);
    let manifest = cx.manifest(value);
    if cx.diags.is_empty() {
        let mut m = manifest.expect("no errors means a manifest");
        m.layout = layout;
        return Ok((m, cx.paths.take_probes()));
    }
    for d in cx.diags.iter_mut().filter(|d| d.line.is_none()) {
        if let Some(pos) = at.find(&d.path) {
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
