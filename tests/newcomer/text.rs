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
    let mut all = String::new();
    for args in [&["plan"][..], &["device"][..]] {
        let mut c = s.cmd(args);
        pool.apply(&mut c);
        let o = c.output().unwrap();
        assert_eq!(code(&o), 0, "{}", show(&o));
        all.push_str(&stdout(&o));
        all.push_str(&stderr(&o));
    }
    assert!(all.contains("on 1 id;"), "{all}");
    for wrong in ["1 scenes", "1 ids", "1 devices"] {
        assert!(!all.contains(wrong), "{wrong:?} in: {all}");
    }
}

/// `timeout: 0` (a number of seconds, as the docs allow) is rejected with what is wrong
/// with it, not "write e.g. `90s`"; exit 4.
#[test]
fn a_zero_timeout_says_it_must_be_longer_than_zero() {
    let s = Suite::new();
    s.manifest("version: 1\nscenes:\n  - name: only\n    device: { run: \"true\", timeout: 0 }\n");
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("longer than zero"), "{err}");
    assert!(err.contains("timeout"), "names the key: {err}");
}

/// `scenerun -k x run`: a usage error (exit 4) whose hint says to put `-k` after `run`.
#[test]
fn a_subcommand_option_before_the_subcommand_gets_a_hint() {
    for (args, want) in [
        (&["-k", "x", "run"][..], "scenerun run -k"),
        (&["--tag", "smoke", "plan"][..], "scenerun plan --tag"),
    ] {
        let o = scenerun().args(args).output().unwrap();
        assert_eq!(code(&o), 4, "{}", show(&o));
        let err = stderr(&o);
        assert!(err.contains("put it after the subcommand"), "{err}");
        assert!(err.contains(want), "{err}");
    }
}
