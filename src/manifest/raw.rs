//! The manifest as written: serde types, one per kind of YAML mapping the manifest has,
//! all of them here, with the table of their keys (`keys()`) that the loader and
//! docs/manifest.md are checked against. Invariant: this file imports no other part of
//! the manifest but the YAML reader, so every part that validates a mapping imports it,
//! never the other way round. Sub-mappings that need their own error locations stay
//! `Value` here and are taken apart one by one, so one mistake does not hide the next.

use std::collections::BTreeMap;

use super::yaml::Node as Value;
use serde::Deserialize;

/// A scalar that may be written as a number or a string (`max_size: 1000`, `"2000"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Scalar {
    Int(u64),
    Float(f64),
    Bool(bool),
    Str(String),
}

impl Scalar {
    pub fn text(&self) -> String {
        match self {
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Str(s) => s.clone(),
        }
    }
}

/// The top-level mapping's keys (each taken apart on its own in `mod.rs`; this struct
/// only names them, for `check_keys` and the docs).
#[derive(Deserialize)]
#[allow(dead_code)]
pub struct Top {
    version: Value,
    platform: Value,
    env: Value,
    suite_args: Value,
    cache: Value,
    toolchains: Value,
    lock: Value,
    scenes: Value,
    lanes: Value,
    scenes_from: Value,
    prepare: Value,
    workers: Value,
    compile_cache: Value,
    fork_server: Value,
    selections: Value,
    profiles: Value,
    lane_defaults: Value,
    signing: Value,
}

/// One `selections.<name>` entry (docs/manifest.md, "Selections").
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    pub paths: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
    pub order: Option<String>,
}

/// One `profiles.<name>` entry: what it replaces.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub suite_args: Option<Vec<String>>,
    pub selections: Option<BTreeMap<String, Value>>,
}

/// `profiles.<name>.selections.<selection>`: the words a profile gives a selection.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSelection {
    pub paths: Option<Vec<String>>,
    pub args: Option<Vec<String>>,
}

/// `fork_server:` (docs/lanes.md, "A fork server").
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkServer {
    pub run: String,
    pub start_timeout: Option<Scalar>,
}

/// `compile_cache:` (docs/compile-cache.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompileCache {
    pub compilers: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    pub dir: Option<String>,
    pub max_size: Option<Scalar>,
    pub max_age: Option<Scalar>,
    pub remote: Option<Value>,
    /// Deprecated: `signing.verify_key` with `verify: [local]`.
    pub verify_key: Option<String>,
    /// Deprecated: `signing.key_env`.
    pub sign_key_env: Option<String>,
}

/// `signing:` (docs/cache-trust.md, "Signed entries").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signing {
    pub verify_key: Option<String>,
    pub key_env: Option<String>,
    pub verify: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Remote {
    pub url: Option<String>,
    pub write: Option<bool>,
    pub token_env: Option<String>,
    pub max_upload: Option<Scalar>,
    pub timeout: Option<Scalar>,
    /// Deprecated: `signing.verify_key` with `verify: [remote]`.
    pub verify_key: Option<String>,
    /// Deprecated: `signing.key_env`.
    pub sign_key_env: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toolchain {
    pub compile: String,
    pub identity: Option<String>,
    pub identity_timeout: Option<Scalar>,
    pub depfile: Option<String>,
    pub include_flag: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub submit: String,
    pub device_env: Option<String>,
    pub device_count: Option<u32>,
    pub release_timeout: Option<Scalar>,
    pub grace: Option<Scalar>,
    pub device_fault: Option<Value>,
}

/// `lock.device_fault` and `lanes.<name>.restart_on`: an output rule.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    #[serde(default)]
    pub exit_codes: Vec<i32>,
    #[serde(default)]
    pub patterns: Vec<String>,
}

/// One `lanes.<name>` entry (docs/lanes.md), after `lane_defaults` and `inherits` are
/// resolved (`inherit.rs`); `lane_defaults` takes the same keys but `inherits`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lane {
    pub run: String,
    /// Taken out (and resolved) before the lane is read; named for the key check.
    #[allow(dead_code)]
    pub inherits: Option<String>,
    pub args: Option<Vec<String>>,
    pub devices: Option<u32>,
    pub restarts: Option<u32>,
    pub timeout: Option<Scalar>,
    #[serde(default)]
    pub env: BTreeMap<String, Scalar>,
    pub stop_signal: Option<String>,
    pub stop_wait: Option<Scalar>,
    pub restart_on: Option<Value>,
    pub max_restarts: Option<u32>,
    pub prestart: Option<Scalar>,
}

/// One `workers.<name>` entry (docs/manifest.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Worker {
    pub run: String,
    pub memory_cap: Option<Scalar>,
    pub enabled: Option<bool>,
    pub start_timeout: Option<Scalar>,
}

