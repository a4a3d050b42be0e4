//! Errors that decide how scenerun exits: one enum, each variant one row of the
//! exit-code table (`Error::code`), with a hint where one helps, and a manifest's
//! diagnostics (exit 4), each with its place in the file. No exit code is decided by
//! an error's text. `render` writes an error chain for the terminal.

use std::fmt;
use std::path::PathBuf;

use crate::base::exit::Exit;

/// An error whose kind decides the exit code.
#[derive(Debug)]
pub enum Error {
    /// A bad value on the command line or in the manifest found after parsing, a
    /// `scenes_from` generator that failed, `--changed-since` without git (exit 4).
    Usage(String),
    /// Every problem of a manifest (exit 4).
    Manifest(ManifestErrors),
    /// No manifest to load (exit 4).
    NoManifest(NoManifest),
    /// The selection is empty (exit 5).
    NoneSelected(String),
    /// Artifacts are missing: the lock was not taken (exit 6).
    NotWarm(String),
    /// The cache, the lock command, an identity command, a file scenerun keeps (exit 3).
    Infra(String),
    /// Another `scenerun device` is writing its report into the same directory (exit 3).
    ReportDirBusy {
        /// Its pid, when known.
        holder: Option<i32>,
        dir: PathBuf,
    },
    /// The cache directory holds other files and no scenerun marker (exit 3).
    ForeignCache {
        dir: PathBuf,
        /// The marker file's name.
        marker: &'static str,
    },
    /// Something other than a directory where the cache keeps one of its own (exit 3).
    NotADirInCache {
        path: PathBuf,
        /// What is there instead ("a symlink", ...).
        found: &'static str,
    },
    /// SIGINT or SIGTERM (exit 2).
    Interrupted(String),
}

impl Error {
    /// The exit code this error calls for.
    pub fn code(&self) -> Exit {
        match self {
            Error::Usage(_) | Error::Manifest(_) | Error::NoManifest(_) => Exit::Usage,
            Error::NoneSelected(_) => Exit::NoneSelected,
            Error::NotWarm(_) => Exit::NotWarm,
            Error::Infra(_)
            | Error::ReportDirBusy { .. }
            | Error::ForeignCache { .. }
            | Error::NotADirInCache { .. } => Exit::Infra,
            Error::Interrupted(_) => Exit::Interrupted,
        }
    }

    /// What to do about it, where that is clear.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            Error::NotWarm(_) => Some("run `scenerun warm` first, with the same cache dir"),
            Error::NoManifest(_) => Some(
                "pass --manifest FILE (or set SCENERUN_MANIFEST); a directory that holds a scenes.yaml will do",
            ),
            Error::ReportDirBusy { .. } => {
                Some("wait for it, or give each run its own --report-dir")
            }
            Error::ForeignCache { .. } => Some(
                "point --cache-dir (or cache.dir, SCENERUN_CACHE_DIR) at an empty or new directory; scenerun never adopts one that holds other files",
            ),
            Error::NotADirInCache { .. } => Some(
                "scenerun never follows links inside a cache; remove it, or run `scenerun cache clean` on a fresh --cache-dir",
            ),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m)
            | Error::NoneSelected(m)
            | Error::NotWarm(m)
            | Error::Infra(m)
            | Error::Interrupted(m) => f.write_str(m),
            Error::Manifest(e) => write!(f, "{e}"),
            Error::NoManifest(e) => write!(f, "{e}"),
            Error::ReportDirBusy { holder, dir } => write!(
                f,
                "another `scenerun device`{} is writing its report to {}; this run is refused so that the two reports never mix",
                holder.map(|p| format!(" (pid {p})")).unwrap_or_default(),
                dir.display()
            ),
            Error::ForeignCache { dir, marker } => write!(
                f,
                "{} is not a scenerun cache: it is not empty and has no {marker}",
                dir.display()
            ),
            Error::NotADirInCache { path, found } => write!(
                f,
                "cache unusable: {} is {found}, where the cache keeps its own directory",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {}

impl From<ManifestErrors> for Error {
    fn from(e: ManifestErrors) -> Error {
        Error::Manifest(e)
    }
}

/// Why there is no manifest to load.
#[derive(Debug)]
pub enum NoManifest {
    /// Without `--manifest`, the search for `name` upwards from `from` ended without one,
    /// `stopped` saying where and why (docs/cli.md).
    NotFound {
        name: PathBuf,
        from: PathBuf,
        stopped: String,
    },
    /// `--manifest` (or `$SCENERUN_MANIFEST`) names nothing.
    Missing(PathBuf),
    /// `--manifest` names a directory that holds no `scenes.yaml`.
    Directory(PathBuf),
}

impl fmt::Display for NoManifest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoManifest::NotFound {
                name,
                from,
                stopped,
            } => write!(
                f,
                "no manifest: no {} in {} or the directories above it (searched upwards; the search stopped: {stopped})",
                name.display(),
                from.display()
            ),
            NoManifest::Missing(p) => {
                write!(f, "no manifest: {} does not exist", p.display())
            }
            NoManifest::Directory(p) => write!(
                f,
                "no manifest: {} is a directory, and it holds no scenes.yaml",
                p.display()
            ),
        }
    }
}

