//! The one renderer of a warm: a progress bar on a terminal, else one line per finished
//! step; under a failed step its cause and the tail of its output; under GitHub Actions
//! `::error` annotations on the files a compiler complained about and the whole log in a
//! collapsible `::group::`; the warm's notices (worded by `report::notice`) and its
//! summary. Decides nothing: it renders the executor's events and the `Notice`s the
//! warm hands it (as its `warm::Shown`), and nothing in the warm (or the cache under
//! it) prints.

use std::collections::BTreeMap;

use super::diagnostics;
use crate::base::notice::Notice;
use crate::base::ui::Ui;
use crate::base::units::{short_duration, short_size};
use crate::plan::Plan;
use crate::warm::accum::Summary;
use crate::warm::events::{Event, Shown, UnitOutcome, WorkerNote};

/// Lines of a failed step's output shown under its line.
const TAIL_LINES: usize = 15;
/// Annotations per failed step at most.
const MAX_ANNOTATIONS: usize = 10;
/// A log longer than the tail is shown whole, folded, under GitHub Actions (up to this).
const GROUP_BYTES: usize = 64 << 10;

pub struct Reporter<'a> {
    ui: &'a Ui,
    bar: Option<indicatif::ProgressBar>,
    running: BTreeMap<usize, String>,
    total: usize,
    finished: usize,
    /// Bytes the remote cache moved so far (down, up), shown on the bar.
    moved: (u64, u64),
    /// Columns the bar's message may take (the terminal's width less the bar's).
    room: usize,
}

