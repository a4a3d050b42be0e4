//! Recent durations of steps (kept in the cache, so every runner sharing it learns),
//! for scheduling order and estimates. Keyed by step identity, not content key, so an
//! edited kernel keeps its estimate.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::fsutil;

const KEEP: usize = 5;

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
        fsutil::read_nofollow(&Self::path(root))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The id a scene's device step is kept under (`device/<scene>`).
    pub fn device_key(scene: &str) -> String {
        format!("device/{scene}")
    }

    /// Mean of the recent durations of `id`, in seconds.
    pub fn estimate(&self, id: &str) -> Option<f64> {
        let v = self.steps.get(id)?;
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    }

    /// Merge `new` durations into the file under a lock (several warms may finish at once).
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
