//! What `warm` prints in a CI log (stderr not a terminal): hits only under `-v`, a final
//! line always; counters aligned to the width of the total; and the time hits saved is
//! what building their entries took, once per key — never more than the cold warm spent.

use super::*;

/// Five scenes share one fixture (one key) that takes 0.4 s to build, plus one more step
/// each, so a no-op warm has many hit steps and few unique keys.
fn shared_fixture_suite() -> Suite {
    let s = Suite::new();
    let mut yaml = String::from("version: 1\nscenes:\n");
    for i in 0..5 {
        yaml.push_str(&format!(
            "  - name: s{i}\n    fixture: {{ run: \"sleep 0.4; echo x > {{out}}/f\" }}\n    golden: {{ run: \"cat {{fixture}}/f > {{out}}/g; echo {i} >> {{out}}/g\" }}\n    device: {{ run: \"true\" }}\n"
        ));
    }
    s.manifest(&yaml);
    s
}

/// The seconds in `text` after `before` (e.g. "in " → the wall time).
fn secs_after(text: &str, before: &str, after: &str) -> f64 {
    let line = text
        .lines()
        .find(|l| l.starts_with("warm:"))
        .expect("warm line");
    let from = line.find(before).expect(before) + before.len();
    let rest = &line[from..];
    rest[..rest.find(after).expect(after)]
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("a number after {before:?} in {line:?}"))
}

/// A no-op warm in CI prints no line per hit, only the final line (and every hit under
/// `-v`); a cold one prints each built step with `[ n/10]` counters aligned.
#[test]
fn a_no_op_warm_in_a_ci_log_is_one_line_and_counters_align() {
    let s = shared_fixture_suite();
    let o = s.cmd(&["-j", "1", "warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let cold = stderr(&o);
    assert!(cold.contains("[ 1/10] "), "counter padded: {cold}");
    assert!(cold.contains("[10/10] "), "{cold}");
    let counters: Vec<usize> = cold
        .lines()
        .filter(|l| l.starts_with('['))
        .map(|l| l.find(']').unwrap())
        .collect();
    assert!(
        counters.windows(2).all(|w| w[0] == w[1]),
        "every counter the same width: {cold}"
    );

    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let noop = stderr(&o);
    let lines: Vec<&str> = noop.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "the final line and where the records are: {noop}"
    );
    assert!(lines[0].starts_with("warm: 0 built, 10 hit"), "{noop}");
    assert!(lines[1].starts_with("warm records: "), "{noop}");

    let o = s.cmd(&["-v", "warm"]).output().unwrap();
    assert_eq!(
        stderr(&o).lines().filter(|l| l.ends_with(" hit")).count(),
        10,
        "-v shows every hit: {}",
        show(&o)
    );
}

/// The no-op warm's "hits saved" is at most what the cold warm (on one slot, so its
/// builds are its wall time) took: the shared fixture counts once, not five times.
#[test]
fn hits_saved_is_never_more_than_the_cold_warm_spent() {
    let s = shared_fixture_suite();
    let o = s.cmd(&["-j", "1", "warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let cold_wall = secs_after(&stderr(&o), " in ", "s");
    let cold_build = secs_after(&stderr(&o), "s (", "s of build time)");
    let o = s.cmd(&["warm"]).output().unwrap();
    let saved = secs_after(&stderr(&o), "hits saved ~", "s");
    assert!(saved >= 0.4, "the fixture's build is saved: {}", show(&o));
    assert!(
        saved <= cold_wall + 0.05 && saved <= cold_build + 0.05,
        "saved {saved}s, more than the cold warm took ({cold_wall}s, {cold_build}s of build time): {}",
        show(&o)
    );
}
