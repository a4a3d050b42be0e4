//! The device executor: starts one process (a plain scene's device step here, a lane
//! process with its batch in `lane::process`), watches it, and reports what happened as
//! typed events. It decides nothing about what runs next (`packing::scheduler`
//! does) and renders nothing (the reporter in `live` does).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::Sender;
use std::time::Instant;

use super::events::{Attempt, AttemptOutcome, Event, Outcome};
use super::{Frozen, FrozenScene};
use crate::base::proc::{self, Ended};

/// Lines of output kept under a failed scene.
const TAIL_LINES: usize = 20;

/// `lock.device_fault`, compiled.
#[derive(Debug, Default)]
pub struct FaultRules {
    codes: Vec<i32>,
    patterns: Vec<regex::Regex>,
}

impl FaultRules {
    pub fn new(f: Option<&crate::manifest::DeviceFault>) -> FaultRules {
        let Some(f) = f else {
            return FaultRules::default();
        };
        FaultRules {
            codes: f.exit_codes.clone(),
            // Validated with the manifest; one that fails here is dropped.
            patterns: f
                .patterns
                .iter()
                .filter_map(|p| regex::Regex::new(p).ok())
                .collect(),
        }
    }

    /// Whether a step that ended this way with this output hit a device fault.
    pub fn matches(&self, ended: &Ended, output: &str) -> Option<String> {
        if let Ended::Exited(c) = ended {
            if self.codes.contains(c) {
                return Some(format!("exit status {c} is a device fault"));
            }
        }
        self.patterns
            .iter()
            .find(|p| p.is_match(output))
            .map(|p| format!("output matches the device-fault pattern `{}`", p.as_str()))
    }
}

/// What every execution shares.
pub struct Cx<'a> {
    pub frozen: &'a Frozen,
    pub granted: &'a [String],
    pub t0: Instant,
    pub faults: FaultRules,
    /// Numbers lane processes in start order (after those started before the lock).
    pub lane_procs: AtomicUsize,
}

impl Cx<'_> {
    pub(super) fn ids(&self, slots: &[usize]) -> Vec<String> {
        slots.iter().map(|&s| self.granted[s].clone()).collect()
    }

    pub(super) fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

/// The last `TAIL_LINES` lines of `text`.
pub fn tail_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

pub(super) fn log_tail(log: &Path) -> String {
    tail_lines(&proc::log_tail(log, 8000))
}

pub fn scene_log(frozen: &Frozen, scene: &str, attempt: usize) -> PathBuf {
    let dir = frozen.report_dir.join("logs").join(scene);
    if attempt <= 1 {
        dir.join("device.log")
    } else {
        dir.join(format!("device.attempt{attempt}.log"))
    }
}

/// Run one plain scene's device step on `slots`; this is attempt number `attempt`.
pub fn run_plain(
    cx: &Cx,
    job: usize,
    scene: usize,
    slots: &[usize],
    attempt: usize,
    tx: &Sender<Event>,
) {
    let s = &cx.frozen.scenes[scene];
    let devices = cx.ids(slots);
    let log = scene_log(cx.frozen, &s.name, attempt);
    let start = cx.now();
    let _ = tx.send(Event::Started { scene });
    let finished = start_plain(cx.frozen, s, &devices.join(","), &log);
    let duration = cx.now() - start;
    let (outcome, mut message) = plain_verdict(cx, s, &finished, &log, &devices);
    let stop = s.device().stop;
    let output = match (stop, finished.as_ref().ok().and_then(|f| f.stopped_at)) {
        (Some(stop), Some(from)) => {
            message = message.map(|m| format!("{m}; {}", stop_note(&stop)));
            stop_output(&stop, &log, from)
        }
        _ => log_tail(&log),
    };
    if outcome == AttemptOutcome::DeviceFault {
        let _ = tx.send(Event::Fault {
            slots: slots.to_vec(),
        });
    }
    let _ = tx.send(Event::Attempt {
        scene,
        attempt: Attempt {
            outcome,
            devices,
            start_secs: start,
            duration_secs: duration,
            message,
            output_tail: (outcome != AttemptOutcome::Test(Outcome::Passed)).then_some(output),
            log: Some(log),
            lane_process: None,
        },
    });
    let _ = tx.send(Event::Done {
        job,
        handback: Vec::new(),
    });
}