/// One `scenes_from:` entry.
#[derive(Debug, Deserialize)]
pub struct Generator {
    pub run: String,
    #[serde(default)]
    pub inputs: Vec<String>,
    pub timeout: Option<Scalar>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scene {
    pub name: String,
    pub nodeid: Option<String>,
    pub case: Option<String>,
    pub selection: Option<String>,
    pub platform: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, Scalar>,
    #[serde(default)]
    pub kernels: Vec<Value>,
    pub fixture: Option<Value>,
    pub golden: Option<Value>,
    pub test: Option<Value>,
    pub device: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kernel {
    pub name: String,
    pub toolchain: String,
    pub source: String,
    #[serde(default)]
    pub include_dirs: Vec<String>,
    #[serde(default)]
    pub flags: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenStep {
    pub run: String,
    #[serde(default)]
    pub inputs: Vec<String>,
    pub persist: Option<bool>,
    pub memory: Option<Scalar>,
    pub threads: Option<u32>,
    pub timeout: Option<Scalar>,
    pub identity: Option<String>,
    pub worker: Option<String>,
}

/// A top-level `prepare:` step: a named fixture-like step shared by every scene.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prepare {
    pub name: String,
    pub run: String,
    #[serde(default)]
    pub inputs: Vec<String>,
    pub persist: Option<bool>,
    pub memory: Option<Scalar>,
    pub threads: Option<u32>,
    pub timeout: Option<Scalar>,
    pub identity: Option<String>,
    pub worker: Option<String>,
    /// The selections it is for (default: every one).
    pub selections: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceStep {
    pub run: Option<String>,
    pub devices: Option<u32>,
    pub exclusive: Option<bool>,
    pub timeout: Option<Scalar>,
    pub lane: Option<String>,
    pub args: Option<Vec<String>>,
    pub retries: Option<u32>,
    pub stop_signal: Option<String>,
    pub stop_wait: Option<Scalar>,
    pub order: Option<String>,
    pub lane_args: Option<Vec<String>>,
    pub lane_env: Option<BTreeMap<String, Scalar>>,
    pub writes: Option<Vec<String>>,
}

/// One kind of mapping the manifest has, where it is, and the keys it accepts.
#[derive(Debug)]
pub struct Mapping {
    /// Where it is written, as docs/manifest.md heads its section: `cache.remote`,
    /// `scenes[].device`, `toolchains.<name>`; several places with the same keys are
    /// joined by `, `.
    pub path: &'static str,
    pub keys: &'static [&'static str],
}

/// Every kind of mapping the loader checks keys of, with its keys from its own struct.
/// `take` asserts (in debug builds) that a struct it deserializes is listed here, and a
/// test asserts every key here is in docs/manifest.md.
pub fn keys() -> &'static [Mapping] {
    static KEYS: std::sync::OnceLock<Vec<Mapping>> = std::sync::OnceLock::new();
    fn m<T: serde::de::DeserializeOwned>(path: &'static str) -> Mapping {
        let keys = fields_of::<T>().expect("a struct");
        Mapping { path, keys }
    }
    KEYS.get_or_init(|| {
        vec![
            m::<Top>("top level"),
            m::<Cache>("cache"),
            m::<Remote>("cache.remote"),
            m::<Signing>("signing"),
            m::<Toolchain>("toolchains.<name>"),
            m::<Lock>("lock"),
            m::<Fault>("lock.device_fault, lanes.<name>.restart_on"),
            m::<Prepare>("prepare[]"),
            m::<Generator>("scenes_from[]"),
            m::<Lane>("lanes.<name>, lane_defaults"),
            m::<Selection>("selections.<name>"),
            m::<Profile>("profiles.<name>"),
            m::<ProfileSelection>("profiles.<name>.selections.<name>"),
            m::<Worker>("workers.<name>"),
            m::<CompileCache>("compile_cache"),
            m::<ForkServer>("fork_server"),
            m::<Scene>("scenes[]"),
            m::<Kernel>("scenes[].kernels[]"),
            m::<GenStep>("scenes[].fixture, scenes[].golden, scenes[].test"),
            m::<DeviceStep>("scenes[].device"),
        ]
    })
}

/// The keys a mapping deserialized into `T` accepts, as serde's derive tells its
/// deserializer (`deserialize_struct`'s field list): from the struct itself, never a
/// second list. None: `T` is not a struct (a free-form mapping, a list, a scalar).
pub fn fields_of<T: serde::de::DeserializeOwned>() -> Option<&'static [&'static str]> {
    match T::deserialize(FieldsProbe) {
        Err(Probe::Fields(f)) => Some(f),
        _ => None,
    }
}

/// A deserializer that deserializes nothing: it only catches the field list.
struct FieldsProbe;

#[derive(Debug)]
enum Probe {
    Fields(&'static [&'static str]),
    NotAStruct,
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a probe for field names")
    }
}

impl std::error::Error for Probe {}

impl serde::de::Error for Probe {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Probe::NotAStruct
    }
}

impl<'de> serde::Deserializer<'de> for FieldsProbe {
    type Error = Probe;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Probe> {
        Err(Probe::NotAStruct)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Probe> {
        Err(Probe::Fields(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_structs_fields_are_its_keys_and_other_types_have_none() {
        assert_eq!(
            fields_of::<Kernel>(),
            Some(&["name", "toolchain", "source", "include_dirs", "flags"][..])
        );
        assert_eq!(fields_of::<BTreeMap<String, Value>>(), None);
        assert_eq!(fields_of::<Vec<Value>>(), None);
        assert_eq!(fields_of::<String>(), None);
    }
}
