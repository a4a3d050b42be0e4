//! The one signing scheme (`signing:`, docs/cache-trust.md): one key loader, one
//! signature over an entry's content, for local entries and remote records alike. A
//! process holding the signing key signs each entry's record when it publishes it, and
//! the record it uploads carries that same signature; with a verify key, a reader serves
//! a local entry (`signing.verify` has `local`) or uses a remote record (`remote`) only
//! when it carries that key's signature over everything the record says of the entry's
//! content (kind, key, layout, each file's path, size and BLAKE3, each dependency) — so
//! a record copied under another key, edited, or planted by whoever can write the cache
//! or the server is a miss. Invariant: where verification is asked for, no unsigned or
//! wrongly signed entry is ever served, and the signature a writer made locally is the
//! one every reader checks.

use base64::Engine;
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};

use super::{Damage, FileRecord, Kind, Meta};
use crate::manifest::signing::{ed25519_text, parse_ed25519, SigningConfig};

/// Signed bytes start with this, so a signature over anything else never verifies here.
/// (Named for where it was first used; remote records carry the same signature.)
const DOMAIN: &[u8] = b"scenerun local entry v1\n";

/// The keys of one run: the verify key and where it is asked for, and the signing key
/// this process signs with (when its variable holds one).
#[derive(Default)]
pub struct Keys {
    verify: Option<VerifyingKey>,
    /// Local entries must be signed by `verify`.
    local: bool,
    /// Remote records must be signed by `verify`.
    remote: bool,
    signer: Option<SigningKey>,
    /// The variable the signing key comes from, for messages.
    sign_env: Option<String>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("verify", &self.verify.is_some())
            .field("local", &self.local)
            .field("remote", &self.remote)
            .field("signer", &self.signer.is_some())
            .finish()
    }
}

impl Keys {
    /// From the manifest's `signing:` and the key in `$key_env` (an empty or unset
    /// variable: no signing key). A key that cannot be read, or that does not match the
    /// verify key, is a usage error (exit 4) before anything runs.
    pub fn of(cfg: &SigningConfig) -> anyhow::Result<Keys> {
        let verify = cfg
            .verify_key
            .map(|b| VerifyingKey::from_bytes(&b).expect("checked when the manifest loaded"));
        let env = cfg.key_env.as_deref();
        let signer = match env.and_then(|e| std::env::var(e).ok().filter(|t| !t.is_empty())) {
            None => None,
            Some(text) => {
                let env = env.unwrap_or_default();
                let seed = parse_ed25519(&text)
                    .map_err(|e| crate::base::error::err!(Usage, "${env}: {e}"))?;
                let key = SigningKey::from_bytes(&seed);
                if verify.is_some_and(|v| v != key.verifying_key()) {
                    return Err(crate::base::error::err!(Usage,
                        "the signing key in ${env} does not match signing.verify_key: every entry and record it signs would be a miss"
                    ));
                }
                Some(key)
            }
        };
        Ok(Keys {
            verify,
            local: cfg.local,
            remote: cfg.remote,
            signer,
            sign_env: cfg.key_env.clone(),
        })
    }

    /// Keys that verify local entries with `verify_key` and sign nothing (the compiler
    /// shim, which is never handed the signing key).
    pub fn verifier(verify_key: Option<[u8; 32]>) -> anyhow::Result<Keys> {
        Keys::of(&SigningConfig {
            verify_key,
            local: verify_key.is_some(),
            ..SigningConfig::default()
        })
    }

    /// Keys of a unit test: verifying everywhere with `verify`, signing with `seed`.
    #[cfg(test)]
    pub(crate) fn test(seed: Option<[u8; 32]>, verify: Option<[u8; 32]>) -> Keys {
        Keys {
            verify: verify.map(|b| VerifyingKey::from_bytes(&b).expect("a public key")),
            local: true,
            remote: true,
            signer: seed.map(|s| SigningKey::from_bytes(&s)),
            sign_env: None,
        }
    }

    /// Whether local entries must be signed to be served.
    pub fn verifies(&self) -> bool {
        self.local && self.verify.is_some()
    }

    /// Whether remote records must be signed to be used.
    pub fn verifies_remote(&self) -> bool {
        self.remote && self.verify.is_some()
    }

    /// Whether this process can sign what it publishes.
    pub fn signs(&self) -> bool {
        self.signer.is_some()
    }

    /// The variable the signing key is read from, for messages.
    pub fn sign_env(&self) -> Option<&str> {
        self.sign_env.as_deref()
    }

    /// This process's signature over `meta` (when it holds a signing key).
    pub fn signature(&self, meta: &Meta) -> Option<String> {
        let k = self.signer.as_ref()?;
        Some(ed25519_text(&k.sign(&meta_bytes(meta)).to_bytes()))
    }

