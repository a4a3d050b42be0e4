//! Paths named by a manifest: `$VAR` expansion, resolution against the manifest's
//! directory, and the rule that a relative path may not leave it (lexically through `..`
//! or through a symlink). Absolute paths are allowed: toolchain headers live outside the
//! checkout. Invariant: every fact the `Resolver` reads from outside the text (a path,
//! a directory, a glob's matches, a variable) is recorded as a `Probe`, so a kept parse
//! is used only while each still answers the same (`memo`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A file or directory named by the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileRef {
    /// How keys and commands name it: relative to the manifest's directory (with `/`)
    /// when it is inside it, else absolute.
    pub rel: String,
    /// Where to read it.
    pub abs: PathBuf,
}

/// Why a path the manifest names cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("empty path")]
    Empty,
    #[error("`{raw}` escapes the manifest's directory through `..`")]
    DotDot { raw: String },
    #[error("`{raw}` is not a usable path")]
    Unusable { raw: String },
    #[error("`{raw}` is a dangling symlink")]
    Dangling { raw: String },
    #[error("`{raw}` escapes the manifest's directory through a symlink (it resolves to {})", .real.display())]
    ThroughLink { raw: String, real: PathBuf },
}

/// Why an input (a path or a glob) names no usable file.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Path(#[from] PathError),
    #[error("input `{pattern}` is not a file")]
    NotAFile { pattern: String },
    #[error("input file not found: `{pattern}`")]
    NotFound { pattern: String },
    #[error("`{pattern}`: `..` is not allowed in an input glob")]
    DotDot { pattern: String },
    // The manifest's messages are one line each: the glob's own words are in it.
    #[error("bad glob `{pattern}`: {source}")]
    Glob {
        pattern: String,
        #[source]
        source: glob::PatternError,
    },
}

/// One outside fact the validation of a manifest depended on, with its answer then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) enum Probe {
    /// `Resolver::resolve` of a path as written (an error as it reads: the answer is
    /// compared, never acted on), and whether it was known as a directory.
    Resolve {
        raw: String,
        found: Result<Option<FileRef>, String>,
        dir: Option<bool>,
    },
    /// `Resolver::is_dir` answered from the file system.
    IsDir { abs: PathBuf, is: bool },
    /// An input glob's matches.
    Glob {
        pattern: String,
        found: Result<Vec<FileRef>, String>,
    },
    /// An environment variable a `$VAR` named: where a value came from, and a seal of
    /// the value (`seal::tag`), so a kept manifest never holds a secret's value.
    Var {
        name: String,
        sealed: Option<String>,
    },
}

impl Probe {
    /// The probe of variable `name` holding `value` now.
    pub(super) fn var(name: &str, value: Option<&str>) -> Probe {
        Probe::Var {
            name: name.to_string(),
            sealed: value
                .map(|v| crate::base::seal::tag("environment variable", name, v.as_bytes())),
        }
    }

    /// Whether `paths` (of the same directory) answers it the same way now.
    pub(super) fn still_true(&self, paths: &Resolver) -> bool {
        match self {
            Probe::Resolve { raw, found, dir } => {
                let now = paths.resolve_uncached(raw);
                let now_dir = match &now {
                    Ok(Some(f)) => paths.kinds.borrow().get(&f.abs).copied(),
                    _ => None,
                };
                now.map_err(|e| e.to_string()) == *found && now_dir == *dir
            }
            Probe::IsDir { abs, is } => abs.is_dir() == *is,
            Probe::Glob { pattern, found } => {
                paths.glob_inputs(pattern).map_err(|e| e.to_string()) == *found
            }
            Probe::Var { name, .. } => {
                Probe::var(name, std::env::var(name).ok().as_deref()) == *self
            }
        }
    }
}

/// The paths of one manifest: resolved against its directory (each once: kernels share
/// include dirs and sources), with the probes of everything looked at.
pub(super) struct Resolver {
    dir: PathBuf,
    /// Paths already resolved.
    resolved: RefCell<HashMap<String, Result<Option<FileRef>, PathError>>>,
    /// Real paths of directories, and whether resolved paths are directories.
    canon: RefCell<HashMap<PathBuf, Option<PathBuf>>>,
    kinds: RefCell<HashMap<PathBuf, bool>>,
    /// What was looked at outside the text, in the order it was.
    probes: RefCell<Vec<Probe>>,
}

