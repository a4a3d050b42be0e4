//! `scenerun device`'s side of lanes started before the lock (docs/lanes.md). Before the
//! lock command is called, the first process of every batch of a `prestart` lane that
//! the inner run starts at once is started here — the inner run's own scheduler finds
//! them, on placeholder ids, since a usable grant has exactly `device_count` ids — with
//! `{devices}` as a sentinel and a go file to wait on; each is reaped here and its exit
//! status written for the inner run, which adopts it (`adopt`). Invariant: exactly one
//! process owns each at any time, through its claim file's `flock` (this one until the
//! inner run claims it, the inner run while it lives, this one again after); whoever
//! owns it stops it; none is alive when `finish` returns.

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::files::{self, LaneFiles};
use crate::base::notice::Notice;
use crate::base::proc;
use crate::base::units::later;
use crate::device::packing::packer::Unit;
use crate::device::{Frozen, Prestarted, ProcId};

/// What `{devices}` and `SCENERUN_DEVICES` hold until the ids come.
pub const SENTINEL: &str = "__scenerun_devices__";

/// How often an interrupt is looked for while the processes wait.
const POLL: Duration = Duration::from_millis(20);

struct Proc {
    rec: Prestarted,
    files: LaneFiles,
    /// Its claim, once this process owns it again (to stop it).
    owned: Mutex<Option<File>>,
    /// Waits for its leader and writes its status.
    reaper: Mutex<Option<JoinHandle<()>>>,
}

/// The lane processes this invocation started before the lock.
pub struct Prestart {
    procs: Arc<Vec<Proc>>,
    done: Arc<AtomicBool>,
    monitor: Option<JoinHandle<()>>,
    grace: Duration,
    /// The fork server they were forked from, stopped once they are gone.
    server: Option<super::fork_server::Running>,
}

/// Some lane of the frozen plan starts before the lock (only then is what to start
/// worth computing).
pub fn wanted(frozen: &Frozen) -> bool {
    frozen.lanes.values().any(|l| l.prestart.on())
}

/// Start them — the `prestart` lane processes among `units`, the batches the inner
/// run's scheduler will start (`inner::to_prestart`) — record them in `frozen.prestarted`, and watch for
/// an interrupt (which stops those the inner run does not own). A process that cannot
/// be started is left to the inner run, which starts its batch the normal way (`warn`
/// says so).
pub fn start(
    frozen: &mut Frozen,
    units: Vec<Unit>,
    grace: Duration,
    warn: impl Fn(Notice),
) -> Prestart {
    let mut procs = Vec::new();
    for unit in units {
        let Unit::Lane { lane, scenes } = unit else {
            continue;
        };
        if !frozen.lanes[&lane].prestart.on() {
            continue;
        }
        match spawn(frozen, &lane, scenes, procs.len()) {
            Ok(p) => procs.push(p),
            Err(e) => warn(Notice::LaneNotPrestarted {
                lane: lane.clone(),
                error: e.to_string(),
            }),
        }
    }
    frozen.prestarted = procs.iter().map(|p| p.rec.clone()).collect();
    let procs = Arc::new(procs);
    let done = Arc::new(AtomicBool::new(false));
    let monitor = (!procs.is_empty()).then(|| {
        let (procs, done) = (procs.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if proc::interrupted() {
                    stop_unowned(&procs);
                }
                std::thread::sleep(POLL);
            }
        })
    });
    Prestart {
        procs,
        done,
        monitor,
        grace,
        server: None,
    }
}

