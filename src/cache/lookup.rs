//! Looking a key up: the one cache-status decision (hit, miss, or stale with why), and
//! the cheaper checks of an entry a lookup of this process found moments ago
//! (`still_present`, `settle_present`). Every check of an entry is the trust check:
//! its record is of this (kind, key, layout) and the listing of `out` equals it
//! (docs/cache-trust.md). A hit's recorded depfile entries must still have their
//! content.

use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::meta::{read_meta, read_record, CopyId, MetaView};
use super::{at, guard, Damage, Dep, FileRecord, Kind, Meta, Store, LAYOUT};
use crate::base::fsutil::{self, Stamp};
use crate::key::Files;

/// A published entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub dir: PathBuf,
    pub meta: Meta,
    /// The `meta.json` that `meta` was read from, when the lookup opened it relative to
    /// the cache's directories: `still_present` compares it instead of reading again.
    pub record: Option<at::FileId>,
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
    /// Shared: every step of the unit, and warm after it, hold this one record.
    Hit(Arc<Entry>),
    Miss,
    /// Present but not servable.
    Stale(Stale),
}

/// Why an entry that is present cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// The entry itself is damaged: a file missing or of another size, a record that
    /// cannot be read or names another key, a link where the cache keeps a directory.
    /// Rebuilt from the same inputs, it comes out the same.
    Damaged(Damage),
    /// The entry is whole, but a file its depfile recorded changed (or is gone):
    /// rebuilt under the same key, it may come out different.
    DepChanged {
        /// As the record names it (relative to the manifest's directory when inside it).
        path: String,
        gone: bool,
    },
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::Damaged(why) => write!(f, "{why}"),
            Stale::DepChanged { path, gone: false } => {
                write!(f, "{path} changed since it was built")
            }
            Stale::DepChanged { path, gone: true } => {
                write!(f, "{path} is gone since it was built")
            }
        }
    }
}

/// Entry directory names per shard, listed once for one plan (see `Store::listed_absent`).
#[derive(Default)]
pub struct Snapshot {
    /// Whether a lookup of this plan has missed yet: until one does, no shard is listed.
    missed: std::sync::atomic::AtomicBool,
    shards: std::sync::RwLock<
        std::collections::HashMap<
            PathBuf,
            Option<Arc<std::collections::HashSet<std::ffi::OsString>>>,
        >,
    >,
}

impl Snapshot {
    /// A lookup of the plan missed: from now on `listed_absent` lists shards.
    pub fn missed(&self) {
        self.missed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Whether a record lists exactly one file that is `out` itself (a kernel's object).
fn single_file(files: &[FileRecord]) -> bool {
    files.len() == 1 && files[0].path.is_empty()
}

/// `check_listing` for a single-file `out`, by one `lstat` in the opened entry
/// directory: a regular file of the recorded size, and its stamp. None for a directory
/// `out` (left to `check_listing`), a mismatch, or when `out` cannot be looked at.
fn out_matches_at(entry: BorrowedFd<'_>, files: &[FileRecord]) -> Option<Stamp> {
    if !single_file(files) {
        return None;
    }
    let st = at::stat_at(entry, c"out").ok()?;
    (at::is_file(&st) && st.st_size as u64 == files[0].size).then(|| at::stamp(&st))
}

/// The stamps of an entry's files need taking again: these stamps, in this copy.
type Restamp = Option<(Vec<Stamp>, CopyId)>;

/// What a record says of itself, for `trust`: its kind, key and layout, and the copy
/// of the entry its stamps were taken in.
struct Names<'a> {
    kind: Kind,
    key: &'a str,
    layout: u32,
    copy: Option<CopyId>,
    stamps_seal: Option<&'a str>,
}

/// The trust check, made by every reader of an entry (docs/cache-trust.md): its record
/// is of this kind and key and of this layout; the listing of `out` equals the record
/// — the same paths and sizes, regular files only, nothing followed; and no file
/// changed since it was published (`guard::stamps_hold`). `opened`: the entry
/// directory (`dir`) opened through `at`, where a single-file `out` (a kernel's object)
/// is one `lstat`; a directory `out`, or a mismatch there, is listed by
/// `guard::check_listing`, which names the damage.
fn trust(
    (kind, key): (Kind, &str),
    record: Names<'_>,
    opened: Option<BorrowedFd<'_>>,
    dir: &Path,
    files: &[FileRecord],
) -> Result<Restamp, Damage> {
    if (record.kind, record.key, record.layout) != (kind, key, LAYOUT) {
        return Err(Damage::RecordMismatch);
    }
    let out = dir.join("out");
    let now = match opened.and_then(|entry| out_matches_at(entry, files)) {
        Some(stamp) => vec![stamp],
        None => guard::check_listing(&out, files)?,
    };
    let copy = match opened {
        Some(entry) => at::stat_at(entry, c".").map(|st| CopyId {
            dev: st.st_dev,
            ino: st.st_ino,
        }),
        None => fs::symlink_metadata(dir).map(|m| CopyId::of(&m)),
    }
    .map_err(|e| Damage::Unreadable {
        path: dir.to_path_buf(),
        error: e.to_string(),
    })?;
    let trusted = record.copy == Some(copy)
        && super::meta::stamps_sealed((kind, key), copy, files, record.stamps_seal);
    guard::stamps_hold(&out, files, trusted, copy, now)
}

impl MetaView<'_> {
    /// With a verify key: this record's signature verifies (`sign`).
    fn signed(&self, keys: &super::sign::Keys) -> Result<(), Damage> {
        keys.check(self.signature.as_deref(), || {
            super::sign::signed_bytes(
                (
                    self.layout,
                    self.kind,
                    &self.key,
                    &self.built_by,
                    self.duration_secs,
                ),
                &self.files,
                self.deps.iter(),
            )
        })
    }

    /// What the record says of itself, for `trust`.
    fn names(&self) -> Names<'_> {
        Names {
            kind: self.kind,
            key: &self.key,
            layout: self.layout,
            copy: self.copy,
            stamps_seal: self.stamps_seal.as_deref(),
        }
    }
}

