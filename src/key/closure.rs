//! Include closures over the interned include graph (docs/cache.md, "include closure").
//!
//! Closures are computed in batches (a plan asks for all its kernels' at once), one
//! batch at a time, so the graph has a single writer. A batch finds its files a wave
//! (one include depth) at a time: the wave's files are read and their includes resolved
//! with no graph lock held, then merged into the graph on one thread.
//!
//! Each file's reach — itself and every file its `#include`s lead to — is computed once
//! per include-dir list, as a bitset over interned file ids: strongly connected
//! components (Tarjan) give every file of an include cycle the same reach, and a file's
//! reach is its component's files plus the reaches its includes lead out to. A kernel's
//! closure is then the union of its direct includes' reaches, without the source itself.
//! The closure digest hashes the files' digests in bytewise order; that order comes from
//! a rank table sorted once for all files, not from sorting each closure's digests.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

use super::{dirs_key, FileInfo, Files, Graph, IdHash, KeyHasher, Node, PathKey};

/// A set of interned file ids. Trailing zero words are trimmed, so a set of early ids
/// stays small however many files are interned later.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Bits(Vec<u64>);

impl Bits {
    pub(super) fn insert(&mut self, id: u32) {
        let (word, bit) = (id as usize / 64, 1u64 << (id % 64));
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= bit;
    }

    /// Whether the two sets share an id.
    pub(super) fn meets(&self, other: &Bits) -> bool {
        self.0.iter().zip(&other.0).any(|(a, b)| a & b != 0)
    }

    pub(super) fn contains(&self, id: u32) -> bool {
        self.0
            .get(id as usize / 64)
            .is_some_and(|w| w & (1u64 << (id % 64)) != 0)
    }

    fn remove(&mut self, id: u32) {
        if let Some(w) = self.0.get_mut(id as usize / 64) {
            *w &= !(1u64 << (id % 64));
        }
        self.trim();
    }

    pub(super) fn union_with(&mut self, other: &Bits) {
        if other.0.len() > self.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a |= b;
        }
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
        self.0.shrink_to_fit();
    }

    /// One past the largest id (0 when empty).
    pub(super) fn end(&self) -> usize {
        match self.0.last() {
            Some(&w) => (self.0.len() - 1) * 64 + (64 - w.leading_zeros() as usize),
            None => 0,
        }
    }

    /// For each word, how many ids the set holds below it (for `ranks`).
    pub(super) fn words_below(&self) -> Vec<u32> {
        self.0
            .iter()
            .scan(0u32, |n, w| {
                let below = *n;
                *n += w.count_ones();
                Some(below)
            })
            .collect()
    }

    /// Each id replaced by its rank among the ids of `among` (which holds them all;
    /// `below` is `among.words_below()`): a bit at a time, with no table per id.
    pub(super) fn ranks(&self, among: &Bits, below: &[u32]) -> Bits {
        let mut out = Bits(vec![0; among.len().div_ceil(64)]);
        for (i, &word) in self.0.iter().enumerate() {
            let (mask, base) = (among.0[i], below[i]);
            let mut w = word;
            while w != 0 {
                let bit = w.trailing_zeros();
                let r = base + (mask & ((1u64 << bit) - 1)).count_ones();
                out.0[r as usize / 64] |= 1u64 << (r % 64);
                w &= w - 1;
            }
        }
        out.trim();
        out
    }

    /// The words, lowest ids first (no trailing zero word).
    pub(super) fn words(&self) -> &[u64] {
        &self.0
    }

    pub(super) fn from_words(words: Vec<u64>) -> Bits {
        let mut b = Bits(words);
        b.trim();
        b
    }

    pub(super) fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The ids, ascending.
    pub(super) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let b = w.trailing_zeros();
                    w &= w - 1;
                    (i * 64) as u32 + b
                })
            })
        })
    }
}

/// The interned files at one moment, with their digests' bytewise order: a closure
/// walks its members in that order by scattering them into a bitset over ranks.
#[derive(Debug, Default)]
pub(super) struct Table {
    nodes: Vec<Arc<Node>>,
    /// id → position in bytewise digest order.
    rank: Vec<u32>,
    /// The digests by position: a closure copies its members' digests from one array in
    /// order, not from each file's node.
    sorted: Vec<[u8; 32]>,
}

