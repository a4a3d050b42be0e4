//! The inner run's side of lanes started before the lock (docs/lanes.md). Invariant:
//! from its claim on, the inner run owns every such process it could claim — its claim
//! file's `flock` is held for the inner run's life, so `scenerun device` never stops a
//! process the inner run handed ids to, and the inner run never hands ids to one
//! `scenerun device` is stopping — and each is in the inner run's registry of groups, so
//! a cancel, a lost lock and the inner run's own death reach it as they reach its own
//! lane processes. A process no batch took is stopped before the inner run ends.

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::files::LaneFiles;
use super::protocol::{parse_line, LaneEvent, Line};
use crate::base::notice::{LaneNotice, Unadoptable};
use crate::base::proc;
use crate::device::{Frozen, Prestarted};

/// How long a leader that is gone may take to have its status written (the outer reaps
/// it at once; longer means the outer is gone, and with it the lock).
const STATUS_WAIT: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(10);

/// The processes started before the lock, as the inner run found them.
#[derive(Default)]
pub struct Pool {
    entries: Mutex<Vec<Entry>>,
}

struct Entry {
    rec: Prestarted,
    files: LaneFiles,
    /// Held while this inner run owns it; None: `scenerun device` stopped it first.
    claim: Option<File>,
    /// Its group was alive when claimed, and is in the registry (only such a group is
    /// ever signalled: the id of one gone before may be another's by now).
    registered: bool,
    /// A batch took it (or found it gone).
    taken: bool,
    /// A batch found it unusable (said so then): stopped and forgotten with the unused.
    unusable: bool,
}

/// A process started before the lock, owned by this inner run, for one batch.
pub struct Adopted {
    rec: Prestarted,
    files: LaneFiles,
}

/// The raw wait status `scenerun device` wrote for a leader that ended.
fn status(path: &Path) -> Option<ExitStatus> {
    let text = std::fs::read_to_string(path).ok()?;
    text.trim().parse().ok().map(ExitStatus::from_raw)
}

fn describe(st: ExitStatus) -> String {
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "ended".into(),
    }
}

/// How a process started before the lock ended before its ids came, if it did. A
/// leader that is not there and whose status does not come was never visible here: the
/// lock tool ran the inner run on another host, or in another PID namespace.
fn ended_before(rec: &Prestarted, files: &LaneFiles) -> Option<String> {
    if let Some(st) = status(&files.status) {
        return Some(describe(st));
    }
    if rec.leader.alive() {
        return None;
    }
    let t = Instant::now();
    while t.elapsed() < STATUS_WAIT {
        if let Some(st) = status(&files.status) {
            return Some(describe(st));
        }
        std::thread::sleep(POLL);
    }
    Some(
        "no such process here: a lock tool must run its command on the host that runs \
         scenerun device for lanes started before the lock"
            .into(),
    )
}

/// The process wrote something besides its ready line to its results file (looked at
/// up to its first 64 KiB).
fn wrote_results(path: &Path) -> bool {
    let text = proc::output::OutputFile::new(path)
        .read(64 << 10)
        .map(|got| got.bytes)
        .unwrap_or_default();
    String::from_utf8_lossy(&text)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .any(|l| !matches!(parse_line(l), Line::Event(LaneEvent::Ready { .. })))
}

impl Pool {
    /// Claim every process `scenerun device` started before the lock, and take each
    /// claimed one whose group still lives into the registry (with its lane's stop).
    pub fn claim(frozen: &Frozen) -> Pool {
        let entries = frozen
            .prestarted
            .iter()
            .map(|rec| {
                let files = LaneFiles::of(frozen, &rec.lane, rec.n);
                let claim = crate::base::fsutil::open_lock_file(&files.claim)
                    .ok()
                    .filter(|f| f.try_lock().is_ok());
                let registered = claim.is_some() && rec.leader.group_alive();
                if registered {
                    let stop = frozen.lanes.get(&rec.lane).and_then(|l| l.stop);
                    proc::adopt(rec.leader.pid, stop, Some(&files.log));
                }
                Entry {
                    rec: rec.clone(),
                    files,
                    claim,
                    registered,
                    taken: false,
                    unusable: false,
                }
            })
            .collect();
        Pool {
            entries: Mutex::new(entries),
        }
    }

