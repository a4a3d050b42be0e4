//! `signing:`: one key pair for local entries and remote records (docs/cache-trust.md,
//! "Signed entries"). Invariant: a manifest resolves to at most one verify key and one
//! key variable, whichever keys wrote them; the four keys of earlier releases
//! (`cache.verify_key`, `cache.sign_key_env`, `cache.remote.verify_key`,
//! `cache.remote.sign_key_env`) are aliases of this block, each said as deprecated on
//! every load, and two of them that disagree are an error naming the new key.

use serde::{Deserialize, Serialize};

use super::raw;
use super::validate::{valid_env_name, Ctx};
use super::yaml::Node as Value;

/// `signing:` as loaded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SigningConfig {
    /// The 32-byte ed25519 public key what is verified must be signed with.
    pub verify_key: Option<[u8; 32]>,
    /// The variable holding the private key this process signs with.
    pub key_env: Option<String>,
    /// Local entries must carry a signature by `verify_key` to be served.
    pub local: bool,
    /// Remote records must carry a signature by `verify_key` to be used.
    pub remote: bool,
    /// The deprecated keys the manifest wrote instead of this block.
    #[serde(default)]
    pub aliases: Vec<OldKey>,
}

/// A key of an earlier release that `signing:` replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum OldKey {
    CacheVerifyKey,
    CacheSignKeyEnv,
    RemoteVerifyKey,
    RemoteSignKeyEnv,
}

impl OldKey {
    /// Where it was written.
    pub fn path(self) -> &'static str {
        match self {
            OldKey::CacheVerifyKey => "cache.verify_key",
            OldKey::CacheSignKeyEnv => "cache.sign_key_env",
            OldKey::RemoteVerifyKey => "cache.remote.verify_key",
            OldKey::RemoteSignKeyEnv => "cache.remote.sign_key_env",
        }
    }

    /// What to write instead.
    pub fn instead(self) -> &'static str {
        match self {
            OldKey::CacheVerifyKey => "signing.verify_key (with signing.verify: [local])",
            OldKey::RemoteVerifyKey => "signing.verify_key (with signing.verify: [remote])",
            OldKey::CacheSignKeyEnv | OldKey::RemoteSignKeyEnv => "signing.key_env",
        }
    }
}

/// The old keys one `cache:` (and its `remote:`) wrote, with their text.
#[derive(Debug, Default)]
pub(super) struct OldKeys(pub Vec<(OldKey, String)>);

impl Ctx {
    /// `signing:` (top level), or the old keys of `cache:` standing for it.
    pub(super) fn signing(&mut self, v: Option<Value>, old: OldKeys) -> SigningConfig {
        match v {
            Some(v) => {
                for (k, _) in &old.0 {
                    self.err(
                        k.path(),
                        "replaced by the top-level `signing:` block, which this manifest has: write it there only",
                    );
                }
                self.signing_block(v)
            }
            None => self.signing_aliases(old),
        }
    }

    fn signing_block(&mut self, v: Value) -> SigningConfig {
        let Some(r) = self.take::<raw::Signing>(v, "signing") else {
            return SigningConfig::default();
        };
        let mut c = SigningConfig {
            verify_key: r
                .verify_key
                .and_then(|k| self.verify_key(&k, "signing.verify_key")),
            key_env: r.key_env.filter(|n| self.env_name(n, "signing.key_env")),
            ..SigningConfig::default()
        };
        let written = r.verify.is_some();
        match r.verify {
            None => (c.local, c.remote) = (true, true),
            Some(places) => {
                for p in places {
                    match p.as_str() {
                        "local" => c.local = true,
                        "remote" => c.remote = true,
                        other => self.err(
                            "signing.verify",
                            format!(
                                "`{}` is not a place to verify: write `local`, `remote` or both",
                                crate::base::error::clip(other, 40)
                            ),
                        ),
                    }
                }
            }
        }
        if c.verify_key.is_none() {
            // Signing only: nothing to verify with.
            if written && (c.local || c.remote) {
                self.err(
                    "signing.verify",
                    "there is no `signing.verify_key` to verify with",
                );
            }
            (c.local, c.remote) = (false, false);
            if c.key_env.is_none() {
                self.err("signing", "give `verify_key`, `key_env` or both");
            }
        }
        c
    }

