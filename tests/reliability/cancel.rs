//! Cancellation never frees cards under a running step (docs/device.md, cancellation):
//! SIGINT and SIGTERM to `scenerun device`, `kill -9` of it, and `kill -9` of the lock
//! tool, at random moments. Invariants counted in every round:
//! - no process of any device step is alive 0.5 s after the lock tool released;
//! - no device step started after the release (a step's script logs its start; one
//!   spawned just before the release may log up to `STARTUP` later);
//! - a signalled `device` exits 2 with report.json and junit.xml written.

use std::fs;
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::*;
use crate::common::*;

/// How a round ends the device phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    Int,
    Term,
    Outer9,
    LockTool9,
}

impl Kill {
    const ALL: [Kill; 4] = [Kill::Int, Kill::Term, Kill::Outer9, Kill::LockTool9];
}

/// Six scenes on a grant of two ids (so more would start later), each step leaving a
/// child in its group; some ignore SIGTERM (the grace, then SIGKILL). Every step
/// process carries `CANCEL_TOKEN` in its environment.
fn cancel_suite(token: &str) -> Suite {
    let s = Suite::new();
    s.script(
        "device.sh",
        "#!/bin/sh\n# SCENE SECS STUBBORN\necho \"$1 $(date +%s.%N)\" >> starts.log\n\
         [ \"$3\" = 1 ] && trap '' TERM\n\
         sh -c \"[ $3 = 1 ] && trap '' TERM; sleep 300; :\" &\n\
         sleep \"$2\"\necho \"$1 done\" >> done.log\n",
    );
    let mut y = format!(
        "version: 1\nenv:\n  CANCEL_TOKEN: {token}\nlock:\n  submit: {}\n  device_count: 2\n  grace: 1s\nscenes:\n",
        yq(&format!(
            "{TASK_SUBMIT} --timeout 60 --device auto --device-num {{device_count}} --run {{run}}"
        ))
    );
    for (i, (secs, stubborn)) in [(0.4, 0), (1.5, 1), (0.8, 0), (3.0, 1), (0.6, 0), (2.0, 0)]
        .iter()
        .enumerate()
    {
        y.push_str(&format!(
            "  - name: c{i}\n    device:\n      run: \"./device.sh {{scene}} {secs} {stubborn}\"\n"
        ));
    }
    s.manifest(&y);
    s
}

/// Live processes of device steps and lane processes (their environment holds the
/// scene or lane variable and the suite's token).
fn step_procs(token: &str) -> Vec<String> {
    let want = format!("CANCEL_TOKEN={token}");
    live_procs()
        .into_iter()
        .filter(|(_, p, _)| {
            let env = fs::read(p.join("environ")).unwrap_or_default();
            let env = String::from_utf8_lossy(&env);
            env.split('\0').any(|v| v == want)
                && env
                    .split('\0')
                    .any(|v| v.starts_with("SCENERUN_SCENE=") || v.starts_with("SCENERUN_LANE="))
        })
        .map(|(pid, _, cmd)| format!("{pid}: {cmd}"))
        .collect()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `(kind, fields)` events of the stand-in's log.
fn events(path: &Path) -> Vec<(String, BTreeMap<String, String>)> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let kind = w.next()?.to_string();
            let f = w
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            Some((kind, f))
        })
        .collect()
}

fn event_t(ev: &[(String, BTreeMap<String, String>)], kind: &str) -> Option<f64> {
    ev.iter()
        .find(|(k, _)| k == kind)
        .and_then(|(_, f)| f.get("t")?.parse().ok())
}

/// Step start times from `starts.log`.
fn starts(s: &Suite) -> Vec<(String, f64)> {
    s.read("starts.log")
        .lines()
        .filter_map(|l| {
            let (name, t) = l.split_once(' ')?;
            Some((name.to_string(), t.trim().parse().ok()?))
        })
        .collect()
}

#[derive(Default)]
struct Tally {
    rounds: usize,
    by_kind: BTreeMap<String, usize>,
    landed_while_held: usize,
    steps_started: usize,
    /// Rounds whose kill landed while device step processes were running.
    under_running_steps: usize,
    alive_after: usize,
    started_after: usize,
    /// The latest first line of a step after a release, within `STARTUP` (ms).
    latest_start_ms: f64,
}

