//! Publishing: a step writes into a staging directory in the cache's own tmp dir; its
//! integrity record is written, then the whole directory is renamed into place in one
//! step, so a reader sees a whole entry or none, whatever is killed when.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::digest::{Digester, Digests};
use super::{guard, infra, Dep, Entry, FileRecord, Kind, Meta, Store};
use crate::base::fsutil;

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

/// Create a file that must not exist yet (O_EXCL never follows a link) and write it.
fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut f = fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(bytes)
}

/// Make an entry's `out` read-only to the steps that use it (no write bit: a device step
/// handed `{fixture}` cannot write into it, unless it is root) and record in `meta`
/// each file's stamp after that, and which copy of the entry they were taken in. The
/// stamps are what a hit compares (docs/cache-trust.md, "Entries are read-only").
pub(super) fn stamp_entry(dir: &Path, meta: &mut Meta) -> io::Result<()> {
    let out = dir.join("out");
    fsutil::make_read_only(&out)?;
    let now: std::collections::HashMap<String, fsutil::Stamp> =
        fsutil::walk_stamped(&out)?.into_iter().collect();
    for f in &mut meta.files {
        f.stamp = now.get(&f.path).copied();
    }
    let copy = super::meta::CopyId::of(&fs::symlink_metadata(dir)?);
    meta.copy = Some(copy);
    meta.stamps_seal = Some(super::meta::seal_stamps(
        meta.kind,
        &meta.key,
        copy,
        &meta.files,
    ));
    Ok(())
}

/// Digests of a file inside the cache: regular files only, no link followed.
pub fn digest_in_cache(path: &Path, digester: Digester) -> io::Result<Digests> {
    digester.read_all(fsutil::open_regular_nofollow(path)?)
}

impl Store {
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
            // `create_new` (O_EXCL) never follows a planted link.
            let lock = match fs::File::options()
                .write(true)
                .create_new(true)
                .open(&lock_path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(infra(e, "create", &lock_path)),
            };
            lock.lock().map_err(|e| infra(e, "lock", &lock_path))?;
            // Another warm's `sweep_tmp` may have locked and removed the file between
            // our create and lock: then the lock guards nothing, take another name.
            let ours = lock.metadata().map_err(|e| infra(e, "lock", &lock_path))?;
            match fs::symlink_metadata(&lock_path) {
                Ok(m) if m.ino() == ours.ino() && m.dev() == ours.dev() => {
                    break (tmp.join(&name), lock_path, lock)
                }
                _ => continue,
            }
        };
        fs::create_dir(&dir).map_err(|e| infra(e, "create", &dir))?;
        if kind != Kind::Kernel {
            fs::create_dir(dir.join("out")).map_err(|e| infra(e, "create", &dir))?;
        }
        Ok(Staging {
            dir,
            lock: Some(lock),
            lock_path,
        })
    }

    /// Record integrity (hash every file the step left in `out`), then move the staging
    /// directory into place in one rename. Replaces an existing (stale) entry under the
    /// same key.
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
        for (rel, _) in
            fsutil::walk_files(&out).with_context(|| format!("reading {}", out.display()))?
        {
            let path = if rel.is_empty() {
                out.clone()
            } else {
                out.join(&rel)
            };
            let d = digest_in_cache(&path, Digester::new()).map_err(|e| infra(e, "read", &path))?;
            files.push(FileRecord::new(rel, d.size, d.blake3));
        }
        self.place(
            staging,
            Meta::new(kind, key, built_by, duration_secs, files, deps),
        )
    }

    /// Publish a staging directory whose files were digested while they were written (a
    /// download): the same rename as `publish`, without reading the bytes again. `out`
    /// must list exactly `meta.files` (paths, sizes, regular files — the check a hit
    /// makes), else nothing is published.
    pub fn publish_digested(&self, staging: Staging, mut meta: Meta) -> Result<Entry> {
        meta.files.sort_by(|a, b| a.path.cmp(&b.path));
        guard::check_listing(&staging.out(), &meta.files).map_err(|why| {
            crate::base::error::err!(
                Infra,
                "cache unusable: staged entry {} does not match its record ({why}); not published",
                meta.key
            )
        })?;
        self.place(staging, meta)
    }

    /// Make `out` read-only, record each file's stamp, write the integrity record into
    /// the staging dir and rename it into place: the one way an entry appears.
    fn place(&self, staging: Staging, mut meta: Meta) -> Result<Entry> {
        stamp_entry(&staging.dir, &mut meta)
            .map_err(|e| infra(e, "make read-only", &staging.out()))?;
        self.keys.sign(&mut meta);
        let (kind, key) = (meta.kind, meta.key.as_str());
        let meta_path = staging.dir.join("meta.json");
        // The step knew the staging dir: whatever it left at meta.json is replaced, and
        // a link there is removed, never written through.
        let _ = fsutil::remove_any(&meta_path);
        write_new(
            &meta_path,
            &serde_json::to_vec(&meta).expect("meta serializes"),
        )
        .map_err(|e| infra(e, "write", &meta_path))?;
        let target = self.entry_dir(kind, key);
        let shard = target.parent().expect("entry has a parent");
        let kind_dir = shard.parent().expect("shard has a parent");
        fsutil::ensure_real_dir(kind_dir).map_err(|e| infra(e, "use", kind_dir))?;
        // A link or file planted at the shard is corruption: removed (the link, not its
        // target), then the real directory made.
        if !matches!(
            fsutil::node(shard),
            Ok(fsutil::Node::Dir | fsutil::Node::Missing)
        ) {
            self.discard(shard)
                .map_err(|e| infra(e, "replace", shard))?;
        }
        fsutil::ensure_real_dir(shard).map_err(|e| infra(e, "create", shard))?;
        if fsutil::node(&target).map_err(|e| infra(e, "read", &target))? != fsutil::Node::Missing {
            self.discard(&target)
                .map_err(|e| infra(e, "replace", &target))?;
        }
        fs::rename(&staging.dir, &target).map_err(|e| infra(e, "publish", &target))?;
        drop(staging);
        Ok(Entry {
            dir: target,
            meta,
            record: None,
        })
    }

    /// Remove staging dirs whose builder is gone (its lock is free). `tmp/` itself was
    /// checked to be a real directory; inside it links are removed, never followed.
    pub fn sweep_tmp(&self) {
        let tmp = self.root.join("tmp");
        if fsutil::node(&tmp).ok() != Some(fsutil::Node::Dir) {
            return;
        }
        let Ok(rd) = fs::read_dir(&tmp) else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(stage) = name.strip_suffix(".lock") {
                match fsutil::open_lock_file(&e.path()) {
                    Ok(f) => {
                        if f.try_lock().is_ok() {
                            let _ = fsutil::remove_any(&tmp.join(stage));
                            let _ = fs::remove_file(e.path());
                        }
                    }
                    // Not a lock file we made (a link, a FIFO): remove the thing itself.
                    Err(_) => {
                        let _ = fsutil::remove_any(&e.path());
                    }
                }
            } else if name.starts_with("trash.") || name.starts_with(".probe.") {
                // A trash dir, or the write probe of a warm killed between its two calls
                // (removing a live one only makes its own removal a no-op).
                let _ = fsutil::remove_any(&e.path());
            } else if fsutil::node(&tmp.join(format!("{name}.lock"))).ok()
                == Some(fsutil::Node::Missing)
                && !name.starts_with('.')
            {
                // A stage whose lock file is already gone: its builder died mid-cleanup.
                let _ = fsutil::remove_any(&e.path());
            }
        }
    }
}
