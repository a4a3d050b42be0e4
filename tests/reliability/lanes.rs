//! Lanes that misbehave on purpose (docs/guarantees.md, "Bounds"): a lane process owns
//! its results file and what it writes there, so nothing it does to the file or says in
//! it may hang `device`, exhaust its memory, lose results already read, or quarantine
//! ids the lane does not hold.

use super::*;

/// A suite with lane `l` running `lane.sh` (the given script body) on `{scenes}
/// {results} {devices}`, its extra keys in `lane_keys`, and `n` lane scenes `s0..`.
fn lane_suite(script: &str, lane_keys: &str, n: usize) -> Suite {
    let s = Suite::with_logs();
    s.script(
        "lane.sh",
        &format!("#!/bin/sh\nscenes=$1 results=$2 devices=$3\n{script}"),
    );
    let mut y = format!(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  l:\n    run: \"./lane.sh {{scenes}} {{results}} {{devices}}\"\n{lane_keys}scenes:\n"
    );
    for i in 0..n {
        y.push_str(&format!(
            "  - name: s{i}\n    device:\n      lane: l\n      args: [a{i}]\n"
        ));
    }
    s.manifest(&y);
    s
}

/// `device --no-lock --devices IDS`, bounded.
fn device(s: &Suite, ids: &str, limit: Duration) -> Run {
    exec(sr(s, &["device", "--no-lock", "--devices", ids]), limit)
}

fn report(s: &Suite) -> serde_json::Value {
    read_json(&s.path("build/scenerun/report.json")).unwrap_or_default()
}

fn outcome(r: &serde_json::Value, scene: &str) -> String {
    report_scene(r, scene)
        .and_then(|s| s["outcome"].as_str())
        .unwrap_or("(none)")
        .to_string()
}

/// A `device_fault` naming only ids the lane process does not hold is ignored, as the
/// warning says: no id is quarantined, the process is not killed, its scenes keep their
/// own results.
#[test]
fn a_device_fault_on_foreign_ids_quarantines_nothing() {
    let s = lane_suite(
        r#"emit() { printf '%s\n' "$1" >> "$results"; }
emit '{"event":"device_fault","devices":[7, "9"]}'
sleep 0.2
for sc in s0 s1; do
  emit "{\"scene\":\"$sc\",\"event\":\"start\"}"
  emit "{\"scene\":\"$sc\",\"event\":\"end\",\"outcome\":\"passed\"}"
done
"#,
        "",
        2,
    );
    let r = device(&s, "0,1", secs(60));
    assert!(r.is(0), "{}", r.desc());
    let rep = report(&s);
    assert_eq!(
        rep["device"]["quarantined"],
        serde_json::json!([]),
        "{rep:#}"
    );
    for sc in ["s0", "s1"] {
        assert_eq!(outcome(&rep, sc), "passed", "{rep:#}");
    }
    assert!(
        r.stderr.contains("ids it does not hold (7,9); ignored"),
        "{}",
        r.desc()
    );
}

/// What a lane process does to its results path (`$results`) before it would report:
/// each must end the process with a lane protocol error that names the path, within the
/// bound, its scenes failed (never hung, never read without end).
const RESULTS_PATH_ATTACKS: &[(&str, &str)] = &[
    ("a FIFO", "mkfifo \"$results\""),
    (
        "a symlink to a FIFO",
        "mkfifo \"$results.fifo\"; ln -s \"$results.fifo\" \"$results\"",
    ),
    ("a symlink to /dev/zero", "ln -s /dev/zero \"$results\""),
    (
        "a symlink to a regular file",
        "echo '{}' > \"$results.real\"; ln -s \"$results.real\" \"$results\"",
    ),
    ("a directory", "mkdir \"$results\""),
];

/// Run `device` with the address space of scenerun capped (4 GiB): reading a device
/// without end then fails on allocation instead of taking the machine's memory.
fn device_capped(s: &Suite, ids: &str, limit: Duration) -> Run {
    let mut c = sr(s, &["device", "--no-lock", "--devices", ids]);
    // SAFETY: setrlimit is async-signal-safe and touches only the child's own limits.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 4 << 30,
                rlim_max: 4 << 30,
            };
            libc::setrlimit(libc::RLIMIT_AS, &lim);
            Ok(())
        });
    }
    exec(c, limit)
}

