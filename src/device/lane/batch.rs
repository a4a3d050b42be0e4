//! Attribution for one lane process (docs/lanes.md), as pure code: `Batch` takes the
//! lines of the process's results file (`protocol`) and decides which scene is running,
//! which finished how, which crashed, timed out or was never reached. Time comes in as
//! seconds since the process started, so every rule is tested line by line without a
//! process. Invariant: every scene of a batch gets exactly one verdict from `finish` or
//! earlier, or is handed back to be re-queued.

use std::collections::HashMap;

use super::protocol::{parse_line, LaneEvent, Line, Reportlog, TestReport};
use crate::base::notice::{LaneNotice, Secs};
use crate::base::verdict::Outcome;
use crate::device::events::AttemptOutcome;

/// One scene of a batch, as the lane process receives it.
#[derive(Debug, Clone)]
pub struct BatchScene {
    pub name: String,
    pub args: Vec<String>,
    pub timeout: Option<f64>,
    /// A restart cut it short once already (it reran here): a second time fails it.
    pub cut_before: bool,
}

#[derive(Debug, Clone)]
enum State {
    Pending,
    /// A start event came.
    Running {
        since: f64,
    },
    /// Reportlog records came; more may follow until a later scene reports.
    Reporting {
        since: f64,
        /// Its tests' verdicts so far, by rule 2 (`Outcome::of_tests`), and the message
        /// of the one that decided it.
        tests: Option<(Outcome, Option<String>)>,
        /// The node reporting now, its phases so far by rule 1 (`Outcome::of_phases`).
        node: Option<Node>,
        duration: f64,
    },
    Done,
}

/// What an end line says besides its scene and verdict.
struct EndSaid {
    duration: Option<f64>,
    message: Option<String>,
    output_bytes: Option<u64>,
    failure_text: Option<String>,
}

/// A duration a lane claims for what ran from `since` until `now` (seconds since its
/// process started): at most `now - since`, the time scenerun saw it run, so no scene is
/// busier than its process held the ids. A claim past the process's whole life is
/// noted (`who`: the scene or node id).
fn bounded(who: &str, claimed: f64, since: f64, now: f64, out: &mut Vec<Effect>) -> f64 {
    let seen = (now - since).max(0.0);
    if claimed > now {
        out.push(Effect::Warn(LaneNotice::ClaimClamped {
            who: who.to_string(),
            claimed: Secs(claimed),
            ran: Secs(now),
            seen: Secs(seen),
        }));
    }
    claimed.min(seen)
}

/// A node's reports so far: its id, and the verdict of the phases that said something
/// (a passed setup or teardown says nothing) with the message that decided it.
#[derive(Debug, Clone)]
struct Node {
    id: String,
    verdict: Option<(Outcome, Option<String>)>,
}

/// `a` then `b`, combined by `rule`: the later one only when it outranks.
fn fold(
    a: Option<(Outcome, Option<String>)>,
    b: Option<(Outcome, Option<String>)>,
    rule: fn(Outcome, Outcome) -> Outcome,
) -> Option<(Outcome, Option<String>)> {
    match (a, b) {
        (Some(a), Some(b)) if rule(a.0, b.0) != a.0 => Some(b),
        (Some(a), _) => Some(a),
        (None, b) => b,
    }
}

/// What the machine tells its runner.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Scene `scene` (index in the batch) started.
    Started { scene: usize },
    /// Scene `scene` (index in the batch) ended this way.
    Scene {
        scene: usize,
        verdict: AttemptOutcome,
        /// Seconds since the process started.
        started: f64,
        duration: f64,
        message: Option<String>,
    },
    /// The lane says these ids are faulty.
    Fault { devices: Vec<String> },
    /// The lane asks for a fresh process for the rest of its batch.
    Restart { reason: String },
    /// A line was ignored.
    Warn(LaneNotice),
    /// What the end line of the scene ending next (the `Scene` that follows) said of
    /// its output: it ends at byte `up_to` of the process's output file
    /// (`output_bytes`), and the failure in the framework's words (`failure_text`).
    SceneOutput {
        up_to: Option<u64>,
        failure_text: Option<String>,
    },
}

