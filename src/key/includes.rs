//! `#include` lines and their resolution: the scanner (an over-approximation: `#if` is
//! not evaluated), include directories listed once each so a name is looked up in the
//! listing instead of probed with `stat`, and the include graph over interned files
//! that the closure walk (`closure`) runs on.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::closure::{Bits, Table};
use super::{key_name, normalize, Closure, Files, KeyHasher};

/// Files above this size are hashed but not scanned for `#include`.
pub(super) const SCAN_LIMIT: u64 = 4 << 20;

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
    pub(super) fn of(base: &Path, path: &Path, hash: &str) -> Node {
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
    pub(super) fn dir_set(&mut self, dirs: &[PathBuf]) -> u32 {
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
pub(super) struct Graph {
    pub(super) ids: HashMap<PathKey, u32, IdHash>,
    pub(super) nodes: Vec<Arc<Node>>,
    pub(super) paths: Vec<PathBuf>,
    /// By `dirs_key`.
    pub(super) dir_sets: HashMap<std::ffi::OsString, u32, IdHash>,
    /// The include dirs of each set, by set id.
    pub(super) sets: Vec<Arc<[PathBuf]>>,
    pub(super) children: HashMap<(u32, u32), Arc<[u32]>, IdHash>,
    pub(super) closures: HashMap<(u32, u32), Closure, IdHash>,
    /// (file, dir set) → the file and every file it reaches.
    pub(super) reach: HashMap<(u32, u32), Arc<Bits>, IdHash>,
    pub(super) table: Arc<Table>,
}

/// Hashing for maps keyed by small ids, and by the paths and names of the checkout's own
/// files: a multiply-rotate per word (as rustc's FxHash). SipHash's flood resistance
/// buys nothing for ids we hand out ourselves, and for paths only protects against a
/// checkout crafted to make its own plan slow (never wrong).
#[derive(Default, Clone, Copy)]
pub(super) struct IdHasher(pub(super) u64);

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

pub(super) type IdHash = std::hash::BuildHasherDefault<IdHasher>;

/// A path as a map key, hashed and compared as bytes: `Path`'s own `Hash` walks it
/// component by component, several times the cost, and the plan looks thousands of
/// paths up. Paths here are built the same way on every lookup (joined, normalized), so
/// two spellings of one file are two entries at worst, each correct. Looked up by
/// `path.as_os_str()`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub(super) struct PathKey(pub(super) PathBuf);

impl PathKey {
    pub(super) fn of(path: &Path) -> PathKey {
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
pub(super) fn dirs_key(dirs: &[PathBuf]) -> std::ffi::OsString {
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
pub(super) enum EntryKind {
    File,
    Other,
    Link,
}

/// A directory's entries by name; None when the directory cannot be read.
pub(super) type Listing = Option<Arc<HashMap<std::ffi::OsString, EntryKind, IdHash>>>;

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

pub(super) fn trim_start(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| **c == b' ' || **c == b'\t').count();
    &b[n..]
}

impl Files {
    pub(super) fn dir_set(&self, dirs: &[PathBuf]) -> u32 {
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
    pub(super) fn resolve(&self, here: &Path, dirs: &[PathBuf], inc: &Include) -> Option<PathBuf> {
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
    pub(super) fn is_file(&self, path: &Path) -> bool {
        match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => self.has_file(dir, Path::new(name)),
            _ => path.is_file(),
        }
    }

    /// Whether `dir` holds a regular file `name` (one component), by its listing.
    pub(super) fn has_file(&self, dir: &Path, name: &Path) -> bool {
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

    pub(super) fn listing(&self, dir: &Path) -> Listing {
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
}
