//! Recent durations of steps (kept in the cache, so every runner sharing it learns),
//! for scheduling order and estimates. Keyed by step identity, not content key, so an
//! edited kernel keeps its estimate.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::base::fsutil;
use crate::base::stepid::StepId;

const KEEP: usize = 5;

/// What history keeps durations of. The key each is kept under is made here only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryId<'a> {
    /// A warm step: `<kind>/<scene>/<name>` (its `StepId::record_key`).
    Step(&'a StepId),
    /// A scene's device step: `device/<scene>`.
    Device(&'a str),
    /// One lane process's start-up: `lane-startup/<lane>`.
    LaneStartup(&'a str),
}

impl HistoryId<'_> {
    /// The key in `history.json`.
    pub fn key(self) -> String {
        match self {
            HistoryId::Step(id) => id.record_key(),
            HistoryId::Device(scene) => format!("device/{scene}"),
            HistoryId::LaneStartup(lane) => format!("lane-startup/{lane}"),
        }
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct History {
    #[serde(default)]
    pub steps: BTreeMap<String, Vec<f64>>,
}

impl History {
    pub fn path(root: &std::path::Path) -> PathBuf {
        root.join("history.json")
    }

    pub fn load(root: &std::path::Path) -> History {
        fsutil::read_kept(&Self::path(root), fsutil::Cap::HISTORY)
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// Mean of the recent durations of `id`, in seconds.
    pub fn estimate(&self, id: HistoryId) -> Option<f64> {
        let v = self.steps.get(&id.key())?;
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Merge `new` durations (keyed by `HistoryId::key`) into the file under a lock
    /// (several warms may finish at once).
    pub fn record(root: &std::path::Path, new: &[(String, f64)]) {
        if new.is_empty() {
            return;
        }
        let lock_path = root.join("locks").join("history.lock");
        let Ok(lock) = fsutil::open_lock_file(&lock_path) else {
            return;
        };
        if lock.lock().is_err() {
            return;
        }
        let mut h = History::load(root);
        for (id, secs) in new {
            let v = h.steps.entry(id.clone()).or_default();
            v.push(*secs);
            if v.len() > KEEP {
                v.remove(0);
            }
        }
        if let Ok(bytes) = serde_json::to_vec(&h) {
            let _ = fsutil::write_atomic(&Self::path(root), &bytes);
        }
    }
}
