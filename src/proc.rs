//! Child processes of steps: each runs `sh -c` in its own process group, its output in
//! its log file. One registry knows every live group, so that a timeout, SIGINT/SIGTERM
//! or the death of scenerun itself (through the watchdog process) kills whole groups,
//! grandchildren included. Invariant: no step process outlives scenerun.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{ChildStdin, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::units::later;

pub mod piped;
pub mod server;
pub mod server_protocol;
pub mod view;

/// Between SIGTERM and SIGKILL, unless a phase sets its own (`set_grace`).
pub const GRACE: Duration = Duration::from_secs(2);

static GRACE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(2000);

/// The grace period for every group of this process from now on (the device phase's
/// cancellation grace, docs/device.md).
pub fn set_grace(grace: Duration) {
    GRACE_MS.store(grace.as_millis() as u64, Ordering::SeqCst);
}

pub fn grace() -> Duration {
    Duration::from_millis(GRACE_MS.load(Ordering::SeqCst))
}

/// How a step's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Signaled(i32),
    TimedOut,
    Interrupted,
}

impl Ended {
    pub fn describe(&self) -> String {
        match self {
            Ended::Exited(c) => format!("exited with status {c}"),
            Ended::Signaled(s) => format!("killed by signal {s}"),
            Ended::TimedOut => "timed out (process group killed)".into(),
            Ended::Interrupted => "interrupted".into(),
        }
    }
}

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

struct Group {
    deadline: Option<Instant>,
    stop: Option<Stop>,
    /// Its log: where the output after the stop signal starts is taken from it.
    log: Option<std::path::PathBuf>,
    /// When the stop signal was sent, and the log's length then.
    stopped: Option<(Instant, u64)>,
    /// When SIGTERM was sent: SIGKILL follows after the grace period.
    termed: Option<Instant>,
    timed_out: bool,
}

impl Group {
    fn new(deadline: Option<Instant>, stop: Option<Stop>, log: Option<&Path>) -> Group {
        Group {
            deadline,
            stop,
            log: stop.and(log).map(Path::to_path_buf),
            stopped: None,
            termed: None,
            timed_out: false,
        }
    }

    /// Begin stopping it (once): its stop signal, SIGTERM after the stop's wait; or
    /// SIGTERM now.
    fn begin_stop(&mut self, pgid: i32, now: Instant) {
        if self.stopped.is_some() || self.termed.is_some() {
            return;
        }
        let Some(stop) = self.stop else {
            return self.term(pgid, now);
        };
        let mark = self
            .log
            .as_ref()
            .and_then(|l| std::fs::metadata(l).ok())
            .map_or(0, |m| m.len());
        signal_group(pgid, stop.signal);
        self.stopped = Some((now, mark));
    }

    /// SIGTERM now (once); SIGKILL follows after the grace.
    fn term(&mut self, pgid: i32, now: Instant) {
        if self.termed.is_none() {
            signal_group(pgid, libc::SIGTERM);
            self.termed = Some(now);
        }
    }

    /// Move it along at `now` (its timeout, the stop's wait, the grace); the next moment
    /// it needs a look, if any.
    fn tick(&mut self, pgid: i32, now: Instant, grace: Duration) -> Option<Instant> {
        if let Some(t) = self.termed {
            if now >= later(t, grace) {
                signal_group(pgid, libc::SIGKILL);
                return None;
            }
            return Some(later(t, grace));
        }
        if let Some((at, _)) = self.stopped {
            let until = later(at, self.stop.map_or(Duration::ZERO, |s| s.wait));
            if now < until {
                return Some(until);
            }
            self.term(pgid, now);
            return Some(later(now, grace));
        }
        match self.deadline {
            Some(d) if now >= d => {
                self.timed_out = true;
                self.begin_stop(pgid, now);
                self.tick(pgid, now, grace)
            }
            other => other,
        }
    }

    /// When it will have had its whole stop wait and grace, once stopping began.
    fn grace_end(&self, grace: Duration) -> Option<Instant> {
        match (self.termed, self.stopped) {
            (Some(t), _) => Some(later(t, grace)),
            (None, Some((at, _))) => Some(later(
                later(at, self.stop.map_or(Duration::ZERO, |s| s.wait)),
                grace,
            )),
            _ => None,
        }
    }
}

