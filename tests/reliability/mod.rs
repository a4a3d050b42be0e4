//! Reliability under faults, concurrency and hostile input (the guarantees in
//! docs/guarantees.md, with their figures).
//!
//! Two profiles: the default (fast) one runs in `.ci/run` through `cargo test`;
//! `SCENERUN_RELIABILITY=long` selects the long one (more rounds, more cases):
//!
//! ```sh
//! SCENERUN_RELIABILITY=long cargo test --test main reliability -- --nocapture
//! ```
//!
//! Every test counts events (rounds, kills, damaged entries found, builds per key, cases)
//! and collects every violation before it fails, so one run reports all of them. The
//! measured figures are printed as `figure <test> [profile]: ...` lines (visible with
//! `--nocapture`) and appended to `$CARGO_TARGET_TMPDIR/reliability-figures.txt`.
//! Random choices come from a seed printed with the figures; `SCENERUN_RELIABILITY_SEED=N`
//! replays one. No assertion depends on how long something took: waits are bounded only
//! so that a hang becomes a reported failure instead of a stuck CI job.
//!
//! This file holds what the topic modules share (profiles, figures, fault lists, the
//! seeded PRNG, bounded runs of the binary, cache inspection, manifest pieces); one
//! module per guarantee of the table in docs/guarantees.md.

mod cancel;
mod children;
mod concurrency;
mod corruption;
mod crash;
mod generators;
mod hostile;
mod hostile_yaml;
mod injection;
mod lanes;
mod lock_tool;
mod resources;
mod transfers;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read, Seek, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as StdCommand, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use crate::common::*;

// ------------------------------------------------------------------ profiles, figures

fn long_profile() -> bool {
    std::env::var("SCENERUN_RELIABILITY").is_ok_and(|v| v == "long")
}

/// A count for the fast profile or the long one.
fn pick(fast: usize, long: usize) -> usize {
    if long_profile() {
        long
    } else {
        fast
    }
}

fn profile() -> &'static str {
    if long_profile() {
        "long"
    } else {
        "fast"
    }
}

/// Print a measured figure and append it to the figures file.
fn figure(test: &str, text: &str) {
    let line = format!("figure {test} [{}]: {text}", profile());
    eprintln!("{line}");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("reliability-figures.txt");
    if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(path) {
        let _ = writeln!(f, "{line}");
    }
}

/// Violations found by one test: all are collected, then reported together.
struct Faults {
    test: &'static str,
    list: Vec<String>,
}

impl Faults {
    fn new(test: &'static str) -> Faults {
        Faults {
            test,
            list: Vec::new(),
        }
    }

    fn add(&mut self, what: String) {
        eprintln!("{}: FAULT: {what}", self.test);
        self.list.push(what);
    }

    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.add(what());
        }
    }

    fn count(&self) -> usize {
        self.list.len()
    }

    fn finish(self) {
        assert!(
            self.list.is_empty(),
            "{}: {} violation(s):\n{}",
            self.test,
            self.list.len(),
            self.list.join("\n")
        );
    }
}

/// A small deterministic PRNG (xorshift64*), seeded per test.
struct Rng(u64);