    fn signing_aliases(&mut self, old: OldKeys) -> SigningConfig {
        let mut c = SigningConfig::default();
        let mut verify_from: Option<OldKey> = None;
        let mut env_from: Option<OldKey> = None;
        for (k, text) in old.0 {
            c.aliases.push(k);
            match k {
                OldKey::CacheVerifyKey | OldKey::RemoteVerifyKey => {
                    let Some(bytes) = self.verify_key(&text, k.path()) else {
                        continue;
                    };
                    if let (Some(was), Some(first)) = (c.verify_key, verify_from) {
                        if was != bytes {
                            self.err(
                                k.path(),
                                format!(
                                    "is not the key {} gives: one key pair signs local entries and remote records now; write one `signing.verify_key`",
                                    first.path()
                                ),
                            );
                        }
                    }
                    c.verify_key = Some(bytes);
                    verify_from.get_or_insert(k);
                    match k {
                        OldKey::CacheVerifyKey => c.local = true,
                        _ => c.remote = true,
                    }
                }
                OldKey::CacheSignKeyEnv | OldKey::RemoteSignKeyEnv => {
                    if !self.env_name(&text, k.path()) {
                        continue;
                    }
                    if let (Some(was), Some(first)) = (&c.key_env, env_from) {
                        if *was != text {
                            self.err(
                                k.path(),
                                format!(
                                    "is not the variable {} names: one key signs local entries and remote records now; write one `signing.key_env`",
                                    first.path()
                                ),
                            );
                        }
                    }
                    c.key_env.get_or_insert(text);
                    env_from.get_or_insert(k);
                }
            }
        }
        c
    }

    /// Whether `name` (at `path`) is a variable's name; said when not.
    pub(super) fn env_name(&mut self, name: &str, path: &str) -> bool {
        let ok = valid_env_name(name);
        if !ok {
            self.err(path, format!("`{name}` is not a valid variable name"));
        }
        ok
    }

    /// An `ed25519:<base64>` public key at `path`.
    pub(super) fn verify_key(&mut self, text: &str, path: &str) -> Option<[u8; 32]> {
        match parse_ed25519(text) {
            Ok(bytes) if ed25519_dalek::VerifyingKey::from_bytes(&bytes).is_ok() => Some(bytes),
            Ok(_) => {
                self.err(path, "these 32 bytes are not an ed25519 public key");
                None
            }
            Err(e) => {
                self.err(path, e.to_string());
                None
            }
        }
    }
}

/// Bytes (a key, a signature) → `ed25519:<base64>`, the form `parse_ed25519` reads.
pub fn ed25519_text(bytes: &[u8]) -> String {
    use base64::Engine;
    format!(
        "ed25519:{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
}

/// `ed25519:<base64 of 32 bytes>` → the bytes. Used for `verify_key` here and for the
/// signing seed read from the environment.
pub fn parse_ed25519(text: &str) -> Result<[u8; 32], BadKey> {
    use base64::Engine;
    let Some(b64) = text.trim().strip_prefix("ed25519:") else {
        return Err(BadKey::NoPrefix);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(BadKey::NotBase64)?;
    <[u8; 32]>::try_from(bytes.as_slice()).map_err(|_| BadKey::Length(bytes.len()))
}

/// Why a key written as `ed25519:<base64>` cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadKey {
    #[error("expected `ed25519:<base64 of 32 bytes>`")]
    NoPrefix,
    // One line, as every manifest message: the decoder's words are in it.
    #[error("not base64 after `ed25519:` ({0})")]
    NotBase64(#[source] base64::DecodeError),
    /// The number of bytes it has.
    #[error("an ed25519 key has 32 bytes, this one has {0}")]
    Length(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_key_says_why_and_keeps_the_decoders_error() {
        assert_eq!(parse_ed25519("x"), Err(BadKey::NoPrefix));
        let e = parse_ed25519("ed25519:!!").unwrap_err();
        assert!(
            e.to_string().starts_with("not base64 after `ed25519:` ("),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            parse_ed25519("ed25519:AAAA").unwrap_err().to_string(),
            "an ed25519 key has 32 bytes, this one has 3"
        );
    }
}
