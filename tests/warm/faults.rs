//! Faults: `kill -9` at random moments, damaged entries, failing steps, and signals.

use std::fs;
use std::process::Child;
use std::thread::sleep;
use std::time::{Duration, SystemTime};

use predicates::prelude::*;
use serde_json::Value;

use super::*;
use crate::common::*;

// ---------------------------------------------------------------------------------------
// kill -9
// ---------------------------------------------------------------------------------------

/// A small xorshift generator: kill moments vary per round, and the seed is printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn kill_9_at_random_moments_never_leaves_a_servable_partial_entry() {
    let s = base_suite();
    // Steps that write several files with pauses in between, so kills land mid-write.
    s.script(
        "gen.sh",
        "#!/bin/sh\necho \"$2\" >> logs/gen.log\nfor i in 1 2 3; do cat data/$2.txt data/round.txt > \"$1/part$i\"; sleep 0.05; done\n",
    );
    s.script(
        "golden.sh",
        "#!/bin/sh\necho \"$3\" >> logs/golden.log\nfor f in \"$1\"/*; do wc -c < \"$f\" > \"$2/$(basename \"$f\").len\"; sleep 0.03; done\n",
    );
    let mut y = head(false);
    let scenes = ["k0", "k1", "k2", "k3"];
    for n in scenes {
        data(&s, n, &format!("{n}\n"));
        y.push_str(&scene(
            n,
            &[("a", "kernels/a.c"), ("b", "kernels/b.c")],
            &format!(
                "    fixture:\n      run: \"./gen.sh {{out}} {{scene}}\"\n      inputs: [gen.sh, data/{n}.txt, data/round.txt]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}} {{scene}}\"\n      inputs: [golden.sh]\n"
            ),
        ));
    }
    s.manifest(&y);
    let seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("kill -9 seed: {seed}");
    let mut rng = Rng(seed);
    for round in 0..10 {
        // New fixture input every round: there is always work to interrupt.
        s.write("data/round.txt", &format!("round {round}\n"));
        // Every other round a new kernel source too.
        if round % 2 == 0 {
            s.write(
                "kernels/b.c",
                &format!("#include \"other.h\"\nint b(int x) {{ return x + OTHER + {round}; }}\n"),
            );
        }
        let mut child = spawn_warm(&s, &["-j", "2"]);
        sleep(Duration::from_millis(rng.below(700)));
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = wait_child(&mut child, Duration::from_secs(10));
        let (code, text) = verify_code(&s, &[]);
        assert_eq!(code, 0, "round {round} (seed {seed}): verify found\n{text}");
    }
    // The step groups of the last killed run die with it (the watchdog); then a full warm
    // completes over whatever the kills left behind.
    let out = warm(&s, &["--strict"]);
    let rec = warm_record(&s);
    for n in scenes {
        for (kind, name) in [
            ("kernel", "a"),
            ("kernel", "b"),
            ("fixture", "fixture"),
            ("golden", "golden"),
        ] {
            let r = record_of(&rec, kind, n, name);
            assert!(
                r["outcome"] == "built" || r["outcome"] == "hit",
                "{kind} {n}/{name}: {r}\n{}",
                stderr(&out)
            );
        }
    }
    assert!(all_hits(&plan_steps(&s, &[])));
    assert_verify_clean(&s);
    // Every published fixture is whole: three parts, each with this round's data.
    for e in entries(&s.path("cache"), "fixture") {
        let meta: Value = serde_json::from_slice(&fs::read(e.join("meta.json")).unwrap()).unwrap();
        assert_eq!(
            meta["files"].as_array().unwrap().len(),
            3,
            "{}",
            e.display()
        );
    }
}

// ---------------------------------------------------------------------------------------
// Damaged entries
// ---------------------------------------------------------------------------------------