impl Rng {
    fn new(test: &str) -> Rng {
        let base = std::env::var("SCENERUN_RELIABILITY_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("{test}: seed {base} (replay with SCENERUN_RELIABILITY_SEED={base})");
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in test.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        Rng((base ^ h) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// `k` distinct indices below `n`.
    fn sample(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in (1..all.len()).rev() {
            let j = self.below(i + 1);
            all.swap(i, j);
        }
        all.truncate(k.min(n));
        all
    }
}

// ------------------------------------------------------------------ processes

/// `scenerun --manifest MANIFEST ARGS...` in `cwd`, with CI-like settings and a lock
/// pool private to the suite.
fn sr_at(cwd: &Path, manifest: &Path, args: &[&str]) -> StdCommand {
    let mut c = scenerun_process();
    c.env("TASK_SUBMIT_POOL", cwd.join("pool"))
        .env("TASK_SUBMIT_LOG", cwd.join("lock-events.log"))
        .env("TASK_SUBMIT_DEVICES", "0-3")
        .current_dir(cwd)
        .arg("--manifest")
        .arg(manifest)
        .args(args)
        .stdin(Stdio::null());
    c
}

fn sr(s: &Suite, args: &[&str]) -> StdCommand {
    sr_at(s.dir(), &s.path("scenes.yaml"), args)
}

/// How a bounded run ended.
struct Run {
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    hung: bool,
}

impl Run {
    fn desc(&self) -> String {
        format!(
            "code {:?} signal {:?}{}\n--- stdout\n{}--- stderr\n{}",
            self.code,
            self.signal,
            if self.hung { " (HUNG: killed)" } else { "" },
            tail(&self.stdout, 1500),
            tail(&self.stderr, 2500)
        )
    }

    fn is(&self, code: i32) -> bool {
        !self.hung && self.code == Some(code)
    }
}

fn tail(s: &str, n: usize) -> String {
    let start = s.len().saturating_sub(n);
    let mut i = start;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    s[i..].to_string()
}

/// Output files for a child (never pipes: a leftover grandchild holding a pipe would
/// make the reader wait, which is what some tests check scenerun does not do).
struct Capture {
    out: fs::File,
    err: fs::File,
}

impl Capture {
    fn attach(cmd: &mut StdCommand) -> Capture {
        let out = tempfile::tempfile().expect("tempfile");
        let err = tempfile::tempfile().expect("tempfile");
        cmd.stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(err.try_clone().unwrap()));
        Capture { out, err }
    }

    fn read(mut self) -> (String, String) {
        let mut a = Vec::new();
        let mut b = Vec::new();
        let _ = self.out.rewind();
        let _ = self.out.read_to_end(&mut a);
        let _ = self.err.rewind();
        let _ = self.err.read_to_end(&mut b);
        (
            String::from_utf8_lossy(&a).to_string(),
            String::from_utf8_lossy(&b).to_string(),
        )
    }
}

/// Spawn in its own process group with captured output.
fn start(mut cmd: StdCommand) -> (Child, Capture) {
    cmd.process_group(0);
    let cap = Capture::attach(&mut cmd);
    let child = cmd.spawn().expect("spawn scenerun");
    (child, cap)
}

fn finish(mut child: Child, cap: Capture, limit: Duration) -> Run {
    let st = wait_bounded(&mut child, limit);
    let (stdout, stderr) = cap.read();
    Run {
        code: st.and_then(|s| s.code()),
        signal: st.and_then(|s| s.signal()),
        stdout,
        stderr,
        hung: st.is_none(),
    }
}

/// Run to completion, at most `limit` (then it counts as hung).
fn exec(cmd: StdCommand, limit: Duration) -> Run {
    let (child, cap) = start(cmd);
    finish(child, cap, limit)
}

const LIMIT: Duration = Duration::from_secs(180);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Live processes other than this one: (pid, `/proc/<pid>`, command line). A zombie
/// runs nothing any more: it is left out.
fn live_procs() -> Vec<(String, PathBuf, String)> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        let cmd = fs::read(e.path().join("cmdline")).unwrap_or_default();
        if !cmd.is_empty() {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            out.push((name, e.path(), cmd));
        }
    }
    out
}

/// Live processes (pid, cmdline) whose working directory is inside `dir`.
fn procs_under(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    live_procs()
        .into_iter()
        .filter(|(_, p, _)| fs::read_link(p.join("cwd")).is_ok_and(|cwd| cwd.starts_with(&dir)))
        .map(|(pid, _, cmd)| format!("{pid}: {cmd}"))
        .collect()
}

/// Live processes whose command line contains `marker`.
fn procs_matching(marker: &str) -> Vec<String> {
    live_procs()
        .into_iter()
        .filter(|(_, _, cmd)| cmd.contains(marker))
        .map(|(pid, _, cmd)| format!("{pid}: {cmd}"))
        .collect()
}

/// Poll until `f` finds nothing, at most `limit`; what is still there then.
fn survivors(f: impl Fn() -> Vec<String>, limit: Duration) -> Vec<String> {
    let t = Instant::now();
    loop {
        let v = f();
        if v.is_empty() || t.elapsed() > limit {
            return v;
        }
        sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------------ cache inspection

type FileRec = (String, u64, String); // (path, size, blake3)

/// The integrity record's files of one entry (None: no readable record).
fn meta_files(dir: &Path) -> Option<Vec<FileRec>> {
    let v: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("meta.json")).ok()?).ok()?;
    let mut out = Vec::new();
    for f in v["files"].as_array()? {
        out.push((
            f["path"].as_str()?.to_string(),
            f["size"].as_u64()?,
            f["blake3"].as_str()?.to_string(),
        ));
    }
    Some(out)
}