impl Meta {
    /// What the record says of itself, for `trust`.
    fn names(&self) -> Names<'_> {
        Names {
            kind: self.kind,
            key: &self.key,
            layout: self.layout,
            copy: self.copy,
            stamps_seal: self.stamps_seal.as_deref(),
        }
    }
}

/// The end of every lookup that found a whole entry: each recorded dependency must still
/// have its recorded content (`DepChanged` names the first that does not), else a hit
/// whose record holds the plan's shared strings.
fn check_deps(
    view: MetaView<'_>,
    dir: PathBuf,
    record: Option<at::FileId>,
    base: &Path,
    files: &Files,
) -> Lookup {
    let checked = files.with_deps(base, |names| {
        let mut deps = Vec::with_capacity(view.deps.len());
        for (path, blake3) in view.deps.iter() {
            if blake3 == super::ABSENT {
                if std::fs::metadata(crate::key::key_path(base, path)).is_ok_and(|m| m.is_file()) {
                    return Err((path.to_string(), false));
                }
                deps.push(Dep {
                    path: path.into(),
                    blake3: super::ABSENT.into(),
                });
                continue;
            }
            match names.get(path) {
                Ok(now) if *now.hash == *blake3 => deps.push(Dep {
                    path: now.name,
                    blake3: now.hash,
                }),
                Ok(_) => return Err((path.to_string(), false)),
                Err(_) => return Err((path.to_string(), true)),
            }
        }
        Ok(deps)
    });
    let deps = match checked {
        Ok(deps) => deps,
        Err((path, gone)) => return Lookup::Stale(Stale::DepChanged { path, gone }),
    };
    let meta = Meta {
        layout: view.layout,
        kind: view.kind,
        key: view.key.into_owned(),
        built_by: view.built_by.into_owned(),
        duration_secs: view.duration_secs,
        files: view.files,
        deps,
        copy: view.copy,
        signature: view.signature,
        stamps_seal: view.stamps_seal,
    };
    Lookup::Hit(Arc::new(Entry { dir, meta, record }))
}

