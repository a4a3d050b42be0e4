//! The cache's trust boundary (docs/cache-trust.md): what a directory must look like
//! before scenerun reads, writes or deletes in it, and what an entry must look like
//! before it is served.
//!
//! Invariants kept here: a non-empty directory without the marker is never adopted; the
//! cache's own top-level directories are real directories (a symlink there is exit 3,
//! never followed); an entry is served only when its `out` listing equals its integrity
//! record exactly, with regular files only and no path leaving `out`. A hit costs one
//! `lstat` per file; a file is re-hashed only when its stamp does not hold (`stamps_hold`).

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Result;

use super::meta::CopyId;
use super::{FileRecord, Kind, Store, GENERATED, LAYOUT, MARKER};
use crate::base::error::Error;
use crate::base::fsutil::Stamp;
use crate::base::fsutil::{self, Node};

/// The directories of the layout that must be real directories: every directory the
/// cache keeps at its top, and each kind's under `entries/`.
pub(super) fn top_dirs(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![
        root.join("tmp"),
        root.join("locks"),
        root.join("entries"),
        root.join(GENERATED),
    ];
    for kind in Kind::ALL {
        dirs.push(root.join("entries").join(kind.name()));
    }
    dirs
}

pub use crate::base::notice::Exposed;

/// Roots already warned about in this process (one warning per cache per run).
static WARNED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// The marker and its write-atomic temp files, seen while another process creates the
/// cache (it writes the marker before anything else): they do not make the directory
/// "not a cache".
fn is_marker_or_temp(name: &str) -> bool {
    name == MARKER || name.starts_with(&format!(".{MARKER}.tmp."))
}

impl Store {
    /// Check, without writing anything, that the directory is a scenerun cache (or empty,
    /// or absent) whose own directories are real ones (`exposed` says whether other
    /// users can write to it).
    pub fn check(&self) -> Result<()> {
        let root_meta = match fs::metadata(&self.root) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(super::infra(e, "read", &self.root)),
        };
        if !root_meta.is_dir() {
            return Err(crate::base::error::err!(
                Infra,
                "cache dir {} is not a directory",
                self.root.display()
            ));
        }
        let marker = self.root.join(MARKER);
        match fsutil::read_capped(&marker, fsutil::Cap::SMALL) {
            Ok(text) => {
                let layout = serde_json::from_slice::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("layout").and_then(|l| l.as_u64()));
                if layout != Some(LAYOUT as u64) {
                    return Err(crate::base::error::err!(Infra,
                        "cache {} has layout {:?}; this scenerun uses layout {LAYOUT} (use another --cache-dir or `scenerun cache clean`)",
                        self.root.display(),
                        layout
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let rd =
                    fs::read_dir(&self.root).map_err(|e| super::infra(e, "read", &self.root))?;
                let foreign = rd
                    .flatten()
                    .any(|e| !is_marker_or_temp(&e.file_name().to_string_lossy()));
                if foreign {
                    return Err(anyhow::Error::new(Error::ForeignCache {
                        dir: self.root.clone(),
                        marker: MARKER,
                    }));
                }
            }
            Err(e) => {
                let what = format!(
                    "cache unusable: its marker {} cannot be read",
                    marker.display()
                );
                return Err(crate::base::error::infra(what, e));
            }
        }
        for dir in top_dirs(&self.root) {
            let found = fsutil::node(&dir).map_err(|e| super::infra(e, "read", &dir))?;
            if !matches!(found, Node::Dir | Node::Missing) {
                return Err(anyhow::Error::new(Error::NotADirInCache {
                    path: dir,
                    found: found.describe(),
                }));
            }
        }
        Ok(())
    }

    /// The cache, when it passes `check` and other users can write to it: said once per
    /// cache per process (the caller hands it to the reporter; nothing here prints).
    pub fn exposed(&self) -> Option<Exposed> {
        self.check().ok()?;
        let mode = fs::metadata(&self.root).ok()?.permissions().mode();
        let first = mode & 0o022 != 0
            && WARNED
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(self.root.clone());
        first.then(|| Exposed {
            dir: self.root.clone(),
            mode: mode & 0o7777,
        })
    }

    /// Create the layout if needed and check that it can be written.
    pub fn ensure(&self) -> Result<()> {
        self.check()?;
        fs::create_dir_all(&self.root).map_err(|e| super::infra(e, "create", &self.root))?;
        // The marker first: a second process creating the same cache must not find the
        // directory non-empty without it.
        let marker = self.root.join(MARKER);
        if fsutil::node(&marker).map_err(|e| super::infra(e, "read", &marker))? == Node::Missing {
            fsutil::write_atomic(&marker, format!("{{\"layout\": {LAYOUT}}}\n").as_bytes())
                .map_err(|e| super::infra(e, "write", &marker))?;
        }
        for d in top_dirs(&self.root) {
            fsutil::ensure_real_dir(&d).map_err(|e| super::infra(e, "create", &d))?;
        }
        // Probe that the tmp dir is writable now, not halfway through a build.
        let probe = self
            .root
            .join("tmp")
            .join(format!(".probe.{}", std::process::id()));
        fs::File::options()
            .write(true)
            .create_new(true)
            .open(&probe)
            .or_else(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => fs::remove_file(&probe).and_then(|_| {
                    fs::File::options()
                        .write(true)
                        .create_new(true)
                        .open(&probe)
                }),
                _ => Err(e),
            })
            .map_err(|e| super::infra(e, "write to", &self.root.join("tmp")))?;
        let _ = fs::remove_file(&probe);
        Ok(())
    }