/// A step logs its start from its script's first line, which runs a little after
/// scenerun spawned it: a step spawned just before the release may log just after it.
/// A step logging later than this was spawned after the release.
const STARTUP: f64 = 0.1;

#[test]
fn cancellation_never_frees_cards_under_a_running_step() {
    const T: &str = "cancellation";
    let rounds = pick(4, 24);
    let mut rng = Rng::new(T);
    let mut faults = Faults::new(T);
    let mut tally = Tally::default();
    for round in 0..rounds {
        let kill = Kill::ALL[round % 4];
        let token = format!("cancel{}x{round}", std::process::id());
        let s = cancel_suite(&token);
        let log = s.path("lock-events.log");
        let mut cmd = sr(&s, &["device"]);
        // The stand-in's grace is longer than scenerun's, as a fleet tool's would be.
        cmd.env("TASK_SUBMIT_GRACE", "4");
        let t0 = Instant::now();
        let (mut child, cap) = start(cmd);
        // A random moment: mostly while the lock is held, sometimes before it.
        let before_lock = rng.chance(0.15) && kill != Kill::LockTool9;
        if !before_lock {
            let _ = wait_until(secs(60), || {
                event_t(&events(&log), "acquire").is_some()
                    || child.try_wait().ok().flatten().is_some()
            });
        }
        sleep(Duration::from_secs_f64(rng.unit() * 2.5));
        let held = event_t(&events(&log), "acquire").is_some()
            && event_t(&events(&log), "release").is_none();
        let what = format!("round {round} {kill:?}");
        let mut killed_at = None;
        let lock_pid = events(&log)
            .iter()
            .find(|(k, _)| k == "acquire")
            .and_then(|(_, f)| f.get("pid").cloned());
        let alive_before = step_procs(&token).len();
        match kill {
            Kill::Int => unsafe {
                libc::kill(child.id() as i32, libc::SIGINT);
            },
            Kill::Term => unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            },
            Kill::Outer9 => unsafe {
                libc::kill(child.id() as i32, libc::SIGKILL);
            },
            Kill::LockTool9 => {
                if let Some(p) = &lock_pid {
                    killed_at = Some(unix_now());
                    unsafe { libc::kill(p.parse().unwrap(), libc::SIGKILL) };
                }
            }
        }
        // Watch the lock tool while the run ends: the moment it is gone counts as a
        // release too (a SIGKILLed stand-in logs none, but its locks are free then).
        let mut tool_gone: Option<f64> = None;
        let t_end = Instant::now();
        while child.try_wait().ok().flatten().is_none() && t_end.elapsed() < LIMIT {
            if tool_gone.is_none() && lock_pid.as_ref().is_some_and(|p| !pid_alive(p)) {
                tool_gone = Some(unix_now());
            }
            sleep(Duration::from_millis(10));
        }
        let run = finish(child, cap, secs(1));
        // The release: the stand-in's own event, or the moment its kill freed the locks.
        let _ = wait_until(secs(60), || {
            killed_at.is_some()
                || event_t(&events(&log), "release").is_some()
                || event_t(&events(&log), "acquire").is_none() && step_procs(&token).is_empty()
        });
        let ev = events(&log);
        let release = match (killed_at.or_else(|| event_t(&ev, "release")), tool_gone) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tally.rounds += 1;
        *tally.by_kind.entry(format!("{kill:?}")).or_default() += 1;
        if held {
            tally.landed_while_held += 1;
        }
        if alive_before > 0 {
            tally.under_running_steps += 1;
        }
        if let Some(rel) = release {
            // Look at release + 0.5 s (or now, if that is past: nothing comes back).
            let wait = rel + 0.5 - unix_now();
            if wait > 0.0 {
                sleep(Duration::from_secs_f64(wait));
            }
            let left = step_procs(&token);
            if !left.is_empty() {
                tally.alive_after += left.len();
                faults.add(format!(
                    "{what}: {} step process(es) alive 0.5 s after the release: {left:?}\n{}",
                    left.len(),
                    run.desc()
                ));
            }
            let st = starts(&s);
            tally.steps_started += st.len();
            for (name, t) in &st {
                if *t > rel {
                    tally.latest_start_ms = tally.latest_start_ms.max((t - rel) * 1000.0);
                }
                if *t > rel + STARTUP {
                    tally.started_after += 1;
                    faults.add(format!(
                        "{what}: step {name} started {:.3}s after the release",
                        t - rel
                    ));
                }
            }
        }
        // Whatever happened, nothing may be left running.
        let left = survivors(|| step_procs(&token), secs(20));
        faults.check(left.is_empty(), || {
            format!("{what}: step processes never ended: {left:?}")
        });
        // The ending the caller sees.
        match kill {
            Kill::Int | Kill::Term => {
                let finished_first = run.is(0) && !held;
                faults.check(run.is(2) || finished_first, || {
                    format!("{what}: expected exit 2: {}", run.desc())
                });
                if run.is(2) {
                    let rep = s.record("report.json").unwrap_or_default();
                    faults.check(rep["exit_code"] == 2, || {
                        format!("{what}: report.json exit_code: {}", rep["exit_code"])
                    });
                    let junit = s.read("build/scenerun/junit.xml");
                    let cut = rep["scenes"]
                        .as_array()
                        .map(|a| a.iter().filter(|x| x["outcome"] != "passed").count())
                        .unwrap_or(0);
                    faults.check(cut == 0 || junit.contains("type=\"interrupted\""), || {
                        format!(
                            "{what}: junit lacks interrupted errors:\n{junit}\n--- lock.log\n{}\n--- lock events\n{}",
                            s.read("build/scenerun/lock.log"),
                            s.read("lock-events.log")
                        )
                    });
                }
            }
            Kill::LockTool9 => {
                faults.check(
                    !run.hung && matches!(run.code, Some(0) | Some(1) | Some(3)),
                    || {
                        format!(
                            "{what}: expected exit 3 (or 0/1 if all had ended): {}",
                            run.desc()
                        )
                    },
                );
            }
            Kill::Outer9 => {}
        }
        // The pool is free again: a new acquisition succeeds at once.
        let mut probe = StdCommand::new(TASK_SUBMIT);
        probe
            .args([
                "--timeout",
                "20",
                "--device",
                "auto",
                "--device-num",
                "4",
                "--run",
                "true",
            ])
            .env("TASK_SUBMIT_POOL", s.path("pool"))
            .env("TASK_SUBMIT_DEVICES", "0-3")
            .stdin(Stdio::null());
        let p = exec(probe, secs(60));
        faults.check(p.is(0), || {
            format!("{what}: pool not free afterwards: {}", p.desc())
        });
        eprintln!(
            "{what}: {:.1}s, exit {:?}",
            t0.elapsed().as_secs_f64(),
            run.code
        );
    }
    figure(
        T,
        &format!(
            "{} rounds ({:?}), {} landed while the lock was held, {} under running step processes, {} steps started; step processes alive 0.5 s after release: {}; steps started after release: {} (latest first line of a step {:.0} ms after a release, within the {} ms a script needs to start); failures: {}",
            tally.rounds,
            tally.by_kind,
            tally.landed_while_held,
            tally.under_running_steps,
            tally.steps_started,
            tally.alive_after,
            tally.started_after,
            tally.latest_start_ms,
            STARTUP * 1000.0,
            faults.count()
        ),
    );
    faults.finish();
}

