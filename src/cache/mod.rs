//! The content-addressed store (DESIGN.md §5). One directory, relocatable (no absolute
//! paths inside), versioned layout:
//!
//! ```text
//! <root>/scenerun-cache.json        {"layout": 1}
//! <root>/tmp/<stage>/               staging; <stage>.lock held by its builder
//! <root>/locks/<key>.lock           per-key build lock
//! <root>/entries/<kind>/<kk>/<key>/ meta.json (integrity record) + out (file or dir)
//! <root>/history.json               recent step durations
//! <root>/last-warm.json             hits and misses of the last warm
//! ```
//!
//! Invariant: an entry directory appears only by one `rename` of a complete staging
//! directory, so a reader sees a whole entry or none, whatever is killed when. A hit
//! checks presence and sizes only; `verify` re-hashes.

pub mod history;
pub mod maintain;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::exit::Exit;
use crate::fsutil;
use crate::key::{self, Files};

pub const LAYOUT: u32 = 1;
const MARKER: &str = "scenerun-cache.json";

/// What a step produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Kernel,
    Fixture,
    Golden,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Kernel, Kind::Fixture, Kind::Golden];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Kernel => "kernel",
            Kind::Fixture => "fixture",
            Kind::Golden => "golden",
        }
    }
}

/// One file of an entry, as recorded at publish time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileRecord {
    /// Relative to the entry's `out` ("" when `out` is itself the file).
    pub path: String,
    pub size: u64,
    pub blake3: String,
}

/// A file the compiler reported reading (from its depfile), re-checked on every hit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Dep {
    /// Relative to the manifest's directory when inside it, else absolute.
    pub path: String,
    pub blake3: String,
}

/// The integrity record, `meta.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub layout: u32,
    pub kind: Kind,
    pub key: String,
    /// Which step built it first (informational).
    pub built_by: String,
    pub duration_secs: f64,
    pub files: Vec<FileRecord>,
    #[serde(default)]
    pub deps: Vec<Dep>,
}

impl Meta {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// A published entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub dir: PathBuf,
    pub meta: Meta,
}

impl Entry {
    /// The artifact: a file for kernels, a directory for fixtures and goldens.
    pub fn out(&self) -> PathBuf {
        self.dir.join("out")
    }
}

/// The result of looking a key up.
#[derive(Debug, Clone)]
pub enum Lookup {
    Hit(Entry),
    Miss,
    /// Present but not servable: a recorded dependency changed, or a file is missing or
    /// has the wrong size.
    Stale(String),
    /// Present and whole, but a file its depfile recorded changed or is gone: rebuilt
    /// under the same key, it may come out different.
    DepChanged(String),
}

/// A staging directory in the store's own tmp dir. Dropped unpublished, it is removed.
pub struct Staging {
    pub dir: PathBuf,
    lock: Option<fs::File>,
    lock_path: PathBuf,
}

impl Staging {
    /// Where the step writes: `{out}`.
    pub fn out(&self) -> PathBuf {
        self.dir.join("out")
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = fsutil::remove_any(&self.dir);
        self.lock.take();
        let _ = fs::remove_file(&self.lock_path);
    }
}

/// A per-key build lock; released on drop (and by the kernel if the process dies).
pub struct KeyLock {
    _file: fs::File,
}

#[derive(Debug, Clone)]
pub struct Store {
    pub root: PathBuf,
}

/// An unusable store is an infrastructure error (exit 3) that names the path.
fn infra(e: io::Error, what: &str, path: &Path) -> anyhow::Error {
    let full = if fsutil::is_disk_full(&e) {
        " (disk full)"
    } else {
        ""
    };
    anyhow::Error::new(e).context(crate::exit::Coded::new(
        Exit::Infra,
        format!("cache unusable: cannot {what} {}{full}", path.display()),
    ))
}

impl Store {
    /// A store handle; nothing is created until `ensure`.
    pub fn at(root: PathBuf) -> Store {
        Store { root }
    }