impl Table {
    pub(super) fn new(nodes: Vec<Arc<Node>>) -> Table {
        let mut by_rank: Vec<u32> = (0..nodes.len() as u32).collect();
        by_rank.sort_unstable_by_key(|&id| order(&nodes[id as usize].digest));
        let mut rank = vec![0; nodes.len()];
        for (r, &id) in by_rank.iter().enumerate() {
            rank[id as usize] = r as u32;
        }
        let sorted = by_rank
            .iter()
            .map(|&id| nodes[id as usize].digest)
            .collect();
        Table {
            nodes,
            rank,
            sorted,
        }
    }

    /// The digests of `ids` in bytewise order: those the table names by rank, the rest
    /// (`extra`, files interned since the table was made) sorted and merged in.
    fn sorted_digests(&self, ids: &Bits, extra: &[Arc<Node>]) -> Vec<[u8; 32]> {
        let mut ranks = Bits(vec![0; self.nodes.len().div_ceil(64)]);
        for id in ids
            .iter()
            .take_while(|&id| (id as usize) < self.nodes.len())
        {
            ranks.insert(self.rank[id as usize]);
        }
        let known = ranks.iter().map(|r| self.sorted[r as usize]);
        if extra.is_empty() {
            return known.collect();
        }
        let mut known = known.peekable();
        let mut more: Vec<[u8; 32]> = extra.iter().map(|n| n.digest).collect();
        more.sort_unstable_by_key(order);
        let mut more = more.into_iter().peekable();
        let mut out = Vec::with_capacity(ranks.len() + extra.len());
        loop {
            let next = match (known.peek(), more.peek()) {
                (Some(a), Some(b)) if order(a) <= order(b) => known.next(),
                (Some(_), Some(_)) => more.next(),
                (Some(_), None) => known.next(),
                (None, _) => more.next(),
            };
            match next {
                Some(d) => out.push(d),
                None => return out,
            }
        }
    }
}

/// Bytewise order of digests, compared as two big-endian u128s (no memcmp call).
fn order(d: &[u8; 32]) -> (u128, u128) {
    let (hi, lo) = d.split_at(16);
    (
        u128::from_be_bytes(hi.try_into().expect("16 bytes")),
        u128::from_be_bytes(lo.try_into().expect("16 bytes")),
    )
}

/// An include closure: its files, and the digest that goes into kernel keys: BLAKE3 over
/// the count and the files' own digests sorted bytewise. Computed once per (source,
/// include dirs) however many kernels share them.
#[derive(Debug)]
pub struct ClosureSet {
    pub(super) members: Bits,
    /// Names the members below its length; `extra` holds the rest, in id order.
    pub(super) table: Arc<Table>,
    pub(super) extra: Vec<Arc<Node>>,
    pub digest: String,
}

impl ClosureSet {
    /// The files, in no particular order.
    pub fn files(&self) -> impl Iterator<Item = &Node> + '_ {
        let known = self.table.nodes.len();
        self.members
            .iter()
            .take_while(move |&id| (id as usize) < known)
            .map(|id| self.table.nodes[id as usize].as_ref())
            .chain(self.extra.iter().map(Arc::as_ref))
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.0.is_empty()
    }
}

pub type Closure = Arc<ClosureSet>;

