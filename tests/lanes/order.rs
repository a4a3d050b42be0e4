//! `device.order: first | any | last` (docs/lanes.md): three phases of one run inside
//! one lock acquisition. Every step logs `start NAME` and `end NAME` into one file; the
//! assertions read the order of those lines (not their times).

use super::pytest::venv_python;
use super::*;

/// A lane runtime that logs each scene's start and end (and its process's start).
const ORDER_LANE: &str = r#"#!/bin/sh
echo "process $$" >> logs/lane-starts.log
while IFS= read -r line; do
    scene=$(printf '%s' "$line" | sed -n 's/.*"scene":"\([^"]*\)".*/\1/p')
    printf '{"scene":"%s","event":"start"}\n' "$scene" >> "$SCENERUN_RESULTS"
    echo "start $scene" >> logs/events.log
    sleep 0.2
    echo "end $scene" >> logs/events.log
    printf '{"scene":"%s","event":"end","outcome":"passed"}\n' "$scene" >> "$SCENERUN_RESULTS"
done < "$SCENERUN_SCENES"
"#;

/// Positions of `start X` / `end X` lines of the events log, by scene.
struct Events(Vec<String>);

impl Events {
    fn read(s: &Suite) -> Events {
        Events(
            s.read("logs/events.log")
                .lines()
                .map(str::to_string)
                .collect(),
        )
    }

    fn at(&self, what: &str, scene: &str) -> usize {
        let line = format!("{what} {scene}");
        self.0
            .iter()
            .position(|l| *l == line)
            .unwrap_or_else(|| panic!("no `{line}` in {:#?}", self.0))
    }

    /// Every scene of `before` ended before any scene of `after` started.
    #[track_caller]
    fn all_before(&self, before: &[&str], after: &[&str]) {
        let last_end = before.iter().map(|s| self.at("end", s)).max().unwrap();
        let first_start = after.iter().map(|s| self.at("start", s)).min().unwrap();
        assert!(
            last_end < first_start,
            "{before:?} must all end before {after:?} start: {:#?}",
            self.0
        );
    }
}

#[test]
fn first_and_last_scenes_are_phases_of_one_acquisition() {
    let s = Suite::with_logs();
    s.script("lane.sh", ORDER_LANE);
    let plain = |name: &str, order: &str| {
        format!(
            "  - name: {name}\n    device:\n      run: \"echo start {{scene}} >> logs/events.log; sleep 0.2; echo end {{scene}} >> logs/events.log\"\n{order}"
        )
    };
    let laned = |name: &str, order: &str| {
        format!("  - name: {name}\n    device:\n      lane: l\n      args: [{name}]\n{order}")
    };
    let (first, last) = ("      order: first\n", "      order: last\n");
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlock:\n  submit: \"{TASK_SUBMIT} --timeout 60 --device auto --device-num {{device_count}} --run {{run}}\"\n  device_count: 2\nlanes:\n  l:\n    run: ./lane.sh\nscenes:\n{}{}{}{}{}{}{}{}{}",
        plain("z_plain", last),
        laned("z_lane", last),
        plain("p1", ""),
        plain("p2", ""),
        laned("a1", ""),
        laned("a2", ""),
        laned("a3", ""),
        plain("f_plain", first),
        laned("f_lane", first),
    ));
    let plan = s.cmd(&["plan"]).output().unwrap();
    expect_code(&plan, 0);
    let text = stdout(&plan);
    assert!(
        text.contains("order last") && text.contains("order first"),
        "{text}"
    );
    let pool = Pool::new("0-3");
    let mut cmd = s.cmd(&["device"]);
    pool.apply(&mut cmd);
    let o = cmd.output().unwrap();
    expect_code(&o, 0);
    let acquisitions = pool.events().iter().filter(|e| e.kind == "acquire").count();
    assert_eq!(
        acquisitions, 1,
        "the main sweep and the last phase share one lock"
    );
    let ev = Events::read(&s);
    let (firsts, lasts) = (["f_plain", "f_lane"], ["z_plain", "z_lane"]);
    let anys = ["p1", "p2", "a1", "a2", "a3"];
    ev.all_before(&firsts, &anys);
    ev.all_before(&firsts, &lasts);
    ev.all_before(&anys, &lasts);
    // A lane process never mixes orders: f_lane, the a's and z_lane ran in 1 + 2 + 1
    // processes (two ids, three `any` scenes split over two).
    assert_eq!(starts(&s), 4, "{}", s.read("logs/lane-starts.log"));
    let r = report(&s);
    assert!(outcomes(&r).values().all(|o| o == "passed"), "{r:#}");
}

#[test]
fn a_pytest_class_marked_last_runs_after_the_others_in_a_process_of_its_own() {
    let py = venv_python();
    let s = Suite::with_logs();
    s.write(
        "tests/conftest.py",
        "import os\n\ndef pytest_sessionstart(session):\n    with open('logs/lane-starts.log', 'a') as f:\n        f.write('pytest %d\\n' % os.getpid())\n",
    );
    let test = |class: &str| {
        format!(
            "class {class}:\n    def test_run(self):\n        with open('logs/events.log', 'a') as f:\n            f.write('start {class}\\n')\n        with open('logs/events.log', 'a') as f:\n            f.write('end {class}\\n')\n"
        )
    };
    s.write("tests/test_main.py", &(test("TestAdd") + &test("TestMul")));
    s.write("tests/test_sdma.py", &test("TestSdmaCopy"));
    let scene = |name: &str, arg: &str, order: &str| {
        format!("  - name: {name}\n    device:\n      lane: py\n      args: [\"{arg}\"]\n{order}")
    };
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  py:\n    run: \"{} -m pytest -p no:cacheprovider -q {{args}} --report-log {{results}}\"\nscenes:\n{}{}{}",
        py.display(),
        scene("sdma", "tests/test_sdma.py::TestSdmaCopy", "      order: last\n"),
        scene("add", "tests/test_main.py::TestAdd", ""),
        scene("mul", "tests/test_main.py::TestMul", ""),
    ));
    let o = no_lock(&s, "0");
    expect_code(&o, 0);
    let ev = Events::read(&s);
    ev.all_before(&["TestAdd", "TestMul"], &["TestSdmaCopy"]);
    assert_eq!(starts(&s), 2, "one pytest session per phase");
    let r = report(&s);
    assert_eq!(
        outcome_list(&r),
        pairs(&[("add", "passed"), ("mul", "passed"), ("sdma", "passed")])
    );
    let sdma = planned_processes(&s)
        .into_iter()
        .find(|p| p["scenes"] == serde_json::json!(["sdma"]))
        .expect("sdma in a process of its own");
    assert_eq!(sdma["order"], "last", "{sdma:#}");
}

#[test]
fn a_bad_order_is_a_manifest_error() {
    let s = lane_suite(
        "",
        "  - name: a\n    device:\n      run: \"true\"\n      order: late\n",
    );
    let o = s.cmd(&["plan"]).output().unwrap();
    expect_code(&o, 4);
    let err = stderr(&o);
    assert!(
        err.contains("scenes.yaml:13:7: scenes[0].device.order: order is `first`, `any` or `last`, not `late`"),
        "{err}"
    );
}
