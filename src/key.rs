//! Content keys (docs/cache.md): the versioned, length-prefixed encoding hashed with
//! BLAKE3, the `#include` closure scanner, and the persistent stat memo that lets an
//! unchanged file skip re-reading. Keys never contain an absolute path of the checkout:
//! files inside the manifest's directory are named relative to it.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::fsutil::Stamp;
use serde::{Deserialize, Serialize};

mod closure;
mod closure_memo;
pub mod inputs;

use closure::{Bits, Table};
pub use closure::{Closure, ClosureSet};

/// Bump when the encoding changes: every key changes with it.
pub const KEY_SCHEMA: &str = "scenerun-key-3";

/// Files above this size are hashed but not scanned for `#include`.
const SCAN_LIMIT: u64 = 4 << 20;

/// A file whose mtime or ctime is this close to the moment it was hashed may still change
/// within the same timestamp tick ("racy clean"): its memo entry is not trusted.
const RACY_NS: i128 = 1_000_000_000;

/// Whether what `stamp` describes was last changed more than `RACY_NS` before `at_ns`
/// (when it was hashed or listed), so the stamp alone tells any later change.
fn settled(stamp: &Stamp, at_ns: i128) -> bool {
    stamp.mtime_ns.max(stamp.ctime_ns) + RACY_NS < at_ns
}

/// Builds one key: every field is written as (tag length, tag, value length, value).
///
/// The fields are gathered into one buffer and hashed at the end: BLAKE3 of the same
/// bytes either way, but a key is ~40 small fields, and one `update` per piece cost
/// more than the hashing itself (a plan computes thousands of keys).
pub struct KeyHasher(Vec<u8>);

impl KeyHasher {
    pub fn new(kind: &str) -> Self {
        let mut k = KeyHasher(Vec::with_capacity(1024));
        k.field("schema", KEY_SCHEMA.as_bytes());
        k.field("kind", kind.as_bytes());
        k
    }

    pub fn field(&mut self, tag: &str, value: &[u8]) {
        self.0.extend_from_slice(&(tag.len() as u64).to_le_bytes());
        self.0.extend_from_slice(tag.as_bytes());
        self.0
            .extend_from_slice(&(value.len() as u64).to_le_bytes());
        self.0.extend_from_slice(value);
    }

    pub fn env(&mut self, env: &BTreeMap<String, String>) {
        self.field("env-count", &(env.len() as u64).to_le_bytes());
        for (k, v) in env {
            self.field("env-name", k.as_bytes());
            self.field("env-value", v.as_bytes());
        }
    }

    pub fn file(&mut self, tag: &str, rel: &str, hash: &str) {
        self.field(tag, rel.as_bytes());
        self.field("content", hash.as_bytes());
    }

    pub fn finish(self) -> String {
        blake3::hash(&self.0).to_hex().to_string()
    }

    /// The key as bytes (what closure digests are made of).
    pub fn digest(self) -> [u8; 32] {
        *blake3::hash(&self.0).as_bytes()
    }
}

/// One `#include` directive as written. In the stat memo, one string: the name after
/// `'` for `"x"` and after `<` for `<x>` (no object per include, no JSON escape).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Include {
    /// `"x"` (true) or `<x>` (false).
    pub quoted: bool,
    pub name: String,
}

impl From<Include> for String {
    fn from(i: Include) -> String {
        let mut s = String::with_capacity(i.name.len() + 1);
        s.push(if i.quoted { '\'' } else { '<' });
        s.push_str(&i.name);
        s
    }
}

/// A memo entry that is not an include (the text found).
#[derive(Debug)]
pub struct NotAnInclude(String);

impl std::fmt::Display for NotAnInclude {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not an include: {:?}", self.0)
    }
}

impl TryFrom<String> for Include {
    type Error = NotAnInclude;

    fn try_from(mut s: String) -> Result<Include, NotAnInclude> {
        let quoted = match s.chars().next() {
            Some('\'') => true,
            Some('<') => false,
            _ => return Err(NotAnInclude(s)),
        };
        s.remove(0);
        Ok(Include { quoted, name: s })
    }
}

