//! The entry record stored at `{url}/ac/<key>`: what a local entry holds, with each file
//! named by the sha256 of its bytes (its blob at `{url}/cas/<sha256>`), and an optional
//! ed25519 signature over everything else. A record is checked completely before any
//! blob it names is fetched.

use std::path::{Component, Path};

use base64::Engine;
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

use super::http::Failure;
use crate::cache::{Dep, Kind};

pub const FORMAT: u32 = 1;
/// Signed bytes start with this, so a signature over some other JSON never verifies here.
const DOMAIN: &[u8] = b"scenerun remote record v1\n";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RemoteFile {
    /// Relative to the entry's `out` ("" when `out` is itself the file, as for kernels).
    pub path: String,
    pub size: u64,
    pub sha256: String,
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
    /// `ed25519:<base64 of the 64-byte signature>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl Record {
    fn signed_bytes(&self) -> Vec<u8> {
        let mut bare = self.clone();
        bare.signature = None;
        let mut out = DOMAIN.to_vec();
        out.extend(serde_json::to_vec(&bare).expect("record serializes"));
        out
    }

    pub fn sign(&mut self, key: &SigningKey) {
        let sig = key.sign(&self.signed_bytes());
        self.signature = Some(crate::manifest::remote::ed25519_text(&sig.to_bytes()));
    }

    /// The bytes of all its files (saturating: a record may claim anything).
    pub fn bytes(&self) -> u64 {
        self.files
            .iter()
            .fold(0u64, |sum, f| sum.saturating_add(f.size))
    }

    /// Parse and check a downloaded record: it describes `kind`/`key`, its file listing is
    /// safe to lay out under a staging dir, and (with `verify`) it is signed by that key.
    pub fn parse(
        bytes: &[u8],
        kind: Kind,
        key: &str,
        verify: Option<&VerifyingKey>,
    ) -> Result<Record, Failure> {
        let bad = |why: String| Failure::BadRecord {
            key: key.to_string(),
            why,
        };
        let r: Record = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if r.format != FORMAT {
            return Err(bad(format!(
                "format {} (this scenerun reads {FORMAT})",
                r.format
            )));
        }
        if r.kind != kind || r.key != key {
            return Err(bad("it describes another entry".into()));
        }
        if let Some(vk) = verify {
            let Some(sig) = &r.signature else {
                return Err(Failure::Unsigned { key: key.into() });
            };
            let ok = sig
                .strip_prefix("ed25519:")
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .and_then(|b| ed25519_dalek::Signature::from_slice(&b).ok())
                .is_some_and(|s| vk.verify(&r.signed_bytes(), &s).is_ok());
            if !ok {
                return Err(Failure::BadSignature { key: key.into() });
            }
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
            BadListing::NotSha256(s) => write!(f, "`{s}` is not a sha256"),
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
    crate::error::clip(p, 80)
}

/// A kernel is one file at `out`; a fixture or golden is files under `out`, each path
/// relative with plain components only, no duplicates; every blob name is a sha256.
fn check_listing(kind: Kind, files: &[RemoteFile]) -> Result<(), BadListing> {
    if files.is_empty() {
        return Err(BadListing::NoFiles);
    }
    for f in files {
        if f.sha256.len() != 64 || !f.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BadListing::NotSha256(f.sha256.clone()));
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
            }],
            deps: vec![],
            built_by: "fixture/s/fixture".into(),
            duration_secs: 1.25,
            signature: None,
        }
    }

    #[test]
    fn signature_round_trip_and_tamper() {
        let sk = SigningKey::from_bytes(&[7; 32]);
        let vk = sk.verifying_key();
        let mut r = record();
        let key = r.key.clone();
        let unsigned = serde_json::to_vec(&r).unwrap();
        assert!(matches!(
            Record::parse(&unsigned, Kind::Fixture, &key, Some(&vk)),
            Err(Failure::Unsigned { .. })
        ));
        assert!(Record::parse(&unsigned, Kind::Fixture, &key, None).is_ok());
        r.sign(&sk);
        let signed = serde_json::to_vec(&r).unwrap();
        assert!(Record::parse(&signed, Kind::Fixture, &key, Some(&vk)).is_ok());
        let mut changed = r.clone();
        changed.files[0].size = 4;
        let changed = serde_json::to_vec(&changed).unwrap();
        assert!(matches!(
            Record::parse(&changed, Kind::Fixture, &key, Some(&vk)),
            Err(Failure::BadSignature { .. })
        ));
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key();
        assert!(matches!(
            Record::parse(&signed, Kind::Fixture, &key, Some(&other)),
            Err(Failure::BadSignature { .. })
        ));
        assert!(Record::parse(&signed, Kind::Golden, &key, Some(&vk)).is_err());
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
                Record::parse(&bytes, Kind::Fixture, &r.key, None).is_err(),
                "{bad:?}"
            );
        }
        let mut r = record();
        r.files[0].path = vec!["d"; 500].join("/");
        let bytes = serde_json::to_vec(&r).unwrap();
        assert!(Record::parse(&bytes, Kind::Fixture, &r.key, None).is_ok());
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
                Record::parse(&bytes, Kind::Fixture, &r.key, None).is_err(),
                "{bad}"
            );
        }
        let mut r = record();
        r.files.push(RemoteFile {
            path: "x".into(),
            ..r.files[0].clone()
        });
        let bytes = serde_json::to_vec(&r).unwrap();
        assert!(Record::parse(&bytes, Kind::Fixture, &r.key, None).is_err());
        let mut k = record();
        k.kind = Kind::Kernel;
        let bytes = serde_json::to_vec(&k).unwrap();
        assert!(Record::parse(&bytes, Kind::Kernel, &k.key, None).is_err());
        k.files[0].path = String::new();
        let bytes = serde_json::to_vec(&k).unwrap();
        assert!(Record::parse(&bytes, Kind::Kernel, &k.key, None).is_ok());
    }
}