impl<'a> Reporter<'a> {
    /// A reporter on `ui`; its bar (on a terminal) shows from `start`.
    pub fn new(ui: &'a Ui) -> Reporter<'a> {
        Reporter {
            ui,
            bar: None,
            running: BTreeMap::new(),
            total: 0,
            finished: 0,
            moved: (0, 0),
            room: 0,
        }
    }

    /// The executor starts on `plan`'s steps: the bar, on a terminal.
    pub fn start(&mut self, plan: &Plan) {
        let ui = self.ui;
        let total = plan.steps.len();
        let columns = crate::base::ui::columns();
        let (template, room) = crate::base::ui::warm_bar(columns, total);
        let bar = ui.bars.then(|| {
            let term = Box::new(crate::base::ui::BarTerm::new(columns));
            let pb = indicatif::ProgressBar::with_draw_target(
                Some(total as u64),
                indicatif::ProgressDrawTarget::term_like_with_hz(term, 20),
            );
            pb.set_style(
                indicatif::ProgressStyle::with_template(&template)
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            ui.bar.set(Some(pb.clone()));
            pb
        });
        self.bar = bar;
        self.total = total;
        self.room = room;
    }

    /// One finished step's text: above the bar on a TTY (only failures unless -v), else
    /// on stderr (all but `keep: false` lines under -q).
    /// Whether `say` would print a line (one it would not is not even formatted: a
    /// no-op warm under -q has thousands).
    /// A hit is a line only under `-v`, on a terminal or not: a no-op warm in a CI log
    /// is its final line, not one line per step.
    fn shows(&self, keep: bool, hit: bool) -> bool {
        match &self.bar {
            Some(_) => keep || self.ui.verbose > 0,
            None if hit => keep || self.ui.verbose > 0,
            None => keep || !self.ui.quiet,
        }
    }

    fn say(&self, text: &str, keep: bool) {
        match &self.bar {
            Some(pb) => {
                if keep || self.ui.verbose > 0 {
                    self.ui.above(Some(pb), text);
                }
                pb.inc(1);
            }
            None if keep => self.ui.always(text),
            None => self.ui.info(text),
        }
    }

    fn show_running(&self) {
        if let Some(pb) = &self.bar {
            let running = self
                .running
                .values()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            let text = match self.moved {
                (0, 0) => running,
                (down, up) => format!(
                    "remote {} down, {} up; {running}",
                    short_size(down),
                    short_size(up)
                ),
            };
            pb.set_message(crate::base::ui::fit(&text, self.room).into_owned());
        }
    }

    pub fn on(&mut self, plan: &Plan, ev: &Event) {
        match ev {
            Event::Started { unit, .. } => {
                if self.bar.is_some() {
                    let s = &plan.steps[plan.units[*unit].steps[0]];
                    self.running.insert(*unit, s.id.to_string());
                    self.show_running();
                }
            }
            Event::Finished {
                unit,
                wall_secs,
                outcome,
                input_changed,
                worker,
                ..
            } => {
                self.running.remove(unit);
                match outcome {
                    UnitOutcome::Built { sent, .. } => self.moved.1 += sent,
                    UnitOutcome::Downloaded { bytes, .. } => self.moved.0 += bytes,
                    _ => {}
                }
                self.show_running();
                let note = unit_note(input_changed.as_deref(), worker.as_ref());
                self.finished_unit(plan, *unit, *wall_secs, outcome, note.as_deref());
            }
            Event::Skipped { unit, cause } => {
                for &si in &plan.units[*unit].steps {
                    self.finished += 1;
                    let s = &plan.steps[si];
                    self.say(
                        &format!(
                            "{} {} skipped ({cause})",
                            crate::base::ui::counter(self.finished, self.total),
                            s.id.labelled()
                        ),
                        true,
                    );
                }
            }
        }
    }

    /// One line per step of a finished unit (shown as `shows` says), and under a failed
    /// one its cause; `note` under its first step.
    fn finished_unit(
        &mut self,
        plan: &Plan,
        unit: usize,
        wall_secs: f64,
        outcome: &UnitOutcome,
        note: Option<&str>,
    ) {
        let (word, secs) = self.outcome_word(outcome, wall_secs);
        let fails = matches!(outcome, UnitOutcome::Failed { .. } | UnitOutcome::Infra(_));
        let hit = matches!(outcome, UnitOutcome::Hit { .. });
        for (n, &si) in plan.units[unit].steps.iter().enumerate() {
            let s = &plan.steps[si];
            self.finished += 1;
            let noted = n == 0 && note.is_some();
            if !fails && !self.shows(noted, hit) {
                if let Some(pb) = &self.bar {
                    pb.inc(1);
                }
                continue;
            }
            let line = format!(
                "{} {} {} {word}",
                crate::base::ui::counter(self.finished, self.total),
                s.id.labelled(),
                short_duration(crate::base::units::secs(secs)),
            );
            let line = match (note, n) {
                (Some(note), 0) => format!("{line}{note}"),
                _ => line,
            };
            match outcome {
                UnitOutcome::Failed { cause, log } => {
                    let mut text = format!("{line}\n  {cause}");
                    // The output once per unit, under its first step.
                    if n == 0 {
                        text.push_str(&self.failure_detail(
                            plan,
                            &s.id.labelled(),
                            &cause.to_string(),
                            log,
                        ));
                    }
                    text.push_str(&format!("\n  log: {}", log.display()));
                    self.say(&text, true);
                }
                UnitOutcome::Infra(e) => self.say(&format!("{line}\n  {e:#}"), true),
                _ => self.say(&line, noted),
            }
        }
    }

    /// What a step line says of its outcome, and the time it shows.
    fn outcome_word(&self, outcome: &UnitOutcome, wall_secs: f64) -> (String, f64) {
        match outcome {
            UnitOutcome::Built { secs, sent: 0, .. } => ("built".to_string(), *secs),
            UnitOutcome::Built { secs, sent, .. } => {
                (format!("built, {} up", short_size(*sent)), *secs)
            }
            UnitOutcome::Hit { .. } => ("hit".to_string(), 0.0),
            UnitOutcome::Downloaded { secs, bytes, .. } => {
                (format!("remote-hit {}", short_size(*bytes)), *secs)
            }
            _ => (self.ui.red("FAILED"), wall_secs),
        }
    }

    /// The tail of a failed step's output, and under GitHub Actions its annotations and
    /// the whole log folded in a group.
    fn failure_detail(
        &self,
        plan: &Plan,
        title: &str,
        cause: &str,
        log: &std::path::Path,
    ) -> String {
        let text = crate::base::proc::log_tail(log, GROUP_BYTES);
        let whole = std::fs::metadata(log).map_or(true, |m| m.len() <= GROUP_BYTES as u64);
        // A whole log starts with the `$ command` line scenerun wrote; the output follows.
        let output: Vec<&str> = text.lines().skip(usize::from(whole)).collect();
        let mut out = String::new();
        let from = output.len().saturating_sub(TAIL_LINES);
        if from > 0 || !whole {
            out.push_str("\n  | … (earlier lines are in the log)");
        }
        for l in &output[from..] {
            out.push_str(&format!("\n  | {l}"));
        }
        if self.ui.github {
            let diags = diagnostics::parse(&output.join("\n"), MAX_ANNOTATIONS);
            // Workflow commands go to stdout, where the runner reads them.
            let mut cmds = String::new();
            if from > 0 || !whole {
                cmds.push_str(&format!(
                    "::group::{title}: {}\n{text}\n::endgroup::\n",
                    if whole { "full log" } else { "end of the log" }
                ));
            }
            for d in &diags {
                cmds.push_str(&diagnostics::annotation(d, &plan.manifest.dir, title));
                cmds.push('\n');
            }
            if diags.is_empty() {
                cmds.push_str(&diagnostics::plain_error(
                    &format!("scenerun: {title} failed"),
                    cause,
                ));
                cmds.push('\n');
            }
            if let Some(pb) = &self.bar {
                pb.suspend(|| self.ui.out(&cmds));
            } else {
                self.ui.out(&cmds);
            }
        }
        out
    }

    pub fn finish(&mut self) {
        if let Some(pb) = self.bar.take() {
            self.ui.bar.set(None);
            pb.finish_and_clear();
        }
    }
}

impl Shown for Reporter<'_> {
    fn start(&mut self, plan: &Plan) {
        Reporter::start(self, plan);
    }

    fn event(&mut self, plan: &Plan, ev: &Event) {
        self.on(plan, ev);
    }

    fn stop(&mut self) {
        self.finish();
    }

    fn notice(&mut self, n: Notice) {
        super::notice::say(self.ui, &n);
    }
}

/// The notes said once per unit, under its first step: an input that changed while it
/// ran, and what there is to say about its worker.
fn unit_note(input_changed: Option<&str>, worker: Option<&WorkerNote>) -> Option<String> {
    let changed = input_changed.map(|input| {
        format!(
            "\n  note: input changed during the step ({input}): not published; ran it again with a recomputed key"
        )
    });
    match (changed, worker) {
        (None, None) => None,
        (changed, worker) => Some(format!(
            "{}{}",
            changed.unwrap_or_default(),
            worker
                .map(|w| format!("\n  note: {}", worker_note(w)))
                .unwrap_or_default()
        )),
    }
}

/// What a finished unit says about its worker.
fn worker_note(w: &WorkerNote) -> String {
    match w {
        WorkerNote::CouldNotStart { worker, why } => {
            format!("worker {worker} could not start ({why}): its steps run one process each")
        }
        WorkerNote::Replaced { worker, why } => {
            format!("worker {worker} replaced after the step: {why}")
        }
        WorkerNote::Stopped { worker, why } => {
            format!("worker {worker} stopped ({why}): its steps run one process each")
        }
    }
}

/// The failed scenes and the final line.
pub fn print_summary(s: &Summary, ui: &Ui) {
    for failed in &s.failed_scenes {
        let scene = &failed.scene;
        ui.always(&format!("{} scene {scene}: {failed}", ui.red("failed:")));
    }
    let shared = if s.units < s.built + s.hits + s.failed + s.skipped {
        format!(
            "; {} unique keys ({} built, {} hit)",
            s.units, s.units_built, s.units_hit
        )
    } else {
        String::new()
    };
    ui.always(&format!(
        "warm: {} built, {} hit, {} failed{} in {:.1}s{}{shared}; hits saved ~{:.1}s of build time",
        s.built,
        s.hits,
        s.failed,
        if s.skipped > 0 {
            format!(", {} skipped", s.skipped)
        } else {
            String::new()
        },
        s.wall_secs,
        match s.built_secs {
            b if b > 0.0 => format!(" ({b:.1}s of build time)"),
            _ => String::new(),
        },
        s.saved_secs
    ));
    if let Some(t) = &s.remote {
        ui.always(&format!("remote cache: {}", t.line()));
    }
}

#[cfg(test)]
#[path = "warm_tests.rs"]
mod tests;