impl Resolver {
    pub(super) fn new(dir: &Path) -> Resolver {
        Resolver {
            dir: dir.to_path_buf(),
            resolved: Default::default(),
            canon: Default::default(),
            kinds: Default::default(),
            probes: Default::default(),
        }
    }

    /// The probes so far, taken.
    pub(super) fn take_probes(&self) -> Vec<Probe> {
        std::mem::take(&mut self.probes.borrow_mut())
    }

    /// Resolve a path from the manifest. Relative paths are taken from the manifest's
    /// directory and may not leave it, lexically (`..`) or through a symlink.
    /// Returns Ok(None) when the path does not exist.
    pub(super) fn resolve(&self, raw: &str) -> Result<Option<FileRef>, PathError> {
        if let Some(r) = self.resolved.borrow().get(raw) {
            return r.clone();
        }
        let r = self.resolve_uncached(raw);
        self.resolved
            .borrow_mut()
            .insert(raw.to_string(), r.clone());
        let dir = match &r {
            Ok(Some(f)) => self.kinds.borrow().get(&f.abs).copied(),
            _ => None,
        };
        self.probes.borrow_mut().push(Probe::Resolve {
            raw: raw.to_string(),
            found: r.clone().map_err(|e| e.to_string()),
            dir,
        });
        r
    }

    pub(super) fn resolve_uncached(&self, raw: &str) -> Result<Option<FileRef>, PathError> {
        if raw.is_empty() {
            return Err(PathError::Empty);
        }
        let p = Path::new(raw);
        if p.is_absolute() {
            let abs = p.to_path_buf();
            if !abs.exists() {
                return Ok(None);
            }
            return Ok(Some(match abs.strip_prefix(&self.dir) {
                Ok(inside) if !inside.as_os_str().is_empty() => FileRef {
                    rel: slash(inside),
                    abs,
                },
                _ => FileRef {
                    rel: raw.to_string(),
                    abs,
                },
            }));
        }
        let mut norm = PathBuf::new();
        for c in p.components() {
            match c {
                Component::Normal(s) => norm.push(s),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !norm.pop() {
                        return Err(PathError::DotDot { raw: raw.into() });
                    }
                }
                _ => return Err(PathError::Unusable { raw: raw.into() }),
            }
        }
        if norm.as_os_str().is_empty() {
            norm.push(".");
        }
        let abs = self.dir.join(&norm);
        // One lstat per path; the parent directory's real path is resolved once (kernels
        // share directories) — a full `realpath` only for a path that is a symlink itself.
        let Ok(meta) = std::fs::symlink_metadata(&abs) else {
            return Ok(None);
        };
        let (real, is_dir) = if meta.file_type().is_symlink() {
            match abs.canonicalize() {
                Ok(real) => {
                    let is_dir = real.is_dir();
                    (real, is_dir)
                }
                Err(_) => return Err(PathError::Dangling { raw: raw.into() }),
            }
        } else {
            let parent = abs.parent().unwrap_or(Path::new("/"));
            let Some(parent) = self.canonical_dir(parent) else {
                return Ok(None);
            };
            match abs.file_name() {
                Some(name) => (parent.join(name), meta.is_dir()),
                None => (parent, meta.is_dir()),
            }
        };
        if !real.starts_with(&self.dir) {
            return Err(PathError::ThroughLink {
                raw: raw.into(),
                real,
            });
        }
        self.kinds.borrow_mut().insert(abs.clone(), is_dir);
        Ok(Some(FileRef {
            rel: slash(&norm),
            abs,
        }))
    }

    /// The real path of a directory, memoized.
    fn canonical_dir(&self, dir: &Path) -> Option<PathBuf> {
        if let Some(r) = self.canon.borrow().get(dir) {
            return r.clone();
        }
        let r = dir.canonicalize().ok();
        self.canon.borrow_mut().insert(dir.to_path_buf(), r.clone());
        r
    }

    /// Whether a resolved path is a directory (known from resolving it).
    pub(super) fn is_dir(&self, f: &FileRef) -> bool {
        if let Some(d) = self.kinds.borrow().get(&f.abs) {
            return *d;
        }
        let is = f.abs.is_dir();
        self.probes.borrow_mut().push(Probe::IsDir {
            abs: f.abs.clone(),
            is,
        });
        is
    }

    pub(super) fn glob_inputs(&self, pattern: &str) -> Result<Vec<FileRef>, InputError> {
        let found = self.glob_uncached(pattern);
        self.probes.borrow_mut().push(Probe::Glob {
            pattern: pattern.to_string(),
            found: match &found {
                Ok(files) => Ok(files.clone()),
                Err(e) => Err(e.to_string()),
            },
        });
        found
    }

    /// `$VAR` and `${VAR}` from the environment (unset = empty), each variable recorded
    /// by its name and a seal of its value (`Probe::var`), never the value itself.
    pub(super) fn expand(&self, s: &str) -> String {
        expand_vars_with(s, |name| {
            let value = std::env::var(name).ok();
            self.probes
                .borrow_mut()
                .push(Probe::var(name, value.as_deref()));
            value
        })
    }

    fn glob_uncached(&self, pattern: &str) -> Result<Vec<FileRef>, InputError> {
        let pattern_owned = || pattern.to_string();
        if !pattern.contains(['*', '?', '[']) {
            return match self.resolve(pattern)? {
                Some(f) if !self.is_dir(&f) => Ok(vec![f]),
                Some(_) => Err(InputError::NotAFile {
                    pattern: pattern_owned(),
                }),
                None => Err(InputError::NotFound {
                    pattern: pattern_owned(),
                }),
            };
        }
        // Check the pattern's fixed prefix for escapes, then expand it.
        if Path::new(pattern)
            .components()
            .any(|c| c == Component::ParentDir)
        {
            return Err(InputError::DotDot {
                pattern: pattern_owned(),
            });
        }
        let full = if Path::new(pattern).is_absolute() {
            pattern.to_string()
        } else {
            format!(
                "{}/{}",
                glob::Pattern::escape(&self.dir.to_string_lossy()),
                pattern
            )
        };
        let paths = glob::glob(&full).map_err(|source| InputError::Glob {
            pattern: pattern_owned(),
            source,
        })?;
        let mut out = Vec::new();
        for p in paths.flatten() {
            if !p.is_file() {
                continue;
            }
            let raw = match p.strip_prefix(&self.dir) {
                Ok(inside) => slash(inside),
                Err(_) => p.display().to_string(),
            };
            if let Some(f) = self.resolve(&raw)? {
                out.push(f);
            }
        }
        Ok(out)
    }
}