/// An [`Error`] of a message variant as an `anyhow::Error`, the message formatted:
/// `err!(Usage, "bad -k glob `{p}`: {e}")`.
macro_rules! err {
    ($variant:ident, $($arg:tt)*) => {
        anyhow::Error::new($crate::base::error::Error::$variant(format!($($arg)*)))
    };
}
pub(crate) use err;

/// An infrastructure error (exit 3): `what` could not be done, and `cause` why, kept as
/// the error's source (`render` prints it as a `caused by:` line), not folded into the
/// text.
pub fn infra(what: String, cause: impl Into<anyhow::Error>) -> anyhow::Error {
    cause.into().context(Error::Infra(what))
}

/// The first [`Error`] in an error chain.
fn typed(err: &anyhow::Error) -> Option<&Error> {
    // One attached with `.context()` is found by anyhow's own downcast only.
    err.downcast_ref::<Error>()
        .or_else(|| err.chain().find_map(|c| c.downcast_ref::<Error>()))
}

/// The exit code of an error chain: its first [`Error`]'s; anything else (I/O, a command
/// that could not start) is an infrastructure error.
pub fn exit_of(err: &anyhow::Error) -> Exit {
    typed(err).map_or(Exit::Infra, Error::code)
}

/// `error: <what>`, indented `caused by:` lines, then a hint if one helps.
pub fn render(err: &anyhow::Error) -> String {
    let mut out = format!("error: {err}\n");
    for cause in err.chain().skip(1) {
        out.push_str(&format!("  caused by: {cause}\n"));
    }
    if let Some(hint) = typed(err).and_then(Error::hint) {
        out.push_str(&format!("hint: {hint}\n"));
    }
    out
}

/// One problem in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Diag {
    pub line: Option<usize>,
    pub col: Option<usize>,
    /// The key path, e.g. `scenes[1].kernels[0].source`.
    pub path: String,
    pub message: String,
}

/// Every problem found in one manifest.
#[derive(Debug)]
pub struct ManifestErrors {
    pub file: String,
    pub diags: Vec<Diag>,
}

/// Errors shown of one manifest; the rest are counted.
pub const MAX_SHOWN: usize = 50;
/// Characters of a source line shown under an error; a longer line is cut around the
/// column.
const EXCERPT: usize = 200;
/// Characters of an error's key path and message shown (both can quote the text).
pub const MAX_MESSAGE: usize = 300;

