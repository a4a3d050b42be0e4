//! The lane results protocol (docs/lanes.md, results protocol) as types: scenerun's own
//! records are a serde enum tagged by `event`, pytest-reportlog's one tagged by
//! `$report_type` (which wins when a line has both). The protocol is described once, as
//! the JSON Schema the pytest plugin ships
//! (`python/scenerun-pytest/src/scenerun_pytest/lane_results.schema.json`); its tests
//! (protocol_tests.rs) hold these types to it. Unknown keys are ignored, and an optional
//! key of the wrong type is read as absent. Invariant: no line stops a run; a line of no
//! known kind is `Line::Garbage`, which the caller shows as a warning.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::device::events::AttemptOutcome;

/// One line of a results file.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// One of scenerun's own records.
    Event(LaneEvent),
    /// A pytest-reportlog record.
    Reportlog(Reportlog),
    /// Not a record this protocol knows, and why: ignored with a warning.
    Garbage(String),
}

/// scenerun's own records, tagged by `event`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub enum LaneEvent {
    /// Scene `scene` of the batch starts now.
    Start { scene: String },
    /// Scene `scene` ended: its verdict, and optionally how long it took and why.
    End {
        scene: String,
        outcome: Outcome,
        #[serde(default, deserialize_with = "lenient::number")]
        duration_secs: Option<f64>,
        #[serde(default, deserialize_with = "lenient::text")]
        message: Option<String>,
        /// The size of the process's output file when the scene ended, its streams
        /// flushed first: the scene's share of that output ends there (without it, it
        /// ends where the output stands when the line is read).
        #[serde(default, deserialize_with = "lenient::bytes")]
        output_bytes: Option<u64>,
        /// The failure as the process's test framework words it (its traceback and the
        /// output it captured), which it may print only later, at its end: shown under
        /// the failed scene after its share of the output.
        #[serde(default, deserialize_with = "lenient::text")]
        failure_text: Option<String>,
    },
    /// The runtime is poisoned: a fresh process on the same ids should run the rest.
    Restart {
        #[serde(default, deserialize_with = "lenient::text")]
        reason: Option<String>,
    },
    /// These ids (numbers or strings; none: all the process holds) are faulty.
    DeviceFault {
        #[serde(default, deserialize_with = "lenient::ids")]
        devices: Vec<String>,
        #[serde(default, deserialize_with = "lenient::text")]
        scene: Option<String>,
    },
    /// A process started before the lock has imported and collected and waits for its
    /// ids (docs/lanes.md); `unix_secs`: when.
    Ready {
        #[serde(default, deserialize_with = "lenient::number")]
        unix_secs: Option<f64>,
    },
}

impl LaneEvent {
    /// Why a restart was asked for (a reason that is blank or absent says nothing).
    pub fn restart_reason(reason: Option<String>) -> String {
        reason
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| "the lane process asked for it".into())
    }
}

/// An end event's `outcome`: pytest's words, and `not_reached` (docs/lanes.md); the
/// same words as a scene test's verdict.
pub use crate::base::verdict::Outcome;

impl From<Outcome> for AttemptOutcome {
    fn from(o: Outcome) -> AttemptOutcome {
        AttemptOutcome::Test(o)
    }
}

/// pytest-reportlog's records, tagged by `$report_type`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "$report_type")]
pub enum Reportlog {
    /// One phase of one test.
    TestReport(TestReport),
    /// The process got to its normal end (pytest exits 1 when a test failed).
    SessionFinish,
    /// Any other kind (SessionStart, CollectReport, ...): no result.
    #[serde(other)]
    Other,
}

/// A reportlog `TestReport`: one phase (`when`) of the test `nodeid`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct TestReport {
    pub nodeid: String,
    #[serde(default = "call", deserialize_with = "lenient::when")]
    pub when: String,
    /// `passed`, `failed` or `skipped`: the phase's own outcome, in pytest's words (a
    /// phase never reports the others).
    #[serde(deserialize_with = "phase_outcome")]
    pub outcome: Outcome,
    #[serde(default, deserialize_with = "lenient::number")]
    pub duration: Option<f64>,
    #[serde(default)]
    pub longrepr: Option<Value>,
    /// The test is marked `xfail` (the key's presence says so, whatever its value).
    #[serde(default, deserialize_with = "lenient::present")]
    pub wasxfail: bool,
}

