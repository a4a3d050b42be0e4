//! The stat memo (docs/cache.md): each file's content hash and `#include` lines,
//! memoized within the process and across runs by (path, size, mtime, ctime, inode),
//! with git's "racy clean" rule (a file changed within the memo's own timestamp tick is
//! read again); and the record dependencies a lookup re-checks, answered by name.

use std::collections::HashMap;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{
    closure_memo, key_path, scan_includes, Graph, IdHash, Include, Listing, PathKey, SCAN_LIMIT,
};
use crate::base::fsutil::Stamp;

/// A file whose mtime or ctime is this close to the moment it was hashed may still change
/// within the same timestamp tick ("racy clean"): its memo entry is not trusted.
pub(super) const RACY_NS: i128 = 1_000_000_000;

/// Whether what `stamp` describes was last changed more than `RACY_NS` before `at_ns`
/// (when it was hashed or listed), so the stamp alone tells any later change.
pub(super) fn settled(stamp: &Stamp, at_ns: i128) -> bool {
    stamp.mtime_ns.max(stamp.ctime_ns) + RACY_NS < at_ns
}

/// What is known about a file's content.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileInfo {
    pub hash: String,
    pub includes: Vec<Include>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(from = "MemoWire")]
pub(super) struct MemoEntry {
    pub(super) size: u64,
    pub(super) mtime_ns: i128,
    pub(super) ctime_ns: i128,
    pub(super) ino: u64,
    pub(super) hashed_at_ns: i128,
    /// Shared with every lookup that trusts the entry: no copy of the include list.
    pub(super) info: Arc<FileInfo>,
}

/// A memo entry as the file holds it, one array without field names (a plan reads
/// thousands): `[size, mtime_ns, ctime_ns, ino, hashed_at_ns, hash, [includes]]`.
/// The times are read as `i64` (nanoseconds since 1970 fit until 2262): serde_json reads
/// an `i128` through a string of its own, which was half the cost of reading the memo.
/// A time out of that range fails the read, and an unreadable memo is ignored.
#[derive(Deserialize)]
pub(super) struct MemoWire(pub(super) u64, i64, i64, u64, i64, String, Vec<Include>);

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
    pub(super) fn stamp(&self) -> Stamp {
        Stamp {
            size: self.size,
            mtime_ns: self.mtime_ns,
            ctime_ns: self.ctime_ns,
            ino: self.ino,
        }
    }
}

#[derive(Default, Serialize, Deserialize)]
pub(super) struct MemoFile {
    pub(super) version: u32,
    pub(super) entries: HashMap<PathKey, MemoEntry, IdHash>,
}

/// 2: entries as arrays, includes as strings.
pub(super) const MEMO_VERSION: u32 = 2;

/// `MemoFile` as written: the entries of this run over those of the last.
#[derive(Serialize)]
pub(super) struct MemoOut<'a> {
    pub(super) version: u32,
    pub(super) entries: MergedEntries<'a>,
}

/// The last run's entries that this one did not replace, then this run's. An old entry
/// this run did not consult is kept only while its file is still there: a checkout
/// restored under another path, or a deleted file, would otherwise stay in the memo
/// (read on every run) forever.
pub(super) struct MergedEntries<'a> {
    pub(super) old: &'a HashMap<PathKey, MemoEntry, IdHash>,
    pub(super) fresh: &'a HashMap<PathKey, MemoEntry, IdHash>,
    pub(super) consulted: &'a HashMap<PathKey, Arc<FileInfo>, IdHash>,
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
pub(super) struct ThreadDeps {
    pub(super) owner: (u64, u64),
    pub(super) base: PathBuf,
    pub(super) names: HashMap<Box<str>, DepNow, IdHash>,
}

thread_local! {
    static THREAD_DEPS: std::cell::RefCell<Option<ThreadDeps>> = const { std::cell::RefCell::new(None) };
}

/// Record dependencies looked up by name (see `Files::with_deps`).
pub struct DepLookup<'a> {
    pub(super) files: &'a Files,
    pub(super) known: &'a mut ThreadDeps,
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

/// Content hashes of files, memoized within the process and across runs.
///
/// Plans look files up from many rayon threads: the hot maps are behind `RwLock`s, so
/// the common case (already known) takes a shared lock and never waits on a futex. The
/// include graph is written by one closure batch at a time (`building`).
pub struct Files {
    pub(super) memo_path: Option<PathBuf>,
    pub(super) old: HashMap<PathKey, MemoEntry, IdHash>,
    pub(super) fresh: Mutex<HashMap<PathKey, MemoEntry, IdHash>>,
    pub(super) seen: RwLock<HashMap<PathKey, Arc<FileInfo>, IdHash>>,
    /// Include directories are listed once each; `#include` resolution looks names up
    /// in the listing instead of probing every directory with `stat`.
    pub(super) listings: RwLock<HashMap<PathKey, Listing, IdHash>>,
    pub(super) graph: RwLock<Graph>,
    /// Held while closures are computed (and while `forget` resets the graph): the
    /// graph has one writer, so a batch's files can be read in parallel without locks
    /// and merged between waves.
    pub(super) building: Mutex<()>,
    /// What the closure memo is told while closures are found (see there).
    pub(super) persist: closure_memo::Persist,
    /// Tells this `Files` and its `forget`s apart in the per-thread dependency names.
    pub(super) id: u64,
    pub(super) generation: std::sync::atomic::AtomicU64,
    pub reads: std::sync::atomic::AtomicUsize,
}

pub(super) fn ns(t: io::Result<SystemTime>) -> i128 {
    t.ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

pub(super) fn now_ns() -> i128 {
    ns(Ok(SystemTime::now()))
}

impl Files {
    /// A memo persisted at `memo_path` (None: in-process only).
    pub fn new(memo_path: Option<PathBuf>) -> Files {
        let old = memo_path
            .as_ref()
            .and_then(|p| crate::base::fsutil::read_kept(p, crate::base::fsutil::Cap::STAT_MEMO))
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
    pub(super) fn known(&self, path: &Path) -> Option<Arc<FileInfo>> {
        self.seen
            .read()
            .expect("memo lock")
            .get(path.as_os_str())
            .cloned()
    }

    /// A file as it is now: from the persisted memo when its stat still matches, else
    /// read and hashed (and kept for the memo). Not remembered in `seen`: `info` does
    /// that per file, a closure batch once per wave.
    pub(super) fn probe(&self, path: &Path) -> io::Result<Arc<FileInfo>> {
        let meta = fs::metadata(path)?;
        // Sources, inputs and depfile entries are regular files: a FIFO would hang the
        // plan, a device (`/dev/zero`) would be read forever.
        if !meta.is_file() {
            let found = if meta.is_dir() {
                "a directory"
            } else {
                "a special file (FIFO, socket or device)"
            };
            return Err(crate::base::fsutil::not_regular(path, found));
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

    pub(super) fn save_stats(&self) {
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
        let _ = crate::base::fsutil::write_atomic_with(path, |w| {
            serde_json::to_writer(w, &file).map_err(io::Error::other)
        });
    }
}

pub(super) fn read_info(path: &Path, size: u64) -> io::Result<FileInfo> {
    let mut f = crate::base::fsutil::open_regular(path)?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
