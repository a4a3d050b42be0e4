//! What scenerun reads besides the cache: sources and inputs must be regular files,
//! identity commands are bounded, the manifest parser is linear, and an input edited
//! while its step runs is never published under the old key.

use std::fs;
use std::time::{Duration, Instant};

use super::*;

/// `/dev/zero` or a FIFO as an input or a source: exit 4 at plan time, never a hang,
/// never gigabytes read.
#[test]
fn devices_and_fifos_are_not_sources_or_inputs() {
    for (what, path) in [
        ("input", "/dev/zero"),
        ("input", "pipe"),
        ("source", "pipe"),
    ] {
        let s = light_suite();
        mkfifo(&s.path("pipe"));
        let yaml = s.read("scenes.yaml");
        let yaml = match what {
            "input" => yaml.replace("inputs: [gen.sh]", &format!("inputs: [gen.sh, {path}]")),
            _ => yaml.replace("source: kernels/k.c", &format!("source: {path}")),
        };
        s.manifest(&yaml);
        for cmd in ["plan", "warm"] {
            let o = run(&s, &[cmd]);
            assert_eq!(code(&o), 4, "{what} {path} {cmd}: {}", show(&o));
            assert!(stderr(&o).contains("not a regular file"), "{}", show(&o));
        }
        assert_eq!(s.count("logs/gen.log"), 0);
    }
}

/// An identity command that never ends: exit 3 when `identity_timeout` expires, and the
/// whole process group it started is gone.
#[test]
fn a_hanging_identity_command_is_exit_3_at_its_timeout() {
    let s = light_suite();
    let yaml = s.read("scenes.yaml").replace(
        "    compile: \"echo run",
        "    identity: \"echo $$ > logs/identity.pid; sleep 1000\"\n    identity_timeout: 1s\n    compile: \"echo run",
    );
    s.manifest(&yaml);
    let t0 = Instant::now();
    let o = run(&s, &["plan"]);
    assert_eq!(code(&o), 3, "{}", show(&o));
    assert!(
        stderr(&o).contains("did not finish within 1s"),
        "{}",
        show(&o)
    );
    // Bounded only to catch a hang; the 1 s timeout itself is not asserted.
    assert!(t0.elapsed() < Duration::from_secs(60));
    let pid = s.read("logs/identity.pid").trim().to_string();
    assert!(
        wait_until(Duration::from_secs(10), || !pid_alive(&pid)),
        "identity shell {pid} outlived its timeout"
    );
}

/// SIGTERM of scenerun while an identity command runs: scenerun ends (exit 2) and the
/// command's whole process group, a background child included, ends with it (it runs
/// through the registry a cancel stops, not under a deadline of its own).
#[test]
fn sigterm_during_a_slow_identity_command_leaves_no_child_behind() {
    let s = light_suite();
    let yaml = s.read("scenes.yaml").replace(
        "    compile: \"echo run",
        "    identity: \"sleep 1000 & echo $$ > logs/identity.pid; sleep 1000\"\n    identity_timeout: 1h\n    compile: \"echo run",
    );
    s.manifest(&yaml);
    let mut child = scenerun_process()
        .current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .arg("plan")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid_file = s.path("logs/identity.pid");
    assert!(
        wait_until(Duration::from_secs(60), || fs::read_to_string(&pid_file)
            .is_ok_and(|t| t.ends_with('\n'))),
        "the identity command never started"
    );
    // The shell leads the command's process group.
    let group: i32 = s.read("logs/identity.pid").trim().parse().unwrap();
    assert!(
        wait_until(Duration::from_secs(30), || members(group) == 3),
        "sh and its two sleeps run"
    );
    // SAFETY: a plain signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_bounded(&mut child, Duration::from_secs(60)).expect("scenerun ended");
    assert_eq!(status.code(), Some(2), "interrupted");
    assert!(
        wait_until(Duration::from_secs(10), || members(group) == 0),
        "{} process(es) of the identity command outlived scenerun",
        members(group)
    );
}

/// Live (not zombie) processes in process group `pgid`.
fn members(pgid: i32) -> usize {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let Some((_, rest)) = stat.rsplit_once(')') else {
                return false;
            };
            let f: Vec<&str> = rest.split_whitespace().collect();
            f.len() > 2 && !matches!(f[0], "Z" | "X") && f[2].parse() == Ok(pgid)
        })
        .count()
}