/// An error reported again (one unreadable header fails every closure that reaches it;
/// `io::Error` is not `Clone`).
fn copy(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

fn reset() -> io::Error {
    io::Error::other("an include's file is missing from the include graph")
}

/// A file on the walk's call stack: its includes and the next one to visit.
struct Frame {
    id: u32,
    kids: Arc<[u32]>,
    next: usize,
}

/// A file a discovery wave reads: its path, its id when it is interned already, and the
/// include-dir sets its includes are not resolved for yet.
struct Item {
    path: PathBuf,
    id: Option<u32>,
    sets: Vec<u32>,
}

/// What a wave learned of one file: what it holds, its node (a file not interned yet)
/// and, per set of its item, the files its includes resolve to.
struct Read {
    info: Arc<FileInfo>,
    node: Option<Node>,
    kids: Vec<Vec<PathBuf>>,
}

/// Why closures of a batch could not be computed: the files that could not be read, and
/// the files (with a set) one of whose includes names such a file.
#[derive(Default)]
struct Failures {
    unread: HashMap<PathBuf, io::Error>,
    stuck: HashMap<(u32, u32), PathBuf, IdHash>,
}

impl Failures {
    /// The error of a walk that found no resolved includes for (file, set).
    fn of(&self, g: &Graph, file: u32, set: u32) -> io::Error {
        let path = self
            .stuck
            .get(&(file, set))
            .or_else(|| g.paths.get(file as usize));
        path.map_or_else(reset, |p| self.of_path(p))
    }

    fn of_path(&self, path: &Path) -> io::Error {
        match self.unread.get(path) {
            Some(e) => copy(e),
            None => reset(),
        }
    }
}

/// `f` over `items`, in order, on the rayon pool — unless this is a pool thread (a key
/// computed in a rayon job asked for a closure): then on this thread alone, so a worker
/// holding the batch lock never steals a job that waits for the same lock. The batch
/// lock keeps the pool's own jobs out of each other's way otherwise: a wave's items take
/// no lock of the graph. (Threads of its own were tried when scenerun ran on two malloc
/// arenas, and lost to their lock traffic; bench/README.md.)
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync + Send) -> Vec<R> {
    if rayon::current_thread_index().is_some() || items.len() < 64 {
        return items.iter().map(f).collect();
    }
    items.par_iter().with_min_len(16).map(f).collect()
}

impl Files {
    /// Every file the source includes, transitively, that the scanner can resolve
    /// (excluding the source itself).
    pub fn closure(&self, base: &Path, source: &Path, dirs: &[PathBuf]) -> io::Result<Closure> {
        match self.memoized(source, dirs) {
            Some(c) => Ok(c),
            None => self
                .closures(base, &[(source, dirs)])
                .pop()
                .expect("one closure asked"),
        }
    }

    /// A closure computed already (one shared lock: kernels of many scenes share one).
    pub(super) fn memoized(&self, source: &Path, dirs: &[PathBuf]) -> Option<Closure> {
        let g = self.graph.read().expect("graph");
        let src = g.ids.get(source.as_os_str())?;
        let set = g.dir_sets.get(&dirs_key(dirs))?;
        g.closures.get(&(*src, *set)).cloned()
    }

    /// The closures of many (source, include dirs), computed together: the files are
    /// found a wave at a time (`discover`), each closure is then a union of memoized
    /// reaches over the finished graph (no I/O, one thread), and the digests are
    /// computed on several threads.
    pub fn closures(
        &self,
        base: &Path,
        wanted: &[(&Path, &[PathBuf])],
    ) -> Vec<io::Result<Closure>> {
        let _one = self.building.lock().expect("closure batch");
        let sets: Vec<u32> = wanted.iter().map(|(_, dirs)| self.dir_set(dirs)).collect();
        let mut roots: Vec<(&Path, u32)> = wanted
            .iter()
            .zip(&sets)
            .filter(|((src, dirs), _)| self.memoized(src, dirs).is_none())
            .map(|((src, _), &set)| (*src, set))
            .collect();
        roots.sort_unstable();
        roots.dedup();
        let failures = self.discover(base, &roots);
        self.fresh_table();

        // Members and the rank table, one thread: a reach is memoized as it is found.
        let mut failed: HashMap<(&Path, u32), io::Error> = HashMap::new();
        let mut todo = Vec::new();
        {
            let mut g = self.graph.write().expect("graph");
            for &(src, set) in &roots {
                let made = match g.ids.get(src.as_os_str()) {
                    None => Err(failures.of_path(src)),
                    Some(&id) => members(&mut g, id, set)
                        .map_err(|file| failures.of(&g, file, set))
                        .and_then(|m| {
                            let extra = extra_nodes(&g, &m)?;
                            Ok(((id, set), m, g.table.clone(), extra))
                        }),
                };
                match made {
                    Ok(t) => todo.push(t),
                    Err(e) => {
                        failed.insert((src, set), e);
                    }
                }
            }
        }
        let made = par_map(&todo, |(_, members, table, extra)| {
            let digests = table.sorted_digests(members, extra);
            let mut h = KeyHasher::new("include-closure");
            h.field("count", &(digests.len() as u64).to_le_bytes());
            h.field("file-digests", digests.as_flattened());
            h.finish()
        });
        {
            let mut g = self.graph.write().expect("graph");
            for ((at, members, table, extra), digest) in todo.into_iter().zip(made) {
                let set = ClosureSet {
                    members,
                    table,
                    extra,
                    digest,
                };
                g.closures.entry(at).or_insert_with(|| Arc::new(set));
            }
        }
        // After they are in the graph: a memo written meanwhile that missed them is
        // written again by the next `save`.
        if !roots.is_empty() {
            self.persist.built();
        }
        wanted
            .iter()
            .zip(&sets)
            .map(|(&(src, dirs), &set)| match failed.get(&(src, set)) {
                Some(e) => Err(copy(e)),
                None => self.memoized(src, dirs).ok_or_else(reset),
            })
            .collect()
    }

