//! Long-lived children with a pipe each way (the one server: warm workers and the fork
//! server, docs/warm.md "The protocol"): made by the one builder (`sh`), started in a
//! process group of their own that is registered before they run, like a step's (an
//! interrupt, a deadline and scenerun's death kill the whole group, grandchildren
//! included); their stdout (the ready line) and stdin (closed: the sign to end) are
//! pipes held here, their stderr is appended to a log. Requests go over the server's
//! socket (`server_protocol`), never these pipes. Invariant: a group is forgotten (and what
//! is left of it killed) only once its leader has been reaped, as for a step.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Read};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::env::shell;
use super::registry::{finish, registry, Ended, Group};
use super::spawn::{leader, start};
use crate::base::units::later;

/// The longest line a piped child may print; a longer one ends the conversation.
const MAX_LINE: u64 = 1 << 20;

/// A started child with its pipes.
pub struct Piped {
    handle: duct::Handle,
    pgid: i32,
    stdin: Option<io::PipeWriter>,
    lines: mpsc::Receiver<io::Result<String>>,
}

/// What `Piped::recv` saw.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    Line(String),
    /// Nothing within the wait.
    Nothing,
    /// Its stdout is closed (every holder exited), or a line was unreadable or too long.
    Closed,
}

/// Start `sh -c command` in `dir` with `env` on top of scenerun's environment (less the
/// secrets), stdin and stdout piped to us, stderr appended to `log`. None: the run is
/// interrupted, nothing started.
pub fn spawn(
    command: &str,
    dir: &Path,
    env: &BTreeMap<String, String>,
    log: &Path,
) -> io::Result<Option<Piped>> {
    let log = crate::base::fsutil::append_log(log)?;
    let (in_r, in_w) = io::pipe()?;
    let (out_r, out_w) = io::pipe()?;
    let cmd = shell(command, dir, env)
        .stdin_file(in_r)
        .stdout_file(out_w)
        .stderr_file(log);
    let Some(handle) = start(cmd, None, |deadline| Group::new(deadline, None, None))? else {
        return Ok(None);
    };
    let pgid = leader(&handle);
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = io::BufReader::new(out_r);
        loop {
            let mut line = Vec::new();
            let read = (&mut out).take(MAX_LINE).read_until(b'\n', &mut line);
            let sent = match read {
                Ok(0) => break,
                Ok(_) if line.last() != Some(&b'\n') => {
                    Err(io::Error::other("a line longer than 1 MiB, or cut short"))
                }
                Ok(_) => String::from_utf8(line)
                    .map(|l| l.trim_end().to_string())
                    .map_err(|_| io::Error::other("a line that is not UTF-8")),
                Err(e) => Err(e),
            };
            let stop = sent.is_err();
            if tx.send(sent).is_err() || stop {
                break;
            }
        }
    });
    Ok(Some(Piped {
        handle,
        pgid,
        stdin: Some(in_w),
        lines,
    }))
}

impl Piped {
    /// Its process group.
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The next line of its stdout, waiting at most `wait`.
    pub fn recv(&self, wait: Duration) -> Received {
        match self.lines.recv_timeout(wait) {
            Ok(Ok(line)) => Received::Line(line),
            Ok(Err(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => Received::Closed,
            Err(mpsc::RecvTimeoutError::Timeout) => Received::Nothing,
        }
    }

    /// Its group is stopped (SIGTERM, then SIGKILL after the grace) once `timeout`
    /// has passed from now, as a step's is at its timeout; None: no deadline.
    pub fn set_deadline(&self, timeout: Option<Duration>) {
        let r = registry();
        let mut groups = r.groups.lock().expect("registry");
        if let Some(g) = groups.get_mut(&self.pgid) {
            g.deadline = timeout.map(|t| later(Instant::now(), t));
        }
        r.changed.notify_all();
    }

    /// Its group is being stopped (a deadline passed, an interrupt, `kill`).
    pub fn stopping(&self) -> bool {
        let groups = registry().groups.lock().expect("registry");
        groups
            .get(&self.pgid)
            .is_none_or(|g| g.termed.is_some() || g.stopped.is_some())
    }

    /// Its leader has exited (it may not be reaped yet).
    pub fn exited(&self) -> bool {
        !matches!(self.handle.try_wait(), Ok(None))
    }

    /// SIGKILL its whole group now.
    pub fn kill(&self) {
        let r = registry();
        let mut groups = r.groups.lock().expect("registry");
        if let Some(g) = groups.get_mut(&self.pgid) {
            super::signal_group(self.pgid, libc::SIGKILL);
            g.termed.get_or_insert(Instant::now());
        }
        r.changed.notify_all();
    }

    /// Its group is ending (or was killed): reap its leader, kill what is left of the
    /// group, forget it; how it ended.
    pub fn wait(mut self) -> io::Result<Ended> {
        self.stdin = None;
        let waited = self.handle.wait().map(|o| o.status);
        finish(self.pgid, waited).map(|f| f.ended)
    }

    /// Close its stdin (the sign to exit) and give it `within` to do so; then its group
    /// is stopped like a step's on a cancel. How it ended.
    pub fn close(mut self, within: Duration) -> io::Result<Ended> {
        self.stdin = None;
        let until = later(Instant::now(), within);
        while Instant::now() < until {
            if self.handle.try_wait()?.is_some() {
                return self.wait();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        super::terminate(self.pgid);
        self.wait()
    }
}

/// Resident memory of process `pid` in bytes (None once it is gone).
pub fn resident(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf takes a plain constant and touches no memory of ours.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).unwrap_or(4096))
}

/// The children of `pid`, their children and so on (from `/proc/PID/task/*/children`).
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(text) = std::fs::read_to_string(t.path().join("children")) else {
                continue;
            };
            for c in text
                .split_whitespace()
                .filter_map(|c| c.parse::<i32>().ok())
            {
                if !out.contains(&c) && out.len() < 4096 {
                    out.push(c);
                    todo.push(c);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawned(command: &str) -> (Piped, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("child.log");
        let p = spawn(command, dir.path(), &BTreeMap::new(), &log)
            .unwrap()
            .expect("not interrupted");
        (p, dir)
    }

    #[test]
    fn its_lines_come_here_and_a_closed_stdin_ends_it() {
        let (p, dir) = spawned("echo one; echo noise >&2; echo two; cat; echo noise >&2");
        assert_eq!(
            p.recv(Duration::from_secs(10)),
            Received::Line("one".into())
        );
        assert_eq!(
            p.recv(Duration::from_secs(10)),
            Received::Line("two".into())
        );
        assert_eq!(p.recv(Duration::from_millis(20)), Received::Nothing);
        assert_eq!(p.close(Duration::from_secs(10)).unwrap(), Ended::Exited(0));
        let log = std::fs::read_to_string(dir.path().join("child.log")).unwrap();
        assert_eq!(
            log, "noise\nnoise\n",
            "stderr went to the log, not the protocol"
        );
    }

    #[test]
    fn a_deadline_stops_the_whole_group() {
        let (p, _dir) = spawned("sleep 30 & sleep 30");
        assert!(!p.stopping());
        p.set_deadline(Some(Duration::from_millis(100)));
        assert_eq!(p.recv(Duration::from_secs(20)), Received::Closed);
        assert!(p.stopping());
        let pgid = p.pgid();
        assert_eq!(p.wait().unwrap(), Ended::TimedOut);
        assert!(
            !super::super::group_alive(pgid),
            "the background sleep died too"
        );
    }
}
