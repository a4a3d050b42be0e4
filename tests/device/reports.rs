//! Reports: warm failures in junit, report.json and the GitHub summary; lock timings.

use std::fs;

use super::*;
use crate::common::*;

// ------------------------------------------------------------------ warm failures, reports

#[test]
fn warm_failures_are_reported_in_junit_report_and_github() {
    let s = basic_suite(3);
    failing_fixture(&s, 1);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);

    let summary = s.path("summary.md");
    fs::write(&summary, "previous step\n").unwrap();
    let mut c = s.cmd(&["device"]);
    pool.apply(&mut c)
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary);
    let o = c.output().unwrap();
    expect_code(&o, 1);
    assert_eq!(
        pool.acquisitions(),
        1,
        "the other scenes still take the lock once"
    );
    assert_eq!(s.count("logs/device.log"), 2, "s1 must not run on a device");

    let r = report(&s);
    assert_eq!(r["exit_code"], 1);
    let o_ = outcomes(&r);
    assert_eq!(o_["s0"], "passed");
    assert_eq!(o_["s1"], "failed_in_warm");
    assert_eq!(o_["s2"], "passed");
    assert!(
        scene_in(&r, "s1")["message"]
            .as_str()
            .unwrap_or("")
            .contains("fixture"),
        "{r:#}"
    );

    let cases = junit_cases(&s.path("build/scenerun/junit.xml"));
    assert_eq!(cases.len(), 3, "one testcase per scene: {cases:?}");
    assert!(
        cases["s0"].is_empty() && cases["s2"].is_empty(),
        "{cases:?}"
    );
    assert_eq!(cases["s1"].len(), 1, "{cases:?}");
    assert!(matches!(cases["s1"][0].as_str(), "failure" | "error"));

    let out = stdout(&o);
    let errors: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("::error title="))
        .collect();
    assert!(!errors.is_empty(), "{out}");
    assert!(errors.iter().any(|l| l.contains("s1")), "{errors:?}");
    assert!(
        !errors.iter().any(|l| l.contains("s0") || l.contains("s2")),
        "{errors:?}"
    );

    let md = fs::read_to_string(&summary).unwrap();
    assert!(
        md.starts_with("previous step\n"),
        "the summary is appended to:\n{md}"
    );
    assert!(md.contains("| scene |"), "{md}");
    assert!(md.contains("|---"), "{md}");
    let row = |name: &str| {
        md.lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{md}"))
            .to_string()
    };
    assert!(row("s1").contains("failed in warm"), "{md}");
    assert!(row("s0").contains("passed"), "{md}");
    assert!(row("s2").contains("passed"), "{md}");
}

#[test]
fn every_scene_failed_in_warm_exits_1_without_the_lock() {
    let s = basic_suite(2);
    s.script(
        "gen.sh",
        "#!/bin/sh\necho fixture >> logs/gen.log\necho nope >&2\nexit 1\n",
    );
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 1);
    assert_eq!(pool.count("request"), 0, "the lock was taken for nothing");
    assert_eq!(s.count("logs/device.log"), 0);
    let r = report(&s);
    assert_eq!(r["exit_code"], 1);
    assert!(
        outcomes(&r).values().all(|o| o == "failed_in_warm"),
        "{r:#}"
    );
    let cases = junit_cases(&s.path("build/scenerun/junit.xml"));
    assert_eq!(cases.len(), 2);
    assert!(cases.values().all(|st| st.len() == 1), "{cases:?}");
}

// ------------------------------------------------------------------ lock timings

#[test]
fn report_has_lock_timings() {
    let s = basic_suite(2);
    let pool = Pool::new("0-3");
    warm(&s, &pool, &[]);
    let o = run_in(&s, &pool, &["device"]);
    expect_code(&o, 0);
    let r = report(&s);
    let lock = &r["lock"];
    let dev = &r["device"];
    let queue = num(&lock["queue_wait_secs"], "queue_wait_secs");
    let held = num(&lock["held_secs"], "held_secs");
    let busy = num(&dev["busy_secs"], "busy_secs");
    let eff = num(&dev["efficiency"], "efficiency");
    assert!(queue >= 0.0 && held >= 0.0 && busy >= 0.0, "{r:#}");
    assert!((0.0..=1.0).contains(&eff), "efficiency {eff}: {r:#}");
    assert!(
        busy > 0.0,
        "device steps ran, so the devices were busy: {r:#}"
    );
    assert!(busy <= held + 0.05, "busy longer than held: {r:#}");
    // The instants are ordered: called, inner started, inner ended, returned.
    let called = num(&lock["called_at"], "called_at");
    let started = num(&lock["inner_started_at"], "inner_started_at");
    let ended = num(&lock["inner_ended_at"], "inner_ended_at");
    let returned = num(&lock["returned_at"], "returned_at");
    assert!(
        called <= started && started <= ended && ended <= returned,
        "{lock:#}"
    );
    // The lock tool's own log brackets the inner run: scenerun called it before it asked
    // for ids, and the inner run started after it got them.
    let ev = pool.events();
    let t = |kind: &str| ev.iter().find(|e| e.kind == kind).expect(kind).t();
    assert!(called <= t("request") + 0.01, "{ev:?} {lock:#}");
    assert!(started + 0.01 >= t("acquire"), "{ev:?} {lock:#}");
    assert!(ended <= t("release") + 0.01, "{ev:?} {lock:#}");
    assert!(
        queue + 0.02 >= t("acquire") - t("request"),
        "{ev:?} {lock:#}"
    );
    assert_eq!(lock["exit_code"], 0);
    assert_eq!(dev["granted"], serde_json::json!(["0"]));
}