/// The results path as a FIFO, a link to one, a link to `/dev/zero`, a link at all, a
/// directory: a lane protocol error within the bound (no scene or lane timeout is even
/// set: the check does not wait for one), the scenes failed, nothing read forever.
#[test]
fn a_results_path_that_is_not_a_regular_file_is_a_protocol_error() {
    let mut faults = Faults::new("results_path");
    for (what, plant) in RESULTS_PATH_ATTACKS {
        // The lane plants, then would report a pass after a while and idle.
        let s = lane_suite(
            &format!(
                "{plant}\nsleep 1\nprintf '%s\\n' '{{\"scene\":\"s0\",\"event\":\"end\",\"outcome\":\"passed\"}}' >> \"$results.real\" 2>/dev/null\nsleep 300\n"
            ),
            "",
            2,
        );
        let t = Instant::now();
        let r = device_capped(&s, "0", secs(60));
        let took = t.elapsed();
        faults.check(r.is(1), || format!("{what}: {}", r.desc()));
        let rep = report(&s);
        for sc in ["s0", "s1"] {
            let o = outcome(&rep, sc);
            faults.check(o == "failed" || o == "not_run", || {
                format!("{what}: {sc} is {o}: {rep:#}")
            });
        }
        let msg = report_scene(&rep, "s0")
            .and_then(|x| x["message"].as_str())
            .unwrap_or("")
            .to_string();
        faults.check(
            msg.contains("lane protocol error") && msg.contains("not a regular file"),
            || format!("{what}: s0's message: {msg}"),
        );
        figure(
            "results_path",
            &format!("{what}: exit {:?} in {} ms", r.code, took.as_millis()),
        );
    }
    faults.finish();
}

/// A results line without its newline grows without end (a 400 MB one took 1.2 GB of
/// memory): past 1 MiB it is a protocol error, the process is stopped at once (it would
/// idle for 300 s) and its scenes fail, naming the cap. A 1 MiB line that ends is read.
#[test]
fn a_results_line_past_one_mib_is_a_protocol_error() {
    let s = lane_suite(
        r#"emit() { printf '%s\n' "$1" >> "$results"; }
# One line just under the cap is fine: an end record padded with a long message.
pad=$(head -c 1000000 /dev/zero | tr '\0' x)
emit "{\"scene\":\"s0\",\"event\":\"end\",\"outcome\":\"passed\",\"message\":\"$pad\"}"
head -c 64000000 /dev/zero | tr '\0' y >> "$results"
sleep 300
"#,
        "",
        2,
    );
    let t = Instant::now();
    let r = device(&s, "0", secs(120));
    let took = t.elapsed();
    assert!(r.is(1), "{}", r.desc());
    let rep = report(&s);
    assert_eq!(outcome(&rep, "s0"), "passed", "{rep:#}");
    assert_eq!(outcome(&rep, "s1"), "failed", "{rep:#}");
    let msg = report_scene(&rep, "s1").unwrap()["message"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        msg.contains("lane protocol error: a results line is longer than 1 MiB"),
        "{msg}"
    );
    figure(
        "results_line",
        &format!(
            "64 MB line without a newline → exit 1 in {} ms",
            took.as_millis()
        ),
    );
}

/// A lane that truncates its results file after reporting (a runtime reopening it with
/// O_TRUNC): the scenes already read keep their passes, and what it writes afterwards,
/// from the start of the file again, is read too.
#[test]
fn a_truncated_results_file_keeps_the_results_already_read() {
    let s = lane_suite(
        r#"emit() { printf '%s\n' "$1" >> "$results"; }
for sc in s0 s1; do
  emit "{\"scene\":\"$sc\",\"event\":\"start\"}"
  emit "{\"scene\":\"$sc\",\"event\":\"end\",\"outcome\":\"passed\",\"duration_secs\":0.01}"
done
# Wait until scenerun has read them (its live line), then start the file over.
sleep 1
: > "$results"
printf '%s\n' '{"scene":"s2","event":"start"}' >> "$results"
printf '%s\n' '{"scene":"s2","event":"end","outcome":"passed"}' >> "$results"
"#,
        "",
        3,
    );
    let r = device(&s, "0", secs(60));
    assert!(r.is(0), "{}", r.desc());
    let rep = report(&s);
    for sc in ["s0", "s1", "s2"] {
        assert_eq!(outcome(&rep, sc), "passed", "{sc}: {rep:#}");
    }
}

/// Ignored results lines are warned about one by one only up to 20 per process; the rest
/// are counted in one line (a lane writing a million of them does not flood the log).
#[test]
fn ignored_results_lines_are_warned_about_boundedly() {
    let s = lane_suite(
        r#"i=0; while [ $i -lt 500 ]; do echo "garbage $i" >> "$results"; i=$((i+1)); done
printf '%s\n' '{"scene":"s0","event":"end","outcome":"passed"}' >> "$results"
"#,
        "",
        1,
    );
    let r = device(&s, "0", secs(60));
    assert!(r.is(0), "{}", r.desc());
    assert_eq!(
        r.stderr.matches("ignored a results line").count(),
        20,
        "{}",
        r.desc()
    );
    assert!(
        r.stderr
            .contains("480 more ignored results lines of lane `l` (process 0) not shown"),
        "{}",
        r.desc()
    );
}
