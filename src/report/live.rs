//! Live device output, rendered: each typed line the inner run appends to the live file
//! (`device::live`) as the terminal shows it — a line per scene as it finishes, with
//! the tail of its output under a failure — followed while the lock command (or the
//! in-process inner run) runs, with a progress line and elapsed time on a TTY. The
//! terminal is the device phase's `Shown` here: its notices (worded by `report::notice`),
//! the live file followed, the not-warm summary. The phase prints nothing itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::notice::Notice;
use crate::base::ui::Ui;
use crate::device::events::{Attempt, AttemptOutcome, FollowUp, LaneRecord, Outcome, Shown};
use crate::device::live::{Line, Live};
use crate::device::report::Cause;

/// The text of one live line: its first line, and the lines under it.
fn text(l: &Live) -> String {
    match &l.line {
        Line::Run { scenes, ids } => format!(
            "device: {scenes} scene{} on id{} {}",
            if *scenes == 1 { "" } else { "s" },
            if ids.len() == 1 { "" } else { "s" },
            ids.join(",")
        ),
        Line::Settled {
            name,
            outcome,
            message,
        } => settled_line(
            l,
            name,
            &outcome.word(),
            outcome.passed(),
            message.as_deref(),
        ),
        Line::Attempt {
            name,
            attempt,
            follow,
        } => attempt_line(attempt, name, l.done, l.total, *follow),
        Line::Warning { notice } => crate::report::notice::line(&Notice::Lane(notice.clone())).0,
        Line::Lane { record: r } => format!(
            "      lane {} on {}: {} scene{}, start-up {}, {}",
            r.lane,
            r.devices.join(","),
            r.scenes.len(),
            if r.scenes.len() == 1 { "" } else { "s" },
            startup_text(r),
            r.ended
        ),
    }
}

/// A scene settled without running: its word, and under a failure its message.
fn settled_line(l: &Live, name: &str, word: &str, ok: bool, message: Option<&str>) -> String {
    let mut text = format!(
        "{} {word:<11} {name}",
        crate::base::ui::counter(l.done, l.total)
    );
    if let Some(m) = message.filter(|_| !ok) {
        for line in m.lines().take(TAIL) {
            text.push_str(&format!("\n      {line}"));
        }
    }
    text
}

/// A lane process's start-up: for one started before the lock, its share before it
/// and inside it.
fn startup_text(r: &LaneRecord) -> String {
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
    let counter = crate::base::ui::counter(done, total);
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

/// The most one read of the live file takes (the rest comes with the next read).
const LIVE_READ: u64 = 1 << 20;

fn follow(path: &Path, ui: &Ui, queued: bool, stop: &AtomicBool) {
    let t0 = Instant::now();
    let bar = ui.bars.then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.enable_steady_tick(Duration::from_millis(200));
        b
    });
    // The inner run appends whole JSON lines; a line may arrive in two reads.
    let mut file = crate::base::proc::output::OutputFile::new(path);
    let mut partial: Vec<u8> = Vec::new();
    let mut state: Option<(usize, usize)> = None;
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        while let Ok(got) = file.read(LIVE_READ) {
            if got.restarted {
                partial.clear();
            }
            if got.bytes.is_empty() {
                break;
            }
            partial.extend_from_slice(&got.bytes);
            while let Some(end) = partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = partial.drain(..=end).collect();
                if let Ok(l) = serde_json::from_slice::<Live>(&line) {
                    state = Some((l.done, l.total));
                    show(ui, bar.as_ref(), &l);
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
    let text = text(l);
    let mut lines = text.lines();
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

/// The device phase's terminal: its notices, and the live file followed.
impl Shown for Ui {
    fn notice(&self, n: Notice) {
        super::notice::say(self, &n);
    }

    fn follow(&self, path: PathBuf, queued: bool) -> Box<dyn std::any::Any> {
        Box::new(Follower::start(path, self, queued))
    }

    fn not_warm(
        &self,
        missing: &[crate::device::not_warm::Missing],
        cache: &Path,
        from: crate::base::layout::CacheFrom,
    ) -> String {
        super::not_warm::summary(missing, cache, from)
    }
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
