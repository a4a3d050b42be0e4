//! An artifact `device` finds missing (exit 6, the lock not taken): typed, for report/
//! to word the summary (`report::not_warm`); every missing artifact is still listed per
//! scene in report.json.

use crate::base::stepid::StepId;
use crate::plan::Step;

/// An artifact that is not warm.
#[derive(Debug, Clone)]
pub struct Missing {
    /// The scene's index in the frozen plan.
    pub scene: usize,
    /// The step that would have built it (its scene, kind and name).
    pub id: StepId,
    pub key: String,
}

impl Missing {
    /// Step `step` of the frozen plan's scene `scene` is not warm.
    pub fn of(scene: usize, step: &Step) -> Missing {
        Missing {
            scene,
            id: step.id.clone(),
            key: step.key.clone(),
        }
    }

    /// One line per artifact, as report.json's scene message lists them.
    pub fn line(&self) -> String {
        format!(
            "{}: {} {} (key {}) is not warm",
            self.id.scene,
            self.id.label(),
            self.id.name,
            &self.key[..self.key.len().min(12)]
        )
    }
}
