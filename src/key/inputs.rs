//! Compact records of what went into each step's key, kept in the cache beside the
//! duration history (`inputs.json`), one per step identity: written when warm builds a
//! step, read by `explain` to say what changed since. Hashes are shortened and env values
//! are kept only as hashes (a token in the env never lands in the cache); include
//! closures are stored once per closure digest, however many steps share them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::base::fsutil;
use crate::key::{Closure, KEY_SCHEMA};

const VERSION: u32 = 1;
/// Hex digits kept of each content hash: plenty to tell two versions of a file apart.
const SHORT: usize = 16;

fn short(hash: &str) -> String {
    hash.chars().take(SHORT).collect()
}

/// `files` as records keep them: each hash in its short form.
fn short_files<S: serde::Serializer>(files: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(files.iter().map(|(name, hash)| (name, short(hash))))
}

fn short_of(bytes: &[u8]) -> String {
    short(&blake3::hash(bytes).to_hex())
}

/// What one step's key was made of.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KeyInputs {
    /// The command with path placeholders masked (flags, includes, script filled).
    pub command: String,
    pub platform: String,
    /// Env name → short hash of its value (one map per scene, shared by its steps).
    #[serde(default)]
    pub env: Arc<BTreeMap<String, String>>,
    /// (toolchain name, short hash of its identity output).
    #[serde(default)]
    pub identity: Option<(String, String)>,
    /// A fixture's or golden's `identity:` (command, short hash of its output).
    #[serde(default)]
    pub step_identity: Option<(String, String)>,
    /// Source and declared inputs: (path as in keys, content hash), in key order; the
    /// whole hash while planning, its short form in records (written short).
    /// A list, not a map: most steps have one or two, and a plan holds one per step.
    #[serde(default, serialize_with = "short_files")]
    pub files: Vec<(String, String)>,
    /// The include closure's digest (its files are in `Records::closures`).
    #[serde(default)]
    pub closure_digest: Option<String>,
    /// The golden's fixture key.
    #[serde(default)]
    pub fixture_key: Option<String>,
    /// The include closure itself, while planning (not serialized with the step).
    #[serde(skip)]
    pub closure: Option<Closure>,
}

impl KeyInputs {
    pub fn new(command: String, platform: &str, env: Arc<BTreeMap<String, String>>) -> KeyInputs {
        KeyInputs {
            command,
            platform: platform.to_string(),
            env,
            ..KeyInputs::default()
        }
    }

    /// A scene's env as recorded: names with short hashes of their values.
    pub fn env_hashes(env: &BTreeMap<String, String>) -> Arc<BTreeMap<String, String>> {
        Arc::new(
            env.iter()
                .map(|(k, v)| (k.clone(), short_of(v.as_bytes())))
                .collect(),
        )
    }

    pub fn set_identity(&mut self, toolchain: &str, output: &[u8]) {
        self.identity = Some((toolchain.to_string(), short_of(output)));
    }

    pub fn set_step_identity(&mut self, command: &str, output: &[u8]) {
        self.step_identity = Some((command.to_string(), short_of(output)));
    }

    pub fn file(&mut self, rel: &str, hash: &str) {
        self.files.push((rel.to_string(), hash.to_string()));
    }

    /// The source and declared inputs as (name → short hash), planned or recorded.
    pub fn files_short(&self) -> BTreeMap<String, String> {
        self.files
            .iter()
            .map(|(name, hash)| (name.clone(), short(hash)))
            .collect()
    }

    /// The files the key these inputs made commits to, as (name as keys name files,
    /// full content hash): its source or declared inputs and its include closure's
    /// members, each hashed into the key with its name.
    pub fn committed(&self) -> std::collections::HashSet<(&str, &str)> {
        let files = self
            .files
            .iter()
            .map(|(name, hash)| (name.as_str(), hash.as_str()));
        let closure = self
            .closure
            .iter()
            .flat_map(|c| c.files().map(|n| (n.name.as_str(), n.hash.as_str())));
        files.chain(closure).collect()
    }

