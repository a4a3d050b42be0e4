//! The closure memo (docs/cache.md, "closure memo"): include closures kept across runs
//! beside the stat memo, so a plan whose headers did not change does not walk them again.
//!
//! A closure depends on the content of its source and members (their `#include`s) and
//! on the listings of the directories includes were resolved in. The memo keeps both:
//! every file with its content hash, and every directory listed with its stamp. On
//! restore, a directory that changed (an entry added, removed or renamed changes its
//! mtime) drops the whole memo; a file whose content changed drops the closures that
//! hold it or come from it. What is kept is exactly what computing anew would give.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::closure::{Bits, ClosureSet, Table};
use super::{now_ns, settled, Files, Node, PathKey, KEY_SCHEMA};
use crate::base::fsutil::Stamp;

/// 1: first version.
const VERSION: u32 = 1;

/// A directory an include was resolved in, as it was when listed (None: it did not
/// exist), and when it was listed.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct DirSeen {
    stamp: Option<Stamp>,
    listed_at_ns: i128,
}

impl DirSeen {
    /// Whether `dir` is listed the same now. A directory changed within `RACY_NS` of its
    /// listing may have changed again in the same timestamp tick: not trusted.
    fn holds(&self, dir: &Path) -> bool {
        let Ok(now) = dir_stamp(dir) else {
            return false;
        };
        now == self.stamp && self.stamp.is_none_or(|s| settled(&s, self.listed_at_ns))
    }
}

