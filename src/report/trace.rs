//! `trace.json` in the report dir: the last warm and the last device phase as Chrome
//! trace events (they open in Perfetto and chrome://tracing). Warm is process 1 with one
//! track per worker slot; device is process 2 with a track for the lock (queue and held
//! spans) and one per granted device id (scenes, lane start-ups). Each phase replaces only
//! its own part of the file, so after `warm && device` one file shows both. Times are
//! Unix microseconds, so the two parts line up. Under GitHub Actions the device phase is
//! also a Mermaid gantt in the step summary.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::device::report::{LockReport, Report};
use crate::plan::Plan;
use crate::warm::accum::Span;

pub const WARM_PID: u64 = 1;
pub const DEVICE_PID: u64 = 2;
/// The device process's lock track; ids get tracks 1 + their position in `granted`.
const LOCK_TID: u64 = 0;

pub fn path(dir: &Path) -> PathBuf {
    dir.join("trace.json")
}

fn us(secs: f64) -> i64 {
    (secs * 1e6).round() as i64
}

fn unix_secs(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// One trace event as this file writes it (Chrome's trace-event format: `M` metadata,
/// `X` a span, `i` an instant); schemas/trace.schema.json is generated from it. Built as
/// a `Value`, so the keys are sorted as before; warm's spans are the same keys, written
/// straight from their own struct (`write_warm`).
#[derive(serde::Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Event {
    ph: &'static str,
    pid: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u64>,
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    /// Unix microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<i64>,
    /// Microseconds, at least 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<i64>,
    /// An instant's scope (`t`: its track).
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    args: Value,
}

impl Event {
    fn value(self) -> Value {
        serde_json::to_value(self).expect("a trace event serializes")
    }
}

/// The file: `traceEvents`, in the `ms` display unit (written as bytes by `replace_part`).
#[cfg(test)]
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
pub(crate) struct TraceFile {
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: String,
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event>,
}

fn meta(pid: u64, tid: Option<u64>, what: &str, name: &str, sort: u64) -> Vec<Value> {
    let sort_what = if tid.is_some() {
        "thread_sort_index"
    } else {
        "process_sort_index"
    };
    let event = |name: &str, args: Value| Event {
        ph: "M",
        pid,
        tid,
        name: name.to_string(),
        cat: None,
        ts: None,
        dur: None,
        s: None,
        args,
    };
    vec![
        event(what, json!({ "name": name })).value(),
        event(sort_what, json!({ "sort_index": sort })).value(),
    ]
}

fn span(
    pid: u64,
    tid: u64,
    name: &str,
    cat: &'static str,
    start: f64,
    dur: f64,
    args: Value,
) -> Value {
    Event {
        ph: "X",
        pid,
        tid: Some(tid),
        name: name.to_string(),
        cat: Some(cat),
        ts: Some(us(start)),
        dur: Some(us(dur.max(0.0)).max(1)),
        s: None,
        args,
    }
    .value()
}

/// Replace the events of process `pid` in `dir/trace.json` with `events` (each already
/// serialized, comma-separated). Best effort: a trace that cannot be written is a
/// warning, never a failed phase. The other process's events are kept byte for byte
/// (the file is ours, compact): no value tree is built for them or for the new ones.
fn replace_part(dir: &Path, pid: u64, events: &[u8]) -> std::io::Result<()> {
    #[derive(serde::Deserialize)]
    struct Doc<'a> {
        #[serde(borrow, rename = "traceEvents")]
        trace_events: Vec<&'a RawValue>,
    }
    #[derive(serde::Deserialize)]
    struct Pid {
        pid: Option<u64>,
    }
    let file = path(dir);
    let old =
        crate::base::fsutil::read_kept(&file, crate::base::fsutil::Cap::TRACE).unwrap_or_default();
    let kept: Vec<&RawValue> = serde_json::from_slice::<Doc>(&old)
        .map(|d| d.trace_events)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            serde_json::from_str::<Pid>(e.get())
                .ok()
                .and_then(|p| p.pid)
                != Some(pid)
        })
        .collect();
    let mut doc = Vec::with_capacity(events.len() + old.len() + 64);
    doc.extend_from_slice(br#"{"displayTimeUnit":"ms","traceEvents":["#);
    for e in &kept {
        if doc.last() != Some(&b'[') {
            doc.push(b',');
        }
        doc.extend_from_slice(e.get().as_bytes());
    }
    if !events.is_empty() {
        if doc.last() != Some(&b'[') {
            doc.push(b',');
        }
        doc.extend_from_slice(events);
    }
    doc.extend_from_slice(b"]}");
    std::fs::create_dir_all(dir)?;
    crate::base::fsutil::write_atomic(&file, &doc)
}