fn phase_outcome<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Outcome, D::Error> {
    match Outcome::deserialize(d)? {
        o @ (Outcome::Passed | Outcome::Failed | Outcome::Skipped) => Ok(o),
        o => Err(serde::de::Error::custom(format!(
            "a phase's outcome is passed, failed or skipped, not {}",
            o.as_str()
        ))),
    }
}

fn call() -> String {
    "call".into()
}

impl TestReport {
    /// Its verdict as pytest words it: a failed setup or teardown is an error;
    /// `wasxfail` turns a skip into xfailed and a passed call into xpassed.
    pub fn verdict(&self) -> Outcome {
        let call = self.when == "call";
        match self.outcome {
            Outcome::Failed if !call => Outcome::Error,
            Outcome::Skipped if self.wasxfail => Outcome::Xfailed,
            Outcome::Passed if self.wasxfail && call => Outcome::Xpassed,
            phase => phase,
        }
    }

    /// Text of its `longrepr`: a string, a `[path, line, reason]` skip triple, or a
    /// mapping whose `reprcrash` says where and what.
    pub fn message(&self) -> Option<String> {
        match self.longrepr.as_ref()? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            Value::Array(a) if a.len() == 3 => a[2].as_str().map(str::to_string),
            Value::Object(o) => {
                let crash = o.get("reprcrash")?;
                let msg = crash.get("message").and_then(Value::as_str).unwrap_or("");
                let path = crash.get("path").and_then(Value::as_str);
                Some(match (path, crash.get("lineno").and_then(Value::as_u64)) {
                    (Some(p), Some(l)) => format!("{p}:{l}: {msg}"),
                    _ => msg.to_string(),
                })
            }
            other => Some(other.to_string()),
        }
    }
}

/// The optional keys, read leniently: a value of the wrong type is as if absent.
mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    /// A number, finite and not negative (durations, times): anything else is absent.
    pub fn number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
        Ok(Value::deserialize(d)?
            .as_f64()
            .filter(|n| n.is_finite() && *n >= 0.0))
    }

    /// A whole number of bytes: anything else is absent.
    pub fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        Ok(Value::deserialize(d)?.as_u64())
    }

    /// A string; an empty one is none.
    pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::String(s) if !s.is_empty() => Some(s),
            _ => None,
        })
    }

    pub fn when<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::String(s) => s,
            _ => super::call(),
        })
    }

    /// Device ids as strings or numbers; anything else is left out.
    pub fn ids<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        let Value::Array(items) = Value::deserialize(d)? else {
            return Ok(Vec::new());
        };
        Ok(items
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect())
    }

    pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| true)
    }
}

/// Read one line of a results file.
pub fn parse_line(text: &str) -> Line {
    let v: Value = match serde_json::from_str(text.trim()) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Line::Garbage("not a JSON object".into()),
        Err(e) => return Line::Garbage(format!("not JSON ({e})")),
    };
    let read = if v.get("$report_type").is_some_and(Value::is_string) {
        Reportlog::deserialize(&v).map(Line::Reportlog)
    } else {
        LaneEvent::deserialize(&v).map(Line::Event)
    };
    read.unwrap_or_else(|_| Line::Garbage(refused(&v)))
}

/// Why a JSON object is no record of the protocol, in the words the warning has always
/// used (serde's own message names Rust types).
fn refused(v: &Value) -> String {
    if v.get("$report_type").is_some_and(Value::is_string) {
        return "a TestReport without nodeid or outcome".into();
    }
    let scene = v.get("scene").and_then(Value::as_str);
    match (v.get("event").and_then(Value::as_str), scene) {
        (None, _) => "no `event` and no `$report_type`".into(),
        (Some("start"), _) => "a start event without `scene`".into(),
        (Some("end"), None) => "an end event without `scene`".into(),
        (Some("end"), Some(scene)) => format!(
            "end event of `{scene}`: `outcome` must be passed, failed, skipped, xfailed, xpassed, error or not_reached"
        ),
        (Some(other), _) => format!("unknown event `{other}`"),
    }
}

#[cfg(test)]
#[path = "protocol_tests.rs"]
mod tests;