    /// Read every file the roots reach whose includes are not resolved for their set
    /// yet, one include depth (a wave) at a time: a wave's files are read and their
    /// includes resolved on several threads without a graph lock, then merged on this
    /// one. Resolved includes become the graph's `children` once the last wave is in.
    fn discover(&self, base: &Path, roots: &[(&Path, u32)]) -> Failures {
        let mut fails = Failures::default();
        // (file, set) read or walked through in this batch.
        let mut visited: HashSet<(u32, u32), IdHash> = HashSet::default();
        let mut edges: Vec<(u32, u32, Vec<PathBuf>)> = Vec::new();
        let mut wave: Vec<(PathBuf, u32)> = roots
            .iter()
            .map(|&(src, set)| (src.to_path_buf(), set))
            .collect();
        while !wave.is_empty() {
            let (items, dirs) = self.unknown(wave, &fails, &mut visited);
            let reads = par_map(&items, |item| self.read_item(base, item, &dirs));
            wave = Vec::new();
            let mut g = self.graph.write().expect("graph");
            let mut seen = self.seen.write().expect("memo lock");
            for (item, read) in items.into_iter().zip(reads) {
                let read = match read {
                    Ok(r) => r,
                    Err(e) => {
                        fails.unread.insert(item.path, e);
                        continue;
                    }
                };
                let id = match (item.id, read.node) {
                    (Some(id), _) => id,
                    (None, node) => {
                        let id = g.nodes.len() as u32;
                        g.nodes.push(Arc::new(node.expect("a node for a new file")));
                        g.paths.push(item.path.clone());
                        g.ids.insert(PathKey::of(&item.path), id);
                        id
                    }
                };
                seen.entry(PathKey(item.path)).or_insert(read.info);
                for (set, kids) in item.sets.into_iter().zip(read.kids) {
                    visited.insert((id, set));
                    wave.extend(kids.iter().map(|k| (k.clone(), set)));
                    edges.push((id, set, kids));
                }
            }
        }
        let mut g = self.graph.write().expect("graph");
        for (id, set, kids) in edges {
            match kids.iter().find(|k| !g.ids.contains_key(k.as_os_str())) {
                Some(bad) => {
                    fails.stuck.insert((id, set), bad.clone());
                }
                None => {
                    let ids: Arc<[u32]> = kids.iter().map(|k| g.ids[k.as_os_str()]).collect();
                    g.children.entry((id, set)).or_insert(ids);
                }
            }
        }
        fails
    }