#[test]
fn damaged_entries_are_found_removed_and_rebuilt_never_served() {
    let s = three_scene_suite();
    warm(&s, &[]);
    let cache = s.path("cache");

    // 1. A kernel truncated: the plan calls it stale (the size check), warm rebuilds it.
    let kernels = entries(&cache, "kernel");
    let victim = kernels
        .iter()
        .find(|e| {
            let m: Value = serde_json::from_slice(&fs::read(e.join("meta.json")).unwrap()).unwrap();
            m["built_by"].as_str().unwrap().ends_with("/c")
        })
        .expect("kernel c's entry")
        .clone();
    let out = victim.join("out");
    let len = fs::metadata(&out).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&out)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let (code, text) = verify_code(&s, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("corrupt"), "{text}");
    let steps = plan_steps(&s, &[]);
    assert_eq!(status_of(&steps, "kernel", "s1", "c"), "stale");
    assert_eq!(status_of(&steps, "kernel", "s0", "a"), "hit");
    s.cmd(&["warm", "--dry-run"])
        .assert()
        .success()
        .stdout(predicate::str::contains("# compile s1/c\n"));
    warm(&s, &[]);
    assert_eq!(compiled(&s)[3..], strs(&["kernels/c.c"]));
    assert_verify_clean(&s);

    // 2. A fixture file altered in place (same size): only verify can tell. It exits 1,
    //    also with --fix, which removes the entry; the next warm rebuilds it.
    let fixtures = entries(&cache, "fixture");
    let victim = fixtures[0].clone();
    let file = victim.join("out/input.txt");
    let mut bytes = fs::read(&file).unwrap();
    bytes[0] ^= 0x20;
    fs::write(&file, &bytes).unwrap();
    let (code, text) = verify_code(&s, &[]);
    assert_eq!(code, 1, "{text}");
    let (code, text) = verify_code(&s, &["--fix"]);
    assert_eq!(code, 1, "--fix still reports what it found: {text}");
    assert!(text.contains("removed"), "{text}");
    assert!(!victim.exists(), "the damaged entry is gone");
    assert_verify_clean(&s);
    let steps = plan_steps(&s, &[]);
    let missing: Vec<&Value> = steps.iter().filter(|v| v["status"] != "hit").collect();
    assert!(
        missing.iter().any(|v| v["kind"] == "fixture")
            && missing
                .iter()
                .all(|v| v["kind"] == "fixture" || v["kind"] == "golden"),
        "{missing:?}"
    );
    warm(&s, &[]);
    assert_eq!(
        s.count("logs/gen.log"),
        4,
        "the removed fixture was generated again"
    );
    assert_eq!(s.count("logs/cc.log"), 4);
    assert_eq!(
        s.count("logs/golden.log"),
        3,
        "the golden's key did not change"
    );
    assert!(all_hits(&plan_steps(&s, &[])));
    assert_verify_clean(&s);

    // 3. An entry with a file removed, and one with an extra file: not servable / corrupt.
    let golden = entries(&cache, "golden")[0].clone();
    fs::remove_file(golden.join("out/expected.txt")).unwrap();
    let steps = plan_steps(&s, &[]);
    assert_eq!(
        steps.iter().filter(|v| v["status"] == "stale").count(),
        1,
        "{steps:#?}"
    );
    warm(&s, &[]);
    assert_eq!(
        s.count("logs/golden.log"),
        4,
        "the damaged golden was computed again"
    );
    let golden = entries(&cache, "golden")[0].clone();
    fs::write(golden.join("out/extra.txt"), "stray").unwrap();
    assert_eq!(verify_code(&s, &[]).0, 1);
}

// ---------------------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------------------

