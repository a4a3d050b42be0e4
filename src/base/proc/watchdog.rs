//! The watchdog process: it learns every group as it starts (a line on its pipe written
//! by the child itself, before exec) and kills what is left when scenerun dies.
//! Invariant: no group runs a single instruction of its own before the watchdog knows it.

use std::io::{self, BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, Stdio};
use std::time::{Duration, Instant};

use super::registry::registry;
use super::signals::{group_alive, signal_group};
use crate::base::units::later;

/// The step's group is gone: the watchdog forgets it (children register themselves,
/// see `register_self`).
pub(super) fn forget_group(pgid: i32) {
    if let Some(stdin) = registry()
        .watchdog
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_mut()
    {
        let _ = writeln!(stdin, "-{pgid}");
    }
}

/// Start the watchdog before the first step spawns: a step must never run while nobody
/// would kill its group if scenerun died (starting it lazily left a window of several ms).
/// Returns the write end of its pipe, for children to register themselves.
pub(super) fn ensure_watchdog() -> Option<std::os::fd::RawFd> {
    use std::os::fd::AsRawFd;
    let mut w = registry()
        .watchdog
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if w.is_none() {
        *w = start_watchdog();
    }
    w.as_ref().map(|s| s.as_raw_fd())
}

/// In the forked child, before exec: write `+<pid>\n` to the watchdog pipe, so the group
/// is registered before the step runs a single instruction of its own. Only
/// async-signal-safe calls here (no allocation); one short write is atomic on a pipe.
pub(super) fn register_self(fd: std::os::fd::RawFd) {
    register_self_as(fd, b'+');
}

/// `register_self` with the line's first byte: `+` (SIGKILLed when scenerun dies) or
/// `~` (ended gently: see `watchdog`).
pub(super) fn register_self_as(fd: std::os::fd::RawFd, prefix: u8) {
    let mut buf = [0u8; 24];
    let mut digits = [0u8; 20];
    // SAFETY: getpid has no preconditions and is async-signal-safe (this runs after fork).
    let mut pid = unsafe { libc::getpid() } as u64;
    let mut n = 0;
    loop {
        digits[n] = b'0' + (pid % 10) as u8;
        n += 1;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    buf[0] = prefix;
    for i in 0..n {
        buf[1 + i] = digits[n - 1 - i];
    }
    buf[1 + n] = b'\n';
    // SAFETY: `buf` is a live local array and `n + 2 <= buf.len()`; write is async-signal-safe.
    unsafe { libc::write(fd, buf.as_ptr().cast(), n + 2) };
}

fn start_watchdog() -> Option<ChildStdin> {
    // A unit test's binary is the test harness, not scenerun: it cannot be the watchdog
    // (its child would exit at once and the steps' registration writes die of SIGPIPE).
    // Steps started by unit tests are theirs to reap.
    if cfg!(test) {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("watchdog")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure runs between fork and exec and only calls setsid, which is
    // async-signal-safe; it touches no lock or allocation of the parent.
    unsafe {
        cmd.pre_exec(|| {
            // Its own session: a kill of scenerun's process group spares it.
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().ok()?;
    let stdin = child.stdin.take();
    // Reap it whenever it exits; it lives as long as our end of the pipe.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    stdin
}

/// How long the watchdog gives a gently ended group (the lock command) after its
/// SIGTERM before it SIGKILLs it: a lock tool forwards the signal to its run, waits for
/// it (the inner run kills its steps at once when scenerun is gone) and releases.
const GENTLE_WAIT: Duration = Duration::from_secs(30);

/// The watchdog: reads `+pgid` / `~pgid` / `-pgid` lines; at EOF (scenerun exited or was
/// killed) SIGKILLs every `+` group still registered, and sends each `~` group (the
/// lock command) SIGTERM, so a queued request is cancelled and held ids are released
/// by the lock tool itself, then SIGKILL once it is still there after `GENTLE_WAIT`.
pub fn watchdog() -> i32 {
    let mut live: Vec<(i32, bool)> = Vec::new();
    let stdin = io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        if let Some(p) = line.strip_prefix('+').and_then(|p| p.parse().ok()) {
            live.push((p, false));
        } else if let Some(p) = line.strip_prefix('~').and_then(|p| p.parse().ok()) {
            live.push((p, true));
        } else if let Some(p) = line.strip_prefix('-').and_then(|p| p.parse::<i32>().ok()) {
            live.retain(|x| x.0 != p);
        }
    }
    let mut gentle = Vec::new();
    for (pgid, soft) in live {
        // A group that is gone gives ESRCH, ignored.
        match soft {
            true => {
                signal_group(pgid, libc::SIGTERM);
                gentle.push(pgid);
            }
            false => {
                signal_group(pgid, libc::SIGKILL);
            }
        }
    }
    let until = later(Instant::now(), GENTLE_WAIT);
    while gentle.iter().any(|g| group_alive(*g)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    for pgid in gentle {
        signal_group(pgid, libc::SIGKILL);
    }
    0
}
