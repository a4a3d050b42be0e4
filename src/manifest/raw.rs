//! The manifest as written: serde types, one per YAML mapping. Sub-mappings that need
//! their own error locations stay `Value` here and are taken apart one by one in
//! `mod.rs`, so one mistake does not hide the next.

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

pub const TOP: &[&str] = &[
    "version",
    "platform",
    "env",
    "cache",
    "toolchains",
    "lock",
    "scenes",
    "lanes",
    "scenes_from",
    "prepare",
];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cache {
    pub dir: Option<String>,
    pub max_size: Option<Scalar>,
    pub max_age: Option<Scalar>,
    pub remote: Option<Value>,
}
pub const CACHE: &[&str] = &["dir", "max_size", "max_age", "remote"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Toolchain {
    pub compile: String,
    pub identity: Option<String>,
    pub identity_timeout: Option<Scalar>,
    pub depfile: Option<String>,
    pub include_flag: Option<String>,
}
pub const TOOLCHAIN: &[&str] = &[
    "compile",
    "identity",
    "identity_timeout",
    "depfile",
    "include_flag",
];

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
pub const LOCK: &[&str] = &[
    "submit",
    "device_env",
    "device_count",
    "release_timeout",
    "grace",
    "device_fault",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scene {
    pub name: String,
    pub platform: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, Scalar>,
    #[serde(default)]
    pub kernels: Vec<Value>,
    pub fixture: Option<Value>,
    pub golden: Option<Value>,
    pub device: Option<Value>,
}
pub const SCENE: &[&str] = &[
    "name", "platform", "tags", "env", "kernels", "fixture", "golden", "device",
];

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
pub const KERNEL: &[&str] = &["name", "toolchain", "source", "include_dirs", "flags"];

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
}
pub const GEN_STEP: &[&str] = &[
    "run", "inputs", "persist", "memory", "threads", "timeout", "identity",
];

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
}
pub const PREPARE: &[&str] = &[
    "name", "run", "inputs", "persist", "memory", "threads", "timeout", "identity",
];

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
}
pub const DEVICE_STEP: &[&str] = &[
    "run",
    "devices",
    "exclusive",
    "timeout",
    "lane",
    "args",
    "retries",
    "stop_signal",
    "stop_wait",
    "order",
    "lane_args",
    "lane_env",
];
