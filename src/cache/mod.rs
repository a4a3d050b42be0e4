//! The content-addressed store (docs/cache.md). One directory, relocatable (no absolute
//! paths inside), versioned layout:
//!
//! ```text
//! <root>/scenerun-cache.json        {"layout": 1}
//! <root>/tmp/<stage>/               staging; <stage>.lock held by its builder
//! <root>/locks/<key>.lock           per-key build lock
//! <root>/entries/<kind>/<kk>/<key>/ meta.json (integrity record) + out (file or dir)
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
pub mod maintain;
pub mod remote;

use std::borrow::Cow;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::fsutil;
use crate::key::Files;
use digest::{Digester, Digests};
pub use guard::Damage;

pub const LAYOUT: u32 = 1;
const MARKER: &str = "scenerun-cache.json";

pub use crate::stepid::Kind;

/// One file of an entry, as recorded at publish time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileRecord {
    /// Relative to the entry's `out` ("" when `out` is itself the file).
    pub path: String,
    pub size: u64,
    pub blake3: String,
}

/// A file the compiler reported reading (from its depfile), re-checked on every hit.
/// Shared strings: the records of one plan name the same few hundred files thousands of
/// times, and a hit's record holds the plan's own copy of each name and hash.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Dep {
    /// Relative to the manifest's directory when inside it, else absolute.
    pub path: Arc<str>,
    pub blake3: Arc<str>,
}

/// `meta.json` as a lookup reads it: the same fields as `Meta`, strings borrowed from the
/// record's bytes where JSON lets them be, so a record whose dependency changed costs no
/// allocation per line, and a hit's dependencies become the shared `key::DepNow` strings.
struct MetaView<'a> {
    layout: u32,
    kind: Kind,
    key: Cow<'a, str>,
    built_by: Cow<'a, str>,
    duration_secs: f64,
    files: Vec<FileRecord>,
    deps: Deps<'a>,
}

/// `Meta` with `deps` left as its JSON text (checked by serde to be valid JSON).
#[derive(Deserialize)]
struct MetaRaw<'a> {
    layout: u32,
    kind: Kind,
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow)]
    built_by: Cow<'a, str>,
    duration_secs: f64,
    files: Vec<FileRecord>,
    /// Absent: `[]`, as `Meta` defaults it (a `null` stays `null`, which `Meta`
    /// refuses).
    #[serde(default = "no_deps", borrow)]
    deps: &'a serde_json::value::RawValue,
}

fn no_deps() -> &'static serde_json::value::RawValue {
    serde_json::from_str("[]").expect("valid JSON")
}

/// A record's dependencies: its JSON text when written exactly as scenerun writes it
/// (read in place, nothing allocated per line), else what serde parsed.
enum Deps<'a> {
    Canonical { text: &'a str, count: usize },
    Parsed(Vec<Dep>),
}

impl<'a> MetaView<'a> {
    /// Parse a record: its dependencies in place when they are written as
    /// `serde_json::to_vec(&Meta)` writes them (`canonical_count`), else (whitespace,
    /// another field order, an escape) by serde, so the answer and any error message
    /// are serde's.
    fn parse(bytes: &'a [u8]) -> serde_json::Result<MetaView<'a>> {
        if let Ok(raw) = serde_json::from_slice::<MetaRaw<'a>>(bytes) {
            let text = raw.deps.get();
            if let Some(count) = canonical_count(text) {
                return Ok(MetaView {
                    layout: raw.layout,
                    kind: raw.kind,
                    key: raw.key,
                    built_by: raw.built_by,
                    duration_secs: raw.duration_secs,
                    files: raw.files,
                    deps: Deps::Canonical { text, count },
                });
            }
        }
        // Anything else is what serde makes of the record type itself.
        let m: Meta = serde_json::from_slice(bytes)?;
        Ok(MetaView {
            layout: m.layout,
            kind: m.kind,
            key: Cow::Owned(m.key),
            built_by: Cow::Owned(m.built_by),
            duration_secs: m.duration_secs,
            files: m.files,
            deps: Deps::Parsed(m.deps),
        })
    }
}

