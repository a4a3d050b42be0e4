//! Lane glue between the plan and the device phase (docs/lanes.md): what the frozen plan
//! carries for lanes, their start-up history, and the one packing preview (which scenes
//! share which process) that `--plan` and `plan --format json` show.

use std::collections::BTreeMap;

use super::pack::{self, LaneSpec, SceneSpec, Unit};
use super::{FrozenDevice, FrozenScene, Results};
use crate::cache::history::HistoryId;
use crate::manifest::LaneConfig;
use crate::plan::Plan;

/// The lanes the frozen scenes use, each with the manifest's env under its own.
pub fn frozen_lanes(plan: &Plan, scenes: &[FrozenScene]) -> BTreeMap<String, LaneConfig> {
    let mut out = BTreeMap::new();
    for s in scenes {
        let Some(name) = s.lane() else { continue };
        if out.contains_key(name) {
            continue;
        }
        if let Some(l) = plan.manifest.lanes.get(name) {
            let mut l = l.clone();
            let mut env = plan.manifest.env.clone();
            env.extend(std::mem::take(&mut l.env));
            l.env = env;
            out.insert(name.to_string(), l);
        }
    }
    out
}

pub fn startup_estimates(plan: &Plan) -> BTreeMap<String, f64> {
    plan.manifest
        .lanes
        .keys()
        .filter_map(|l| {
            plan.history
                .estimate(HistoryId::LaneStartup(l))
                .map(|e| (l.clone(), e))
        })
        .collect()
}

/// History entries from a run: each lane process's start-up.
pub fn startup_history(r: &Results) -> Vec<(String, f64)> {
    r.lanes
        .iter()
        .filter_map(|l| {
            let key = HistoryId::LaneStartup(&l.lane).key();
            l.startup_secs.map(|s| (key, s))
        })
        .collect()
}

/// One process in the preview.
#[derive(Debug, Clone)]
pub struct PreviewProcess {
    /// None: a plain scene's own step.
    pub lane: Option<String>,
    /// Plan scene indices.
    pub scenes: Vec<usize>,
    pub devices: usize,
    pub exclusive: bool,
    /// Its phase of the run (`device.order`).
    pub order: crate::manifest::Order,
    pub startup: Option<f64>,
    pub start: f64,
    pub end: f64,
    pub slots: Vec<usize>,
    /// A lane process `scenerun device` starts before it calls the lock command (its
    /// lane has `prestart: true` and it is among the processes that start at once).
    pub prestart: bool,
}

/// The packer's input — each scene's device step and each lane with its start-up
/// estimate — grouped into processes (units) and packer jobs on `ids` ids. The one
/// builder the `--plan` preview and the inner run share, so they cannot drift.
pub fn packing<'a>(
    scenes: impl Iterator<Item = &'a FrozenDevice>,
    lanes: &BTreeMap<String, LaneConfig>,
    startups: &BTreeMap<String, f64>,
    ids: usize,
) -> (Vec<Unit>, Vec<pack::Job>) {
    let specs: Vec<SceneSpec> = scenes.map(FrozenDevice::spec).collect();
    let lanes: BTreeMap<String, LaneSpec> = lanes
        .iter()
        .map(|(n, l)| {
            (
                n.clone(),
                LaneSpec {
                    devices: l.devices as usize,
                    startup: startups.get(n).copied(),
                },
            )
        })
        .collect();
    pack::units(&specs, &lanes, ids)
}

/// The device packing as it will run: `runnable` plan scenes (with a device step, not
/// failed in warm) grouped into processes and simulated on `device_count` ids.
pub fn preview(plan: &Plan, runnable: &[usize]) -> Vec<PreviewProcess> {
    let devices: Vec<FrozenDevice> = runnable
        .iter()
        .map(|&i| {
            let ps = &plan.scenes[i];
            let d = ps
                .device
                .as_ref()
                .expect("runnable scenes have a device step");
            FrozenDevice::of(d, ps.device_estimate)
        })
        .collect();
    let startups = startup_estimates(plan);
    let ids = plan.device_count as usize;
    let (units, jobs) = packing(devices.iter(), &plan.manifest.lanes, &startups, ids);
    // Without the lock (`--no-lock`) nothing starts before it.
    let first: Vec<usize> = match plan.no_lock {
        Some(_) => Vec::new(),
        None => pack::first_wave(&jobs, ids).iter().map(|p| p.job).collect(),
    };
    pack::simulate(&jobs, plan.device_count as usize)
        .into_iter()
        .map(|p| {
            let (lane, scenes) = match &units[p.job] {
                Unit::Scene(i) => (None, vec![runnable[*i]]),
                Unit::Lane { lane, scenes } => (
                    Some(lane.clone()),
                    scenes.iter().map(|&i| runnable[i]).collect(),
                ),
            };
            let prestart = first.contains(&p.job)
                && lane
                    .as_ref()
                    .and_then(|l| plan.manifest.lanes.get(l))
                    .is_some_and(|l| l.prestart);
            PreviewProcess {
                startup: lane.as_ref().and_then(|l| startups.get(l).copied()),
                prestart,
                lane,
                scenes,
                devices: jobs[p.job].devices,
                exclusive: jobs[p.job].exclusive,
                order: jobs[p.job].order,
                start: p.start,
                end: p.end,
                slots: p.ids,
            }
        })
        .collect()
}
