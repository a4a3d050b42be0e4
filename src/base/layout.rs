//! Where scenerun keeps its files outside the cache's own layout (which `cache` owns):
//! the job dir beside the manifest and what lives in it, the default report dir, and
//! which cache directory a run uses. Every phase asks here; nothing joins these paths
//! itself.
//!
//! ```text
//! <manifest dir>/build/scenerun/        the job dir (also the default report dir)
//!     statmemo.json closurememo.json    stat and include-closure memos (key)
//!     compiled-statmemo.json            the stat memo of the compiles tests start (compiled)
//!     manifest.json                     the parsed manifest, kept for the next run
//!     warm.json                         the warm record
//!     job/                              a store of `persist: false` artifacts
//!     logs/<scene>/                     step logs
//!     device/runs/<run>/                one device invocation's frozen plan and results
//!     lock.log                          the lock command's output
//! <manifest dir>/build/cache/           the cache, unless configured elsewhere
//! ```

use std::path::{Path, PathBuf};

/// The job dir of the checkout whose manifest is in `manifest_dir`: `build/scenerun`.
pub fn job_dir(manifest_dir: &Path) -> PathBuf {
    manifest_dir.join("build").join("scenerun")
}

/// The cache directory: `--cache-dir` (or `$SCENERUN_CACHE_DIR`, both `flag`) >
/// `cache.dir` (`configured`, already resolved against the manifest's directory) >
/// `build/cache` beside the manifest.
pub fn cache_dir(manifest_dir: &Path, configured: Option<&Path>, flag: Option<&Path>) -> PathBuf {
    match flag {
        Some(p) => std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
        None => configured
            .map(Path::to_path_buf)
            .unwrap_or_else(|| manifest_dir.join("build").join("cache")),
    }
}

/// Which setting chose the cache directory (named where a message shows the dir, so a
/// warm into another one is told apart from no warm at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheFrom {
    Flag,
    Env,
    Manifest,
    Default,
}

impl CacheFrom {
    /// `given`: the value `--cache-dir` or `$SCENERUN_CACHE_DIR` gave, `from_env` when
    /// it was the variable; `configured`: the manifest sets `cache.dir`.
    pub fn of(given: Option<&Path>, from_env: bool, configured: bool) -> CacheFrom {
        match given {
            Some(_) if from_env => CacheFrom::Env,
            Some(_) => CacheFrom::Flag,
            None if configured => CacheFrom::Manifest,
            None => CacheFrom::Default,
        }
    }
}

impl std::fmt::Display for CacheFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CacheFrom::Flag => "--cache-dir",
            CacheFrom::Env => "$SCENERUN_CACHE_DIR",
            CacheFrom::Manifest => "the manifest's cache.dir",
            CacheFrom::Default => "the default: build/cache beside the manifest",
        })
    }
}

/// Where `device` writes report.json, junit.xml and logs: `--report-dir` (relative to
/// the current directory), else the job dir.
pub fn report_dir(flag: Option<&Path>, job_dir: &Path) -> PathBuf {
    match flag {
        Some(p) => std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf()),
        None => job_dir.to_path_buf(),
    }
}

/// The stat memo in a job dir (the closure memo is kept beside it).
pub fn stat_memo(job_dir: &Path) -> PathBuf {
    job_dir.join("statmemo.json")
}

/// The stat memo of the compiles tests start (`scenerun cc`): its own file, so the
/// compiles of a device run never race `warm`'s memo.
pub fn compile_stat_memo(job_dir: &Path) -> PathBuf {
    job_dir.join("compiled-statmemo.json")
}

/// The kept parse of the manifest in a job dir.
pub fn manifest_memo(job_dir: &Path) -> PathBuf {
    job_dir.join("manifest.json")
}

/// The warm record in a job dir.
pub fn warm_record(job_dir: &Path) -> PathBuf {
    job_dir.join("warm.json")
}

/// The store of `persist: false` artifacts, kept for this job only.
pub fn job_store(job_dir: &Path) -> PathBuf {
    job_dir.join("job")
}

/// The lock command's output of the last device phase.
pub fn lock_log(job_dir: &Path) -> PathBuf {
    job_dir.join("lock.log")
}

/// Where each device invocation gets a directory of its own.
pub fn device_runs(job_dir: &Path) -> PathBuf {
    job_dir.join("device").join("runs")
}
