//! Reports CI reads (docs/reports.md): `report.json` (versioned), `junit.xml` (one
//! testcase per scene, warm failures included), `logs/`, and under GitHub Actions
//! `::error` annotations plus a Markdown table in `$GITHUB_STEP_SUMMARY`.

pub mod diagnostics;
pub mod list;
pub mod live;
pub mod not_warm;
pub mod notice;
pub mod plan_view;
pub mod trace;
pub mod warm;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::base::ui::Ui;
use crate::base::verdict::{summary_line, Outcome};
use crate::device::report::{Cause, NodeReport, Report, Sink};
use crate::device::{SceneOutcome, SceneResult};

/// Lines of a failed scene's output shown under it in the summary table and its
/// annotation.
const CAUSE_LINES: usize = 10;

/// A failed scene's verdict and the last lines of its output.
fn cause(s: &SceneResult) -> Cause {
    Cause::of(s.message.as_deref(), s.log_tail.as_deref(), CAUSE_LINES)
}

/// The step summary's one-line note: the verdict, and for a failure the output's last
/// line (the error, usually).
fn note(s: &SceneResult) -> String {
    let c = cause(s);
    match (s.outcome.passed(), c.last.last()) {
        (false, Some(last)) => format!("{}: {last}", c.verdict),
        _ => c.verdict,
    }
}

/// Where a device phase's report goes: `dir`, and the terminal `ui`. Everything is
/// built from the one report in memory: report.json, junit.xml, the GitHub outputs, the
/// device part of the trace, the table.
pub struct Writer<'a> {
    pub dir: PathBuf,
    pub ui: &'a Ui,
    /// When the device phase started (Unix seconds): the trace's start when the report
    /// has no lock timings.
    pub started: f64,
}

impl Sink for Writer<'_> {
    fn write(&self, report: &Report) -> Result<()> {
        report.write(&self.dir, self.ui.github)?;
        if let Err(e) = trace::write_device(&self.dir, report, self.started, self.ui.github) {
            self.ui
                .info(&format!("warning: cannot write the trace: {e}"));
        }
        Ok(())
    }

    fn show(&self, report: &Report) {
        self.ui.out(&report.table(self.ui));
    }
}

/// report.json: the report, and the verdict of every test node its scenes name
/// (schemas/report.schema.json is generated from this type).
#[derive(serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ReportFile<'a> {
    #[serde(flatten)]
    pub report: &'a Report,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeReport>,
}