    /// The include closure as (name → short hash), from the plan's closure or a record.
    pub fn closure_files(&self, records: &Records) -> BTreeMap<String, String> {
        match (&self.closure, &self.closure_digest) {
            (Some(c), _) => c
                .files()
                .map(|n| (n.name.clone(), short(&n.hash)))
                .collect(),
            (None, Some(d)) => records.closures.get(d).cloned().unwrap_or_default(),
            _ => BTreeMap::new(),
        }
    }
}

/// Every step's last-built inputs, and the closures they name.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Records {
    #[serde(default)]
    pub version: u32,
    /// The key format the records describe: after a scenerun with another format, every
    /// key differs though no input did, so older records explain nothing.
    #[serde(default)]
    pub key_schema: String,
    /// Step record key (`kernel/scene/name`) → its inputs when last built.
    #[serde(default)]
    pub steps: BTreeMap<String, KeyInputs>,
    /// Closure digest → (name → short hash).
    #[serde(default)]
    pub closures: BTreeMap<String, BTreeMap<String, String>>,
}

impl Records {
    pub fn path(cache_root: &Path) -> PathBuf {
        cache_root.join("inputs.json")
    }

    pub fn load(cache_root: &Path) -> Records {
        fsutil::read_kept(&Self::path(cache_root), fsutil::Cap::KEY_INPUTS)
            .and_then(|b| serde_json::from_slice::<Records>(&b).ok())
            .filter(|r| r.version == VERSION && r.key_schema == KEY_SCHEMA)
            .unwrap_or_default()
    }

    /// Merge the inputs of the steps just built, under the history lock (several warms
    /// may finish at once), dropping closures no step names any more. Best effort: a
    /// failure only costs `explain` its detail.
    pub fn record(cache_root: &Path, built: &[(String, KeyInputs)]) {
        if built.is_empty() {
            return;
        }
        let Ok(lock) = fsutil::open_lock_file(&cache_root.join("locks").join("history.lock"))
        else {
            return;
        };
        if lock.lock().is_err() {
            return;
        }
        let mut r = Records::load(cache_root);
        r.version = VERSION;
        r.key_schema = KEY_SCHEMA.to_string();
        for (id, inputs) in built {
            let mut rec = inputs.clone();
            if let Some(c) = rec.closure.take() {
                r.closures
                    .entry(c.digest.clone())
                    .or_insert_with(|| inputs.closure_files(&Records::default()));
                rec.closure_digest = Some(c.digest.clone());
            }
            r.steps.insert(id.clone(), rec);
        }
        let used: std::collections::HashSet<&String> = r
            .steps
            .values()
            .filter_map(|s| s.closure_digest.as_ref())
            .collect();
        let keep: BTreeMap<String, BTreeMap<String, String>> = r
            .closures
            .iter()
            .filter(|(d, _)| used.contains(d))
            .map(|(d, f)| (d.clone(), f.clone()))
            .collect();
        r.closures = keep;
        if let Ok(bytes) = serde_json::to_vec(&r) {
            let _ = fsutil::write_atomic(&Self::path(cache_root), &bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_another_key_format_explain_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("locks")).unwrap();
        let mut inputs = KeyInputs::new("cc -c {source}".into(), "a2a3", Arc::default());
        inputs.file("k.c", "0123456789abcdef0123");
        Records::record(dir.path(), &[("kernel/s/k".into(), inputs)]);
        assert_eq!(Records::load(dir.path()).steps.len(), 1);
        // The same file written by a scenerun whose keys were made another way.
        let path = Records::path(dir.path());
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace(KEY_SCHEMA, "scenerun-key-0");
        std::fs::write(&path, text).unwrap();
        assert!(Records::load(dir.path()).steps.is_empty());
    }
}