/// How a plain step's attempt ended, and the message that says so.
fn plain_verdict(
    cx: &Cx,
    s: &FrozenScene,
    finished: &std::io::Result<proc::Finished>,
    log: &Path,
    devices: &[String],
) -> (AttemptOutcome, Option<String>) {
    let ended = match finished {
        Ok(f) => &f.ended,
        Err(e) => {
            let why = format!("could not start the device step: {e}");
            return (AttemptOutcome::Test(Outcome::Failed), Some(why));
        }
    };
    match ended {
        Ended::Exited(0) => (AttemptOutcome::Test(Outcome::Passed), None),
        Ended::TimedOut => (
            AttemptOutcome::TimedOut,
            Some(format!(
                "timed out after {} (process group killed)",
                crate::base::units::short_duration(crate::base::units::secs(
                    s.device().timeout_secs.unwrap_or(0.0)
                ))
            )),
        ),
        Ended::Interrupted => (AttemptOutcome::Interrupted, Some("interrupted".into())),
        e => match cx.faults.matches(e, &proc::log_tail(log, 64 * 1024)) {
            Some(why) => (
                AttemptOutcome::DeviceFault,
                Some(format!("device fault on {}: {why}", devices.join(","))),
            ),
            None => (
                AttemptOutcome::Test(Outcome::Failed),
                Some(format!("device step {}", e.describe())),
            ),
        },
    }
}

/// Lines of the output after a stop signal kept under a scene (its stack dumps): the
/// first ones, where a runtime's dump of the thread that hung usually is.
const DUMP_LINES: usize = 60;
/// Bytes of that output read at most.
const DUMP_BYTES: u64 = 64 << 10;

/// What a message adds when a stop signal went first.
pub(super) fn stop_note(stop: &proc::Stop) -> String {
    format!(
        "{} was sent first, its output for {} is below",
        stop.signal_name(),
        crate::base::units::short_duration(stop.wait)
    )
}

/// The output a process wrote after its stop signal (`from`: the log's length then),
/// headed by the signal: its first `DUMP_LINES` lines and how many more the log has.
pub(super) fn stop_output(stop: &proc::Stop, log: &Path, from: u64) -> String {
    let bytes = proc::output::OutputFile::from(log, from)
        .read(DUMP_BYTES)
        .map(|got| got.bytes)
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = format!("--- output after {} ---", stop.signal_name());
    if lines.is_empty() {
        out.push_str("\n(none)");
    }
    for l in lines.iter().take(DUMP_LINES) {
        out.push('\n');
        out.push_str(l);
    }
    if lines.len() > DUMP_LINES {
        out.push_str(&format!("\n… more in {}", log.display()));
    }
    out
}

fn scene_env(
    frozen: &Frozen,
    s: &FrozenScene,
    devices: &str,
) -> std::collections::BTreeMap<String, String> {
    let kernels = super::kernels_dir(&frozen.run_dir, &s.name);
    let mut env = s.env.clone();
    env.insert("SCENERUN_KERNELS".into(), kernels.display().to_string());
    env.insert("SCENERUN_DEVICES".into(), devices.to_string());
    env.insert("SCENERUN_SCENE".into(), s.name.clone());
    let outputs = super::outputs::dir(&frozen.report_dir, &s.name);
    env.insert(super::outputs::ENV.into(), outputs.display().to_string());
    if let Some(f) = &s.fixture {
        env.insert("SCENERUN_FIXTURE".into(), f.out.display().to_string());
    }
    if let Some(g) = &s.golden {
        env.insert("SCENERUN_GOLDEN".into(), g.out.display().to_string());
    }
    if let Some(stop) = s.device.as_ref().and_then(|d| d.stop) {
        env.insert("SCENERUN_STOP_SIGNAL".into(), stop.signal_name());
    }
    env
}

fn start_plain(
    frozen: &Frozen,
    s: &FrozenScene,
    devices: &str,
    log: &Path,
) -> std::io::Result<proc::Finished> {
    let kernels = super::kernels_dir(&frozen.run_dir, &s.name);
    let crate::manifest::DeviceRun::Command(template) = &s.device().run else {
        unreachable!("a plain scene has a device command")
    };
    let command = crate::plan::render_device_template(
        template,
        &s.name,
        &s.platform,
        &kernels,
        s.fixture.as_ref().map(|a| a.out.as_path()),
        s.golden.as_ref().map(|a| a.out.as_path()),
        Some((devices, &super::outputs::dir(&frozen.report_dir, &s.name))),
    );
    let env = scene_env(frozen, s, devices);
    crate::base::fsutil::start_log(&frozen.report_dir, log, &format!("$ {command}\n"))?;
    // Its artifacts as the plan saw them: an earlier step may have written into one it
    // shares (docs/cache-trust.md, "Entries are read-only").
    super::recheck::scene(frozen, s).map_err(std::io::Error::other)?;
    let spec = proc::Spec {
        command: &command,
        dir: &frozen.manifest_dir,
        env: &env,
        log,
        timeout: s.device().timeout_secs.map(crate::base::units::secs),
        stop: s.device().stop,
    };
    proc::run_observed(&spec, |_| {})
}
