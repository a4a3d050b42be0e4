//! report.json as a device phase ends with it (docs/reports.md): every selected scene's
//! outcome, the lock's timings, the devices' use. It reads back as it was written (the
//! trace does). The `report` module renders it
//! (report.json, junit.xml, the CI outputs, the table) through a [`Sink`] the command
//! hands in; a phase renders nothing itself.

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{Outcome, SceneOutcome, SceneResult};
use crate::base::stepid::Kind;

/// Where a device phase's report goes.
pub trait Sink {
    /// Write report.json, junit.xml and the CI outputs.
    fn write(&self, report: &Report) -> Result<()>;
    /// Show the summary table on stdout.
    fn show(&self, report: &Report);
}

pub const REPORT_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct StepReport {
    pub kind: Kind,
    pub name: String,
    pub key: String,
    /// `hit`, `miss`, `stale`, ... (`plan::Status::word`).
    pub status: String,
}

/// One scene's row of report.json: its result — the one record of its outcome, as the
/// inner run wrote it or as it stands without a run — and what the plan knew of it
/// (its test node and case, its warm steps), joined to it by index.
#[derive(Debug, Clone, Deserialize)]
#[serde(from = "json::Scene")]
pub struct SceneReport {
    pub result: SceneResult,
    /// The manifest's selection it belongs to (docs/manifest.md, "Selections").
    pub selection: Option<String>,
    /// The test node it ran (a pytest node id) and its case, when the manifest says.
    pub nodeid: Option<String>,
    pub case: Option<String>,
    /// The files it wrote into its outputs directory, relative to the report dir.
    pub outputs: Vec<String>,
    pub steps: Vec<StepReport>,
}

/// A scene of report.json as it is written (docs/reports.md): one flat object, its
/// fields in the documented order.
mod json {
    use std::path::{Path, PathBuf};

    use serde::{Deserialize, Serialize};

    use super::{SceneReport, StepReport};
    use crate::device::events::Attempt;
    use crate::device::{Infra, SceneOutcome, SceneResult};

    #[derive(Serialize)]
    pub(super) struct SceneRef<'a> {
        name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        selection: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        nodeid: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        case: Option<&'a str>,
        outcome: SceneOutcome,
        message: Option<&'a str>,
        devices: &'a [String],
        start_secs: f64,
        duration_secs: f64,
        log: Option<&'a Path>,
        log_tail: Option<&'a str>,
        #[serde(skip_serializing_if = "<[String]>::is_empty")]
        outputs: &'a [String],
        lane: Option<&'a str>,
        attempts: &'a [Attempt],
        steps: &'a [StepReport],
        infra: Option<Infra>,
    }

    impl<'a> From<&'a SceneReport> for SceneRef<'a> {
        fn from(s: &'a SceneReport) -> SceneRef<'a> {
            let r = &s.result;
            SceneRef {
                name: &r.name,
                selection: s.selection.as_deref(),
                nodeid: s.nodeid.as_deref(),
                case: s.case.as_deref(),
                outcome: r.outcome,
                message: r.message.as_deref(),
                devices: &r.devices,
                start_secs: r.start_secs,
                duration_secs: r.duration_secs,
                log: r.log.as_deref(),
                log_tail: r.log_tail.as_deref(),
                outputs: &s.outputs,
                lane: r.lane.as_deref(),
                attempts: &r.attempts,
                steps: &s.steps,
                infra: r.infra,
            }
        }
    }

    #[derive(Deserialize)]
    #[cfg_attr(test, derive(schemars::JsonSchema))]
    #[cfg_attr(test, schemars(rename = "SceneReport"))]
    pub(super) struct Scene {
        name: String,
        #[serde(default)]
        selection: Option<String>,
        #[serde(default)]
        nodeid: Option<String>,
        #[serde(default)]
        case: Option<String>,
        outcome: SceneOutcome,
        message: Option<String>,
        devices: Vec<String>,
        start_secs: f64,
        duration_secs: f64,
        log: Option<PathBuf>,
        log_tail: Option<String>,
        #[serde(default)]
        outputs: Vec<String>,
        lane: Option<String>,
        attempts: Vec<Attempt>,
        steps: Vec<StepReport>,
        infra: Option<Infra>,
    }

    impl From<Scene> for SceneReport {
        fn from(s: Scene) -> SceneReport {
            SceneReport {
                result: SceneResult {
                    name: s.name,
                    outcome: s.outcome,
                    devices: s.devices,
                    start_secs: s.start_secs,
                    duration_secs: s.duration_secs,
                    message: s.message,
                    log: s.log,
                    log_tail: s.log_tail,
                    infra: s.infra,
                    attempts: s.attempts,
                    lane: s.lane,
                },
                selection: s.selection,
                nodeid: s.nodeid,
                case: s.case,
                outputs: s.outputs,
                steps: s.steps,
            }
        }
    }
}

