//! "Input changed during the step" (docs/cache-trust.md): after a step succeeds, every
//! file its key read (source and include closure, or inputs) is stat-ed again; if one's
//! size, mtime, ctime or inode differs from when it was hashed, what the step built may
//! come from the new content and is not published under the key of the old. The step
//! then runs once more under the key of the content as it is now; a second change fails
//! the step. (ccache refuses to cache a compile whose source changed meanwhile.) The
//! same for a file only the step's depfile names, which no key read before the step: it
//! counts as changed when its ctime is not before the step's start. The reporter names
//! the changed input beside the outcome of the rerun.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{build_as, Attempt, Done, Unit};
use crate::base::failure::FailCause;
use crate::cache::Dep;
use crate::plan::{Plan, Step};

/// The first file of the step's key that changed since it was hashed, else the first of
/// its depfile entries `deps` that may have changed while it ran (`dep_changed_during`).
pub(super) fn changed_during(
    plan: &Plan,
    step: &Step,
    deps: &[Dep],
    started: i128,
) -> Option<PathBuf> {
    plan.key_files(step)
        .into_iter()
        .find(|p| plan.files.changed_since_hashed(p))
        .or_else(|| dep_changed_during(plan, deps, started))
}

/// Start the step's log (under the job dir, never through a link) with its command
/// line; when the step starts (`started_at`).
pub(super) fn start_log(job_dir: &Path, log: &Path, command: &str) -> i128 {
    let _ = crate::base::fsutil::start_log(job_dir, log, &format!("$ {command}\n"));
    started_at(log)
}

/// When a step starts, by the clock the filesystem stamps files with: the change time
/// of its log, written just before the spawn (`fsutil::file_clock_at`).
fn started_at(log: &Path) -> i128 {
    crate::base::fsutil::file_clock_at(log)
}

/// Wait (a few ms at most) until the clock files are stamped by has ticked past now,
/// probing with the step's log. That clock is coarse: a change is stamped with the
/// last tick (1 to 10 ms) or, with multigrain timestamps, with the latest fine stamp
/// handed out — which can be the one of the edit that made the step rerun. The rerun's
/// log would then carry the edit's very stamp, and the edit count as made during the
/// rerun too (`dep_changed_during`): seen as a rare "changed again on the rerun".
fn next_tick(job_dir: &Path, log: &Path) {
    let stamp = || start_log(job_dir, log, "(waiting for the file clock to tick)");
    let now = stamp();
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(1));
        if stamp() > now {
            return;
        }
    }
}

/// The first file a step's depfile named (and its key does not commit to) that may have
/// changed while the step ran, after the step read it: its hash, taken after the step,
/// could then describe content the step never saw. Such a file was changed (ctime) at or
/// after the step's start, or differs from when this process hashed it before. An
/// artifact in the cache or the job dir (a golden reads its fixture) is never changed in
/// place: it is published whole, often within the clock tick in which the step that
/// reads it starts, and this warm may have rebuilt it since the plan hashed it.
fn dep_changed_during(plan: &Plan, deps: &[Dep], started: i128) -> Option<PathBuf> {
    deps.iter()
        .map(|d| plan.manifest.dir.join(&*d.path))
        .filter(|p| !p.starts_with(&plan.store.root) && !p.starts_with(&plan.job.root))
        .find(|p| {
            crate::base::fsutil::changed_since(p, started) || plan.files.changed_since_hashed(p)
        })
}

/// Run the unit once more under a key recomputed from the files as they are now;
/// `shown` names the input that changed.
pub(super) fn rerun(
    plan: &Plan,
    unit: &Unit,
    shown: &str,
    slot: &mut super::workers::Slot,
) -> Result<Done> {
    let step = &plan.steps[unit.steps[0]];
    next_tick(&plan.job_dir, &step.id.log_path(&plan.job_dir));
    let key = match plan.rekey(unit.steps[0]) {
        Ok(k) => k,
        Err(e) => {
            return Ok(Done::Failed(FailCause::Rekey {
                input: shown.to_string(),
                error: format!("{e:#}"),
            }))
        }
    };
    Ok(match build_as(plan, unit, &key, slot)? {
        Attempt::Done(done) => done,
        Attempt::InputChanged(again) => Done::Failed(FailCause::InputChangedAgain {
            input: crate::key::key_name(&plan.manifest.dir, &again),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file changed just before `next_tick` has a change time before the log's after
    /// it, however coarse the clock: the rerun's start is after the edit that caused it.
    #[test]
    fn next_tick_stamps_the_log_after_every_earlier_change() {
        let dir = tempfile::tempdir().unwrap();
        let (edited, log) = (dir.path().join("gen.h"), dir.path().join("logs/step.log"));
        std::fs::write(&edited, "#define VALUE 1\n").unwrap();
        for _ in 0..20 {
            // The log last changed unobserved, the edit observed: on a kernel with
            // multigrain timestamps the edit is stamped finely and the log's next change
            // coarsely, which may be the very same stamp.
            crate::base::fsutil::start_log(dir.path(), &log, "$ cc\n").unwrap();
            let _ = started_at(&edited);
            std::fs::write(&edited, "#define VALUE 2\n").unwrap();
            let changed = started_at(&edited);
            next_tick(dir.path(), &log);
            assert!(started_at(&log) > changed);
        }
    }
}
