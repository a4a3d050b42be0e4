//! Job shapes from this project's own runs (`--from-reports DIR...`): each report dir
//! (report.json, the warm record, the trace) plus the cache's history becomes one run's
//! two shapes (docs/fleet.md, "Feeding it your runs"):
//!
//! - **old**: warm work inside the lock. The run's scenes are split into
//!   `--old-acquisitions` groups, balanced as the packer balances lane batches; each
//!   group holds the run's cards for its scenes' warm work (one after another, as a test
//!   process generates and compiles case by case) plus its device packing.
//! - **new**: the warm phase outside the lock (as the run's trace measured it), then one
//!   acquisition for the device packing, lane start-ups included.
//!
//! Device packings are what `device --plan` shows: the same units, packer and history
//! estimates (`device::packing`), never a scheduler of our own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::base::record::{Outcome as WarmOutcome, WarmRecord};
use crate::base::stepid::StepId;
use crate::cache::history::{History, HistoryId};
use crate::device::packing::packer::{self as pack, LaneSpec, SceneSpec};
use crate::device::report::{Report, StepReport};

use super::sim::{Job, Segment};
use super::Flow;

/// One scene of a run, as the shapes need it.
#[derive(Debug, Clone, PartialEq)]
pub struct SceneWork {
    /// Seconds of warm work (kernels, fixture, golden) when built from nothing.
    pub warm_secs: f64,
    /// Its device step's estimate (None: unknown; the packer uses the mean).
    pub device_secs: Option<f64>,
    pub devices: usize,
    pub exclusive: bool,
    pub lane: Option<String>,
}

/// One run, as the shapes need it.
#[derive(Debug, Clone)]
pub struct RunWork {
    pub name: String,
    /// The ids one acquisition takes.
    pub cards: usize,
    pub scenes: Vec<SceneWork>,
    pub lanes: BTreeMap<String, LaneSpec>,
    /// The warm phase's wall time outside the lock.
    pub warm_wall_secs: f64,
}

/// One run's two job shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct RunShape {
    pub name: String,
    pub cards: u32,
    pub old: Vec<Segment>,
    pub warm_secs: f64,
    pub new: Segment,
}

impl RunShape {
    /// This run as a job of `flow` arriving at `arrival`.
    pub fn job(&self, flow: Flow, arrival: f64) -> Job {
        match flow {
            Flow::Old => Job {
                arrival,
                cards: self.cards,
                before: 0.0,
                holds: self.old.clone(),
            },
            Flow::New | Flow::Given => Job {
                arrival,
                cards: self.cards,
                before: self.warm_secs,
                holds: vec![self.new],
            },
        }
    }
}

/// The two shapes of a run; `acquisitions` old-flow acquisitions per job (fewer when
/// the run has fewer scenes).
pub fn shape(run: &RunWork, acquisitions: usize) -> RunShape {
    let all: Vec<usize> = (0..run.scenes.len()).collect();
    let device_mean = pack::mean_estimate(run.scenes.iter().map(|s| s.device_secs));
    let work =
        |i: usize| run.scenes[i].warm_secs + run.scenes[i].device_secs.unwrap_or(device_mean);
    let old = pack::split_batches(&all, acquisitions.max(1), work)
        .into_iter()
        .map(|group| {
            let warm: f64 = group.iter().map(|&i| run.scenes[i].warm_secs).sum();
            let device = device_packing(run, &group, device_mean);
            Segment {
                secs: warm + device.secs,
                device_secs: device.device_secs,
            }
        })
        .collect();
    RunShape {
        name: run.name.clone(),
        cards: run.cards as u32,
        old,
        warm_secs: run.warm_wall_secs,
        new: device_packing(run, &all, device_mean),
    }
}

/// The device packing of some of a run's scenes on its cards, as `device --plan`
/// previews it: its makespan, and its device card-seconds spread over the cards.
fn device_packing(run: &RunWork, scenes: &[usize], device_mean: f64) -> Segment {
    if scenes.is_empty() || run.cards == 0 {
        return Segment {
            secs: 0.0,
            device_secs: 0.0,
        };
    }
    let specs: Vec<SceneSpec> = scenes
        .iter()
        .map(|&i| {
            let s = &run.scenes[i];
            SceneSpec {
                devices: s.devices.clamp(1, run.cards),
                exclusive: s.exclusive,
                estimate: Some(s.device_secs.unwrap_or(device_mean)),
                lane: s.lane.clone(),
                ..SceneSpec::default()
            }
        })
        .collect();
    let (_, jobs) = pack::units(&specs, &run.lanes, run.cards);
    let makespan = pack::simulate(&jobs, run.cards)
        .iter()
        .map(|p| p.end)
        .fold(0.0, f64::max);
    let device_card_secs: f64 = specs
        .iter()
        .map(|s| s.estimate.unwrap_or(0.0) * s.devices as f64)
        .sum();
    Segment {
        secs: makespan,
        device_secs: device_card_secs / run.cards as f64,
    }
}