#[test]
fn failing_kernel_fails_its_scene_only_and_is_never_cached() {
    let s = three_scene_suite();
    s.write(
        "kernels/b.c",
        "int b(int x) { return x + ; } /* BROKEN */\n",
    );
    let out = warm(&s, &[]);
    let err = stderr(&out);
    assert!(err.contains("scene s0"), "names the failed scene: {err}");
    assert!(err.contains("scene s2"), "names the failed scene: {err}");
    assert!(!err.contains("scene s1"), "s1 did not fail: {err}");
    // A step's output goes to its log, never to scenerun's stdout (results only).
    assert!(!stdout(&out).contains("error"), "stdout: {}", stdout(&out));
    // Every other step completed.
    let rec = warm_record(&s);
    for (kind, scene, name) in [
        ("kernel", "s0", "a"),
        ("kernel", "s1", "a"),
        ("kernel", "s1", "c"),
        ("fixture", "s0", "fixture"),
        ("golden", "s2", "golden"),
    ] {
        assert_eq!(
            record_of(&rec, kind, scene, name)["outcome"],
            "built",
            "{kind} {scene}/{name}"
        );
    }
    let failed = record_of(&rec, "kernel", "s0", "b");
    assert_eq!(failed["outcome"], "failed");
    let tail = failed["log_tail"].as_str().expect("a log tail");
    assert!(
        tail.contains("error"),
        "the compiler's message is in the tail: {tail}"
    );
    let log = failed["log"].as_str().unwrap();
    assert!(
        log.ends_with("build/scenerun/logs/s0/compile-b.log") || log.contains("logs/s0/"),
        "{log}"
    );
    assert!(fs::read_to_string(log).unwrap().contains("error"));
    assert!(
        entries(&s.path("cache"), "kernel").len() == 2,
        "a failure is not an entry"
    );
    assert_eq!(
        status_of(&plan_steps(&s, &[]), "kernel", "s0", "b"),
        "failed-in-warm"
    );

    // --strict: the same pass, exit 1. The failure is retried (never cached).
    let before = s.count("logs/cc.log");
    let strict = s.cmd(&["warm", "--strict"]).output().unwrap();
    assert_eq!(strict.status.code(), Some(1), "{}", stderr(&strict));
    assert_eq!(compiled(&s)[before..], strs(&["kernels/b.c"]));

    // Fixed: built by the next warm, and the record forgets the failure.
    s.write(
        "kernels/b.c",
        "#include \"other.h\"\nint b(int x) { return x + OTHER; }\n",
    );
    let out = warm(&s, &["--strict"]);
    assert_eq!(
        compiled(&s)[before + 1..],
        strs(&["kernels/b.c"]),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("failed:"), "{}", stderr(&out));
    let rec = warm_record(&s);
    assert_eq!(record_of(&rec, "kernel", "s0", "b")["outcome"], "built");
    assert_eq!(record_of(&rec, "kernel", "s2", "b")["outcome"], "built");
    assert!(all_hits(&plan_steps(&s, &[])));
}

#[test]
fn step_that_leaves_out_empty_fails_saying_so() {
    let s = base_suite();
    one_scene(
        &s,
        false,
        "lazy",
        &[],
        "    fixture:\n      run: \"true {out}\"\n      inputs: []\n",
    );
    let out = warm(&s, &[]);
    let err = stderr(&out);
    assert!(err.contains("lazy"), "{err}");
    assert!(err.contains("empty"), "{err}");
    let rec = warm_record(&s);
    let r = record_of(&rec, "fixture", "lazy", "fixture");
    assert_eq!(r["outcome"], "failed");
    assert!(r["error"].as_str().unwrap().contains("empty"), "{r}");
    assert!(entries(&s.path("cache"), "fixture").is_empty());
    s.cmd(&["warm", "--strict"]).assert().code(1);
}

#[test]
fn kernel_that_writes_no_out_fails_saying_so() {
    let s = base_suite();
    let mut y = head(false).replace(
        "./bin/cc-log -c {source} -o {out}",
        "./bin/cc-log -c {source} -o {out}.elsewhere",
    );
    y.push_str(&scene("k", &[("c", "kernels/c.c")], ""));
    s.manifest(&y);
    let out = warm(&s, &[]);
    let err = stderr(&out);
    assert!(err.contains("scene k"), "{err}");
    assert!(err.contains("missing") || err.contains("empty"), "{err}");
    assert!(entries(&s.path("cache"), "kernel").is_empty());
}

// ---------------------------------------------------------------------------------------
// Signals
// ---------------------------------------------------------------------------------------