    /// Create the layout if needed and check that it can be written.
    pub fn ensure(&self) -> Result<()> {
        for d in ["tmp", "locks", "entries"] {
            let p = self.root.join(d);
            fs::create_dir_all(&p).map_err(|e| infra(e, "create", &p))?;
        }
        let marker = self.root.join(MARKER);
        match fs::read_to_string(&marker) {
            Ok(text) => {
                let layout = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("layout").and_then(|l| l.as_u64()));
                if layout != Some(LAYOUT as u64) {
                    return Err(crate::coded!(
                        Exit::Infra,
                        "cache {} has layout {:?}; this scenerun uses layout {LAYOUT} (use another --cache-dir or `scenerun cache clean`)",
                        self.root.display(),
                        layout
                    ));
                }
            }
            Err(_) => {
                fsutil::write_atomic(&marker, format!("{{\"layout\": {LAYOUT}}}\n").as_bytes())
                    .map_err(|e| infra(e, "write", &marker))?
            }
        }
        // Probe that the tmp dir is writable now, not halfway through a build.
        let probe = self
            .root
            .join("tmp")
            .join(format!(".probe.{}", std::process::id()));
        fs::write(&probe, b"").map_err(|e| infra(e, "write to", &self.root.join("tmp")))?;
        let _ = fs::remove_file(&probe);
        Ok(())
    }

    pub fn entry_dir(&self, kind: Kind, key: &str) -> PathBuf {
        self.root
            .join("entries")
            .join(kind.name())
            .join(&key[..2.min(key.len())])
            .join(key)
    }

    /// The one lookup function: `plan`, `warm` and `device` all decide hit or miss here.
    /// `base` resolves relative dependency paths; `files` hashes them (stat memo).
    pub fn lookup(&self, kind: Kind, key: &str, base: &Path, files: &Files) -> Lookup {
        let dir = self.entry_dir(kind, key);
        let meta = match read_meta(&dir) {
            Ok(Some(m)) => m,
            Ok(None) => return Lookup::Miss,
            Err(why) => return Lookup::Stale(why),
        };
        if meta.key != key || meta.kind != kind || meta.layout != LAYOUT {
            return Lookup::Stale("integrity record does not match its key".into());
        }
        if let Err(why) = check_sizes(&dir.join("out"), &meta.files) {
            return Lookup::Stale(why);
        }
        for dep in &meta.deps {
            let path = key::key_path(base, &dep.path);
            match files.hash(&path) {
                Ok(h) if h == dep.blake3 => {}
                Ok(_) => {
                    return Lookup::DepChanged(format!("{} changed since it was built", dep.path))
                }
                Err(_) => {
                    return Lookup::DepChanged(format!("{} is gone since it was built", dep.path))
                }
            }
        }
        Lookup::Hit(Entry { dir, meta })
    }

    /// Cheap presence check for the device phase: the record and every file with its size.
    pub fn present(&self, kind: Kind, key: &str) -> Option<Entry> {
        let dir = self.entry_dir(kind, key);
        let meta = read_meta(&dir).ok().flatten()?;
        check_sizes(&dir.join("out"), &meta.files).ok()?;
        Some(Entry { dir, meta })
    }

    /// Mark an entry used now (for pruning by last use).
    pub fn touch(&self, entry: &Entry) {
        let _ = fs::File::options()
            .write(true)
            .open(entry.dir.join("meta.json"))
            .and_then(|f| f.set_modified(SystemTime::now()));
    }

    /// Take the per-key build lock (blocking until another builder finishes).
    pub fn lock_key(&self, kind: Kind, key: &str) -> Result<KeyLock> {
        let path = self.key_lock_path(kind, key);
        let file = fsutil::open_lock_file(&path).map_err(|e| infra(e, "create lock", &path))?;
        file.lock().map_err(|e| infra(e, "lock", &path))?;
        Ok(KeyLock { _file: file })
    }

    /// The per-key lock if nobody holds it now (prune skips entries being built).
    pub fn try_lock_key(&self, kind: Kind, key: &str) -> Option<KeyLock> {
        let file = fsutil::open_lock_file(&self.key_lock_path(kind, key)).ok()?;
        file.try_lock().ok()?;
        Some(KeyLock { _file: file })
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
        fs::rename(dir, &trash)?;
        let _ = fsutil::remove_any(&trash);
        Ok(())
    }

    /// A fresh staging directory. For kernels `out` does not exist yet; for fixtures and
    /// goldens it is an empty directory.
    pub fn stage(&self, kind: Kind) -> Result<Staging> {
        use std::os::unix::fs::MetadataExt;
        let tmp = self.root.join("tmp");
        let (dir, lock_path, lock) = loop {
            let name = format!(
                "{}.{}.{}",
                kind.name(),
                std::process::id(),
                fsutil::unique()
            );
            let lock_path = tmp.join(format!("{name}.lock"));
            let lock = fs::File::create(&lock_path).map_err(|e| infra(e, "create", &lock_path))?;
            lock.lock().map_err(|e| infra(e, "lock", &lock_path))?;
            // Another warm's `sweep_tmp` may have locked and removed the file between
            // our create and lock: then the lock guards nothing, take another name.
            let ours = lock.metadata().map_err(|e| infra(e, "lock", &lock_path))?;
            match fs::metadata(&lock_path) {
                Ok(m) if m.ino() == ours.ino() && m.dev() == ours.dev() => {
                    break (tmp.join(&name), lock_path, lock)
                }
                _ => continue,
            }
        };
        fs::create_dir_all(&dir).map_err(|e| infra(e, "create", &dir))?;
        if kind != Kind::Kernel {
            fs::create_dir(dir.join("out")).map_err(|e| infra(e, "create", &dir))?;
        }
        Ok(Staging {
            dir,
            lock: Some(lock),
            lock_path,
        })
    }

    /// Record integrity, then move the staging directory into place in one rename.
    /// Replaces an existing (stale) entry under the same key.
    pub fn publish(
        &self,
        staging: Staging,
        kind: Kind,
        key: &str,
        built_by: &str,
        duration_secs: f64,
        deps: Vec<Dep>,
    ) -> Result<Entry> {
        let out = staging.out();
        let mut files = Vec::new();
        for (rel, size) in
            fsutil::walk_files(&out).with_context(|| format!("reading {}", out.display()))?
        {
            let path = if rel.is_empty() {
                out.clone()
            } else {
                out.join(&rel)
            };
            let blake3 = key::hash_file(&path).map_err(|e| infra(e, "read", &path))?;
            files.push(FileRecord {
                path: rel,
                size,
                blake3,
            });
        }
        let meta = Meta {
            layout: LAYOUT,
            kind,
            key: key.to_string(),
            built_by: built_by.to_string(),
            duration_secs,
            files,
            deps,
        };
        let meta_path = staging.dir.join("meta.json");
        fs::write(
            &meta_path,
            serde_json::to_vec(&meta).expect("meta serializes"),
        )
        .map_err(|e| infra(e, "write", &meta_path))?;
        let target = self.entry_dir(kind, key);
        let parent = target.parent().expect("entry has a parent");
        fs::create_dir_all(parent).map_err(|e| infra(e, "create", parent))?;
        if target.exists() {
            self.discard(&target)
                .map_err(|e| infra(e, "replace", &target))?;
        }
        fs::rename(&staging.dir, &target).map_err(|e| infra(e, "publish", &target))?;
        drop(staging);
        Ok(Entry { dir: target, meta })
    }

    /// Remove staging dirs whose builder is gone (its lock is free).
    pub fn sweep_tmp(&self) {
        let Ok(rd) = fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(stage) = name.strip_suffix(".lock") {
                let Ok(f) = fs::File::options().write(true).open(e.path()) else {
                    continue;
                };
                if f.try_lock().is_ok() {
                    let _ = fsutil::remove_any(&self.root.join("tmp").join(stage));
                    let _ = fs::remove_file(e.path());
                }
            } else if name.starts_with("trash.") {
                let _ = fsutil::remove_any(&e.path());
            } else if !self.root.join("tmp").join(format!("{name}.lock")).exists()
                && !name.starts_with('.')
            {
                // A stage whose lock file is already gone: its builder died mid-cleanup.
                let _ = fsutil::remove_any(&e.path());
            }
        }
    }

    /// Every entry: (kind, key, dir).
    pub fn entries(&self) -> Vec<(Kind, String, PathBuf)> {
        let mut out = Vec::new();
        for kind in Kind::ALL {
            let Ok(shards) = fs::read_dir(self.root.join("entries").join(kind.name())) else {
                continue;
            };
            for shard in shards.flatten() {
                let Ok(keys) = fs::read_dir(shard.path()) else {
                    continue;
                };
                for k in keys.flatten() {
                    out.push((kind, k.file_name().to_string_lossy().to_string(), k.path()));
                }
            }
        }
        out.sort();
        out
    }
}

