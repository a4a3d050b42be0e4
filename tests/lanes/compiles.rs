//! `compile_cache:` (docs/compile-cache.md): a plain test function that compiles its
//! kernel in its own body, in a real pytest lane, with the real `cc`. Compiler runs are
//! counted by a wrapper found on `PATH` as the compiler (it logs every run that
//! compiles, not `--version`), outputs are run, and a header edit must compile again.

use super::pytest::venv_python;
use super::*;

/// The test: compiles `kernel.c` (which takes `VALUE` from `value.h`) into a program
/// under a fresh temp name, runs it, and checks it prints what `expected.txt` says.
const TEST_PY: &str = r#"import os, subprocess, tempfile

def build_and_run(flags):
    out = tempfile.mktemp(suffix=".bin", dir=os.environ["OUT_DIR"])
    subprocess.run(["tcc-15", *flags, "-o", out, "kernel/kernel.c"], check=True)
    got = subprocess.run([out], check=True, capture_output=True, text=True).stdout.strip()
    return got

def test_first():
    assert build_and_run(["-O2", "-Ikernel"]) == open("expected.txt").read().strip()

def test_second():
    assert build_and_run(["-O2", "-Ikernel"]) == open("expected.txt").read().strip()

def test_broken():
    r = subprocess.run(["tcc-15", "-o", os.environ["OUT_DIR"] + "/broken", "kernel/broken.c"])
    assert r.returncode != 0

def test_probe():
    assert subprocess.run(["tcc-15", "--version"], capture_output=True).returncode == 0
"#;

fn compiling_suite() -> Suite {
    let py = venv_python();
    let s = Suite::with_logs();
    let log = s.path("logs/cc-runs.log");
    // The "real" compiler the manifest names: `cc` with every compiling run counted.
    s.script(
        "tools/tcc-15",
        &format!(
            "#!/bin/sh\ncase \" $* \" in *' -o '*) echo \"$*\" >> '{}';; *' --version '*) echo v >> '{}';; esac\nexec cc \"$@\"\n",
            log.display(),
            s.path("logs/cc-probes.log").display()
        ),
    );
    s.write("kernel/value.h", "#define VALUE 41\n");
    s.write(
        "kernel/kernel.c",
        "#include <stdio.h>\n#include \"value.h\"\nint main(void) { printf(\"%d\\n\", VALUE); return 0; }\n",
    );
    s.write("kernel/broken.c", "int main(void) { return }\n");
    s.write("expected.txt", "41\n");
    s.write("tests/test_k.py", TEST_PY);
    std::fs::create_dir_all(s.path("out")).unwrap();
    let scene = |name: &str| {
        format!("  - name: {name}\n    device:\n      lane: py\n      args: [\"tests/test_k.py::test_{name}\"]\n")
    };
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nenv:\n  OUT_DIR: {out}\n  PATH: \"{tools}:{path}\"\ncompile_cache:\n  compilers: [tcc-15]\nlanes:\n  py:\n    run: \"{py} -m pytest -p no:cacheprovider -q {{args}} --report-log {{results}}\"\nscenes:\n{}{}{}{}",
        scene("first"),
        scene("second"),
        scene("broken"),
        scene("probe"),
        out = s.path("out").display(),
        tools = s.path("tools").display(),
        path = std::env::var("PATH").unwrap(),
        py = py.display(),
    ));
    s
}

/// `device.compiles` without its reasons (`reasons` asserts those).
fn compiles(s: &Suite) -> Value {
    let mut c = report(s)["device"]["compiles"].clone();
    c.as_object_mut().map(|o| o.remove("reasons"));
    c
}

fn reasons(s: &Suite) -> Value {
    report(s)["device"]["compiles"]["reasons"].clone()
}

