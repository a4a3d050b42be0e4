//! `cache.remote`: the shared cache server a fleet of runners reads (and trusted jobs
//! write). Parsed here so the manifest's own module only hooks it in; the command line
//! and environment overrides are applied later, in `cache::remote::Settings`. See
//! docs/remote-cache.md.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::yaml::Node as Value;

use super::raw;
use super::validate::{valid_env_name, Ctx};

pub const DEFAULT_TOKEN_ENV: &str = "SCENERUN_REMOTE_TOKEN";
pub const DEFAULT_MAX_UPLOAD: u64 = 2 << 30;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// `cache.remote` as the manifest says it (before `--remote` and friends).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoteConfig {
    /// `url` as written, `$VAR`s unexpanded: what the kept manifest records (it never
    /// holds a variable's value, which may carry a password).
    pub url_written: Option<String>,
    /// `url_written` `$VAR`-expanded; None when absent or empty after expansion. Never
    /// kept: expanded again when a kept manifest is read.
    #[serde(skip)]
    pub url: Option<String>,
    /// The variables `url_written` names: a child gets them without the URL's userinfo.
    pub url_vars: Vec<String>,
    pub write: bool,
    pub token_env: String,
    pub max_upload: u64,
    pub timeout: Duration,
    /// The 32-byte ed25519 public key records must be signed with.
    pub verify_key: Option<[u8; 32]>,
    pub sign_key_env: Option<String>,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            url_written: None,
            url: None,
            url_vars: Vec::new(),
            write: false,
            token_env: DEFAULT_TOKEN_ENV.into(),
            max_upload: DEFAULT_MAX_UPLOAD,
            timeout: DEFAULT_TIMEOUT,
            verify_key: None,
            sign_key_env: None,
        }
    }
}

impl RemoteConfig {
    /// `url` from `url_written` and the environment now (at load, and when a kept
    /// manifest is read: its probes saw the same variables).
    pub fn expand_url(&mut self) {
        self.url = self
            .url_written
            .as_deref()
            .map(|u| {
                super::paths::expand_vars(u)
                    .trim()
                    .trim_end_matches('/')
                    .to_string()
            })
            .filter(|u| !u.is_empty());
    }

    /// The variables whose values hold the remote cache's URL: `$SCENERUN_REMOTE_URL`
    /// and those `url` names.
    pub fn url_env(&self) -> Vec<String> {
        std::iter::once("SCENERUN_REMOTE_URL".to_string())
            .chain(self.url_vars.iter().cloned())
            .collect()
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

impl Ctx {
    pub(super) fn remote(&mut self, v: Value) -> Option<RemoteConfig> {
        let r = self.take::<raw::Remote>(v, "cache.remote")?;
        let mut c = RemoteConfig::default();
        if let Some(u) = r.url {
            if crate::proc::without_userinfo(&u) != u {
                self.err(
                    "cache.remote.url",
                    "a user or password written in the URL would be committed with the manifest: take the URL from the environment (`url: \"$VAR\"`) or the token from `token_env`",
                );
            }
            let url = self.paths.expand(&u).trim().to_string();
            if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
                self.err(
                    "cache.remote.url",
                    format!(
                        "`{}` is not an http:// or https:// URL",
                        crate::proc::without_userinfo(&url)
                    ),
                );
            }
            c.url_vars = super::paths::var_names(&u);
            c.url_written = Some(u);
            c.expand_url();
        }
        c.write = r.write.unwrap_or(false);
        for (name, path) in [
            (&r.token_env, "cache.remote.token_env"),
            (&r.sign_key_env, "cache.remote.sign_key_env"),
        ] {
            if let Some(n) = name.as_deref().filter(|n| !valid_env_name(n)) {
                self.err(path, format!("`{n}` is not a valid variable name"));
            }
        }
        if let Some(n) = r.token_env {
            c.token_env = n;
        }
        c.sign_key_env = r.sign_key_env;
        if let Some(n) = self.size(r.max_upload, "cache.remote.max_upload") {
            c.max_upload = n;
        }
        if let Some(t) = self.duration(r.timeout, "cache.remote.timeout") {
            if t.is_zero() {
                self.err("cache.remote.timeout", "the timeout must be above zero");
            } else {
                c.timeout = t;
            }
        }
        if let Some(k) = r.verify_key {
            c.verify_key = self.verify_key(&k, "cache.remote.verify_key");
        }
        Some(c)
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