/// What is known about a file's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileInfo {
    pub hash: String,
    pub includes: Vec<Include>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(from = "MemoWire")]
struct MemoEntry {
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    hashed_at_ns: i128,
    /// Shared with every lookup that trusts the entry: no copy of the include list.
    info: Arc<FileInfo>,
}

/// A memo entry as the file holds it, one array without field names (a plan reads
/// thousands): `[size, mtime_ns, ctime_ns, ino, hashed_at_ns, hash, [includes]]`.
/// The times are read as `i64` (nanoseconds since 1970 fit until 2262): serde_json reads
/// an `i128` through a string of its own, which was half the cost of reading the memo.
/// A time out of that range fails the read, and an unreadable memo is ignored.
#[derive(Deserialize)]
struct MemoWire(u64, i64, i64, u64, i64, String, Vec<Include>);

impl From<MemoWire> for MemoEntry {
    fn from(w: MemoWire) -> MemoEntry {
        let MemoWire(size, mtime_ns, ctime_ns, ino, hashed_at_ns, hash, includes) = w;
        MemoEntry {
            size,
            mtime_ns: mtime_ns.into(),
            ctime_ns: ctime_ns.into(),
            ino,
            hashed_at_ns: hashed_at_ns.into(),
            info: Arc::new(FileInfo { hash, includes }),
        }
    }
}

impl Serialize for MemoEntry {
    /// As `MemoWire`, from borrowed fields.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self;
        let (hash, includes) = (&e.info.hash, &e.info.includes);
        (
            e.size,
            e.mtime_ns,
            e.ctime_ns,
            e.ino,
            e.hashed_at_ns,
            hash,
            includes,
        )
            .serialize(s)
    }
}

impl MemoEntry {
    /// The file as it was when hashed (its fields are kept flat in the memo file).
    fn stamp(&self) -> Stamp {
        Stamp {
            size: self.size,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            ino: self.ino,
        }
    }
}

#[derive(Default, Serialize, Deserialize)]
struct MemoFile {
    version: u32,
    entries: HashMap<PathKey, MemoEntry, IdHash>,
}

/// 2: entries as arrays, includes as strings.
const MEMO_VERSION: u32 = 2;

/// `MemoFile` as written: the entries of this run over those of the last.
#[derive(Serialize)]
struct MemoOut<'a> {
    version: u32,
    entries: MergedEntries<'a>,
}

/// The last run's entries that this one did not replace, then this run's. An old entry
/// this run did not consult is kept only while its file is still there: a checkout
/// restored under another path, or a deleted file, would otherwise stay in the memo
/// (read on every run) forever.
struct MergedEntries<'a> {
    old: &'a HashMap<PathKey, MemoEntry, IdHash>,
    fresh: &'a HashMap<PathKey, MemoEntry, IdHash>,
    consulted: &'a HashMap<PathKey, Arc<FileInfo>, IdHash>,
}

impl Serialize for MergedEntries<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let kept = self.old.iter().filter(|(k, _)| {
            !self.fresh.contains_key(*k)
                && (self.consulted.contains_key(*k) || fs::symlink_metadata(&k.0).is_ok())
        });
        s.collect_map(kept.chain(self.fresh.iter()))
    }
}

/// A file of an include closure: its name in keys and its content hash.
#[derive(Debug)]
pub struct Node {
    pub name: String,
    pub hash: String,
    /// BLAKE3 of the length-prefixed (name, content hash): what a closure digest is made
    /// of, computed once per file however many closures hold it.
    pub digest: [u8; 32],
}

impl Node {
    /// The node of the file at `path`, whose content hash is `hash`.
    fn of(base: &Path, path: &Path, hash: &str) -> Node {
        let name = key_name(base, path);
        let mut d = KeyHasher::new("include-file");
        d.file("include", &name, hash);
        Node {
            digest: d.digest(),
            name,
            hash: hash.to_string(),
        }
    }
}

