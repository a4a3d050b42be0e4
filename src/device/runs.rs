//! One directory per `device` invocation under `build/scenerun/device/runs/`: its frozen
//! plan, its results, its kernel links and the inner run's markers. Two `device` runs in
//! one checkout therefore never read each other's plan or results. Reports are the one
//! thing they could share: a run takes its report dir's lock first, and a second run on
//! the same report dir is refused before it writes anything there (docs/device.md).

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::ProcId;

/// This invocation's directory; removed when the invocation ends (a later one sweeps
/// it if this process was killed). The invocation holds the directory's outer lock for
/// its whole life: the kernel drops it when the process dies, SIGKILL included.
pub struct Invocation {
    pub dir: PathBuf,
    _outer: File,
}

impl Invocation {
    /// A fresh directory named after this process (pid and start time, so that the
    /// sweep of another invocation can tell it is alive).
    pub fn create(job_dir: &Path) -> io::Result<Invocation> {
        let root = crate::base::layout::device_runs(job_dir);
        std::fs::create_dir_all(&root)?;
        sweep(&root);
        let me = ProcId::me().unwrap_or(ProcId {
            pid: std::process::id() as i32,
            start: 0,
        });
        let dir = root.join(format!(
            "{}-{}-{}",
            me.pid,
            me.start,
            crate::base::fsutil::unique()
        ));
        std::fs::create_dir(&dir)?;
        let outer = crate::base::fsutil::open_lock_file(&outer_lock_path(&dir))?;
        outer.try_lock().map_err(io::Error::other)?;
        Ok(Invocation { dir, _outer: outer })
    }

    /// Remove the directory unless an inner run still uses it (the lock tool returned
    /// while it ran on: a later invocation's sweep removes it).
    pub fn remove(&self) {
        if !inner_running(&self.dir) {
            let _ = crate::base::fsutil::remove_any(&self.dir);
        }
    }
}

/// Remove the directories of invocations that are gone (killed before they cleaned up).
fn sweep(root: &Path) {
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let mut parts = name.split('-');
        let owner = match (parts.next(), parts.next()) {
            (Some(p), Some(s)) => p.parse().ok().zip(s.parse().ok()),
            _ => None,
        };
        // The name's pid and start time, for a directory whose outer lock is not taken
        // yet (its invocation is between making it and locking it).
        let alive = outer_running(&e.path())
            || owner.is_some_and(|(pid, start)| ProcId { pid, start }.alive());
        if !alive && !inner_running(&e.path()) {
            let _ = crate::base::fsutil::remove_any(&e.path());
        }
    }
}

pub fn plan_path(run_dir: &Path) -> PathBuf {
    run_dir.join("plan.json")
}

pub fn results_path(run_dir: &Path) -> PathBuf {
    run_dir.join("results.json")
}

/// Held (flock) by the inner run for its whole life; the kernel drops it even on SIGKILL.
fn inner_lock_path(run_dir: &Path) -> PathBuf {
    run_dir.join("inner.lock")
}

/// Created (exclusively) by the first inner run of the invocation.
fn started_path(run_dir: &Path) -> PathBuf {
    run_dir.join("inner.started")
}

/// Created by any later inner run of the same invocation, which runs nothing.
fn repeated_path(run_dir: &Path) -> PathBuf {
    run_dir.join("inner.repeated")
}

/// Held (flock) by the `device` invocation that made the run dir, for its whole life.
/// The inner run's watch reads the outer's death from it: a lock names no pid (so no
/// reused pid passes for the outer) and needs no `/proc/<pid>/stat` of the outer's own
/// reading, which qemu-user fakes (docs/install.md, aarch64).
fn outer_lock_path(run_dir: &Path) -> PathBuf {
    run_dir.join("outer.lock")
}

/// The invocation that made the run dir lives.
pub fn outer_running(run_dir: &Path) -> bool {
    held(&outer_lock_path(run_dir))
}

/// An inner run holds the run dir's lock now.
pub fn inner_running(run_dir: &Path) -> bool {
    held(&inner_lock_path(run_dir))
}

/// Some process holds the lock file at `path` (absent: nobody).
fn held(path: &Path) -> bool {
    match File::options().write(true).open(path) {
        Ok(f) => f.try_lock().is_err(),
        Err(_) => false,
    }
}

/// The first inner run of this invocation has started (it may have ended since).
pub fn inner_started(run_dir: &Path) -> bool {
    started_path(run_dir).exists()
}

/// The lock tool started the inner command more than once.
pub fn repeated(run_dir: &Path) -> bool {
    repeated_path(run_dir).exists()
}

