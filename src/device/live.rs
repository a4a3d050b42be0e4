//! Live device output: the inner run's reporter renders a line per scene as it finishes
//! (with the tail of its output under a failure) into a JSON-lines file in the job dir;
//! the outer follows that file while the lock command (or the in-process inner run)
//! runs and prints the lines, with a progress line and elapsed time on a TTY. The inner
//! run's own stderr belongs to the lock tool, so the file is the one channel to the user.
//! The outer's own notices (`Notice`: the lock taken, lanes started before it, warnings)
//! are worded and printed here too: the outer prints nothing itself.

use std::io::{BufRead, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::events::{Attempt, AttemptOutcome, Event, FollowUp, Notice, Outcome};
use super::report::Cause;
use crate::ui::Ui;

/// One line of the live file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Live {
    /// Scenes settled so far, of `total`.
    pub done: usize,
    pub total: usize,
    /// A failure or warning (kept by `-q`).
    pub loud: bool,
    /// Whether `text` is a pass (green) or not (red) or neutral.
    pub ok: Option<bool>,
    pub text: String,
}

/// Renders events into the live file.
pub struct Reporter {
    file: Option<std::fs::File>,
    total: usize,
    done: usize,
}

impl Reporter {
    pub fn new(path: &Path, total: usize) -> Reporter {
        Reporter {
            file: std::fs::File::create(path).ok(),
            total,
            done: 0,
        }
    }

    fn write(&mut self, l: Live) {
        if let Some(f) = self.file.as_mut() {
            if let Ok(mut s) = serde_json::to_string(&l) {
                s.push('\n');
                let _ = f.write_all(s.as_bytes());
            }
        }
    }

    /// A neutral line (the run started, on which ids).
    pub fn note(&mut self, text: String) {
        self.write(Live {
            done: self.done,
            total: self.total,
            loud: false,
            ok: None,
            text,
        });
    }

    /// A scene settled without running (failed in warm, no device step, not warm...).
    pub fn settled(&mut self, name: &str, word: &str, ok: bool, message: Option<&str>) {
        self.done += 1;
        let mut text = format!(
            "{} {word:<11} {name}",
            crate::ui::counter(self.done, self.total)
        );
        if let Some(m) = message.filter(|_| !ok) {
            for line in m.lines().take(TAIL) {
                text.push_str(&format!("\n      {line}"));
            }
        }
        self.write(Live {
            done: self.done,
            total: self.total,
            loud: !ok,
            ok: Some(ok),
            text,
        });
    }

    /// Render one event; `name` gives scene names, `follow` what comes after an attempt.
    pub fn event(&mut self, e: &Event, name: &str, follow: FollowUp) {
        match e {
            Event::Attempt { attempt, .. } => {
                let last = follow == FollowUp::Final;
                if last {
                    self.done += 1;
                }
                let text = attempt_line(attempt, name, self.done, self.total, follow);
                let ok = attempt.outcome.not_a_failure();
                self.write(Live {
                    done: self.done,
                    total: self.total,
                    loud: !ok,
                    ok: Some(ok),
                    text,
                });
            }
            Event::Warning(w) => self.write(Live {
                done: self.done,
                total: self.total,
                loud: true,
                ok: None,
                text: format!("warning: {w}"),
            }),
            Event::Lane(r) => self.write(Live {
                done: self.done,
                total: self.total,
                loud: r.restart_reason.is_some(),
                ok: None,
                text: format!(
                    "      lane {} on {}: {} scene{}, start-up {}, {}",
                    r.lane,
                    r.devices.join(","),
                    r.scenes.len(),
                    if r.scenes.len() == 1 { "" } else { "s" },
                    startup_text(r),
                    r.ended
                ),
            }),
            Event::Fault { .. } | Event::Done { .. } | Event::Started { .. } => {}
        }
    }
}

/// A lane process's start-up: for one started before the lock, its share before it
/// and inside it.
fn startup_text(r: &super::events::LaneRecord) -> String {
    let inside = r
        .startup_secs
        .map(|s| format!("{s:.2}s"))
        .unwrap_or_else(|| "-".into());
    match r.startup_before_lock_secs {
        Some(before) => format!("{before:.2}s before the lock + {inside} inside it"),
        None => inside,
    }
}

/// Lines of a failure's message and output shown under it.
const TAIL: usize = 12;

fn attempt_line(a: &Attempt, name: &str, done: usize, total: usize, follow: FollowUp) -> String {
    let counter = crate::ui::counter(done, total);
    let counter = match follow {
        FollowUp::Final => counter,
        _ => " ".repeat(counter.len()),
    };
    let mut text = format!(
        "{counter} {:<11} {name} {:.2}s on {}",
        a.outcome.word(),
        a.duration_secs,
        a.devices.join(",")
    );
    match follow {
        FollowUp::Retry => text.push_str(" (will retry)"),
        FollowUp::FaultRerun => text.push_str(" (device quarantined; rerun on a healthy id)"),
        FollowUp::InLane => text.push_str(" (runs again in the fresh lane process)"),
        FollowUp::Final => {}
    }
    if !a.outcome.not_a_failure() || a.outcome == AttemptOutcome::Test(Outcome::NotReached) {
        let c = Cause::of(a.message.as_deref(), a.output_tail.as_deref(), TAIL);
        for l in std::iter::once(&c.verdict)
            .filter(|v| !v.is_empty())
            .chain(&c.last)
        {
            text.push_str(&format!("\n      {l}"));
        }
    }
    text
}

