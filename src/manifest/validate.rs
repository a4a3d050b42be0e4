//! The validation context (`Ctx`): the errors of one manifest (or one generator's
//! output) collected as they are found, what validation looked at outside the text, and
//! the checks of single values every part of the manifest shares (keys of a mapping, a
//! command template, a size, a duration, a count, an environment). Invariant: a check
//! reports every problem it finds and goes on; nothing here stops at the first.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::paths::Resolver;
use super::yaml::{self, Node as Value};
use super::{keys, raw, suite_args, Diag};
use crate::base::template::{Ph, Template};

// The bounds the loader holds every count to.

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

pub(super) fn valid_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

pub(super) fn bad_name(what: &str, name: &str) -> String {
    format!("bad {what} name `{name}`: use 1–128 characters from [A-Za-z0-9_.-] (not `.` or `..`)")
}

pub(super) struct Ctx {
    pub(super) file: String,
    pub(super) dir: PathBuf,
    pub(super) diags: Vec<Diag>,
    /// The diagnostics already in `diags` (`push`): a hostile manifest makes hundreds of
    /// thousands, so a linear search per push would be quadratic.
    said: std::collections::HashSet<Diag>,
    pub(super) notes: Vec<String>,
    /// The manifest's paths, and what validation looked at outside the text (for the
    /// manifest memo).
    pub(super) paths: Resolver,
    /// Toolchains that are defined but invalid: a kernel naming one is not told
    /// "unknown toolchain" on top of the toolchain's own error.
    pub(super) broken_toolchains: Vec<String>,
    /// Lanes by name with their `devices` (None: the lane itself is invalid).
    pub(super) lane_devices: BTreeMap<String, Option<u32>>,
    /// What `{suite_args}` expands to in a command (None: no `suite_args:`).
    pub(super) suite_args: Option<String>,
    /// The names under `workers:` (a broken worker's too).
    pub(super) worker_names: Vec<String>,
    /// `selections:` in declaration order, the profile applied.
    pub(super) selections_declared: Vec<super::NamedSelection>,
    /// `--profile` / `$SCENERUN_PROFILE`: the profile to apply.
    pub(super) profile: Option<String>,
    /// The selection of the generator whose scenes are read (None: none).
    pub(super) current_selection: Option<String>,
}

impl Ctx {
    pub(super) fn new(file: String, dir: &Path) -> Ctx {
        Ctx {
            file,
            dir: dir.to_path_buf(),
            diags: Vec::new(),
            said: std::collections::HashSet::new(),
            notes: Vec::new(),
            paths: Resolver::new(dir),
            broken_toolchains: Vec::new(),
            lane_devices: Default::default(),
            suite_args: None,
            worker_names: Vec::new(),
            selections_declared: Vec::new(),
            profile: None,
            current_selection: None,
        }
    }

    pub(super) fn err(&mut self, path: &str, message: impl Into<String>) {
        self.push(Diag {
            line: None,
            col: None,
            path: path.to_string(),
            message: message.into(),
        });
    }

    pub(super) fn err_at(&mut self, path: &str, pos: yaml::Pos, message: impl Into<String>) {
        self.push(Diag {
            line: Some(pos.line),
            col: Some(pos.col),
            path: path.to_string(),
            message: message.into(),
        });
    }

    /// One diagnostic once: a part validated once per selection (a `prepare` step's
    /// inputs) says what is wrong with it once, not once per selection.
    fn push(&mut self, d: Diag) {
        if self.said.insert(d.clone()) {
            self.diags.push(d);
        }
    }

    /// Report (and drop) every unknown key of a mapping, with a did-you-mean when one is
    /// close, and every repeated key, so that all of them are reported, not the first only.
    pub(super) fn check_keys(&mut self, v: &mut Value, path: &str, known: &[&str]) {
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
    pub(super) fn take<T: DeserializeOwned>(&mut self, mut v: Value, path: &str) -> Option<T> {
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

    pub(super) fn templ(&mut self, text: &str, path: &str, allowed: &[Ph]) -> Option<Template> {
        let expanded = match suite_args::substitute(text, self.suite_args.as_deref()) {
            None => None,
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                self.err(path, e.to_string());
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

    pub(super) fn size(&mut self, v: Option<raw::Scalar>, path: &str) -> Option<u64> {
        let v = v?;
        crate::base::units::parse_size(&v.text())
            .map_err(|e| self.err(path, e.to_string()))
            .ok()
    }

    /// A count past its documented maximum is an error at `path`.
    pub(super) fn at_most(&mut self, v: Option<u32>, path: &str, max: u32) {
        if let Some(n) = v.filter(|&n| n > max) {
            let key = path.rsplit('.').next().unwrap_or(path);
            self.err(path, format!("{key} must be at most {max} (found {n})"));
        }
    }

    pub(super) fn duration(&mut self, v: Option<raw::Scalar>, path: &str) -> Option<Duration> {
        let v = v?;
        crate::base::units::parse_duration(&v.text())
            .map_err(|e| self.err(path, e.to_string()))
            .ok()
    }

    pub(super) fn env(
        &mut self,
        raw: BTreeMap<String, raw::Scalar>,
        path: &str,
    ) -> BTreeMap<String, String> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn names() {
        assert!(valid_name("vector_add-2.v1"));
        assert!(!valid_name(""));
        assert!(!valid_name(".."));
        assert!(!valid_name("a b"));
        assert!(!valid_name("a;b"));
        assert!(!valid_name(&"x".repeat(129)));
    }
}