#[derive(Default)]
struct Registry {
    groups: Mutex<HashMap<i32, Group>>,
    changed: Condvar,
    interrupted: AtomicBool,
    watchdog: Mutex<Option<ChildStdin>>,
}

fn registry() -> &'static Registry {
    static R: OnceLock<Registry> = OnceLock::new();
    R.get_or_init(|| {
        std::thread::spawn(timer_loop);
        Registry::default()
    })
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
        matches!(stat_group(pid), Some((state, pg)) if pg == pgid && !matches!(state, 'Z' | 'X'))
    })
}

/// State and process group of a process, from `/proc/<pid>/stat`.
fn stat_group(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything, `)` included.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let pgrp = fields.nth(1)?.parse().ok()?;
    Some((state, pgrp))
}

pub fn interrupted() -> bool {
    registry().interrupted.load(Ordering::SeqCst)
}

/// SIGTERM every live group now, SIGKILL after the grace period.
pub fn interrupt_all() {
    signal_all(libc::SIGTERM);
}

/// Mark the run interrupted and stop every live group: SIGTERM once per group (its stop
/// signal first where it has one; the timer loop follows with SIGTERM and SIGKILL), or
/// SIGKILL to every group.
fn signal_all(sig: i32) {
    let r = registry();
    r.interrupted.store(true, Ordering::SeqCst);
    let mut g = r
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = Instant::now();
    for (pgid, grp) in g.iter_mut() {
        if sig == libc::SIGKILL {
            signal_group(*pgid, sig);
            grp.termed.get_or_insert(now);
        } else {
            grp.begin_stop(*pgid, now);
        }
    }
    r.changed.notify_all();
}

/// SIGKILL every live group at once, and start nothing any more: the lock may be gone,
/// so no grace is left to give.
pub fn kill_all_now() {
    signal_all(libc::SIGKILL);
}

fn timer_loop() {
    let r = registry();
    let mut g = r
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let now = Instant::now();
        let grace = grace();
        let next = g
            .iter_mut()
            .filter_map(|(pgid, grp)| grp.tick(*pgid, now, grace))
            .min();
        g = match next {
            Some(n) => {
                r.changed
                    .wait_timeout(g, n.saturating_duration_since(now))
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0
            }
            None => r
                .changed
                .wait(g)
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        };
    }
}