    /// The entry directory of a key, checked component by component with `lstat`:
    /// Ok(None) when absent; Err (corruption) when a symlink or a file stands where a
    /// directory belongs.
    pub(super) fn entry_checked(&self, kind: Kind, key: &str) -> Result<Option<PathBuf>, Damage> {
        let kind_dir = self.root.join("entries").join(kind.name());
        let shard = kind_dir.join(super::shard_of(key));
        let entry = shard.join(key);
        for (i, p) in [&kind_dir, &shard, &entry].into_iter().enumerate() {
            match fsutil::node(p) {
                Ok(Node::Dir) => {}
                Ok(Node::Missing) => return Ok(None),
                Ok(found) => {
                    return Err(Damage::NotADir {
                        what: ["entries/<kind>", "shard", "entry"][i],
                        path: p.clone(),
                        found: found.describe(),
                    });
                }
                Err(e) => {
                    return Err(Damage::Unreadable {
                        path: p.clone(),
                        error: e.to_string(),
                    })
                }
            }
        }
        Ok(Some(entry))
    }
}

/// What is wrong with an entry that is there: why a lookup does not serve it (a damaged
/// stale entry), why `cache verify` calls it corrupt, why a staged entry is not
/// published. The one description of an entry's damage, rendered here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// A directory on the way to it is something else (`what`: `entries/<kind>`,
    /// `shard` or `entry`).
    NotADir {
        what: &'static str,
        path: PathBuf,
        found: &'static str,
    },
    /// A directory on the way to it cannot be read.
    Unreadable {
        path: PathBuf,
        error: String,
    },
    RecordMissing,
    RecordUnreadable(String),
    /// The record is of another key, kind or layout (found by a lookup).
    RecordMismatch,
    /// The record names another key or kind (found by `cache verify`).
    OtherKey,
    NoFiles,
    /// A recorded path leaves the entry.
    Outside(String),
    OutMissing,
    /// `out` holds what the cache cannot serve (a link, a FIFO, ...).
    Unservable(String),
    NotRecorded(String),
    Size {
        path: String,
        got: u64,
        recorded: u64,
    },
    FileMissing(String),
    /// `cache verify`: a file cannot be read, or its content is not what was recorded.
    CannotRead {
        path: String,
        error: String,
    },
    Content(String),
    /// A file changed after the entry was published (its stamp and its content differ
    /// from the record): a step wrote into the cache.
    Changed(String),
    /// `signing.verify_key` is set for local entries and the record carries no signature.
    Unsigned,
    /// `signing.verify_key` is set for local entries and the record's signature does not
    /// verify.
    BadSignature,
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::NotADir { what, path, found } => {
                write!(f, "its {what} {} is {found}", path.display())
            }
            Damage::Unreadable { path, error } => {
                write!(f, "cannot read {}: {error}", path.display())
            }
            Damage::RecordMissing => f.write_str("integrity record missing"),
            Damage::RecordUnreadable(e) => write!(f, "integrity record unreadable: {e}"),
            Damage::RecordMismatch => f.write_str("integrity record does not match its key"),
            Damage::OtherKey => f.write_str("integrity record names another key"),
            Damage::NoFiles => f.write_str("entry records no files"),
            Damage::Outside(p) => {
                write!(f, "integrity record names `{p}`, a path outside the entry")
            }
            Damage::OutMissing => f.write_str("out is missing"),
            Damage::Unservable(e) => write!(f, "out holds what the cache cannot serve: {e}"),
            Damage::NotRecorded(p) => write!(f, "{} is not in the integrity record", or_out(p)),
            Damage::Size {
                path,
                got,
                recorded,
            } => write!(f, "{} has {got} bytes, recorded {recorded}", or_out(path)),
            Damage::FileMissing(p) => write!(f, "{} is missing", or_out(p)),
            Damage::CannotRead { path, error } => write!(f, "cannot read {path}: {error}"),
            Damage::Content(p) => write!(f, "{} content does not match its BLAKE3", or_out(p)),
            Damage::Unsigned => f.write_str(
                "integrity record is not signed, and signing.verify_key requires a signature",
            ),
            Damage::BadSignature => f.write_str(
                "integrity record's signature does not verify with signing.verify_key",
            ),
            Damage::Changed(p) => write!(
                f,
                "{} changed after the entry was published (something wrote into the cache, e.g. a device step into {{fixture}})",
                or_out(p)
            ),
        }
    }
}

