//! Private copies for device steps that write (`device.writes`): such a step is handed
//! its own writable copy of the artifacts it names, in its run's directory; every other
//! step is handed the cache entries themselves, which are read-only. Invariant: no
//! device step is ever handed a path it is meant to write through into the cache.

use std::path::Path;

use anyhow::Result;

use super::{Artifact, Frozen};
use crate::manifest::Writes;

/// Copy, for each scene whose device step declares `writes`, those artifacts into
/// `<run>/private/<scene>/` and point the frozen scene at the copies (whose stamps are
/// dropped: nothing checks a private copy). Made before the lock is taken.
pub fn copy_for_writers(frozen: &mut Frozen) -> Result<()> {
    let run_dir = frozen.run_dir.clone();
    for s in frozen
        .scenes
        .iter_mut()
        .filter(|s| s.warm_failure.is_none())
    {
        let writes = s
            .device
            .as_ref()
            .map(|d| d.writes.clone())
            .unwrap_or_default();
        if writes.is_empty() {
            continue;
        }
        let dir = run_dir.join("private").join(&s.name);
        for w in writes {
            let arts: Vec<&mut Artifact> = match w {
                Writes::Kernels => s.kernels.iter_mut().collect(),
                Writes::Fixture => s.fixture.iter_mut().collect(),
                Writes::Golden => s.golden.iter_mut().collect(),
            };
            for a in arts {
                let to = match w {
                    Writes::Kernels => dir.join("kernels").join(&a.name),
                    _ => dir.join(w.word()),
                };
                copy_writable(&a.out, &to).map_err(|e| {
                    let what = format!(
                        "cannot copy {} {} for scene {} (device.writes) to {}",
                        w.word(),
                        a.name,
                        s.name,
                        to.display()
                    );
                    crate::base::error::infra(what, e)
                })?;
                a.out = to;
                for f in &mut a.files {
                    f.stamp = None;
                }
            }
        }
    }
    Ok(())
}

/// Copy a published artifact (a file, or a tree of directories and regular files; no
/// link is followed) to `to`, writable by its owner.
fn copy_writable(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let writable = |p: &Path| -> std::io::Result<()> {
        let mode = std::fs::symlink_metadata(p)?.permissions().mode();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode | 0o200))
    };
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let _ = crate::base::fsutil::remove_any(to);
    if std::fs::symlink_metadata(from)?.is_file() {
        std::fs::copy(from, to)?;
        return writable(to);
    }
    std::fs::create_dir(to)?;
    for (rel, _) in crate::base::fsutil::walk_files(from)? {
        let dest = to.join(&rel);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(from.join(&rel), &dest)?;
        writable(&dest)?;
    }
    Ok(())
}
