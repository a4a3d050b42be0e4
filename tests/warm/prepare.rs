//! Top-level `prepare:` steps (docs/manifest.md): a project's own warm-up runs inside
//! `scenerun warm`, once for every selected scene, keyed and cached like any step; when it
//! fails, every selected scene has failed in warm and `device` takes no lock.

use super::*;

/// Two scenes with a fixture and a device step each, and one prepare step whose script
/// logs every run and fills a "kernel cache" beside the manifest (a side effect, `{out}`
/// left empty), or fails while `fail` exists.
fn prepare_suite() -> Suite {
    let s = Suite::with_logs();
    s.script(
        "tools/fill.sh",
        "#!/bin/sh\necho \"run $1 $SCENERUN_THREADS\" >> logs/prepare.log\n[ -e fail ] && { echo 'cannot fill the kernel cache' >&2; exit 3; }\nmkdir -p kcache && cat tools/kernels.txt > kcache/all\n",
    );
    s.write("tools/kernels.txt", "add\nmul\n");
    s.script(
        "gen.sh",
        "#!/bin/sh\necho run >> logs/gen.log\necho 1 > \"$1/data\"\n",
    );
    s.script(
        "dev.sh",
        "#!/bin/sh\necho \"$1\" >> logs/dev.log\ntest -s kcache/all\n",
    );
    let scene = |name: &str| {
        format!(
            "  - name: {name}\n    fixture:\n      run: \"./gen.sh {{out}} {{scene}}\"\n      inputs: [gen.sh]\n    device:\n      run: \"./dev.sh {name}\"\n"
        )
    };
    s.manifest(&format!(
        "version: 1\nplatform: a2a3sim\ncache:\n  dir: cache\nlock:\n  submit: \"{TASK_SUBMIT} --device-num {{device_count}} --run {{run}}\"\n  device_env: TASK_DEVICE\nprepare:\n  - name: kernels\n    run: \"./tools/fill.sh {{platform}}\"\n    inputs: [tools/fill.sh, \"tools/*.txt\"]\n    threads: 2\nscenes:\n{}{}",
        scene("a"),
        scene("b")
    ));
    s
}

#[test]
fn a_prepare_step_runs_once_per_key_for_every_scene() {
    let s = prepare_suite();
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        s.read("logs/prepare.log"),
        "run a2a3sim 2\n",
        "{}",
        show(&o)
    );
    assert_eq!(s.count("logs/gen.log"), 2);

    // Nothing changed: no prepare, no fixture.
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/prepare.log"), 1, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2);

    // The plan shows it for each scene, as a hit.
    let o = s.cmd(&["plan", "--format", "json"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let prepare: Vec<&serde_json::Value> = plan["warm"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|st| st["kind"] == "prepare")
        .collect();
    assert_eq!(prepare.len(), 2, "{plan:#}");
    assert!(prepare.iter().all(|st| st["status"] == "hit"), "{plan:#}");
    assert_eq!(prepare[0]["key"], prepare[1]["key"]);

    // An input glob's file changes: the prepare step runs again, the fixtures do not.
    s.write("tools/kernels.txt", "add\nmul\nsub\n");
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/prepare.log"), 2, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2);

    // The device phase runs both scenes with what the prepare step left.
    let pool = Pool::new("0");
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c);
    let o = c.output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(pool.acquisitions(), 1);
    assert_eq!(s.count("logs/dev.log"), 2);
}

#[test]
fn a_failed_prepare_step_fails_every_selected_scene_in_warm() {
    let s = prepare_suite();
    s.write("fail", "");
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "the pass completed: {}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("a") && err.contains("b"), "{err}");
    assert!(err.contains("cannot fill the kernel cache"), "{err}");
    assert_eq!(s.count("logs/prepare.log"), 1, "one run for both scenes");
    let o = s.cmd(&["warm", "--strict"]).output().unwrap();
    assert_eq!(code(&o), 1, "{}", show(&o));

    // Every scene failed in warm: no lock, exit 1, both reported with the reason.
    let pool = Pool::new("0");
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c);
    let o = c.output().unwrap();
    assert_eq!(code(&o), 1, "{}", show(&o));
    assert_eq!(pool.acquisitions(), 0, "{}", show(&o));
    assert_eq!(s.count("logs/dev.log"), 0);
    let report = s.record("report.json").expect("report.json");
    for name in ["a", "b"] {
        let scene = report_scene(&report, name).expect("the scene is reported");
        assert_eq!(scene["outcome"], "failed_in_warm", "{report:#}");
        assert!(
            scene.to_string().contains("prepare kernels"),
            "{name}: {scene:#}"
        );
    }

    // Fixed: the prepare step runs again (its failure was recorded, not cached).
    fs::remove_file(s.path("fail")).unwrap();
    let o = s.cmd(&["warm", "--strict"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/prepare.log"), 3);
}

#[test]
fn prepare_steps_are_validated() {
    let s = Suite::new();
    s.manifest(
        "version: 1\nprepare:\n  - name: k\n    run: \"./x {scene}\"\n  - name: k\n    run: \"./y\"\n  - run: \"./z\"\nscenes:\n  - name: a\n    device: {run: \"true\"}\n",
    );
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("prepare[0].run"), "{err}");
    assert!(err.contains("duplicate prepare step `k`"), "{err}");
    assert!(err.contains("prepare[2]"), "{err}");
}