/// A device step whose SIGTERM handler needs 1.5 s for its cleanup (then writes
/// `cleaned-<name>`), run by `sh -c` as every step is; its background child stays in its
/// group. Every process carries `CANCEL_TOKEN`.
const SLOW_TERM: &str = r#"#!/bin/bash
name=$1
trap 'sleep 1.5; echo done > "cleaned-$name"; exit 0' TERM
echo up > "up-$name"
sleep 300 &
wait
"#;

/// A lane runtime with the same handler, its one scene started and never ending.
const SLOW_TERM_LANE: &str = r#"#!/bin/bash
trap 'sleep 1.5; echo done > cleaned-lane; exit 0' TERM
scene=$(sed -n 's/.*"scene":"\([^"]*\)".*/\1/p' "$SCENERUN_SCENES" | head -n 1)
printf '{"scene":"%s","event":"start"}\n' "$scene" >> "$SCENERUN_RESULTS"
echo up > up-lane
sleep 300 &
wait
"#;

/// A real pytest lane whose conftest's SIGTERM handler needs 1.5 s, as a device
/// runtime's teardown does.
const SLOW_TERM_CONFTEST: &str = r#"import os, signal, time

def _cleanup(signum, frame):
    time.sleep(1.5)
    open("cleaned-pytest", "w").write("done")
    os._exit(0)