/// The step's group is gone: the watchdog forgets it (children register themselves,
/// see `register_self`).
fn forget_group(pgid: i32) {
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
fn ensure_watchdog() -> Option<std::os::fd::RawFd> {
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
fn register_self(fd: std::os::fd::RawFd) {
    register_self_as(fd, b'+');
}

/// `register_self` with the line's first byte: `+` (SIGKILLed when scenerun dies) or
/// `~` (ended gently: see `watchdog`).
fn register_self_as(fd: std::os::fd::RawFd, prefix: u8) {
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
    let until = Instant::now() + GENTLE_WAIT;
    while gentle.iter().any(|g| group_alive(*g)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    for pgid in gentle {
        signal_group(pgid, libc::SIGKILL);
    }
    0
}

/// Variables no child may inherit: the secrets the manifest names (the remote cache's
/// token and signing key, docs/remote-cache.md). Kept for the whole process.
static HIDDEN: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Never hand these variables to a child from now on (`sh` and every step, lane,
/// generator, identity and lock command go through it).
pub fn hide_from_children(names: impl IntoIterator<Item = String>) {
    let mut hidden = HIDDEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for n in names {
        if !hidden.contains(&n) {
            hidden.push(n);
        }
    }
}

/// Variables that hold the remote cache's URL (`$SCENERUN_REMOTE_URL`, and whatever
/// the manifest's `cache.remote.url` expands): a child gets them without the URL's
/// user and password. Kept for the whole process.
static URL_VARS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// From now on, hand these variables to a child only with the userinfo (`user:pass@`)
/// of every URL in them removed (`without_userinfo`).
pub fn strip_userinfo_for_children(names: impl IntoIterator<Item = String>) {
    let mut vars = URL_VARS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for n in names {
        if !vars.contains(&n) {
            vars.push(n);
        }
    }
}

/// `text` with the userinfo of every URL in it removed: `http://ci:pw@host/x` becomes
/// `http://host/x`. The one place scenerun redacts a URL (children's environment,
/// messages, the kept manifest).
pub fn without_userinfo(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, after) = rest.split_at(i + 3);
        out.push_str(head);
        let end = after
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(after.len());
        match after[..end].rfind('@') {
            Some(at) => rest = &after[at + 1..],
            None => rest = after,
        }
    }
    out.push_str(rest);
    std::borrow::Cow::Owned(out)
}

/// The URL variables a child would inherit or be given, with their values redacted.
fn url_vars_for_child(given: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let vars = URL_VARS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    vars.iter()
        .filter_map(|n| {
            let value = match given.get(n) {
                Some(v) => v.clone(),
                None => std::env::var(n).ok()?,
            };
            match without_userinfo(&value) {
                std::borrow::Cow::Owned(clean) => Some((n.clone(), clean)),
                std::borrow::Cow::Borrowed(_) => None,
            }
        })
        .collect()
}

/// The hidden variables a child would inherit, except those in `given` (what a
/// manifest's own `env` sets is the manifest's choice).
fn hidden_except(given: &BTreeMap<String, String>) -> Vec<String> {
    let hidden = HIDDEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    hidden
        .iter()
        .filter(|n| !given.contains_key(*n))
        .cloned()
        .collect()
}

/// The whole environment a child `sh` starts with `env` gets: the inherited one less
/// what `hide_from_children` named, URL variables redacted, `env` on top (a variable
/// whose name or value is not UTF-8 is left out). For a child another process starts
/// on scenerun's behalf (a warm step forked by its worker), so it gets what `sh` gives.
pub fn child_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut all: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    for n in hidden_except(env) {
        all.remove(&n);
    }
    all.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    all.extend(url_vars_for_child(env));
    all
}

/// The one builder of the `sh -c` children scenerun starts for the manifest's commands
/// (steps, lanes, generators, identity and lock commands): run in `dir` with the
/// inherited environment (less what `hide_from_children` named) and `env` on top, stdin
/// from /dev/null, any exit status a result rather than an error (`unchecked`), and the
/// signal state a program expects: scenerun ignores SIGXFSZ (to get EFBIG) and blocks
/// SIGINT/SIGTERM in its threads, a child gets the defaults. Callers add where its output
/// goes and, through `before_spawn`, its process group.
pub fn sh(command: &str, dir: &Path, env: &BTreeMap<String, String>) -> duct::Expression {
    shell(command, dir, env).stdin_null()
}

/// `sh` without its stdin: a piped child (`piped`) gets a pipe there (duct lets an inner
/// redirection win, so `sh`'s own would).
fn shell(command: &str, dir: &Path, env: &BTreeMap<String, String>) -> duct::Expression {
    for_child(duct::cmd("sh", ["-c", command]), dir, env)
}

/// A program run with its own arguments, no shell between (`scenerun cc` runs the real
/// compiler so, `--changed-since` runs `git`): the environment and signal state as `sh`
/// gives them (less what `hide_from_children` named, URL variables redacted); stdin,
/// stdout and stderr inherited unless the caller redirects them. No `Command::new`
/// elsewhere hands a child scenerun's environment.
/// `program` is a name looked up on `PATH` (`git`) or a path (a compiler's real file),
/// as a shell would take it: a bare name is never read as `./name`.
pub fn program(
    program: impl AsRef<std::ffi::OsStr>,
    args: &[std::ffi::OsString],
    dir: &Path,
    env: &BTreeMap<String, String>,
) -> duct::Expression {
    let program: std::ffi::OsString = program.as_ref().to_owned();
    for_child(duct::cmd(program, args), dir, env)
}

/// `e` in `dir` with `env` on top of the inherited environment, less the hidden
/// variables, the URL variables redacted, and the signal state a program expects.
fn for_child(e: duct::Expression, dir: &Path, env: &BTreeMap<String, String>) -> duct::Expression {
    let mut e = e.dir(dir).unchecked();
    // The URL variables redacted, whether given or inherited; each name is set once, so
    // which of two settings of a name duct would keep never matters.
    let redacted: BTreeMap<String, String> = url_vars_for_child(env).into_iter().collect();
    for (k, v) in env {
        e = e.env(k, redacted.get(k).unwrap_or(v));
    }
    for (k, v) in redacted.iter().filter(|(k, _)| !env.contains_key(*k)) {
        e = e.env(k, v);
    }
    // Never one of `env`'s names (`hidden_except`): the order of the two cannot matter.
    for n in hidden_except(env) {
        e = e.env_remove(n);
    }
    e.before_spawn(|c| {
        // SAFETY: between fork and exec the closure calls only async-signal-safe
        // functions (signal, sigemptyset, pthread_sigmask) on a stack value.
        unsafe {
            c.pre_exec(|| {
                libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        Ok(())
    })
}

/// What to run.
pub struct Spec<'a> {
    pub command: &'a str,
    pub dir: &'a Path,
    pub env: &'a BTreeMap<String, String>,
    pub log: &'a Path,
    pub timeout: Option<Duration>,
    /// Sent before SIGTERM on a timeout, a `stop` or a cancel.
    pub stop: Option<Stop>,
}

/// How a step ended, and where in its log the output after its stop signal starts (when
/// one was sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub ended: Ended,
    pub stopped_at: Option<u64>,
}

/// A check every spawn must pass (the device phase's watch over the lock): false
/// means start nothing more.
static SPAWN_GATE: OnceLock<fn() -> bool> = OnceLock::new();

pub fn set_spawn_gate(gate: fn() -> bool) {
    let _ = SPAWN_GATE.set(gate);
}

/// Run `sh -c command` in its own process group, stdout and stderr appended to `log`,
/// and wait for it. After it ends, whatever it left running in its group is killed, so a
/// background child neither keeps us waiting nor outlives the step.
pub fn run(spec: &Spec) -> io::Result<Ended> {
    run_observed(spec, |_| {}).map(|f| f.ended)
}

/// SIGTERM group `pgid` (a step of ours) now, SIGKILL after the grace period: a lane
/// process whose device failed, or that broke the protocol.
pub fn terminate(pgid: i32) {
    with_group(pgid, Group::term);
}

/// Stop group `pgid` as a timeout does: its stop signal first (SIGTERM after the stop's
/// wait), or SIGTERM now; SIGKILL after the grace.
pub fn stop(pgid: i32) {
    with_group(pgid, Group::begin_stop);
}

fn with_group(pgid: i32, f: fn(&mut Group, i32, Instant)) {
    let r = registry();
    let mut g = r
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(grp) = g.get_mut(&pgid) {
        f(grp, pgid, Instant::now());
    }
    r.changed.notify_all();
}

/// As `run`, telling `started` the process group id once the step runs; also where the
/// output after a stop signal starts.
pub fn run_observed(spec: &Spec, started: impl FnOnce(i32)) -> io::Result<Finished> {
    // The caller started the log in a real directory (`fsutil::start_log`).
    let log = crate::fsutil::append_log(spec.log)?;
    // duct applies the outer redirection first: join stderr to stdout *after* stdout
    // points at the log (`>log 2>&1`), or stderr leaks to our stdout.
    let cmd = sh(spec.command, spec.dir, spec.env)
        .stderr_to_stdout()
        .stdout_file(log);
    let group = |deadline| Group::new(deadline, spec.stop, Some(spec.log));
    let Some(child) = start(cmd, spec.timeout, group)? else {
        return Ok(Finished {
            ended: Ended::Interrupted,
            stopped_at: None,
        });
    };
    let pgid = leader(&child);
    started(pgid);
    let waited = child.wait().map(|o| o.status);
    finish(pgid, waited)
}

/// What `capture` saw of a command.
#[derive(Debug)]
pub struct Captured {
    pub ended: Ended,
    /// Its standard output, at most the `max` it was allowed.
    pub stdout: Vec<u8>,
    /// It printed more than `max`: its group was killed at that point.
    pub overflowed: bool,
    /// The last `STDERR_TAIL` bytes of its standard error.
    pub stderr: Vec<u8>,
}

/// The end of a captured command's standard error that is kept.
const STDERR_TAIL: usize = 16 << 10;

/// Where `capture` puts a command's standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stderr {
    /// Apart: its last `STDERR_TAIL` bytes in `Captured::stderr`.
    Tail,
    /// Into its standard output, as `2>&1` would (`Captured::stderr` stays empty).
    IntoStdout,
}

/// Run `sh -c command` as `run` does (its own registered group: the timeout, a cancel
/// and scenerun's death kill the whole group), its output captured: stdout up to `max`
/// bytes (one more kills the group at once), stderr as `stderr` says. The output counts
/// as whole when every holder of the pipes closed them; a process that left the group
/// and holds them past the timeout makes it `TimedOut`.
pub fn capture(
    command: &str,
    dir: &Path,
    env: &BTreeMap<String, String>,
    timeout: Duration,
    max: usize,
    stderr: Stderr,
) -> io::Result<Captured> {
    use std::io::Read;
    let deadline = later(Instant::now(), timeout);
    let (mut out_r, out_w) = io::pipe()?;
    let (mut err_r, err_w) = io::pipe()?;
    let cmd = match stderr {
        // duct applies the outer redirection first: join stderr to stdout *after*
        // stdout points at the pipe (`>pipe 2>&1`).
        Stderr::IntoStdout => {
            drop(err_w);
            sh(command, dir, env).stderr_to_stdout().stdout_file(out_w)
        }
        Stderr::Tail => sh(command, dir, env).stdout_file(out_w).stderr_file(err_w),
    };
    let started = start(cmd, Some(timeout), |deadline| {
        Group::new(deadline, None, None)
    })?;
    // `cmd` held the write ends (`start` took it and dropped it): only the child has them now.
    let Some(child) = started else {
        return Ok(Captured {
            ended: Ended::Interrupted,
            stdout: Vec::new(),
            overflowed: false,
            stderr: Vec::new(),
        });
    };
    let pgid = leader(&child);
    let (tx, rx) = std::sync::mpsc::channel();
    let out_tx = tx.clone();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = (&mut out_r).take(max as u64 + 1).read_to_end(&mut out);
        let overflowed = out.len() > max;
        if overflowed {
            out.truncate(max);
            kill_registered(pgid);
        }
        let _ = out_tx.send((true, out, overflowed));
    });
    std::thread::spawn(move || {
        let mut tail = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = err_r.read(&mut buf) {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 2 * STDERR_TAIL {
                tail.drain(..tail.len() - STDERR_TAIL);
            }
        }
        let keep = tail.len().saturating_sub(STDERR_TAIL);
        let _ = tx.send((false, tail.split_off(keep), false));
    });
    let waited = child.wait().map(|o| o.status);
    let mut ended = finish(pgid, waited)?.ended;
    let mut got = Captured {
        ended: Ended::Exited(0),
        stdout: Vec::new(),
        overflowed: false,
        stderr: Vec::new(),
    };
    for _ in 0..2 {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((true, out, overflowed)) => (got.stdout, got.overflowed) = (out, overflowed),
            Ok((false, err, _)) => got.stderr = err,
            Err(_) => {
                ended = Ended::TimedOut;
                break;
            }
        }
    }
    got.ended = ended;
    Ok(got)
}