// ------------------------------------------------------------------ reading a report dir

/// Why a report dir cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{dir}: no report.json (run `scenerun device` with this report dir first)")]
    NoReport { dir: PathBuf },
    #[error("{path}: not a scenerun report: {source}")]
    BadReport {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{dir}: the report lists no scenes")]
    Empty { dir: PathBuf },
    #[error("{path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{dir}: {what} is {value:?} s, not a time between 0 and 365 days (from its report.json, warm.json or trace.json, or the cache's history); refused")]
    BadTime {
        dir: PathBuf,
        what: String,
        value: f64,
    },
    #[error("{dir}: {what} is {value}, more than the {max} a simulation takes; refused")]
    TooMany {
        dir: PathBuf,
        what: &'static str,
        value: usize,
        max: usize,
    },
}

/// The most scenes one report may list, and ids one scene or run may hold, for a
/// simulation (a real report is far below both).
pub const MAX_SCENES: usize = 100_000;
pub const MAX_CARDS: usize = crate::manifest::MAX_DEVICES as usize;

/// What a run's manifest adds to its report: which scenes run exclusive, where its job
/// dir is, and the history of the cache it uses.
#[derive(Debug, Default)]
pub struct Context {
    pub manifest_dir: Option<PathBuf>,
    pub exclusive: Vec<String>,
    pub history: History,
    /// What could not be found, for the user (printed as notes).
    pub notes: Vec<String>,
}

/// Where the manifest of a report dir may be: the path the report names when absolute;
/// beside the report dir's `build/scenerun` (the default layout); the named path from
/// here; then `fallback`, the current checkout's (reports copied from CI).
fn manifest_candidates(dir: &Path, named: &Path, fallback: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if named.is_absolute() {
        out.push(named.to_path_buf());
    }
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    if let (Some(name), Some(beside)) = (named.file_name(), dir.parent().and_then(Path::parent)) {
        out.push(beside.join(name));
    }
    if named.is_relative() && !named.as_os_str().is_empty() {
        out.push(named.to_path_buf());
    }
    out.push(fallback.to_path_buf());
    out
}

/// Find and load the manifest of report dir `dir`, and the history in its cache
/// (`cache_dir` wins, as everywhere).
pub fn context(dir: &Path, fallback: &Path, cache_dir: Option<&Path>) -> Context {
    let named = read_report(dir)
        .map(|r| PathBuf::from(r.manifest))
        .unwrap_or_default();
    let m = manifest_candidates(dir, &named, fallback)
        .into_iter()
        .filter(|p| p.is_file())
        .find_map(|p| crate::manifest::load(&p).ok());
    let mut notes = Vec::new();
    if m.is_none() {
        notes.push(format!(
            "{}: the manifest its report names ({}) is not beside it and --manifest is not \
             a manifest: no scene counts as exclusive; run from the suite's checkout or \
             pass --manifest",
            dir.display(),
            named.display()
        ));
    }
    let root = match (&m, cache_dir) {
        (Some(m), flag) => Some(crate::plan::cache_dir(m, flag)),
        (None, Some(d)) => Some(d.to_path_buf()),
        (None, None) => None,
    };
    let history = match &root {
        Some(r) if History::path(r).is_file() => History::load(r),
        _ => {
            notes.push(format!(
                "{}: no history found{}: build and device times come from the run's own records",
                dir.display(),
                root.map(|r| format!(" in {}", r.display()))
                    .unwrap_or_default()
            ));
            History::default()
        }
    };
    Context {
        manifest_dir: m.as_ref().map(|m| m.dir.clone()),
        exclusive: m
            .iter()
            .flat_map(|m| &m.scenes)
            .filter(|s| s.device.as_ref().is_some_and(|d| d.exclusive))
            .map(|s| s.name.clone())
            .collect(),
        history,
        notes,
    }
}

/// A report dir's `report.json`: a regular file (no link followed, no FIFO waited on)
/// of at most its cap.
fn read_report(dir: &Path) -> Result<Report, ReadError> {
    let path = dir.join("report.json");
    let bytes = match crate::base::fsutil::read_capped(&path, crate::base::fsutil::Cap::REPORT) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ReadError::NoReport {
                dir: dir.to_path_buf(),
            })
        }
        Err(source) => return Err(ReadError::Unreadable { path, source }),
    };
    serde_json::from_slice(&bytes).map_err(|source| ReadError::BadReport { path, source })
}