impl Store {
    /// Whether the listing snapshot shows no entry directory for this key: a plan asks
    /// this before `lookup`, so 20,000 misses cost one `readdir` per shard instead of a
    /// failed `open` and a failed `stat` each. Only an answer of `true` is final; the
    /// snapshot is taken once per plan and never consulted after it.
    ///
    /// Listing pays off only for misses: a plan of hits (a no-op warm) would list every
    /// shard for nothing, so shards are listed only once a lookup of the plan has missed
    /// (`Snapshot::missed`).
    pub fn listed_absent(&self, snap: &Snapshot, kind: Kind, key: &str) -> bool {
        if !snap.missed.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let dir = self.entry_dir(kind, key);
        let Some(shard) = dir.parent() else {
            return false;
        };
        let listing = {
            let known = snap
                .shards
                .read()
                .expect("snapshot lock")
                .get(shard)
                .cloned();
            match known {
                Some(l) => l,
                None => {
                    let l = match fs::read_dir(shard) {
                        Ok(rd) => Some(Arc::new(
                            rd.filter_map(Result::ok)
                                .map(|e| e.file_name())
                                .collect::<std::collections::HashSet<_>>(),
                        )),
                        // No shard directory: no entry in it.
                        Err(e) if e.kind() == io::ErrorKind::NotFound => Some(Arc::default()),
                        Err(_) => None,
                    };
                    snap.shards
                        .write()
                        .expect("snapshot lock")
                        .entry(shard.to_path_buf())
                        .or_insert(l)
                        .clone()
                }
            }
        };
        match listing {
            // Unreadable shard: let `lookup` give the exact answer.
            None => false,
            Some(names) => !names.contains(std::ffi::OsStr::new(key)),
        }
    }

    /// The one lookup function: `plan`, `warm` and `device` all decide hit or miss here.
    /// `base` resolves relative dependency paths; `files` hashes them (stat memo).
    ///
    /// A hit is found relative to the cache's own directories (`at`: no link followed in
    /// any component, a few short paths instead of absolute ones); anything else that
    /// way, or a kernel without `openat2`, is decided path by path (`guard`), which names
    /// what it found.
    pub fn lookup(&self, kind: Kind, key: &str, base: &Path, files: &Files) -> Lookup {
        self.lookup_touching(kind, key, base, files, false)
    }

    /// `lookup` for a warm that will use what it finds: under the key lock (which
    /// `cache prune` and `clean` take before they evict), a hit is touched as soon as it
    /// is confirmed, which is what warm's settling of a hit does (`settle_present`) —
    /// done here, warm need not open the entry a second time. `true` when the lookup
    /// settled a hit; `false` for anything else, and when the lock cannot be had (a
    /// read-only cache): then it was only `lookup`, and warm settles or builds as usual.
    pub fn lookup_settling(
        &self,
        kind: Kind,
        key: &str,
        base: &Path,
        files: &Files,
    ) -> (Lookup, bool) {
        let Ok(_lock) = self.lock_key(kind, key) else {
            return (self.lookup(kind, key, base, files), false);
        };
        let found = self.lookup_touching(kind, key, base, files, true);
        let settled = matches!(found, Lookup::Hit(_));
        (found, settled)
    }

    /// `lookup`; with `settle`, a hit is also marked used (see `touch`).
    fn lookup_touching(
        &self,
        kind: Kind,
        key: &str,
        base: &Path,
        files: &Files,
        settle: bool,
    ) -> Lookup {
        if let Some(found) = self.lookup_at(kind, key, base, files, settle) {
            return found;
        }
        let dir = match self.entry_checked(kind, key) {
            Ok(Some(dir)) => dir,
            Ok(None) => return Lookup::Miss,
            Err(why) => return Lookup::Stale(Stale::Damaged(why)),
        };
        let bytes = match read_record(&dir) {
            Ok(Some(b)) => b,
            Ok(None) => return Lookup::Miss,
            Err(why) => return Lookup::Stale(Stale::Damaged(why)),
        };
        let view = match MetaView::parse(&bytes) {
            Ok(v) => v,
            Err(e) => {
                return Lookup::Stale(Stale::Damaged(Damage::RecordUnreadable(e.to_string())))
            }
        };
        let restamp = match view
            .signed(&self.keys)
            .and_then(|()| trust((kind, key), view.names(), None, &dir, &view.files))
        {
            Ok(r) => r,
            Err(why) => return Lookup::Stale(Stale::Damaged(why)),
        };
        let found = check_deps(view, dir, None, base, files);
        let found = self.restamped(found, restamp, settle);
        if let (true, Lookup::Hit(e)) = (settle, &found) {
            self.touch(e);
        }
        found
    }