#[test]
fn a_compile_a_test_runs_in_its_body_is_served_from_the_cache_the_next_time() {
    let s = compiling_suite();
    expect_code(&s.cmd(&["warm"]).output().unwrap(), 0);
    let o = no_lock(&s, "0");
    expect_code(&o, 0);
    let all_passed = |s: &Suite| outcomes(&report(s)).values().all(|o| o == "passed");
    assert!(all_passed(&s), "{}", show(&o));
    // First run: the kernel compiled once (the second test hit what the first built),
    // the broken one ran (and failed, as the test wants), nothing else compiled.
    assert_eq!(
        s.count("logs/cc-runs.log"),
        2,
        "{}",
        s.read("logs/cc-runs.log")
    );
    // The compiler's identity is asked once per run, before the lock, not per compile;
    // the other `--version` is test_probe's own.
    assert_eq!(s.count("logs/cc-probes.log"), 2);
    assert_eq!(
        compiles(&s),
        serde_json::json!({"hit": 1, "built": 1, "ran": 2}),
        "{}",
        show(&o)
    );
    // Why each ran without the cache: report.json only, the terminal line keeps counts.
    assert_eq!(
        reasons(&s),
        serde_json::json!({"the compile failed": 1, "prints instead of compiling": 1})
    );
    assert!(
        stdout(&o).contains("compiles the tests started: 1 from the cache, 1 compiled and kept, 2 ran without the cache"),
        "{}",
        show(&o)
    );

    // Nothing changed: no kernel compile at all; a failed compile is never kept.
    let o = no_lock(&s, "0");
    expect_code(&o, 0);
    assert!(all_passed(&s), "{}", show(&o));
    let runs = s.read("logs/cc-runs.log");
    assert_eq!(s.count("logs/cc-runs.log"), 3, "{runs}");
    assert!(runs.lines().last().unwrap().contains("broken.c"), "{runs}");
    assert_eq!(
        compiles(&s),
        serde_json::json!({"hit": 2, "built": 0, "ran": 2})
    );

    // A header the compile read changes: compiled again, and the new value is what runs.
    s.write("kernel/value.h", "#define VALUE 42\n");
    s.write("expected.txt", "42\n");
    let o = no_lock(&s, "0");
    expect_code(&o, 0);
    assert!(all_passed(&s), "{}", show(&o));
    assert_eq!(
        s.count("logs/cc-runs.log"),
        5,
        "{}",
        s.read("logs/cc-runs.log")
    );
    assert_eq!(
        compiles(&s),
        serde_json::json!({"hit": 1, "built": 1, "ran": 2})
    );
    // The entries are the cache's: `cache stats` counts them, `verify` re-hashes them.
    let stats = stdout(&s.cmd(&["cache", "stats"]).output().unwrap());
    assert!(stats.contains("compiled"), "{stats}");
    expect_code(&s.cmd(&["cache", "verify"]).output().unwrap(), 0);
}

#[test]
fn without_compile_cache_every_compile_runs() {
    let s = compiling_suite();
    let text = s
        .read("scenes.yaml")
        .replace("compile_cache:\n  compilers: [tcc-15]\n", "");
    s.write("scenes.yaml", &text);
    for _ in 0..2 {
        expect_code(&no_lock(&s, "0"), 0);
    }
    assert_eq!(
        s.count("logs/cc-runs.log"),
        6,
        "{}",
        s.read("logs/cc-runs.log")
    );
    assert!(report(&s)["device"].get("compiles").is_none());
}

#[test]
fn a_compiler_name_that_is_a_path_or_given_twice_is_a_manifest_error() {
    let s = compiling_suite();
    let text = s.read("scenes.yaml");
    for (list, want) in [
        ("[/usr/bin/cc]", "`/usr/bin/cc` is not a program name"),
        ("[\"g++ -O2\"]", "`g++ -O2` is not a program name"),
        ("[cc, cc]", "`cc` is listed twice"),
    ] {
        s.write("scenes.yaml", &text.replace("[tcc-15]", list));
        let o = s.cmd(&["plan"]).output().unwrap();
        expect_code(&o, 4);
        let err = stderr(&o);
        assert!(
            err.contains("compile_cache.compilers") && err.contains(want),
            "{err}"
        );
    }
}

