//! A lane process run for real: its command and files, its watch, its endings.

use std::sync::mpsc::Receiver;

use super::*;
use std::sync::atomic::AtomicUsize;

use crate::base::template::{allowed, Template};
use crate::device::exec::FaultRules;
use crate::device::lane::files::scenes_text;
use crate::device::testing::{frozen, in_lane};
use crate::device::Frozen;

/// A frozen plan of lane scenes `names`, whose lane `l` runs `run`.
fn lane_plan(dir: &Path, names: &[&str], run: &str) -> Frozen {
    let mut f = frozen(dir, names.iter().map(|n| in_lane(n, "l", 1.0)).collect());
    f.lanes.get_mut("l").unwrap().run = Template::parse(run, allowed::LANE).unwrap();
    f
}

fn cx<'a>(f: &'a Frozen, granted: &'a [String]) -> Cx<'a> {
    Cx {
        frozen: f,
        granted,
        t0: Instant::now(),
        faults: FaultRules::default(),
        lane_procs: AtomicUsize::new(0),
    }
}

fn attempts(rx: &Receiver<Event>) -> Vec<(usize, AttemptOutcome)> {
    rx.try_iter()
        .filter_map(|e| match e {
            Event::Attempt { scene, attempt } => Some((scene, attempt.outcome)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_command_and_the_scenes_file_name_the_batch() {
    let t = tempfile::tempdir().unwrap();
    let f = lane_plan(
        t.path(),
        &["x", "y"],
        "run {devices} {args} {scenes} {platform}",
    );
    let granted: Vec<String> = vec!["4".into(), "7".into()];
    let cx = cx(&f, &granted);
    let (tx, _rx) = mpsc::channel();
    let p = LaneProcess::new(&cx, "l", 3, &[1, 0], &[1], &tx);
    let (command, env) = p.command();
    let scenes = t.path().join("lanes/l.3.scenes.jsonl");
    assert_eq!(command, format!("run 7 y x {} p", scenes.display()));
    assert_eq!(env["SCENERUN_DEVICES"], "7");
    assert_eq!(env["SCENERUN_LANE"], "l");
    assert!(env["SCENERUN_RESULTS"].ends_with("lanes/l.3.results.jsonl"));
    let lines: Vec<serde_json::Value> = scenes_text(&f, &[1, 0])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["scene"], "y");
    assert_eq!(lines[0]["args"], serde_json::json!(["y"]));
    assert!(lines[0]["kernels"].is_null() && lines[0]["fixture"].is_null());
}

#[test]
fn prepare_writes_the_scenes_file_and_clears_an_old_results_file() {
    let t = tempfile::tempdir().unwrap();
    let f = lane_plan(t.path(), &["x"], "true");
    let granted = vec!["0".to_string()];
    let cx = cx(&f, &granted);
    let (tx, _rx) = mpsc::channel();
    let mut p = LaneProcess::new(&cx, "l", 0, &[0], &[0], &tx);
    std::fs::create_dir_all(t.path().join("lanes")).unwrap();
    std::fs::write(&p.files.results, "stale\n").unwrap();
    p.prepare("the command").unwrap();
    assert!(!p.files.results.exists());
    assert!(p.files.scenes.is_file());
    assert_eq!(std::fs::read_to_string(&p.log).unwrap(), "$ the command\n");
    assert_eq!(p.mark, 14, "output before the scenes is not theirs");
}

#[test]
fn a_lane_process_is_watched_to_its_end_and_its_scenes_settled() {
    let t = tempfile::tempdir().unwrap();
    // x passes; y starts and the process exits 3 under it: y crashed the lane.
    let run = r#"printf '%s\n' '{"scene":"x","event":"start"}' '{"scene":"x","event":"end","outcome":"passed"}' '{"scene":"y","event":"start"}' >> {results}; echo dying; exit 3"#;
    let f = lane_plan(t.path(), &["x", "y", "z"], run);
    let granted = vec!["0".to_string()];
    let cx = cx(&f, &granted);
    let (tx, rx) = mpsc::channel();
    let mut p = LaneProcess::new(&cx, "l", 0, &[0, 1, 2], &[0], &tx);
    let (command, env) = p.command();
    p.prepare(&command).unwrap();
    let ended = p.run(&command, &env);
    assert_eq!(ended.as_ref().unwrap(), &Ended::Exited(3));
    assert_eq!(attempts(&rx), [(0, AttemptOutcome::Test(Outcome::Passed))]);
    let (end, how) = p.ending(&ended);
    assert!(
        matches!(end, ProcessEnd::Exited { ok: false, .. }),
        "{end:?}"
    );
    assert_eq!(how, "exited with status 3");
    // z never started: it goes back, for a fresh process.
    assert_eq!(p.finish(&end, how, 1.0, 0), (vec![2], vec![]));
    let events: Vec<Event> = rx.try_iter().collect();
    let crashed = events.iter().find_map(|e| match e {
        Event::Attempt { scene: 1, attempt } => Some(attempt),
        _ => None,
    });
    let crashed = crashed.expect("y's attempt");
    assert_eq!(crashed.outcome, AttemptOutcome::Test(Outcome::Failed));
    assert!(
        crashed.message.as_deref().unwrap().contains("dying"),
        "{crashed:?}"
    );
    let record = events.iter().find_map(|e| match e {
        Event::Lane(r) => Some(r),
        _ => None,
    });
    assert_eq!(record.unwrap().scenes, ["x", "y", "z"]);
}

#[test]
fn a_scene_past_its_timeout_stops_the_process() {
    let t = tempfile::tempdir().unwrap();
    let run = r#"printf '%s\n' '{"scene":"x","event":"start"}' >> {results}; exec sleep 30"#;
    let mut f = lane_plan(t.path(), &["x", "y"], run);
    f.scenes[0].device.as_mut().unwrap().timeout_secs = Some(0.2);
    let granted = vec!["0".to_string()];
    let cx = cx(&f, &granted);
    let (tx, rx) = mpsc::channel();
    let mut p = LaneProcess::new(&cx, "l", 0, &[0, 1], &[0], &tx);
    let (command, env) = p.command();
    p.prepare(&command).unwrap();
    let ended = p.run(&command, &env);
    assert_eq!(p.killing, Some(ProcessEnd::SceneTimeout));
    // Said once the process is stopped (what it printed meanwhile is the scene's).
    assert_eq!(attempts(&rx), []);
    let (end, how) = p.ending(&ended);
    assert_eq!(
        (end.clone(), how.as_str()),
        (ProcessEnd::SceneTimeout, "killed after a scene timeout")
    );
    // y never started: it goes back, for a fresh process, and is not settled here.
    assert_eq!(p.finish(&end, how, 1.0, 0), (vec![1], vec![]));
    assert_eq!(attempts(&rx), [(0, AttemptOutcome::TimedOut)]);
}

#[test]
fn ending_names_a_device_fault_and_quarantines_the_process_ids() {
    let t = tempfile::tempdir().unwrap();
    let f = lane_plan(t.path(), &["x"], "true");
    let granted: Vec<String> = vec!["0".into(), "1".into()];
    let mut cx = cx(&f, &granted);
    cx.faults = FaultRules::new(Some(&crate::manifest::DeviceFault {
        exit_codes: vec![42],
        patterns: Vec::new(),
    }));
    let (tx, rx) = mpsc::channel();
    let mut p = LaneProcess::new(&cx, "l", 0, &[0], &[1], &tx);
    let (end, how) = p.ending(&Ok(Ended::Exited(42)));
    assert_eq!(end, ProcessEnd::Fault);
    assert_eq!(
        how,
        "exited with status 42; exit status 42 is a device fault"
    );
    let faults: Vec<Vec<usize>> = rx
        .try_iter()
        .filter_map(|e| match e {
            Event::Fault { slots } => Some(slots),
            _ => None,
        })
        .collect();
    assert_eq!(faults, [vec![1]]);
    // A fault it names on ids of another process is ignored, with a warning.
    assert!(!p.fault_slots(&["0".into()]));
    assert!(matches!(rx.try_recv(), Ok(Event::Warning(_))));
    // Stopped for a reason of its own: that reason, whatever the exit status.
    p.killing = Some(ProcessEnd::LaneTimeout);
    let (end, how) = p.ending(&Ok(Ended::Signaled(15)));
    assert_eq!(
        (end, how.as_str()),
        (ProcessEnd::LaneTimeout, "killed at the lane timeout")
    );
}
