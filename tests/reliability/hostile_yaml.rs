//! Hostile YAML at scale (docs/guarantees.md, "Bounds"): inputs of tens or hundreds of
//! kilobytes that are deep (`? ? ? …`, `- - - …`, ever deeper indentation) or wide
//! (thousands of errors on one line). Each ends in exit 4 with bounded output: no
//! recursion a 20 KB input can overflow, no error that repeats a 600 KB line. The same
//! cases, cut to a few KB, are seeds of the manifest fuzzer (`fuzz/seeds/manifest/`),
//! which the long profile runs for a bounded time.

use std::fs;

use super::*;

/// Output allowed for any of these cases: 50 errors of at most a few hundred characters.
const MAX_STDERR: usize = 64 * 1024;

/// (name, manifest text) of every hostile case; `scale` 1 is the size of the field
/// report (20 KB deep, 120 KB and 600 KB wide).
pub fn hostile_yaml_cases(scale: usize) -> Vec<(&'static str, String)> {
    let head = "version: 1\ncache:\n  dir: cache\nscenes:\n";
    let deep = 10_000 * scale;
    let mut indent = String::from(head);
    for i in 0..300 * scale {
        indent.push_str(&" ".repeat(i + 2));
        indent.push_str("a:\n");
    }
    let scene = |i: usize| format!("{{name: s{i}, bogus{i}: padding-padding-padding-padding}}");
    let wide: Vec<String> = (0..2000 * scale).map(scene).collect();
    vec![
        ("question marks", format!("{head}{}", "? ".repeat(deep))),
        (
            "question marks in a scene",
            format!("{head}  - name: x\n    env: {}", "? ".repeat(deep)),
        ),
        ("dashes", format!("{head}{}x\n", "- ".repeat(deep))),
        (
            "dash question",
            format!("{head}{}x\n", "- ? ".repeat(deep / 2)),
        ),
        ("indentation", indent),
        (
            "2000 errors on one 120 KB line",
            format!(
                "version: 1\ncache:\n  dir: cache\nscenes: [{}]\n",
                wide.join(", ")
            ),
        ),
        (
            "600 KB of [[],[],...]",
            format!(
                "version: 1\nscenes: [{}]\n",
                vec!["[]"; 200_000 * scale].join(",")
            ),
        ),
        (
            "a 200 KB scalar in a message",
            format!("version: {}\nscenes: []\n", "x".repeat(200_000 * scale)),
        ),
    ]
}

fn check_bounded(faults: &mut Faults, what: &str, r: &Run) {
    faults.check(r.is(4), || format!("{what}: {}", r.desc()));
    faults.check(!r.stderr.contains("panicked"), || {
        format!("{what}: a panic: {}", r.desc())
    });
    faults.check(r.stderr.len() <= MAX_STDERR, || {
        format!(
            "{what}: {} bytes of error output (bound {MAX_STDERR}): {}",
            r.stderr.len(),
            tail(&r.stderr, 600)
        )
    });
    for line in r.stderr.lines() {
        let n = line.chars().count();
        if n > 400 {
            faults.add(format!("{what}: a {n}-character line of output"));
            break;
        }
    }
}

/// Every case through `scenerun plan`: exit 4, bounded output, in bounded time.
#[test]
fn hostile_yaml_is_exit_4_with_bounded_output() {
    const T: &str = "hostile_yaml";
    let mut faults = Faults::new(T);
    for (what, text) in hostile_yaml_cases(1) {
        let s = Suite::new();
        s.manifest(&text);
        let t = Instant::now();
        let r = exec(sr(&s, &["plan"]), secs(120));
        let ms = t.elapsed().as_millis();
        check_bounded(&mut faults, what, &r);
        figure(
            T,
            &format!(
                "{what} ({} KB) → exit {:?} in {ms} ms, {} bytes of output",
                text.len() / 1000,
                r.code,
                r.stderr.len()
            ),
        );
    }
    faults.finish();
}

/// The deep cases printed by a `scenes_from` generator: exit 4 naming it.
#[test]
fn hostile_yaml_from_a_generator_is_exit_4() {
    const T: &str = "hostile_yaml_generated";
    let mut faults = Faults::new(T);
    for (what, text) in hostile_yaml_cases(1) {
        let Some(body) = text.strip_prefix("version: 1\ncache:\n  dir: cache\nscenes:\n") else {
            continue;
        };
        let s = Suite::new();
        fs::write(s.path("out.yaml"), body).unwrap();
        s.manifest(
            "version: 1\ncache:\n  dir: cache\nscenes_from:\n  - run: \"cat out.yaml\"\n    inputs: [out.yaml]\nscenes: []\n",
        );
        let t = Instant::now();
        let r = exec(sr(&s, &["plan"]), secs(120));
        let ms = t.elapsed().as_millis();
        check_bounded(&mut faults, what, &r);
        faults.check(r.stderr.contains("scenes_from[0] (`cat out.yaml`)"), || {
            format!("{what}: the generator is not named: {}", r.desc())
        });
        figure(
            T,
            &format!(
                "{what} from a generator ({} KB) → exit {:?} in {ms} ms",
                body.len() / 1000,
                r.code
            ),
        );
    }
    faults.finish();
}