/// Why a lane process ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcessEnd {
    /// Exited on its own; the status as text ("exited with status 1") and whether it was 0.
    Exited { ok: bool, how: String },
    /// Killed after a scene's timeout (already reported by `expire`).
    SceneTimeout,
    /// Killed when the lane's own timeout fired.
    LaneTimeout,
    /// Killed after a device fault.
    Fault,
    /// Killed because the run was interrupted.
    Interrupted,
    /// Killed for breaking the results protocol (its results path is not a regular
    /// file, a line is longer than the cap): why.
    Protocol(ProtocolError),
    /// Ended for a restart (a restart line, `restart_on`): the scene in progress is cut
    /// short and reruns once in the fresh process with the scenes never started.
    Restart(String),
}

/// How a lane broke the results protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// Its results path cannot be looked at.
    CannotStat {
        path: std::path::PathBuf,
        error: String,
    },
    /// Its results path is not a regular file (a FIFO, a device, a link): why.
    NotRegular(String),
    /// Its open results file cannot be looked at (the error).
    Unreadable(String),
    /// A results line longer than the cap (MiB).
    LineTooLong { mib: usize },
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::CannotStat { path, error } => {
                write!(f, "cannot stat {}: {error}", path.display())
            }
            ProtocolError::NotRegular(why) => write!(f, "its results path {why}"),
            ProtocolError::Unreadable(e) => f.write_str(e),
            ProtocolError::LineTooLong { mib } => {
                write!(f, "a results line is longer than {mib} MiB")
            }
        }
    }
}

/// Which clock runs out first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Deadline {
    Scene { scene: usize, at: f64 },
    Lane { at: f64 },
}

/// Attribution for one lane process and its batch.
#[derive(Debug)]
pub struct Batch {
    scenes: Vec<BatchScene>,
    state: Vec<State>,
    by_name: HashMap<String, usize>,
    by_arg: HashMap<String, usize>,
    lane_timeout: Option<f64>,
    /// When the last result (start, end or report) came; 0 = process start.
    last_result: f64,
    first_result: Option<f64>,
    /// pytest-reportlog's SessionFinish came: the process reached its normal end.
    clean: bool,
    /// Output of the process at crash time, for the crashed scene's message.
    pub fault_scene: Option<usize>,
    /// The process asked for a restart: what it writes after that is not read (its
    /// runtime said it is poisoned, and when the request and a later line are read in
    /// one look must not decide a scene's outcome).
    restart_asked: bool,
    /// Lines read so far (any kind).
    lines: usize,
    /// When its ready line says it was ready (Unix seconds).
    ready_unix: Option<f64>,
}

impl Batch {
    pub fn new(scenes: Vec<BatchScene>, lane_timeout: Option<f64>) -> Batch {
        let mut by_name = HashMap::new();
        let mut by_arg = HashMap::new();
        for (i, s) in scenes.iter().enumerate() {
            by_name.insert(s.name.clone(), i);
            for a in &s.args {
                by_arg.entry(a.clone()).or_insert(i);
            }
        }
        Batch {
            state: vec![State::Pending; scenes.len()],
            scenes,
            by_name,
            by_arg,
            lane_timeout,
            last_result: 0.0,
            first_result: None,
            clean: false,
            fault_scene: None,
            restart_asked: false,
            lines: 0,
            ready_unix: None,
        }
    }

    pub fn scenes(&self) -> &[BatchScene] {
        &self.scenes
    }

    /// Scene `i` was cut short by a restart before and reruns here: a second restart
    /// under it fails it.
    pub fn rerun_after_cut(&mut self, i: usize) {
        self.scenes[i].cut_before = true;
    }

    /// Process start → first result or start event.
    pub fn startup(&self) -> Option<f64> {
        self.first_result
    }

    /// The process wrote nothing at all to its results file (yet).
    pub fn silent(&self) -> bool {
        self.lines == 0
    }

    /// When its ready line says it was ready (Unix seconds), if it wrote one with a time.
    pub fn ready_unix(&self) -> Option<f64> {
        self.ready_unix
    }

