//! The content-addressed store (docs/cache.md). One directory, relocatable (no absolute
//! paths inside), versioned layout:
//!
//! ```text
//! <root>/scenerun-cache.json        {"layout": 1}
//! <root>/tmp/<stage>/               staging; <stage>.lock held by its builder
//! <root>/locks/<key>.lock           per-key build lock
//! <root>/entries/<kind>/<kk>/<key>/ meta.json (integrity record) + out (file or dir)
//! <root>/generated/<key>.yaml       kept output of a `scenes_from` generator
//! <root>/history.json               recent step durations
//! <root>/last-warm.json             hits and misses of the last warm
//! <root>/last-prune.json            limits of the last complete prune (mtime: when)
//! ```
//!
//! Invariant: an entry directory appears only by one `rename` of a complete staging
//! directory, so a reader sees a whole entry or none, whatever is killed when. A hit
//! checks the listing of `out` against the record (paths, sizes, regular files) and never
//! re-hashes; `verify` re-hashes. Nothing inside the cache is followed through a symlink
//! (see `guard` and docs/cache-trust.md).

mod at;
pub mod digest;
pub mod guard;
pub mod history;
mod lookup;
pub mod maintain;
mod meta;
mod publish;
pub mod remote;
pub mod sign;
pub mod witness;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;

use crate::base::fsutil;
use digest::Digester;
pub use guard::{Damage, Exposed};
pub use lookup::{Entry, Lookup, Snapshot, Stale};
pub use meta::{read_meta, Dep, FileRecord, Meta, ABSENT};
pub use publish::{digest_in_cache, Staging};

pub const LAYOUT: u32 = 1;
const MARKER: &str = "scenerun-cache.json";
/// Where the outputs of `scenes_from` generators are kept (`plan::scenes_from`).
pub const GENERATED: &str = "generated";

pub use crate::base::stepid::Kind;

/// The shard directory name of a key: its first two bytes (a key scenerun made is hex;
/// anything else read from outside never splits a character).
pub(crate) fn shard_of(key: &str) -> &str {
    key.get(..2).unwrap_or(key)
}

/// An entry directory found on disk: (kind, key, dir).
pub type EntryDir = (Kind, String, PathBuf);

/// A per-key build lock; released on drop (and by the kernel if the process dies).
pub struct KeyLock {
    _file: fs::File,
}

#[derive(Debug, Clone)]
pub struct Store {
    pub root: PathBuf,
    /// The cache's own directories, opened on first use (see `at`).
    dirs: Arc<at::Dirs>,
    /// Entries this process marked used (`touch` succeeded): their last use is now, so
    /// the prune after a warm need not `stat` them (`touched_now`).
    /// By `Kind as usize`.
    touched: Arc<std::sync::Mutex<[std::collections::HashSet<String>; Kind::ALL.len()]>>,
    /// The keys entries are signed and verified with (`signing:`; none by default).
    pub keys: Arc<sign::Keys>,
}

/// An unusable store is an infrastructure error (exit 3) that names the path.
fn infra(e: io::Error, what: &str, path: &Path) -> anyhow::Error {
    let full = if fsutil::is_disk_full(&e) {
        " (disk full)"
    } else {
        ""
    };
    let what = format!("cache unusable: cannot {what} {}{full}", path.display());
    crate::base::error::infra(what, e)
}

impl Store {
    /// A store handle; nothing is created until `ensure`.
    pub fn at(root: PathBuf) -> Store {
        Store {
            root,
            dirs: Arc::default(),
            touched: Arc::default(),
            keys: Arc::default(),
        }
    }

    /// This store, its entries signed and verified with `keys`.
    pub fn with_keys(mut self, keys: sign::Keys) -> Store {
        self.keys = Arc::new(keys);
        self
    }

    pub fn entry_dir(&self, kind: Kind, key: &str) -> PathBuf {
        self.root
            .join("entries")
            .join(kind.name())
            .join(shard_of(key))
            .join(key)
    }

