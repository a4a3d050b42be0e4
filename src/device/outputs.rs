//! What a scene writes of its own (a DFX run's dependency graph, swimlane traces, PMU
//! counters, argument dumps): every scene with a device step gets a private directory
//! `<report dir>/outputs/<scene>/`, made before the lock is taken, handed to its step as
//! `{outputs}` and `$SCENERUN_SCENE_OUTPUTS` (in a lane, per scene through the `{scenes}`
//! file's `outputs`), and listed in report.json after the run (docs/reports.md).
//! Invariant: no two scenes share a directory (scene names are unique), an earlier run's
//! outputs never look like this run's, and the listing follows no link and is capped.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::Frozen;

/// The variable that names a scene's outputs directory while it runs.
pub const ENV: &str = "SCENERUN_SCENE_OUTPUTS";

/// The most files report.json names per scene (the first in path order).
pub const MAX_LISTED: usize = 1000;

/// Scene `scene`'s outputs directory under `report_dir` (a selection's scenes,
/// `<selection>/<name>`, under a directory of their selection).
pub fn dir(report_dir: &Path, scene: &str) -> PathBuf {
    report_dir.join("outputs").join(scene)
}

/// An earlier run's outputs are gone (a link in their place is removed, never followed).
pub(super) fn clear(report_dir: &Path) {
    let _ = crate::base::fsutil::remove_any(&report_dir.join("outputs"));
}

/// Every device scene's directory, made empty before the lock is taken.
pub(super) fn make(frozen: &Frozen) -> Result<()> {
    clear(&frozen.report_dir);
    for s in frozen.scenes.iter().filter(|s| s.device.is_some()) {
        let d = dir(&frozen.report_dir, &s.name);
        crate::base::fsutil::real_dirs(&frozen.report_dir, &d)
            .map_err(|e| crate::base::error::err!(Infra, "cannot create {}: {e}", d.display()))?;
    }
    Ok(())
}

/// The regular files scene `scene` left in its directory, relative to the report dir,
/// sorted, at most `MAX_LISTED`. A directory the step replaced by a link or a file
/// lists nothing.
pub fn written(report_dir: &Path, scene: &str) -> Vec<String> {
    let d = dir(report_dir, scene);
    if crate::base::fsutil::node(&d).ok() != Some(crate::base::fsutil::Node::Dir) {
        return Vec::new();
    }
    let Ok((files, _)) = crate::base::fsutil::walk_regular(&d, MAX_LISTED) else {
        return Vec::new();
    };
    files
        .into_iter()
        .map(|f| format!("outputs/{scene}/{f}"))
        .collect()
}