/// Follows the live file on a thread; stops (and clears the progress line) on drop.
pub struct Follower {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Follower {
    /// `queued`: the lock command is running, so until the first line the wait is the
    /// lock queue's.
    pub fn start(path: PathBuf, ui: &Ui, queued: bool) -> Follower {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let ui = ui.clone();
        let thread = std::thread::spawn(move || follow(&path, &ui, queued, &flag));
        Follower {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn follow(path: &Path, ui: &Ui, queued: bool, stop: &AtomicBool) {
    let t0 = Instant::now();
    let bar = ui.bars.then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.enable_steady_tick(Duration::from_millis(200));
        b
    });
    let mut pos = 0u64;
    let mut partial = String::new();
    let mut state: Option<(usize, usize)> = None;
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        if let Ok(mut f) = std::fs::File::open(path) {
            if f.seek(SeekFrom::Start(pos)).is_ok() {
                let mut r = std::io::BufReader::new(f);
                loop {
                    let mut line = String::new();
                    match r.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            pos += n as u64;
                            partial.push_str(&line);
                            if !partial.ends_with('\n') {
                                continue;
                            }
                            if let Ok(l) = serde_json::from_str::<Live>(partial.trim_end()) {
                                state = Some((l.done, l.total));
                                show(ui, bar.as_ref(), &l);
                            }
                            partial.clear();
                        }
                    }
                }
            }
        }
        if let Some(b) = &bar {
            let secs = t0.elapsed().as_secs();
            b.set_message(match state {
                None if queued => format!("device: waiting for the lock {secs}s"),
                None => format!("device: starting {secs}s"),
                Some((0, t)) => format!("device: {t} scenes, none done yet, {secs}s"),
                Some((d, t)) => format!("device: {d}/{t} scenes done, {secs}s"),
            });
        }
        if stopping {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

/// A settled line's outcome word in its colour: a pass green, a skip of any kind yellow
/// (a skip is never shown as a pass).
fn paint_word(ui: &Ui, line: &str) -> String {
    const WORDS: [(&str, bool); 5] = [
        ("passed", true),
        ("xpassed", true),
        ("skipped", false),
        ("xfailed", false),
        ("not reached", false),
    ];
    for (word, pass) in WORDS {
        let padded = format!(" {word} ");
        if line.contains(&padded) {
            let painted = if pass {
                ui.green(word)
            } else {
                ui.yellow(word)
            };
            return line.replacen(&padded, &format!(" {painted} "), 1);
        }
    }
    line.to_string()
}

fn show(ui: &Ui, bar: Option<&indicatif::ProgressBar>, l: &Live) {
    if let Some(text) = render(ui, l) {
        ui.above(bar, &text);
    }
}

/// What the terminal shows of one live line (None under `-q` for a quiet one): the
/// first line painted by its verdict, the lines under it dim.
fn render(ui: &Ui, l: &Live) -> Option<String> {
    if ui.quiet && !l.loud {
        return None;
    }
    let mut lines = l.text.lines();
    let first = lines.next().unwrap_or("");
    let first = match l.ok {
        Some(true) => paint_word(ui, first),
        Some(false) => ui.red(first),
        None => first.to_string(),
    };
    let rest: Vec<String> = lines.map(|s| ui.dim(s)).collect();
    let text = std::iter::once(first)
        .chain(rest)
        .collect::<Vec<_>>()
        .join("\n");
    Some(text)
}

impl Notice {
    /// Its line, and whether `-q` keeps it (a warning).
    fn line(&self) -> (String, bool) {
        match self {
            Notice::PrestartWarning(w) => (format!("warning: device: {w}"), true),
            Notice::Prestarted(counts) => {
                let each: Vec<String> = counts
                    .iter()
                    .map(|(l, n)| format!("{n} of lane {l}"))
                    .collect();
                let line = format!(
                    "device: lane processes started before the lock: {}",
                    each.join(", ")
                );
                (line, false)
            }
            Notice::TakingLock { command } => {
                (format!("device: taking the lock once: {command}"), false)
            }
            Notice::LockRanInnerTwice => (
                "warning: device: the lock command started the inner run more than once; only the first run counted".into(),
                true,
            ),
            Notice::LockKilledAfterRelease { release_timeout } => (
                format!(
                    "warning: device: the lock command had not returned {} after the device steps ended; its process group was killed (the results are kept)",
                    crate::units::short_duration(*release_timeout)
                ),
                true,
            ),
            Notice::AllFailedInWarm => (
                "device: every selected scene failed in warm; the lock was not taken".into(),
                true,
            ),
            Notice::AllDecidedInWarm => (
                "device: every selected scene was decided in warm; the lock was not taken".into(),
                true,
            ),
            Notice::CompileLogIgnored { lines } => (
                format!(
                    "notice: compile log: {lines} line(s) ignored (not written by a compiler shim of this run)"
                ),
                true,
            ),
            Notice::CompilesNotSigned { why } => (
                format!("notice: compile_cache: what this run's compiles keep will not be signed: {why}"),
                true,
            ),
            Notice::NoHealthyDevice { quarantined } => (
                format!(
                    "device: no healthy device left (quarantined: {}); the remaining scenes were not run",
                    quarantined.join(",")
                ),
                true,
            ),
        }
    }
}

/// Print one of the outer's notices: a warning always, the rest unless `-q`.
pub fn notify(ui: &Ui, n: Notice) {
    match n.line() {
        (line, true) => ui.always(&line),
        (line, false) => ui.info(&line),
    }
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
