//! Where the manifest is: the search upwards for it (`discover`), which never trusts a
//! directory or file another user could have planted, and the directory its relative
//! paths start from (`dir_of`).

use std::path::{Path, PathBuf};

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

/// The directory a manifest's relative paths start from: its own, with links resolved.
/// Known before the manifest is read, so files kept beside it can be read meanwhile.
pub fn dir_of(path: &Path) -> Result<PathBuf, Unresolved> {
    let abs = std::path::absolute(path).map_err(Unresolved::Path)?;
    abs.parent()
        .unwrap_or(Path::new("/"))
        .canonicalize()
        .map_err(Unresolved::Dir)
}

/// A manifest path that cannot be resolved: the path itself, or its directory. The
/// message holds the system's words too: it is shown as one line (a manifest error).
#[derive(Debug, thiserror::Error)]
pub enum Unresolved {
    #[error("cannot resolve it: {0}")]
    Path(#[source] std::io::Error),
    #[error("cannot resolve its directory: {0}")]
    Dir(#[source] std::io::Error),
}
