//! See and explain: `explain` (why each step misses), `plan`'s one-word reasons, failures
//! on screen (output tail, GitHub annotations, real durations), `trace.json`, `list`,
//! `completions`, `cache stats --format json`, `--no-scenes`, and the small CLI fixes.

use std::fs;

use serde_json::Value;

use crate::common::*;

fn explain_json(s: &Suite) -> Value {
    let o = s.cmd(&["explain", "--format", "json"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    serde_json::from_str(&stdout(&o)).expect("explain json")
}

/// (step, reason word, first change message) of every step explain lists.
fn reasons(v: &Value) -> Vec<(String, String, String)> {
    v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                format!(
                    "{}:{}",
                    s["kind"].as_str().unwrap(),
                    s["step"].as_str().unwrap()
                ),
                s["reason"].as_str().unwrap().to_string(),
                s["changes"][0]["message"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

fn warm(s: &Suite) {
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
}

#[test]
fn explain_names_what_changed_for_every_step() {
    let s = basic_suite(2);
    // Nothing built yet: every step is "never built".
    let v = explain_json(&s);
    assert_eq!(v["steps"].as_array().unwrap().len(), 6);
    assert!(reasons(&v).iter().all(|(_, w, _)| w == "new"), "{v}");
    let o = s.cmd(&["explain"]).output().unwrap();
    assert!(
        stdout(&o).contains("compile s0/k miss: never built"),
        "{}",
        show(&o)
    );

    warm(&s);
    assert_eq!(explain_json(&s)["steps"].as_array().unwrap().len(), 0);

    // A transitive header: both scenes' kernel (one shared key) get a record each.
    s.write("include/inner.h", "#define OFFSET 3\n");
    let r = reasons(&explain_json(&s));
    assert_eq!(
        r,
        vec![
            (
                "kernel:s0/k".into(),
                "header".into(),
                "header include/inner.h changed content".into()
            ),
            (
                "kernel:s1/k".into(),
                "header".into(),
                "header include/inner.h changed content".into()
            ),
        ]
    );
    let o = s.cmd(&["plan"]).output().unwrap();
    assert!(stdout(&o).contains("miss (header)"), "{}", show(&o));
    warm(&s);

    // A header entering the closure, a flag, an env value, a fixture script.
    s.write("include/extra.h", "#define EXTRA 1\n");
    s.write(
        "include/common.h",
        "#include \"inner.h\"\n#include \"extra.h\"\n#define SCALE 2\n",
    );
    let y = fs::read_to_string(s.path("scenes.yaml")).unwrap();
    s.manifest(&y.replacen("\"-O1\"", "\"-O2\"", 1).replacen(
        "platform: a2a3\n",
        "platform: a2a3\nenv:\n  MODE: fast\n",
        1,
    ));
    s.script(
        "gen.sh",
        "#!/bin/sh\necho fixture >> logs/gen.log\necho 20 > \"$1/input.txt\" # v2\n",
    );
    let v = explain_json(&s);
    let step = |name: &str| {
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| {
                x["step"] == name
                    && x["kind"]
                        == if name.ends_with("/k") {
                            "kernel"
                        } else {
                            name.rsplit('/').next().unwrap()
                        }
            })
            .unwrap_or_else(|| panic!("no {name} in {v}"))
            .clone()
    };
    let msgs = |x: &Value| -> Vec<String> {
        x["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["message"].as_str().unwrap().to_string())
            .collect()
    };
    let k0 = msgs(&step("s0/k"));
    assert!(
        k0.contains(&"command changed: removed `-O1`, added `-O2`".to_string()),
        "{k0:?}"
    );
    assert!(k0.contains(&"env MODE was set".to_string()), "{k0:?}");
    assert!(
        k0.contains(&"header include/common.h changed content".to_string()),
        "{k0:?}"
    );
    assert!(
        k0.contains(&"header include/extra.h entered the include closure".to_string()),
        "{k0:?}"
    );
    // s1 kept -O1: only env and headers.
    let k1 = msgs(&step("s1/k"));
    assert!(!k1.iter().any(|m| m.contains("command")), "{k1:?}");
    let f0 = msgs(&step("s0/fixture"));
    assert!(
        f0.contains(&"file gen.sh changed content".to_string()),
        "{f0:?}"
    );
    let g0 = msgs(&step("s0/golden"));
    assert!(
        g0.contains(&"the fixture it reads changed".to_string()),
        "{g0:?}"
    );
    // Env values never land in the cache's records.
    warm(&s);
    let records = fs::read_to_string(s.path("cache/inputs.json")).unwrap();
    assert!(!records.contains("fast"), "env value stored: {records}");

    // The header leaves the closure again.
    s.write(
        "include/common.h",
        "#include \"inner.h\"\n#define SCALE 2\n",
    );
    let r = reasons(&explain_json(&s));
    assert!(
        r.iter()
            .any(|(_, _, m)| m == "header include/common.h changed content"),
        "{r:?}"
    );
    let v = explain_json(&s);
    let all: Vec<String> = v["steps"][0]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"].as_str().unwrap().to_string())
        .collect();
    assert!(
        all.contains(&"header include/extra.h left the include closure".to_string()),
        "{all:?}"
    );

    // Evicted: same inputs, entry gone.
    warm(&s);
    let o = s.cmd(&["cache", "clean"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let r = reasons(&explain_json(&s));
    assert!(r.iter().all(|(_, w, _)| w == "evicted"), "{r:?}");
}

#[test]
fn explain_exit_codes_follow_the_usual_rules() {
    let s = basic_suite(1);
    let o = s
        .cmd(&["explain", "-k", "nothing-matches"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 5, "{}", show(&o));
    let o = s
        .cmd(&["explain", "-k", "nothing-matches", "--no-scenes", "pass"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    s.write("scenes.yaml", "version: 1\nscenes: 3\n");
    let o = s.cmd(&["explain"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
}

/// A kernel with a compile error, a fixture that times out.
fn failing_suite() -> Suite {
    let s = Suite::with_logs();
    s.write("kernels/bad.c", "int f(void) {\n  return 1\n}\n");
    s.manifest(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"cc -c {source} -o {out}\"\nscenes:\n  - name: bad\n    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/bad.c\n  - name: slow\n    fixture:\n      run: \"echo started; sleep 30\"\n      timeout: 1s\n",
    );
    s
}

#[test]
fn failures_show_their_output_annotations_and_real_durations() {
    let s = failing_suite();
    let summary = s.path("summary.md");
    let o = s
        .cmd(&["warm"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let err = stderr(&o);
    // The compiler's own error is on screen, under the step's line.
    let line = err
        .lines()
        .position(|l| l.contains("compile bad/k"))
        .expect("step line");
    let below: Vec<&str> = err.lines().skip(line + 1).take(20).collect();
    assert!(
        below
            .iter()
            .any(|l| l.starts_with("  | ") && l.contains("error")),
        "no compiler output under the line:\n{err}"
    );
    // The timeout: its limit in the message, and a real duration (not 0ms).
    let t = err
        .lines()
        .find(|l| l.contains("fixture slow/fixture"))
        .expect("timeout line");
    assert!(!t.contains(" 0ms "), "{t}");
    let secs: f64 = t
        .split_whitespace()
        .find_map(|w| w.strip_suffix('s').and_then(|n| n.parse().ok()))
        .unwrap_or_else(|| panic!("no duration in {t}"));
    assert!(secs >= 1.0, "{t}");
    assert!(err.contains("timed out after 1.0s"), "{err}");
    assert!(err.contains("  | started"), "{err}");
    // GitHub: an annotation on the source line the compiler named.
    let out = stdout(&o);
    let ann = out
        .lines()
        .find(|l| l.starts_with("::error file=kernels/bad.c,line=2,col="))
        .unwrap_or_else(|| panic!("no annotation on kernels/bad.c:\n{out}"));
    assert!(ann.contains("title=compile bad/k"), "{ann}");
    assert!(
        out.contains("::error title=scenerun%3A fixture slow/fixture failed::timed out after 1.0s"),
        "{out}"
    );
    // The warm record keeps the real duration too.
    let rec = s.record("warm.json").unwrap();
    let fx = rec["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["scene"] == "slow")
        .unwrap();
    assert!(fx["duration_secs"].as_f64().unwrap() >= 1.0, "{fx}");
}

#[test]
fn long_logs_are_folded_in_a_group_under_github() {
    let s = Suite::with_logs();
    s.manifest(
        "version: 1\ncache:\n  dir: cache\nscenes:\n  - name: noisy\n    fixture:\n      run: \"for i in $(seq 1 40); do echo line $i; done; exit 3\"\n",
    );
    let o = s
        .cmd(&["warm"])
        .env("GITHUB_ACTIONS", "true")
        .output()
        .unwrap();
    let out = stdout(&o);
    let err = stderr(&o);
    assert!(
        out.contains("::group::fixture noisy/fixture: full log"),
        "{out}"
    );
    assert!(out.contains("line 1\n"), "{out}");
    assert!(out.contains("::endgroup::"), "{out}");
    assert!(err.contains("  | line 40"), "{err}");
    assert!(!err.contains("  | line 1\n"), "{err}");
    assert!(err.contains("exited with status 3"), "{err}");
}

fn spans(trace: &Value, pid: u64) -> Vec<Value> {
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["pid"] == pid && e["ph"] == "X")
        .cloned()
        .collect()
}

/// The parts of the Chrome trace-event format a viewer needs, checked on every event.
fn check_trace_schema(t: &Value) {
    for e in t["traceEvents"].as_array().expect("traceEvents") {
        let ph = e["ph"].as_str().expect("ph");
        assert!(e["pid"].is_u64(), "{e}");
        assert!(e["name"].is_string(), "{e}");
        match ph {
            "X" => {
                assert!(e["ts"].is_i64() && e["dur"].as_i64().unwrap() >= 1, "{e}");
                assert!(e["tid"].is_u64(), "{e}");
            }
            "M" => assert!(e["args"].is_object(), "{e}"),
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
}

#[test]
fn trace_holds_warm_slots_and_device_ids_each_phase_replacing_its_part() {
    let s = basic_suite(3);
    let o = s.cmd(&["warm", "-j", "2"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let path = s.path("build/scenerun/trace.json");
    let t = read_json(&path).expect("trace after warm");
    check_trace_schema(&t);
    // One span per unit run: 1 shared kernel + 3 fixtures + 3 goldens.
    let w = spans(&t, 1);
    assert_eq!(w.len(), 7, "{t}");
    assert!(w.iter().all(|e| e["tid"].as_u64().unwrap() < 2), "{t}");
    let o = s
        .cmd(&["device", "--no-lock", "--devices", "0,1"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let t = read_json(&path).unwrap();
    check_trace_schema(&t);
    assert_eq!(spans(&t, 1).len(), 7, "device kept the warm part");
    let d = spans(&t, 2);
    assert_eq!(d.iter().filter(|e| e["cat"] == "scene").count(), 3, "{t}");
    // The device part starts after the warm part ended.
    let warm_end = w
        .iter()
        .map(|e| e["ts"].as_i64().unwrap() + e["dur"].as_i64().unwrap())
        .max()
        .unwrap();
    let dev_start = d.iter().map(|e| e["ts"].as_i64().unwrap()).min().unwrap();
    assert!(dev_start >= warm_end, "{warm_end} {dev_start}");
    // A second warm (all hits) replaces only the warm part.
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0);
    let t = read_json(&path).unwrap();
    assert_eq!(spans(&t, 2).len(), d.len());
    assert!(
        spans(&t, 1).iter().all(|e| e["args"]["outcome"] == "hit"),
        "{t}"
    );

    // With the lock: queue and held spans, and a Mermaid gantt under GitHub Actions.
    let summary = s.path("summary.md");
    let pool = Pool::new("0,1");
    let mut c = s.cmd(&["device"]);
    c.env("GITHUB_ACTIONS", "true")
        .env("GITHUB_STEP_SUMMARY", &summary);
    let o = pool.apply(&mut c).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let t = read_json(&path).unwrap();
    let lock: Vec<String> = spans(&t, 2)
        .iter()
        .filter(|e| e["cat"] == "lock")
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(lock, vec!["queued", "held"], "{t}");
    let md = fs::read_to_string(&summary).unwrap();
    assert!(md.contains("```mermaid\ngantt"), "{md}");
    assert!(md.contains("section device 0"), "{md}");
}

#[test]
fn list_completions_and_stats_json() {
    let s = basic_suite(3);
    let o = s.cmd(&["list", "--tag", "t0"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let text = stdout(&o);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("s0") && text.contains("s2") && text.contains("[t0]"),
        "{text}"
    );
    let o = s.cmd(&["list", "--format", "json"]).output().unwrap();
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["scenes"].as_array().unwrap().len(), 3);
    assert_eq!(v["scenes"][1]["tags"][0], "t1");
    assert_eq!(v["scenes"][1]["devices"], 1);
    assert_eq!(v["scenes"][1]["platform"], "a2a3");

    for shell in ["bash", "zsh", "fish"] {
        let o = scenerun().args(["completions", shell]).output().unwrap();
        assert_eq!(code(&o), 0, "{}", show(&o));
        assert!(stdout(&o).contains("explain"), "{shell}");
    }
    let o = scenerun().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(code(&o), 4);

    // stats on a cache that does not exist is an error, not "0 entries".
    let o = s.cmd(&["cache", "stats"]).output().unwrap();
    assert_eq!(code(&o), 3, "{}", show(&o));
    assert!(stderr(&o).contains("does not exist"), "{}", show(&o));
    warm(&s);
    let o = s
        .cmd(&["cache", "stats", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["kinds"]["kernel"]["entries"], 1);
    assert_eq!(v["kinds"]["fixture"]["entries"], 3);
    assert_eq!(v["total"]["entries"], 7);
    assert_eq!(v["last_warm"]["built"], 9);
    // The summary line counts unique keys beside steps: 9 steps, 7 keys.
    let o = s.cmd(&["cache", "clean"]).output().unwrap();
    assert_eq!(code(&o), 0);
    let o = s.cmd(&["warm"]).output().unwrap();
    assert!(
        stderr(&o).contains("warm: 9 built, 0 hit, 0 failed"),
        "{}",
        show(&o)
    );
    assert!(
        stderr(&o).contains("7 unique keys (7 built, 0 hit)"),
        "{}",
        show(&o)
    );
}

#[test]
fn no_scenes_jobs_and_max_age() {
    let s = basic_suite(2);
    let o = s.cmd(&["device", "-k", "zzz"]).output().unwrap();
    assert_eq!(code(&o), 5, "{}", show(&o));
    // pass: exit 0, and the lock command never runs.
    let pool = Pool::new("0,1");
    let mut c = s.cmd(&["device", "-k", "zzz", "--no-scenes=pass"]);
    let o = pool.apply(&mut c).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(pool.acquisitions(), 0);
    // The same pool does count a real device run's one acquisition.
    warm(&s);
    let mut c = s.cmd(&["device"]);
    let o = pool.apply(&mut c).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(pool.acquisitions(), 1);
    // An empty shard that passes leaves no earlier report looking like its own.
    assert!(s.path("build/scenerun/report.json").exists());
    let mut c = s.cmd(&["device", "-k", "zzz", "--no-scenes=pass"]);
    let o = pool.apply(&mut c).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(!s.path("build/scenerun/report.json").exists());
    assert!(!s.path("build/scenerun/junit.xml").exists());
    for cmd in ["warm", "run", "plan", "list"] {
        let o = s
            .cmd(
                &[cmd, "-k", "zzz", "--no-scenes", "pass", "--plan"]
                    .iter()
                    .filter(|a| **a != "--plan" || cmd == "warm")
                    .copied()
                    .collect::<Vec<_>>(),
            )
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{cmd}: {}", show(&o));
        assert!(
            stderr(&o).contains("no scene selected"),
            "{cmd}: {}",
            show(&o)
        );
    }
    let o = s.cmd(&["-j", "0", "warm"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(stderr(&o).contains("at least 1"), "{}", show(&o));
    warm(&s);
    let o = s
        .cmd(&["cache", "prune", "--max-age", "0"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
}

fn git(s: &Suite, args: &[&str]) {
    let o = std::process::Command::new("git")
        .current_dir(s.dir())
        .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(o.status.success(), "git {args:?}: {}", show(&o));
}

fn listed(s: &Suite, args: &[&str]) -> (i32, Vec<String>) {
    let mut all = vec!["list"];
    all.extend_from_slice(args);
    let o = s.cmd(&all).output().unwrap();
    let names = stdout(&o)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    (code(&o), names)
}

#[test]
fn changed_and_changed_since_select_the_affected_scenes() {
    let s = Suite::with_logs();
    s.write("include/a.h", "#define A 1\n");
    s.write("include/shared.h", "#define S 1\n");
    s.write(
        "kernels/a.c",
        "#include \"a.h\"\nint a(void) { return A; }\n",
    );
    s.write(
        "kernels/b.c",
        "#include \"shared.h\"\nint b(void) { return S; }\n",
    );
    s.write("data/c.txt", "1\n");
    s.write("data/unused.txt", "1\n");
    let kernel = |name: &str, src: &str| {
        format!("    kernels:\n      - name: {name}\n        toolchain: cc\n        source: {src}\n        include_dirs: [include]\n        flags: [\"-O1\"]\n")
    };
    let manifest = |flag_b: &str, env: &str| {
        format!(
            "version: 1\nenv:\n  MODE: \"{env}\"\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"cc -c {{source}} -o {{out}} {{includes}} {{flags}}\"\nscenes:\n  - name: sa\n{}  - name: sb\n{}  - name: sc\n    fixture:\n      run: \"cp data/c.txt {{out}}/\"\n      inputs: [data/c.txt]\n",
            kernel("a", "kernels/a.c"),
            kernel("b", "kernels/b.c").replace("-O1", flag_b),
        )
    };
    s.manifest(&manifest("-O1", "x"));
    git(&s, &["init", "-q"]);
    fs::write(s.path(".gitignore"), "cache/\nbuild/\nlogs/\n").unwrap();
    git(&s, &["add", "."]);
    git(&s, &["commit", "-qm", "base"]);

    // Paths, relative to the current directory: a header in a closure, a fixture input.
    assert_eq!(
        listed(&s, &["--changed", "include/a.h"]),
        (0, vec!["sa".into()])
    );
    assert_eq!(
        listed(&s, &["--changed", "data/c.txt", "include/shared.h"]),
        (0, vec!["sb".into(), "sc".into()])
    );
    let (c, _) = listed(&s, &["--changed", "data/unused.txt"]);
    assert_eq!(c, 5);
    assert_eq!(
        listed(&s, &["--changed", "data/unused.txt", "--no-scenes", "pass"]),
        (0, vec![])
    );
    // The manifest itself given as a path: which part changed is unknown, so all.
    assert_eq!(listed(&s, &["--changed", "scenes.yaml"]).1.len(), 3);

    // --changed-since: nothing changed yet.
    assert_eq!(listed(&s, &["--changed-since", "HEAD"]).0, 5);
    // An unstaged edit and an untracked header now in a closure.
    s.write("data/c.txt", "2\n");
    assert_eq!(
        listed(&s, &["--changed-since", "HEAD"]),
        (0, vec!["sc".into()])
    );
    s.write("include/new.h", "#define N 1\n");
    s.write(
        "kernels/a.c",
        "#include \"a.h\"\n#include \"new.h\"\nint a(void) { return A + N; }\n",
    );
    assert_eq!(
        listed(&s, &["--changed-since", "HEAD"]),
        (0, vec!["sa".into(), "sc".into()])
    );
    git(&s, &["add", "."]);
    git(&s, &["commit", "-qm", "two"]);
    // Staged change of one scene's own manifest entry: that scene only.
    s.manifest(&manifest("-O2", "x"));
    git(&s, &["add", "scenes.yaml"]);
    assert_eq!(
        listed(&s, &["--changed-since", "HEAD"]),
        (0, vec!["sb".into()])
    );
    // Against an older revision: everything changed since then.
    assert_eq!(
        listed(&s, &["--changed-since", "HEAD~1"]),
        (0, vec!["sa".into(), "sb".into(), "sc".into()])
    );
    // A global section: every scene.
    s.manifest(&manifest("-O1", "y"));
    assert_eq!(listed(&s, &["--changed-since", "HEAD"]).1.len(), 3);
    // The same selection drives warm: only the affected scenes build.
    s.manifest(&manifest("-O1", "x"));
    s.write("include/a.h", "#define A 2\n");
    let o = s
        .cmd(&["warm", "--changed-since", "HEAD"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(stderr(&o).contains("warm: 1 built"), "{}", show(&o));
    // A revision git does not know is a usage error.
    let o = s
        .cmd(&["list", "--changed-since", "no-such-rev"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
}

#[test]
fn changed_follows_depfile_entries_the_scanner_cannot_see() {
    let s = Suite::with_logs();
    s.write("include/hidden.h", "#define H 1\n");
    s.write(
        "kernels/m.c",
        "#define IMPL \"hidden.h\"\n#include IMPL\nint m(void) { return H; }\n",
    );
    s.write("kernels/o.c", "int o(void) { return 0; }\n");
    s.manifest(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"cc -c {source} -o {out} {includes}\"\n    depfile: \"-MD -MF {depfile}\"\nscenes:\n  - name: sm\n    kernels:\n      - name: m\n        toolchain: cc\n        source: kernels/m.c\n        include_dirs: [include]\n  - name: so\n    kernels:\n      - name: o\n        toolchain: cc\n        source: kernels/o.c\n        include_dirs: [include]\n",
    );
    // Before a build nothing records the hidden header.
    assert_eq!(listed(&s, &["--changed", "include/hidden.h"]).0, 5);
    warm(&s);
    // A hit names it through its entry's depfile record...
    assert_eq!(
        listed(&s, &["--changed", "include/hidden.h"]),
        (0, vec!["sm".into()])
    );
    // ...and so does the stale entry once it changed.
    s.write("include/hidden.h", "#define H 2\n");
    assert_eq!(
        listed(&s, &["--changed", "include/hidden.h"]),
        (0, vec!["sm".into()])
    );
    let v = explain_json(&s);
    assert_eq!(v["steps"][0]["reason"], "depfile", "{v}");
    assert!(
        v["steps"][0]["message"]
            .as_str()
            .unwrap()
            .contains("include/hidden.h"),
        "{v}"
    );
}

/// A damaged entry (a file of the wrong size) and an entry whose depfile-recorded file
/// changed are both stale; explain and plan tell them apart (`damaged` / `depfile`).
#[test]
fn explain_tells_a_damaged_entry_from_a_changed_depfile() {
    let s = Suite::with_logs();
    s.write("include/hidden.h", "#define H 1\n");
    s.write(
        "kernels/m.c",
        "#define IMPL \"hidden.h\"\n#include IMPL\nint m(void) { return H; }\n",
    );
    s.write("kernels/o.c", "int o(void) { return 0; }\n");
    s.manifest(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"cc -c {source} -o {out} {includes}\"\n    depfile: \"-MD -MF {depfile}\"\nscenes:\n  - name: sm\n    kernels:\n      - name: m\n        toolchain: cc\n        source: kernels/m.c\n        include_dirs: [include]\n  - name: so\n    kernels:\n      - name: o\n        toolchain: cc\n        source: kernels/o.c\n        include_dirs: [include]\n",
    );
    warm(&s);
    // sm/m: a header only its depfile names changes. so/o: its object is truncated.
    s.write("include/hidden.h", "#define H 2\n");
    let plain = s.cmd(&["plan", "--format", "json"]).output().unwrap();
    let plan: Value = serde_json::from_str(&stdout(&plain)).expect("plan json");
    let key_of = |scene: &str| {
        plan["warm"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|st| st["scene"] == scene)
            .map(|st| st["key"].as_str().unwrap().to_string())
            .unwrap()
    };
    let damaged = entry_dirs(&s.path("cache"))[&("kernel".to_string(), key_of("so"))].join("out");
    fs::write(&damaged, "x").unwrap();
    let v = explain_json(&s);
    let reason = |step: &str| {
        let st = v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|st| st["step"] == step)
            .unwrap_or_else(|| panic!("{step} not listed: {v}"));
        (
            st["reason"].as_str().unwrap().to_string(),
            st["message"].as_str().unwrap().to_string(),
        )
    };
    let (word, message) = reason("so/o");
    assert_eq!(word, "damaged", "{v}");
    assert!(message.contains("recorded"), "{v}");
    let (word, message) = reason("sm/m");
    assert_eq!(word, "depfile", "{v}");
    assert!(message.contains("include/hidden.h"), "{v}");
    // plan --format json gives the same words.
    let o = s.cmd(&["plan", "--format", "json"]).output().unwrap();
    let plan: Value = serde_json::from_str(&stdout(&o)).expect("plan json");
    let why = |scene: &str| {
        plan["warm"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|st| st["scene"] == scene)
            .map(|st| st["why"].clone())
            .unwrap()
    };
    assert_eq!(
        (why("so"), why("sm")),
        ("damaged".into(), "depfile".into()),
        "{plan}"
    );
}

#[test]
fn a_huge_failed_log_shows_only_its_end() {
    let s = Suite::with_logs();
    s.manifest(
        "version: 1\ncache:\n  dir: cache\nscenes:\n  - name: huge\n    fixture:\n      run: \"yes 'a line of output' | head -c 3000000; echo; echo LAST; exit 1\"\n",
    );
    let o = s
        .cmd(&["warm"])
        .env("GITHUB_ACTIONS", "true")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("  | LAST\n"), "{err}");
    assert!(err.contains("earlier lines are in the log"), "{err}");
    let out = stdout(&o);
    assert!(
        out.contains("::group::fixture huge/fixture: end of the log"),
        "{}",
        &out[..200.min(out.len())]
    );
    // The folded part is bounded (64 KiB), not the 3 MB the step wrote.
    assert!(out.len() < 100_000, "{} bytes on stdout", out.len());
}
