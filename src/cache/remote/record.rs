//! The entry record stored at `{url}/ac/<key>`: what a local entry holds, with each file
//! named by the sha256 of its bytes (its blob at `{url}/cas/<sha256>`) beside its BLAKE3,
//! and the local entry's own signature (`cache::sign`: one scheme, so the entry a reader
//! publishes from it carries the writer's signature). A record is checked completely
//! before any blob it names is fetched.

use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use super::http::Failure;
use crate::cache::sign::{signed_bytes, Keys};
use crate::cache::{Damage, Dep, FileRecord, Kind, LAYOUT};

/// 2: files carry their BLAKE3 and the signature is the local entry's (1: a signature
/// of its own over the record's JSON). A new cache layout changes what is signed, so it
/// comes with a new format.
pub const FORMAT: u32 = 2;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RemoteFile {
    /// Relative to the entry's `out` ("" when `out` is itself the file, as for kernels).
    pub path: String,
    pub size: u64,
    pub sha256: String,
    /// What the local entry's record says of it, and what its signature covers.
    pub blake3: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub format: u32,
    pub kind: Kind,
    pub key: String,
    pub files: Vec<RemoteFile>,
    #[serde(default)]
    pub deps: Vec<Dep>,
    pub built_by: String,
    pub duration_secs: f64,
    /// `ed25519:<base64 of the 64-byte signature>`, the local entry's (`cache::sign`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl Record {
    /// What its signature covers: the bytes the local entry it describes is signed
    /// over (`sign::signed_bytes`), in the record's order (the writer's, sorted).
    fn signed_bytes(&self) -> Vec<u8> {
        let files: Vec<FileRecord> = self
            .files
            .iter()
            .map(|f| FileRecord::new(f.path.clone(), f.size, f.blake3.clone()))
            .collect();
        signed_bytes(
            (
                LAYOUT,
                self.kind,
                &self.key,
                &self.built_by,
                self.duration_secs,
            ),
            &files,
            self.deps.iter().map(|d| (&*d.path, &*d.blake3)),
        )
    }

    /// The bytes of all its files (saturating: a record may claim anything).
    pub fn bytes(&self) -> u64 {
        self.files
            .iter()
            .fold(0u64, |sum, f| sum.saturating_add(f.size))
    }

    /// Parse and check a downloaded record: it describes `kind`/`key`, its file listing is
    /// safe to lay out under a staging dir, and (when `keys` verify remote records) it is
    /// signed by the verify key.
    pub fn parse(bytes: &[u8], kind: Kind, key: &str, keys: &Keys) -> Result<Record, Failure> {
        let bad = |why: String| Failure::BadRecord {
            key: key.to_string(),
            why,
        };
        // The format first: another format's fields are not this one's.
        #[derive(Deserialize)]
        struct Format {
            format: u32,
        }
        let f: Format = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if f.format != FORMAT {
            return Err(bad(format!(
                "format {} (this scenerun reads {FORMAT})",
                f.format
            )));
        }
        let r: Record = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if r.kind != kind || r.key != key {
            return Err(bad("it describes another entry".into()));
        }
        match keys.check_remote(r.signature.as_deref(), || r.signed_bytes()) {
            Ok(()) => {}
            Err(Damage::Unsigned) => return Err(Failure::Unsigned { key: key.into() }),
            Err(_) => return Err(Failure::BadSignature { key: key.into() }),
        }
        check_listing(kind, &r.files).map_err(|e| bad(e.to_string()))?;
        Ok(r)
    }
}

/// Longest file path a record may give (bytes), and longest name in it: paths are laid
/// out under the cache's staging dir, whose own path takes part of the system's limit.
pub const MAX_PATH: usize = 1024;
pub const MAX_NAME: usize = 255;

/// Why a record's file listing is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadListing {
    NoFiles,
    NotSha256(String),
    NotBlake3(String),
    KernelNotOneFile,
    UnsafePath(String),
    /// Not in the one form scenerun writes (`a//b`, `a/./b`, `dir/`): two spellings
    /// could name one file.
    NotCanonical(String),
    TooLong(String),
    Twice(String),
    FileAndDir(String),
}

