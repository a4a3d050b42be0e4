//! Frozen plans for unit tests: scenes with a device step, and a lane `l` of 1 id.

use std::collections::BTreeMap;
use std::path::Path;

use super::events::{Attempt, AttemptOutcome};
use super::{Frozen, FrozenDevice, FrozenScene, FROZEN_VERSION};
use crate::base::template::{allowed, Template};
use crate::manifest::{DeviceRun, LaneConfig};

/// A plain scene needing `devices` ids (`exclusive` or not), with `estimate`.
pub fn plain(name: &str, devices: usize, exclusive: bool, estimate: f64) -> FrozenScene {
    scene(
        name,
        DeviceRun::Command(Template::parse("true", allowed::DEVICE).unwrap()),
        devices,
        exclusive,
        estimate,
    )
}

pub fn in_lane(name: &str, lane: &str, estimate: f64) -> FrozenScene {
    let run = DeviceRun::Lane {
        lane: lane.into(),
        args: vec![name.into()],
        variant: Default::default(),
    };
    scene(name, run, 1, false, estimate)
}

fn scene(name: &str, run: DeviceRun, devices: usize, ex: bool, est: f64) -> FrozenScene {
    FrozenScene {
        name: name.into(),
        nodeid: None,
        case: None,
        selection: None,
        platform: "p".into(),
        env: BTreeMap::new(),
        device: Some(FrozenDevice {
            run,
            devices,
            exclusive: ex,
            timeout_secs: None,
            retries: 1,
            estimate: Some(est),
            stop: None,
            order: Default::default(),
            node: None,
            writes: Vec::new(),
        }),
        kernels: Vec::new(),
        fixture: None,
        golden: None,
        warm_failure: None,
        verdict: None,
    }
}

pub fn frozen(dir: &Path, scenes: Vec<FrozenScene>) -> Frozen {
    let lane = LaneConfig {
        name: "l".into(),
        run: Template::parse("true", allowed::LANE).unwrap(),
        devices: 1,
        restarts: 0,
        timeout_secs: None,
        env: BTreeMap::new(),
        stop: None,
        restart_on: None,
        max_restarts: 3,
        prestart: crate::manifest::Prestart::Off,
        args: Vec::new(),
    };
    Frozen {
        version: FROZEN_VERSION,
        manifest_dir: dir.into(),
        job_dir: dir.into(),
        run_dir: dir.into(),
        report_dir: dir.into(),
        results: dir.join("results.json"),
        device_env: "TASK_DEVICE".into(),
        device_count: 1,
        grace_secs: 1.0,
        outer: None,
        lock_tool: None,
        through_lock: false,
        scenes,
        lanes: [("l".to_string(), lane)].into(),
        lane_startup: BTreeMap::new(),
        device_fault: None,
        prestarted: Vec::new(),
        readonly: Vec::new(),
    }
}

/// An attempt that ended `outcome` on `devices`: 1 s long, nothing else said.
pub fn attempt(outcome: AttemptOutcome, devices: &[&str]) -> Attempt {
    Attempt {
        outcome,
        devices: devices.iter().map(|d| d.to_string()).collect(),
        start_secs: 0.0,
        duration_secs: 1.0,
        message: None,
        output_tail: None,
        log: None,
        lane_process: None,
    }
}