impl fmt::Display for ManifestErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.diags.len();
        write!(
            f,
            "manifest {} has {n} error{}:",
            self.file,
            if n == 1 { "" } else { "s" }
        )?;
        // The offending line goes under each message, as rustc and just show it. The
        // file is read again here: errors are rare, and a file that cannot be read (or
        // text that was not a file) just gets no excerpt.
        let text = crate::base::fsutil::read_capped_following(
            std::path::Path::new(&self.file),
            crate::base::fsutil::Cap::MANIFEST,
        )
        .ok()
        .and_then(|t| String::from_utf8(t).ok())
        .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for d in self.diags.iter().take(MAX_SHOWN) {
            write!(f, "\n  {}", self.file)?;
            if let Some(line) = d.line {
                write!(f, ":{line}")?;
                if let Some(col) = d.col {
                    write!(f, ":{col}")?;
                }
            }
            let said = if d.path.is_empty() {
                clip(&d.message, MAX_MESSAGE)
            } else {
                clip(&format!("{}: {}", d.path, d.message), MAX_MESSAGE)
                    .into_owned()
                    .into()
            };
            write!(f, ": {said}")?;
            if let Some(src) = d.line.and_then(|l| lines.get(l.wrapping_sub(1))) {
                let n = d.line.unwrap_or(0);
                let w = n.to_string().len();
                let (shown, col) = excerpt(src, d.col.unwrap_or(1), EXCERPT);
                write!(f, "\n  {n:>w$} | {shown}")?;
                if d.col.is_some() {
                    let pad: String = shown
                        .chars()
                        .take(col.saturating_sub(1))
                        .map(|c| if c == '\t' { '\t' } else { ' ' })
                        .collect();
                    write!(f, "\n  {:>w$} | {pad}^", "")?;
                }
            }
        }
        if n > MAX_SHOWN {
            write!(f, "\n  … and {} more errors", n - MAX_SHOWN)?;
        }
        Ok(())
    }
}

/// At most `max` characters of `s`, cut with `…`.
pub fn clip(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(max) {
        None => s.into(),
        Some((end, _)) => format!("{}…", &s[..end]).into(),
    }
}

/// At most `width` characters of `line` around column `col` (1-based, in characters),
/// with `…` where it was cut, and the column within what is shown.
fn excerpt(line: &str, col: usize, width: usize) -> (String, usize) {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= width {
        return (line.to_string(), col);
    }
    let at = col.saturating_sub(1).min(chars.len());
    let from = at.saturating_sub(width / 2).min(chars.len() - width);
    let to = from + width;
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    out.extend(&chars[from..to]);
    if to < chars.len() {
        out.push('…');
    }
    (out, at - from + 1 + usize::from(from > 0))
}

impl std::error::Error for ManifestErrors {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_infra_error_keeps_its_cause_as_its_source() {
        let cause = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let e = infra("cannot write the warm record in /j".into(), cause);
        assert_eq!(exit_of(&e), Exit::Infra);
        assert_eq!(e.to_string(), "cannot write the warm record in /j");
        let source = e.chain().nth(1).expect("a source");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
        assert_eq!(
            render(&e),
            format!("error: cannot write the warm record in /j\n  caused by: {source}\n")
        );
    }

    #[test]
    fn a_long_line_is_cut_around_the_column() {
        let line: String = ('a'..='z').cycle().take(1000).collect();
        let (shown, col) = excerpt(&line, 500, 200);
        assert_eq!(shown.chars().count(), 202, "200 and two `…`");
        assert!(shown.starts_with('…') && shown.ends_with('…'));
        assert_eq!(shown.chars().nth(col - 1), line.chars().nth(499));
        let (shown, col) = excerpt(&line, 3, 200);
        assert_eq!((shown.chars().count(), col), (201, 3));
        let (shown, col) = excerpt(&line, 1000, 200);
        assert_eq!(shown.chars().nth(col - 1), Some('l'));
        assert_eq!(excerpt("short", 2, 200), ("short".to_string(), 2));
    }
}