/// Append one event to a comma-separated list of serialized events.
fn push_event(out: &mut Vec<u8>, event: &impl serde::Serialize) {
    if !out.is_empty() {
        out.push(b',');
    }
    serde_json::to_writer(&mut *out, event).expect("trace event serializes");
}

/// Serialized events, comma-separated, for `replace_part`.
fn serialized(events: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        push_event(&mut out, e);
    }
    out
}

/// The warm part: one span per unit run, on the slot that ran it. Spans are written
/// from typed structs (fields in the order a `json!` object sorts its keys, so the
/// bytes are as before), not built as values first: a no-op warm has thousands.
pub fn write_warm(plan: &Plan, spans: &[Span]) -> std::io::Result<()> {
    #[derive(serde::Serialize)]
    struct Args<'a> {
        key: &'a str,
        outcome: crate::base::record::Outcome,
        remote_bytes: Option<u64>,
        scenes: Vec<&'a str>,
    }
    #[derive(serde::Serialize)]
    struct WarmSpan<'a> {
        args: Args<'a>,
        cat: &'a str,
        dur: i64,
        name: &'a str,
        ph: &'a str,
        pid: u64,
        tid: u64,
        ts: i64,
    }
    let mut ev = meta(WARM_PID, None, "process_name", "scenerun warm", 1);
    let mut slots: Vec<usize> = spans.iter().map(|s| s.slot).collect();
    slots.sort();
    slots.dedup();
    for &s in &slots {
        ev.extend(meta(
            WARM_PID,
            Some(s as u64),
            "thread_name",
            &format!("slot {s}"),
            s as u64,
        ));
    }
    let mut out = serialized(&ev);
    out.reserve(spans.len() * 256);
    for s in spans {
        let unit = &plan.units[s.unit];
        let first = &plan.steps[unit.steps[0]];
        let name = first.id.labelled();
        push_event(
            &mut out,
            &WarmSpan {
                args: Args {
                    key: &first.key,
                    outcome: s.outcome,
                    remote_bytes: s.remote_bytes,
                    scenes: unit
                        .steps
                        .iter()
                        .map(|&i| plan.steps[i].id.scene.as_str())
                        .collect(),
                },
                cat: first.kind.name(),
                dur: us(s.secs.max(0.0)).max(1),
                name: &name,
                ph: "X",
                pid: WARM_PID,
                tid: s.slot as u64,
                ts: us(unix_secs(s.start)),
            },
        );
    }
    replace_part(&plan.job_dir, WARM_PID, &out)
}

/// The device part, from the device phase's report: the lock's
/// queue and held spans, each scene on every id it held, lane start-ups. `fallback_start`
/// is when the inner run started if the report has no lock timings (`--no-lock`).
pub fn device_events(report: &Report, fallback_start: f64) -> Vec<Value> {
    let mut ev = meta(DEVICE_PID, None, "process_name", "scenerun device", 2);
    let lock = report.lock.as_ref();
    let inner_start = lock
        .and_then(|l| l.inner_started_at)
        .unwrap_or(fallback_start);
    if let Some(l) = lock {
        ev.extend(lock_events(l));
    }
    // Tracks: the granted ids in order, then any other id a scene held.
    let mut ids: Vec<&str> = report
        .device
        .iter()
        .flat_map(|d| d.granted.iter().map(String::as_str))
        .collect();
    for d in report.scenes.iter().flat_map(|s| &s.result.devices) {
        if !ids.contains(&d.as_str()) {
            ids.push(d);
        }
    }
    let tid = |id: &str| 1 + ids.iter().position(|i| *i == id).unwrap_or(0) as u64;
    for id in &ids {
        ev.extend(meta(
            DEVICE_PID,
            Some(tid(id)),
            "thread_name",
            &format!("device {id}"),
            tid(id),
        ));
    }
    for s in report.scenes.iter().map(|s| &s.result) {
        for d in &s.devices {
            ev.push(span(
                DEVICE_PID,
                tid(d),
                &s.name,
                "scene",
                inner_start + s.start_secs,
                s.duration_secs,
                json!({
                    "outcome": s.outcome,
                    "devices": s.devices,
                }),
            ));
        }
    }
    ev.extend(lane_events(report, inner_start, tid));
    ev
}