/// One scene whose fixture, while the file `slow` exists, starts a grandchild and sleeps;
/// both write their pids. `slow` is not an input: removing it keeps the key.
fn long_fixture_suite() -> Suite {
    let s = base_suite();
    s.script(
        "long.sh",
        "#!/bin/sh\nif [ -f slow ]; then\n  sh -c 'echo $$ > grand.pid.tmp; mv grand.pid.tmp grand.pid; sleep 30; touch survived' &\n  echo $$ > step.pid.tmp; mv step.pid.tmp step.pid\n  for i in 1 2 3 4 5 6 7 8 9 10; do echo $i > \"$1/part$i\"; sleep 3; done\nfi\necho done > \"$1/all\"\n",
    );
    s.write("slow", "");
    one_scene(
        &s,
        false,
        "long",
        &[("c", "kernels/c.c")],
        "    fixture:\n      run: \"./long.sh {out}\"\n      inputs: [long.sh]\n",
    );
    s
}

fn wait_for_pids(s: &Suite, child: &mut Child) -> (i32, i32) {
    let ok = wait_until(Duration::from_secs(20), || {
        s.path("step.pid").exists() && s.path("grand.pid").exists()
    });
    if !ok {
        let _ = child.kill();
        panic!("the long fixture never started");
    }
    (
        read_pid(&s.path("step.pid")).unwrap(),
        read_pid(&s.path("grand.pid")).unwrap(),
    )
}

#[test]
fn sigint_and_sigterm_kill_the_steps_publish_nothing_and_exit_2() {
    // In the third round the step ignores SIGTERM: SIGKILL follows after the grace period.
    for (sig, stubborn) in [
        (libc::SIGINT, false),
        (libc::SIGTERM, false),
        (libc::SIGINT, true),
    ] {
        let s = long_fixture_suite();
        if stubborn {
            // The group leader itself ignores SIGTERM, and so do its children.
            let y = s.read("scenes.yaml").replace(
                "run: \"./long.sh {out}\"",
                "run: \"trap '' TERM; ./long.sh {out}\"",
            );
            s.manifest(&y);
        }
        let mut child = spawn_warm(&s, &[]);
        let (step, grand) = wait_for_pids(&s, &mut child);
        assert!(pid_alive(step) && pid_alive(grand));
        unsafe { libc::kill(child.id() as i32, sig) };
        let st = wait_child(&mut child, Duration::from_secs(10));
        let mut err = String::new();
        use std::io::Read;
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(st.code(), Some(2), "signal {sig}: {err}");
        assert!(
            wait_until(Duration::from_secs(3), || !pid_alive(step) && !pid_alive(grand)),
            "signal {sig}: a step process outlived scenerun (step {step} {}, grandchild {grand} {})",
            pid_alive(step),
            pid_alive(grand)
        );
        let cache = s.path("cache");
        assert!(
            entries(&cache, "fixture").is_empty(),
            "signal {sig}: nothing partial published"
        );
        assert!(
            staging_left(&cache).is_empty(),
            "signal {sig}: staging left behind: {:?}",
            staging_left(&cache)
        );
        assert_verify_clean(&s);
        assert!(!s.path("survived").exists());
    }
}

#[test]
fn sigkill_of_scenerun_alone_takes_its_step_groups_down() {
    let s = long_fixture_suite();
    let mut child = spawn_warm(&s, &[]);
    let (step, grand) = wait_for_pids(&s, &mut child);
    // Only scenerun itself: not its process group.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = wait_child(&mut child, Duration::from_secs(5));
    assert!(
        wait_until(Duration::from_secs(2), || !pid_alive(step)
            && !pid_alive(grand)),
        "orphaned steps still alive: step {step} {}, grandchild {grand} {}",
        pid_alive(step),
        pid_alive(grand)
    );
    assert!(entries(&s.path("cache"), "fixture").is_empty());
    assert_verify_clean(&s);
    // The next warm sweeps the dead run's staging and completes.
    fs::remove_file(s.path("slow")).unwrap();
    warm(&s, &["--strict"]);
    assert_eq!(entries(&s.path("cache"), "fixture").len(), 1);
    assert!(
        staging_left(&s.path("cache")).is_empty(),
        "{:?}",
        staging_left(&s.path("cache"))
    );
    assert_verify_clean(&s);
}