impl Graph {
    /// The id of an include-dir list, given on first sight.
    fn dir_set(&mut self, dirs: &[PathBuf]) -> u32 {
        let next = self.dir_sets.len() as u32;
        let id = *self.dir_sets.entry(dirs_key(dirs)).or_insert(next);
        if id == next {
            self.sets.push(dirs.into());
        }
        id
    }
}

/// The include graph over interned files: each file's resolved includes are found once
/// per include-dir list, and a closure is a walk over small ids.
#[derive(Default)]
struct Graph {
    ids: HashMap<PathKey, u32, IdHash>,
    nodes: Vec<Arc<Node>>,
    paths: Vec<PathBuf>,
    /// By `dirs_key`.
    dir_sets: HashMap<std::ffi::OsString, u32, IdHash>,
    /// The include dirs of each set, by set id.
    sets: Vec<Arc<[PathBuf]>>,
    children: HashMap<(u32, u32), Arc<[u32]>, IdHash>,
    closures: HashMap<(u32, u32), Closure, IdHash>,
    /// (file, dir set) → the file and every file it reaches.
    reach: HashMap<(u32, u32), Arc<Bits>, IdHash>,
    table: Arc<Table>,
}

/// Hashing for maps keyed by small ids, and by the paths and names of the checkout's own
/// files: a multiply-rotate per word (as rustc's FxHash). SipHash's flood resistance
/// buys nothing for ids we hand out ourselves, and for paths only protects against a
/// checkout crafted to make its own plan slow (never wrong).
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    /// A word at a time: dependency names (~40 bytes) are hashed once per record line.
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let mut tail = [0u8; 8];
        let rest = words.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        self.write_u64(u64::from_le_bytes(tail) ^ ((rest.len() as u64) << 59));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type IdHash = std::hash::BuildHasherDefault<IdHasher>;

/// A path as a map key, hashed and compared as bytes: `Path`'s own `Hash` walks it
/// component by component, several times the cost, and the plan looks thousands of
/// paths up. Paths here are built the same way on every lookup (joined, normalized), so
/// two spellings of one file are two entries at worst, each correct. Looked up by
/// `path.as_os_str()`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
struct PathKey(PathBuf);

impl PathKey {
    fn of(path: &Path) -> PathKey {
        PathKey(path.to_path_buf())
    }
}

impl PartialEq for PathKey {
    fn eq(&self, other: &PathKey) -> bool {
        self.0.as_os_str() == other.0.as_os_str()
    }
}

impl Eq for PathKey {}

impl std::hash::Hash for PathKey {
    /// As `OsStr` hashes: what `Borrow<OsStr>` needs.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.as_os_str().hash(h)
    }
}

impl std::borrow::Borrow<std::ffi::OsStr> for PathKey {
    fn borrow(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

/// An include-dir list as one map key: the paths joined by NUL (which no path holds).
fn dirs_key(dirs: &[PathBuf]) -> std::ffi::OsString {
    let mut key = std::ffi::OsString::new();
    for (i, d) in dirs.iter().enumerate() {
        if i > 0 {
            key.push("\0");
        }
        key.push(d);
    }
    key
}

/// What a directory entry is, as its listing says (symlinks are followed on demand).
#[derive(Clone, Copy)]
enum EntryKind {
    File,
    Other,
    Link,
}

/// A recorded dependency as it is now: its name as records write it and its content
/// hash, shared by every record that names it (one allocation per file, not per line).
#[derive(Clone)]
pub struct DepNow {
    pub name: Arc<str>,
    pub hash: Arc<str>,
}

/// What one thread has answered for record dependency names, for one `Files` (its id
/// and `forget` generation) and one base directory: a no-op plan checks ~80 names per
/// record on two threads, and a map shared between them cost more in lock traffic than
/// the lookups themselves.
struct ThreadDeps {
    owner: (u64, u64),
    base: PathBuf,
    names: HashMap<Box<str>, DepNow, IdHash>,
}

thread_local! {
    static THREAD_DEPS: std::cell::RefCell<Option<ThreadDeps>> = const { std::cell::RefCell::new(None) };
}

/// Record dependencies looked up by name (see `Files::with_deps`).
pub struct DepLookup<'a> {
    files: &'a Files,
    known: &'a mut ThreadDeps,
}

impl DepLookup<'_> {
    /// A dependency named as records name it (`key_name`: relative to the base, or
    /// absolute) as it is now. `Files::info` answers the first time; Err (gone,
    /// unreadable) is not remembered.
    pub fn get(&mut self, name: &str) -> io::Result<DepNow> {
        if let Some(now) = self.known.names.get(name) {
            return Ok(now.clone());
        }
        let info = self.files.info(&key_path(&self.known.base, name))?;
        let now = DepNow {
            name: name.into(),
            hash: info.hash.as_str().into(),
        };
        self.known.names.insert(name.into(), now.clone());
        Ok(now)
    }
}