/// Whether a recorded path stays inside `out`: relative, no `..`, `.` or empty parts.
pub fn record_path_ok(path: &str) -> bool {
    !path.starts_with('/')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// The hit check: the listing of `out` (by `lstat`, nothing followed) must equal the
/// record — the same paths, the same sizes, regular files only. O(files), no hashing.
/// Returns each recorded file's stamp now, in record order (see `stamps_hold`).
pub fn check_listing(out: &Path, files: &[FileRecord]) -> Result<Vec<Stamp>, Damage> {
    if files.is_empty() {
        return Err(Damage::NoFiles);
    }
    let single = files.len() == 1 && files[0].path.is_empty();
    if let Some(bad) = files.iter().find(|f| !single && !record_path_ok(&f.path)) {
        return Err(Damage::Outside(bad.path.clone()));
    }
    let actual = fsutil::walk_stamped(out).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Damage::OutMissing,
        _ => Damage::Unservable(e.to_string()),
    })?;
    let mut recorded: Vec<(&str, u64, usize)> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.path.as_str(), f.size, i))
        .collect();
    recorded.sort();
    let mut now = vec![None; files.len()];
    let mut a = actual
        .iter()
        .map(|(p, s)| (p.as_str(), s.size, *s))
        .peekable();
    let mut r = recorded.iter().copied().peekable();
    loop {
        match (a.peek().copied(), r.peek().copied()) {
            (None, None) => {
                return Ok(now
                    .into_iter()
                    .map(|s| s.expect("every record matched"))
                    .collect())
            }
            (Some((ap, ..)), Some((rp, ..))) if ap < rp => {
                return Err(Damage::NotRecorded(ap.to_string()))
            }
            (Some((ap, ..)), None) => return Err(Damage::NotRecorded(ap.to_string())),
            (Some((ap, asz, stamp)), Some((rp, rsz, i))) if ap == rp => {
                if asz != rsz {
                    return Err(Damage::Size {
                        path: ap.to_string(),
                        got: asz,
                        recorded: rsz,
                    });
                }
                now[i] = Some(stamp);
                a.next();
                r.next();
            }
            (_, Some((rp, ..))) => return Err(Damage::FileMissing(rp.to_string())),
        }
    }
}