/// An identity command runs once per process, however many kernels share it.
#[test]
fn an_identity_command_runs_once_per_process() {
    let s = light_suite();
    let mut yaml = s.read("scenes.yaml").replace(
        "    compile: \"echo run",
        "    identity: \"echo id >> logs/identity.log; echo v1\"\n    compile: \"echo run",
    );
    for i in 1..4 {
        yaml.push_str(&format!(
            "  - name: s{i}\n    kernels:\n      - name: k\n        toolchain: cp\n        source: kernels/k.c\n        flags: [\"-D{i}\"]\n    device:\n      run: \"true\"\n"
        ));
    }
    s.manifest(&yaml);
    let o = run(&s, &["run", "--no-lock"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    // `run` plans once for warm and device in one process.
    assert_eq!(s.count("logs/identity.log"), 1);
}

/// A suite whose fixture script edits its input `data.txt` ("v1" → "v2-longer") the
/// first time it runs, then copies it into its output.
fn self_editing_suite() -> Suite {
    let s = light_suite();
    s.write("data.txt", "v1\n");
    s.script(
        "gen.sh",
        "#!/bin/sh\necho run >> logs/gen.log\nif [ ! -e logs/edited ]; then touch logs/edited; echo v2-longer > data.txt; fi\ncat data.txt > \"$1/input.txt\"\n",
    );
    let yaml = s
        .read("scenes.yaml")
        .replace("inputs: [gen.sh]", "inputs: [gen.sh, data.txt]");
    s.manifest(&yaml);
    s
}

/// A warm of a `self_editing_suite` whose fixture has not run yet: the edit is noticed
/// and named, the step reruns once, and what is published is the new content.
fn warm_sees_the_edit(s: &Suite) {
    let o = run(s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(
        stderr(&o).contains("input changed during the step (data.txt)"),
        "{}",
        show(&o)
    );
    assert_eq!(s.count("logs/gen.log"), 2, "rerun once");
    let entry = only_entry(s, "fixture");
    assert_eq!(
        fs::read_to_string(entry.join("out/input.txt")).unwrap(),
        "v2-longer\n"
    );
}

/// The fixture script edits its own input while it runs (the first time only): what it
/// built is not published under the key of the old content; it reruns once under the
/// key of the new content; reverting the edit is a miss, never a hit on wrong content.
#[test]
fn an_input_edited_during_its_step_is_not_published_under_the_old_key() {
    let s = self_editing_suite();
    warm_sees_the_edit(&s);
    // The published key is the key of the content now: a second warm hits.
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2, "{}", show(&o));
    // Back to the old content: its key was never published, so it is built, not served.
    fs::write(s.path("data.txt"), "v1\n").unwrap();
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 3);
    let o = run(&s, &["cache", "verify"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
}

/// The same edit when the input's hash comes from the stat memo of an earlier plan (the
/// file older than the racy second, so its entry is trusted and not read again): the
/// change during the step is still seen, and nothing is published under the old key.
#[test]
fn an_input_trusted_from_the_stat_memo_and_edited_during_its_step_is_not_published() {
    let s = self_editing_suite();
    std::thread::sleep(std::time::Duration::from_millis(1_200));
    // Hashes data.txt into the stat memo; the warm below trusts that entry.
    let o = run(&s, &["plan"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    warm_sees_the_edit(&s);
}

/// `run` hands the device phase what warm published: after an input changed during the
/// fixture and the rerun published it under the new key, the device step reads it there
/// (the plan is updated, not built again).
#[test]
fn run_hands_the_device_phase_the_rerun_key() {
    let s = light_suite();
    s.write("data.txt", "v1\n");
    s.script(
        "gen.sh",
        "#!/bin/sh\necho run >> logs/gen.log\nif [ ! -e logs/edited ]; then touch logs/edited; echo v2-longer > data.txt; fi\ncat data.txt > \"$1/input.txt\"\n",
    );
    let yaml = s
        .read("scenes.yaml")
        .replace("inputs: [gen.sh]", "inputs: [gen.sh, data.txt]")
        .replace(
            "    golden:\n      run: \"./golden.sh {fixture} {out}\"\n      inputs: [golden.sh]\n",
            "",
        )
        .replace(
            "run: \"true\"",
            "run: \"grep -q v2-longer {fixture}/input.txt\"",
        );
    assert!(!yaml.contains("golden"), "{yaml}");
    s.manifest(&yaml);
    let o = run(&s, &["run", "--no-lock"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(
        stderr(&o).contains("input changed during the step (data.txt)"),
        "{}",
        show(&o)
    );
    assert_eq!(s.count("logs/gen.log"), 2, "rerun once");
    // The report names the key the fixture was published under, not the one planned.
    let meta: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(only_entry(&s, "fixture").join("meta.json")).unwrap(),
    )
    .unwrap();
    let report = s.read("build/scenerun/report.json");
    let key = meta["key"].as_str().unwrap();
    assert!(report.contains(key), "{report}");
}

/// A BOM is accepted, a NUL in an env value is a manifest error, and 400 KB of nested
/// brackets is refused at once instead of parsing in quadratic time.
#[test]
fn manifest_bom_nul_and_deep_nesting() {
    let s = light_suite();
    let yaml = s.read("scenes.yaml");
    s.manifest(&format!("\u{feff}{yaml}"));
    let o = run(&s, &["plan"]);
    assert_eq!(code(&o), 0, "BOM: {}", show(&o));

    s.manifest(&yaml.replace(
        "platform: a2a3\n",
        "platform: a2a3\nenv:\n  BAD: \"a\\0b\"\n",
    ));
    let o = run(&s, &["plan"]);
    assert_eq!(code(&o), 4, "NUL: {}", show(&o));
    assert!(stderr(&o).contains("NUL"), "{}", show(&o));

    let n = 200_000;
    s.manifest(&format!(
        "version: 1\nscenes: {}{}\n",
        "[".repeat(n),
        "]".repeat(n)
    ));
    let o = run(&s, &["plan"]);
    assert_eq!(code(&o), 4, "nesting: {}", show(&o));
    assert!(stderr(&o).contains("nested deeper than"), "{}", show(&o));
}

/// A file named only in a step's depfile (a golden's Python helper) edited while the
/// step runs, after the step read it: what was built from the old content is not
/// published with the new content's hash. The step reruns once; the entry, and the next
/// warm's hit, hold what the helper says now.
#[test]
fn a_depfile_entry_edited_during_its_step_is_not_published() {
    let s = light_suite();
    s.write("helper.py", "SCALE = 1\n");
    // Reads the helper, then (the first time only) the helper is edited while the step
    // still runs, then it lists what it read.
    s.script(
        "golden.sh",
        "#!/bin/sh\necho run >> logs/golden.log\ncat helper.py > \"$2/expected.txt\"\nif [ ! -e logs/edited ]; then touch logs/edited; echo 'SCALE = 2' > helper.py; fi\necho helper.py > \"$3\"\n",
    );
    let yaml = s.read("scenes.yaml").replace(
        "./golden.sh {fixture} {out}",
        "./golden.sh {fixture} {out} {depfile}",
    );
    s.manifest(&yaml);
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(
        stderr(&o).contains("input changed during the step (helper.py)"),
        "{}",
        show(&o)
    );
    let golden = || fs::read_to_string(only_entry(&s, "golden").join("out/expected.txt")).unwrap();
    assert_eq!(
        golden(),
        "SCALE = 2\n",
        "built from what the helper says now"
    );
    assert_eq!(s.count("logs/golden.log"), 2, "rerun once");
    // The next warm is a hit on the right content.
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/golden.log"), 2, "{}", show(&o));
    assert_eq!(golden(), "SCALE = 2\n");
}

/// The same for a header reached only by a computed `#include` (the include scanner
/// cannot follow it; the compiler's depfile names it), edited while the compiler runs:
/// the kernel built from it prints the header's value as it is now.
#[test]
fn a_computed_include_edited_during_the_compile_is_not_published() {
    let s = Suite::with_logs();
    s.write("include/gen.h", "#define VALUE 1\n");
    s.write(
        "kernels/k.c",
        "#include <stdio.h>\n#define STR(x) #x\n#define XSTR(x) STR(x)\n#include XSTR(GEN_HDR)\nint main(void) { printf(\"%d\\n\", VALUE); return 0; }\n",
    );
    s.script(
        "cc-edit.sh",
        "#!/bin/sh\necho run >> logs/cc.log\ncc \"$@\" || exit 1\nif [ ! -e logs/edited ]; then touch logs/edited; echo '#define VALUE 2' > include/gen.h; fi\n",
    );
    s.manifest(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"./cc-edit.sh -O0 -o {out} {source} {includes} {flags}\"\n    depfile: \"-MD -MF {depfile}\"\nscenes:\n  - name: s\n    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/k.c\n        include_dirs: [include]\n        flags: [\"-DGEN_HDR=gen.h\"]\n    device:\n      run: \"true\"\n",
    );
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(stderr(&o).contains("warm: 1 built"), "{}", show(&o));
    let printed = || {
        let k = only_entry(&s, "kernel").join("out");
        let o = std::process::Command::new(&k).output().unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(
        printed(),
        "2",
        "the kernel was built from the old header: {}",
        show(&o)
    );
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(printed(), "2");
}