    /// A hit whose files' stamps had to be taken again (`guard::stamps_hold`): its record
    /// with the new stamps, written back into the entry when its key lock is held
    /// (`locked`) or free (never while a builder may be replacing the entry), so the
    /// next lookup compares with them. Without the lock, this lookup's answer still
    /// carries them (a device phase checks its artifacts against them).
    fn restamped(&self, found: Lookup, restamp: Restamp, locked: bool) -> Lookup {
        let (Lookup::Hit(e), Some((stamps, copy))) = (&found, restamp) else {
            return found;
        };
        let mut meta = e.meta.clone();
        for (f, s) in meta.files.iter_mut().zip(stamps) {
            f.stamp = Some(s);
        }
        meta.copy = Some(copy);
        meta.stamps_seal = Some(super::meta::seal_stamps(
            meta.kind,
            &meta.key,
            copy,
            &meta.files,
        ));
        let lock = match locked {
            true => None,
            false => match self.try_lock_key(meta.kind, &meta.key) {
                Ok(Some(l)) => Some(l),
                _ => {
                    return Lookup::Hit(Arc::new(Entry {
                        dir: e.dir.clone(),
                        meta,
                        record: None,
                    }))
                }
            },
        };
        let _ = fsutil::write_atomic(
            &e.dir.join("meta.json"),
            &serde_json::to_vec(&meta).expect("meta serializes"),
        );
        drop(lock);
        Lookup::Hit(Arc::new(Entry {
            dir: e.dir.clone(),
            meta,
            record: None,
        }))
    }

    /// `lookup` through `at`: None when the answer is not a plain hit or dependency
    /// change reached that way (the path-by-path lookup then decides, and names why).
    fn lookup_at(
        &self,
        kind: Kind,
        key: &str,
        base: &Path,
        files: &Files,
        settle: bool,
    ) -> Option<Lookup> {
        let kind_dir = self.dirs.kind(&self.root, kind).ok()?;
        let entry = match at::entry(kind_dir, key) {
            Ok(e) => e,
            // No shard or no entry directory (`entries/<kind>` is open): a miss, as
            // `entry_checked` would find it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(Lookup::Miss),
            Err(_) => return None,
        };
        let (bytes, record) = {
            let f = at::open_read(entry.as_fd(), c"meta.json").ok()?;
            let st = at::fstat(&f).ok()?;
            if !at::is_file(&st) {
                return None;
            }
            (
                fsutil::read_all_capped(
                    f,
                    st.st_size as u64,
                    Path::new("meta.json"),
                    fsutil::Cap::META,
                )
                .ok()?,
                at::FileId::of(&st),
            )
        };
        let view = MetaView::parse(&bytes).ok()?;
        view.signed(&self.keys).ok()?;
        let dir = self.entry_dir(kind, key);
        // A directory `out` (fixtures, goldens) is listed by path, as the path-by-path
        // lookup lists it.
        let restamp = trust(
            (kind, key),
            view.names(),
            Some(entry.as_fd()),
            &dir,
            &view.files,
        )
        .ok()?;
        let rewritten = restamp.is_some();
        let found = check_deps(view, dir, Some(record), base, files);
        let found = self.restamped(found, restamp, settle);
        // In the directory just opened: this record, confirmed a moment ago (a record
        // rewritten with new stamps is touched by its path).
        match (settle, &found) {
            (true, Lookup::Hit(e)) if rewritten => self.touch(e),
            (true, Lookup::Hit(_)) => self.touch_in(&entry, kind, key),
            _ => {}
        }
        Some(found)
    }

    /// Cheap presence check: the record, and a listing of `out` equal to it.
    pub fn present(&self, kind: Kind, key: &str) -> Option<Entry> {
        let dir = self.entry_checked(kind, key).ok().flatten()?;
        let meta = read_meta(&dir).ok().flatten()?;
        let keys = &self.keys;
        keys.check(meta.signature.as_deref(), || super::sign::meta_bytes(&meta))
            .ok()?;
        trust((kind, key), meta.names(), None, &dir, &meta.files).ok()?;
        Some(Entry {
            dir,
            meta,
            record: None,
        })
    }

