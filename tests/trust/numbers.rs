//! Every duration and count in a manifest has a documented maximum (exit 4 beyond, at
//! its line and column), no clock arithmetic can overflow, a NUL byte in a command,
//! argument or flag is refused at load, and a panic in any thread ends scenerun with
//! exit 3 and its step processes killed — never a hang that ignores SIGTERM.

use super::*;

/// A manifest with one scene; `extra` is spliced into it (see the cases).
fn manifest(scene: &str, top: &str) -> String {
    format!("version: 1\ncache:\n  dir: cache\n{top}scenes:\n  - name: s0\n{scene}")
}

const FIXTURE: &str = "    fixture:\n      run: \"echo 1 > {out}/a\"\n";

#[test]
fn durations_and_counts_past_their_maximum_are_manifest_errors() {
    let lane = "lanes:\n  l:\n    run: \"true\"\n";
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "device timeout",
            manifest("    device:\n      run: \"true\"\n      timeout: 1e19\n", ""),
            "scenes[0].device.timeout",
        ),
        (
            "fixture timeout",
            manifest(
                "    fixture:\n      run: \"echo 1 > {out}/a\"\n      timeout: 1e19\n",
                "",
            ),
            "scenes[0].fixture.timeout",
        ),
        (
            "stop_wait",
            manifest(
                "    device:\n      run: \"true\"\n      stop_signal: USR1\n      stop_wait: 1e19\n",
                "",
            ),
            "scenes[0].device.stop_wait",
        ),
        (
            "scenes_from timeout",
            format!(
                "{}scenes_from:\n  - run: \"true\"\n    timeout: 1e19\n",
                manifest(FIXTURE, "")
            ),
            "scenes_from[0].timeout",
        ),
        (
            "lane timeout",
            manifest(
                "    device:\n      lane: l\n",
                &format!("{lane}    timeout: 400d\n"),
            ),
            "lanes.l.timeout",
        ),
        (
            "max_age",
            manifest(FIXTURE, "").replace("  dir: cache\n", "  dir: cache\n  max_age: 1e19\n"),
            "cache.max_age",
        ),
        (
            "lock grace",
            manifest(FIXTURE, "lock:\n  submit: \"{run}\"\n  grace: 99999999999999\n"),
            "lock.grace",
        ),
        (
            "retries",
            manifest("    device:\n      run: \"true\"\n      retries: 4000000000\n", ""),
            "scenes[0].device.retries",
        ),
        (
            "lane restarts",
            manifest(
                "    device:\n      lane: l\n",
                &format!("{lane}    max_restarts: 4000000000\n"),
            ),
            "lanes.l.max_restarts",
        ),
        (
            "threads",
            manifest(
                "    fixture:\n      run: \"echo 1 > {out}/a\"\n      threads: 4000000000\n",
                "",
            ),
            "scenes[0].fixture.threads",
        ),
    ];
    let mut failures = Vec::new();
    for (what, text, key) in cases {
        let s = Suite::new();
        s.manifest(&text);
        for cmd in ["plan", "warm"] {
            let o = run(&s, &[cmd]);
            let err = stderr(&o);
            if code(&o) != 4 || !err.contains(key) || !err.contains("scenes.yaml:") {
                failures.push(format!("{what} ({cmd}): exit {}: {}", code(&o), show(&o)));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}

#[test]
fn a_nul_byte_in_a_command_argument_or_flag_is_refused_at_load() {
    let cases = [
        ("run", manifest("    device:\n      run: \"true\\0 x\"\n", "")),
        (
            "args",
            manifest(
                "    device:\n      lane: l\n      args: [\"a\\0b\"]\n",
                "lanes:\n  l:\n    run: \"true\"\n",
            ),
        ),
        (
            "flags",
            manifest(
                "    kernels:\n      - name: k\n        toolchain: cp\n        source: k.c\n        flags: [\"-O2\\0-x\"]\n",
                "toolchains:\n  cp:\n    compile: \"cp {source} {out} {flags}\"\n",
            ),
        ),
    ];
    let mut failures = Vec::new();
    for (what, text) in cases {
        let s = Suite::new();
        s.write("k.c", "int k;\n");
        s.manifest(&text);
        let o = run(&s, &["plan"]);
        if code(&o) != 4 || !stderr(&o).contains("NUL") {
            failures.push(format!("{what}: exit {}: {}", code(&o), show(&o)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}

/// Pids of live processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(needle)
                })
                .unwrap_or(false)
        })
        .filter(|pid| {
            // Zombies do not count.
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
                .is_some_and(|r| !r.starts_with('Z'))
        })
        .collect()
}

#[test]
fn a_panic_in_any_thread_is_exit_3_with_the_steps_killed() {
    // Debug builds make a thread that has just started a step panic when this is set
    // (the only way to make scenerun panic on purpose).
    let marker = format!("300.{}", std::process::id());
    let s = Suite::new();
    s.manifest(&manifest(
        &format!(
            "    fixture:\n      run: \"sleep {marker}; echo > {{out}}/a\"\n    device:\n      run: \"sleep {marker}\"\n"
        ),
        "",
    ));
    let mut failures = Vec::new();
    for args in [&["warm"][..], &["device", "--no-lock", "--devices", "0"]] {
        if args[0] == "device" {
            // The fixture must be there for the device step to start.
            fs::create_dir_all(s.path("bin")).unwrap();
            let text = s
                .read("scenes.yaml")
                .replace(&format!("sleep {marker}; "), "");
            s.manifest(&text);
            let o = run(&s, &["warm"]);
            assert_eq!(code(&o), 0, "{}", show(&o));
        }
        let mut c = scenerun_process();
        c.current_dir(s.dir())
            .arg("--manifest")
            .arg(s.path("scenes.yaml"))
            .args(args)
            .env("SCENERUN_DEBUG_PANIC_AFTER_SPAWN", "1");
        let o = run_bounded(c, Duration::from_secs(60));
        if code(&o) != 3 || !stderr(&o).contains("panicked") {
            failures.push(format!("{args:?}: exit {}: {}", code(&o), show(&o)));
        }
        // The step's group was SIGKILLed before the exit (or by the watchdog just
        // after it): give the kernel a moment to reap.
        let t = std::time::Instant::now();
        while !processes_with(&format!("sleep {marker}")).is_empty()
            && t.elapsed() < Duration::from_secs(5)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = processes_with(&format!("sleep {marker}"));
        if !left.is_empty() {
            failures.push(format!("{args:?}: step processes left: {left:?}"));
            for pid in left {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}

/// A lane's `duration_secs: 1e308` (finite, so JSON) is clamped to the time the lane
/// process ran and noted; report.json's busy time stays within the held time, and
/// `fleet simulate --from-reports` takes the report.
#[test]
fn a_lane_duration_past_its_process_is_clamped_and_noted() {
    let s = Suite::with_logs();
    s.script(
        "lane.sh",
        "#!/bin/sh\nwhile IFS= read -r l; do n=$(printf '%s' \"$l\" | sed -n 's/.*\"scene\":\"\\([^\"]*\\)\".*/\\1/p'); printf '{\"scene\":\"%s\",\"event\":\"start\"}\\n{\"scene\":\"%s\",\"event\":\"end\",\"outcome\":\"passed\",\"duration_secs\":1e308}\\n' \"$n\" \"$n\" >> \"$2\"; done < \"$1\"\n",
    );
    s.manifest(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  l:\n    run: \"./lane.sh {scenes} {results}\"\nscenes:\n  - name: a\n    device:\n      lane: l\n  - name: b\n    device:\n      lane: l\n",
    );
    let o = run(&s, &["device", "--no-lock", "--devices", "0"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(
        stderr(&o).contains("clamped"),
        "the clamp is noted: {}",
        show(&o)
    );
    let report = s.record("report.json").expect("report.json");
    let text = report.to_string();
    assert!(!text.contains("e308"), "{text}");
    let d = &report["device"];
    let (busy, held) = (
        d["busy_secs"].as_f64().unwrap(),
        d["inner_secs"].as_f64().unwrap(),
    );
    assert!(busy <= held + 1e-6, "busy {busy} > held {held}: {d}");
    for sc in report["scenes"].as_array().unwrap() {
        let secs = sc["duration_secs"].as_f64().unwrap_or(0.0);
        assert!(secs <= held + 1e-6, "{sc}");
    }
    let dir = s.path("build/scenerun");
    let o = run(
        &s,
        &[
            "fleet",
            "simulate",
            "--cards",
            "2",
            "--jobs",
            "4",
            "--arrival",
            "fixed:60",
            "--from-reports",
            dir.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 0, "fleet refused the report: {}", show(&o));
}
