//! Warm workers (docs/warm.md, "Workers") with real pytest from the test virtualenv
//! (`.ci/venv`, or `$SCENERUN_TEST_VENV`) and the plugin's `python -m scenerun_pytest
//! worker`: a small class-style suite whose generators behave as each case's params say
//! (succeed, raise, kill themselves, kill their worker, hang, grow, leak into a module
//! global). Every Python start goes through a `python` shim that logs its arguments:
//! the tests count worker start-ups and step processes, never seconds.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::common::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The test virtualenv's interpreter, with this checkout's plugin in it.
fn venv_python() -> PathBuf {
    let dir = std::env::var_os("SCENERUN_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join(".ci/venv"));
    let py = dir.join("bin/python");
    let o = std::process::Command::new(&py)
        .args([
            "-c",
            "import os, scenerun_pytest.worker as w; print(os.path.dirname(w.__file__))",
        ])
        .output()
        .unwrap_or_else(|e| panic!("no virtualenv at {} (bash .ci/deps.sh): {e}", dir.display()));
    assert!(
        o.status.success(),
        "the virtualenv lacks the plugin: {}",
        show(&o)
    );
    let installed = PathBuf::from(stdout(&o).trim());
    let source = Path::new(REPO).join("python/scenerun-pytest/src/scenerun_pytest");
    for name in ["worker.py", "phases.py", "__main__.py"] {
        assert!(
            fs::read(source.join(name)).unwrap()
                == fs::read(installed.join(name)).unwrap_or_default(),
            "{name} in the virtualenv differs from the checkout: bash .ci/deps.sh"
        );
    }
    py
}

const TEST_A: &str = r#"import os
import signal
import time

from helpers import only_a, state


def mark(name, text):
    with open(os.path.join(os.environ["WORKER_TEST_MARKS"], name), "w") as f:
        f.write(text)


def parent_is_worker():
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        return b"scenerun_pytest\0worker" in f.read()


class TestA:
    CASES = [
        {"name": n, "params": {"do": n.rstrip("0123456789"), "n": n}}
        for n in os.environ.get("WORKER_TEST_CASES", "ok1").split(",")
    ]

    def generate_args(self, params):
        name, do = params["n"], params["do"]
        state.SEEN.append(name)
        if do == "leak":
            only_a.VALUE = 99
        elif do == "raise":
            raise ValueError("boom")
        elif do == "selfkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif do == "killworker":
            assert parent_is_worker()
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(60)
        elif do == "hang":
            mark(name + ".pid", str(os.getpid()))
            time.sleep(600)
        elif do == "big":
            block = b"x" * (400 << 20)
            time.sleep(60)
            return {"x": [len(block)]}
        elif do == "bg":
            import subprocess
            mark(name + ".bg", str(subprocess.Popen(["sleep", "300"]).pid))
        elif do == "tree":
            import subprocess, sys
            grow = "import time; b = b'x' * (70 << 20); time.sleep(30)"
            for kid in [subprocess.Popen([sys.executable, "-c", grow]) for _ in range(3)]:
                kid.wait()
        elif do == "env":
            import json
            mark(name + ".env", json.dumps(sorted(os.environ.items())))
        print("generated", name)  # on the step's stdout: its log, never the protocol
        mark(name, f"{state.SEEN}|{only_a.VALUE}|{os.getpid()}")
        return {"x": [1.0, 2.0]}

    def compute_golden(self, args, params):
        from helpers.golden_only import ref

        if params["do"] == "bg":
            with open(os.path.join(os.environ["WORKER_TEST_MARKS"], params["n"] + ".bg")) as f:
                pid = f.read()
            try:
                with open(f"/proc/{pid}/stat") as f:
                    alive = f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                alive = False
            mark(params["n"] + ".alive", "yes" if alive else "no")
        return {"y": ref(args["x"])}

    def test_run(self):
        pass
"#;

const TEST_B: &str = r#"import helpers.golden_only
from helpers import only_b


class TestB:
    CASES = [{"name": "b1", "params": {}}]

    def generate_args(self, params):
        return {"x": [float(only_b.VALUE)]}

    def compute_golden(self, args, params):
        return {"y": helpers.golden_only.ref(args["x"])}

    def test_run(self):
        pass
"#;

/// The suite, a `python` shim first on PATH, and where the generators leave marks.
struct Workers {
    suite: Suite,
    path_env: String,
    /// TestA's cases (`$WORKER_TEST_CASES`: its `CASES` are made from it).
    cases: String,
}

impl Workers {
    fn new() -> Workers {
        let py = venv_python();
        let s = Suite::with_logs();
        // As simpler's: importlib mode (the helpers import from the directory
        // `python -m` runs in).
        s.write(
            "pytest.ini",
            "[pytest]\ntestpaths = tests\naddopts = --import-mode=importlib\n",
        );
        s.write(
            "conftest.py",
            "# the root conftest, noisy on stdout as it loads\nprint('conftest loaded')\n",
        );
        // A second conftest under it: pytest then keeps the root one out of
        // `sys.modules` (so a depfile made from what was imported missed it).
        s.write("tests/conftest.py", "# the tests' conftest\n");
        s.write("helpers/__init__.py", "");
        s.write("helpers/state.py", "SEEN = []\n");
        s.write("helpers/only_a.py", "VALUE = 1\n");
        s.write("helpers/only_b.py", "VALUE = 2\n");
        s.write(
            "helpers/golden_only.py",
            "def ref(x):\n    return list(x)\n",
        );
        s.write("tests/test_a.py", TEST_A);
        s.write("tests/test_b.py", TEST_B);
        fs::create_dir_all(s.path("marks")).unwrap();
        s.script(
            "shim/python",
            &format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
                s.path("logs/python.log").display(),
                py.display()
            ),
        );
        let path_env = format!(
            "{}:{}",
            s.path("shim").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Workers {
            suite: s,
            path_env,
            cases: String::new(),
        }
    }

    /// The manifest: `workers:` as given, then one scene per case of TestA (fixture and
    /// golden in worker `py`, the fixture's `timeout` when given) and TestB's `b1`.
    fn manifest(&mut self, workers: &str, cases: &[&str], timeout: Option<&str>) {
        let mut y = format!(
            "version: 1\nplatform: sim\ncache:\n  dir: cache\nworkers:\n{workers}scenes:\n"
        );
        let step = |kind: &str, file: &str, cls: &str, case: &str, extra: &str| {
            let fixture = if kind == "golden" {
                " --fixture {fixture}"
            } else {
                ""
            };
            format!(
                "    {kind}:\n      run: \"python -m scenerun_pytest {kind} {file}::{cls} --case {case}{fixture} --out {{out}} --depfile {{depfile}}\"\n      worker: py\n{extra}"
            )
        };
        let limit = timeout
            .map(|t| format!("      timeout: {t}\n"))
            .unwrap_or_default();
        for case in cases {
            y.push_str(&format!("  - name: A.{case}\n"));
            y.push_str(&step("fixture", "tests/test_a.py", "TestA", case, &limit));
            y.push_str(&step("golden", "tests/test_a.py", "TestA", case, ""));
        }
        y.push_str("  - name: B.b1\n");
        y.push_str(&step("fixture", "tests/test_b.py", "TestB", "b1", ""));
        y.push_str(&step("golden", "tests/test_b.py", "TestB", "b1", ""));
        self.suite.manifest(&y);
        self.cases = cases.join(",");
    }

    fn warm(&self, args: &[&str]) -> std::process::Output {
        self.suite
            .cmd(&[&["warm"], args].concat())
            .env("PATH", &self.path_env)
            .env("WORKER_TEST_MARKS", self.suite.path("marks"))
            .env("WORKER_TEST_CASES", &self.cases)
            .env_remove("PYTHONPATH")
            .output()
            .unwrap()
    }

    /// Python starts so far whose arguments contain `what`.
    fn starts(&self, what: &str) -> usize {
        self.suite
            .read("logs/python.log")
            .lines()
            .filter(|l| l.contains(what))
            .count()
    }

    fn mark(&self, name: &str) -> String {
        self.suite.read(&format!("marks/{name}"))
    }
}

/// Worker `py`: the suite's own paths, as `collect` would get them.
const PY: &str = "  py:\n    run: \"python -m scenerun_pytest worker tests\"\n";

/// `scene/step` of every step a warm built.
fn built(o: &std::process::Output) -> Vec<String> {
    let mut b: Vec<String> = stderr(o)
        .lines()
        .filter(|l| l.ends_with(" built"))
        .filter_map(|l| {
            l.split_once("] ")?
                .1
                .split_whitespace()
                .nth(1)
                .map(str::to_string)
        })
        .collect();
    b.sort();
    b
}

/// The line under a failed step's line: its cause.
fn cause(o: &std::process::Output, step: &str) -> String {
    let err = stderr(o);
    let mut lines = err.lines();
    while let Some(l) = lines.next() {
        if l.contains(&format!(" {step} ")) && l.contains("FAILED") {
            return lines.next().unwrap_or_default().trim().to_string();
        }
    }
    panic!("{step} did not fail:\n{err}")
}

#[test]
fn steps_on_two_slots_start_at_most_two_workers_and_a_noop_warm_starts_none() {
    let mut w = Workers::new();
    w.manifest(PY, &["ok1", "ok2", "ok3", "ok4", "ok5"], None);
    let o = w.warm(&["-j", "2"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(built(&o).len(), 12, "{}", show(&o));
    let workers = w.starts("scenerun_pytest worker");
    assert!((1..=2).contains(&workers), "{workers} workers for 2 slots");
    assert_eq!(
        w.starts("scenerun_pytest fixture") + w.starts("scenerun_pytest golden"),
        0,
        "every step ran in a worker: {}",
        w.suite.read("logs/python.log")
    );
    // Each step ran in a fork of its own.
    let pids: std::collections::BTreeSet<String> = (1..=5)
        .map(|i| {
            w.mark(&format!("ok{i}"))
                .rsplit('|')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(pids.len(), 5, "{pids:?}");
    let log = w.suite.read("build/scenerun/logs/A.ok3/fixture.log");
    assert!(
        log.contains("# run by worker py (pid ") && log.contains("generated ok3\n"),
        "{log}"
    );

    let o = w.warm(&["-j", "2"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(built(&o).is_empty(), "{}", show(&o));
    assert_eq!(
        w.suite.count("logs/python.log"),
        workers,
        "a warm with nothing to build starts no worker"
    );
}

#[test]
fn a_step_that_crashes_or_raises_fails_alone_and_its_worker_lives_on() {
    let mut w = Workers::new();
    w.manifest(PY, &["ok1", "selfkill1", "raise1", "ok2"], None);
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(cause(&o, "A.selfkill1/fixture"), "killed by signal 9");
    assert_eq!(cause(&o, "A.raise1/fixture"), "exited with status 1");
    let log = w.suite.read("build/scenerun/logs/A.raise1/fixture.log");
    assert!(log.contains("ValueError: boom"), "{log}");
    assert_eq!(
        built(&o),
        [
            "A.ok1/fixture",
            "A.ok1/golden",
            "A.ok2/fixture",
            "A.ok2/golden",
            "B.b1/fixture",
            "B.b1/golden"
        ],
        "{}",
        show(&o)
    );
    assert_eq!(w.starts("scenerun_pytest worker"), 1, "the worker lived on");
}

#[test]
fn a_worker_killed_mid_step_fails_that_step_and_the_next_steps_get_a_fresh_one() {
    let mut w = Workers::new();
    w.manifest(PY, &["ok1", "killworker1", "ok2"], None);
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        cause(&o, "A.killworker1/fixture"),
        // How its group's leader (`sh -c`) saw it die.
        "worker py replaced: the worker died while running the step (exited with status 137)"
    );
    assert_eq!(built(&o).len(), 6, "{}", show(&o));
    assert_eq!(w.starts("scenerun_pytest worker"), 2);
}

#[test]
fn a_step_past_its_timeout_takes_its_worker_down_and_the_next_step_gets_a_fresh_one() {
    let mut w = Workers::new();
    w.manifest(PY, &["ok1", "hang1", "ok2"], Some("3s"));
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        cause(&o, "A.hang1/fixture"),
        "worker py replaced: the step timed out after 3.0s (its timeout; the worker's process group killed)"
    );
    let pid = w.mark("hang1.pid");
    assert!(
        !pid.is_empty() && !pid_alive(&pid),
        "the hung step {pid} is gone"
    );
    assert_eq!(built(&o).len(), 6, "{}", show(&o));
    assert_eq!(w.starts("scenerun_pytest worker"), 2);
}

#[test]
fn a_step_past_the_memory_cap_is_killed_with_its_worker_and_says_so() {
    let mut w = Workers::new();
    let capped = format!("{PY}    memory_cap: 200MiB\n");
    w.manifest(&capped, &["ok1", "big1", "ok2"], Some("50s"));
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let why = cause(&o, "A.big1/fixture");
    assert!(
        why.starts_with("worker py replaced: step exceeded memory cap 200.0 MiB (resident "),
        "{why}"
    );
    assert_eq!(built(&o).len(), 6, "{}", show(&o));
    assert_eq!(w.starts("scenerun_pytest worker"), 2);
}

#[test]
fn the_memory_cap_counts_the_steps_whole_process_tree() {
    let mut w = Workers::new();
    // Three children of 70 MiB each: none alone is past the cap, the step's tree is.
    let capped = format!("{PY}    memory_cap: 150MiB\n");
    w.manifest(&capped, &["ok1", "tree1", "ok2"], Some("50s"));
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let why = cause(&o, "A.tree1/fixture");
    assert!(
        why.starts_with("worker py replaced: step exceeded memory cap 150.0 MiB (resident "),
        "{why}"
    );
    assert_eq!(built(&o).len(), 6, "{}", show(&o));
}

/// Every file of the entry a step built, but its metadata (times, who built it).
fn artifact(cache: &Path, built_by: &str) -> BTreeMap<String, Vec<u8>> {
    let dir = entry_dirs(cache)
        .into_values()
        .find(|d| json_file(&d.join("meta.json"))["built_by"] == built_by)
        .unwrap_or_else(|| panic!("no entry built by {built_by}"));
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.clone()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.file_name().is_some_and(|n| n != "meta.json") {
                let rel = p.strip_prefix(&dir).unwrap().display().to_string();
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_global_another_test_file_sets_at_import_never_reaches_a_step_in_a_worker() {
    let bytes = |args: &[&str]| {
        let mut w = Workers::new();
        // test_a sets test_b's helper when it is imported, as a module-level seed does.
        let a = w.suite.read("tests/test_a.py");
        w.suite.write(
            "tests/test_a.py",
            &format!("from helpers import only_b\nonly_b.VALUE = 5\n{a}"),
        );
        w.manifest(PY, &["ok1"], None);
        let o = w.warm(args);
        assert_eq!(code(&o), 0, "{}", show(&o));
        artifact(&w.suite.path("cache"), "fixture/B.b1/fixture")
    };
    let in_worker = bytes(&["-j", "1"]);
    let as_process = bytes(&["-j", "1", "--no-workers"]);
    assert!(!as_process.is_empty());
    assert_eq!(in_worker, as_process);
}

#[test]
fn what_a_step_left_running_dies_with_it_in_a_worker_or_not() {
    for args in [&["-j", "1"][..], &["-j", "1", "--no-workers"][..]] {
        let mut w = Workers::new();
        w.manifest(PY, &["bg1"], None);
        let o = w.warm(args);
        assert_eq!(code(&o), 0, "{}", show(&o));
        // The golden runs after the fixture ended, and looks for the fixture's child.
        assert_eq!(w.mark("bg1.alive"), "no", "{args:?}");
    }
}

#[test]
fn what_one_step_leaves_in_a_module_global_is_not_seen_by_the_next() {
    let mut w = Workers::new();
    w.manifest(PY, &["leak1", "ok1", "ok2"], None);
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(w.starts("scenerun_pytest worker"), 1);
    assert_eq!(w.starts("scenerun_pytest fixture"), 0);
    let leaked = w.mark("leak1");
    assert!(leaked.starts_with("['leak1']|99|"), "{leaked}");
    for case in ["ok1", "ok2"] {
        let seen = w.mark(case);
        assert!(
            seen.starts_with(&format!("['{case}']|1|")),
            "{case}: {seen}"
        );
    }
}

#[test]
fn no_workers_and_a_disabled_worker_run_one_process_per_step() {
    let mut w = Workers::new();
    w.manifest(PY, &["ok1", "ok2"], None);
    let plan = w
        .suite
        .cmd(&["plan"])
        .env("PATH", &w.path_env)
        .output()
        .unwrap();
    assert_eq!(code(&plan), 0, "{}", show(&plan));
    assert_eq!(
        stdout(&plan).matches("in worker py").count(),
        6,
        "{}",
        stdout(&plan)
    );
    let dry = w.warm(&["--dry-run", "--no-workers"]);
    assert_eq!(code(&dry), 0, "{}", show(&dry));
    assert!(!stdout(&dry).contains("in worker"), "{}", stdout(&dry));

    let o = w.warm(&["-j", "2", "--no-workers"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(built(&o).len(), 6, "{}", show(&o));
    assert_eq!(w.starts("scenerun_pytest worker"), 0);
    assert_eq!(w.starts("scenerun_pytest fixture"), 3);
    assert_eq!(w.starts("scenerun_pytest golden"), 3);

    let mut w = Workers::new();
    w.manifest(&format!("{PY}    enabled: false\n"), &["ok1", "ok2"], None);
    let o = w.warm(&["-j", "2"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(w.starts("scenerun_pytest worker"), 0);
    assert_eq!(w.starts("scenerun_pytest fixture"), 3);
}

/// Each built step's depfile entries, by the step that built it (`built_by`).
fn deps_by_step(cache: &Path) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for dir in entry_dirs(cache).values() {
        let meta = json_file(&dir.join("meta.json"));
        let deps = meta["deps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap().to_string())
            .collect();
        out.insert(meta["built_by"].as_str().unwrap().to_string(), deps);
    }
    out
}

#[test]
fn a_steps_depfile_in_a_worker_is_its_depfile_as_a_process_and_only_its_own() {
    let mut worker = Workers::new();
    worker.manifest(PY, &["ok1"], None);
    let o = worker.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(worker.starts("scenerun_pytest fixture"), 0);
    let mut process = Workers::new();
    process.manifest(PY, &["ok1"], None);
    let o = process.warm(&["-j", "1", "--no-workers"]);
    assert_eq!(code(&o), 0, "{}", show(&o));

    let in_worker = deps_by_step(&worker.suite.path("cache"));
    assert_eq!(in_worker.len(), 4, "{in_worker:#?}");
    assert_eq!(in_worker, deps_by_step(&process.suite.path("cache")));
    let fixture = &in_worker["fixture/A.ok1/fixture"];
    assert_eq!(
        fixture,
        &[
            "conftest.py",
            "helpers/__init__.py",
            "helpers/only_a.py",
            "helpers/state.py",
            "pytest.ini",
            "tests/conftest.py",
            "tests/test_a.py"
        ],
        "the worker had imported test_b's modules too; this step did not"
    );
    // The golden imports a helper inside compute_golden, which the worker had long
    // imported (test_b does at its top): it is the golden's, not the fixture's.
    let golden = &in_worker["golden/A.ok1/golden"];
    assert!(
        golden.contains(&"helpers/golden_only.py".to_string()),
        "{golden:?}"
    );
    assert!(
        !golden.contains(&"helpers/only_b.py".to_string()),
        "{golden:?}"
    );
}

#[test]
fn a_project_module_the_conftest_imports_is_imported_once_and_stays_in_the_depfiles() {
    let run = |args: &[&str]| {
        let mut w = Workers::new();
        w.suite.write(
            "helpers/deep.py",
            "import os\nwith open('logs/deep.log', 'a') as f:\n    f.write('%d\\n' % os.getpid())\n",
        );
        w.suite
            .write("helpers/chain.py", "from helpers import deep\n");
        let conftest = w.suite.read("conftest.py");
        w.suite
            .write("conftest.py", &format!("{conftest}import helpers.chain\n"));
        let a = w.suite.read("tests/test_a.py");
        w.suite
            .write("tests/test_a.py", &format!("import helpers.chain\n{a}"));
        w.manifest(PY, &["ok1", "ok2"], None);
        let o = w.warm(args);
        assert_eq!(code(&o), 0, "{}", show(&o));
        (
            deps_by_step(&w.suite.path("cache")),
            w.suite.count("logs/deep.log"),
        )
    };
    let (in_worker, imported) = run(&["-j", "1"]);
    let (as_process, per_step) = run(&["-j", "1", "--no-workers"]);
    assert_eq!(in_worker, as_process);
    assert!(
        in_worker["fixture/A.ok1/fixture"].contains(&"helpers/deep.py".to_string()),
        "{in_worker:#?}"
    );
    // Once per step as processes; in the worker once to find it, once to preload it.
    assert_eq!(per_step, 6);
    assert_eq!(imported, 2);
}

#[test]
fn a_worker_that_cannot_start_leaves_its_steps_to_processes_and_says_so_once() {
    let mut w = Workers::new();
    w.manifest(
        "  py:\n    run: \"python -m scenerun_pytest worker tests --no-such-option\"\n",
        &["ok1", "ok2"],
        None,
    );
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(built(&o).len(), 6, "{}", show(&o));
    let err = stderr(&o);
    assert_eq!(
        err.matches("note: worker py could not start (exited with status 4; see ")
            .count(),
        1,
        "{err}"
    );
    assert_eq!(w.starts("scenerun_pytest worker"), 1);
    assert_eq!(w.starts("scenerun_pytest fixture"), 3);
}

#[test]
fn a_command_the_worker_does_not_serve_runs_as_a_process() {
    let mut w = Workers::new();
    w.manifest(PY, &["ok1"], None);
    let text = w.suite.read("scenes.yaml").replace(
        "scenes:\n",
        "prepare:\n  - name: stamp\n    run: \"python -c 'print(1)' > {out}/made\"\n    worker: py\nscenes:\n",
    );
    w.suite.manifest(&text);
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(built(&o).len(), 6, "{}", show(&o));
    let log = w.suite.read("build/scenerun/logs/A.ok1/prepare-stamp.log");
    assert!(
        log.contains("worker py does not serve it (the command uses shell syntax)"),
        "{log}"
    );
}

#[test]
fn a_step_naming_an_unknown_worker_is_a_manifest_error_at_its_line() {
    let mut w = Workers::new();
    w.manifest(PY, &["ok1"], None);
    let text = w.suite.read("scenes.yaml");
    let line = text.lines().position(|l| l.contains("worker: py")).unwrap() + 1;
    w.suite
        .manifest(&text.replacen("worker: py", "worker: pyy", 1));
    let o = w.warm(&[]);
    assert_eq!(code(&o), 4, "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!(":{line}:")), "line {line}: {err}");
    assert!(
        err.contains("unknown worker `pyy` (defined under `workers:`: py)"),
        "{err}"
    );
}

#[test]
fn editing_the_root_conftest_rebuilds_every_fixture_and_golden_in_a_worker_or_not() {
    let mut w = Workers::new();
    w.manifest(PY, &["ok1", "ok2"], None);
    let o = w.warm(&["-j", "2"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let all = built(&o);
    assert_eq!(all.len(), 6, "{}", show(&o));
    let edit = || {
        let text = w.suite.read("conftest.py");
        w.suite.write("conftest.py", &format!("{text}# edited\n"));
    };
    edit();
    let o = w.warm(&["-j", "2"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(built(&o), all, "{}", show(&o));
    edit();
    let o = w.warm(&["-j", "2", "--no-workers"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(built(&o), all, "{}", show(&o));
}

#[test]
fn collect_worker_names_the_worker_in_every_generated_step() {
    let mut w = Workers::new();
    w.manifest(PY, &["ok1"], None);
    let text = format!(
        "version: 1\nplatform: sim\ncache:\n  dir: cache\nworkers:\n{PY}lanes:\n  pytest:\n    run: \"python -m pytest {{args}}\"\nscenes_from:\n  - run: \"python -m scenerun_pytest collect tests --worker py\"\n    inputs: [\"tests/*.py\"]\n"
    );
    w.suite.manifest(&text);
    let dry = w.warm(&["--dry-run"]);
    assert_eq!(code(&dry), 0, "{}", show(&dry));
    let shown = stdout(&dry);
    assert!(
        shown.contains("# worker py (one per slot, started by its first step there):\npython -m scenerun_pytest worker tests\n"),
        "{shown}"
    );
    assert_eq!(shown.matches("  # in worker py").count(), 4, "{shown}");
    assert_eq!(
        w.starts("scenerun_pytest worker"),
        0,
        "a preview starts no worker"
    );

    let o = w.warm(&["-j", "2"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        built(&o),
        [
            "TestA.ok1/fixture",
            "TestA.ok1/golden",
            "TestB.b1/fixture",
            "TestB.b1/golden"
        ],
        "{}",
        show(&o)
    );
    assert_eq!(
        w.starts("scenerun_pytest fixture") + w.starts("scenerun_pytest golden"),
        0
    );
    assert!((1..=2).contains(&w.starts("scenerun_pytest worker")));

    w.suite
        .manifest(&text.replace("--worker py", "--worker pyy"));
    let o = w.warm(&[]);
    assert_eq!(code(&o), 4, "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("scenes_from[0]"), "{err}");
    assert!(err.contains("unknown worker `pyy`"), "{err}");
}

/// The step's log names the worker that ran it: `# run by worker py (pid N)`.
fn worker_pid(w: &Workers, scene: &str) -> String {
    let log = w
        .suite
        .read(&format!("build/scenerun/logs/{scene}/fixture.log"));
    let at = log
        .find("(pid ")
        .map(|i| i + 5)
        .unwrap_or_else(|| panic!("{log}"));
    log[at..].split(')').next().unwrap().to_string()
}

/// scenerun interrupted (SIGINT: exit 2, nothing published) or killed (SIGKILL: the
/// watchdog) while a worker runs a step that hangs: the worker and the step's fork end
/// with it.
#[test]
fn an_interrupted_or_killed_warm_leaves_no_worker_or_step_behind() {
    for signal in [libc::SIGINT, libc::SIGKILL] {
        let mut w = Workers::new();
        w.manifest(PY, &["hang1"], None);
        let mut child = scenerun_process()
            .current_dir(w.suite.dir())
            .args(["-j", "1", "warm"])
            .env("PATH", &w.path_env)
            .env("WORKER_TEST_MARKS", w.suite.path("marks"))
            .env("WORKER_TEST_CASES", &w.cases)
            .env_remove("PYTHONPATH")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let hung = w.suite.path("marks/hang1.pid");
        assert!(
            wait_for_file(&hung, std::time::Duration::from_secs(60)),
            "the step never started"
        );
        // The file exists before its pid is written into it.
        let written = || {
            fs::read_to_string(&hung)
                .ok()
                .filter(|p| p.trim().parse::<u32>().is_ok())
        };
        assert!(wait_until(std::time::Duration::from_secs(10), || written().is_some()));
        let step = written().unwrap().trim().to_string();
        let worker = worker_pid(&w, "A.hang1");
        // SAFETY: a plain signal to the child this test started.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status =
            wait_bounded(&mut child, std::time::Duration::from_secs(30)).expect("it ended");
        if signal == libc::SIGINT {
            assert_eq!(status.code(), Some(2), "interrupted");
        }
        let gone = wait_until(std::time::Duration::from_secs(10), || {
            !pid_alive(&step) && !pid_alive(&worker)
        });
        assert!(
            gone,
            "signal {signal}: step {step} or worker {worker} outlived scenerun"
        );
        assert!(
            entry_dirs(&w.suite.path("cache")).is_empty(),
            "nothing published"
        );
    }
}

/// A worker given only `tests/test_b.py` never collected TestA: its steps' forks collect
/// `tests/test_a.py` themselves, and build what a process builds, depfile included.
#[test]
fn a_class_outside_the_workers_session_is_collected_in_the_fork() {
    let mut w = Workers::new();
    w.manifest(
        "  py:\n    run: \"python -m scenerun_pytest worker tests/test_b.py\"\n",
        &["ok1", "ok2"],
        None,
    );
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(built(&o).len(), 6, "{}", show(&o));
    assert_eq!(w.starts("scenerun_pytest worker"), 1);
    assert_eq!(w.starts("scenerun_pytest fixture"), 0);
    let mut process = Workers::new();
    process.manifest(PY, &["ok1", "ok2"], None);
    let o = process.warm(&["-j", "1", "--no-workers"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        deps_by_step(&w.suite.path("cache")),
        deps_by_step(&process.suite.path("cache"))
    );
}

/// The environment a step observed (`env` cases): every variable, those scenerun sets per
/// run (`SCENERUN_*`: staging paths) by name only.
fn observed_env(w: &Workers, case: &str) -> Vec<(String, String)> {
    let pairs: Vec<(String, String)> =
        serde_json::from_str(&w.mark(&format!("{case}.env"))).unwrap();
    pairs
        .into_iter()
        .map(|(k, v)| match k.starts_with("SCENERUN_") {
            true => (k, String::new()),
            false => (k, v),
        })
        .collect()
}

/// A step forked by its worker gets exactly the environment its process gets: nothing of
/// the worker's own (`SCENERUN_WORKER`, its socket), `PWD` as the shell sets it.
#[test]
fn a_step_in_a_worker_sees_exactly_the_environment_of_its_process() {
    let mut w = Workers::new();
    w.manifest(PY, &["env1"], None);
    let o = w.warm(&["-j", "1"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        w.starts("scenerun_pytest fixture"),
        0,
        "it ran in the worker"
    );
    let served = observed_env(&w, "env1");
    fs::remove_dir_all(w.suite.path("cache")).unwrap();
    let o = w.warm(&["-j", "1", "--no-workers"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(
        w.starts("scenerun_pytest fixture") > 0,
        "it ran as a process"
    );
    let plain = observed_env(&w, "env1");
    assert!(plain.iter().any(|(k, _)| k == "PWD"), "{plain:?}");
    assert_eq!(served, plain);
}

/// The socket directories under `tmp`.
fn socket_dirs(tmp: &Path) -> Vec<PathBuf> {
    fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("scenerun-fork-")
        })
        .map(|e| e.path())
        .collect()
}

/// A worker takes its steps on a socket in a private directory: there (0700) while it
/// serves, gone after the warm; one a SIGKILLed warm left is removed by the next warm.
#[test]
fn a_workers_socket_dir_is_private_while_it_serves_and_gone_after_every_end() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let mut w = Workers::new();
    w.manifest(PY, &["hang1"], None);
    let mut child = scenerun_process()
        .current_dir(w.suite.dir())
        .args(["-j", "1", "warm"])
        .env("PATH", &w.path_env)
        .env("TMPDIR", tmp.path())
        .env("WORKER_TEST_MARKS", w.suite.path("marks"))
        .env("WORKER_TEST_CASES", &w.cases)
        .env_remove("PYTHONPATH")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let hung = w.suite.path("marks/hang1.pid");
    assert!(
        wait_for_file(&hung, std::time::Duration::from_secs(60)),
        "the step never started"
    );
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        fs::read_to_string(&hung).is_ok_and(|p| p.trim().parse::<u32>().is_ok())
    }));
    let step = fs::read_to_string(&hung).unwrap().trim().to_string();
    let worker = worker_pid(&w, "A.hang1");
    let dirs = socket_dirs(tmp.path());
    assert_eq!(dirs.len(), 1, "one worker, one socket dir: {dirs:?}");
    let mode = fs::symlink_metadata(&dirs[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    // SAFETY: a plain signal to the child this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    wait_bounded(&mut child, std::time::Duration::from_secs(30)).expect("it ended");
    assert!(wait_until(std::time::Duration::from_secs(10), || {
        !pid_alive(&step) && !pid_alive(&worker)
    }));
    assert_eq!(
        socket_dirs(tmp.path()).len(),
        1,
        "a SIGKILLed warm cannot remove it"
    );
    w.manifest(PY, &["ok1"], None);
    let o = w
        .suite
        .cmd(&["-j", "1", "warm"])
        .env("PATH", &w.path_env)
        .env("TMPDIR", tmp.path())
        .env("WORKER_TEST_MARKS", w.suite.path("marks"))
        .env("WORKER_TEST_CASES", &w.cases)
        .env_remove("PYTHONPATH")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(w.starts("scenerun_pytest fixture"), 0, "{}", show(&o));
    assert_eq!(socket_dirs(tmp.path()), Vec::<PathBuf>::new());
}

/// A worker that says ready and then never answers costs one bounded wait: it is stopped,
/// its steps run as processes, and warm says so once.
#[test]
fn a_worker_that_says_ready_and_never_answers_costs_one_bounded_wait() {
    let mut w = Workers::new();
    w.suite.write(
        "stalled.py",
        "import json, os, socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind(os.environ['SCENERUN_FORK_SERVER'])\ns.listen(64)\nprint(json.dumps({'ready': True, 'pid': os.getpid()}), flush=True)\ntime.sleep(600)\n",
    );
    w.manifest(
        "  py:\n    run: \"python stalled.py\"\n",
        &["ok1", "ok2"],
        None,
    );
    let mut child = scenerun_process()
        .current_dir(w.suite.dir())
        .args(["-j", "1", "warm"])
        .env("PATH", &w.path_env)
        .env("WORKER_TEST_MARKS", w.suite.path("marks"))
        .env("WORKER_TEST_CASES", &w.cases)
        .env_remove("PYTHONPATH")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if wait_bounded(&mut child, std::time::Duration::from_secs(120)).is_none() {
        let _ = child.kill();
        panic!("warm hung on a worker that never answers");
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(built(&o).len(), 6, "{}", show(&o));
    assert_eq!(
        stderr(&o)
            .matches("note: worker py stopped (the worker did not answer within 5.0s): its steps run one process each")
            .count(),
        1,
        "{}",
        show(&o)
    );
    assert_eq!(w.starts("stalled.py"), 1, "stopped once, not restarted");
    assert_eq!(
        w.starts("scenerun_pytest fixture") + w.starts("scenerun_pytest golden"),
        6
    );
}
