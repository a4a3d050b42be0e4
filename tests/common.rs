//! Shared helpers for the integration tests: a temp suite directory, the real binary,
//! logging wrappers that count compiler / script invocations, the stand-in lock pool,
//! and the small readers and bounded waits more than one topic module needs.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

pub const TASK_SUBMIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/bin/task-submit");
pub const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/demo");

/// The scenerun binary as a plain process (for signals, process groups, own output
/// files), with CI-like terminal settings and no inherited scenerun or GitHub env.
pub fn scenerun_process() -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("scenerun"));
    c.env("CI", "true").env("NO_COLOR", "1");
    for v in NOT_INHERITED {
        c.env_remove(v);
    }
    c
}

/// What emulates the binaries of this test run, if anything: `.ci/aarch64.sh` sets
/// `SCENERUN_EMULATED=qemu-user` (docs/install.md#aarch64). Only waits that emulation
/// makes longer depend on it.
pub fn emulated() -> Option<String> {
    std::env::var("SCENERUN_EMULATED")
        .ok()
        .filter(|e| !e.is_empty())
}

/// The scenerun and GitHub variables a test's own environment may carry and no
/// scenerun a test starts may see.
pub const NOT_INHERITED: [&str; 7] = [
    "SCENERUN_MANIFEST",
    "SCENERUN_PROFILE",
    "SCENERUN_CACHE_DIR",
    "SCENERUN_REMOTE_URL",
    "SCENERUN_REMOTE_WRITE",
    "GITHUB_ACTIONS",
    "GITHUB_STEP_SUMMARY",
];

/// The scenerun binary, with CI-like terminal settings and no inherited scenerun env.
pub fn scenerun() -> Command {
    Command::from_std(scenerun_process())
}

/// A suite in a temp directory.
pub struct Suite {
    pub tmp: tempfile::TempDir,
}

impl Suite {
    pub fn new() -> Suite {
        Suite {
            tmp: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// A suite with its `logs/` directory, where the wrappers and scripts log.
    pub fn with_logs() -> Suite {
        let s = Suite::new();
        fs::create_dir_all(s.path("logs")).unwrap();
        s
    }

    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir().join(rel)
    }

    /// Write a file (parents created).
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
        p
    }

    /// Write an executable script.
    pub fn script(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.write(rel, text);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    pub fn manifest(&self, yaml: &str) -> PathBuf {
        self.write("scenes.yaml", yaml)
    }

    /// `scenerun --manifest <suite>/scenes.yaml ARGS...`, run in the suite dir.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = scenerun();
        c.current_dir(self.dir())
            .arg("--manifest")
            .arg(self.path("scenes.yaml"))
            .args(args);
        c
    }

    /// A compiler wrapper `bin/cc-log` that appends one line per run to `logs/cc.log`,
    /// then runs the real `cc`.
    pub fn logging_cc(&self) -> PathBuf {
        let log = self.path("logs/cc.log");
        self.script(
            "bin/cc-log",
            &format!(
                "#!/bin/sh\nmkdir -p '{d}'\necho \"$*\" >> '{log}'\nexec cc \"$@\"\n",
                d = log.parent().unwrap().display(),
                log = log.display()
            ),
        )
    }

