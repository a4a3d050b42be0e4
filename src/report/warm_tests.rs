//! Every line the warm reporter prints, pinned by snapshots: each step line (built,
//! built and uploaded, hit, remote hit, failed with its tail, infrastructure, skipped,
//! the input-changed and worker notes), the summary lines, plain, in colour, under `-q`
//! and `-v`. A change to what the user reads during a warm shows up here first.

use std::path::{Path, PathBuf};

use super::*;
use crate::base::failure::{FailCause, FailedStep, Failure, SkipCause, WorkerLoss};
use crate::base::ui::BarSlot;
use crate::cache::remote::Totals;
use crate::cache::Kind;
use crate::warm::events::WorkerNote;
use crate::warm::testing::{entry, plan, unit_of};

fn ui(quiet: bool, verbose: u8, color: bool) -> Ui {
    Ui {
        quiet,
        verbose,
        color,
        bars: false,
        github: false,
        bar: BarSlot::capturing(),
        words: crate::report::notice::words,
    }
}

fn finished(
    unit: usize,
    wall_secs: f64,
    outcome: UnitOutcome,
    input_changed: Option<&str>,
    worker: Option<WorkerNote>,
) -> Event {
    Event::Finished {
        unit,
        slot: 0,
        wall_secs,
        outcome,
        input_changed: input_changed.map(str::to_string),
        worker,
    }
}

