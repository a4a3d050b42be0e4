//! The key encoding: a versioned, length-prefixed stream of fields hashed with BLAKE3,
//! and the names files have in keys (relative to the manifest's directory when inside
//! it, so two checkouts at different paths share keys).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// Bump when the encoding changes: every key changes with it.
pub const KEY_SCHEMA: &str = "scenerun-key-3";

/// Builds one key: every field is written as (tag length, tag, value length, value).
///
/// The fields are gathered into one buffer and hashed at the end: BLAKE3 of the same
/// bytes either way, but a key is ~40 small fields, and one `update` per piece cost
/// more than the hashing itself (a plan computes thousands of keys).
#[derive(Clone)]
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