/// SIGKILL group `pgid` now if it is one of ours (still registered: never a group
/// whose id the system may have handed out again).
fn kill_registered(pgid: i32) {
    let groups = registry()
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if groups.contains_key(&pgid) {
        signal_group(pgid, libc::SIGKILL);
    }
}

/// Start `cmd` (made by `sh`) in a process group of its own, registered (timeout,
/// interrupt, the watchdog) before it runs a single instruction of its own. None: the
/// run is interrupted (or the spawn gate closed), nothing started. `cmd` is consumed:
/// the files it was given are open in the child only once this returns.
fn start(
    cmd: duct::Expression,
    timeout: Option<Duration>,
    group: impl FnOnce(Option<Instant>) -> Group,
) -> io::Result<Option<duct::Handle>> {
    if interrupted() || SPAWN_GATE.get().is_some_and(|gate| !gate()) {
        return Ok(None);
    }
    let cmd = own_group(cmd);
    let r = registry();
    // Register under the lock so a concurrent interrupt cannot miss this group.
    let mut groups = r
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if interrupted() {
        return Ok(None);
    }
    let child = cmd.start()?;
    drop(cmd);
    groups.insert(
        leader(&child),
        group(timeout.map(|t| later(Instant::now(), t))),
    );
    r.changed.notify_all();
    drop(groups);
    // Debug builds only: the tests of the panic hook make a thread that has just
    // started a step panic here.
    #[cfg(debug_assertions)]
    if std::env::var_os("SCENERUN_DEBUG_PANIC_AFTER_SPAWN").is_some() {
        panic!("SCENERUN_DEBUG_PANIC_AFTER_SPAWN is set: a test of the panic hook");
    }
    Ok(Some(child))
}

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

