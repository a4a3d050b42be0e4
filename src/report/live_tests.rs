//! Every kind of live line, as the inner run writes it (`device::live::Writer`) and the
//! terminal shows it (plain, in colour, under `-q`), and every notice of the outer, pinned by
//! snapshots: a change to what the user reads during a device run shows up here first.

use std::path::PathBuf;

use super::*;
use crate::base::notice::{LockLoss, ShimMissing};
use crate::base::ui::BarSlot;
use crate::device::events::Event;
use crate::device::live::Writer;
use crate::device::SceneOutcome;

fn ui(quiet: bool, color: bool) -> Ui {
    Ui {
        quiet,
        verbose: 0,
        color,
        bars: false,
        github: false,
        bar: BarSlot::default(),
        words: crate::report::notice::words,
    }
}

fn attempt(outcome: AttemptOutcome, message: Option<&str>, tail: Option<&str>) -> Attempt {
    Attempt {
        outcome,
        devices: vec!["0".into(), "1".into()],
        start_secs: 0.5,
        duration_secs: 1.25,
        message: message.map(str::to_string),
        output_tail: tail.map(str::to_string),
        log: Some(PathBuf::from("logs/s.log")),
        lane_process: None,
    }
}

fn lane(scenes: usize, startup: Option<f64>, before: Option<f64>, restart: bool) -> Event {
    Event::Lane(LaneRecord {
        lane: "npu".into(),
        devices: vec!["2".into(), "3".into()],
        start_secs: 0.0,
        startup_secs: startup,
        duration_secs: 4.0,
        restarts: 0,
        restart_reason: restart.then(|| "AICPU stream poisoned".into()),
        variant: None,
        scenes: (0..scenes).map(|i| format!("s{i}")).collect(),
        ended: if restart {
            "restarted: AICPU stream poisoned".into()
        } else {
            "exited with status 0".into()
        },
        log: PathBuf::from("logs/lane-0.log"),
        prestarted: before.is_some(),
        startup_before_lock_secs: before,
    })
}

/// A lane's results line of no known kind, as the inner run notes it.
fn garbage_line() -> Event {
    Event::Warning(crate::base::notice::LaneNotice::Garbage {
        why: "not JSON (expected value at line 1 column 1)".into(),
        line: "garbage".into(),
    })
}

/// A run that writes one line of every kind, read back from the live file.
fn every_line() -> Vec<Live> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.jsonl");
    let mut r = Writer::new(&path, 12);
    r.run(&["0", "1", "2", "3"].map(String::from));
    r.settled(
        "warm_broke",
        SceneOutcome::FailedInWarm,
        Some("error: cc exited 1\nx.c:3: error"),
    );
    r.settled(
        "no_device_step",
        SceneOutcome::PASSED,
        Some("not shown: a pass"),
    );
    let attempt_event = |a: Attempt| Event::Attempt {
        scene: 0,
        attempt: a,
    };
    use crate::base::verdict::Outcome::*;
    use AttemptOutcome::*;
    for (name, a, follow) in [
        (
            "vector_add",
            attempt(Test(Passed), None, None),
            FollowUp::Final,
        ),
        (
            "skips",
            attempt(Test(Skipped), Some("no card"), None),
            FollowUp::Final,
        ),
        (
            "known_bug",
            attempt(Test(Xfailed), Some("known"), None),
            FollowUp::Final,
        ),
        ("lucky", attempt(Test(Xpassed), None, None), FollowUp::Final),
        (
            "case_2",
            attempt(
                Test(NotReached),
                Some("an earlier case of its node failed"),
                None,
            ),
            FollowUp::Final,
        ),
        (
            "matmul",
            attempt(
                Test(Failed),
                Some("MISMATCH with golden"),
                Some("line 1\nline 2"),
            ),
            FollowUp::Retry,
        ),
        (
            "matmul",
            attempt(TimedOut, None, Some("still computing")),
            FollowUp::Final,
        ),
        (
            "conv",
            attempt(DeviceFault, Some("exit status 139 is a device fault"), None),
            FollowUp::FaultRerun,
        ),
        (
            "conv",
            attempt(Test(Error), Some("fixture setup failed"), None),
            FollowUp::Final,
        ),
        (
            "pool",
            attempt(CutShort, Some("the lane process restarted"), None),
            FollowUp::InLane,
        ),
        ("pool", attempt(Interrupted, None, None), FollowUp::Final),
        (
            "never",
            attempt(NotRun, Some("ids exhausted"), None),
            FollowUp::Final,
        ),
    ] {
        r.event(&attempt_event(a), name, follow);
    }
    r.event(&garbage_line(), "", FollowUp::Final);
    r.event(&lane(1, Some(0.5), None, false), "", FollowUp::Final);
    r.event(&lane(3, None, None, true), "", FollowUp::Final);
    r.event(&lane(2, Some(0.25), Some(1.5), false), "", FollowUp::Final);
    r.event(&Event::Fault { slots: vec![0] }, "", FollowUp::Final);
    let text = std::fs::read_to_string(&path).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Lines as the terminal gets them, each headed by what the live file says of it.