    /// The files of a wave to read: those not interned, and those whose includes are
    /// not resolved for the set. A file the graph knows for the set is walked through,
    /// by id, to the first files it does not.
    fn unknown(
        &self,
        wave: Vec<(PathBuf, u32)>,
        fails: &Failures,
        visited: &mut HashSet<(u32, u32), IdHash>,
    ) -> (Vec<Item>, Vec<Arc<[PathBuf]>>) {
        let g = self.graph.read().expect("graph");
        let mut items: Vec<Item> = Vec::new();
        let mut new_at: HashMap<PathBuf, usize, IdHash> = HashMap::default();
        let mut walk: Vec<(u32, u32)> = Vec::new();
        for (path, set) in wave {
            if fails.unread.contains_key(&path) {
                continue;
            }
            let Some(&id) = g.ids.get(path.as_os_str()) else {
                match new_at.get(&path) {
                    Some(&i) if !items[i].sets.contains(&set) => items[i].sets.push(set),
                    Some(_) => {}
                    None => {
                        new_at.insert(path.clone(), items.len());
                        items.push(Item {
                            path,
                            id: None,
                            sets: vec![set],
                        });
                    }
                }
                continue;
            };
            walk.push((id, set));
            while let Some((id, set)) = walk.pop() {
                if !visited.insert((id, set)) {
                    continue;
                }
                match g.children.get(&(id, set)) {
                    Some(kids) => walk.extend(kids.iter().map(|&k| (k, set))),
                    None => items.push(Item {
                        path: g.paths[id as usize].clone(),
                        id: Some(id),
                        sets: vec![set],
                    }),
                }
            }
        }
        (items, g.sets.clone())
    }

    /// One file of a wave: its content (memoized), its node if it is new, and the files
    /// its includes resolve to with each of its item's include-dir sets.
    fn read_item(&self, base: &Path, item: &Item, sets: &[Arc<[PathBuf]>]) -> io::Result<Read> {
        let info = match self.known(&item.path) {
            Some(i) => i,
            None => self.probe(&item.path)?,
        };
        let node = item
            .id
            .is_none()
            .then(|| Node::of(base, &item.path, &info.hash));
        let here = item.path.parent().unwrap_or(Path::new("/"));
        let kids = item
            .sets
            .iter()
            .map(|&set| {
                let dirs = &sets[set as usize];
                info.includes
                    .iter()
                    .filter_map(|inc| self.resolve(here, dirs, inc))
                    .collect()
            })
            .collect();
        Ok(Read { info, node, kids })
    }

    /// A new rank table over every interned file when those it does not name are many
    /// (more than an eighth of it): a closure merges the others in itself, and the
    /// table is not re-sorted for every few files a later batch adds.
    fn fresh_table(&self) {
        let nodes = {
            let g = self.graph.read().expect("graph");
            let known = g.table.nodes.len();
            if g.nodes.len() - known <= 32.max(known / 8) {
                return;
            }
            g.nodes.clone()
        };
        let table = Arc::new(Table::new(nodes));
        self.graph.write().expect("graph").table = table;
    }
}

/// The members the graph's rank table does not name (interned since it was made).
fn extra_nodes(g: &Graph, members: &Bits) -> io::Result<Vec<Arc<Node>>> {
    let known = g.table.nodes.len();
    members
        .iter()
        .skip_while(|&id| (id as usize) < known)
        .map(|id| g.nodes.get(id as usize).cloned().ok_or_else(reset))
        .collect()
}

/// A closure's files: the union of the reaches of the source's includes, less the
/// source (reached again through an include cycle, it is keyed on its own). Err names
/// a file whose includes are not resolved for the set.
fn members(g: &mut Graph, src: u32, set: u32) -> Result<Bits, u32> {
    let kids = g.children.get(&(src, set)).cloned().ok_or(src)?;
    let mut members = Bits::default();
    for &kid in kids.iter() {
        members.union_with(&*reach(g, kid, set)?);
    }
    members.remove(src);
    Ok(members)
}

