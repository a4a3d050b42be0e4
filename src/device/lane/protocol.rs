//! The lane results protocol (docs/lanes.md): `parse_line` reads one line of a lane's
//! results file into a `Line`. Invariant: no line stops a run; a line of no known kind
//! is `Line::Garbage`, which the caller shows as a warning.

use serde_json::Value;

use crate::device::events::AttemptOutcome;

/// One line of a results file.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    Start {
        scene: String,
    },
    End {
        scene: String,
        verdict: AttemptOutcome,
        duration: Option<f64>,
        message: Option<String>,
    },
    /// `{"event": "device_fault", "devices": [..]}` (ids as numbers or strings).
    Fault {
        devices: Vec<String>,
        scene: Option<String>,
    },
    /// A pytest-reportlog `TestReport`.
    Report {
        nodeid: String,
        when: String,
        verdict: AttemptOutcome,
        duration: f64,
        message: Option<String>,
    },
    /// `{"event": "restart", "reason": R}`: the runtime is poisoned; a fresh process on
    /// the same ids should run the rest.
    Restart {
        reason: String,
    },
    /// pytest-reportlog's `SessionFinish`: the process got to its normal end.
    SessionFinish,
    /// `{"event": "ready", "unix_secs": T}`: a lane process started before the lock has
    /// imported and collected and waits for its ids (docs/lanes.md); `unix_secs` when.
    Ready {
        unix_secs: Option<f64>,
    },
    /// A record of a known kind that carries no result (SessionStart, CollectReport, ...).
    Other,
    /// Not a record this protocol knows: ignored with a warning.
    Garbage(String),
}

/// An end event's `outcome`: pytest's words, and `not_reached` (docs/lanes.md).
fn outcome_word(v: Option<&Value>) -> Option<AttemptOutcome> {
    match v?.as_str()? {
        "passed" => Some(AttemptOutcome::Passed),
        "failed" => Some(AttemptOutcome::Failed),
        "error" => Some(AttemptOutcome::Error),
        "skipped" => Some(AttemptOutcome::Skipped),
        "xfailed" => Some(AttemptOutcome::Xfailed),
        "xpassed" => Some(AttemptOutcome::Xpassed),
        "not_reached" => Some(AttemptOutcome::NotReached),
        _ => None,
    }
}

/// A reportlog `TestReport`'s verdict, as pytest words it: a failed setup or teardown is
/// an error; `wasxfail` turns a skip into xfailed and a pass into xpassed.
fn report_verdict(v: &Value) -> Option<AttemptOutcome> {
    let when = v.get("when").and_then(Value::as_str).unwrap_or("call");
    let xfail = v.get("wasxfail").is_some();
    Some(match v.get("outcome")?.as_str()? {
        "failed" if when != "call" => AttemptOutcome::Error,
        "failed" => AttemptOutcome::Failed,
        "skipped" if xfail => AttemptOutcome::Xfailed,
        "skipped" => AttemptOutcome::Skipped,
        "passed" if xfail && when == "call" => AttemptOutcome::Xpassed,
        "passed" => AttemptOutcome::Passed,
        _ => return None,
    })
}

/// Text of a reportlog `longrepr`: a string, a `[path, line, reason]` skip triple, or a
/// mapping whose `reprcrash` says where and what.
fn longrepr_text(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Array(a) if a.len() == 3 => a[2].as_str().map(str::to_string),
        Value::Object(o) => {
            let crash = o.get("reprcrash")?;
            let msg = crash.get("message").and_then(Value::as_str).unwrap_or("");
            Some(
                match (
                    crash.get("path").and_then(Value::as_str),
                    crash.get("lineno").and_then(Value::as_u64),
                ) {
                    (Some(p), Some(l)) => format!("{p}:{l}: {msg}"),
                    _ => msg.to_string(),
                },
            )
        }
        other => Some(other.to_string()),
    }
}

fn id_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub fn parse_line(text: &str) -> Line {
    let text = text.trim();
    let v: Value = match serde_json::from_str(text) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return Line::Garbage("not a JSON object".into()),
        Err(e) => return Line::Garbage(format!("not JSON ({e})")),
    };
    if let Some(kind) = v.get("$report_type").and_then(Value::as_str) {
        return match kind {
            "TestReport" => {
                let (Some(nodeid), Some(verdict)) =
                    (v.get("nodeid").and_then(Value::as_str), report_verdict(&v))
                else {
                    return Line::Garbage("a TestReport without nodeid or outcome".into());
                };
                Line::Report {
                    nodeid: nodeid.to_string(),
                    when: v
                        .get("when")
                        .and_then(Value::as_str)
                        .unwrap_or("call")
                        .to_string(),
                    verdict,
                    duration: v.get("duration").and_then(Value::as_f64).unwrap_or(0.0),
                    message: v.get("longrepr").and_then(longrepr_text),
                }
            }
            "SessionFinish" => Line::SessionFinish,
            _ => Line::Other,
        };
    }
    let scene = v.get("scene").and_then(Value::as_str).map(str::to_string);
    match v.get("event").and_then(Value::as_str) {
        Some("start") => match scene {
            Some(scene) => Line::Start { scene },
            None => Line::Garbage("a start event without `scene`".into()),
        },
        Some("end") => {
            let Some(scene) = scene else {
                return Line::Garbage("an end event without `scene`".into());
            };
            let Some(verdict) = outcome_word(v.get("outcome")) else {
                return Line::Garbage(format!(
                    "end event of `{scene}`: `outcome` must be passed, failed, skipped, xfailed, xpassed, error or not_reached"
                ));
            };
            Line::End {
                scene,
                verdict,
                duration: v.get("duration_secs").and_then(Value::as_f64),
                message: v
                    .get("message")
                    .and_then(Value::as_str)
                    .filter(|m| !m.is_empty())
                    .map(str::to_string),
            }
        }
        Some("restart") => Line::Restart {
            reason: v
                .get("reason")
                .and_then(Value::as_str)
                .filter(|r| !r.trim().is_empty())
                .unwrap_or("the lane process asked for it")
                .to_string(),
        },
        Some("ready") => Line::Ready {
            unix_secs: v.get("unix_secs").and_then(Value::as_f64),
        },
        Some("device_fault") => Line::Fault {
            devices: v
                .get("devices")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(id_text).collect())
                .unwrap_or_default(),
            scene,
        },
        Some(other) => Line::Garbage(format!("unknown event `{other}`")),
        None => Line::Garbage("no `event` and no `$report_type`".into()),
    }
}