/// A directory's entries by name; None when the directory cannot be read.
type Listing = Option<Arc<HashMap<std::ffi::OsString, EntryKind, IdHash>>>;

/// Content hashes of files, memoized within the process and across runs.
///
/// Plans look files up from many rayon threads: the hot maps are behind `RwLock`s, so
/// the common case (already known) takes a shared lock and never waits on a futex. The
/// include graph is written by one closure batch at a time (`building`).
pub struct Files {
    memo_path: Option<PathBuf>,
    old: HashMap<PathKey, MemoEntry, IdHash>,
    fresh: Mutex<HashMap<PathKey, MemoEntry, IdHash>>,
    seen: RwLock<HashMap<PathKey, Arc<FileInfo>, IdHash>>,
    /// Include directories are listed once each; `#include` resolution looks names up
    /// in the listing instead of probing every directory with `stat`.
    listings: RwLock<HashMap<PathKey, Listing, IdHash>>,
    graph: RwLock<Graph>,
    /// Held while closures are computed (and while `forget` resets the graph): the
    /// graph has one writer, so a batch's files can be read in parallel without locks
    /// and merged between waves.
    building: Mutex<()>,
    /// What the closure memo is told while closures are found (see there).
    persist: closure_memo::Persist,
    /// Tells this `Files` and its `forget`s apart in the per-thread dependency names.
    id: u64,
    generation: std::sync::atomic::AtomicU64,
    pub reads: std::sync::atomic::AtomicUsize,
}