    /// Take the per-key build lock (blocking until another builder finishes).
    pub fn lock_key(&self, kind: Kind, key: &str) -> Result<KeyLock> {
        // Relative to `locks/` when it can be opened that way (a short path, and the
        // directory checked once); the path-by-path open below repairs a planted link
        // or special file and names the path in its errors.
        if let Ok(dir) = self.dirs.locks(&self.root) {
            if let Ok(file) = at::open_lock(dir, kind.name(), key) {
                if at::fstat(&file).is_ok_and(|st| at::is_file(&st)) {
                    let path = || self.key_lock_path(kind, key);
                    file.lock().map_err(|e| infra(e, "lock", &path()))?;
                    return Ok(KeyLock { _file: file });
                }
            }
        }
        let path = self.key_lock_path(kind, key);
        let file = open_key_lock(&path).map_err(|e| infra(e, "create lock", &path))?;
        file.lock().map_err(|e| infra(e, "lock", &path))?;
        Ok(KeyLock { _file: file })
    }

    /// The per-key lock if nobody holds it now (prune and clean skip entries in use).
    /// Err when the lock file cannot be made (a read-only cache): not "in use".
    pub fn try_lock_key(&self, kind: Kind, key: &str) -> io::Result<Option<KeyLock>> {
        let file = open_key_lock(&self.key_lock_path(kind, key))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(KeyLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn key_lock_path(&self, kind: Kind, key: &str) -> PathBuf {
        self.root
            .join("locks")
            .join(format!("{}-{key}.lock", kind.name()))
    }

    /// Remove an entry directory: one rename out of `entries/` (readers see it whole or
    /// gone), then delete at leisure.
    pub fn discard(&self, dir: &Path) -> io::Result<()> {
        let trash = self.root.join("tmp").join(format!(
            "trash.{}.{}",
            std::process::id(),
            fsutil::unique()
        ));
        // A symlink at `dir` is renamed as the link itself; `remove_any` removes links,
        // never their targets, and never descends through one.
        fs::rename(dir, &trash)?;
        fsutil::remove_any(&trash)
    }

    /// Every entry that is a real directory under real shard directories: (kind, key,
    /// dir). Anything else found there is listed by `strays`.
    pub fn entries(&self) -> Vec<EntryDir> {
        self.scan().0
    }

    /// Symlinks, files and special files where a shard or an entry directory belongs:
    /// corruption, never followed.
    pub fn strays(&self) -> Vec<(Kind, PathBuf)> {
        self.scan().1
    }

    fn scan(&self) -> (Vec<EntryDir>, Vec<(Kind, PathBuf)>) {
        let (mut out, mut strays) = (Vec::new(), Vec::new());
        for kind in Kind::ALL {
            let kind_dir = self.root.join("entries").join(kind.name());
            if fsutil::node(&kind_dir).ok() != Some(fsutil::Node::Dir) {
                continue;
            }
            let Ok(shards) = fs::read_dir(&kind_dir) else {
                continue;
            };
            for shard in shards.flatten() {
                if !shard.file_type().is_ok_and(|t| t.is_dir()) {
                    strays.push((kind, shard.path()));
                    continue;
                }
                let Ok(keys) = fs::read_dir(shard.path()) else {
                    continue;
                };
                for k in keys.flatten() {
                    if k.file_type().is_ok_and(|t| t.is_dir()) {
                        out.push((kind, k.file_name().to_string_lossy().to_string(), k.path()));
                    } else {
                        strays.push((kind, k.path()));
                    }
                }
            }
        }
        out.sort();
        strays.sort();
        (out, strays)
    }
}

/// Open a per-key lock file; a link or special file planted in its place is removed (the
/// link itself) and a real lock file made.
fn open_key_lock(path: &Path) -> io::Result<fs::File> {
    match fsutil::open_lock_file(path) {
        Ok(f) if f.metadata()?.is_file() => Ok(f),
        Ok(_) => {
            fsutil::remove_any(path)?;
            fsutil::open_lock_file(path)
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENXIO)) => {
            fs::remove_file(path)?;
            fsutil::open_lock_file(path)
        }
        Err(e) => Err(e),
    }
}