/// The file and everything it reaches, memoized per (file, include-dir set): an
/// iterative Tarjan walk over the files not memoized yet, where the files of a cycle
/// share one reach. Err names a file whose includes are not resolved for the set.
fn reach(g: &mut Graph, root: u32, set: u32) -> Result<Arc<Bits>, u32> {
    if let Some(r) = g.reach.get(&(root, set)) {
        return Ok(r.clone());
    }
    // id → (visit index, lowest index reachable, still on the component stack).
    let mut state: HashMap<u32, (u32, u32, bool), IdHash> = HashMap::default();
    let mut stack: Vec<u32> = Vec::new();
    let mut calls: Vec<Frame> = Vec::new();
    let mut next = Some(root);
    loop {
        if let Some(w) = next.take() {
            let i = state.len() as u32;
            state.insert(w, (i, i, true));
            stack.push(w);
            let kids = g.children.get(&(w, set)).cloned().ok_or(w)?;
            calls.push(Frame {
                id: w,
                kids,
                next: 0,
            });
        }
        let Some(f) = calls.last_mut() else { break };
        if let Some(&w) = f.kids.get(f.next) {
            f.next += 1;
            let v = f.id;
            if g.reach.contains_key(&(w, set)) {
                continue;
            }
            match state.get(&w) {
                Some(&(wi, _, true)) => {
                    let low = &mut state.get_mut(&v).expect("visited").1;
                    *low = (*low).min(wi);
                }
                Some(_) => {}
                None => next = Some(w),
            }
            continue;
        }
        let v = calls.pop().expect("a frame").id;
        let (vi, vlow, _) = state[&v];
        if let Some(parent) = calls.last() {
            let low = &mut state.get_mut(&parent.id).expect("visited").1;
            *low = (*low).min(vlow);
        }
        if vlow != vi {
            continue;
        }
        // v roots a component: its files are v and those above it on the stack.
        let at = stack.iter().rposition(|&x| x == v).expect("on the stack");
        let component = stack.split_off(at);
        let mut bits = Bits::default();
        for &m in &component {
            bits.insert(m);
            state.get_mut(&m).expect("visited").2 = false;
        }
        for &m in &component {
            for &w in g.children[&(m, set)].iter() {
                // Already in: so is all it reaches (reach is transitive). Otherwise w
                // is of a component finished before this one, so memoized.
                if !bits.contains(w) {
                    bits.union_with(g.reach.get(&(w, set)).ok_or(w)?);
                }
            }
        }
        bits.trim();
        let bits = Arc::new(bits);
        for &m in &component {
            g.reach.insert((m, set), bits.clone());
        }
    }
    g.reach.get(&(root, set)).cloned().ok_or(root)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::key::{key_name, normalize, scan_includes};
    use std::collections::{BTreeSet, VecDeque};

    /// The closure as the scanner defines it, walked file by file with no memo: names
    /// (sorted) and the digest over the files' digests sorted bytewise.
    pub(in crate::key) fn reference(
        base: &Path,
        source: &Path,
        dirs: &[PathBuf],
    ) -> (BTreeSet<String>, String) {
        let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
        let mut todo = VecDeque::from([source.to_path_buf()]);
        while let Some(file) = todo.pop_front() {
            let text = std::fs::read(&file).unwrap();
            let here = file.parent().unwrap();
            for inc in scan_includes(&text) {
                let name = Path::new(&inc.name);
                let found = inc
                    .quoted
                    .then_some(here)
                    .into_iter()
                    .chain(dirs.iter().map(PathBuf::as_path))
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
                    .map(|p| normalize(&p));
                if let Some(f) = found {
                    if f != source && seen.insert(f.clone()) {
                        todo.push_back(f);
                    }
                }
            }
        }
        let mut digests: Vec<[u8; 32]> = seen
            .iter()
            .map(|p| {
                let hash = blake3::hash(&std::fs::read(p).unwrap())
                    .to_hex()
                    .to_string();
                let mut d = KeyHasher::new("include-file");
                d.file("include", &key_name(base, p), &hash);
                d.digest()
            })
            .collect();
        digests.sort();
        let mut h = KeyHasher::new("include-closure");
        h.field("count", &(digests.len() as u64).to_le_bytes());
        h.field("file-digests", digests.as_flattened());
        let names = seen.iter().map(|p| key_name(base, p)).collect();
        (names, h.finish())
    }

    pub(in crate::key) struct Rng(u64);

    impl Rng {
        pub(in crate::key) fn seeded(seed: u64) -> Rng {
            Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
        }

        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    const FOLDERS: [&str; 4] = ["src", "inc/a", "inc/b", "inc/c"];

    /// A random include graph under `base`: sources `src/s<i>.c` and headers in three
    /// include folders, with cycles, shadowed names, `<>` and `""` includes, missing
    /// headers, `../` names and sources included back. Returns the number of sources.
    pub(in crate::key) fn random_tree(base: &Path, rng: &mut Rng) -> usize {
        let folders = FOLDERS;
        for f in folders {
            std::fs::create_dir_all(base.join(f)).unwrap();
        }
        let names = 6 + rng.below(20);
        let sources = 1 + rng.below(4);
        // (folder, file name) of every file; sources live in src/.
        let mut files: Vec<(usize, String)> =
            (0..sources).map(|i| (0, format!("s{i}.c"))).collect();
        for n in 0..names {
            for (f, _) in folders.iter().enumerate() {
                if rng.below(3) == 0 {
                    files.push((f, format!("h{n}.h")));
                }
            }
        }
        for (f, name) in &files {
            let mut text = format!("// {name}\n");
            for _ in 0..rng.below(5) {
                let target = match rng.below(8) {
                    0 => format!("s{}.c", rng.below(sources)),
                    1 => format!("missing{}.h", rng.below(3)),
                    _ => format!("h{}.h", rng.below(names)),
                };
                let (open, close) = if rng.below(2) == 0 {
                    ('"', '"')
                } else {
                    ('<', '>')
                };
                let up = if rng.below(4) == 0 && *f > 0 {
                    "../a/"
                } else {
                    ""
                };
                text.push_str(&format!("#include {open}{up}{target}{close}\n"));
            }
            std::fs::write(base.join(folders[*f]).join(name), text).unwrap();
        }
        sources
    }

    /// A random source and include-dir list of a `random_tree`.
    pub(in crate::key) fn random_ask(
        base: &Path,
        rng: &mut Rng,
        sources: usize,
        round: usize,
    ) -> (PathBuf, Vec<PathBuf>) {
        let mut dirs: Vec<PathBuf> = FOLDERS[1..]
            .iter()
            .filter(|_| rng.below(3) > 0)
            .map(|f| base.join(f))
            .collect();
        if round % 2 == 1 {
            dirs.reverse();
        }
        (
            base.join("src").join(format!("s{}.c", rng.below(sources))),
            dirs,
        )
    }

    /// Random include graphs with cycles, shadowed names (one name in several include
    /// dirs and beside the includer), `<>` and `""` includes, missing headers and sources
    /// included back by headers; several sources and include-dir orders share one
    /// `Files`, so memoized reaches are reused across closures.
    #[test]
    fn closures_match_a_plain_walk_on_random_graphs() {
        for seed in 1..40u64 {
            let mut rng = Rng::seeded(seed);
            let tmp = tempfile::tempdir().unwrap();
            let base = tmp.path();
            let sources = random_tree(base, &mut rng);
            let memo = Files::new(None);
            let mut asked: Vec<(PathBuf, Vec<PathBuf>, BTreeSet<String>, String)> = Vec::new();
            for round in 0..6 {
                let (source, dirs) = random_ask(base, &mut rng, sources, round);
                let (want, want_digest) = reference(base, &source, &dirs);
                let got = memo.closure(base, &source, &dirs).unwrap();
                let names: BTreeSet<String> = got.files().map(|n| n.name.clone()).collect();
                assert_eq!(names, want, "seed {seed} round {round}");
                assert_eq!(got.len(), want.len());
                assert_eq!(got.digest, want_digest, "seed {seed} round {round}");
                asked.push((source, dirs, want, want_digest));
            }
            // The same closures asked all at once of a new memo: one batch, every
            // source's files found in the same waves.
            let batch = Files::new(None);
            let wanted: Vec<(&Path, &[PathBuf])> = asked
                .iter()
                .map(|(s, d, _, _)| (s.as_path(), d.as_slice()))
                .collect();
            for (got, (_, _, want, want_digest)) in
                batch.closures(base, &wanted).into_iter().zip(&asked)
            {
                let got = got.unwrap();
                let names: BTreeSet<String> = got.files().map(|n| n.name.clone()).collect();
                assert_eq!(&names, want, "seed {seed}, batch");
                assert_eq!(&got.digest, want_digest, "seed {seed}, batch");
            }
        }
    }

    /// A header that cannot be read (here: deleted after its directory was listed)
    /// fails the closures that reach it, with its error, and no other closure of the
    /// batch; failures are not memoized, so once it is back it is found.
    #[test]
    fn an_unreadable_header_fails_only_the_closures_that_reach_it() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        let inc = base.join("inc");
        std::fs::create_dir_all(&inc).unwrap();
        let (a, b, c) = (base.join("a.c"), base.join("b.c"), base.join("c.c"));
        std::fs::write(&a, "#include \"mid.h\"\n").unwrap();
        std::fs::write(&b, "#include \"ok.h\"\n").unwrap();
        std::fs::write(&c, "#include \"ok.h\"\n").unwrap();
        std::fs::write(inc.join("mid.h"), "#include \"bad.h\"\n").unwrap();
        std::fs::write(inc.join("ok.h"), "// fine\n").unwrap();
        std::fs::write(inc.join("bad.h"), "// soon gone\n").unwrap();
        let files = Files::new(None);
        let dirs = vec![inc.clone()];
        assert_eq!(files.closure(base, &b, &dirs).unwrap().len(), 1);
        std::fs::remove_file(inc.join("bad.h")).unwrap();
        let got = files.closures(base, &[(&a, &dirs), (&c, &dirs)]);
        let err = got[0].as_ref().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        assert_eq!(got[1].as_ref().unwrap().len(), 1);
        std::fs::write(inc.join("bad.h"), "// back\n").unwrap();
        let names: BTreeSet<String> = files
            .closure(base, &a, &dirs)
            .unwrap()
            .files()
            .map(|n| n.name.clone())
            .collect();
        assert_eq!(
            names,
            BTreeSet::from(["inc/bad.h".into(), "inc/mid.h".into()])
        );
    }

    /// Digests come out sorted whether the table names every member or only some.
    #[test]
    fn table_and_extra_merge_in_bytewise_order() {
        let mut rng = Rng(7);
        let nodes: Vec<Arc<Node>> = (0..300)
            .map(|i| {
                Arc::new(Node {
                    name: format!("h{i}"),
                    hash: String::new(),
                    digest: *blake3::hash(format!("{i}").as_bytes()).as_bytes(),
                })
            })
            .collect();
        for known in [0, 1, 50, 299, 300] {
            let table = Table::new(nodes[..known].to_vec());
            let mut ids = Bits::default();
            for _ in 0..120 {
                ids.insert(rng.below(300) as u32);
            }
            let extra: Vec<Arc<Node>> = ids
                .iter()
                .filter(|&id| id as usize >= known)
                .map(|id| nodes[id as usize].clone())
                .collect();
            let mut want: Vec<[u8; 32]> = ids.iter().map(|id| nodes[id as usize].digest).collect();
            want.sort();
            assert_eq!(table.sorted_digests(&ids, &extra), want, "{known} known");
        }
    }

    #[test]
    fn ranks_number_ids_by_their_place_among_a_superset() {
        let mut rng = Rng(11);
        for _ in 0..50 {
            let mut among = Bits::default();
            for _ in 0..rng.below(300) {
                among.insert(rng.below(1000) as u32);
            }
            let all: Vec<u32> = among.iter().collect();
            let mut some = Bits::default();
            for &id in &all {
                if rng.below(2) == 0 {
                    some.insert(id);
                }
            }
            let want: Vec<u32> = some
                .iter()
                .map(|id| all.iter().position(|&a| a == id).unwrap() as u32)
                .collect();
            let got = some.ranks(&among, &among.words_below());
            assert_eq!(got.iter().collect::<Vec<_>>(), want);
        }
    }

    #[test]
    fn bits_iterate_in_order_and_trim() {
        let mut b = Bits::default();
        for id in [200, 3, 64, 63, 0] {
            b.insert(id);
        }
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![0, 3, 63, 64, 200]);
        b.remove(200);
        assert_eq!(b.end(), 65);
        assert_eq!(b.0.len(), 2);
        assert!(b.contains(64) && !b.contains(65));
    }
}
