//! Reports CI reads (docs/reports.md): `report.json` (versioned), `junit.xml` (one
//! testcase per scene, warm failures included), `logs/`, and under GitHub Actions
//! `::error` annotations plus a Markdown table in `$GITHUB_STEP_SUMMARY`.

pub mod list;
pub mod plan_view;
pub mod trace;

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::device::report::{Cause, Report, SceneReport, Sink};
use crate::device::SceneOutcome;
use crate::ui::Ui;

/// Lines of a failed scene's output shown under it in the summary table and its
/// annotation.
const CAUSE_LINES: usize = 10;

/// A failed scene's verdict and the last lines of its output.
fn cause(s: &SceneReport) -> Cause {
    Cause::of(s.message.as_deref(), s.log_tail.as_deref(), CAUSE_LINES)
}

/// The step summary's one-line note: the verdict, and for a failure the output's last
/// line (the error, usually).
fn note(s: &SceneReport) -> String {
    let c = cause(s);
    match (s.outcome.passed(), c.last.last()) {
        (false, Some(last)) => format!("{}: {last}", c.verdict),
        _ => c.verdict,
    }
}

/// Where a device phase's report goes: `dir`, and the terminal `ui`.
pub struct Writer<'a> {
    pub dir: PathBuf,
    pub ui: &'a Ui,
}

impl Sink for Writer<'_> {
    fn write(&self, report: &Report) -> Result<()> {
        report.write(&self.dir, self.ui.github)
    }

    fn show(&self, report: &Report) {
        self.ui.out(&report.table(self.ui));
    }
}

impl Report {
    /// Write report.json and junit.xml into `dir`, and the GitHub outputs when asked.
    pub fn write(&self, dir: &Path, github: bool) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = serde_json::to_vec_pretty(self).expect("report serializes");
        crate::fsutil::write_atomic(&dir.join("report.json"), &json)
            .with_context(|| format!("writing {}", dir.join("report.json").display()))?;
        crate::fsutil::write_atomic(&dir.join("junit.xml"), self.junit().as_bytes())
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
        for s in &self.scenes {
            let status = junit_status(s);
            let mut case = TestCase::new(s.name.as_str(), status);
            case.set_classname("scenerun");
            case.set_time(crate::units::secs(s.duration_secs));
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

    fn github(&self) {
        for s in self
            .scenes
            .iter()
            .filter(|s| !s.outcome.passed() && s.outcome != SceneOutcome::NotRun)
        {
            // A message may come from a lane or a step: escaped as for the terminal. The
            // verdict alone ("exited with status 1") says nothing: the output's last
            // lines, where the error is, come with it.
            let text = match s.message {
                Some(_) => cause(s).text(),
                None => "failed".to_string(),
            };
            println!(
                "::error title={}::{}",
                gh_escape_property(&format!("scenerun: {} {}", s.name, s.outcome.word())),
                gh_escape_data(&crate::ui::escape(&text))
            );
        }
        if let Some(e) = &self.error {
            println!(
                "::error title=scenerun::{}",
                gh_escape_data(&crate::ui::escape(e))
            );
        }
        let Ok(path) = std::env::var("GITHUB_STEP_SUMMARY") else {
            return;
        };
        let mut md = String::from(
            "### scenerun\n\n| scene | result | devices | time | note |\n|---|---|---|---|---|\n",
        );
        for s in &self.scenes {
            md.push_str(&format!(
                "| {} | {} {} | {} | {:.2}s | {} |\n",
                s.name,
                if s.outcome.passed() { "✅" } else { "❌" },
                s.outcome.word(),
                s.devices.join(","),
                s.duration_secs,
                note(s).replace('|', "\\|")
            ));
        }
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
        if let Ok(mut f) = std::fs::File::options()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(md.as_bytes());
        }
    }

    /// The summary table for stdout.
    pub fn table(&self, ui: &Ui) -> String {
        let w = self
            .scenes
            .iter()
            .map(|s| s.name.len())
            .max()
            .unwrap_or(5)
            .max(5);
        let mut out = format!(
            "{:<w$}  {:<15} {:>8}  {}\n",
            "scene", "result", "time", "devices"
        );
        for s in &self.scenes {
            let word = format!("{:<15}", s.outcome.word());
            let word = if s.outcome.passed() {
                ui.green(&word)
            } else {
                ui.red(&word)
            };
            out.push_str(&format!(
                "{:<w$}  {word} {:>7.2}s  {}\n",
                s.name,
                s.duration_secs,
                s.devices.join(",")
            ));
            if s.message.is_some() && !s.outcome.passed() {
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
        let passed = self.scenes.iter().filter(|s| s.outcome.passed()).count();
        let flaky = self
            .scenes
            .iter()
            .filter(|s| s.outcome == SceneOutcome::Flaky)
            .count();
        out.push_str(&format!(
            "{passed} passed{}, {} failed\n",
            if flaky > 0 {
                format!(" ({flaky} flaky)")
            } else {
                String::new()
            },
            self.scenes.len() - passed
        ));
        if let Some(d) = &self.device {
            if !d.lanes.is_empty() {
                out.push_str(&format!(
                    "lanes: {} process{}, start-up {:.2}s in all (not counted as busy)\n",
                    d.lanes.len(),
                    if d.lanes.len() == 1 { "" } else { "es" },
                    d.startup_secs
                ));
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
                    crate::units::count(d.granted.len(), "id"),
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

/// A scene's junit status: failures carry the message and the output's tail; a flaky
/// scene passes with one `<flakyFailure>` per failed attempt.
fn junit_status(s: &SceneReport) -> quick_junit::TestCaseStatus {
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
        SceneOutcome::Passed | SceneOutcome::Flaky => {
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
        SceneOutcome::Skipped => {
            let mut st = TestCaseStatus::skipped();
            if let Some(m) = &s.message {
                st.set_message(m.as_str());
            }
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

use crate::warm::diagnostics::{
    escape_data as gh_escape_data, escape_property as gh_escape_property,
};
