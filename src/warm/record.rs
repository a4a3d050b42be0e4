//! The warm record, `build/scenerun/warm.json`: per step its key, status, duration, log
//! and the log tail of failures. The device phase reads it; a recorded failure counts
//! only while its step's key is unchanged.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::cache::Kind;
use crate::fsutil;
use crate::stepid::StepId;

pub const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Built,
    Hit,
    Failed,
    /// Not run because a step it depends on failed.
    Skipped,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub kind: Kind,
    pub scene: String,
    pub name: String,
    pub key: String,
    pub outcome: Outcome,
    pub duration_secs: f64,
    pub log: Option<String>,
    pub error: Option<String>,
    pub log_tail: Option<String>,
}

impl StepRecord {
    pub fn id(&self) -> StepId {
        StepId::new(self.kind, &self.scene, &self.name)
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct WarmRecord {
    pub version: u32,
    pub steps: Vec<StepRecord>,
}

impl WarmRecord {
    pub fn path(job_dir: &Path) -> std::path::PathBuf {
        job_dir.join("warm.json")
    }

    pub fn load(job_dir: &Path) -> WarmRecord {
        std::fs::read(Self::path(job_dir))
            .ok()
            .and_then(|b| serde_json::from_slice::<WarmRecord>(&b).ok())
            .filter(|r| r.version == RECORD_VERSION)
            .unwrap_or_default()
    }

    /// The recorded failures, indexed by step.
    pub fn failures(&self) -> Failures<'_> {
        Failures(
            self.steps
                .iter()
                .filter(|r| matches!(r.outcome, Outcome::Failed | Outcome::Skipped))
                .map(|r| (r.id(), r))
                .collect(),
        )
    }

    /// Replace the records of the steps this warm ran, keep the others. A record that
    /// would not change (a no-op warm: every step a hit, as last time) is not rewritten.
    pub fn merge_and_save(job_dir: &Path, new: Vec<StepRecord>) -> std::io::Result<()> {
        let mut rec = WarmRecord::load(job_dir);
        if rec.version == RECORD_VERSION {
            let old: std::collections::HashMap<StepId, &StepRecord> =
                rec.steps.iter().map(|r| (r.id(), r)).collect();
            if old.len() == rec.steps.len() && new.iter().all(|n| old.get(&n.id()) == Some(&n)) {
                return Ok(());
            }
        }
        rec.version = RECORD_VERSION;
        let replaced: std::collections::HashSet<StepId> = new.iter().map(StepRecord::id).collect();
        rec.steps.retain(|o| !replaced.contains(&o.id()));
        drop(replaced);
        rec.steps.extend(new);
        let bytes = serde_json::to_vec_pretty(&rec).expect("record serializes");
        fsutil::write_atomic(&Self::path(job_dir), &bytes)
    }
}

/// Failed steps of a warm record, by step.
pub struct Failures<'a>(std::collections::HashMap<StepId, &'a StepRecord>);

impl Failures<'_> {
    /// The failure message recorded for this step with this exact key.
    pub fn get(&self, step: &StepId, key: &str) -> Option<String> {
        let r = self.0.get(step).filter(|r| r.key == key)?;
        let mut msg = r.error.clone().unwrap_or_else(|| "failed".into());
        if let Some(tail) = &r.log_tail {
            if !tail.trim().is_empty() {
                msg.push('\n');
                msg.push_str(tail.trim_end());
            }
        }
        Some(msg)
    }
}