fn shown(ui: &Ui) -> String {
    every_line()
        .iter()
        .map(|l| {
            let head = format!("--- {}/{} loud={} ok={:?}", l.done, l.total, l.loud, l.ok);
            match render(ui, l) {
                // Escaped as `Ui::above` writes it.
                Some(t) => format!("{head}\n{}\n", ui.safe(&t).replace('\x1b', "<ESC>")),
                None => format!("{head} (not shown)\n"),
            }
        })
        .collect()
}

#[test]
fn every_live_line_as_the_terminal_shows_it() {
    insta::assert_snapshot!("live_plain", shown(&ui(false, false)));
}

#[test]
fn every_live_line_in_colour() {
    insta::assert_snapshot!("live_colour", shown(&ui(false, true)));
}

#[test]
fn quiet_keeps_failures_and_warnings() {
    insta::assert_snapshot!("live_quiet", shown(&ui(true, false)));
}

/// Every notice of the outer part of the phase, and whether `-q` keeps it.
#[test]
fn every_notice_of_the_outer() {
    let notices = [
        Notice::LaneNotPrestarted {
            lane: "npu".into(),
            error: "No such file or directory (os error 2)".into(),
        },
        Notice::NoForkServer {
            why: "exited with status 1 before it was ready".into(),
        },
        Notice::Prestarted(vec![("cpu".into(), 1), ("npu".into(), 2)]),
        Notice::TakingLock {
            command: "flock /tmp/npu.lock sh -c 'exec scenerun inner plan.json'".into(),
        },
        Notice::LockRanInnerTwice,
        Notice::LockKilledAfterRelease {
            release_timeout: std::time::Duration::from_secs(60),
        },
        Notice::AllFailedInWarm,
        Notice::AllDecidedInWarm,
        Notice::NoHealthyDevice {
            quarantined: vec!["0".into(), "3".into()],
        },
        Notice::CompileLogIgnored { lines: 3 },
        Notice::CompilesNotSigned {
            why: "Address already in use".into(),
        },
        Notice::ShimRefused {
            pid: 4242,
            runs: "/usr/libexec/qemu-binfmt/aarch64-binfmt-P".into(),
            me: "/work/target/aarch64-unknown-linux-gnu/debug/scenerun".into(),
        },
    ];
    let text: String = notices
        .iter()
        .map(|n| {
            let (line, level) = crate::report::notice::line(n);
            let kept = level == crate::report::notice::Level::Always;
            format!(
                "{} {line}\n",
                if kept { "[-q keeps]" } else { "[info]    " }
            )
        })
        .collect();
    insta::assert_snapshot!("notices", text);
}

/// The notices that joined the device phase's when its last lines moved to report/:
/// a compiler left without a shim, and what the inner run says on its own stderr.
#[test]
fn the_shim_and_inner_run_notices() {
    let notices = [
        Notice::ShimLeftOut {
            compiler: "nvcc".into(),
            why: ShimMissing::NotOnPath,
        },
        Notice::ShimLeftOut {
            compiler: "cc".into(),
            why: ShimMissing::NoIdentity {
                error: "`cc --version` exited with status 1".into(),
            },
        },
        Notice::GrantRefused {
            why: "lock.device_env: $NPU_IDS is not set or empty".into(),
        },
        Notice::InnerAgain,
        Notice::LockLost(LockLoss::Outer { pid: 41 }),
        Notice::LockLost(LockLoss::LockTool { pid: 42 }),
        Notice::LockLost(LockLoss::Parent),
    ];
    let text: String = notices
        .iter()
        .map(|n| {
            let (line, level) = crate::report::notice::line(n);
            let kept = level == crate::report::notice::Level::Always;
            format!(
                "{} {line}\n",
                if kept { "[-q keeps]" } else { "[info]    " }
            )
        })
        .collect();
    insta::assert_snapshot!("shim_and_inner_notices", text);
}