/// A file of an entry: `out` itself for a kernel (recorded path ""), else `out/<path>`.
fn entry_file(dir: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() {
        dir.join("out")
    } else {
        dir.join("out").join(rel)
    }
}

/// (kind, key) → recorded files, for every entry; an entry without a record maps to [].
fn entry_records(cache: &Path) -> BTreeMap<EntryId, Vec<FileRec>> {
    entry_dirs(cache)
        .into_iter()
        .map(|(id, dir)| {
            let files = meta_files(&dir).unwrap_or_default();
            (id, files)
        })
        .collect()
}

/// Names left in `<cache>/tmp` (staging dirs, their locks, trash).
fn tmp_leftovers(cache: &Path) -> Vec<String> {
    fs::read_dir(cache.join("tmp"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Lock files under `<cache>/locks` that some process still holds.
fn held_locks(cache: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(cache.join("locks")) else {
        return out;
    };
    for e in rd.flatten() {
        if let Ok(f) = fs::File::options().write(true).open(e.path()) {
            if f.try_lock().is_err() {
                out.push(e.file_name().to_string_lossy().to_string());
            }
        }
    }
    out
}

/// `corrupt <kind> <key>: ...` lines of `cache verify`.
fn corrupt_reported(text: &str) -> BTreeSet<EntryId> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("corrupt ")?;
            let mut w = rest.split_whitespace();
            let kind = w.next()?.to_string();
            let key = w.next()?.trim_end_matches(':').to_string();
            Some((kind, key))
        })
        .collect()
}

/// The counts of warm's final line `warm: B built, H hit, F failed...`.
fn warm_counts(text: &str) -> Option<(usize, usize, usize)> {
    let line = text.lines().rev().find(|l| l.starts_with("warm: "))?;
    let nums: Vec<usize> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .take(3)
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums.len() == 3).then(|| (nums[0], nums[1], nums[2]))
}

/// A YAML double-quoted scalar (JSON strings are valid YAML).
fn yq(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn lock_submit(flags: &str) -> String {
    format!(
        "lock:\n  submit: {}\n",
        yq(&format!(
            "{TASK_SUBMIT} {flags} --device auto --device-num {{device_count}} --run {{run}}"
        ))
    )
}

/// The manifest header: a `cc` toolchain through the logging wrapper, optionally a lock.
fn header(s: &Suite, lock: Option<&str>) -> String {
    let cc = s.logging_cc();
    let mut y = format!(
        "version: 1\nplatform: x86\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: {}\n    identity: \"cc --version\"\n",
        yq(&format!(
            "{} -O0 -o {{out}} {{source}} {{includes}} {{flags}}",
            cc.display()
        ))
    );
    if let Some(flags) = lock {
        y.push_str(&lock_submit(flags));
    }
    y.push_str("scenes:\n");
    y
}

fn kernel_source(n: usize) -> String {
    format!(
        "#include <stdio.h>\n#include \"common.h\"\nint main(void) {{ printf(\"%d\\n\", SCALE * {n}); return 0; }}\n"
    )
}

// ------------------------------------------------------------------ warm records

/// The warm record's entry for one scene's step.
fn warm_step(s: &Suite, scene: &str) -> serde_json::Value {
    let rec = s.record("warm.json").unwrap_or_default();
    rec["steps"]
        .as_array()
        .and_then(|a| a.iter().find(|st| st["scene"] == scene).cloned())
        .unwrap_or_default()
}

/// Nothing half-published: no entry for the failed step, nothing left in tmp, and
/// what is there verifies.
fn nothing_half_published(
    faults: &mut Faults,
    what: &str,
    s: &Suite,
    cache: &Path,
    allowed: usize,
) {
    let n = entry_dirs(cache).len();
    faults.check(n == allowed, || {
        format!("{what}: {n} entries, expected {allowed}")
    });
    let tmp = tmp_leftovers(cache);
    faults.check(tmp.is_empty(), || format!("{what}: left in tmp: {tmp:?}"));
    let mut c = sr(s, &["cache", "verify"]);
    c.arg("--cache-dir").arg(cache);
    let v = exec(c, LIMIT);
    faults.check(v.is(0), || format!("{what}: verify: {}", v.desc()));
}