/// A step's log as scenerun writes it: the `$ command` line, then `lines` of output.
fn log(dir: &Path, name: &str, lines: usize) -> PathBuf {
    let path = dir.join(name);
    let mut text = String::from("$ gen a out\n");
    for i in 1..=lines {
        text.push_str(&format!("output line {i}\n"));
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// Two warms of the plan that between them end a unit every way there is.
fn warms(p: &Plan, dir: &Path) -> [Vec<Event>; 2] {
    [first_warm(p, dir), second_warm(p, dir)]
}

/// Built, built and uploaded with notes, failed with a long log, skipped, a hit.
fn first_warm(p: &Plan, dir: &Path) -> Vec<Event> {
    let k = unit_of(p, Kind::Kernel, "a");
    let (fa, ga) = (
        unit_of(p, Kind::Fixture, "a"),
        unit_of(p, Kind::Golden, "a"),
    );
    let (fb, gb) = (
        unit_of(p, Kind::Fixture, "b"),
        unit_of(p, Kind::Golden, "b"),
    );
    let at = std::time::SystemTime::UNIX_EPOCH;
    vec![
        Event::Started {
            unit: k,
            slot: 0,
            at,
        },
        finished(
            k,
            2.5,
            UnitOutcome::Built {
                secs: 2.0,
                entry: entry(Kind::Kernel),
                sent: 0,
            },
            None,
            None,
        ),
        finished(
            fa,
            4.0,
            UnitOutcome::Failed {
                cause: FailCause::Exited { status: 1 },
                log: log(dir, "fa.log", 20),
            },
            None,
            None,
        ),
        Event::Skipped {
            unit: ga,
            cause: SkipCause::DependencyFailed,
        },
        finished(
            fb,
            1.5,
            UnitOutcome::Built {
                secs: 1.25,
                entry: entry(Kind::Fixture),
                sent: 2048,
            },
            Some("k.c"),
            Some(WorkerNote::Replaced {
                worker: "gen".into(),
                why: WorkerLoss::MemoryCap {
                    cap: 1 << 30,
                    rss: 3 << 29,
                    step: false,
                },
            }),
        ),
        finished(
            gb,
            0.0,
            UnitOutcome::Hit {
                entry: entry(Kind::Golden),
            },
            None,
            None,
        ),
    ]
}

/// Hits (one with a worker note), a remote hit, a lost worker, an infrastructure error.
fn second_warm(p: &Plan, dir: &Path) -> Vec<Event> {
    let k = unit_of(p, Kind::Kernel, "a");
    let (fa, ga) = (
        unit_of(p, Kind::Fixture, "a"),
        unit_of(p, Kind::Golden, "a"),
    );
    let (fb, gb) = (
        unit_of(p, Kind::Fixture, "b"),
        unit_of(p, Kind::Golden, "b"),
    );
    vec![
        finished(
            k,
            0.0,
            UnitOutcome::Hit {
                entry: entry(Kind::Kernel),
            },
            None,
            None,
        ),
        finished(
            fa,
            0.75,
            UnitOutcome::Downloaded {
                secs: 0.5,
                bytes: 5 << 20,
                entry: entry(Kind::Fixture),
            },
            None,
            None,
        ),
        finished(
            fb,
            0.0,
            UnitOutcome::Hit {
                entry: entry(Kind::Fixture),
            },
            None,
            Some(WorkerNote::CouldNotStart {
                worker: "gen".into(),
                why: "exited with status 127".into(),
            }),
        ),
        finished(
            ga,
            3.0,
            UnitOutcome::Failed {
                cause: FailCause::WorkerLost {
                    worker: "gold".into(),
                    loss: WorkerLoss::Died {
                        how: "killed by signal 9".into(),
                    },
                },
                log: log(dir, "ga.log", 2),
            },
            Some("a.bin"),
            None,
        ),
        finished(
            gb,
            0.25,
            UnitOutcome::Infra(anyhow::anyhow!("cannot publish: No space left on device")),
            None,
            None,
        ),
    ]
}

/// What the terminal gets from both warms, each headed, colours shown as `<ESC>`.
fn shown(ui: &Ui) -> String {
    let (dir, p) = plan();
    let mut out = String::new();
    for (i, events) in warms(&p, dir.path()).iter().enumerate() {
        let mut r = Reporter::new(ui);
        r.start(&p);
        for e in events {
            r.on(&p, e);
        }
        r.finish();
        out.push_str(&format!("--- warm {}\n{}", i + 1, ui.bar.taken()));
    }
    out.replace(&dir.path().display().to_string(), "<tmp>")
        .replace('\x1b', "<ESC>")
}

#[test]
fn every_step_line_as_the_terminal_shows_it() {
    insta::assert_snapshot!("steps_plain", shown(&ui(false, 0, false)));
}

#[test]
fn every_step_line_under_verbose() {
    insta::assert_snapshot!("steps_verbose", shown(&ui(false, 1, false)));
}

#[test]
fn every_step_line_in_colour() {
    insta::assert_snapshot!("steps_colour", shown(&ui(false, 1, true)));
}

#[test]
fn quiet_keeps_failures_skips_and_notes() {
    insta::assert_snapshot!("steps_quiet", shown(&ui(true, 0, false)));
}

/// Summaries: a clean no-op, one with failures, skips, shared keys and a remote.
fn summaries() -> Vec<Summary> {
    vec![
        Summary {
            hits: 6,
            units: 5,
            units_hit: 5,
            wall_secs: 0.04,
            saved_secs: 12.5,
            ..Summary::default()
        },
        Summary {
            built: 3,
            hits: 1,
            failed: 1,
            skipped: 1,
            units: 5,
            units_built: 2,
            units_hit: 1,
            wall_secs: 6.25,
            built_secs: 3.25,
            saved_secs: 0.5,
            remote_hits: 0,
            failed_scenes: vec![
                FailedStep {
                    scene: "a".into(),
                    kind: Kind::Fixture,
                    name: "fixture".into(),
                    failure: Failure::Failed(FailCause::Exited { status: 1 }),
                },
                FailedStep {
                    scene: "b".into(),
                    kind: Kind::Golden,
                    name: "golden".into(),
                    failure: Failure::Skipped(SkipCause::DependencyFailed),
                },
            ],
            remote: Some(Totals {
                hits: 1,
                misses: 3,
                bytes_down: 5 << 20,
                bytes_up: 2048,
                uploaded: 1,
                failures: 2,
            }),
        },
        Summary {
            built: 2,
            units: 2,
            units_built: 2,
            wall_secs: 1.0,
            built_secs: 1.5,
            remote: Some(Totals::default()),
            ..Summary::default()
        },
    ]
}

fn summary_text(ui: &Ui) -> String {
    summaries()
        .iter()
        .enumerate()
        .map(|(i, s)| {
            print_summary(s, ui);
            format!("--- summary {}\n{}", i + 1, ui.bar.taken())
        })
        .collect::<String>()
        .replace('\x1b', "<ESC>")
}

#[test]
fn every_summary_line() {
    insta::assert_snapshot!("summary_plain", summary_text(&ui(false, 0, false)));
}

#[test]
fn summary_lines_in_colour_and_under_quiet() {
    insta::assert_snapshot!("summary_colour", summary_text(&ui(false, 0, true)));
    insta::assert_snapshot!("summary_quiet", summary_text(&ui(true, 0, false)));
}

/// Every notice of a warm besides its steps, plain, under `-q` and under `-v`.
#[test]
fn every_notice() {
    let notices = || {
        [
            Notice::NotPruned,
            Notice::Pruned {
                removed: 3,
                freed: 12 << 20,
                now: None,
            },
            Notice::TraceNotWritten {
                error: "read-only file system".into(),
            },
            Notice::CacheExposed(crate::cache::Exposed {
                dir: PathBuf::from("/srv/cache"),
                mode: 0o775,
            }),
            Notice::CacheExposed(crate::cache::Exposed {
                dir: PathBuf::from("/tmp/cache"),
                mode: 0o1777,
            }),
        ]
    };
    let text: String = [
        ("plain", ui(false, 0, false)),
        ("-q", ui(true, 0, false)),
        ("-v", ui(false, 1, false)),
    ]
    .iter()
    .map(|(name, ui)| {
        for n in &notices() {
            crate::report::notice::say(ui, n);
        }
        format!("--- {name}\n{}", ui.bar.taken())
    })
    .collect();
    insta::assert_snapshot!("notices", text);
}
