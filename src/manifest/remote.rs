//! `cache.remote`: the shared cache server a fleet of runners reads (and trusted jobs
//! write). Parsed here so the manifest's own module only hooks it in; the command line
//! and environment overrides are applied later, in `cache::remote::Settings`. See
//! docs/remote-cache.md. Its signing keys are `signing:`'s (`signing.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::yaml::Node as Value;

use super::raw;
use super::signing::{OldKey, OldKeys};
use super::validate::Ctx;

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

impl Ctx {
    /// `cache.remote`; its signing keys of earlier releases go to `old` (`signing`).
    pub(super) fn remote(&mut self, v: Value, old: &mut OldKeys) -> Option<RemoteConfig> {
        let r = self.take::<raw::Remote>(v, "cache.remote")?;
        let mut c = RemoteConfig::default();
        if let Some(u) = r.url {
            if crate::base::proc::without_userinfo(&u) != u {
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
                        crate::base::proc::without_userinfo(&url)
                    ),
                );
            }
            c.url_vars = super::paths::var_names(&u);
            c.url_written = Some(u);
            c.expand_url();
        }
        c.write = r.write.unwrap_or(false);
        if let Some(n) = r.token_env {
            if self.env_name(&n, "cache.remote.token_env") {
                c.token_env = n;
            }
        }
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
        old.0
            .extend(r.verify_key.map(|k| (OldKey::RemoteVerifyKey, k)));
        old.0
            .extend(r.sign_key_env.map(|k| (OldKey::RemoteSignKeyEnv, k)));
        Some(c)
    }
}
