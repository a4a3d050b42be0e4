//! The inner run's watch over what holds the lock for it. If the lock tool or
//! `scenerun device` dies, the lock may already be released: every step group is
//! SIGKILLed at once (no grace) and nothing else starts. The lock command counts as
//! alive while any process of its process group is (its `sh -c` may die of a forwarded
//! signal before the lock tool it started has finished forwarding it). The inner's parent is often a
//! `sh -c` of the lock tool, so a parent-death signal alone proves nothing; the watcher
//! checks both every `PERIOD` (the outer by the run dir's outer lock, which it holds for
//! its life; the lock command by pid and start time), and the parent-death signal only
//! makes it look at once (docs/device.md, cancellation).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Frozen, ProcId};
use crate::base::notice::{LockLoss, Notice};

/// How often the watcher looks (the contract asks for at least every 100 ms).
const PERIOD: Duration = Duration::from_millis(50);

/// Set once the watcher has killed everything.
static LOST: AtomicBool = AtomicBool::new(false);
/// Set by the parent-death signal.
static PARENT_DIED: AtomicBool = AtomicBool::new(false);

/// The lock tool or the outer died and every step was killed.
pub fn lock_lost() -> bool {
    LOST.load(Ordering::SeqCst)
}

extern "C" fn on_parent_death(_sig: libc::c_int) {
    PARENT_DIED.store(true, Ordering::SeqCst);
}

/// What the watcher found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    Outer,
    LockTool,
    /// No lock tool was recorded and the parent died.
    Parent,
}

/// A pure decision over what is alive.
fn check(outer_alive: Option<bool>, lock_alive: Option<bool>, parent_died: bool) -> Option<Gone> {
    if outer_alive == Some(false) {
        return Some(Gone::Outer);
    }
    match lock_alive {
        Some(false) => Some(Gone::LockTool),
        None if parent_died => Some(Gone::Parent),
        _ => None,
    }
}

/// Start watching (before any step starts). Returns at once; the thread lives as long
/// as the process.
pub fn start(frozen: &Frozen, plan: &std::path::Path, say: fn(Notice)) {
    let outer = frozen.outer;
    let lock = if frozen.through_lock {
        frozen.lock_tool.or_else(|| recorded_lock_tool(plan))
    } else {
        None
    };
    let parent = unsafe { libc::getppid() };
    unsafe {
        libc::signal(
            libc::SIGUSR1,
            on_parent_death as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR1);
    }
    // The parent may have died before the signal was armed.
    if unsafe { libc::getppid() } != parent || parent == 1 {
        PARENT_DIED.store(true, Ordering::SeqCst);
    }
    let outer = outer.map(|p| Outer {
        pid: p.pid,
        run_dir: frozen.run_dir.clone(),
    });
    let _ = WATCHED.set((outer, lock));
    let _ = SAY.set(say);
    // Every step spawn looks too, so that none starts in the gap between two looks.
    crate::base::proc::set_spawn_gate(still_held);
    if !still_held() {
        return;
    }
    std::thread::spawn(move || loop {
        std::thread::sleep(PERIOD);
        if !still_held() {
            return;
        }
    });
}

/// Where the loss is said (report/'s renderer, handed to `start`).
static SAY: std::sync::OnceLock<fn(Notice)> = std::sync::OnceLock::new();

/// The processes watched: the outer and the lock command.
static WATCHED: std::sync::OnceLock<(Option<Outer>, Option<ProcId>)> = std::sync::OnceLock::new();

/// `scenerun device`, alive while it holds its run dir's outer lock.
struct Outer {
    pid: i32,
    run_dir: std::path::PathBuf,
}

/// Look now; on a loss, kill everything (once). False once the lock is lost.
fn still_held() -> bool {
    if lock_lost() {
        return false;
    }
    let Some((outer, lock)) = WATCHED.get() else {
        return true;
    };
    let (outer, lock) = (outer.as_ref(), *lock);
    match check(
        outer.map(|o| super::runs::outer_running(&o.run_dir)),
        lock.map(|p| p.group_alive()),
        PARENT_DIED.load(Ordering::SeqCst),
    ) {
        Some(gone) => {
            lost(gone, outer, lock);
            false
        }
        None => true,
    }
}

/// The outer records the lock command's pid in the plan right after starting it; a
/// lock tool that starts the inner run at once can be quicker than that.
fn recorded_lock_tool(plan: &std::path::Path) -> Option<ProcId> {
    let t = std::time::Instant::now();
    while t.elapsed() < RECORD_WAIT {
        let frozen: Option<Frozen> =
            crate::base::fsutil::read_capped(plan, crate::base::fsutil::Cap::DEVICE_RUN)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(p) = frozen.and_then(|f| f.lock_tool) {
            return Some(p);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// How long to wait for that record.
const RECORD_WAIT: Duration = Duration::from_secs(5);

fn lost(gone: Gone, outer: Option<&Outer>, lock: Option<ProcId>) {
    if LOST.swap(true, Ordering::SeqCst) {
        return;
    }
    crate::base::proc::kill_all_now();
    let loss = match gone {
        Gone::Outer => LockLoss::Outer {
            pid: outer.map(|o| o.pid).unwrap_or(0),
        },
        Gone::LockTool => LockLoss::LockTool {
            pid: lock.map(|p| p.pid).unwrap_or(0),
        },
        Gone::Parent => LockLoss::Parent,
    };
    if let Some(say) = SAY.get() {
        say(Notice::LockLost(loss));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        assert_eq!(check(Some(true), Some(true), false), None);
        assert_eq!(check(Some(false), Some(true), false), Some(Gone::Outer));
        assert_eq!(check(Some(true), Some(false), false), Some(Gone::LockTool));
        // A parent `sh -c` dying while the recorded lock tool lives is no reason.
        assert_eq!(check(Some(true), Some(true), true), None);
        assert_eq!(check(None, None, true), Some(Gone::Parent));
        assert_eq!(check(None, None, false), None);
    }

    #[test]
    fn a_group_outlives_its_leader() {
        use std::os::unix::process::CommandExt;
        // The leader (a shell) exits after half a second (so its pid can be read first); its child stays in the group.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 0.5", "/dev/null"])
            .process_group(0)
            .spawn()
            .expect("sh");
        let id = ProcId::of(leader.id() as i32).expect("leader");
        leader.wait().expect("leader ends");
        assert!(!id.alive(), "the leader is gone");
        assert!(id.group_alive(), "its group still has the sleep");
        crate::base::proc::signal_group(id.pid, libc::SIGKILL);
        let t = std::time::Instant::now();
        while id.group_alive() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!id.group_alive(), "the group is gone after SIGKILL");
    }

    #[test]
    fn proc_ids_tell_reuse_apart() {
        let me = ProcId::me().expect("own stat");
        assert!(me.alive());
        let other = ProcId {
            start: me.start + 1,
            ..me
        };
        assert!(!other.alive());
    }
}