fn ns(t: io::Result<SystemTime>) -> i128 {
    t.ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

fn now_ns() -> i128 {
    ns(Ok(SystemTime::now()))
}

impl Files {
    /// A memo persisted at `memo_path` (None: in-process only).
    pub fn new(memo_path: Option<PathBuf>) -> Files {
        let old = memo_path
            .as_ref()
            .and_then(|p| fs::read(p).ok())
            .and_then(|b| serde_json::from_slice::<MemoFile>(&b).ok())
            .filter(|m| m.version == MEMO_VERSION)
            .map(|m| m.entries)
            .unwrap_or_default();
        Files {
            memo_path,
            old,
            fresh: Mutex::default(),
            seen: RwLock::default(),
            listings: RwLock::default(),
            graph: RwLock::default(),
            building: Mutex::default(),
            persist: Default::default(),
            id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            generation: Default::default(),
            reads: Default::default(),
        }
    }

    /// The content hash and `#include`s of a file.
    pub fn info(&self, path: &Path) -> io::Result<Arc<FileInfo>> {
        if let Some(i) = self.known(path) {
            return Ok(i);
        }
        let info = self.probe(path)?;
        Ok(self
            .seen
            .write()
            .expect("memo lock")
            .entry(PathKey::of(path))
            .or_insert(info)
            .clone())
    }

    /// What this process already knows of a file.
    fn known(&self, path: &Path) -> Option<Arc<FileInfo>> {
        self.seen
            .read()
            .expect("memo lock")
            .get(path.as_os_str())
            .cloned()
    }

    /// A file as it is now: from the persisted memo when its stat still matches, else
    /// read and hashed (and kept for the memo). Not remembered in `seen`: `info` does
    /// that per file, a closure batch once per wave.
    fn probe(&self, path: &Path) -> io::Result<Arc<FileInfo>> {
        let meta = fs::metadata(path)?;
        // Sources, inputs and depfile entries are regular files: a FIFO would hang the
        // plan, a device (`/dev/zero`) would be read forever.
        if !meta.is_file() {
            let found = if meta.is_dir() {
                "a directory"
            } else {
                "a special file (FIFO, socket or device)"
            };
            return Err(crate::fsutil::not_regular(path, found));
        }
        let now = Stamp::of(&meta);
        let trusted = self
            .old
            .get(path.as_os_str())
            .filter(|e| e.stamp() == now && settled(&now, e.hashed_at_ns));
        let info = match trusted {
            // Trusted: the memo's entry is already in `old` and is written back from
            // there; nothing is read, hashed or copied into `fresh`.
            Some(e) => e.info.clone(),
            None => {
                let hashed_at_ns = now_ns();
                let info = read_info(path, meta.len())?;
                self.reads
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let entry = MemoEntry {
                    size: now.size,
                    mtime_ns: now.mtime_ns,
                    ctime_ns: now.ctime_ns,
                    ino: now.ino,
                    hashed_at_ns,
                    info: Arc::new(info),
                };
                let info = entry.info.clone();
                self.fresh
                    .lock()
                    .expect("memo lock")
                    .insert(PathKey::of(path), entry);
                info
            }
        };
        Ok(info)
    }

    /// Run `f` with this thread's answers for record dependency names under `base`
    /// (kept per thread, for this `Files`, until `forget`): a hit check looks up ~80
    /// names per record without building a path or taking a lock for each.
    pub fn with_deps<R>(&self, base: &Path, f: impl FnOnce(&mut DepLookup<'_>) -> R) -> R {
        let owner = (
            self.id,
            self.generation.load(std::sync::atomic::Ordering::Acquire),
        );
        THREAD_DEPS.with(|cell| {
            let mut cell = cell.borrow_mut();
            let known = match &mut *cell {
                Some(k) if k.owner == owner && k.base == base => k,
                other => other.insert(ThreadDeps {
                    owner,
                    base: base.to_path_buf(),
                    names: HashMap::default(),
                }),
            };
            f(&mut DepLookup { files: self, known })
        })
    }

    /// Whether a file this process took the content of differs now from when it did
    /// (size, mtime, ctime or inode; gone counts as changed): hashed here, or trusted
    /// from the stat memo (its entry's stamp is the one it had then). A file this
    /// process never looked at: false.
    pub fn changed_since_hashed(&self, path: &Path) -> bool {
        let key = path.as_os_str();
        let hashed = self
            .fresh
            .lock()
            .expect("memo lock")
            .get(key)
            .map(MemoEntry::stamp);
        let stamp = match hashed {
            Some(s) => s,
            None => {
                let consulted = self.seen.read().expect("memo lock").contains_key(key);
                match self.old.get(key).filter(|_| consulted) {
                    Some(e) => e.stamp(),
                    None => return false,
                }
            }
        };
        match fs::metadata(path) {
            Ok(m) => Stamp::of(&m) != stamp,
            Err(_) => true,
        }
    }

    /// Forget what this process learned about file contents (not the persisted memo,
    /// which re-checks every file by its stat): the next key computed reads files anew.
    pub fn forget(&self) {
        let _no_batch = self.building.lock().expect("closure batch");
        self.persist.forgot();
        self.seen.write().expect("memo lock").clear();
        // A header created meanwhile must be found: include dirs are listed again.
        self.listings.write().expect("memo lock").clear();
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        *self.graph.write().expect("graph") = Graph::default();
    }

    pub fn hash(&self, path: &Path) -> io::Result<String> {
        Ok(self.info(path)?.hash.clone())
    }

    /// Write the stat memo and the closure memo back (atomically; a failure only costs
    /// re-hashing or re-walking next time).
    pub fn save(&self) {
        // The two memos are separate files: written side by side when both are due.
        std::thread::scope(|s| {
            if self.persist.due() {
                s.spawn(|| self.save_closures());
            }
            self.save_stats();
        });
    }

    fn save_stats(&self) {
        let Some(path) = &self.memo_path else { return };
        let fresh = self.fresh.lock().expect("memo lock");
        // Nothing was hashed: the file on disk already says all we know.
        if self.reads.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return;
        }
        // Streamed, and borrowing both maps: neither a merged copy of the memo nor the
        // whole JSON document is ever in memory (a cold plan's peak).
        let consulted = self.seen.read().expect("memo lock");
        let file = MemoOut {
            version: MEMO_VERSION,
            entries: MergedEntries {
                old: &self.old,
                fresh: &fresh,
                consulted: &consulted,
            },
        };
        let _ = crate::fsutil::write_atomic_with(path, |w| {
            serde_json::to_writer(w, &file).map_err(io::Error::other)
        });
    }

    fn dir_set(&self, dirs: &[PathBuf]) -> u32 {
        if let Some(&id) = self
            .graph
            .read()
            .expect("graph")
            .dir_sets
            .get(&dirs_key(dirs))
        {
            return id;
        }
        self.graph.write().expect("graph").dir_set(dirs)
    }

    /// The file an include names: beside the including file (`"x"` only), then in each
    /// include dir. A plain name (one component) is looked up in the directories'
    /// listings, so a miss builds no path.
    fn resolve(&self, here: &Path, dirs: &[PathBuf], inc: &Include) -> Option<PathBuf> {
        let name = Path::new(&inc.name);
        if name.is_absolute() {
            return self.is_file(name).then(|| normalize(name));
        }
        let mut candidates = inc
            .quoted
            .then_some(here)
            .into_iter()
            .chain(dirs.iter().map(PathBuf::as_path));
        let plain = !inc.name.contains('/') && inc.name != "." && inc.name != "..";
        if plain {
            candidates
                .find(|d| self.has_file(d, name))
                .map(|d| normalize(&d.join(name)))
        } else {
            candidates
                .map(|d| d.join(name))
                .find(|p| self.is_file(p))
                .map(|p| normalize(&p))
        }
    }

    /// Whether `path` is a regular file (following symlinks), answered from the listing
    /// of its directory: one `readdir` per directory instead of one failed `stat` per
    /// (include, directory) pair.
    fn is_file(&self, path: &Path) -> bool {
        match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => self.has_file(dir, Path::new(name)),
            _ => path.is_file(),
        }
    }

    /// Whether `dir` holds a regular file `name` (one component), by its listing.
    fn has_file(&self, dir: &Path, name: &Path) -> bool {
        let listing = self.listing(dir);
        let path = || dir.join(name);
        let name = name.as_os_str();
        match listing.as_ref().and_then(|l| l.get(name)) {
            Some(EntryKind::File) => true,
            Some(EntryKind::Other) => false,
            Some(EntryKind::Link) => {
                // The link's target can change with no listing changing.
                self.persist.volatile();
                path().is_file()
            }
            // Not listed (or not listable): the slow, exact answer only when the listing
            // could not be read; a missing name is simply absent.
            None => listing.is_none() && path().is_file(),
        }
    }

    fn listing(&self, dir: &Path) -> Listing {
        if let Some(l) = self
            .listings
            .read()
            .expect("memo lock")
            .get(dir.as_os_str())
        {
            return l.clone();
        }
        self.note_dir(dir);
        let listing = fs::read_dir(dir).ok().map(|rd| {
            Arc::new(
                rd.filter_map(Result::ok)
                    .map(|e| {
                        let kind = match e.file_type() {
                            Ok(t) if t.is_file() => EntryKind::File,
                            Ok(t) if t.is_symlink() => EntryKind::Link,
                            _ => EntryKind::Other,
                        };
                        (e.file_name(), kind)
                    })
                    .collect::<HashMap<_, _, IdHash>>(),
            )
        });
        self.listings
            .write()
            .expect("memo lock")
            .entry(PathKey::of(dir))
            .or_insert(listing)
            .clone()
    }
}