    /// Lines in a log file under the suite (0 when absent).
    pub fn count(&self, rel: &str) -> usize {
        fs::read_to_string(self.path(rel))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    /// The JSON record `build/scenerun/<name>` (None: absent or not JSON).
    pub fn record(&self, name: &str) -> Option<serde_json::Value> {
        read_json(&self.path(&format!("build/scenerun/{name}")))
    }
}

/// A small but real suite: `n` scenes, each with a kernel compiled by the logging `cc`,
/// a fixture and golden that log their runs, and a device step that runs the kernel.
pub fn basic_suite(n: usize) -> Suite {
    let s = Suite::with_logs();
    let cc = s.logging_cc();
    s.write(
        "include/common.h",
        "#include \"inner.h\"\n#define SCALE 2\n",
    );
    s.write("include/inner.h", "#define OFFSET 1\n");
    s.write("include/unrelated.h", "#define NOTHING 0\n");
    s.write(
        "kernels/k.c",
        "#include <stdio.h>\n#include <stdlib.h>\n#include \"common.h\"\nint main(int c, char **v) { long x = c > 1 ? atol(v[1]) : 0; printf(\"%ld\\n\", x * SCALE + OFFSET); return 0; }\n",
    );
    s.script(
        "gen.sh",
        "#!/bin/sh\necho fixture >> logs/gen.log\necho 20 > \"$1/input.txt\"\n",
    );
    s.script(
        "golden.sh",
        "#!/bin/sh\necho golden >> logs/golden.log\nx=$(cat \"$1/input.txt\")\necho $((x * 2 + 1)) > \"$2/expected.txt\"\n",
    );
    s.script(
        "device.sh",
        "#!/bin/sh\necho \"$4\" >> logs/device.log\ngot=$(\"$1/k\" $(cat \"$2/input.txt\"))\n[ \"$got\" = \"$(cat \"$3/expected.txt\")\" ] || { echo \"mismatch: $got\"; exit 1; }\n",
    );
    let mut yaml = format!(
        "version: 1\nplatform: a2a3\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"{} -c {{source}} -o {{out}}.o {{includes}} {{flags}} && {} {{out}}.o -o {{out}}\"\n    identity: \"cc --version\"\nlock:\n  submit: \"{} --timeout 60 --max-time 120 --device auto --device-num {{device_count}} --run {{run}}\"\nscenes:\n",
        cc.display(),
        cc.display(),
        TASK_SUBMIT
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "  - name: s{i}\n    tags: [t{}]\n    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/k.c\n        include_dirs: [include]\n        flags: [\"-O1\"]\n    fixture:\n      run: \"./gen.sh {{out}} {i}\"\n      inputs: [gen.sh]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}}\"\n      inputs: [golden.sh]\n    device:\n      run: \"./device.sh {{kernels}} {{fixture}} {{golden}} {{devices}}\"\n",
            i % 2
        ));
    }
    s.manifest(&yaml);
    s
}

// ------------------------------------------------------------------ output, records, files, waits

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The exit code; -1 when a signal ended the process.
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Exit code and both streams, for an assertion message.
pub fn show(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    )
}

/// A JSON file (None: absent or not JSON).
pub fn read_json(p: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&fs::read(p).ok()?).ok()
}

/// The scene named `name` in a report's `scenes`.
pub fn report_scene<'a>(
    report: &'a serde_json::Value,
    name: &str,
) -> Option<&'a serde_json::Value> {
    report["scenes"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
}

/// A cache entry: (kind, key).
pub type EntryId = (String, String);

/// Every entry directory of a cache (`entries/<kind>/<shard>/<key>`), by (kind, key).
pub fn entry_dirs(cache: &Path) -> BTreeMap<EntryId, PathBuf> {
    let mut out = BTreeMap::new();
    for kind in ["kernel", "fixture", "golden"] {
        let Ok(shards) = fs::read_dir(cache.join("entries").join(kind)) else {
            continue;
        };
        for sh in shards.flatten() {
            let Ok(keys) = fs::read_dir(sh.path()) else {
                continue;
            };
            for k in keys.flatten() {
                out.insert(
                    (
                        kind.to_string(),
                        k.file_name().to_string_lossy().to_string(),
                    ),
                    k.path(),
                );
            }
        }
    }
    out
}

/// Copy a directory tree (symlinks as symlinks), leaving out directories named in `skip`.
pub fn copy_tree(from: &Path, to: &Path, skip: &[&str]) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ft.is_dir() {
            if !skip.iter().any(|n| e.file_name() == *n) {
                copy_tree(&src, &dst, skip);
            }
        } else {
            fs::copy(&src, &dst).unwrap(); // keeps the mode bits (scripts stay executable)
        }
    }
}

/// Poll `cond` until it holds, at most `limit`; whether it held. The bound only keeps a
/// broken run from hanging: no assertion depends on how long the wait took.
pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t.elapsed() > limit {
            return cond();
        }
        sleep(Duration::from_millis(10));
    }
}

/// Wait until a file exists, at most `limit`.
pub fn wait_for_file(p: &Path, limit: Duration) -> bool {
    wait_until(limit, || p.exists())
}

/// Wait for a child at most `limit`; past it, SIGKILL its process group and itself.
/// None: it hung.
pub fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let t = Instant::now();
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        if t.elapsed() > limit {
            unsafe {
                libc::killpg(child.id() as i32, libc::SIGKILL);
                libc::kill(child.id() as i32, libc::SIGKILL);
            }
            let _ = child.wait();
            return None;
        }
        sleep(Duration::from_millis(10));
    }
}