    /// The scene a report with this nodeid belongs to: the scene with the longest arg
    /// that is the nodeid or a prefix of it ending at `::`, `[` or `/`.
    fn owner(&self, nodeid: &str) -> Option<usize> {
        if let Some(&i) = self.by_arg.get(nodeid) {
            return Some(i);
        }
        let cuts = nodeid
            .char_indices()
            .filter(|(_, c)| matches!(c, ':' | '[' | '/'))
            .map(|(i, _)| i)
            .collect::<Vec<_>>();
        for &cut in cuts.iter().rev() {
            let prefix = &nodeid[..cut];
            let rest = &nodeid[cut..];
            if rest.starts_with("::") || rest.starts_with('[') || rest.starts_with('/') {
                if let Some(&i) = self.by_arg.get(prefix) {
                    return Some(i);
                }
            }
        }
        None
    }

    fn in_progress(&self) -> Option<usize> {
        self.state
            .iter()
            .position(|s| matches!(s, State::Running { .. } | State::Reporting { .. }))
    }

    fn first_pending(&self) -> Option<usize> {
        self.state.iter().position(|s| matches!(s, State::Pending))
    }

    /// Close a reportlog scene with the verdict of its tests (rule 2), each test's the
    /// verdict of its phases (rule 1); a scene none of whose tests said anything is skipped.
    fn close_reporting(&mut self, i: usize, out: &mut Vec<Effect>) {
        if let State::Reporting {
            since,
            tests,
            node,
            duration,
        } = std::mem::replace(&mut self.state[i], State::Done)
        {
            let (verdict, message) = fold(tests, node.and_then(|n| n.verdict), Outcome::of_tests)
                .unwrap_or((Outcome::Skipped, None));
            out.push(Effect::Scene {
                scene: i,
                verdict: AttemptOutcome::Test(verdict),
                started: since,
                duration,
                message,
            });
        }
    }

    /// Every reportlog scene still open except `keep` is complete.
    fn close_others(&mut self, keep: usize, out: &mut Vec<Effect>) {
        for j in 0..self.state.len() {
            if j != keep && matches!(self.state[j], State::Reporting { .. }) {
                self.close_reporting(j, out);
            }
        }
    }

    fn result_seen(&mut self, now: f64) {
        self.first_result.get_or_insert(now);
        self.last_result = now;
    }

    /// A start line for `scene` at `now`: a pending scene of this batch runs from now.
    fn start(&mut self, scene: &str, now: f64, out: &mut Vec<Effect>) {
        match self.by_name.get(scene).copied() {
            Some(i) if matches!(self.state[i], State::Pending) => {
                self.result_seen(now);
                self.close_others(i, out);
                self.state[i] = State::Running { since: now };
                out.push(Effect::Started { scene: i });
            }
            Some(_) => out.push(Effect::Warn(LaneNotice::SecondStart {
                scene: scene.to_string(),
            })),
            None => out.push(Effect::Warn(LaneNotice::NotInBatch {
                scene: scene.to_string(),
            })),
        }
    }

    /// Read one line written by the process at `now`.
    pub fn feed(&mut self, text: &str, now: f64) -> Vec<Effect> {
        let mut out = Vec::new();
        if text.trim().is_empty() || self.restart_asked {
            return out;
        }
        self.lines += 1;
        match parse_line(text) {
            Line::Garbage(why) => out.push(Effect::Warn(LaneNotice::Garbage {
                why,
                line: clip(text.trim(), 120),
            })),
            Line::Reportlog(Reportlog::Other) => {}
            Line::Reportlog(Reportlog::SessionFinish) => self.clean = true,
            Line::Reportlog(Reportlog::TestReport(r)) => self.report(r, now, &mut out),
            Line::Event(e) => self.event(e, now, &mut out),
        }
        out
    }