    /// `present` for an entry whose record this process read moments ago (the plan's
    /// lookup): the entry directory is still a real directory (no link followed), its
    /// record is still a regular file, and the listing of `out` still equals that record.
    /// The record is not read and parsed a second time.
    pub fn still_present(&self, kind: Kind, key: &str, seen: &Entry) -> bool {
        self.still_present_at(kind, key, seen).is_some()
            || self.still_present_(kind, key, seen).is_some()
    }

    /// `still_present` through `at`, for an entry whose lookup went that way; Some(the
    /// entry directory) when it holds. It keeps the guarantees of the path-by-path check
    /// without its walks:
    /// - the entry directory is reached from `entries/<kind>` by `openat2` with no link
    ///   in any component, and `meta.json` and `out` are `lstat`ed in it, never followed;
    /// - `meta.json` is the very file the lookup parsed: a regular file with the same
    ///   device, inode, size and ctime. An entry replaced since (a new directory renamed
    ///   into place) or a record rewritten has a new inode or ctime — and so has a record
    ///   another warm touched meanwhile: then the full check decides;
    /// - the listing of `out` equals the record: for a single-file `out` (kernels) that
    ///   is one `lstat` in the opened directory (a regular file of the recorded size),
    ///   exactly what `check_listing` looks at; a directory `out` (fixtures, goldens) is
    ///   listed by `check_listing` itself, by path, as the full check lists it.
    ///
    /// None only means "not shown here": the caller runs the full check.
    fn still_present_at(&self, kind: Kind, key: &str, seen: &Entry) -> Option<OwnedFd> {
        let record = seen.record?;
        let kind_dir = self.dirs.kind(&self.root, kind).ok()?;
        let entry = at::entry(kind_dir, key).ok()?;
        let st = at::stat_at(entry.as_fd(), c"meta.json").ok()?;
        if !at::is_file(&st) || at::FileId::of(&st) != record {
            return None;
        }
        let meta = &seen.meta;
        trust(
            (kind, key),
            meta.names(),
            Some(entry.as_fd()),
            &seen.dir,
            &meta.files,
        )
        .ok()?;
        Some(entry)
    }

    fn still_present_(&self, kind: Kind, key: &str, seen: &Entry) -> Option<()> {
        let dir = self.entry_checked(kind, key).ok().flatten()?;
        if dir != seen.dir || fsutil::node(&dir.join("meta.json")).ok()? != fsutil::Node::File {
            return None;
        }
        let meta = &seen.meta;
        trust((kind, key), meta.names(), None, &dir, &meta.files)
            .map(|_| ())
            .ok()
    }

    /// `still_present`, then `touch`: how warm settles a hit the plan found (thousands
    /// in a no-op warm), in one opened entry directory when the lookup went through `at`.
    pub fn settle_present(&self, kind: Kind, key: &str, seen: &Entry) -> bool {
        if let Some(entry) = self.still_present_at(kind, key, seen) {
            // Checked just now, under the key lock: this record, touched in place.
            self.touch_in(&entry, kind, key);
            return true;
        }
        if self.still_present_(kind, key, seen).is_none() {
            return false;
        }
        self.touch(seen);
        true
    }

    /// Mark an entry used now (for pruning by last use). A link at `meta.json` would be
    /// touched itself, never its target.
    pub fn touch(&self, entry: &Entry) {
        if at::touch(&entry.dir.join("meta.json")).is_ok() {
            self.touched(entry.meta.kind, &entry.meta.key);
        }
    }

    /// `touch` for an entry directory opened through `at` (no path walked again).
    fn touch_in(&self, entry: &OwnedFd, kind: Kind, key: &str) {
        if at::touch_at(entry.as_raw_fd(), c"meta.json").is_ok() {
            self.touched(kind, key);
        }
    }

