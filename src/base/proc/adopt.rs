//! Process groups started here and owned elsewhere, or started elsewhere and owned here:
//! the lock command (watched only), a lane process handed over to the inner run, and the
//! inner run's adoption of it. Invariant: an adopted group is stopped, timed out and
//! killed exactly as a group of our own.

use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Instant;

use super::env::sh;
use super::registry::{finish, interrupted, registry, Finished, Group, SPAWN_GATE};
use super::signals::{signal_group, Stop};
use super::spawn::{leader, own_group, Spec};
use super::watchdog::{ensure_watchdog, forget_group, register_self_as};

/// `cmd` (made by `sh`) as the leader of a process group of its own, known to the
/// watchdog before it runs a single instruction of its own: if scenerun dies, the
/// watchdog sends the group SIGTERM (a lock tool cancels a queued request, or forwards
/// it to its run and releases the ids), SIGKILL if it is still there after
/// `GENTLE_WAIT`. Not in the registry (no cancel, no timeout here): the lock command,
/// whose caller forwards signals itself and `disown`s it once it ended.
pub fn watched_group(cmd: duct::Expression) -> duct::Expression {
    let watchdog_fd = ensure_watchdog();
    cmd.before_spawn(move |c| {
        // SAFETY: between fork and exec the closure calls only async-signal-safe
        // functions (setpgid, write via register_self_as) on stack values.
        unsafe {
            c.pre_exec(move || {
                libc::setpgid(0, 0);
                if let Some(fd) = watchdog_fd {
                    register_self_as(fd, b'~');
                }
                Ok(())
            });
        }
        Ok(())
    })
}

/// Run `sh -c` as `run` does, in a process group of its own that another process takes
/// over (a lane process started before the lock, which the inner run adopts:
/// docs/lanes.md): its leader is waited for here and its exit status returned (None:
/// interrupted before it started), but its group is not in the registry (an interrupt
/// here does not stop it: whoever owns it then does, see `adopt`) and nothing it left in
/// its group is killed when the leader exits (its owner may be giving it its grace). The
/// watchdog kills it if this process dies; `disown` once the group is gone. Call it on a
/// thread that lives until it returns.
pub fn run_handed_over(
    spec: &Spec,
    started: impl FnOnce(i32),
) -> io::Result<Option<std::process::ExitStatus>> {
    let log = crate::base::fsutil::append_log(spec.log)?;
    let cmd = sh(spec.command, spec.dir, spec.env)
        .stderr_to_stdout()
        .stdout_file(log);
    if interrupted() || SPAWN_GATE.get().is_some_and(|gate| !gate()) {
        return Ok(None);
    }
    let cmd = own_group(cmd);
    let child = cmd.start()?;
    drop(cmd);
    started(leader(&child));
    child.wait().map(|o| Some(o.status))
}

/// Take into the registry a process group this process did not start (a lane process
/// `scenerun device` started before the lock): from now on `stop`, `terminate`, an
/// interrupt and `kill_all_now` reach it as they reach a group of our own, and the
/// watchdog kills it if this process dies. Its leader is not our child: the caller learns
/// elsewhere how it ended, then calls `finish_adopted`. Adopted while the run is
/// interrupted it is stopped at once, while the spawn gate is closed (the lock is lost)
/// killed at once: false then, it is not to be used.
pub fn adopt(pgid: i32, stop: Option<Stop>, log: Option<&Path>) -> bool {
    // The gate looks at the lock first: it may kill every group, under the registry lock.
    let gate_closed = SPAWN_GATE.get().is_some_and(|gate| !gate());
    ensure_watchdog();
    if let Some(stdin) = registry()
        .watchdog
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_mut()
    {
        let _ = writeln!(stdin, "+{pgid}");
    }
    let r = registry();
    let mut groups = r
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut grp = Group::new(None, stop, log);
    let now = Instant::now();
    let usable = if gate_closed {
        signal_group(pgid, libc::SIGKILL);
        grp.termed = Some(now);
        false
    } else if interrupted() {
        grp.begin_stop(pgid, now);
        false
    } else {
        true
    };
    groups.insert(pgid, grp);
    r.changed.notify_all();
    usable
}

/// The leader of an adopted group has ended with `status`: as for a group of our own,
/// what it left in its group gets the rest of its grace if it is being stopped, then is
/// killed, and the group is forgotten.
pub fn finish_adopted(
    pgid: i32,
    status: io::Result<std::process::ExitStatus>,
) -> io::Result<Finished> {
    finish(pgid, status)
}

/// Forget group `pgid` (gone, or another process's now) without signalling it: it
/// leaves the registry and the watchdog.
pub fn disown(pgid: i32) {
    registry()
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&pgid);
    forget_group(pgid);
}

#[cfg(test)]
mod tests {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::time::Duration;

    use super::*;
    use crate::base::proc::{group_alive, terminate, Ended};

    /// A group this process did not put in the registry, adopted: `terminate` reaches
    /// it (SIGTERM), and `finish_adopted` ends it with the status its leader had and
    /// kills what the leader left in it.
    #[test]
    fn an_adopted_group_is_stopped_as_our_own() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sh")
            .args(["-c", "(trap '' TERM; echo up; exec sleep 30) & wait"])
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        let pgid = child.id() as i32;
        // The leader has started the member that ignores SIGTERM.
        let mut up = String::new();
        io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut up)
            .expect("up");
        assert_eq!(up, "up\n");
        assert!(adopt(pgid, None, None), "not interrupted, no gate");
        terminate(pgid);
        let status = child.wait();
        let f = finish_adopted(pgid, status).expect("finished");
        assert_eq!(f.ended, Ended::Signaled(libc::SIGTERM));
        assert!(!registry().groups.lock().unwrap().contains_key(&pgid));
        let t = Instant::now();
        while group_alive(pgid) && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !group_alive(pgid),
            "the sleep left in the group was killed too"
        );
    }
}
