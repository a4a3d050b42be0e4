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
