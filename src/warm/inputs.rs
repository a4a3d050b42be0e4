//! "Input changed during the step" (docs/cache-trust.md): after a step succeeds, every
//! file its key read (source and include closure, or inputs) is stat-ed again; if one's
//! size, mtime, ctime or inode differs from when it was hashed, what the step built may
//! come from the new content and is not published under the key of the old. The step
//! then runs once more under the key of the content as it is now; a second change fails
//! the step. (ccache refuses to cache a compile whose source changed meanwhile.)

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{build_as, Attempt, Done, Unit};
use crate::plan::{Plan, Step};

/// The first file of the step's key that changed since it was hashed.
pub(super) fn changed_during(plan: &Plan, step: &Step) -> Option<PathBuf> {
    plan.key_files(step)
        .into_iter()
        .find(|p| plan.files.changed_since_hashed(p))
}

/// Run the unit once more under a key recomputed from the files as they are now.
pub(super) fn rerun(plan: &Plan, unit: &Unit, changed: &Path) -> Result<Done> {
    let step = &plan.steps[unit.steps[0]];
    let shown = crate::key::key_name(&plan.manifest.dir, changed);
    eprintln!(
        "note: {} {}: input changed during the step ({shown}): not published; running it again with a recomputed key",
        step.label(),
        step.id(plan)
    );
    let failed = |error: String| Done::Failed {
        error,
        tail: String::new(),
    };
    let key = match plan.rekey(unit.steps[0]) {
        Ok(k) => k,
        Err(e) => {
            return Ok(failed(format!(
                "input changed during the step ({shown}), and its key cannot be recomputed: {e:#}"
            )))
        }
    };
    Ok(match build_as(plan, unit, &key)? {
        Attempt::Done(done) => done,
        Attempt::InputChanged(again) => failed(format!(
            "input changed during the step ({} changed again on the rerun); nothing was published",
            crate::key::key_name(&plan.manifest.dir, &again)
        )),
    })
}
