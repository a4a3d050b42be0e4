//! Include closures over the interned include graph (docs/cache.md, "include closure").
//!
//! Each file's reach — itself and every file its `#include`s lead to — is computed once
//! per include-dir list, as a bitset over interned file ids: strongly connected
//! components (Tarjan) give every file of an include cycle the same reach, and a file's
//! reach is its component's files plus the reaches its includes lead out to. A kernel's
//! closure is then the union of its direct includes' reaches, without the source itself.
//! The closure digest hashes the files' digests in bytewise order; that order comes from
//! a rank table sorted once for all files, not from sorting each closure's digests.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Files, IdHash, KeyHasher, Node};

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

    fn contains(&self, id: u32) -> bool {
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

    fn union_with(&mut self, other: &Bits) {
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

    pub(super) fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// One past the largest id (0 when empty).
    fn end(&self) -> usize {
        match self.0.last() {
            Some(&w) => (self.0.len() - 1) * 64 + (64 - w.leading_zeros() as usize),
            None => 0,
        }
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
    fn new(nodes: Vec<Arc<Node>>) -> Table {
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
    members: Bits,
    /// Names the members below its length; `extra` holds the rest, in id order.
    table: Arc<Table>,
    extra: Vec<Arc<Node>>,
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

fn reset() -> io::Error {
    io::Error::other("the include graph was reset while a closure was computed")
}

/// A file on the walk's call stack: its includes and the next one to visit.
struct Frame {
    id: u32,
    kids: Arc<[u32]>,
    next: usize,
}

impl Files {
    /// Every file the source includes, transitively, that the scanner can resolve
    /// (excluding the source itself).
    pub fn closure(&self, base: &Path, source: &Path, dirs: &[PathBuf]) -> io::Result<Closure> {
        // Fast path, one shared lock: kernels of many scenes share (source, dirs).
        {
            let g = self.graph.read().expect("graph");
            if let (Some(&src), Some(&set)) = (g.ids.get(source), g.dir_sets.get(dirs)) {
                if let Some(c) = g.closures.get(&(src, set)) {
                    return Ok(c.clone());
                }
            }
        }
        let src = self.intern(base, source)?;
        let set = self.dir_set(dirs);
        let mut members = Bits::default();
        for &kid in self.kids(base, src, set, dirs)?.iter() {
            members.union_with(&*self.reach(base, kid, set, dirs)?);
        }
        // Reached again through an include cycle: the source is keyed on its own.
        members.remove(src);
        let (table, extra) = self.table(&members)?;
        let digests = table.sorted_digests(&members, &extra);
        let mut h = KeyHasher::new("include-closure");
        h.field("count", &(digests.len() as u64).to_le_bytes());
        h.field("file-digests", digests.as_flattened());
        let out: Closure = Arc::new(ClosureSet {
            members,
            table,
            extra,
            digest: h.finish(),
        });
        Ok(self
            .graph
            .write()
            .expect("graph")
            .closures
            .entry((src, set))
            .or_insert(out)
            .clone())
    }

    /// The rank table for a closure, and the members it does not name (files interned
    /// since it was made). A new table over all files interned so far is made only when
    /// those are many (more than an eighth of the table): the plan's first closures
    /// intern most headers, and rebuilding per closure would sort all files each time.
    fn table(&self, members: &Bits) -> io::Result<(Arc<Table>, Vec<Arc<Node>>)> {
        let nodes = {
            let g = self.graph.read().expect("graph");
            let known = g.table.nodes.len();
            let extra: Vec<u32> = members
                .iter()
                .skip_while(|&id| (id as usize) < known)
                .collect();
            if extra.len() <= 32.max(known / 8) {
                let extra = extra
                    .iter()
                    .map(|&id| g.nodes.get(id as usize).cloned().ok_or_else(reset))
                    .collect::<io::Result<_>>()?;
                return Ok((g.table.clone(), extra));
            }
            g.nodes.clone()
        };
        if nodes.len() < members.end() {
            return Err(reset());
        }
        let fresh = Arc::new(Table::new(nodes));
        let mut g = self.graph.write().expect("graph");
        if g.table.nodes.len() < fresh.nodes.len() {
            g.table = fresh.clone();
        }
        Ok((fresh, Vec::new()))
    }

    /// The file and everything it reaches, memoized per (file, include-dir set). An
    /// iterative Tarjan walk over the files not yet memoized: the files of a cycle share
    /// one reach. A file another thread memoized meanwhile counts as done (its reach is
    /// already whole), which can only split a component into parts that are each still
    /// strongly connected.
    fn reach(&self, base: &Path, root: u32, set: u32, dirs: &[PathBuf]) -> io::Result<Arc<Bits>> {
        if let Some(r) = self.graph.read().expect("graph").reach.get(&(root, set)) {
            return Ok(r.clone());
        }
        let known = |done: &HashMap<u32, Arc<Bits>, IdHash>, id: u32| {
            done.get(&id).cloned().or_else(|| {
                let g = self.graph.read().expect("graph");
                g.reach.get(&(id, set)).cloned()
            })
        };
        let mut done: HashMap<u32, Arc<Bits>, IdHash> = HashMap::default();
        // id → (visit index, lowest index reachable, still on the component stack).
        let mut state: HashMap<u32, (u32, u32, bool), IdHash> = HashMap::default();
        let mut kids_of: HashMap<u32, Arc<[u32]>, IdHash> = HashMap::default();
        let mut stack: Vec<u32> = Vec::new();
        let mut calls: Vec<Frame> = Vec::new();
        let mut next = Some(root);
        loop {
            if let Some(w) = next.take() {
                let i = state.len() as u32;
                state.insert(w, (i, i, true));
                stack.push(w);
                let kids = self.kids(base, w, set, dirs)?;
                kids_of.insert(w, kids.clone());
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
                if known(&done, w).is_some() {
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
                for &w in kids_of[&m].iter() {
                    // Already in: so is all it reaches (reach is transitive).
                    if !bits.contains(w) {
                        bits.union_with(&*known(&done, w).ok_or_else(reset)?);
                    }
                }
            }
            bits.trim();
            let bits = Arc::new(bits);
            for &m in &component {
                done.insert(m, bits.clone());
            }
        }
        let out = done.get(&root).cloned().ok_or_else(reset)?;
        let mut g = self.graph.write().expect("graph");
        for (id, bits) in done {
            g.reach.entry((id, set)).or_insert(bits);
        }
        Ok(out)
    }

    /// The ids a file's `#include`s resolve to with these include dirs, found once.
    fn kids(&self, base: &Path, file: u32, set: u32, dirs: &[PathBuf]) -> io::Result<Arc<[u32]>> {
        let path = {
            let g = self.graph.read().expect("graph");
            if let Some(k) = g.children.get(&(file, set)) {
                return Ok(k.clone());
            }
            g.paths.get(file as usize).cloned().ok_or_else(reset)?
        };
        // Reading and resolving a file's includes is I/O: not under the lock.
        let info = self.info(&path)?;
        let here = path.parent().unwrap_or(Path::new("/"));
        let mut ids = Vec::with_capacity(info.includes.len());
        for inc in &info.includes {
            if let Some(found) = self.resolve(here, set, dirs, inc) {
                ids.push(self.intern(base, &found)?);
            }
        }
        Ok(self
            .graph
            .write()
            .expect("graph")
            .children
            .entry((file, set))
            .or_insert(ids.into())
            .clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{key_name, normalize, scan_includes};
    use std::collections::{BTreeSet, VecDeque};

    /// The closure as the scanner defines it, walked file by file with no memo: names
    /// (sorted) and the digest over the files' digests sorted bytewise.
    fn reference(base: &Path, source: &Path, dirs: &[PathBuf]) -> (BTreeSet<String>, String) {
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
                *d.0.finalize().as_bytes()
            })
            .collect();
        digests.sort();
        let mut h = KeyHasher::new("include-closure");
        h.field("count", &(digests.len() as u64).to_le_bytes());
        h.field("file-digests", digests.as_flattened());
        let names = seen.iter().map(|p| key_name(base, p)).collect();
        (names, h.finish())
    }

    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Random include graphs with cycles, shadowed names (one name in several include
    /// dirs and beside the includer), `<>` and `""` includes, missing headers and sources
    /// included back by headers; several sources and include-dir orders share one
    /// `Files`, so memoized reaches are reused across closures.
    #[test]
    fn closures_match_a_plain_walk_on_random_graphs() {
        for seed in 1..40u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let tmp = tempfile::tempdir().unwrap();
            let base = tmp.path();
            let folders = ["src", "inc/a", "inc/b", "inc/c"];
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
            let memo = Files::new(None);
            for round in 0..6 {
                let mut dirs: Vec<PathBuf> = folders[1..]
                    .iter()
                    .filter(|_| rng.below(3) > 0)
                    .map(|f| base.join(f))
                    .collect();
                if round % 2 == 1 {
                    dirs.reverse();
                }
                let source = base.join("src").join(format!("s{}.c", rng.below(sources)));
                let (want, want_digest) = reference(base, &source, &dirs);
                let got = memo.closure(base, &source, &dirs).unwrap();
                let names: BTreeSet<String> = got.files().map(|n| n.name.clone()).collect();
                assert_eq!(names, want, "seed {seed} round {round}");
                assert_eq!(got.len(), want.len());
                assert_eq!(got.digest, want_digest, "seed {seed} round {round}");
            }
        }
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
    fn bits_iterate_in_order_and_trim() {
        let mut b = Bits::default();
        for id in [200, 3, 64, 63, 0] {
            b.insert(id);
        }
        assert_eq!(b.iter().collect::<Vec<_>>(), vec![0, 3, 63, 64, 200]);
        assert_eq!(b.end(), 201);
        b.remove(200);
        assert_eq!(b.end(), 65);
        assert_eq!(b.0.len(), 2);
        assert!(b.contains(64) && !b.contains(65));
    }
}
