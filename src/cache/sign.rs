//! Signed local entries (`cache.verify_key`, `cache.sign_key_env`, docs/cache-trust.md):
//! a warm holding the signing key signs each entry's record when it publishes it; with
//! a verify key, every reader serves an entry only when its record carries that key's
//! signature over everything the record says of the entry's content (kind, key, layout,
//! each file's path, size and BLAKE3, each dependency) — so a record copied under another
//! key, edited, or planted by whoever can write the cache is a miss. Invariant: with a
//! verify key, no unsigned or wrongly signed entry is ever served.

use base64::Engine;
use ed25519_dalek::{Signer, SigningKey, Verifier, VerifyingKey};

use super::{Damage, FileRecord, Kind, Meta};

/// Signed bytes start with this, so a signature over anything else never verifies here
/// (a remote record's signature among them).
const DOMAIN: &[u8] = b"scenerun local entry v1\n";

/// The keys of one store: the verify key records must be signed with, and the signing
/// key this process signs with (when its variable holds one).
#[derive(Default)]
pub struct Keys {
    verify: Option<VerifyingKey>,
    signer: Option<SigningKey>,
    /// The variable the signing key comes from, for messages.
    sign_env: Option<String>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("verify", &self.verify.is_some())
            .field("signer", &self.signer.is_some())
            .finish()
    }
}

impl Keys {
    /// From the manifest's `cache.verify_key` and the key in `$sign_key_env` (an empty
    /// or unset variable: no signing key). A key that cannot be read, or that does not
    /// match the verify key, is a usage error (exit 4) before anything runs.
    pub fn of(verify_key: Option<[u8; 32]>, sign_env: Option<&str>) -> anyhow::Result<Keys> {
        let verify = verify_key
            .map(|b| VerifyingKey::from_bytes(&b).expect("checked when the manifest loaded"));
        let signer = match sign_env.and_then(|e| std::env::var(e).ok().filter(|t| !t.is_empty())) {
            None => None,
            Some(text) => {
                let env = sign_env.unwrap_or_default();
                let seed = crate::manifest::remote::parse_ed25519(&text)
                    .map_err(|e| crate::error::err!(Usage, "${env}: {e}"))?;
                let key = SigningKey::from_bytes(&seed);
                if verify.is_some_and(|v| v != key.verifying_key()) {
                    return Err(crate::error::err!(Usage,
                        "the signing key in ${env} does not match cache.verify_key: every entry it signs would be a miss"
                    ));
                }
                Some(key)
            }
        };
        Ok(Keys {
            verify,
            signer,
            sign_env: sign_env.map(str::to_string),
        })
    }

    /// Whether records must be signed to be served.
    pub fn verifies(&self) -> bool {
        self.verify.is_some()
    }

    /// Whether this process can sign what it publishes.
    pub fn signs(&self) -> bool {
        self.signer.is_some()
    }

    /// The variable the signing key is read from, for messages.
    pub fn sign_env(&self) -> Option<&str> {
        self.sign_env.as_deref()
    }

    /// Sign `meta` (when this process holds a signing key).
    pub(super) fn sign(&self, meta: &mut Meta) {
        if let Some(k) = &self.signer {
            let sig = k.sign(&meta_bytes(meta));
            meta.signature = Some(crate::manifest::remote::ed25519_text(&sig.to_bytes()));
        }
    }

    /// With a verify key: the record's signature must verify over `bytes` (its signed
    /// part, `signed_bytes`).
    pub(super) fn check(
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
pub(super) fn signed_bytes<'a>(
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
        m.files[0].stamp = Some(crate::fsutil::Stamp {
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