/// Lane processes on their ids' tracks: each start-up, from the process's start, and
/// each restart (a lane process ended so that a fresh one runs the rest) as an instant
/// at the process's end.
fn lane_events(report: &Report, inner_start: f64, tid: impl Fn(&str) -> u64) -> Vec<Value> {
    let mut ev = Vec::new();
    for l in report.device.iter().flat_map(|d| &d.lanes) {
        for d in &l.devices {
            if let Some(startup) = l.startup_secs {
                ev.push(span(
                    DEVICE_PID,
                    tid(d),
                    &format!("{} start-up", l.lane),
                    "lane",
                    inner_start + l.start_secs,
                    startup,
                    json!({"lane": l.lane, "restarts": l.restarts}),
                ));
            }
            if let Some(why) = &l.restart_reason {
                ev.push(
                    Event {
                        ph: "i",
                        pid: DEVICE_PID,
                        tid: Some(tid(d)),
                        name: format!("{} restart", l.lane),
                        cat: Some("restart"),
                        ts: Some(us(inner_start + l.start_secs + l.duration_secs)),
                        dur: None,
                        s: Some("t"),
                        args: json!({"lane": l.lane, "reason": why, "restarts": l.restarts}),
                    }
                    .value(),
                );
            }
        }
    }
    ev
}

/// The lock's track: queued, then held; or the whole call when the inner run never ran.
fn lock_events(l: &LockReport) -> Vec<Value> {
    let mut ev = meta(DEVICE_PID, Some(LOCK_TID), "thread_name", "lock", 0);
    let (called, returned) = (l.called_at, l.returned_at);
    match l.inner_started_at {
        Some(started) => {
            let queued = span(
                DEVICE_PID,
                LOCK_TID,
                "queued",
                "lock",
                called,
                started - called,
                json!({}),
            );
            let held = span(
                DEVICE_PID,
                LOCK_TID,
                "held",
                "lock",
                started,
                returned - started,
                json!({ "command": l.command }),
            );
            ev.extend([queued, held]);
        }
        None => ev.push(span(
            DEVICE_PID,
            LOCK_TID,
            "lock command (inner never ran)",
            "lock",
            called,
            returned - called,
            json!({ "exit_code": l.exit_code }),
        )),
    }
    ev
}

/// Replace the device part of the trace in `dir` with `report`'s (the report the device
/// phase writes beside it, in memory: nothing is read back from disk); under GitHub
/// Actions also append the Mermaid gantt to the step summary.
pub fn write_device(
    dir: &Path,
    report: &Report,
    fallback_start: f64,
    github: bool,
) -> std::io::Result<()> {
    let events = device_events(report, fallback_start);
    if github {
        if let Ok(p) = std::env::var("GITHUB_STEP_SUMMARY") {
            let g = gantt(&events);
            if !g.is_empty() {
                use std::io::Write;
                if let Ok(mut f) = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(p)
                {
                    let _ = f.write_all(g.as_bytes());
                }
            }
        }
    }
    replace_part(dir, DEVICE_PID, &serialized(&events))
}

