//! What is re-checked before a scene's device step runs (docs/device.md): each file of
//! its artifacts by `stat` (presence, size, and the stamp where the plan took one) and
//! its `{kernels}` links. The inner run checks when it starts and again before each
//! start of a scene or lane process; after the run, a failed scene whose artifacts are
//! gone now is infrastructure's doing (`ending`). Never builds or hashes anything.

use std::path::PathBuf;

use super::{Frozen, FrozenScene};

/// Check every artifact by `stat` (presence and size, and its stamp where the plan
/// took one: a file an earlier device step wrote into since is refused), and the
/// `{kernels}` links. Made when the run starts and again before each start of a scene
/// or lane process (one `stat` per file).
pub fn scene(frozen: &Frozen, s: &FrozenScene) -> Result<(), Gone> {
    for a in s.kernels.iter().chain(&s.fixture).chain(&s.golden) {
        for f in &a.files {
            let p = if f.path.is_empty() {
                a.out.clone()
            } else {
                a.out.join(&f.path)
            };
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_file() && m.len() == f.size => {
                    if f.stamp
                        .is_some_and(|st| st != crate::base::fsutil::Stamp::of(&m))
                    {
                        return Err(Gone::Changed {
                            name: a.name.clone(),
                            path: p,
                        });
                    }
                }
                _ => {
                    return Err(Gone::Artifact {
                        name: a.name.clone(),
                        path: p,
                    })
                }
            }
        }
    }
    // The outer laid out `{kernels}` before the lock; only check it here.
    let dir = super::kernels_dir(&frozen.run_dir, &s.name);
    for k in &s.kernels {
        if std::fs::metadata(dir.join(&k.name)).is_err() {
            return Err(Gone::KernelLink {
                name: k.name.clone(),
                dir,
            });
        }
    }
    Ok(())
}

/// What a scene's step would need that is gone since warm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gone {
    /// A file of an artifact is missing or of another size.
    Artifact { name: String, path: PathBuf },
    /// A link of its `{kernels}` directory is missing.
    KernelLink { name: String, dir: PathBuf },
    /// A file of an artifact changed since the plan saw it (a device step wrote into
    /// the cache entry it shares with this scene).
    Changed { name: String, path: PathBuf },
}

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gone::Artifact { name, path } => write!(
                f,
                "artifact {name} ({}) is missing or damaged since warm: run `scenerun warm` again",
                path.display()
            ),
            Gone::KernelLink { name, dir } => {
                write!(f, "kernel link {name} is missing in {}", dir.display())
            }
            Gone::Changed { name, path } => write!(
                f,
                "artifact {name} ({}) changed after it was published (a device step wrote into the cache?); not run on it: the next `scenerun warm` rebuilds it (declare `device.writes` for a step that writes)",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Gone {}