/// A directory's stamp as a listing of it would be remembered: None when it does not
/// exist, Err when it cannot be stat'ed (nothing can be told of it then).
fn dir_stamp(dir: &Path) -> std::io::Result<Option<Stamp>> {
    match fs::metadata(dir) {
        Ok(m) => Ok(Some(Stamp::of(&m))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a `Files` tells its closure memo while it finds closures.
#[derive(Default)]
pub(super) struct Persist {
    /// The base directory, once restored (`restore_closures`): saving is on from then.
    base: OnceLock<PathBuf>,
    /// A batch computed closures since the memo was last written.
    built: AtomicBool,
    /// `forget` reset the graph: the closures held are a part of the plan's.
    forgot: AtomicBool,
    /// Something consulted can change without a listing changing (a symlinked header,
    /// a directory that could not be stat'ed): closures computed now are not persisted.
    volatile: AtomicBool,
    /// Every directory listed to resolve includes, as it was then.
    dirs: Mutex<HashMap<PathBuf, DirSeen>>,
}

impl Persist {
    pub(super) fn built(&self) {
        self.built.store(true, Ordering::Relaxed);
    }

    pub(super) fn forgot(&self) {
        self.forgot.store(true, Ordering::Relaxed);
    }

    pub(super) fn volatile(&self) {
        self.volatile.store(true, Ordering::Relaxed);
    }

    /// Whether closures were built since the memo was last written.
    pub(super) fn due(&self) -> bool {
        self.built.load(Ordering::Relaxed)
    }
}

#[derive(Serialize, Deserialize)]
struct MemoFile {
    version: u32,
    schema: String,
    /// The directory key names are relative to.
    base: PathBuf,
    dirs: Vec<(PathBuf, DirSeen)>,
    /// Every source and member: path and content hash. A closure names them by index.
    files: Vec<(PathBuf, String)>,
    /// Include-dir lists, by index.
    sets: Vec<Vec<PathBuf>>,
    /// (source, set, digest, members as a bitset over `files`: 16 hex digits a word).
    closures: Vec<(u32, u32, String, String)>,
}

fn to_hex(bits: &Bits) -> String {
    use std::fmt::Write;
    let mut hex = String::with_capacity(16 * bits.words().len());
    for w in bits.words() {
        let _ = write!(hex, "{w:016x}");
    }
    hex
}

fn from_hex(s: &str) -> Option<Bits> {
    if !s.len().is_multiple_of(16) || !s.is_ascii() {
        return None;
    }
    let words = (0..s.len() / 16)
        .map(|i| u64::from_str_radix(&s[i * 16..i * 16 + 16], 16).ok())
        .collect::<Option<Vec<u64>>>()?;
    Some(Bits::from_words(words))
}

impl Files {
    /// Restore the closures the memo beside the stat memo holds for `base`, keeping
    /// those whose files and directories are as they were. Called once, before any
    /// closure is computed; saving is on from here (`save`).
    pub fn restore_closures(&self, base: &Path) {
        let Some(path) = self.closure_memo_path() else {
            return;
        };
        let _ = self.persist.base.set(base.to_path_buf());
        let Some(m) = crate::base::fsutil::read_kept(&path, crate::base::fsutil::Cap::CLOSURE_MEMO)
            .and_then(|b| serde_json::from_slice::<MemoFile>(&b).ok())
        else {
            return;
        };
        if m.version != VERSION || m.schema != KEY_SCHEMA || m.base != base {
            return;
        }
        // One directory listed differently can change any resolution.
        if !m.dirs.par_iter().all(|(dir, seen)| seen.holds(dir)) {
            return;
        }
        // Each file as it is now (the stat memo, or read again), compared by content,
        // and its node.
        let now: Vec<(Node, Option<Arc<super::FileInfo>>)> = m
            .files
            .par_iter()
            .with_min_len(64)
            .map(|(path, hash)| {
                let now = self.probe(path).ok().filter(|i| i.hash == *hash);
                (Node::of(base, path, hash), now)
            })
            .collect();
        let mut changed = Bits::default();
        for (i, (_, info)) in now.iter().enumerate() {
            if info.is_none() {
                changed.insert(i as u32);
            }
        }
        let mut closures = Vec::with_capacity(m.closures.len());
        for (src, set, digest, members) in &m.closures {
            let members = match from_hex(members) {
                Some(b)
                    if b.end() <= m.files.len()
                        && (*src as usize) < m.files.len()
                        && (*set as usize) < m.sets.len() =>
                {
                    b
                }
                // A damaged memo: trust none of it.
                _ => return,
            };
            if !changed.contains(*src) && !members.meets(&changed) {
                closures.push((*src, *set, digest, members));
            }
        }

        let _one = self.building.lock().expect("closure batch");
        let mut g = self.graph.write().expect("graph");
        if !g.nodes.is_empty() {
            return;
        }
        let mut seen = self.seen.write().expect("memo lock");
        for (i, ((path, _), (node, info))) in m.files.iter().zip(now).enumerate() {
            g.nodes.push(Arc::new(node));
            g.paths.push(path.clone());
            // A file that changed keeps its slot (closures name files by index) but not
            // its path: found again, it is interned anew with what it holds now.
            if let Some(info) = info {
                g.ids.insert(PathKey::of(path), i as u32);
                seen.entry(PathKey::of(path)).or_insert(info);
            }
        }
        let sets: Vec<u32> = m.sets.iter().map(|dirs| g.dir_set(dirs)).collect();
        let table = Arc::new(Table::new(g.nodes.clone()));
        g.table = table.clone();
        for (src, set, digest, members) in closures {
            let closure = ClosureSet {
                members,
                table: table.clone(),
                extra: Vec::new(),
                digest: digest.clone(),
            };
            g.closures
                .insert((src, sets[set as usize]), Arc::new(closure));
        }
        self.persist.dirs.lock().expect("memo lock").extend(m.dirs);
    }

    /// Write the closures this process holds, when it computed any, did not `forget`,
    /// and consulted nothing that can change without a listing changing (a symlinked
    /// header, a directory it could not stat): otherwise the memo on disk is left as it
    /// is — it is checked anew on every restore. A failure only costs walking the
    /// headers next time.
    pub fn save_closures(&self) {
        let p = &self.persist;
        let (Some(path), Some(base)) = (self.closure_memo_path(), p.base.get()) else {
            return;
        };
        // Written once for what was built so far: a later call writes only if more was.
        let built = p.built.swap(false, Ordering::Relaxed);
        // After `forget` the graph holds only what was asked since: a part of the plan.
        if !built || p.forgot.load(Ordering::Relaxed) || p.volatile.load(Ordering::Relaxed) {
            return;
        }
        let g = self.graph.read().expect("graph");
        // Files by new index: only those a closure names, members first (so a
        // closure's bitset spans the headers, not the thousands of sources), in id order.
        let mut members = Bits::default();
        let mut sources = Bits::default();
        for ((src, _), c) in &g.closures {
            members.union_with(&c.members);
            sources.insert(*src);
        }
        let order: Vec<u32> = members
            .iter()
            .chain(sources.iter().filter(|&id| !members.contains(id)))
            .collect();
        // id → new index: a member's is its rank among all members (`Bits::ranks`).
        let mut index = vec![u32::MAX; g.nodes.len()];
        for (at, &id) in order.iter().enumerate() {
            index[id as usize] = at as u32;
        }
        let below = members.words_below();
        let files = order
            .iter()
            .map(|&id| {
                (
                    g.paths[id as usize].clone(),
                    g.nodes[id as usize].hash.clone(),
                )
            })
            .collect();
        let closures = g
            .closures
            .iter()
            .map(|(&(src, set), c)| {
                let ranked = c.members.ranks(&members, &below);
                (index[src as usize], set, c.digest.clone(), to_hex(&ranked))
            })
            .collect();
        let dirs = p
            .dirs
            .lock()
            .expect("memo lock")
            .iter()
            .map(|(p, d)| (p.clone(), d.clone()))
            .collect();
        let file = MemoFile {
            version: VERSION,
            schema: KEY_SCHEMA.to_string(),
            base: base.clone(),
            dirs,
            files,
            sets: g.sets.iter().map(|s| s.to_vec()).collect(),
            closures,
        };
        drop(g);
        let _ = crate::base::fsutil::write_atomic_with(&path, |w| {
            serde_json::to_writer(w, &file).map_err(std::io::Error::other)
        });
    }

    /// Beside the stat memo.
    fn closure_memo_path(&self) -> Option<PathBuf> {
        Some(self.memo_path.as_ref()?.with_file_name("closurememo.json"))
    }

    /// Note a directory listing as it is about to be read (stat before reading: a
    /// change after the stat shows as a different stamp next time).
    pub(super) fn note_dir(&self, dir: &Path) {
        let listed_at_ns = now_ns();
        let stamp = dir_stamp(dir).unwrap_or_else(|_| {
            self.persist.volatile();
            None
        });
        self.persist.dirs.lock().expect("memo lock").insert(
            dir.to_path_buf(),
            DirSeen {
                stamp,
                listed_at_ns,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::time::Duration;

    use crate::key::RACY_NS;

    /// Wait until what was just written is older than the racy window.
    fn past_the_racy_window() {
        std::thread::sleep(Duration::from_nanos(RACY_NS as u64 + 100_000_000));
    }

    /// A checkout: `src/a.c` → `inc/a.h` → `inc/common.h`, `src/b.c` → `inc/b.h`, and
    /// `src/c.c` → `inc/common.h`. Its directories are older than a racy tick when
    /// returned, so their listings can be trusted.
    fn checkout() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let (src, inc) = (tmp.path().join("src"), tmp.path().join("inc"));
        fs::create_dir_all(&src).unwrap();
        fs::create_dir_all(&inc).unwrap();
        fs::create_dir_all(tmp.path().join("job")).unwrap();
        for (path, text) in [
            (src.join("a.c"), "#include \"a.h\"\n"),
            (src.join("b.c"), "#include <b.h>\n"),
            (src.join("c.c"), "#include \"common.h\"\n"),
            (inc.join("a.h"), "#include \"common.h\"\n"),
            (inc.join("b.h"), "// b\n"),
            (inc.join("common.h"), "// common\n"),
        ] {
            fs::write(path, text).unwrap();
        }
        past_the_racy_window();
        tmp
    }

    fn files(base: &Path) -> Files {
        let f = Files::new(Some(base.join("job").join("statmemo.json")));
        f.restore_closures(base);
        f
    }

    fn sources(base: &Path) -> Vec<PathBuf> {
        ["a.c", "b.c", "c.c"]
            .map(|s| base.join("src").join(s))
            .to_vec()
    }

    /// (names, digest) of each source's closure, computed by `f`.
    fn closures(f: &Files, base: &Path) -> Vec<(BTreeSet<String>, String)> {
        let dirs = vec![base.join("inc")];
        let srcs = sources(base);
        let wanted: Vec<(&Path, &[PathBuf])> = srcs
            .iter()
            .map(|s| (s.as_path(), dirs.as_slice()))
            .collect();
        f.closures(base, &wanted)
            .into_iter()
            .map(|c| {
                let c = c.unwrap();
                (
                    c.files().map(|n| n.name.clone()).collect(),
                    c.digest.clone(),
                )
            })
            .collect()
    }

    /// Which sources' closures a fresh restore holds.
    fn restored(base: &Path) -> Vec<bool> {
        let f = files(base);
        let dirs = vec![base.join("inc")];
        sources(base)
            .iter()
            .map(|s| f.memoized(s, &dirs).is_some())
            .collect()
    }

    /// The closures computed by a run with the memo, which then saves it.
    fn computed_and_saved(base: &Path) -> Vec<(BTreeSet<String>, String)> {
        let first = files(base);
        let got = closures(&first, base);
        first.save();
        got
    }

    fn computed_anew(base: &Path) -> Vec<(BTreeSet<String>, String)> {
        closures(&Files::new(None), base)
    }

    #[test]
    fn a_restore_gives_what_computing_anew_gives_without_listing_a_directory() {
        let tmp = checkout();
        let base = tmp.path();
        let want = computed_and_saved(base);
        assert_eq!(want, computed_anew(base));

        // Members come first in the file table: three headers, one word per closure,
        // however many sources follow them.
        let path = base.join("job").join("closurememo.json");
        let m: MemoFile = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(m.files.len(), 6);
        assert!(m.files[..3]
            .iter()
            .all(|(p, _)| p.starts_with(base.join("inc"))));
        assert!(
            m.closures.iter().all(|c| c.3.len() == 16),
            "{:?}",
            m.closures
        );

        let again = files(base);
        assert_eq!(restored(base), [true, true, true]);
        assert_eq!(closures(&again, base), want);
        // Nothing was walked: no batch ran, no directory was listed.
        assert!(!again.persist.due());
        assert!(again.listings.read().unwrap().is_empty());
        // A run that computed nothing leaves the memo file as it was.
        let before = fs::read(&path).unwrap();
        again.save();
        assert_eq!(fs::read(&path).unwrap(), before);
    }

    #[test]
    fn an_edited_header_drops_the_closures_that_hold_it_and_only_those() {
        let tmp = checkout();
        let base = tmp.path();
        computed_and_saved(base);
        // Same size, other content: the stat memo's stamp may not even tell.
        fs::write(base.join("inc/common.h"), "// COMMON\n").unwrap();
        assert_eq!(restored(base), [false, true, false]);
        let f = files(base);
        let got = closures(&f, base);
        assert_eq!(got, computed_anew(base));
        f.save();
        // Written again with the new content: restored whole next time.
        assert_eq!(restored(base), [true, true, true]);
        assert_eq!(closures(&files(base), base), got);
    }

    #[test]
    fn a_header_added_to_a_listed_directory_drops_the_whole_memo() {
        let tmp = checkout();
        let base = tmp.path();
        computed_and_saved(base);
        // A header beside the source now shadows inc/a.h for `#include "a.h"`.
        fs::write(base.join("src/a.h"), "// shadow\n").unwrap();
        assert_eq!(restored(base), [false, false, false]);
        let got = closures(&files(base), base);
        assert_eq!(got, computed_anew(base));
        assert!(got[0].0.contains("src/a.h"), "{:?}", got[0]);
    }

    #[test]
    fn a_symlinked_header_keeps_new_closures_out_of_the_memo() {
        let tmp = checkout();
        let base = tmp.path();
        fs::rename(base.join("inc/b.h"), base.join("b.real")).unwrap();
        std::os::unix::fs::symlink(base.join("b.real"), base.join("inc/b.h")).unwrap();
        let f = files(base);
        let got = closures(&f, base);
        assert!(got[1].0.contains("inc/b.h"));
        f.save();
        assert!(!f.closure_memo_path().unwrap().exists());
    }

    #[test]
    fn a_damaged_or_foreign_memo_is_ignored() {
        let tmp = checkout();
        let base = tmp.path();
        let want = computed_and_saved(base);
        let path = base.join("job").join("closurememo.json");
        let good = fs::read_to_string(&path).unwrap();
        let mut m: MemoFile = serde_json::from_str(&good).unwrap();
        // A member index past the file table.
        m.closures[0].3 = format!("{:016x}", 1u64 << 40);
        let damaged = serde_json::to_string(&m).unwrap();
        let mut other_base: MemoFile = serde_json::from_str(&good).unwrap();
        other_base.base = PathBuf::from("/elsewhere");
        for text in [
            "{not json".to_string(),
            damaged,
            serde_json::to_string(&other_base).unwrap(),
            good.replace(KEY_SCHEMA, "scenerun-key-0"),
        ] {
            fs::write(&path, &text).unwrap();
            assert_eq!(restored(base), [false, false, false], "{text:.80}");
            assert_eq!(closures(&files(base), base), want);
        }
    }

    #[test]
    fn closures_after_forget_are_not_written() {
        let tmp = checkout();
        let base = tmp.path();
        let f = files(base);
        closures(&f, base);
        f.forget();
        closures(&f, base);
        f.save();
        assert!(!f.closure_memo_path().unwrap().exists());
    }

    /// Random include graphs (cycles, shadowed names, missing headers, `../` names):
    /// every closure computed and saved is restored as it was computed, and as a plain
    /// file-by-file walk finds it.
    #[test]
    fn random_graphs_are_restored_as_they_were_computed() {
        use crate::key::closure::tests::{random_ask, random_tree, reference, Rng};
        let trees: Vec<_> = (1..10u64)
            .map(|seed| {
                let tmp = tempfile::tempdir().unwrap();
                let base = tmp.path();
                fs::create_dir_all(base.join("job")).unwrap();
                let mut rng = Rng::seeded(seed);
                let sources = random_tree(base, &mut rng);
                let asks: Vec<(PathBuf, Vec<PathBuf>)> = (0..6)
                    .map(|round| random_ask(base, &mut rng, sources, round))
                    .collect();
                (tmp, asks)
            })
            .collect();
        past_the_racy_window();
        for (seed, (tmp, asks)) in trees.iter().enumerate() {
            let base = tmp.path();
            let wanted: Vec<(&Path, &[PathBuf])> = asks
                .iter()
                .map(|(s, d)| (s.as_path(), d.as_slice()))
                .collect();
            let first = files(base);
            let computed: Vec<_> = first
                .closures(base, &wanted)
                .into_iter()
                .map(Result::unwrap)
                .collect();
            first.save();
            let again = files(base);
            for ((source, dirs), c) in asks.iter().zip(&computed) {
                let r = again.memoized(source, dirs).expect("restored");
                let names = |c: &ClosureSet| -> BTreeSet<String> {
                    c.files().map(|n| n.name.clone()).collect()
                };
                let (want, want_digest) = reference(base, source, dirs);
                assert_eq!(names(&r), names(c), "seed {seed}");
                assert_eq!(names(&r), want, "seed {seed}");
                assert_eq!(r.digest, c.digest, "seed {seed}");
                assert_eq!(r.digest, want_digest, "seed {seed}");
            }
        }
    }

    #[test]
    fn bitsets_round_trip_through_hex() {
        let mut b = Bits::default();
        for id in [0, 5, 63, 64, 130] {
            b.insert(id);
        }
        let hex = to_hex(&b);
        assert_eq!(hex.len(), 3 * 16);
        assert_eq!(from_hex(&hex), Some(b));
        assert_eq!(from_hex("xyz"), None);
        assert_eq!(from_hex(&"g".repeat(16)), None);
        assert_eq!(from_hex(&"0".repeat(32)), Some(Bits::default()));
    }
}