impl<'a> Deps<'a> {
    fn len(&self) -> usize {
        match self {
            Deps::Canonical { count, .. } => *count,
            Deps::Parsed(v) => v.len(),
        }
    }

    /// (path, blake3) of each dependency, in record order.
    fn iter(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        match self {
            Deps::Canonical { text, .. } => {
                let mut rest = match *text {
                    "[]" => "",
                    t => &t[1..],
                };
                Box::new(std::iter::from_fn(move || {
                    if rest.is_empty() {
                        return None;
                    }
                    let (path, blake3, r) =
                        canonical_step(rest).expect("checked by canonical_count");
                    rest = if r == "]" { "" } else { &r[1..] };
                    Some((path, blake3))
                }))
            }
            Deps::Parsed(v) => Box::new(v.iter().map(|d| (&*d.path, &*d.blake3))),
        }
    }
}

/// How many dependencies `text` lists when it is exactly what `serde_json::to_vec` writes
/// for them — no whitespace, `path` then `blake3`, no escape in either — else None.
/// `text` is valid JSON, so a string without a backslash is its own value: what serde
/// would give.
fn canonical_count(text: &str) -> Option<usize> {
    let mut rest = text.strip_prefix('[')?;
    if rest == "]" {
        return Some(0);
    }
    let mut n = 0;
    loop {
        let (_, _, r) = canonical_step(rest)?;
        n += 1;
        match r {
            "]" => return Some(n),
            r => rest = r.strip_prefix(',')?,
        }
    }
}