    /// One of scenerun's own records, read at `now`.
    fn event(&mut self, e: LaneEvent, now: f64, out: &mut Vec<Effect>) {
        match e {
            LaneEvent::Ready { unix_secs } => self.ready_unix = self.ready_unix.or(unix_secs),
            LaneEvent::Restart { reason } => {
                self.restart_asked = true;
                out.push(Effect::Restart {
                    reason: LaneEvent::restart_reason(reason),
                });
            }
            LaneEvent::DeviceFault { devices, scene } => {
                self.fault_scene = scene
                    .and_then(|s| self.by_name.get(&s).copied())
                    .or_else(|| self.in_progress());
                out.push(Effect::Fault { devices });
            }
            LaneEvent::Start { scene } => self.start(&scene, now, out),
            LaneEvent::End {
                scene,
                outcome,
                duration_secs,
                message,
                output_bytes,
                failure_text,
            } => {
                let said = EndSaid {
                    duration: duration_secs,
                    message,
                    output_bytes,
                    failure_text,
                };
                self.end(&scene, outcome.into(), said, now, out)
            }
        }
    }

    /// An end line for `scene` at `now`: the scene ends with `verdict`.
    fn end(
        &mut self,
        scene: &str,
        verdict: AttemptOutcome,
        said: EndSaid,
        now: f64,
        out: &mut Vec<Effect>,
    ) {
        match self.by_name.get(scene).copied() {
            Some(i) if !matches!(self.state[i], State::Done) => {
                let since = match self.state[i] {
                    State::Running { since } | State::Reporting { since, .. } => since,
                    _ => self.last_result,
                };
                self.result_seen(now);
                self.close_others(i, out);
                self.state[i] = State::Done;
                let duration = match said.duration {
                    Some(d) => bounded(scene, d, since, now, out),
                    None => (now - since).max(0.0),
                };
                // What it said of its output goes just before the scene's own effect.
                if said.output_bytes.is_some() || said.failure_text.is_some() {
                    out.push(Effect::SceneOutput {
                        up_to: said.output_bytes,
                        failure_text: said.failure_text,
                    });
                }
                out.push(Effect::Scene {
                    scene: i,
                    verdict,
                    started: since,
                    duration,
                    message: said.message,
                });
            }
            Some(_) => out.push(Effect::Warn(LaneNotice::SecondEnd {
                scene: scene.to_string(),
            })),
            None => out.push(Effect::Warn(LaneNotice::NotInBatch {
                scene: scene.to_string(),
            })),
        }
    }

    /// A pytest-reportlog `TestReport` line: the scene that owns its node id collects it.
    fn report(&mut self, r: TestReport, now: f64, out: &mut Vec<Effect>) {
        let verdict = r.verdict();
        let duration = r.duration.unwrap_or(0.0);
        let message = r.message();
        let TestReport { nodeid, when, .. } = r;
        match self.owner(&nodeid) {
            Some(i) if !matches!(self.state[i], State::Done) => {
                let prev = self.last_result;
                self.result_seen(now);
                self.close_others(i, out);
                let (since, mut tests, node, d0) =
                    match std::mem::replace(&mut self.state[i], State::Done) {
                        State::Reporting {
                            since,
                            tests,
                            node,
                            duration,
                        } => (since, tests, node, duration),
                        State::Running { since } => (since, None, None, 0.0),
                        _ => (prev, None, None, 0.0),
                    };
                // Another node: the one before it is complete, a test of the scene.
                let mut node = match node {
                    Some(n) if n.id == nodeid => n,
                    other => {
                        tests = fold(tests, other.and_then(|n| n.verdict), Outcome::of_tests);
                        Node {
                            id: nodeid.clone(),
                            verdict: None,
                        }
                    }
                };
                // A setup or teardown that passed says nothing of the test's verdict.
                if when == "call" || verdict != Outcome::Passed {
                    let telling = !matches!(verdict, Outcome::Passed | Outcome::Xpassed);
                    let message = message
                        .filter(|_| telling)
                        .map(|m| format!("{nodeid} ({when}): {m}"));
                    node.verdict = fold(node.verdict, Some((verdict, message)), Outcome::of_phases);
                }
                self.state[i] = State::Reporting {
                    since,
                    tests,
                    node: Some(node),
                    duration: bounded(&nodeid, d0 + duration, since, now, out),
                };
            }
            Some(i) => out.push(Effect::Warn(LaneNotice::ReportAfterEnd {
                nodeid,
                scene: self.scenes[i].name.clone(),
            })),
            None => out.push(Effect::Warn(LaneNotice::ReportNoOwner { nodeid })),
        }
    }

