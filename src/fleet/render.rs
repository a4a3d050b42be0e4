//! The simulation's figures as a text table or JSON (docs/fleet.md, "Output"). Both
//! are built from the results alone, so one seed prints the same bytes every time.

use serde::Serialize;

use super::{Flow, FlowResult, FlowStats, Setup, Source};

pub const FLEET_VERSION: u32 = 1;

/// The JSON document: what was simulated, and each flow's figures.
#[derive(Debug, Serialize)]
pub struct Doc<'a> {
    pub version: u32,
    pub cards: u32,
    pub jobs: usize,
    pub arrival: String,
    pub seed: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cards_per_job: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<RunDoc<'a>>,
    pub flows: Flows<'a>,
}

/// One run's shapes, as the simulation used them.
#[derive(Debug, Serialize)]
pub struct RunDoc<'a> {
    pub report_dir: &'a str,
    pub cards: u32,
    pub old_acquisitions: usize,
    pub old_held_secs: f64,
    pub warm_secs: f64,
    pub new_held_secs: f64,
    pub device_card_secs: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct Flows<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<&'a FlowStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<&'a FlowStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub given: Option<&'a FlowStats>,
}

pub fn doc<'a>(setup: &'a Setup, results: &'a [FlowResult]) -> Doc<'a> {
    let mut flows = Flows::default();
    for r in results {
        let slot = match r.flow {
            Flow::Old => &mut flows.old,
            Flow::New => &mut flows.new,
            Flow::Given => &mut flows.given,
        };
        *slot = Some(&r.stats);
    }
    let (hold, cards_per_job, runs) = match &setup.source {
        Source::Given {
            hold,
            cards_per_job,
        } => (Some(hold.to_string()), Some(*cards_per_job), Vec::new()),
        Source::Runs { runs, .. } => (
            None,
            None,
            runs.iter()
                .map(|r| RunDoc {
                    report_dir: &r.name,
                    cards: r.cards,
                    old_acquisitions: r.old.len(),
                    old_held_secs: r.old.iter().map(|s| s.secs).sum(),
                    warm_secs: r.warm_secs,
                    new_held_secs: r.new.secs,
                    device_card_secs: r.new.device_secs * r.cards as f64,
                })
                .collect(),
        ),
    };
    Doc {
        version: FLEET_VERSION,
        cards: setup.cards,
        jobs: setup.jobs,
        arrival: setup.arrival.to_string(),
        seed: setup.seed,
        hold,
        cards_per_job,
        runs,
        flows,
    }
}

pub fn json(setup: &Setup, results: &[FlowResult]) -> String {
    let mut s = serde_json::to_string_pretty(&doc(setup, results)).expect("fleet json");
    s.push('\n');
    s
}

/// Seconds for the table: whole seconds past 100, else one decimal (two below 1 s).
fn secs(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}s")
    } else if x >= 1.0 || x == 0.0 {
        format!("{x:.1}s")
    } else {
        format!("{x:.2}s")
    }
}

/// A share as a percentage, with more digits below 1 % (device share of the old flow
/// is a few hundredths of a percent).
fn pct(x: f64) -> String {
    if x >= 0.01 || x == 0.0 {
        format!("{:.1}%", x * 100.0)
    } else {
        format!("{:.3}%", x * 100.0)
    }
}

pub fn text(setup: &Setup, results: &[FlowResult]) -> String {
    let what = match &setup.source {
        Source::Given {
            hold,
            cards_per_job,
        } => format!("hold {hold}, {cards_per_job} card(s) per job"),
        Source::Runs { runs, .. } => format!("job shapes from {} run(s)", runs.len()),
    };
    let mut out = format!(
        "fleet: {} jobs on {} cards, arrivals {}, {what}, seed {}\n",
        setup.jobs, setup.cards, setup.arrival, setup.seed
    );
    if let Source::Runs { runs, .. } = &setup.source {
        for r in runs {
            out.push_str(&format!(
                "  run {}: {} cards; old: {} acquisition(s), {} held; new: warm {} outside, {} held\n",
                r.name,
                r.cards,
                r.old.len(),
                secs(r.old.iter().map(|s| s.secs).sum()),
                secs(r.warm_secs),
                secs(r.new.secs)
            ));
        }
    }
    let header = [
        "flow",
        "wait mean",
        "p50",
        "p95",
        "wall mean",
        "queued",
        "utilization",
        "device share",
        "makespan",
    ];
    let rows: Vec<[String; 9]> = results
        .iter()
        .map(|r| {
            let s = &r.stats;
            [
                r.flow.name().to_string(),
                secs(s.mean_wait_secs),
                secs(s.p50_wait_secs),
                secs(s.p95_wait_secs),
                secs(s.mean_wall_secs),
                pct(s.queued_share),
                pct(s.utilization),
                pct(s.device_share),
                secs(s.makespan_secs),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].len())
                .chain([header[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| {
        let mut l = String::new();
        for (c, cell) in cells.iter().enumerate() {
            if c == 0 {
                l.push_str(&format!("{cell:<w$}", w = widths[c]));
            } else {
                l.push_str(&format!("  {cell:>w$}", w = widths[c]));
            }
        }
        l.push('\n');
        l
    };
    out.push_str(&line(&header));
    for r in &rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        out.push_str(&line(&cells));
    }
    out
}