/// Whether a process is alive (a zombie counts as dead: nobody may reap orphans here).
pub fn pid_alive(pid: impl std::fmt::Display) -> bool {
    // Only a pid: an empty or partly written one would name /proc/stat itself.
    let pid = pid.to_string();
    let pid = pid.trim();
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        panic!("pid_alive: {pid:?} is not a pid");
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("?");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

// ------------------------------------------------------------------ the stand-in lock pool

/// One isolated pool of the stand-in lock tool `fixtures/bin/task-submit`: its lock
/// directory, event log and working directory, so tests never share a lock.
pub struct Pool {
    pub dir: tempfile::TempDir,
    pub devices: String,
    /// A log word that is not `key=value` fails the test (the stand-in's own tests).
    strict: bool,
}

/// One line of the stand-in's event log: `KIND key=value ...`.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: String,
    pub fields: HashMap<String, String>,
}

impl Event {
    pub fn get(&self, key: &str) -> &str {
        self.fields
            .get(key)
            .unwrap_or_else(|| panic!("event {self:?} has no field {key}"))
    }

    pub fn t(&self) -> f64 {
        self.get("t").parse().expect("t is a number")
    }
}

impl Pool {
    pub fn new(devices: &str) -> Pool {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("pool")).unwrap();
        Pool {
            dir,
            devices: devices.to_string(),
            strict: false,
        }
    }

    /// A pool whose log must hold only `KIND key=value ...` lines.
    pub fn strict(devices: &str) -> Pool {
        Pool {
            strict: true,
            ..Pool::new(devices)
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn log(&self) -> PathBuf {
        self.path("events.log")
    }

    /// Point a scenerun command at this pool.
    pub fn apply<'a>(&self, c: &'a mut Command) -> &'a mut Command {
        c.env("TASK_SUBMIT_DEVICES", &self.devices)
            .env("TASK_SUBMIT_POOL", self.path("pool"))
            .env("TASK_SUBMIT_LOG", self.log())
            .env("TASK_SUBMIT_GRACE", "1")
            .env_remove("TASK_DEVICE")
    }

    /// `task-submit ARGS...` in this pool, run in the pool's directory.
    pub fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(TASK_SUBMIT);
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("TASK_SUBMIT_DEVICES", &self.devices)
            .env("TASK_SUBMIT_POOL", self.path("pool"))
            .env("TASK_SUBMIT_LOG", self.log())
            .env_remove("TASK_DEVICE")
            .stdin(Stdio::null());
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run task-submit")
    }

    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn task-submit")
    }

    pub fn events(&self) -> Vec<Event> {
        let text = fs::read_to_string(self.log()).unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let mut words = line.split_whitespace();
                let kind = words.next()?.to_string();
                let fields = words
                    .filter_map(|w| {
                        let kv = w.split_once('=');
                        assert!(
                            kv.is_some() || !self.strict,
                            "bad log field {w:?} in {line:?}"
                        );
                        kv
                    })
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                Some(Event { kind, fields })
            })
            .collect()
    }

    pub fn count(&self, kind: &str) -> usize {
        self.events().iter().filter(|e| e.kind == kind).count()
    }

    pub fn acquisitions(&self) -> usize {
        self.count("acquire")
    }
}

// ------------------------------------------------------------------ reports (device, lanes)

#[track_caller]
pub fn expect_code(o: &Output, want: i32) {
    assert_eq!(code(o), want, "{}", show(o));
}

/// A JSON file that must exist and parse.
pub fn json_file(path: &Path) -> Value {
    read_json(path).unwrap_or_else(|| panic!("{} is missing or not JSON", path.display()))
}

/// The report.json a device phase wrote in the suite's job dir.
pub fn report(s: &Suite) -> Value {
    json_file(&s.path("build/scenerun/report.json"))
}

/// scene name -> outcome, from report.json.
pub fn outcomes(r: &Value) -> BTreeMap<String, String> {
    r["scenes"]
        .as_array()
        .expect("scenes is an array")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The scene named `name` in a report (which must have it).
pub fn scene_in<'a>(r: &'a Value, name: &str) -> &'a Value {
    report_scene(r, name).unwrap_or_else(|| panic!("no scene {name} in {r:#}"))
}

pub fn num(v: &Value, what: &str) -> f64 {
    v.as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}