    /// The process started before the lock for the first process of `lane`'s `batch`
    /// (frozen scene indices, in batch order): None when none was; Err(why) when it
    /// cannot be used (it ended before its ids came, or `scenerun device` stopped it).
    pub fn take(&self, lane: &str, batch: &[usize]) -> Option<Result<Adopted, Unadoptable>> {
        let mut entries = self.entries.lock().expect("prestarted");
        let e = entries
            .iter_mut()
            .find(|e| !e.taken && e.rec.lane == lane && e.rec.scenes == batch)?;
        e.taken = true;
        let pid = e.rec.leader.pid;
        if e.claim.is_none() {
            return Some(Err(Unadoptable::BeingStopped { pid }));
        }
        let why = if wrote_results(&e.files.results) {
            // Its command does not wait for its ids: whatever it reported ran on none.
            if e.registered {
                proc::terminate(pid);
            }
            Unadoptable::ReportedEarly { pid }
        } else if let Some(how) = ended_before(&e.rec, &e.files) {
            Unadoptable::EndedEarly {
                pid,
                how,
                log: e.files.log.clone(),
            }
        } else if !e.registered {
            // Alive now, so alive when claimed: registered; never otherwise.
            Unadoptable::Gone { pid }
        } else {
            return Some(Ok(Adopted {
                rec: e.rec.clone(),
                files: e.files.clone(),
            }));
        };
        // `stop_unused` stops it if it lives, and forgets it, without a word more.
        (e.taken, e.unusable) = (false, true);
        Some(Err(why))
    }

    /// Stop every process no batch took (the packing inside the lock differed, or the
    /// run was cut short) or found unusable, and wait for them; a warning for each that
    /// was still waiting unused. A group already gone is forgotten, never signalled.
    pub fn stop_unused(&self) -> Vec<LaneNotice> {
        let mut entries = self.entries.lock().expect("prestarted");
        let mut warnings = Vec::new();
        let mut waits = Vec::new();
        for e in entries.iter_mut().filter(|e| !e.taken && e.registered) {
            e.taken = true;
            let pgid = e.rec.leader.pid;
            if !e.rec.leader.group_alive() {
                proc::disown(pgid);
                continue;
            }
            if !e.unusable && !proc::interrupted() && !crate::device::watch::lock_lost() {
                warnings.push(LaneNotice::PrestartUnused {
                    lane: e.rec.lane.clone(),
                    scenes: e.rec.scenes.len(),
                    pid: pgid,
                });
            }
            proc::terminate(pgid);
            waits.push(Adopted {
                rec: e.rec.clone(),
                files: e.files.clone(),
            });
        }
        drop(entries);
        for a in waits {
            let _ = a.wait();
        }
        warnings
    }
}

impl Adopted {
    /// Its number among the run's lane processes (its files are named by it).
    pub fn n(&self) -> usize {
        self.rec.n
    }

    pub fn pgid(&self) -> i32 {
        self.rec.leader.pid
    }

    /// Where its own output starts in its log.
    pub fn log_mark(&self) -> u64 {
        self.rec.log_mark
    }

    /// When it started (Unix seconds).
    pub fn started_at(&self) -> f64 {
        self.rec.started_at
    }

    /// Hand it its ids: one JSON line in its go file, which appears whole (a rename).
    pub fn go(&self, devices: &str) -> std::io::Result<()> {
        let line = serde_json::json!({ "devices": devices }).to_string() + "\n";
        crate::base::fsutil::write_atomic(&self.files.go, line.as_bytes())
    }

    /// Wait until its leader has ended (`scenerun device` reaps it and writes its
    /// status), then end its group as a group of our own ends (`proc::finish_adopted`).
    /// A leader gone whose status never comes (the outer died too: the lock is lost)
    /// counts as killed.
    pub fn wait(&self) -> std::io::Result<proc::Finished> {
        let pgid = self.pgid();
        let mut gone: Option<Instant> = None;
        loop {
            if let Some(st) = status(&self.files.status) {
                return proc::finish_adopted(pgid, Ok(st));
            }
            if gone.is_none() && !self.rec.leader.alive() {
                gone = Some(Instant::now());
            }
            if gone.is_some_and(|t| t.elapsed() >= STATUS_WAIT) {
                return proc::finish_adopted(pgid, Ok(ExitStatus::from_raw(libc::SIGKILL)));
            }
            std::thread::sleep(POLL);
        }
    }
}
