//! Signals to a process group, whether one still runs, and what `/proc/<pid>/stat` says
//! of a process. Invariant: `signal_group` is the one place scenerun signals a group,
//! `stat` the one place it reads a process's stat line.

use std::time::Duration;

/// A signal a group gets before SIGTERM when it is stopped for a timeout or a cancel,
/// and how long it keeps running after it (`stop_signal` / `stop_wait`,
/// docs/device.md): the time a runtime needs to print its stack dumps, say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stop {
    pub signal: i32,
    pub wait: Duration,
}

/// The signals a stop may send: not KILL (nothing would follow it) nor STOP (nothing
/// could run).
const STOP_SIGNALS: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ABRT", libc::SIGABRT),
    ("USR1", libc::SIGUSR1),
    ("USR2", libc::SIGUSR2),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("WINCH", libc::SIGWINCH),
];

impl Stop {
    /// A signal by name (`USR1`, `SIGUSR1`, any case); None for one a stop cannot send.
    pub fn signal_named(name: &str) -> Option<i32> {
        let up = name.trim().to_ascii_uppercase();
        let bare = up.strip_prefix("SIG").unwrap_or(&up);
        STOP_SIGNALS
            .iter()
            .find(|(n, _)| *n == bare)
            .map(|&(_, s)| s)
    }

    /// The names `signal_named` takes, for a message.
    pub fn signal_names() -> String {
        STOP_SIGNALS
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `SIGUSR1`.
    pub fn signal_name(&self) -> String {
        match STOP_SIGNALS.iter().find(|&&(_, s)| s == self.signal) {
            Some((n, _)) => format!("SIG{n}"),
            None => format!("signal {}", self.signal),
        }
    }
}

/// Send `sig` to process group `pgid` (0 only checks that the group exists); true when
/// the group was there. The one place scenerun signals a group.
pub fn signal_group(pgid: i32, sig: i32) -> bool {
    // SAFETY: killpg takes plain integers and touches no memory of ours; a group that is
    // gone gives ESRCH, which the caller sees as false.
    unsafe { libc::killpg(pgid, sig) == 0 }
}

/// Whether process group `pgid` still has a member that runs. A member that has died
/// but is not reaped yet does not count: orphans are reaped by init, and an init that
/// never reaps (a container's first process often does not) would keep a dead group
/// "alive" for ever.
pub fn group_alive(pgid: i32) -> bool {
    if !signal_group(pgid, 0) {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    dir.flatten().any(|e| {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            return false;
        };
        stat(pid).is_some_and(|s| s.pgrp == pgid && s.running())
    })
}

/// What scenerun reads of a process in `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub state: char,
    /// Its process group.
    pub pgrp: i32,
    /// When it started, in clock ticks after boot: a reused pid has another.
    pub start: u64,
}

impl Stat {
    /// It runs: neither a zombie nor dead (a zombie runs nothing any more).
    pub fn running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X')
    }
}

/// A process's `/proc/<pid>/stat`, the one place it is parsed; None when there is no
/// such process here.
pub fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name is in parentheses and may hold anything, `)` included; the
    // fields after it are numbered from 3 (state): 5 is the group, 22 the start time.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Block SIGINT and SIGTERM in every thread and handle them on one thread: `on_signal`
/// runs there (once per signal). Call before any other thread starts.
pub fn install_signal_thread(on_signal: fn(i32)) {
    // SAFETY: a zeroed sigset_t is valid storage that sigemptyset then initialises; the
    // set is moved into the thread, so sigwait reads a live value. Called before other
    // threads start, so every later thread inherits the mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        std::thread::spawn(move || loop {
            let mut sig: libc::c_int = 0;
            if libc::sigwait(&set, &mut sig) == 0 {
                on_signal(sig);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_past_a_command_name_with_parentheses_and_spaces() {
        let line = "4242 (a) b (c) R 1 4240 4240 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'R',
                pgrp: 4240,
                start: 98765
            })
        );
        assert_eq!(parse_stat("4242 (a) R 1"), None, "cut short");
        let me = stat(std::process::id() as i32).expect("this process");
        assert!(me.running());
        // SAFETY: getpgrp has no preconditions.
        assert_eq!(me.pgrp, unsafe { libc::getpgrp() });
    }

    #[test]
    fn stop_signals_by_name() {
        assert_eq!(Stop::signal_named("USR1"), Some(libc::SIGUSR1));
        assert_eq!(Stop::signal_named("sigquit"), Some(libc::SIGQUIT));
        assert_eq!(Stop::signal_named("KILL"), None);
        assert_eq!(Stop::signal_named("STOP"), None);
        assert_eq!(Stop::signal_named("10"), None);
        let s = Stop {
            signal: libc::SIGUSR2,
            wait: Duration::ZERO,
        };
        assert_eq!(s.signal_name(), "SIGUSR2");
    }
}