/// Every time a report and a warm record give, as they give it: finite, not negative,
/// at most a year (a value nobody uses is checked too: a file that holds one is not a
/// report scenerun wrote).
fn check_records(dir: &Path, report: &Report, record: &WarmRecord) -> Result<(), ReadError> {
    let time = time_check(dir);
    for (i, s) in report.scenes.iter().enumerate() {
        time(format!("scene {i}'s duration_secs"), s.result.duration_secs)?;
        time(format!("scene {i}'s start_secs"), s.result.start_secs)?;
    }
    for (i, l) in report.device.iter().flat_map(|d| &d.lanes).enumerate() {
        if let Some(t) = l.startup_secs {
            time(format!("lane process {i}'s startup_secs"), t)?;
        }
    }
    for (i, r) in record.steps.iter().enumerate() {
        time(format!("warm step {i}'s duration_secs"), r.duration_secs)?;
    }
    Ok(())
}

/// A check that a time is finite, not negative and at most a year.
fn time_check(dir: &Path) -> impl Fn(String, f64) -> Result<(), ReadError> + '_ {
    move |what, value| {
        if value.is_finite() && (0.0..=crate::base::sampling::MAX_SECS).contains(&value) {
            Ok(())
        } else {
            Err(ReadError::BadTime {
                dir: dir.to_path_buf(),
                what,
                value,
            })
        }
    }
}

/// Every time and count of a run within what a simulation takes: times finite, not
/// negative and at most a year; scenes and ids within `MAX_SCENES` and `MAX_CARDS`.
fn check_bounds(dir: &Path, run: &RunWork) -> Result<(), ReadError> {
    let time = time_check(dir);
    let count = |what: &'static str, value: usize, max: usize| {
        if value <= max {
            Ok(())
        } else {
            Err(ReadError::TooMany {
                dir: dir.to_path_buf(),
                what,
                value,
                max,
            })
        }
    };
    count("the number of scenes", run.scenes.len(), MAX_SCENES)?;
    count("the number of device ids", run.cards, MAX_CARDS)?;
    time("the warm phase's wall time".into(), run.warm_wall_secs)?;
    for (i, s) in run.scenes.iter().enumerate() {
        time(format!("scene {i}'s warm time"), s.warm_secs)?;
        if let Some(d) = s.device_secs {
            time(format!("scene {i}'s device time"), d)?;
        }
    }
    for (name, l) in &run.lanes {
        count("a lane's number of device ids", l.devices, MAX_CARDS)?;
        if let Some(t) = l.startup {
            time(
                format!("lane {}'s start-up time", crate::base::ui::escape(name)),
                t,
            )?;
        }
    }
    Ok(())
}

/// Read one report dir into a run.
pub fn read_run(dir: &Path, ctx: &Context) -> Result<RunWork, ReadError> {
    let report = read_report(dir)?;
    if report.scenes.is_empty() {
        return Err(ReadError::Empty {
            dir: dir.to_path_buf(),
        });
    }
    let strict = |dir: &Path| {
        let path = WarmRecord::path(dir);
        WarmRecord::read(&path).map_err(|source| ReadError::Unreadable { path, source })
    };
    let mut record = strict(dir)?;
    if record.steps.is_empty() {
        // A report written with --report-dir elsewhere: the warm record stays in the
        // checkout's job dir.
        if let Some(d) = &ctx.manifest_dir {
            record = strict(&crate::base::layout::job_dir(d))?;
        }
    }
    check_records(dir, &report, &record)?;
    let built = BuiltTimes::new(&record, &ctx.history);
    let scenes: Vec<SceneWork> = report
        .scenes
        .iter()
        .map(|row| (row, &row.result))
        .map(|(row, s)| SceneWork {
            warm_secs: row.steps.iter().map(|st| built.secs(&s.name, st)).sum(),
            device_secs: ctx
                .history
                .estimate(HistoryId::Device(&s.name))
                .or((s.duration_secs > 0.0).then_some(s.duration_secs)),
            devices: s.devices.len().max(1),
            exclusive: ctx.exclusive.contains(&s.name),
            lane: s.lane.clone(),
        })
        .collect();
    let device = report.device.as_ref();
    let widest = scenes.iter().map(|s| s.devices).max().unwrap_or(1);
    let cards = device.map(|d| d.granted.len()).unwrap_or(0).max(widest);
    let mut lanes: BTreeMap<String, LaneSpec> = BTreeMap::new();
    for l in device.iter().flat_map(|d| &d.lanes) {
        let startup = ctx
            .history
            .estimate(HistoryId::LaneStartup(&l.lane))
            .or(l.startup_secs);
        lanes.entry(l.lane.clone()).or_insert(LaneSpec {
            devices: l.devices.len().max(1),
            startup,
        });
    }
    let warm_sum: f64 = scenes.iter().map(|s| s.warm_secs).sum();
    let run = RunWork {
        name: dir.display().to_string(),
        cards,
        scenes,
        lanes,
        warm_wall_secs: warm_wall(dir)?.unwrap_or(warm_sum),
    };
    check_bounds(dir, &run)?;
    Ok(run)
}

