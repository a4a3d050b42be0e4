//! The packer's input, built in one place for the `--plan` preview and the inner run
//! (docs/lanes.md, packing): each scene's device step and each lane with its start-up
//! estimate, grouped into processes (units) and jobs. Invariant: the preview packs what
//! the inner run will pack, through the same builder and the same packer.

use std::collections::BTreeMap;

use super::packer::{self, LaneSpec, SceneSpec, Unit};
use crate::cache::history::HistoryId;
use crate::device::FrozenDevice;
use crate::manifest::{LaneConfig, Prestart};
use crate::plan::Plan;

/// Each lane's start-up estimate from history (what its processes add to their jobs).
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
) -> (Vec<Unit>, Vec<packer::Job>) {
    let specs: Vec<SceneSpec> = scenes.map(spec).collect();
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
    packer::units(&specs, &lanes, ids)
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
        None => packer::first_wave(&jobs, ids)
            .iter()
            .map(|p| p.job)
            .collect(),
    };
    packer::simulate(&jobs, plan.device_count as usize)
        .into_iter()
        .map(|p| {
            let (lane, scenes) = match &units[p.job] {
                Unit::Scene(i) => (None, vec![runnable[*i]]),
                Unit::Lane { lane, scenes } => (
                    Some(lane.clone()),
                    scenes.iter().map(|&i| runnable[i]).collect(),
                ),
            };
            let mode = lane
                .as_ref()
                .and_then(|l| plan.manifest.lanes.get(l))
                .map_or(Prestart::Off, |l| l.prestart);
            let prestart = plan.no_lock.is_none() && mode.before_lock(first.contains(&p.job));
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

/// What the packer needs of a scene's device step.
fn spec(d: &FrozenDevice) -> SceneSpec {
    SceneSpec {
        devices: d.devices,
        exclusive: d.exclusive,
        estimate: d.estimate,
        lane: d.lane().map(str::to_string),
        order: d.order,
        variant: d.run.variant().cloned().unwrap_or_default(),
        node: d.node.clone(),
    }
}