/// `cmd` (made by `sh`) as the leader of a process group of its own, known to the
/// watchdog before it runs a single instruction of its own, and killed when the thread
/// that starts it ends (the parent-death signal follows the thread).
fn own_group(cmd: duct::Expression) -> duct::Expression {
    let watchdog_fd = ensure_watchdog();
    cmd.before_spawn(move |c| {
        // SAFETY: between fork and exec the closure calls only async-signal-safe
        // functions (setpgid, write via register_self, prctl, unshare, mount) on stack
        // values and memory prepared before the fork; it
        // allocates nothing and takes no lock. (`sh` made `cmd`: its own hook restores
        // the signal state.)
        unsafe {
            c.pre_exec(move || {
                libc::setpgid(0, 0);
                if let Some(fd) = watchdog_fd {
                    register_self(fd);
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The device phase's read-only view of the entries, once it is set.
                view::enter_in_child()
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
    let log = crate::fsutil::append_log(spec.log)?;
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

/// A panic in any thread ends scenerun at once with exit 3: the panic is printed as Rust
/// prints it, every process group this process registered is SIGKILLed (the watchdog
/// kills them too once this process is gone), and the process exits. Without it, a
/// worker's panic left its phase waiting for it for ever, SIGTERM included. Installed
/// by `main` before anything else runs.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        eprintln!(
            "error: internal error: scenerun panicked (a bug; please report it); its step processes were killed"
        );
        kill_registered_groups();
        std::process::exit(crate::exit::Exit::Infra.code());
    }));
}

/// SIGKILL every registered group, from a panicking thread: the registry's lock may be
/// held by a thread that will never let go (or by this one), so it is only tried for a
/// moment; the watchdog covers what this misses.
fn kill_registered_groups() {
    let r = registry();
    r.interrupted.store(true, Ordering::SeqCst);
    for _ in 0..50 {
        let g = match r.groups.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        for pgid in g.keys() {
            signal_group(*pgid, libc::SIGKILL);
        }
        return;
    }
}

/// The process group a started `sh` leads (one command: one pid).
pub fn leader(child: &duct::Handle) -> i32 {
    child.pids()[0] as i32
}

/// The group's leader has been waited for: kill what it left running in its group, forget
/// the group, and say how it ended.
fn finish(pgid: i32, waited: io::Result<std::process::ExitStatus>) -> io::Result<Finished> {
    drain_if_stopping(pgid);
    // Leftovers of the step (background children) die with it.
    signal_group(pgid, libc::SIGKILL);
    let grp = registry()
        .groups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&pgid);
    forget_group(pgid);
    let status = waited?;
    let stopping = grp
        .as_ref()
        .is_some_and(|g| g.termed.is_some() || g.stopped.is_some());
    let ended = if grp.as_ref().is_some_and(|g| g.timed_out) {
        Ended::TimedOut
    } else if interrupted() && stopping {
        Ended::Interrupted
    } else {
        match (status.code(), status.signal()) {
            (Some(c), _) => Ended::Exited(c),
            (None, Some(s)) => Ended::Signaled(s),
            _ => Ended::Exited(-1),
        }
    };
    Ok(Finished {
        ended,
        stopped_at: grp.and_then(|g| g.stopped).map(|(_, mark)| mark),
    })
}

/// Past a stopped group's grace, how long its leader's caller still waits for members
/// that are dead but not yet reaped (orphans are reaped by init, not by us).
const DRAIN_MARGIN: Duration = Duration::from_millis(500);

/// The leader of a group that is being stopped has exited: the rest of the group still
/// gets its grace. A step runs as `sh -c`, and that shell dies of SIGTERM at once while
/// the program it started runs its own handler; killing the group when the shell is
/// gone would cut that handler short (docs/device.md, cancellation). Returns once the
/// group is empty or its grace has passed (the timer loop SIGKILLs it then).
fn drain_if_stopping(pgid: i32) {
    let until = {
        let g = registry()
            .groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match g.get(&pgid).and_then(|grp| grp.grace_end(grace())) {
            Some(t) => later(t, DRAIN_MARGIN),
            None => return,
        }
    };
    while group_alive(pgid) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
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

/// The last `max` bytes of a log, on line boundaries.
pub fn log_tail(path: &Path, max: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    // Only the end is read: a step may have written gigabytes.
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(max as u64);
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(start)).is_err()
        || f.take(max as u64).read_to_end(&mut bytes).is_err()
    {
        return String::new();
    }
    let mut text = String::from_utf8_lossy(&bytes).to_string();
    if start > 0 {
        if let Some(nl) = text.find('\n') {
            text = text[nl + 1..].to_string();
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signal masks of a child `sh` made: `(SigBlk, SigIgn)` from its status.
    fn child_masks() -> (u64, u64) {
        let out = sh(
            "grep -E '^Sig(Blk|Ign)' /proc/self/status",
            Path::new("/"),
            &BTreeMap::new(),
        )
        .stdout_capture()
        .run()
        .expect("sh runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let mask = |name: &str| {
            let line = text
                .lines()
                .find(|l| l.starts_with(name))
                .expect("a mask line");
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        (mask("SigBlk:"), mask("SigIgn:"))
    }

    /// scenerun ignores SIGXFSZ and blocks SIGINT/SIGTERM in its threads; every child
    /// the one builder makes starts with neither (identity commands included, which
    /// had kept both).
    #[test]
    fn a_child_gets_the_default_signal_state() {
        let bit = |sig: i32| 1u64 << (sig - 1);
        let masks = std::thread::spawn(move || {
            // SAFETY: plain libc calls on stack values; SIG_IGN installs no handler code.
            unsafe {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGTERM);
                libc::sigaddset(&mut set, libc::SIGINT);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            child_masks()
        })
        .join()
        .unwrap();
        let (blocked, ignored) = masks;
        assert_eq!(
            blocked & (bit(libc::SIGTERM) | bit(libc::SIGINT)),
            0,
            "{blocked:x}"
        );
        assert_eq!(ignored & bit(libc::SIGXFSZ), 0, "{ignored:x}");
    }

    /// A process group id no process can have (above any pid_max): signals to it fail.
    const NOBODY: i32 = i32::MAX;

    #[test]
    fn a_timeout_sends_the_stop_signal_then_term_after_its_wait_then_kill_after_the_grace() {
        let stop = Stop {
            signal: libc::SIGUSR1,
            wait: Duration::from_secs(3),
        };
        let grace = Duration::from_secs(5);
        let t0 = Instant::now();
        let mut g = Group::new(Some(t0 + Duration::from_secs(10)), Some(stop), None);
        assert_eq!(
            g.tick(NOBODY, t0, grace),
            Some(t0 + Duration::from_secs(10))
        );
        assert_eq!(g.grace_end(grace), None, "nothing stopped yet");
        // The deadline: the stop signal, SIGTERM due after its wait.
        let at = t0 + Duration::from_secs(10);
        assert_eq!(g.tick(NOBODY, at, grace), Some(at + stop.wait));
        assert!(g.timed_out && g.stopped.is_some() && g.termed.is_none());
        assert_eq!(g.grace_end(grace), Some(at + stop.wait + grace));
        // The wait is over: SIGTERM, SIGKILL due after the grace.
        let term = at + stop.wait;
        assert_eq!(g.tick(NOBODY, term, grace), Some(term + grace));
        assert_eq!(g.termed, Some(term));
        assert_eq!(g.tick(NOBODY, term + grace, grace), None, "SIGKILL sent");
    }

    #[test]
    fn without_a_stop_a_timeout_terms_at_once_and_a_stop_is_begun_once() {
        let t0 = Instant::now();
        let grace = Duration::from_secs(5);
        let mut g = Group::new(Some(t0), None, None);
        assert_eq!(g.tick(NOBODY, t0, grace), Some(t0 + grace));
        assert_eq!(g.termed, Some(t0));
        let stop = Stop {
            signal: libc::SIGUSR1,
            wait: Duration::from_secs(1),
        };
        let mut g = Group::new(None, Some(stop), None);
        g.begin_stop(NOBODY, t0);
        let first = g.stopped;
        g.begin_stop(NOBODY, t0 + Duration::from_secs(1));
        assert_eq!(
            g.stopped, first,
            "a second stop (a cancel after a timeout) changes nothing"
        );
        // `terminate` skips the rest of the wait.
        g.term(NOBODY, t0 + Duration::from_millis(10));
        assert_eq!(
            g.grace_end(grace),
            Some(t0 + Duration::from_millis(10) + grace)
        );
    }

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