/// Ok(None): no entry. Err: an entry directory without a readable record.
pub fn read_meta(dir: &Path) -> Result<Option<Meta>, String> {
    match fs::read(dir.join("meta.json")) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("integrity record unreadable: {e}")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if dir.exists() {
                Err("integrity record missing".into())
            } else {
                Ok(None)
            }
        }
        Err(e) => Err(format!("integrity record unreadable: {e}")),
    }
}

fn check_sizes(out: &Path, files: &[FileRecord]) -> Result<(), String> {
    if files.is_empty() {
        return Err("entry records no files".into());
    }
    for f in files {
        let p = if f.path.is_empty() {
            out.to_path_buf()
        } else {
            out.join(&f.path)
        };
        match fs::symlink_metadata(&p) {
            Ok(m) if m.is_file() && m.len() == f.size => {}
            Ok(m) if m.is_file() => {
                return Err(format!(
                    "{} has {} bytes, recorded {}",
                    f.path_or_out(),
                    m.len(),
                    f.size
                ))
            }
            _ => return Err(format!("{} is missing", f.path_or_out())),
        }
    }
    Ok(())
}

impl FileRecord {
    fn path_or_out(&self) -> &str {
        if self.path.is_empty() {
            "out"
        } else {
            &self.path
        }
    }
}