/// What an inner run finds when it starts.
pub enum Claim {
    /// The first inner run of the invocation: the lock is held until this is dropped.
    First(File),
    /// An inner run already started for this invocation: run nothing.
    Repeat,
}

/// Claim the invocation for this inner run: lock first, then the start marker, so that
/// the outer never sees the marker without the lock while the run lives.
pub fn claim_inner(run_dir: &Path) -> io::Result<Claim> {
    let f = crate::base::fsutil::open_lock_file(&inner_lock_path(run_dir))?;
    if f.try_lock().is_err() {
        mark_repeat(run_dir);
        return Ok(Claim::Repeat);
    }
    match File::options()
        .write(true)
        .create_new(true)
        .open(started_path(run_dir))
    {
        Ok(_) => Ok(Claim::First(f)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            mark_repeat(run_dir);
            Ok(Claim::Repeat)
        }
        Err(e) => Err(e),
    }
}

fn mark_repeat(run_dir: &Path) {
    let _ = std::fs::write(repeated_path(run_dir), format!("{}\n", std::process::id()));
}

/// The report dir's lock, held by a `device` invocation from before it writes anything
/// there until it has written its report.
pub struct ReportDirLock {
    _file: File,
}

/// Another invocation holds the report dir.
#[derive(Debug)]
pub struct ReportDirBusy {
    pub holder: Option<i32>,
}

fn report_lock_path(dir: &Path) -> PathBuf {
    dir.join(".device.lock")
}

pub fn lock_report_dir(dir: &Path) -> io::Result<Result<ReportDirLock, ReportDirBusy>> {
    std::fs::create_dir_all(dir)?;
    let mut f = crate::base::fsutil::open_lock_file(&report_lock_path(dir))?;
    if f.try_lock().is_err() {
        let holder = crate::base::fsutil::read_capped(
            &report_lock_path(dir),
            crate::base::fsutil::Cap::SMALL,
        )
        .ok()
        .and_then(|t| String::from_utf8_lossy(&t).trim().parse().ok());
        return Ok(Err(ReportDirBusy { holder }));
    }
    f.set_len(0)?;
    let _ = writeln!(f, "{}", std::process::id());
    Ok(Ok(ReportDirLock { _file: f }))
}

/// Remove the report files of an earlier run, so that an ending that writes no report
/// (usage error, nothing selected) never leaves an old one looking current. Nothing is
/// touched while another invocation holds the dir.
pub fn clear_stale_reports(dir: &Path) {
    if !dir.join("report.json").exists() && !dir.join("junit.xml").exists() {
        return;
    }
    if let Ok(Ok(_lock)) = lock_report_dir(dir) {
        let _ = std::fs::remove_file(dir.join("report.json"));
        let _ = std::fs::remove_file(dir.join("junit.xml"));
    }
}

/// The run dir as previews show it: one exists only while an invocation runs.
pub fn preview_dir(job_dir: &Path) -> PathBuf {
    crate::base::layout::device_runs(job_dir).join("<run>")
}

/// Wait, at most `limit`, until no inner run holds the run dir's lock. A lock tool may
/// return before the inner run has exited (it killed only the shell around it, or left it
/// in the background); its results are complete only once it has. False: still running.
pub fn wait_for_inner(run_dir: &Path, limit: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        if !inner_running(run_dir) {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outer_lock_lives_as_long_as_its_invocation() {
        let job = tempfile::tempdir().expect("tempdir");
        let inv = Invocation::create(job.path()).expect("invocation");
        assert!(outer_running(&inv.dir), "held while the invocation lives");
        let dir = inv.dir.clone();
        drop(inv);
        assert!(!outer_running(&dir), "free once it is gone");
    }

    #[test]
    fn a_killed_holder_frees_the_outer_lock() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lock = outer_lock_path(dir.path());
        std::fs::write(&lock, "").expect("lock file");
        use std::os::unix::process::CommandExt;
        // flock(1) and the `sleep` it starts both hold the lock's descriptor: the group
        // is killed.
        let mut holder = std::process::Command::new("flock")
            .arg(&lock)
            .args(["sleep", "30"])
            .process_group(0)
            .spawn()
            .expect("flock (util-linux)");
        let t = std::time::Instant::now();
        while !outer_running(dir.path()) && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(outer_running(dir.path()), "the holder's lock is seen");
        crate::base::proc::signal_group(holder.id() as i32, libc::SIGKILL);
        holder.wait().expect("reaped");
        let t = std::time::Instant::now();
        while outer_running(dir.path()) && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!outer_running(dir.path()), "gone with its holder");
    }
}