/// A file's name in keys and records: relative to `base` when inside it, else absolute.
pub fn key_name(base: &Path, path: &Path) -> String {
    match path.strip_prefix(base) {
        Ok(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/"),
        Err(_) => path.display().to_string(),
    }
}

/// Resolve a key name back to a path.
pub fn key_path(base: &Path, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

/// Lexical normalization (`a/./b/../c` → `a/c`) without touching the file system.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn read_info(path: &Path, size: u64) -> io::Result<FileInfo> {
    let mut f = crate::fsutil::open_regular(path)?;
    let mut hasher = blake3::Hasher::new();
    let includes = if size <= SCAN_LIMIT {
        // `size + 1`: the read that finds the end needs no growth; `take` keeps std from
        // asking the size again (an `fstat` and an `lseek` per file).
        let mut buf = Vec::with_capacity(size as usize + 1);
        (&mut f).take(u64::MAX).read_to_end(&mut buf)?;
        hasher.update(&buf);
        scan_includes(&buf)
    } else {
        hasher.update_reader(&mut f)?;
        Vec::new()
    };
    Ok(FileInfo {
        hash: hasher.finalize().to_hex().to_string(),
        includes,
    })
}

/// `#include "x"` and `#include <x>` lines. `#if` is not evaluated (an
/// over-approximation); computed includes (`#include MACRO`) are skipped — the depfile
/// re-check covers them.
pub fn scan_includes(text: &[u8]) -> Vec<Include> {
    let mut out = Vec::new();
    for line in text.split(|b| *b == b'\n') {
        let line = trim_start(line);
        let Some(rest) = line.strip_prefix(b"#") else {
            continue;
        };
        let rest = trim_start(rest);
        let Some(rest) = rest.strip_prefix(b"include") else {
            continue;
        };
        let rest = trim_start(rest);
        let (close, quoted) = match rest.first() {
            Some(b'"') => (b'"', true),
            Some(b'<') => (b'>', false),
            _ => continue,
        };
        let body = &rest[1..];
        if let Some(end) = body.iter().position(|b| *b == close) {
            if let Ok(name) = std::str::from_utf8(&body[..end]) {
                if !name.is_empty() {
                    out.push(Include {
                        quoted,
                        name: name.to_string(),
                    });
                }
            }
        }
    }
    out
}

fn trim_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| **c == b' ' || **c == b'\t').count();
    &b[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_include_is_one_string_whatever_its_name() {
        for (quoted, name) in [
            (true, "a.h"),
            (false, "sys/b.h"),
            (true, "<odd>"),
            (false, "'q\"x\\y'"),
        ] {
            let inc = Include {
                quoted,
                name: name.to_string(),
            };
            let text = serde_json::to_string(&inc).unwrap();
            assert_eq!(
                serde_json::from_str::<Include>(&text).unwrap(),
                inc,
                "{text}"
            );
        }
        assert!(serde_json::from_str::<Include>("\"h.h\"").is_err());
        assert!(serde_json::from_str::<Include>("\"\"").is_err());
    }

    #[test]
    fn a_memo_of_another_version_is_read_as_none_and_replaced() {
        let d = tempfile::tempdir().unwrap();
        let memo = d.path().join("statmemo.json");
        let file = d.path().join("a.h");
        fs::write(&file, "#include \"b.h\"\n").unwrap();
        let v1 = format!(
            r#"{{"version":1,"entries":{{"{}":{{"size":18,"mtime_ns":0,"ctime_ns":0,"ino":1,"hashed_at_ns":9,"info":{{"hash":"x","includes":[]}}}}}}}}"#,
            file.display()
        );
        fs::write(&memo, v1).unwrap();
        let f = Files::new(Some(memo.clone()));
        assert!(f.old.is_empty());
        let info = f.info(&file).unwrap();
        assert_eq!(
            info.includes,
            [Include {
                quoted: true,
                name: "b.h".into()
            }]
        );
        f.save();
        let again = Files::new(Some(memo));
        assert_eq!(again.old.len(), 1);
        assert_eq!(again.old[file.as_os_str()].info.hash, info.hash);
        assert_eq!(again.old[file.as_os_str()].info.includes, info.includes);
    }

    #[test]
    fn the_memo_drops_entries_of_files_gone_and_keeps_the_others() {
        let d = tempfile::tempdir().unwrap();
        let memo = d.path().join("statmemo.json");
        let file = |n: &str| d.path().join(n);
        for n in ["kept.h", "gone.h", "unread.h"] {
            fs::write(file(n), format!("// {n}\n")).unwrap();
        }
        let f = Files::new(Some(memo.clone()));
        for n in ["kept.h", "gone.h", "unread.h"] {
            f.hash(&file(n)).unwrap();
        }
        f.save();
        fs::remove_file(file("gone.h")).unwrap();
        fs::write(file("new.h"), "// new\n").unwrap();
        // The next run reads kept.h and hashes new.h; unread.h is not asked about.
        let f = Files::new(Some(memo.clone()));
        f.hash(&file("kept.h")).unwrap();
        f.hash(&file("new.h")).unwrap();
        f.save();
        let names = Files::new(Some(memo))
            .old
            .into_keys()
            .map(|k| k.0)
            .collect::<std::collections::BTreeSet<_>>();
        let want = ["kept.h", "new.h", "unread.h"]
            .map(file)
            .into_iter()
            .collect();
        assert_eq!(names, want);
    }

    #[test]
    fn scans_includes() {
        let src = b"#include \"a.h\"\n  #  include <b/c.h>\n#define X \"y.h\"\n#include X\n// #include \"no.h\"\n#includex\n";
        let inc = scan_includes(src);
        assert_eq!(
            inc,
            vec![
                Include {
                    quoted: true,
                    name: "a.h".into()
                },
                Include {
                    quoted: false,
                    name: "b/c.h".into()
                }
            ]
        );
    }

    #[test]
    fn encoding_is_length_prefixed() {
        let mut a = KeyHasher::new("k");
        a.field("x", b"ab");
        a.field("y", b"c");
        let mut b = KeyHasher::new("k");
        b.field("x", b"a");
        b.field("y", b"bc");
        assert_ne!(a.finish(), b.finish());
    }

    /// Keys live in shared caches: how fields are gathered must never change what is
    /// hashed. Each field is (tag length, tag, value length, value), lengths as u64 LE,
    /// after the schema and kind fields, all hashed as one BLAKE3 stream.
    #[test]
    fn a_key_is_blake3_of_the_length_prefixed_fields_in_order() {
        let mut h = KeyHasher::new("kernel");
        h.field("command", b"cc -c {source}");
        h.file("source", "k.c", "abc");
        let mut want = Vec::new();
        for (tag, value) in [
            ("schema", KEY_SCHEMA.as_bytes()),
            ("kind", b"kernel".as_slice()),
            ("command", b"cc -c {source}".as_slice()),
            ("source", b"k.c".as_slice()),
            ("content", b"abc".as_slice()),
        ] {
            want.extend_from_slice(&(tag.len() as u64).to_le_bytes());
            want.extend_from_slice(tag.as_bytes());
            want.extend_from_slice(&(value.len() as u64).to_le_bytes());
            want.extend_from_slice(value);
        }
        let mut streamed = blake3::Hasher::new();
        for piece in want.chunks(7) {
            streamed.update(piece);
        }
        assert_eq!(h.finish(), streamed.finalize().to_hex().to_string());
    }

    /// Times are read as i64 nanoseconds: a memo whose time does not fit is not read
    /// (every file is hashed again), never misread.
    #[test]
    fn a_memo_with_a_time_out_of_range_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        let memo = d.path().join("statmemo.json");
        let file = d.path().join("a.h");
        fs::write(&file, "// a\n").unwrap();
        let f = Files::new(Some(memo.clone()));
        f.hash(&file).unwrap();
        f.save();
        assert_eq!(Files::new(Some(memo.clone())).old.len(), 1);
        let text = fs::read_to_string(&memo).unwrap();
        let entry: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mtime = entry["entries"][file.to_str().unwrap()][1].to_string();
        let far = (i128::from(i64::MAX) + 1).to_string();
        fs::write(&memo, text.replacen(&mtime, &far, 1)).unwrap();
        assert!(Files::new(Some(memo)).old.is_empty());
    }
}