/// Start one lane process for `scenes` of `lane`, number `n`, waiting for its ids.
fn spawn(frozen: &Frozen, lane: &str, scenes: Vec<usize>, n: usize) -> std::io::Result<Proc> {
    let files = LaneFiles::of(frozen, lane, n);
    let (command, mut env) = files::lane_command(frozen, lane, &scenes, SENTINEL, &files);
    env.insert("SCENERUN_GO".into(), files.go.display().to_string());
    let log_mark = files::prepare_files(frozen, &scenes, &files, &command)?;
    let (tx, rx) = mpsc::channel::<std::io::Result<i32>>();
    let (dir, log, status) = (
        frozen.manifest_dir.clone(),
        files.log.clone(),
        files.status.clone(),
    );
    let started_at = crate::device::unix_now();
    let reaper = std::thread::spawn(move || {
        let spec = proc::Spec {
            command: &command,
            dir: &dir,
            env: &env,
            log: &log,
            timeout: None,
            stop: None,
        };
        let ended = proc::run_handed_over(&spec, |pg| {
            let _ = tx.send(Ok(pg));
        });
        match ended {
            Ok(Some(st)) => {
                let raw = format!("{}\n", st.into_raw());
                let _ = crate::base::fsutil::write_atomic(&status, raw.as_bytes());
            }
            Ok(None) => {
                let _ = tx.send(Err(std::io::Error::other("interrupted")));
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        }
    });
    let pgid = rx
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("it did not start")))?;
    Ok(Proc {
        rec: Prestarted {
            lane: lane.to_string(),
            scenes,
            n,
            leader: ProcId::of(pgid).unwrap_or(ProcId {
                pid: pgid,
                start: 0,
            }),
            log_mark,
            started_at,
        },
        files,
        owned: Mutex::new(None),
        reaper: Mutex::new(Some(reaper)),
    })
}

/// Stop every process the inner run does not own (it never claimed it, or it has
/// ended): one that was handed its ids is killed at once (the inner run that owned it is
/// gone, and the lock may be), one still waiting gets SIGTERM, SIGKILL after the grace.
fn stop_unowned(procs: &[Proc]) {
    for p in procs {
        let mut owned = p.owned.lock().expect("prestart claim");
        if owned.is_some() {
            continue;
        }
        let Some(claim) = crate::base::fsutil::open_lock_file(&p.files.claim)
            .ok()
            .filter(|f| f.try_lock().is_ok())
        else {
            continue;
        };
        *owned = Some(claim);
        let pgid = p.rec.leader.pid;
        if !p.rec.leader.group_alive() {
            continue;
        }
        let usable = proc::adopt(pgid, None, Some(&p.files.log));
        if p.files.go.exists() {
            proc::signal_group(pgid, libc::SIGKILL);
        } else if usable {
            proc::terminate(pgid);
        }
    }
}

impl Prestart {
    /// Stop `server` in `finish`, after every process is gone (a child it forked still
    /// running needs it to say how it ended).
    pub fn keep_until_finished(&mut self, server: Option<super::fork_server::Running>) {
        self.server = server;
    }

    /// How many were started, by lane.
    pub fn counts(&self) -> std::collections::BTreeMap<&str, usize> {
        let mut out = std::collections::BTreeMap::new();
        for p in self.procs.iter() {
            *out.entry(p.rec.lane.as_str()).or_default() += 1;
        }
        out
    }

    /// After the lock command has returned: stop what the inner run does not own and
    /// wait until every process is gone — at most the grace and two seconds, then
    /// whatever is left is killed (the lock is released: nothing may run on).
    pub fn finish(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(m) = self.monitor.take() {
            let _ = m.join();
        }
        stop_unowned(&self.procs);
        let until = later(
            Instant::now(),
            self.grace.saturating_add(Duration::from_secs(2)),
        );
        let live = |p: &Proc| {
            p.rec.leader.group_alive()
                || p.reaper
                    .lock()
                    .expect("reaper")
                    .as_ref()
                    .is_some_and(|r| !r.is_finished())
        };
        while self.procs.iter().any(live) {
            if Instant::now() >= until {
                for p in self.procs.iter().filter(|p| p.rec.leader.group_alive()) {
                    proc::signal_group(p.rec.leader.pid, libc::SIGKILL);
                }
                break;
            }
            std::thread::sleep(POLL);
        }
        for p in self.procs.iter() {
            if let Some(r) = p.reaper.lock().expect("reaper").take() {
                // Its leader was killed if it was still there: it is reaped at once.
                let _ = r.join();
            }
            proc::disown(p.rec.leader.pid);
        }
        if let Some(server) = self.server.take() {
            server.stop(self.grace.saturating_add(Duration::from_secs(2)));
        }
    }
}

impl Drop for Prestart {
    fn drop(&mut self) {
        if !self.done.load(Ordering::SeqCst) {
            self.finish();
        }
    }
}