/// Written as `json::SceneRef`, read as `json::Scene`: the schema is the one both share.
#[cfg(test)]
impl schemars::JsonSchema for SceneReport {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        json::Scene::schema_name()
    }

    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        json::Scene::json_schema(g)
    }
}

impl Serialize for SceneReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        json::SceneRef::from(self).serialize(s)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct LockReport {
    pub command: String,
    pub exit_code: Option<i32>,
    /// Unix seconds.
    pub called_at: f64,
    pub inner_started_at: Option<f64>,
    pub inner_ended_at: Option<f64>,
    pub returned_at: f64,
    pub queue_wait_secs: Option<f64>,
    pub held_secs: Option<f64>,
    pub output_tail: Option<String>,
    /// When a SIGINT/SIGTERM was forwarded to the lock command (Unix seconds).
    pub signal_forwarded_at: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct DeviceReport {
    pub granted: Vec<String>,
    pub inner_secs: f64,
    pub busy_secs: f64,
    pub device_secs_used: f64,
    pub device_secs_held: f64,
    /// busy ÷ held; busy counts scene time only.
    pub efficiency: f64,
    /// Lane process start-ups, summed (beside busy time, not in it).
    pub startup_secs: f64,
    /// Ids found faulty during the run.
    pub quarantined: Vec<String>,
    /// One record per lane process.
    pub lanes: Vec<super::events::LaneRecord>,
    /// The compiles the tests started, through `compile_cache:` (none: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiles: Option<crate::compiled::Tally>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Report {
    pub version: u32,
    pub scenerun: String,
    pub manifest: String,
    /// The manifest's profile in use (`--profile`), when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    pub exit_code: i32,
    pub error: Option<String>,
    pub scenes: Vec<SceneReport>,
    pub lock: Option<LockReport>,
    pub device: Option<DeviceReport>,
}

/// One test node's verdict, from the scenes that ran it (docs/reports.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct NodeReport {
    /// The selection it ran in: a node in two selections is two nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<String>,
    pub nodeid: String,
    /// The outcome of the scene that decided it.
    pub outcome: SceneOutcome,
    /// pytest's word for it: what the suite's own run would say of the node.
    pub pytest: String,
    /// Its scenes, in order.
    pub scenes: Vec<String>,
}

/// The verdict of a node whose scenes (its cases, in order) ended with `outcomes`: as
/// the node's own runner goes case by case and stops at the first that does not pass,
/// the first such outcome is the node's; else xpassed when one xpassed, else passed.
pub fn node_outcome(outcomes: impl Iterator<Item = SceneOutcome>) -> SceneOutcome {
    let mut verdict = SceneOutcome::Test(Outcome::Passed);
    for o in outcomes {
        match o {
            SceneOutcome::Test(Outcome::Passed) | SceneOutcome::Flaky => {}
            SceneOutcome::Test(Outcome::Xpassed) => verdict = SceneOutcome::Test(Outcome::Xpassed),
            other => return other,
        }
    }
    verdict
}

impl Report {
    /// Every test node the scenes name (per selection), in first-scene order, with its
    /// verdict.
    pub fn nodes(&self) -> Vec<NodeReport> {
        type Node<'a> = (Option<&'a str>, &'a str);
        let mut order: Vec<Node> = Vec::new();
        let mut members: std::collections::HashMap<Node, Vec<&SceneReport>> =
            std::collections::HashMap::new();
        for s in &self.scenes {
            let Some(n) = s.nodeid.as_deref() else {
                continue;
            };
            let key = (s.selection.as_deref(), n);
            let list = members.entry(key).or_default();
            if list.is_empty() {
                order.push(key);
            }
            list.push(s);
        }
        order
            .into_iter()
            .map(|key| {
                let scenes = &members[&key];
                let outcome = node_outcome(scenes.iter().map(|s| s.result.outcome));
                NodeReport {
                    selection: key.0.map(str::to_string),
                    nodeid: key.1.to_string(),
                    outcome,
                    pytest: outcome.tally().as_str().to_string(),
                    scenes: scenes.iter().map(|s| s.result.name.clone()).collect(),
                }
            })
            .collect()
    }

    pub fn new(manifest: &Path) -> Report {
        Report {
            version: REPORT_VERSION,
            scenerun: env!("CARGO_PKG_VERSION").to_string(),
            manifest: manifest.display().to_string(),
            profile: None,
            exit_code: 0,
            error: None,
            scenes: Vec::new(),
            lock: None,
            device: None,
        }
    }
}

/// What a failed scene's reader needs first: its verdict and the last lines of what it
/// printed, where the error is (the summary table, the live line and the GitHub
/// annotations all show this, so a long output never pushes the cause out of view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The message's first line ("exited with status 1", "crashed the lane process ...").
    pub verdict: String,
    /// The last lines of the output: the log tail's lines, then the message's further
    /// lines; without scenerun's `$ command` echo.
    pub last: Vec<String>,
}