impl std::fmt::Display for BadListing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadListing::NoFiles => f.write_str("it lists no files"),
            BadListing::NotSha256(s) => write!(f, "`{}` is not a sha256", shown(s)),
            BadListing::NotBlake3(s) => write!(f, "`{}` is not a BLAKE3", shown(s)),
            BadListing::KernelNotOneFile => f.write_str("a kernel entry is exactly one file"),
            BadListing::UnsafePath(p) => write!(f, "unsafe file path `{}`", shown(p)),
            BadListing::NotCanonical(p) => {
                write!(
                    f,
                    "file path `{}` is not written in its plain form",
                    shown(p)
                )
            }
            BadListing::TooLong(p) => write!(
                f,
                "file path `{}` is too long (at most {MAX_PATH} bytes, {MAX_NAME} per name)",
                shown(p)
            ),
            BadListing::Twice(p) => write!(f, "`{}` is listed twice", shown(p)),
            BadListing::FileAndDir(p) => {
                write!(f, "`{}` is both a file and a directory", shown(p))
            }
        }
    }
}

/// A path from a record as a message quotes it: the server chose it, so its length too.
fn shown(p: &str) -> std::borrow::Cow<'_, str> {
    crate::base::error::clip(p, 80)
}

/// A kernel is one file at `out`; a fixture or golden is files under `out`, each path
/// relative with plain components only, no duplicates; every blob name is a sha256.
fn check_listing(kind: Kind, files: &[RemoteFile]) -> Result<(), BadListing> {
    if files.is_empty() {
        return Err(BadListing::NoFiles);
    }
    let hex = |h: &str| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit());
    for f in files {
        if !hex(&f.sha256) {
            return Err(BadListing::NotSha256(f.sha256.clone()));
        }
        if !hex(&f.blake3) {
            return Err(BadListing::NotBlake3(f.blake3.clone()));
        }
    }
    if kind == Kind::Kernel {
        return match files {
            [one] if one.path.is_empty() => Ok(()),
            _ => Err(BadListing::KernelNotOneFile),
        };
    }
    let mut seen = std::collections::HashSet::new();
    for f in files {
        let p = Path::new(&f.path);
        if f.path.is_empty()
            || f.path.contains('\0')
            || !p.components().all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(BadListing::UnsafePath(f.path.clone()));
        }
        // Exactly its components joined by single slashes: what `components` skips
        // (`//`, `/./`, a trailing `/`) would let two entries name one file.
        if f.path.split('/').any(|part| part.is_empty() || part == ".") {
            return Err(BadListing::NotCanonical(f.path.clone()));
        }
        if f.path.len() > MAX_PATH || f.path.split('/').any(|part| part.len() > MAX_NAME) {
            return Err(BadListing::TooLong(f.path.clone()));
        }
        if !seen.insert(&f.path) {
            return Err(BadListing::Twice(f.path.clone()));
        }
    }
    // A file may not also be a directory of another (`a` and `a/b`).
    for f in files {
        let mut prefix = f.path.clone();
        prefix.push('/');
        if files.iter().any(|g| g.path.starts_with(&prefix)) {
            return Err(BadListing::FileAndDir(f.path.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            format: FORMAT,
            kind: Kind::Fixture,
            key: "ab".repeat(32),
            files: vec![RemoteFile {
                path: "x/input.bin".into(),
                size: 3,
                sha256: "0".repeat(64),
                blake3: "1".repeat(64),
            }],
            deps: vec![],
            built_by: "fixture/s/fixture".into(),
            duration_secs: 1.25,
            signature: None,
        }
    }

    fn none() -> Keys {
        Keys::default()
    }

    #[test]
    fn the_local_entrys_signature_verifies_the_record_and_nothing_changed() {
        let seed = [7; 32];
        let public = ed25519_dalek::SigningKey::from_bytes(&seed)
            .verifying_key()
            .to_bytes();
        let keys = Keys::test(Some(seed), Some(public));
        let mut r = record();
        let key = r.key.clone();
        let unsigned = serde_json::to_vec(&r).unwrap();
        assert!(matches!(
            Record::parse(&unsigned, Kind::Fixture, &key, &keys),
            Err(Failure::Unsigned { .. })
        ));
        assert!(Record::parse(&unsigned, Kind::Fixture, &key, &none()).is_ok());
        // The signature the local entry of these files carries: one scheme.
        let meta = crate::cache::Meta::new(
            Kind::Fixture,
            &key,
            &r.built_by,
            r.duration_secs,
            vec![FileRecord::new("x/input.bin".into(), 3, "1".repeat(64))],
            Vec::new(),
        );
        r.signature = keys.signature(&meta);
        let signed = serde_json::to_vec(&r).unwrap();
        assert!(Record::parse(&signed, Kind::Fixture, &key, &keys).is_ok());
        for change in [
            |r: &mut Record| r.files[0].size = 4,
            |r: &mut Record| r.files[0].blake3 = "2".repeat(64),
            |r: &mut Record| r.duration_secs = 2.0,
        ] {
            let mut changed = r.clone();
            change(&mut changed);
            let changed = serde_json::to_vec(&changed).unwrap();
            assert!(matches!(
                Record::parse(&changed, Kind::Fixture, &key, &keys),
                Err(Failure::BadSignature { .. })
            ));
        }
        let other = ed25519_dalek::SigningKey::from_bytes(&[8; 32])
            .verifying_key()
            .to_bytes();
        assert!(matches!(
            Record::parse(&signed, Kind::Fixture, &key, &Keys::test(None, Some(other))),
            Err(Failure::BadSignature { .. })
        ));
        assert!(Record::parse(&signed, Kind::Golden, &key, &keys).is_err());
    }

    #[test]
    fn only_plain_short_paths_are_laid_out() {
        let long_name = "n".repeat(MAX_NAME + 1);
        let deep = vec!["d"; 600].join("/");
        for bad in [
            "a//b", "a/./b", "dir/", "a/", "a\0b", &long_name, &deep, "a/.",
        ] {
            let mut r = record();
            r.files[0].path = bad.to_string();
            let bytes = serde_json::to_vec(&r).unwrap();
            assert!(
                Record::parse(&bytes, Kind::Fixture, &r.key, &none()).is_err(),
                "{bad:?}"
            );
        }
        let mut r = record();
        r.files[0].path = vec!["d"; 500].join("/");
        let bytes = serde_json::to_vec(&r).unwrap();
        assert!(Record::parse(&bytes, Kind::Fixture, &r.key, &none()).is_ok());
        // Sizes are added without overflowing.
        r.files[0].size = u64::MAX;
        r.files.push(r.files[0].clone());
        assert_eq!(r.bytes(), u64::MAX);
    }

    #[test]
    fn unsafe_listings_are_refused() {
        for bad in ["../x", "/etc/passwd", "a/../../b", "", "./a"] {
            let mut r = record();
            r.files[0].path = bad.into();
            let bytes = serde_json::to_vec(&r).unwrap();
            assert!(
                Record::parse(&bytes, Kind::Fixture, &r.key, &none()).is_err(),
                "{bad}"
            );
        }
        let mut r = record();
        r.files.push(RemoteFile {
            path: "x".into(),
            ..r.files[0].clone()
        });
        let bytes = serde_json::to_vec(&r).unwrap();
        assert!(Record::parse(&bytes, Kind::Fixture, &r.key, &none()).is_err());
        let mut k = record();
        k.kind = Kind::Kernel;
        let bytes = serde_json::to_vec(&k).unwrap();
        assert!(Record::parse(&bytes, Kind::Kernel, &k.key, &none()).is_err());
        k.files[0].path = String::new();
        let bytes = serde_json::to_vec(&k).unwrap();
        assert!(Record::parse(&bytes, Kind::Kernel, &k.key, &none()).is_ok());
    }
}