/// Whether the files of an entry are as they were published (or last confirmed), from
/// their stamps `now` (in record order): Ok(None) when they are; Ok(Some(stamps)) when
/// the record's stamps must be taken again — they are not `trusted` (the entry is
/// another copy than the one they were taken in: a restored or copied cache; or the
/// record has no `copy`, or no seal of this user over its stamps: stamps written by
/// someone else), or a file's stamp changed — and Err when a file's content is not the
/// recorded one. `copy`: the entry's directory now. Any stamp that does not hold is re-hashed before
/// it is taken again (in another copy: every file), so a file swapped for other bytes
/// of the same size is never re-stamped: what this lets serve is what `cache verify`
/// would call intact (and, with a verify key, what the signature covers: the record's
/// hashes).
pub fn stamps_hold(
    out: &Path,
    files: &[FileRecord],
    trusted: bool,
    copy: CopyId,
    now: Vec<Stamp>,
) -> Result<Option<(Vec<Stamp>, CopyId)>, Damage> {
    let other_copy = !trusted;
    let mut changed = other_copy;
    for (f, stamp) in files.iter().zip(&now) {
        if !other_copy && f.stamp == Some(*stamp) {
            continue;
        }
        changed = true;
        let path = if f.path.is_empty() {
            out.to_path_buf()
        } else {
            out.join(&f.path)
        };
        let same = super::digest_in_cache(&path, super::Digester::new())
            .is_ok_and(|d| d.size == f.size && d.blake3 == f.blake3);
        match (same, other_copy) {
            (true, _) => {}
            (false, true) => return Err(Damage::Content(f.path.clone())),
            (false, false) => return Err(Damage::Changed(f.path.clone())),
        }
    }
    Ok(changed.then_some((now, copy)))
}

fn or_out(p: &str) -> &str {
    if p.is_empty() {
        "out"
    } else {
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(path: &str, size: u64) -> FileRecord {
        FileRecord::new(path.into(), size, String::new())
    }

    #[test]
    fn record_paths_stay_inside() {
        for ok in ["a", "a/b.bin", "x..y"] {
            assert!(record_path_ok(ok), "{ok}");
        }
        for bad in ["/etc/passwd", "../x", "a/../../b", "a//b", "./a", "", "a/"] {
            assert!(!record_path_ok(bad), "{bad}");
        }
    }

    #[test]
    fn listing_must_equal_the_record() {
        let t = tempfile::tempdir().unwrap();
        let out = t.path().join("out");
        fs::create_dir_all(out.join("d")).unwrap();
        fs::write(out.join("a"), b"12").unwrap();
        fs::write(out.join("d/b"), b"123").unwrap();
        let good = [rec("a", 2), rec("d/b", 3)];
        assert!(check_listing(&out, &good).is_ok());
        assert!(check_listing(&out, &[rec("a", 2)])
            .unwrap_err()
            .to_string()
            .contains("d/b is not in"));
        assert!(
            check_listing(&out, &[rec("a", 2), rec("d/b", 3), rec("z", 1)])
                .unwrap_err()
                .to_string()
                .contains("z is missing")
        );
        assert!(check_listing(&out, &[rec("a", 3), rec("d/b", 3)])
            .unwrap_err()
            .to_string()
            .contains("recorded 3"));
        assert!(
            check_listing(&out, &[rec("a", 2), rec("../../etc/passwd", 3)])
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        std::os::unix::fs::symlink("/etc/passwd", out.join("l")).unwrap();
        assert!(check_listing(&out, &good)
            .unwrap_err()
            .to_string()
            .contains("cannot serve"));
    }
}