/// Seconds each warm step takes when it is built: its history, else this run's build
/// of it, else the build of the same key under another step (two scenes sharing a
/// kernel build it once; a flow without a cache builds it for each).
struct BuiltTimes<'a> {
    history: &'a History,
    by_id: BTreeMap<StepId, f64>,
    by_key: BTreeMap<&'a str, f64>,
}

impl<'a> BuiltTimes<'a> {
    fn new(record: &'a WarmRecord, history: &'a History) -> BuiltTimes<'a> {
        let mut by_id = BTreeMap::new();
        let mut by_key = BTreeMap::new();
        for r in &record.steps {
            let id = r.id();
            let built = history
                .estimate(HistoryId::Step(&id))
                .or((r.outcome == WarmOutcome::Built).then_some(r.duration_secs));
            if let Some(secs) = built {
                by_id.insert(id, secs);
                by_key.entry(r.key.as_str()).or_insert(secs);
            }
        }
        BuiltTimes {
            history,
            by_id,
            by_key,
        }
    }

    fn secs(&self, scene: &str, step: &StepReport) -> f64 {
        let id = StepId::new(step.kind, scene, &step.name);
        self.by_id
            .get(&id)
            .copied()
            .or_else(|| self.history.estimate(HistoryId::Step(&id)))
            .or_else(|| self.by_key.get(step.key.as_str()).copied())
            .unwrap_or(0.0)
    }
}

/// The warm phase's wall time from the report dir's trace (first step start to last
/// step end), when the trace has a warm part. A trace that is there but cannot be read
/// (a link, a FIFO, over its cap) is an error naming it.
fn warm_wall(dir: &Path) -> Result<Option<f64>, ReadError> {
    let path = crate::report::trace::path(dir);
    let bytes = match crate::base::fsutil::read_capped(&path, crate::base::fsutil::Cap::TRACE) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(ReadError::Unreadable { path, source }),
    };
    Ok(wall_of_trace(&bytes))
}

/// First warm step start to last warm step end in a trace's text.
fn wall_of_trace(bytes: &[u8]) -> Option<f64> {
    let doc: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    for e in doc["traceEvents"].as_array()? {
        if e["pid"].as_u64() != Some(crate::report::trace::WARM_PID) || e["ph"] != "X" {
            continue;
        }
        let (Some(ts), Some(dur)) = (e["ts"].as_f64(), e["dur"].as_f64()) else {
            continue;
        };
        first = first.min(ts);
        last = last.max(ts + dur);
    }
    (last >= first).then(|| (last - first) / 1e6)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scene(warm: f64, device: f64, lane: Option<&str>) -> SceneWork {
        SceneWork {
            warm_secs: warm,
            device_secs: Some(device),
            devices: 1,
            exclusive: false,
            lane: lane.map(str::to_string),
        }
    }

    #[test]
    fn old_holds_warm_work_in_the_lock_new_only_the_packing() {
        let run = RunWork {
            name: "r".into(),
            cards: 2,
            scenes: vec![
                scene(10.0, 1.0, None),
                scene(20.0, 2.0, None),
                scene(30.0, 1.0, Some("l")),
                scene(40.0, 1.0, Some("l")),
            ],
            lanes: BTreeMap::from([(
                "l".to_string(),
                LaneSpec {
                    devices: 1,
                    startup: Some(0.5),
                },
            )]),
            warm_wall_secs: 45.0,
        };
        let s = shape(&run, 2);
        assert_eq!(s.old.len(), 2);
        let old_held: f64 = s.old.iter().map(|g| g.secs).sum();
        // Every scene's warm work is inside some acquisition.
        assert!(old_held >= 100.0, "{s:?}");
        // New: the whole packing on 2 ids, as `device --plan` would preview it: two
        // lane processes (start-up 0.5 + 1 s each) beside the plain scenes (1 s, 2 s).
        assert_eq!(s.warm_secs, 45.0);
        assert!((s.new.secs - 3.0).abs() < 1e-9, "{:?}", s.new);
        // Device card-seconds (5) spread over the 2 cards; the same in both flows.
        assert!((s.new.device_secs - 2.5).abs() < 1e-9);
        let old_device: f64 = s.old.iter().map(|g| g.device_secs).sum();
        assert!((old_device - 2.5).abs() < 1e-9);
        // More acquisitions than scenes: one per scene.
        assert_eq!(shape(&run, 8).old.len(), 4);
    }
}