signal.signal(signal.SIGTERM, _cleanup)
"#;

/// The test virtualenv's python (pytest in it), or a failure saying how to make it.
fn venv_python() -> PathBuf {
    let py = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/venv/bin/python");
    assert!(
        StdCommand::new(&py)
            .args(["-c", "import pytest"])
            .status()
            .is_ok_and(|s| s.success()),
        "needs {} with pytest: run `bash .ci/deps.sh`",
        py.display()
    );
    py
}

/// A cancel through a lock tool that forwards SIGTERM to its run's whole process group
/// (as Slurm does) or to its run's leader only: a plain step, a shell lane process and a
/// real pytest lane whose SIGTERM handlers need 1.5 s all finish their cleanup
/// (`lock.grace` is 5 s), and no
/// step process is alive 0.5 s after the lock tool released. Before the inner run was
/// the lock tool's run itself (`exec`) and a stopped group's leader exit stopped ending
/// the grace, no handler got to finish.
#[test]
fn a_cancel_gives_steps_the_grace_whatever_the_lock_tool_forwards() {
    for (forward, sig) in [("group", libc::SIGTERM), ("leader", libc::SIGINT)] {
        let token = format!("grace{}x{forward}", std::process::id());
        let s = Suite::new();
        s.script("slow.sh", SLOW_TERM);
        s.script("lane.sh", SLOW_TERM_LANE);
        s.write("tests/conftest.py", SLOW_TERM_CONFTEST);
        s.write("tests/test_rt.py", "import time\n\ndef test_runs():\n    open('up-pytest', 'w').close()\n    while True:\n        time.sleep(0.05)\n");
        s.manifest(&format!(
            "version: 1\nenv:\n  CANCEL_TOKEN: {token}\nlock:\n  submit: {}\n  device_count: 3\n  grace: 5s\nlanes:\n  l:\n    run: ./lane.sh\n  py:\n    run: {}\nscenes:\n  - name: plain\n    device:\n      run: ./slow.sh plain\n  - name: laned\n    device:\n      lane: l\n  - name: pytested\n    device:\n      lane: py\n      args: [tests/test_rt.py]\n",
            yq(&format!(
                "{TASK_SUBMIT} --timeout 60 --device auto --device-num {{device_count}} --run {{run}}"
            )),
            yq(&format!("{} -m pytest -p no:cacheprovider -q {{args}}", venv_python().display()))
        ));
        let mut cmd = sr(&s, &["device"]);
        cmd.env("TASK_SUBMIT_GRACE", "8")
            .env("TASK_SUBMIT_FORWARD", forward);
        let (child, cap) = start(cmd);
        let up = wait_until(secs(60), || {
            ["up-plain", "up-lane", "up-pytest"]
                .iter()
                .all(|f| s.path(f).exists())
        });
        unsafe { libc::kill(child.id() as i32, sig) };
        let run = finish(child, cap, LIMIT);
        let what = format!("{forward} forwarding, signal {sig}");
        assert!(up, "{what}: the steps never started: {}", run.desc());
        assert!(run.is(2), "{what}: expected exit 2: {}", run.desc());
        for f in ["cleaned-plain", "cleaned-lane", "cleaned-pytest"] {
            assert!(
                s.path(f).exists(),
                "{what}: a SIGTERM handler did not get to finish ({f} missing)\n{}\n--- lock.log\n{}",
                run.desc(),
                s.read("build/scenerun/lock.log")
            );
        }
        let release = event_t(&events(&s.path("lock-events.log")), "release")
            .unwrap_or_else(|| panic!("{what}: no release: {}", s.read("lock-events.log")));
        let wait = release + 0.5 - unix_now();
        if wait > 0.0 {
            sleep(Duration::from_secs_f64(wait));
        }
        let left = step_procs(&token);
        assert!(
            left.is_empty(),
            "{what}: step processes alive 0.5 s after the release: {left:?}"
        );
        let rep = s.record("report.json").expect("report.json");
        for name in ["plain", "laned", "pytested"] {
            let sc = report_scene(&rep, name).expect("scene in report");
            assert_eq!(sc["outcome"], "interrupted", "{what}: {sc:#}");
        }
    }
}