    fn touched(&self, kind: Kind, key: &str) {
        self.touched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)[kind as usize]
            .insert(key.to_string());
    }

    /// Whether this process marked the entry used (see `touch`).
    pub fn touched_now(&self, kind: Kind, key: &str) -> bool {
        self.touched
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)[kind as usize]
            .contains(key)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    /// A cache in `dir/cache` holding one kernel entry (`out` is "obj") under `key`.
    fn kernel_entry(dir: &Path, key: &str) -> (Store, Entry) {
        let store = Store::at(dir.join("cache"));
        store.ensure().unwrap();
        let staging = store.stage(Kind::Kernel).unwrap();
        fs::write(staging.out(), b"obj").unwrap();
        let entry = store
            .publish(staging, Kind::Kernel, key, "kernel/s/k", 0.1, Vec::new())
            .unwrap();
        (store, entry)
    }

    #[test]
    fn a_settling_lookup_touches_a_hit_under_its_lock_and_a_plain_lookup_does_not() {
        let t = tempfile::tempdir().unwrap();
        let key = "cd".repeat(32);
        let (store, entry) = kernel_entry(t.path(), &key);
        let meta = entry.dir.join("meta.json");
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86400);
        let backdate = || {
            fs::File::options()
                .write(true)
                .open(&meta)
                .unwrap()
                .set_modified(long_ago)
                .unwrap()
        };
        let mtime = || fs::metadata(&meta).unwrap().modified().unwrap();
        let files = Files::new(None);

        backdate();
        assert!(matches!(
            store.lookup(Kind::Kernel, &key, t.path(), &files),
            Lookup::Hit(_)
        ));
        assert_eq!(mtime(), long_ago, "a plain lookup only looks");
        assert!(!store.touched_now(Kind::Kernel, &key));

        let (found, settled) = store.lookup_settling(Kind::Kernel, &key, t.path(), &files);
        assert!(matches!(found, Lookup::Hit(_)) && settled);
        assert!(mtime() > long_ago, "a settled hit is marked used");
        assert!(store.touched_now(Kind::Kernel, &key));

        // While another process holds the key's lock (a build, or prune evicting it),
        // the settling lookup waits for it.
        let held = store.lock_key(Kind::Kernel, &key).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let r = store.lookup_settling(Kind::Kernel, &key, t.path(), &files);
                tx.send(r.1).unwrap();
            });
            std::thread::sleep(std::time::Duration::from_millis(200));
            assert!(rx.try_recv().is_err(), "it waited for the lock");
            drop(held);
            assert!(rx.recv().unwrap());
        });

        // A miss is not settled.
        let other = "ef".repeat(32);
        let (found, settled) = store.lookup_settling(Kind::Kernel, &other, t.path(), &files);
        assert!(matches!(found, Lookup::Miss) && !settled);
    }

    #[test]
    fn a_hit_is_confirmed_by_its_record_identity_and_never_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let key = "ab".repeat(32);
        let (store, entry) = kernel_entry(t.path(), &key);
        let files = Files::new(None);
        let Lookup::Hit(hit) = store.lookup(Kind::Kernel, &key, t.path(), &files) else {
            panic!("a fresh entry is a hit");
        };
        assert!(hit.record.is_some(), "found through at");
        assert!(store.still_present_at(Kind::Kernel, &key, &hit).is_some());

        // The record replaced by another file (a new inode): not confirmed by identity,
        // the full check decides (and the listing still matches).
        let meta = entry.dir.join("meta.json");
        let copy = entry.dir.join("meta.copy");
        fs::copy(&meta, &copy).unwrap();
        fs::rename(&copy, &meta).unwrap();
        assert!(store.still_present_at(Kind::Kernel, &key, &hit).is_none());
        assert!(store.still_present(Kind::Kernel, &key, &hit));

        // `out` of another size: neither check passes.
        let Lookup::Hit(hit) = store.lookup(Kind::Kernel, &key, t.path(), &files) else {
            panic!("still a hit");
        };
        fs::write(entry.dir.join("out"), b"longer").unwrap();
        assert!(!store.still_present(Kind::Kernel, &key, &hit));
        fs::write(entry.dir.join("out"), b"obj").unwrap();

        // The shard moved away and linked back: the same entry, reached through a link,
        // is corruption for the lookup and the settle alike.
        let shard = entry.dir.parent().unwrap().to_path_buf();
        let elsewhere = t.path().join("elsewhere");
        fs::rename(&shard, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &shard).unwrap();
        assert!(matches!(
            store.lookup(Kind::Kernel, &key, t.path(), &files),
            Lookup::Stale(Stale::Damaged(why)) if why.to_string().contains("symlink")
        ));
        assert!(!store.settle_present(Kind::Kernel, &key, &hit));
    }
}