/// One `{"path":"…","blake3":"…"}` at the start of `rest`: its two strings and what
/// follows its `}`.
fn canonical_step(rest: &str) -> Option<(&str, &str, &str)> {
    /// A string's content up to its closing quote, and what follows that quote.
    fn plain(s: &str) -> Option<(&str, &str)> {
        let end = quote_or_backslash(s.as_bytes())?;
        (s.as_bytes()[end] == b'"').then(|| (&s[..end], &s[end + 1..]))
    }
    let (path, r) = plain(rest.strip_prefix(r#"{"path":""#)?)?;
    let (blake3, r) = plain(r.strip_prefix(r#","blake3":""#)?)?;
    Some((path, blake3, r.strip_prefix('}')?))
}

/// The index of the first `"` or `\` in `s`, eight bytes at a time (a record is ~9 KB
/// of such strings).
fn quote_or_backslash(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte of `x` is zero: its high bit set in the result; no false bit below the
    // first zero byte, so the lowest set bit names the first match.
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        let hit = zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
        if hit != 0 {
            return Some(at + (hit.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|p| at + p)
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
    pub fn new(
        kind: Kind,
        key: &str,
        built_by: &str,
        duration_secs: f64,
        files: Vec<FileRecord>,
        deps: Vec<Dep>,
    ) -> Meta {
        Meta {
            layout: LAYOUT,
            kind,
            key: key.to_string(),
            built_by: built_by.to_string(),
            duration_secs,
            files,
            deps,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

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
    touched: Arc<std::sync::Mutex<[std::collections::HashSet<String>; 4]>>,
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

/// An unusable store is an infrastructure error (exit 3) that names the path.
fn infra(e: io::Error, what: &str, path: &Path) -> anyhow::Error {
    let full = if fsutil::is_disk_full(&e) {
        " (disk full)"
    } else {
        ""
    };
    let what = format!("cache unusable: cannot {what} {}{full}", path.display());
    anyhow::Error::new(e).context(crate::error::Error::Infra(what))
}

impl Snapshot {
    /// A lookup of the plan missed: from now on `listed_absent` lists shards.
    pub fn missed(&self) {
        self.missed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Store {
    /// A store handle; nothing is created until `ensure`.
    pub fn at(root: PathBuf) -> Store {
        Store {
            root,
            dirs: Arc::default(),
            touched: Arc::default(),
        }
    }

    pub fn entry_dir(&self, kind: Kind, key: &str) -> PathBuf {
        self.root
            .join("entries")
            .join(kind.name())
            .join(&key[..2.min(key.len())])
            .join(key)
    }

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
        if view.key != key || view.kind != kind || view.layout != LAYOUT {
            return Lookup::Stale(Stale::Damaged(Damage::RecordMismatch));
        }
        if let Err(why) = guard::check_listing(&dir.join("out"), &view.files) {
            return Lookup::Stale(Stale::Damaged(why));
        }
        let found = check_deps(view, dir, None, base, files);
        if let (true, Lookup::Hit(e)) = (settle, &found) {
            self.touch(e);
        }
        found
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
                fsutil::read_all(f, st.st_size as u64).ok()?,
                at::FileId::of(&st),
            )
        };
        let view = MetaView::parse(&bytes).ok()?;
        if view.key != key || view.kind != kind || view.layout != LAYOUT {
            return None;
        }
        let dir = self.entry_dir(kind, key);
        // A directory `out` (fixtures, goldens) is listed by path, as the path-by-path
        // lookup lists it.
        let listed = match out_matches_at(entry.as_fd(), &view.files) {
            Some(same) => same,
            None => guard::check_listing(&dir.join("out"), &view.files).is_ok(),
        };
        if !listed {
            return None;
        }
        let found = check_deps(view, dir, Some(record), base, files);
        // In the directory just opened: this record, confirmed a moment ago.
        if let (true, Lookup::Hit(_)) = (settle, &found) {
            self.touch_in(&entry, kind, key);
        }
        Some(found)
    }

    /// Cheap presence check: the record, and a listing of `out` equal to it.
    pub fn present(&self, kind: Kind, key: &str) -> Option<Entry> {
        let dir = self.entry_checked(kind, key).ok().flatten()?;
        let meta = read_meta(&dir).ok().flatten()?;
        if meta.key != key || meta.kind != kind || meta.layout != LAYOUT {
            return None;
        }
        guard::check_listing(&dir.join("out"), &meta.files).ok()?;
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
        if seen.meta.key != key || seen.meta.kind != kind || seen.meta.layout != LAYOUT {
            return None;
        }
        let kind_dir = self.dirs.kind(&self.root, kind).ok()?;
        let entry = at::entry(kind_dir, key).ok()?;
        let st = at::stat_at(entry.as_fd(), c"meta.json").ok()?;
        if !at::is_file(&st) || at::FileId::of(&st) != record {
            return None;
        }
        let listed = match out_matches_at(entry.as_fd(), &seen.meta.files) {
            Some(same) => same,
            None => guard::check_listing(&seen.dir.join("out"), &seen.meta.files).is_ok(),
        };
        listed.then_some(entry)
    }

    fn still_present_(&self, kind: Kind, key: &str, seen: &Entry) -> Option<()> {
        let dir = self.entry_checked(kind, key).ok().flatten()?;
        if dir != seen.dir
            || seen.meta.key != key
            || seen.meta.kind != kind
            || seen.meta.layout != LAYOUT
            || fsutil::node(&dir.join("meta.json")).ok()? != fsutil::Node::File
        {
            return None;
        }
        guard::check_listing(&dir.join("out"), &seen.meta.files).ok()
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
        self.touched.lock().expect("touched")[kind as usize].insert(key.to_string());
    }

    /// Whether this process marked the entry used (see `touch`).
    pub fn touched_now(&self, kind: Kind, key: &str) -> bool {
        self.touched.lock().expect("touched")[kind as usize].contains(key)
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
            files.push(FileRecord {
                path: rel,
                size: d.size,
                blake3: d.blake3,
            });
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
            crate::err!(
                Infra,
                "cache unusable: staged entry {} does not match its record ({why}); not published",
                meta.key
            )
        })?;
        self.place(staging, meta)
    }

    /// Write the integrity record into the staging dir and rename it into place: the one
    /// way an entry appears.
    fn place(&self, staging: Staging, meta: Meta) -> Result<Entry> {
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

/// Create a file that must not exist yet (O_EXCL never follows a link) and write it.
fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut f = fs::File::options()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(bytes)
}

/// Digests of a file inside the cache: regular files only, no link followed.
pub fn digest_in_cache(path: &Path, digester: Digester) -> io::Result<Digests> {
    digester.read_all(fsutil::open_regular_nofollow(path)?)
}

/// Ok(None): no entry. Err: an entry directory without a readable record.
pub fn read_meta(dir: &Path) -> Result<Option<Meta>, Damage> {
    match read_record(dir)? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Damage::RecordUnreadable(e.to_string())),
        None => Ok(None),
    }
}

/// The bytes of an entry's `meta.json` (see `read_meta`).
fn read_record(dir: &Path) -> Result<Option<Vec<u8>>, Damage> {
    match fsutil::read_nofollow(&dir.join("meta.json")) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if fsutil::node(dir).ok() != Some(fsutil::Node::Missing) {
                Err(Damage::RecordMissing)
            } else {
                Ok(None)
            }
        }
        Err(e) => Err(Damage::RecordUnreadable(e.to_string())),
    }
}

/// Whether a record lists exactly one file that is `out` itself (a kernel's object).
fn single_file(files: &[FileRecord]) -> bool {
    files.len() == 1 && files[0].path.is_empty()
}

/// `check_listing` for a single-file `out`, by one `lstat` in the opened entry
/// directory: a regular file of the recorded size. None for a directory `out` (left to
/// `check_listing`) or when `out` cannot be looked at.
fn out_matches_at(entry: BorrowedFd<'_>, files: &[FileRecord]) -> Option<bool> {
    if !single_file(files) {
        return None;
    }
    let st = at::stat_at(entry, c"out").ok()?;
    Some(at::is_file(&st) && st.st_size as u64 == files[0].size)
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
    };
    Lookup::Hit(Arc::new(Entry { dir, meta, record }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps_of(bytes: &[u8]) -> Vec<(String, String)> {
        MetaView::parse(bytes)
            .unwrap()
            .deps
            .iter()
            .map(|(p, h)| (p.to_string(), h.to_string()))
            .collect()
    }

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

    #[test]
    fn records_parse_as_serde_parses_them() {
        let dep = |p: &str, h: &str| Dep {
            path: p.into(),
            blake3: h.into(),
        };
        let file = FileRecord {
            path: String::new(),
            size: 3,
            blake3: "ff".into(),
        };
        for deps in [
            vec![],
            vec![dep("a.c", "01")],
            vec![dep("/usr/include/x.h", "02"), dep("q\"uote\\d/é.h", "03")],
        ] {
            let meta = Meta::new(Kind::Kernel, "k", "b", 0.5, vec![file.clone()], deps);
            let bytes = serde_json::to_vec(&meta).unwrap();
            let want: Vec<(String, String)> = meta
                .deps
                .iter()
                .map(|d| (d.path.to_string(), d.blake3.to_string()))
                .collect();
            assert_eq!(deps_of(&bytes), want);
            // Pretty-printed (another writer): serde's own parse, the same answer.
            assert_eq!(deps_of(&serde_json::to_vec_pretty(&meta).unwrap()), want);
        }
        let no_deps = br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[]}"#;
        assert!(deps_of(no_deps).is_empty());
        let swapped = br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[],"deps":[{"blake3":"h","path":"p"}]}"#;
        assert_eq!(deps_of(swapped), vec![("p".into(), "h".into())]);
        for bad in [
            &br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[],"deps":null}"#[..],
            br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[],"deps":[{"path":"p"}]}"#,
            br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[],"deps":[{"path":"p","blake3":"h","path":"q"}]}"#,
        ] {
            let ours = MetaView::parse(bad).err().map(|e| e.to_string());
            let serde = serde_json::from_slice::<Meta>(bad)
                .err()
                .map(|e| e.to_string());
            assert!(ours.is_some());
            assert_eq!(ours, serde);
        }
    }
}