    /// The next deadline: the scene in progress (or the next one, counted from the last
    /// result), or the lane's own timeout, whichever is first.
    pub fn deadline(&self) -> Option<Deadline> {
        let scene = match self.in_progress() {
            Some(i) => {
                let since = match self.state[i] {
                    State::Running { since } | State::Reporting { since, .. } => since,
                    _ => unreachable!("in progress"),
                };
                self.scenes[i].timeout.map(|t| (i, since + t))
            }
            None => self
                .first_pending()
                .and_then(|i| self.scenes[i].timeout.map(|t| (i, self.last_result + t))),
        };
        let lane = self.lane_timeout;
        match (scene, lane) {
            (Some((i, at)), Some(l)) if at <= l => Some(Deadline::Scene { scene: i, at }),
            (_, Some(l)) => Some(Deadline::Lane { at: l }),
            (Some((i, at)), None) => Some(Deadline::Scene { scene: i, at }),
            (None, None) => None,
        }
    }

    /// The scene deadline passed at `now`: that scene timed out. The runner kills the
    /// process and then calls `finish(ProcessEnd::SceneTimeout)`.
    pub fn expire_scene(&mut self, i: usize, now: f64) -> Vec<Effect> {
        let since = match self.state[i] {
            State::Running { since } | State::Reporting { since, .. } => since,
            _ => self.last_result,
        };
        self.state[i] = State::Done;
        vec![Effect::Scene {
            scene: i,
            verdict: AttemptOutcome::TimedOut,
            started: since,
            duration: (now - since).max(0.0),
            message: self.scenes[i].timeout.map(|t| {
                format!(
                    "timed out after {} inside the lane process (process group killed)",
                    crate::base::units::short_duration(crate::base::units::secs(t))
                )
            }),
        }]
    }

    /// The process ended at `now`. Gives every scene still without a verdict one, except
    /// those handed back (never started, after a crash, a scene timeout or a device
    /// fault) for a fresh process. `tail`: the end of the process's output.
    pub fn finish(&mut self, end: &ProcessEnd, now: f64, tail: &str) -> (Vec<Effect>, Vec<usize>) {
        if let ProcessEnd::Restart(reason) = end {
            return self.finish_restart(reason, now);
        }
        let mut out = Vec::new();
        let clean = self.clean || matches!(end, ProcessEnd::Exited { ok: true, .. });
        let since_of = |s: &State, last: f64| match s {
            State::Running { since } | State::Reporting { since, .. } => *since,
            _ => last,
        };
        let with_tail = |m: String| {
            if tail.trim().is_empty() {
                m
            } else {
                format!("{m}\n{}", tail.trim_end())
            }
        };
        // The scene that was running when the process went away, if any.
        let current = match end {
            ProcessEnd::Exited { .. } if clean => {
                for i in 0..self.state.len() {
                    if matches!(self.state[i], State::Reporting { .. }) {
                        self.close_reporting(i, &mut out);
                    }
                }
                self.in_progress()
            }
            ProcessEnd::SceneTimeout => None,
            ProcessEnd::Fault => self
                .fault_scene
                .filter(|&i| !matches!(self.state[i], State::Done))
                .or_else(|| self.in_progress())
                .or_else(|| self.first_pending()),
            _ => self.in_progress().or_else(|| self.first_pending()),
        };
        if let Some(i) = current {
            let since = since_of(&self.state[i], self.last_result);
            let (verdict, message) = match end {
                ProcessEnd::Exited { how, .. } => (
                    AttemptOutcome::Test(Outcome::Failed),
                    with_tail(format!("crashed the lane process (it {how})")),
                ),
                ProcessEnd::LaneTimeout => (
                    AttemptOutcome::TimedOut,
                    "timed out: the lane process reached its lane timeout (process group killed)"
                        .to_string(),
                ),
                ProcessEnd::Fault => (
                    AttemptOutcome::DeviceFault,
                    with_tail("device fault reported by the lane process".to_string()),
                ),
                ProcessEnd::Interrupted => (AttemptOutcome::Interrupted, "interrupted".to_string()),
                ProcessEnd::Protocol(why) => (
                    AttemptOutcome::Test(Outcome::Failed),
                    with_tail(format!("lane protocol error: {why}")),
                ),
                ProcessEnd::SceneTimeout | ProcessEnd::Restart(_) => {
                    unreachable!("no current scene")
                }
            };
            out.push(self.cut_short(i, verdict, since, now, message));
        }
        let requeue = self.settle_pending(end, clean, now, &mut out);
        (out, requeue)
    }

