//! Small text defects a newcomer reads on day one: plurals of one thing.

use super::*;

/// One scene on one id: no "1 scenes", no "on 1 ids" in `plan`, `device` or its summary.
#[test]
fn one_scene_on_one_id_is_singular() {
    let s = Suite::new();
    s.manifest(&format!(
        "version: 1\nlock:\n  submit: \"{TASK_SUBMIT} --timeout 60 --max-time 120 --device auto --device-num {{device_count}} --run {{run}}\"\nscenes:\n  - name: only\n    device: {{ run: \"true\" }}\n"
    ));
    let pool = Pool::new("0");
    for (name, args) in [
        ("one_scene_plan", &["plan"][..]),
        ("one_scene_device", &["device"]),
    ] {
        let mut c = s.cmd(args);
        pool.apply(&mut c);
        let o = c.output().unwrap();
        crate::snapshots::assert_output(name, &o, s.dir());
    }
}

/// `timeout: 0` (a number of seconds, as the docs allow) is rejected with what is wrong
/// with it, not "write e.g. `90s`"; exit 4.
#[test]
fn a_zero_timeout_says_it_must_be_longer_than_zero() {
    let s = Suite::new();
    s.manifest("version: 1\nscenes:\n  - name: only\n    device: { run: \"true\", timeout: 0 }\n");
    let o = s.cmd(&["plan"]).output().unwrap();
    crate::snapshots::assert_output("error_zero_timeout", &o, s.dir());
}

/// `scenerun -k x run`: a usage error (exit 4) whose hint says to put `-k` after `run`.
#[test]
fn a_subcommand_option_before_the_subcommand_gets_a_hint() {
    let here = Suite::new();
    for (name, args) in [
        ("error_option_before_run", &["-k", "x", "run"][..]),
        ("error_option_before_plan", &["--tag", "smoke", "plan"]),
    ] {
        let o = scenerun()
            .current_dir(here.dir())
            .args(args)
            .output()
            .unwrap();
        crate::snapshots::assert_output(name, &o, here.dir());
    }
}