impl Report {
    /// Write report.json and junit.xml into `dir`, and the GitHub outputs when asked.
    pub fn write(&self, dir: &Path, github: bool) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let full = ReportFile {
            report: self,
            nodes: self.nodes(),
        };
        let json = serde_json::to_vec_pretty(&full).expect("report serializes");
        crate::base::fsutil::write_atomic(&dir.join("report.json"), &json)
            .with_context(|| format!("writing {}", dir.join("report.json").display()))?;
        crate::base::fsutil::write_atomic(&dir.join("junit.xml"), self.junit().as_bytes())
            .with_context(|| format!("writing {}", dir.join("junit.xml").display()))?;
        if github {
            self.github();
        }
        Ok(())
    }

    pub fn junit(&self) -> String {
        use quick_junit::{TestCase, TestSuite};
        let mut report = quick_junit::Report::new("scenerun");
        let mut suite = TestSuite::new("scenes");
        for row in &self.scenes {
            let s = &row.result;
            let status = junit_status(s);
            let mut case = TestCase::new(s.name.as_str(), status);
            // A selection's scenes under their own class (docs/reports.md).
            match &row.selection {
                Some(sel) => case.set_classname(format!("scenerun.{sel}")),
                None => case.set_classname("scenerun"),
            };
            // The selection, test node and case it ran, so a junit reader can match
            // pytest's own.
            let named = [
                ("selection", &row.selection),
                ("nodeid", &row.nodeid),
                ("case", &row.case),
            ];
            for (name, value) in named {
                if let Some(v) = value {
                    case.add_property(quick_junit::Property::new(name, v.as_str()));
                }
            }
            case.set_time(crate::base::units::secs(s.duration_secs));
            if !s.outcome.passed() {
                if let Some(t) = s.log_tail.as_deref().filter(|t| !t.trim().is_empty()) {
                    case.set_system_out(t);
                }
            }
            suite.add_test_case(case);
        }
        report.add_test_suite(suite);
        report.to_string().unwrap_or_default()
    }

    /// Under GitHub Actions: an `::error` annotation per failed scene (and for the
    /// run's error) on stdout, and the Markdown table appended to
    /// `$GITHUB_STEP_SUMMARY`.
    fn github(&self) {
        for line in self.annotations() {
            println!("{line}");
        }
        let Ok(path) = std::env::var("GITHUB_STEP_SUMMARY") else {
            return;
        };
        if let Ok(mut f) = std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(self.step_summary().as_bytes());
        }
    }

    /// The `::error` annotations: one per failed scene, and one for the run's error.
    fn annotations(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for s in self
            .scenes
            .iter()
            .map(|s| &s.result)
            .filter(|s| {
                s.outcome.tally() == Outcome::Failed
                    || s.outcome == SceneOutcome::Test(Outcome::Error)
            })
            .filter(|s| s.outcome != SceneOutcome::NotRun)
        {
            // A message may come from a lane or a step: escaped as for the terminal. The
            // verdict alone ("exited with status 1") says nothing: the output's last
            // lines, where the error is, come with it.
            let text = match s.message {
                Some(_) => cause(s).text(),
                None => "failed".to_string(),
            };
            lines.push(format!(
                "::error title={}::{}",
                gh_escape_property(&format!("scenerun: {} {}", s.name, s.outcome.word())),
                gh_escape_data(&crate::base::ui::escape(&text))
            ));
        }
        if let Some(e) = &self.error {
            lines.push(format!(
                "::error title=scenerun::{}",
                gh_escape_data(&crate::base::ui::escape(e))
            ));
        }
        lines
    }

    /// The step summary: a Markdown table of the scenes, the counts, and the lock's.
    fn step_summary(&self) -> String {
        let mut md = String::from(
            "### scenerun\n\n| scene | result | devices | time | note |\n|---|---|---|---|---|\n",
        );
        for s in self.scenes.iter().map(|s| &s.result) {
            md.push_str(&format!(
                "| {} | {} {} | {} | {:.2}s | {} |\n",
                s.name,
                icon(s.outcome),
                s.outcome.word(),
                s.devices.join(","),
                s.duration_secs,
                note(s).replace('|', "\\|")
            ));
        }
        md.push_str(&format!("\n{}\n", self.counts_lines().join("  \n")));
        if let (Some(l), Some(d)) = (&self.lock, &self.device) {
            md.push_str(&format!(
                "\nlock: queued {:.1}s, held {:.1}s, device busy {:.1}s, efficiency {:.0}%{}\n",
                l.queue_wait_secs.unwrap_or(0.0),
                l.held_secs.unwrap_or(0.0),
                d.busy_secs,
                d.efficiency * 100.0,
                if d.lanes.is_empty() {
                    String::new()
                } else {
                    format!(" (lane start-up {:.1}s beside it)", d.startup_secs)
                }
            ));
        }
        md
    }

    /// The summary table for stdout.
    pub fn table(&self, ui: &Ui) -> String {
        let w = self
            .scenes
            .iter()
            .map(|s| s.result.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let mut out = format!(
            "{:<w$}  {:<15} {:>8}  {}\n",
            "scene", "result", "time", "devices"
        );
        for s in self.scenes.iter().map(|s| &s.result) {
            let word = format!("{:<15}", s.outcome.word());
            let word = match s.outcome.tally() {
                Outcome::Passed | Outcome::Xpassed => ui.green(&word),
                Outcome::Skipped | Outcome::Xfailed | Outcome::NotReached => ui.yellow(&word),
                Outcome::Failed | Outcome::Error => ui.red(&word),
            };
            out.push_str(&format!(
                "{:<w$}  {word} {:>7.2}s  {}\n",
                s.name,
                s.duration_secs,
                s.devices.join(",")
            ));
            let explain =
                !s.outcome.passed() || s.outcome == SceneOutcome::Test(Outcome::NotReached);
            if s.message.is_some() && explain {
                let c = cause(s);
                out.push_str(&format!("{:<w$}    {}\n", "", c.verdict));
                for line in &c.last {
                    out.push_str(&format!("{:<w$}    | {line}\n", ""));
                }
                if let Some(log) = &s.log {
                    out.push_str(&format!("{:<w$}    log: {}\n", "", log.display()));
                }
            }
        }
        for line in self.counts_lines() {
            out.push_str(&line);
            out.push('\n');
        }
        if let Some(d) = &self.device {
            if !d.lanes.is_empty() {
                let pre: Vec<f64> = d
                    .lanes
                    .iter()
                    .filter_map(|l| l.startup_before_lock_secs)
                    .collect();
                out.push_str(&format!(
                    "lanes: {} process{}, start-up {:.2}s in all (not counted as busy){}\n",
                    d.lanes.len(),
                    if d.lanes.len() == 1 { "" } else { "es" },
                    d.startup_secs,
                    match pre.len() {
                        0 => String::new(),
                        n => format!(
                            "; {n} started before the lock, with {:.2}s of start-up there",
                            pre.iter().sum::<f64>()
                        ),
                    }
                ));
            }
            if let Some(t) = &d.compiles {
                out.push_str(&format!("{t}\n"));
            }
            if !d.quarantined.is_empty() {
                out.push_str(&format!(
                    "quarantined devices: {}\n",
                    d.quarantined.join(",")
                ));
            }
        }
        if let Some(d) = &self.device {
            match &self.lock {
                Some(l) => out.push_str(&format!(
                    "lock: queued {:.2}s, held {:.2}s on {}; device busy {:.2}s; device-seconds used {:.2} of {:.2} held; efficiency {:.0}%\n",
                    l.queue_wait_secs.unwrap_or(0.0),
                    l.held_secs.unwrap_or(0.0),
                    crate::base::units::count(d.granted.len(), "id"),
                    d.busy_secs,
                    d.device_secs_used,
                    d.device_secs_held,
                    d.efficiency * 100.0
                )),
                None => out.push_str(&format!(
                    "no lock: devices {}; busy {:.2}s of {:.2}s; efficiency {:.0}%\n",
                    d.granted.join(","),
                    d.busy_secs,
                    d.inner_secs,
                    d.efficiency * 100.0
                )),
            }
        }
        out
    }
}