pub(super) fn slash(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// The variables `$VAR` and `${VAR}` in `s` names, in order.
pub fn var_names(s: &str) -> Vec<String> {
    let mut names = Vec::new();
    expand_vars_with(s, |name| {
        names.push(name.to_string());
        None
    });
    names
}

/// Expand `$VAR` and `${VAR}` from the environment (unset = empty).
pub fn expand_vars(s: &str) -> String {
    expand_vars_with(s, |name| std::env::var(name).ok())
}

fn expand_vars_with(s: &str, mut var: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, consumed) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let n = after
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            (&after[..n], n)
        };
        if name.is_empty() {
            out.push('$');
            rest = after;
        } else {
            out.push_str(&var(name).unwrap_or_default());
            rest = &after[consumed..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each error reads as the manifest's messages always did, and the glob's own
    /// error stays reachable as the source.
    #[test]
    fn errors_read_as_before_and_keep_their_source() {
        let t = tempfile::tempdir().unwrap();
        let paths = Resolver::new(&t.path().canonicalize().unwrap());
        assert_eq!(
            paths.resolve("../x").unwrap_err().to_string(),
            "`../x` escapes the manifest's directory through `..`"
        );
        assert_eq!(paths.resolve("").unwrap_err(), PathError::Empty);
        let e = paths.glob_inputs("a/[*.c").unwrap_err();
        assert!(e.to_string().starts_with("bad glob `a/[*.c`: "), "{e}");
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            paths.glob_inputs("none.c").unwrap_err().to_string(),
            "input file not found: `none.c`"
        );
    }

    #[test]
    fn env_expansion() {
        std::env::set_var("SCENERUN_TEST_HOME", "/opt/x");
        assert_eq!(expand_vars("$SCENERUN_TEST_HOME/include"), "/opt/x/include");
        assert_eq!(expand_vars("${SCENERUN_TEST_HOME}/inc"), "/opt/x/inc");
        assert_eq!(expand_vars("a$"), "a$");
    }
}