/// A Mermaid gantt of the device part: one section per track, one bar per span.
pub fn gantt(events: &[Value]) -> String {
    let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    let Some(t0) = spans.iter().filter_map(|e| e["ts"].as_i64()).min() else {
        return String::new();
    };
    let mut tracks: Vec<(u64, String)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .filter_map(|e| Some((e["tid"].as_u64()?, e["args"]["name"].as_str()?.to_string())))
        .collect();
    tracks.sort();
    let clean = |s: &str| s.replace([':', '#', ';'], " ");
    let mut md = String::from(
        "\n```mermaid\ngantt\n    title scenerun device phase\n    dateFormat x\n    axisFormat %M:%S\n",
    );
    for (tid, name) in &tracks {
        md.push_str(&format!("    section {}\n", clean(name)));
        for e in spans.iter().filter(|e| e["tid"].as_u64() == Some(*tid)) {
            let start = (e["ts"].as_i64().unwrap_or(t0) - t0) / 1000;
            let dur = (e["dur"].as_i64().unwrap_or(0) / 1000).max(1);
            let failed = e["args"]["outcome"]
                .as_str()
                .is_some_and(|o| !matches!(o, "passed" | "flaky"));
            md.push_str(&format!(
                "    {} :{}{start}, {}ms\n",
                clean(e["name"].as_str().unwrap_or("?")),
                if failed { "crit, " } else { "" },
                dur
            ));
        }
    }
    md.push_str("```\n");
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report as `report.json` holds it (read typed, as `write_device` reads it).
    fn report() -> Report {
        serde_json::from_value(json!({
            "version": 1, "scenerun": "0", "manifest": "m", "exit_code": 1, "error": null,
            "lock": {"command": "x", "exit_code": 0, "called_at": 100.0, "inner_started_at": 102.0,
                     "inner_ended_at": 109.0, "returned_at": 110.0, "queue_wait_secs": 2.0,
                     "held_secs": 8.0, "output_tail": null, "signal_forwarded_at": null},
            "device": {
                "granted": ["4", "5"], "inner_secs": 7.0, "busy_secs": 3.0,
                "device_secs_used": 4.0, "device_secs_held": 16.0, "efficiency": 0.4,
                "startup_secs": 1.5, "quarantined": [],
                "lanes": [{"lane": "npu", "devices": ["5"], "start_secs": 0.5, "startup_secs": 1.5,
                           "duration_secs": 3.0, "restarts": 0, "scenes": ["b"],
                           "ended": "restarted: r", "restart_reason": "r", "log": "l"}]
            },
            "scenes": [
                scene("a", &["4"], 0.0, 3.0, "passed"),
                scene("b", &["5"], 2.0, 1.0, "failed"),
                scene("c", &[], 0.0, 0.0, "not_run")
            ]
        }))
        .expect("a report")
    }

    fn scene(name: &str, devices: &[&str], start: f64, dur: f64, outcome: &str) -> Value {
        json!({"name": name, "devices": devices, "start_secs": start, "duration_secs": dur,
               "outcome": outcome, "message": null, "log": null, "log_tail": null, "lane": null,
               "attempts": [], "steps": [], "infra": null})
    }

    fn spans<'a>(ev: &'a [Value], cat: &str) -> Vec<&'a Value> {
        ev.iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == cat)
            .collect()
    }

    #[test]
    fn device_part_has_lock_ids_and_lane_startups() {
        let ev = device_events(&report(), 0.0);
        let lock = spans(&ev, "lock");
        assert_eq!(lock.len(), 2);
        assert_eq!(
            (lock[0]["ts"].as_i64(), lock[0]["dur"].as_i64()),
            (Some(100_000_000), Some(2_000_000))
        );
        assert_eq!(lock[1]["name"], "held");
        assert_eq!(lock[1]["dur"].as_i64(), Some(8_000_000));
        let scenes = spans(&ev, "scene");
        // A scene that never held an id has no span.
        assert_eq!(scenes.len(), 2);
        assert_eq!(scenes[1]["ts"].as_i64(), Some(104_000_000));
        // Tracks follow the granted order: id 4 is track 1, id 5 track 2.
        assert_eq!(
            (scenes[0]["tid"].as_u64(), scenes[1]["tid"].as_u64()),
            (Some(1), Some(2))
        );
        let lane = spans(&ev, "lane");
        assert_eq!(lane.len(), 1);
        assert_eq!(
            (lane[0]["ts"].as_i64(), lane[0]["tid"].as_u64()),
            (Some(102_500_000), Some(2))
        );
        // Its restart, an instant on the same track at the process's end.
        let restart: Vec<&Value> = ev.iter().filter(|e| e["cat"] == "restart").collect();
        assert_eq!(restart.len(), 1);
        assert_eq!(
            (
                restart[0]["ph"].as_str(),
                restart[0]["ts"].as_i64(),
                restart[0]["tid"].as_u64()
            ),
            (Some("i"), Some(105_500_000), Some(2))
        );
        assert_eq!(restart[0]["args"]["reason"], "r");
        let g = gantt(&ev);
        assert!(g.contains("section device 5\n"), "{g}");
        assert!(g.contains("    b :crit, 4000, 1000ms\n"), "{g}");
        assert!(g.contains("    a :2000, 3000ms\n"), "{g}");
    }

    #[test]
    fn without_lock_timings_the_inner_start_is_the_fallback() {
        let mut r = report();
        r.lock = None;
        let ev = device_events(&r, 50.0);
        assert!(spans(&ev, "lock").is_empty());
        assert_eq!(spans(&ev, "scene")[0]["ts"].as_i64(), Some(50_000_000));
    }
}