impl Cause {
    pub fn of(message: Option<&str>, tail: Option<&str>, lines: usize) -> Cause {
        let mut m = message.unwrap_or("").lines();
        let verdict = m.next().unwrap_or("").to_string();
        let rest = without_echo(m.collect());
        // The process's output first, then the message's own lines (a crash's message
        // ends with that output; a test's, with its assertion).
        let tail = tail.map(|t| {
            t.lines()
                .filter(|l| !rest.contains(l) && *l != verdict)
                .collect()
        });
        let mut out = without_echo(tail.unwrap_or_default());
        out.extend(rest);
        while out.last().is_some_and(|l| l.trim().is_empty()) {
            out.pop();
        }
        let from = out.len().saturating_sub(lines);
        Cause {
            verdict,
            last: out[from..].iter().map(|l| l.to_string()).collect(),
        }
    }

    /// Verdict and last lines, one a line (for an annotation).
    pub fn text(&self) -> String {
        std::iter::once(self.verdict.as_str())
            .chain(self.last.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A log starts with the command scenerun ran; it is not what went wrong.
fn without_echo(mut lines: Vec<&str>) -> Vec<&str> {
    if lines.first().is_some_and(|l| l.starts_with("$ ")) {
        lines.remove(0);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_ends_as_its_first_case_that_did_not_pass() {
        use crate::base::verdict::Outcome::*;
        use SceneOutcome::*;
        let v = |o: &[SceneOutcome]| node_outcome(o.iter().copied());
        assert_eq!(v(&[Test(Passed), Flaky, Test(Passed)]), Test(Passed));
        assert_eq!(
            v(&[Test(Passed), Test(Failed), Test(NotReached)]),
            Test(Failed)
        );
        assert_eq!(v(&[Test(Skipped), Test(NotReached)]), Test(Skipped));
        assert_eq!(v(&[Test(Passed), Test(Xpassed)]), Test(Xpassed));
        assert_eq!(v(&[Test(Passed), TimedOut, Test(Failed)]), TimedOut);
        assert_eq!(TimedOut.tally().as_str(), "failed");
        assert_eq!(Test(Outcome::Error).tally().as_str(), "error");
    }

    #[test]
    fn a_scene_row_is_one_flat_object_in_the_documented_order_and_reads_back() {
        let row = SceneReport {
            result: SceneResult {
                name: "vector_ops".into(),
                outcome: SceneOutcome::Test(Outcome::Failed),
                devices: vec!["4".into()],
                start_secs: 0.5,
                duration_secs: 0.47,
                message: Some("exited with status 1".into()),
                log: Some("/r/logs/vector_ops/device.log".into()),
                log_tail: Some("mismatch".into()),
                infra: None,
                attempts: Vec::new(),
                lane: None,
            },
            selection: None,
            nodeid: Some("tests/test_ops.py::TestOps::test_run".into()),
            case: None,
            outputs: Vec::new(),
            steps: vec![StepReport {
                kind: Kind::Kernel,
                name: "vadd".into(),
                key: "k".into(),
                status: "hit".into(),
            }],
        };
        let v = serde_json::to_value(&row).unwrap();
        let text = serde_json::to_string(&row).unwrap();
        let keys: Vec<&str> = [
            "name",
            "nodeid",
            "outcome",
            "message",
            "devices",
            "start_secs",
            "duration_secs",
            "log",
            "log_tail",
            "lane",
            "attempts",
            "steps",
            "infra",
        ]
        .into();
        let at: Vec<usize> = keys
            .iter()
            .map(|k| text.find(&format!("\"{k}\":")).expect(k))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{text}");
        assert!(
            v.get("case").is_none(),
            "left out when the manifest gives none"
        );
        assert_eq!(v["steps"][0]["status"], "hit");
        let back: SceneReport = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), v);
    }

    #[test]
    fn the_cause_is_the_last_lines_without_the_command_echo() {
        let noise: Vec<String> = (0..30).map(|i| format!("line {i}")).collect();
        let msg = format!(
            "crashed the lane process (it exited with status 137)\n$ ./run.sh\n{}\nfatal error in scene a",
            noise.join("\n")
        );
        let c = Cause::of(Some(&msg), None, 5);
        assert_eq!(
            c.verdict,
            "crashed the lane process (it exited with status 137)"
        );
        assert_eq!(c.last.len(), 5);
        assert_eq!(c.last.last().unwrap(), "fatal error in scene a");

        let c = Cause::of(
            Some("exited with status 1"),
            Some("$ ./device.sh k f g 0\nstarting\nmismatch: 41 != 42\n"),
            5,
        );
        assert_eq!(c.last, ["starting", "mismatch: 41 != 42"]);
        assert_eq!(
            c.text(),
            "exited with status 1\nstarting\nmismatch: 41 != 42"
        );
    }
}
