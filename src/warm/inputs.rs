//! "Input changed during the step" (docs/cache-trust.md): after a step succeeds, every
//! file its key read (source and include closure, or inputs) is stat-ed again; if one's
//! size, mtime, ctime or inode differs from when it was hashed, what the step built may
//! come from the new content and is not published under the key of the old. The step
//! then runs once more under the key of the content as it is now; a second change fails
//! the step. (ccache refuses to cache a compile whose source changed meanwhile.) The
//! reporter names the changed input beside the outcome of the rerun.

use std::path::PathBuf;

use anyhow::Result;

use super::events::FailCause;
use super::{build_as, Attempt, Done, Unit};
use crate::plan::{Plan, Step};

/// The first file of the step's key that changed since it was hashed.
pub(super) fn changed_during(plan: &Plan, step: &Step) -> Option<PathBuf> {
    plan.key_files(step)
        .into_iter()
        .find(|p| plan.files.changed_since_hashed(p))
}

/// Run the unit once more under a key recomputed from the files as they are now;
/// `shown` names the input that changed.
pub(super) fn rerun(plan: &Plan, unit: &Unit, shown: &str) -> Result<Done> {
    let key = match plan.rekey(unit.steps[0]) {
        Ok(k) => k,
        Err(e) => {
            return Ok(Done::Failed(FailCause::Rekey {
                input: shown.to_string(),
                error: format!("{e:#}"),
            }))
        }
    };
    Ok(match build_as(plan, unit, &key)? {
        Attempt::Done(done) => done,
        Attempt::InputChanged(again) => Done::Failed(FailCause::InputChangedAgain(
            crate::key::key_name(&plan.manifest.dir, &again),
        )),
    })
}
