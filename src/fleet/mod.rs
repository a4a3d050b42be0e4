//! `scenerun fleet simulate` (docs/fleet.md): what a fleet of runners sharing cards
//! gains from `warm && device`, by a seeded discrete-event simulation of jobs through one
//! FIFO lock queue. `sim` is the pure event loop (its seeded inputs come from
//! `crate::base::sampling`); `shapes`
//! turns this project's own reports and history into job shapes (through the packer and
//! estimates `device --plan` uses); `render` and `chart` print and draw the outcome.
//!
//! Invariant: every flow of one simulation sees the same arrival times (drawn from
//! their own stream of the seed), so flows differ only by their job shapes.

pub mod chart;
pub mod render;
pub mod shapes;
pub mod sim;

use crate::base::sampling::{Arrival, Hold, Rng};
use shapes::RunShape;
use sim::{Job, Outcome, Point, Segment, SimError};

/// The generator stream of arrival gaps, and of holds of jobs given by flags.
const ARRIVALS: u64 = 0;
const HOLDS: u64 = 1;

/// The job shapes a flow's jobs take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Flow {
    /// The warm work inside the lock, several acquisitions per job.
    Old,
    /// `warm && device`: warm outside, one acquisition for the device work.
    New,
    /// Jobs given by `--hold` and `--cards-per-job`.
    Given,
}

impl Flow {
    pub fn name(self) -> &'static str {
        match self {
            Flow::Old => "old",
            Flow::New => "new",
            Flow::Given => "given",
        }
    }
}

/// Where the jobs' shapes come from.
#[derive(Debug, Clone)]
pub enum Source {
    Given { hold: Hold, cards_per_job: u32 },
    Runs { runs: Vec<RunShape>, compare: bool },
}

/// One simulation's inputs.
#[derive(Debug, Clone)]
pub struct Setup {
    pub cards: u32,
    pub jobs: usize,
    pub arrival: Arrival,
    pub seed: u64,
    pub source: Source,
    /// Keep the queue and busy timeline (for the chart).
    pub timeline: bool,
}

/// One flow's figures (docs/fleet.md, "Output").
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowStats {
    pub jobs: usize,
    pub acquisitions: u64,
    pub mean_wait_secs: f64,
    pub p50_wait_secs: f64,
    pub p95_wait_secs: f64,
    pub mean_wall_secs: f64,
    /// Mean wait ÷ mean wall time: the share of a job's wall time spent queued.
    pub queued_share: f64,
    /// Card-seconds held ÷ (cards × makespan).
    pub utilization: f64,
    /// Device card-seconds ÷ card-seconds held.
    pub device_share: f64,
    pub makespan_secs: f64,
}

/// One flow's result.
#[derive(Debug, Clone)]
pub struct FlowResult {
    pub flow: Flow,
    pub stats: FlowStats,
    pub timeline: Vec<Point>,
    /// Arrivals, grants and releases simulated.
    pub events: u64,
}

impl FlowStats {
    pub fn of(pool: u32, o: &Outcome) -> FlowStats {
        let n = o.waits.len();
        let mean = |sum: f64| if n == 0 { 0.0 } else { sum / n as f64 };
        let mean_wait = mean(o.waits.iter().sum());
        let mean_wall = mean(o.wall_secs);
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        FlowStats {
            jobs: n,
            acquisitions: o.acquisitions,
            mean_wait_secs: mean_wait,
            p50_wait_secs: percentile(&o.waits, 0.50),
            p95_wait_secs: percentile(&o.waits, 0.95),
            mean_wall_secs: mean_wall,
            queued_share: ratio(mean_wait, mean_wall),
            utilization: ratio(o.held_card_secs, pool as f64 * o.makespan),
            device_share: ratio(o.device_card_secs, o.held_card_secs),
            makespan_secs: o.makespan,
        }
    }
}

/// The nearest-rank percentile (`q` in 0..=1) of `values`; 0 when there are none.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    let (_, x, _) = v.select_nth_unstable_by(rank - 1, f64::total_cmp);
    *x
}

/// Arrival times: the first job at 0, each next one a gap later.
pub fn arrivals(arrival: Arrival, seed: u64) -> impl Iterator<Item = f64> {
    let mut rng = Rng::new(seed, ARRIVALS);
    let mut t = 0.0;
    let mut first = true;
    std::iter::from_fn(move || {
        if !first {
            t += arrival.gap(&mut rng);
        }
        first = false;
        Some(t)
    })
}

/// Run every flow the setup asks for.
pub fn run(setup: &Setup) -> Result<Vec<FlowResult>, SimError> {
    let flows: Vec<Flow> = match &setup.source {
        Source::Given { .. } => vec![Flow::Given],
        Source::Runs { compare: true, .. } => vec![Flow::Old, Flow::New],
        Source::Runs { compare: false, .. } => vec![Flow::New],
    };
    flows
        .into_iter()
        .map(|flow| {
            let out = sim::simulate(setup.cards, setup.jobs, jobs(setup, flow), setup.timeline)?;
            Ok(FlowResult {
                flow,
                stats: FlowStats::of(setup.cards, &out),
                events: out.events,
                timeline: out.timeline,
            })
        })
        .collect()
}

/// The jobs of one flow, made as the simulation asks for them.
fn jobs(setup: &Setup, flow: Flow) -> Box<dyn Iterator<Item = Job> + '_> {
    let times = arrivals(setup.arrival, setup.seed).take(setup.jobs);
    match &setup.source {
        Source::Given {
            hold,
            cards_per_job,
        } => {
            let mut rng = Rng::new(setup.seed, HOLDS);
            Box::new(times.map(move |arrival| {
                let secs = hold.draw(&mut rng);
                Job {
                    arrival,
                    cards: *cards_per_job,
                    before: 0.0,
                    holds: vec![Segment {
                        secs,
                        device_secs: secs,
                    }],
                }
            }))
        }
        Source::Runs { runs, .. } => Box::new(times.enumerate().map(move |(i, arrival)| {
            // Runs take turns, so the mix holds each run in its own share.
            let run = &runs[i % runs.len()];
            run.job(flow, arrival)
        })),
    }
}

#[cfg(test)]
mod tests;