    /// Sign `meta` (when this process holds a signing key).
    pub(super) fn sign(&self, meta: &mut Meta) {
        if let Some(sig) = self.signature(meta) {
            meta.signature = Some(sig);
        }
    }

    /// With local verification: the record's signature must verify over `bytes` (its
    /// signed part, `signed_bytes`).
    pub(super) fn check(
        &self,
        signature: Option<&str>,
        bytes: impl FnOnce() -> Vec<u8>,
    ) -> Result<(), Damage> {
        if !self.local {
            return Ok(());
        }
        self.check_always(signature, bytes)
    }

    /// With remote verification: a remote record's signature must verify over `bytes`.
    pub(crate) fn check_remote(
        &self,
        signature: Option<&str>,
        bytes: impl FnOnce() -> Vec<u8>,
    ) -> Result<(), Damage> {
        if !self.remote {
            return Ok(());
        }
        self.check_always(signature, bytes)
    }

    fn check_always(
        &self,
        signature: Option<&str>,
        bytes: impl FnOnce() -> Vec<u8>,
    ) -> Result<(), Damage> {
        let Some(vk) = &self.verify else {
            return Ok(());
        };
        let Some(sig) = signature else {
            return Err(Damage::Unsigned);
        };
        let ok = sig
            .strip_prefix("ed25519:")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| ed25519_dalek::Signature::from_slice(&b).ok())
            .is_some_and(|s| vk.verify(&bytes(), &s).is_ok());
        if ok {
            Ok(())
        } else {
            Err(Damage::BadSignature)
        }
    }
}

/// What a record signs: its kind, key, layout, who built it and how long it took, each
/// file's path, size and BLAKE3, and each dependency — everything but the stamps (which
/// are of one copy of the entry) and the signature. Length-prefixed, in record order.
pub(crate) fn signed_bytes<'a>(
    (layout, kind, key, built_by, duration_secs): (u32, Kind, &str, &str, f64),
    files: &[FileRecord],
    deps: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<u8> {
    let mut out = DOMAIN.to_vec();
    let mut field = |b: &[u8]| {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    };
    field(&layout.to_le_bytes());
    field(kind.name().as_bytes());
    field(key.as_bytes());
    field(built_by.as_bytes());
    field(&duration_secs.to_bits().to_le_bytes());
    field(&(files.len() as u64).to_le_bytes());
    for f in files {
        field(f.path.as_bytes());
        field(&f.size.to_le_bytes());
        field(f.blake3.as_bytes());
    }
    for (path, blake3) in deps {
        field(path.as_bytes());
        field(blake3.as_bytes());
    }
    out
}

/// `signed_bytes` of a whole record.
pub(super) fn meta_bytes(m: &Meta) -> Vec<u8> {
    signed_bytes(
        (m.layout, m.kind, &m.key, &m.built_by, m.duration_secs),
        &m.files,
        m.deps.iter().map(|d| (&*d.path, &*d.blake3)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_record_verifies_and_any_change_to_what_it_says_does_not() {
        let sk = SigningKey::from_bytes(&[7; 32]);
        let keys = Keys {
            verify: Some(sk.verifying_key()),
            local: true,
            remote: true,
            signer: Some(sk),
            sign_env: None,
        };
        let file = FileRecord::new("a".into(), 3, "ab".into());
        let mut m = Meta::new(
            Kind::Fixture,
            "k1",
            "fixture/s/fixture",
            0.5,
            vec![file],
            Vec::new(),
        );
        assert_eq!(keys.check(None, || meta_bytes(&m)), Err(Damage::Unsigned));
        keys.sign(&mut m);
        let sig = m.signature.clone();
        assert_eq!(keys.check(sig.as_deref(), || meta_bytes(&m)), Ok(()));
        // Stamps are of one copy: not signed.
        m.files[0].stamp = Some(crate::base::fsutil::Stamp {
            size: 3,
            mtime_ns: 1,
            ctime_ns: 2,
            ino: 3,
        });
        assert_eq!(keys.check(sig.as_deref(), || meta_bytes(&m)), Ok(()));
        // Copied under another key, or another file's hash: refused.
        let mut other = m.clone();
        other.key = "k2".into();
        assert_eq!(
            keys.check(sig.as_deref(), || meta_bytes(&other)),
            Err(Damage::BadSignature)
        );
        let mut other = m.clone();
        other.files[0].blake3 = "cd".into();
        assert_eq!(
            keys.check(sig.as_deref(), || meta_bytes(&other)),
            Err(Damage::BadSignature)
        );
        // Without a verify key nothing is checked.
        assert_eq!(Keys::default().check(None, || meta_bytes(&m)), Ok(()));
    }
}