impl Report {
    /// The summary's count lines: the scenes ("6 passed, 4 skipped, 1 failed", flaky
    /// ones noted), then, when scenes name test nodes, the nodes the same way, which is
    /// what the suite's own pytest run would count.
    pub fn counts_lines(&self) -> Vec<String> {
        let flaky = self
            .scenes
            .iter()
            .filter(|s| s.result.outcome == SceneOutcome::Flaky)
            .count();
        let mut scenes = summary_line(self.scenes.iter().map(|s| s.result.outcome.tally()));
        if flaky > 0 {
            scenes = scenes.replacen(" passed", &format!(" passed ({flaky} flaky)"), 1);
        }
        let mut lines = vec![scenes];
        let nodes = self.nodes();
        if !nodes.is_empty() {
            lines.push(format!(
                "{}: {}",
                crate::base::units::count(nodes.len(), "test node"),
                summary_line(nodes.iter().map(|n| n.outcome.tally()))
            ));
        }
        lines
    }
}

/// A scene's mark in the step summary: a pass, a skip of some kind, or a failure.
fn icon(o: SceneOutcome) -> &'static str {
    match o.tally() {
        Outcome::Passed | Outcome::Xpassed => "✅",
        Outcome::Skipped | Outcome::Xfailed | Outcome::NotReached => "⏭️",
        Outcome::Failed | Outcome::Error => "❌",
    }
}

/// A scene's junit status: failures carry the message and the output's tail; a flaky
/// scene passes with one `<flakyFailure>` per failed attempt.
fn junit_status(s: &SceneResult) -> quick_junit::TestCaseStatus {
    use crate::device::events::AttemptOutcome;
    use quick_junit::{NonSuccessKind, TestCaseStatus, TestRerun};
    if let Some(infra) = s.infra {
        // Cut short or never run because of infrastructure: an error whose type is the
        // reason, never only a skip (a test-report action must show it).
        let mut st = TestCaseStatus::non_success(NonSuccessKind::Error);
        st.set_message(format!(
            "{}: {}",
            infra.name(),
            s.message.clone().unwrap_or_else(|| s.outcome.word().into())
        ));
        st.set_type(infra.name());
        if let Some(t) = &s.log_tail {
            st.set_description(t.as_str());
        }
        return st;
    }
    match s.outcome {
        SceneOutcome::Test(Outcome::Passed)
        | SceneOutcome::Flaky
        | SceneOutcome::Test(Outcome::Xpassed) => {
            let mut st = TestCaseStatus::success();
            for a in s.attempts.iter().filter(|a| a.outcome.scene_failed()) {
                let mut r = TestRerun::new(NonSuccessKind::Failure);
                r.set_type(a.outcome.word());
                r.set_message(a.message.clone().unwrap_or_default());
                if let Some(t) = &a.output_tail {
                    r.set_description(t.as_str());
                    r.set_system_out(t.as_str());
                }
                st.add_rerun(r);
            }
            st
        }
        SceneOutcome::Test(Outcome::Skipped)
        | SceneOutcome::Test(Outcome::Xfailed)
        | SceneOutcome::Test(Outcome::NotReached) => {
            // As pytest writes them: a skip, an expected failure and a case its node did
            // not reach are <skipped>, never a pass or a failure.
            let mut st = TestCaseStatus::skipped();
            let word = s.outcome.word();
            st.set_type(word.clone());
            st.set_message(match &s.message {
                Some(m) if s.outcome == SceneOutcome::Test(Outcome::Skipped) => m.clone(),
                Some(m) => format!("{word}: {m}"),
                None => word.to_string(),
            });
            st
        }
        other => {
            let kind = if matches!(
                other,
                SceneOutcome::FailedInWarm | SceneOutcome::Interrupted | SceneOutcome::NotRun
            ) || s
                .attempts
                .last()
                .is_some_and(|a| a.outcome == AttemptOutcome::DeviceFault)
            {
                NonSuccessKind::Error
            } else {
                NonSuccessKind::Failure
            };
            let mut st = TestCaseStatus::non_success(kind);
            st.set_message(format!(
                "{}: {}",
                other.word(),
                s.message.clone().unwrap_or_default()
            ));
            st.set_type(other.word());
            let body = [s.message.as_deref(), s.log_tail.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("\n");
            if !body.is_empty() {
                st.set_description(body);
            }
            st
        }
    }
}

use diagnostics::{escape_data as gh_escape_data, escape_property as gh_escape_property};

#[cfg(test)]
#[path = "summary_tests.rs"]
mod summary_tests;
