//! Scenes receive the granted device ids: disjoint, within the grant, from the lock
//! tool's variable; a timeout or a too-small grant fails one scene cleanly.

use std::collections::BTreeSet;

use super::*;
use crate::common::*;

// ------------------------------------------------------------------ granted ids

#[test]
fn scenes_receive_the_granted_ids() {
    let s = suite_with(
        "  - name: solo\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n      exclusive: true\n\
         \x20 - name: pair\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n      devices: 2\n\
         \x20 - name: a0\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: a1\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: a2\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: a3\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: a4\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n",
    );
    lock_option(&s, "device_count: 4");
    recording_script(&s);
    let pool = Pool::new("4-7");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    let acq = pool.events();
    let acq: Vec<&Event> = acq.iter().filter(|e| e.kind == "acquire").collect();
    assert_eq!(acq.len(), 1);
    assert_eq!(acq[0].get("devices"), "4,5,6,7");

    let runs = intervals(&s);
    assert_eq!(runs.len(), 7, "{runs:?}");
    let pool_ids: BTreeSet<String> = (4..=7).map(|i| i.to_string()).collect();
    for (name, i) in &runs {
        let ids: BTreeSet<String> = i.ids.iter().cloned().collect();
        assert_eq!(
            ids.len(),
            i.ids.len(),
            "{name} got a repeated id: {:?}",
            i.ids
        );
        assert!(
            ids.is_subset(&pool_ids),
            "{name} got {:?}, not granted",
            i.ids
        );
        let want = if name == "pair" { 2 } else { 1 };
        assert_eq!(i.ids.len(), want, "{name} got {:?}", i.ids);
    }
    for (name, i) in &runs {
        // The exclusive scene overlaps nothing.
        if name != "solo" {
            assert!(
                !overlap(&runs["solo"], i),
                "solo overlapped {name}: {runs:?}"
            );
        }
        // Scenes that overlap hold disjoint ids, so concurrency never exceeds the grant.
        let mut in_use: BTreeSet<&String> = i.ids.iter().collect();
        for (other, j) in &runs {
            if other != name && overlap(i, j) && j.start <= i.start {
                for id in &j.ids {
                    assert!(
                        in_use.insert(id),
                        "{name} and {other} both held {id}: {runs:?}"
                    );
                }
            }
        }
        assert!(in_use.len() <= 4);
    }
    // At any scene start, the ids held by running scenes fit in the grant.
    for i in runs.values() {
        let held: usize = runs
            .values()
            .filter(|j| j.start <= i.start && i.start < j.end)
            .map(|j| j.ids.len())
            .sum();
        assert!(held <= 4, "{held} ids in use at once: {runs:?}");
    }
    // The report says the same.
    let r = report(&s);
    assert_eq!(
        r["device"]["granted"],
        serde_json::json!(["4", "5", "6", "7"])
    );
    for (name, i) in &runs {
        assert_eq!(
            scene_in(&r, name)["devices"],
            serde_json::json!(i.ids),
            "{name}"
        );
    }
}

#[test]
fn a_timed_out_scene_is_killed_and_reported() {
    let s = suite_with(
        "  - name: slow\n    device:\n      run: \"./slow.sh\"\n      timeout: 1s\n\
         \x20 - name: quick\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n",
    );
    recording_script(&s);
    s.script(
        "slow.sh",
        "#!/bin/sh\nsleep 30 &\necho $! > logs/slow.pid\nwait\necho survived >> logs/slow.log\n",
    );
    let pool = Pool::new("0-1");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 1);
    assert_eq!(pool.acquisitions(), 1);
    let r = report(&s);
    assert_eq!(r["exit_code"], 1);
    let slow = scene_in(&r, "slow");
    assert_eq!(slow["outcome"], "timed_out", "{r:#}");
    assert!(
        slow["message"].as_str().unwrap_or("").contains("timed out"),
        "{slow:#}"
    );
    assert_eq!(
        scene_in(&r, "quick")["outcome"],
        "passed",
        "the other scene still ran"
    );
    assert!(stdout(&o).contains("timed out"), "{}", show(&o));
    let cases = junit_cases(&s.path("build/scenerun/junit.xml"));
    assert_eq!(cases["slow"], ["failure"], "{cases:?}");
    assert!(cases["quick"].is_empty());
    // The whole process group was killed: the background sleep is gone too.
    let pid = s.read("logs/slow.pid");
    let pid = pid.trim();
    assert!(!pid.is_empty(), "slow.sh did not start");
    wait_for("the timed-out scene's child to die", || !pid_alive(pid));
    assert_eq!(
        s.read("logs/slow.log"),
        "",
        "the scene's script went on after its timeout"
    );
}

#[test]
fn a_scene_needing_more_ids_than_granted_fails_cleanly() {
    let s = suite_with(
        "  - name: wide\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n      devices: 2\n\
         \x20 - name: narrow\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n",
    );
    recording_script(&s);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);

    // Fewer ids granted than the scene needs: it fails with a message, the rest run.
    let o = run_in(&s, &pool, &["device", "--no-lock", "--devices", "0"]);
    expect_code(&o, 1);
    let r = report(&s);
    let wide = scene_in(&r, "wide");
    assert_eq!(wide["outcome"], "failed", "{r:#}");
    let msg = wide["message"].as_str().unwrap_or("");
    assert!(msg.contains("needs 2 devices"), "{msg}");
    assert!(stdout(&o).contains("needs 2 devices"), "{}", show(&o));
    assert_eq!(scene_in(&r, "narrow")["outcome"], "passed");
    let runs = intervals(&s);
    assert!(!runs.contains_key("wide"), "wide ran on too few ids");
    assert_eq!(runs["narrow"].ids, ["0"]);

    // lock.device_count below a scene's need: a usage error before the lock.
    lock_option(&s, "device_count: 1");
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 4);
    let err = stderr(&o);
    assert!(err.contains("device_count"), "{err}");
    assert!(err.contains("needs 2"), "{err}");
    assert_eq!(pool.count("request"), 0);
}

#[test]
fn ids_come_from_lock_device_env_and_may_be_ranges() {
    let s = suite_with(
        "  - name: a\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: b\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n\
         \x20 - name: c\n    device:\n      run: \"./rec.sh {scene} {devices}\"\n",
    );
    recording_script(&s);
    // A lock tool of another make: hands over a range in its own variable.
    set_submit(&s, "env -u TASK_DEVICE MY_IDS=8-9 sh -c {run}");
    lock_option(&s, "device_env: MY_IDS");
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    let runs = intervals(&s);
    assert_eq!(runs.len(), 3);
    for (name, i) in &runs {
        assert!(
            i.ids == ["8"] || i.ids == ["9"],
            "{name} got {:?}, not one of the granted 8-9",
            i.ids
        );
    }
    assert_eq!(
        report(&s)["device"]["granted"],
        serde_json::json!(["8", "9"])
    );
}