    /// The scenes never started when the process ended at `now`: each gets a verdict
    /// when a fresh process would not run it (a clean exit that never reported it, a
    /// lane timeout, an interrupt, a protocol error); the others are handed back, in
    /// batch order.
    fn settle_pending(
        &mut self,
        end: &ProcessEnd,
        clean: bool,
        now: f64,
        out: &mut Vec<Effect>,
    ) -> Vec<usize> {
        let mut requeue = Vec::new();
        for i in 0..self.state.len() {
            if !matches!(self.state[i], State::Pending) {
                continue;
            }
            let not_run = |m: &str| Effect::Scene {
                scene: i,
                verdict: AttemptOutcome::NotRun,
                started: now,
                duration: 0.0,
                message: Some(m.to_string()),
            };
            match end {
                ProcessEnd::Exited { .. } if clean => out.push(Effect::Scene {
                    scene: i,
                    verdict: AttemptOutcome::Test(Outcome::Failed),
                    started: now,
                    duration: 0.0,
                    message: Some("lane process ended without reporting it".into()),
                }),
                ProcessEnd::LaneTimeout => out.push(not_run("not run: lane timeout")),
                ProcessEnd::Interrupted => out.push(not_run("not run: interrupted")),
                // A fresh process would find the same path: not re-queued.
                ProcessEnd::Protocol(_) => out.push(not_run("not run: lane protocol error")),
                _ => {
                    requeue.push(i);
                    continue;
                }
            }
            self.state[i] = State::Done;
        }
        requeue
    }
}

impl Batch {
    /// Scene `i`, running since `since`, ends at `now` because its process did: done,
    /// with `verdict` and why.
    fn cut_short(
        &mut self,
        i: usize,
        verdict: AttemptOutcome,
        since: f64,
        now: f64,
        message: String,
    ) -> Effect {
        self.state[i] = State::Done;
        Effect::Scene {
            scene: i,
            verdict,
            started: since,
            duration: (now - since).max(0.0),
            message: Some(message),
        }
    }

    /// The process was ended for a restart at `now`. The scenes that ended keep their
    /// outcome (a reportlog scene: what its reports said); the scene in progress is cut
    /// short and goes back with the scenes never started, to run once more in the fresh
    /// process — unless a restart cut it short before, which fails it. The scenes handed
    /// back are in batch order.
    fn finish_restart(&mut self, reason: &str, now: f64) -> (Vec<Effect>, Vec<usize>) {
        let mut out = Vec::new();
        let mut again = Vec::new();
        for i in 0..self.state.len() {
            match self.state[i] {
                State::Reporting { .. } => self.close_reporting(i, &mut out),
                State::Running { since } => {
                    let (verdict, message) = if self.scenes[i].cut_before {
                        (
                            AttemptOutcome::Test(Outcome::Failed),
                            format!("cut short by a restart of the lane process again ({reason}); it had been rerun once already"),
                        )
                    } else {
                        again.push(i);
                        (
                            AttemptOutcome::CutShort,
                            format!("cut short by a restart of the lane process ({reason}): it runs again in the fresh process"),
                        )
                    };
                    out.push(self.cut_short(i, verdict, since, now, message));
                }
                State::Pending => again.push(i),
                State::Done => {}
            }
        }
        (out, again)
    }
}

fn clip(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_string();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