#[test]
fn two_lanes_compiling_the_same_kernel_at_once_run_the_compiler_once() {
    let s = compiling_suite();
    // Two lanes on two ids, each test compiling the kernel; the compiler is slowed so
    // that the two compiles overlap when nothing holds the second back.
    let text = s.read("scenes.yaml").replace(
        "lanes:\n  py:\n",
        "lanes:\n  py2:\n    run: \"PLACEHOLDER\"\n  py:\n",
    );
    let run = text
        .lines()
        .find(|l| l.trim_start().starts_with("run:") && l.contains("pytest"))
        .unwrap()
        .to_string();
    let text = text.replace("    run: \"PLACEHOLDER\"", &run).replace(
        "  - name: second\n    device:\n      lane: py\n",
        "  - name: second\n    device:\n      lane: py2\n",
    );
    s.write("scenes.yaml", &text);
    let log = s.path("logs/cc-runs.log");
    s.script(
        "tools/tcc-15",
        &format!(
            "#!/bin/sh\ncase \" $* \" in *' -o '*) echo \"$*\" >> '{}'; sleep 1;; esac\nexec cc \"$@\"\n",
            log.display()
        ),
    );
    let text = s.read("scenes.yaml").replace(
        "  - name: broken\n    device:\n      lane: py\n      args: [\"tests/test_k.py::test_broken\"]\n",
        "",
    );
    s.write("scenes.yaml", &text);
    let o = no_lock(&s, "0,1");
    expect_code(&o, 0);
    assert!(
        outcomes(&report(&s)).values().all(|o| o == "passed"),
        "{}",
        show(&o)
    );
    let r = report(&s);
    let lanes: Vec<String> = r["device"]["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["lane"].as_str().unwrap().to_string())
        .collect();
    assert!(lanes.contains(&"py2".to_string()), "{lanes:?}");
    assert_eq!(
        s.count("logs/cc-runs.log"),
        1,
        "{}",
        s.read("logs/cc-runs.log")
    );
    assert_eq!(
        compiles(&s),
        serde_json::json!({"hit": 1, "built": 1, "ran": 1})
    );
}

/// Under `cache.verify_key` an entry must be signed to be served, and the signing key
/// never reaches a lane: `device` signs what the run's compiles kept once the run has
/// ended. Within that first run the second test's compile is a miss (its twin is not
/// signed yet); the next run serves both.
#[test]
fn with_a_verify_key_the_compiles_kept_are_signed_when_the_run_ends() {
    let (private, public) = crate::trust::signed::keypair(5);
    let s = compiling_suite();
    let text = s.read("scenes.yaml").replace(
        "cache:\n  dir: cache\n",
        &format!(
            "cache:\n  dir: cache\n  verify_key: \"{public}\"\n  sign_key_env: MY_ENTRY_KEY\n"
        ),
    );
    s.write("scenes.yaml", &text);
    let device = |key: Option<&str>| {
        let mut c = s.cmd(&["device", "--no-lock", "--devices", "0"]);
        if let Some(k) = key {
            c.env("MY_ENTRY_KEY", k);
        }
        c.output().unwrap()
    };
    // Without the key nothing kept can be served: every compile runs, every run.
    for _ in 0..2 {
        expect_code(&device(None), 0);
    }
    assert_eq!(
        s.count("logs/cc-runs.log"),
        6,
        "{}",
        s.read("logs/cc-runs.log")
    );
    // With it: compiled (both, and the broken one), kept, signed at the end.
    let o = device(Some(&private));
    expect_code(&o, 0);
    assert_eq!(
        s.count("logs/cc-runs.log"),
        9,
        "{}",
        s.read("logs/cc-runs.log")
    );
    let o = device(Some(&private));
    expect_code(&o, 0);
    if let Some(how) = crate::common::emulated() {
        // Under qemu-user the kernel shows another emulated process's executable
        // (`/proc/<pid>/exe`) as the emulator, so the run cannot tell its compiler shims
        // from any other program on its socket and signs nothing: under the verify key
        // every compile runs again, slower and never served unsigned (docs/install.md).
        assert_eq!(s.count("logs/cc-runs.log"), 12, "{}", show(&o));
        assert_eq!(compiles(&s)["hit"], 0, "{}", show(&o));
        assert!(
            stderr(&o).contains("is not signed: the kernel says it runs"),
            "the run says why: {}",
            show(&o)
        );
        eprintln!(
            "SKIPPED part ({how}): a kept compile served under the verify key; checked instead that nothing unsigned is served"
        );
        return;
    }
    // Served under the verify key: only the broken compile runs again.
    assert_eq!(
        s.count("logs/cc-runs.log"),
        10,
        "{}",
        s.read("logs/cc-runs.log")
    );
    assert_eq!(
        compiles(&s),
        serde_json::json!({"hit": 2, "built": 0, "ran": 2}),
        "{}",
        show(&o)
    );
}

#[test]
fn a_compiler_not_on_path_is_said_once_and_the_others_still_go_through_the_cache() {
    let s = compiling_suite();
    let text = s
        .read("scenes.yaml")
        .replace("[tcc-15]", "[nosuch-cc-15, tcc-15]");
    s.write("scenes.yaml", &text);
    let o = no_lock(&s, "0");
    expect_code(&o, 0);
    let said = format!("{}{}", stdout(&o), stderr(&o));
    assert_eq!(
        said.matches(
            "compile_cache: `nosuch-cc-15` is not on PATH; no compile of it goes through the cache"
        )
        .count(),
        1,
        "{}",
        show(&o)
    );
    assert_eq!(
        compiles(&s),
        serde_json::json!({"hit": 1, "built": 1, "ran": 2})
    );
}
