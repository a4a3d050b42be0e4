//! Reliability under faults, concurrency and hostile input (the "Guarantees" of the
//! README; figures in docs/GUARANTEES.md).
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

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::PermissionsExt;
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

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("scenerun")
}

/// `scenerun --manifest MANIFEST ARGS...` in `cwd`, with CI-like settings and a lock
/// pool private to the suite.
fn sr_at(cwd: &Path, manifest: &Path, args: &[&str]) -> StdCommand {
    let mut c = StdCommand::new(bin());
    c.env("CI", "true")
        .env("NO_COLOR", "1")
        .env_remove("SCENERUN_MANIFEST")
        .env_remove("SCENERUN_CACHE_DIR")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env("TASK_SUBMIT_POOL", cwd.join("pool"))
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

/// Wait for a child at most `limit`; past it, SIGKILL its process group. None: it hung.
fn wait_bounded(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
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

/// Live processes (pid, cmdline) whose working directory is inside `dir`.
fn procs_under(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
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
        let Ok(cwd) = fs::read_link(e.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(&dir) {
            let cmd = fs::read(e.path().join("cmdline")).unwrap_or_default();
            if cmd.is_empty() {
                continue; // a zombie: it runs nothing any more
            }
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            out.push(format!("{name}: {cmd}"));
        }
    }
    out
}

/// Live processes whose command line contains `marker`.
fn procs_matching(marker: &str) -> Vec<String> {
    let mut out = Vec::new();
    let me = std::process::id().to_string();
    let Ok(rd) = fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        let cmd = fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !cmd.is_empty() && cmd.contains(marker) {
            out.push(format!("{name}: {cmd}"));
        }
    }
    out
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

/// Wait until a file exists, at most `limit`.
fn wait_for_file(p: &Path, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if p.exists() {
            return true;
        }
        sleep(Duration::from_millis(10));
    }
    p.exists()
}

// ------------------------------------------------------------------ cache inspection

type EntryId = (String, String); // (kind, key)
type FileRec = (String, u64, String); // (path, size, blake3)

/// Every entry directory of a cache.
fn entry_dirs(cache: &Path) -> BTreeMap<EntryId, PathBuf> {
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

fn read_json(p: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&fs::read(p).ok()?).ok()
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

// ------------------------------------------------------------------ 1. crash safety

/// Fixture generator: `gen.sh OUT SCENE KIB` writes KIB KiB of data, in many writes.
const GEN_SIZED: &str = "#!/bin/sh\necho \"$2\" >> logs/gen.log\nyes \"$2 fixture row\" | head -c $(($3 * 1024)) > \"$1/data.bin\"\necho \"$2\" > \"$1/meta.txt\"\n";
const GOLDEN_SUM: &str =
    "#!/bin/sh\necho \"$3\" >> logs/golden.log\ncksum < \"$1/data.bin\" > \"$2/sum.txt\"\n";

/// Many small kernels (8 scenes × 3: two compiled by the real `cc`, the rest by a cheap
/// shell "compiler" so that a round stays short) and a few large fixtures (3 × 16 MiB,
/// written in many small writes, each with a golden).
fn crash_suite() -> Suite {
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    s.write("include/common.h", "#define SCALE 3\n");
    s.script("gen.sh", GEN_SIZED);
    s.script("golden.sh", GOLDEN_SUM);
    s.script(
        "kc.sh",
        "#!/bin/sh\necho \"$1\" >> logs/kc.log\n{ echo '// kc'; cat \"$1\"; cat \"$1\"; } > \"$2\"\n",
    );
    let mut y = header(&s, None).replace(
        "scenes:\n",
        "  kc:\n    compile: \"./kc.sh {source} {out}\"\nscenes:\n",
    );
    for j in 0..8 {
        y.push_str(&format!("  - name: s{j}\n    kernels:\n"));
        for i in 0..3 {
            let src = format!("kernels/s{j}_k{i}.c");
            s.write(&src, &kernel_source(j * 10 + i));
            let tc = if i == 0 && j < 2 { "cc" } else { "kc" };
            y.push_str(&format!(
                "      - name: k{i}\n        toolchain: {tc}\n        source: {src}\n        include_dirs: [include]\n"
            ));
        }
        let kib = if j < 3 { 16 * 1024 } else { 4 };
        y.push_str(&format!(
            "    fixture:\n      run: \"./gen.sh {{out}} {{scene}} {kib}\"\n      inputs: [gen.sh]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}} {{scene}}\"\n      inputs: [golden.sh]\n"
        ));
    }
    s.manifest(&y);
    s
}

#[test]
fn crash_safety_kill9_at_random_moments() {
    const T: &str = "crash_safety";
    let rounds = pick(10, 50);
    let mut rng = Rng::new(T);
    let mut faults = Faults::new(T);
    let s = crash_suite();

    // The reference build, in its own cache.
    let t0 = Instant::now();
    let r = exec(sr(&s, &["--cache-dir", "ref", "-j", "2", "warm"]), LIMIT);
    assert!(r.is(0), "reference warm: {}", r.desc());
    let full = t0.elapsed();
    let reference = entry_records(&s.path("ref"));
    assert_eq!(reference.len(), 24 + 8 + 8, "reference entries");
    let cache = s.path("cache");

    let (mut cold, mut partial, mut stale) = (0, 0, 0);
    let (mut mid_run, mut work_left, mut stages_seen, mut group_kills) = (0, 0, 0, 0);
    for round in 0..rounds {
        // Prepare the cache: empty, half gone, or a third stale (truncated, so the warm
        // replaces them under the same key: the rename-aside path of publish).
        let mut damaged: BTreeSet<EntryId> = BTreeSet::new();
        let existing: Vec<(EntryId, PathBuf)> = entry_dirs(&cache).into_iter().collect();
        // The share of the full build this warm has to do: the kill lands within it.
        let work = match rng.below(3) {
            _ if existing.is_empty() => {
                cold += 1;
                1.0
            }
            0 => {
                cold += 1;
                let _ = fs::remove_dir_all(cache.join("entries"));
                1.0
            }
            1 => {
                partial += 1;
                for i in rng.sample(existing.len(), existing.len() / 2) {
                    fs::remove_dir_all(&existing[i].1).unwrap();
                }
                0.5
            }
            _ => {
                stale += 1;
                for i in rng.sample(existing.len(), existing.len() / 3) {
                    let (id, dir) = &existing[i];
                    let files = meta_files(dir).unwrap();
                    let f = entry_file(dir, &files[0].0);
                    let fh = fs::File::options().write(true).open(&f).unwrap();
                    fh.set_len(files[0].1 / 2).unwrap();
                    damaged.insert(id.clone());
                }
                0.4
            }
        };

        let (mut child, cap) = start(sr(&s, &["-j", "2", "warm"]));
        let pid = child.id() as i32;
        sleep(full.mul_f64(rng.unit() * work));
        let finished_before = matches!(child.try_wait(), Ok(Some(_)));
        let whole_group = rng.chance(0.5);
        unsafe {
            if whole_group {
                group_kills += 1;
                libc::killpg(pid, libc::SIGKILL);
            } else {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let _ = child.wait();
        drop(cap);
        if !finished_before {
            mid_run += 1;
        }

        // Nothing of the killed warm may keep running (or writing).
        let left = survivors(|| procs_under(s.dir()), secs(10));
        faults.check(left.is_empty(), || {
            format!("round {round}: processes outlived the kill -9: {left:?}")
        });
        let held = held_locks(&cache);
        faults.check(held.is_empty(), || {
            format!("round {round}: locks still held after the kill: {held:?}")
        });
        if tmp_leftovers(&cache).iter().any(|n| !n.ends_with(".lock")) {
            stages_seen += 1;
        }

        // No entry a reader would accept is damaged (only our own truncations may be).
        let v = exec(sr(&s, &["cache", "verify"]), LIMIT);
        let bad = corrupt_reported(&v.stdout);
        let ok =
            (v.is(0) && bad.is_empty()) || (v.is(1) && !bad.is_empty() && bad.is_subset(&damaged));
        faults.check(ok, || {
            format!(
                "round {round}: verify after the kill: {bad:?} (ours: {damaged:?})\n{}",
                v.desc()
            )
        });
        for (id, dir) in entry_dirs(&cache) {
            if damaged.contains(&id) {
                continue;
            }
            let rec = meta_files(&dir);
            faults.check(rec.as_ref() == reference.get(&id), || {
                format!(
                    "round {round}: entry {id:?} after the kill differs from the reference build"
                )
            });
        }

        // The next warm is not blocked and completes everything, correctly.
        let w = exec(sr(&s, &["-j", "2", "warm"]), LIMIT);
        faults.check(w.is(0), || {
            format!("round {round}: next warm: {}", w.desc())
        });
        if warm_counts(&w.stderr).is_some_and(|c| c.0 > 0) {
            work_left += 1;
        }
        let v = exec(sr(&s, &["cache", "verify"]), LIMIT);
        faults.check(v.is(0), || {
            format!("round {round}: verify after the next warm: {}", v.desc())
        });
        let now = entry_records(&cache);
        if now != reference {
            let diff: Vec<&EntryId> = reference
                .keys()
                .chain(now.keys())
                .filter(|k| now.get(*k) != reference.get(*k))
                .collect();
            faults.add(format!(
                "round {round}: cache differs from the reference build: {diff:?}"
            ));
        }
        let tmp = tmp_leftovers(&cache);
        faults.check(tmp.is_empty(), || {
            format!("round {round}: staging left in tmp after the next warm: {tmp:?}")
        });
        let rec = read_json(&s.path("build/scenerun/warm.json"));
        faults.check(rec.is_some(), || {
            format!("round {round}: warm.json unreadable after the next warm")
        });
    }
    figure(
        T,
        &format!(
            "{rounds} rounds of kill -9 ({cold} cold, {partial} half-warm, {stale} with stale entries; {group_kills} whole-group kills); {mid_run} kills landed while warm ran, {work_left} left work for the next warm, {stages_seen} left staging dirs; failures: {}",
            faults.count()
        ),
    );
    faults.finish();
}

// ------------------------------------------------------------------ 2. concurrency

/// 8 scenes drawing kernels from a pool of 10 sources and fixtures from 4 variants, so
/// overlapping selections share keys. The compiler wrapper sleeps to widen races.
fn shared_suite() -> Suite {
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    s.write("include/common.h", "#define SCALE 5\n");
    let log = s.path("logs/cc.log");
    let cc = s.script(
        "bin/cc-slow",
        &format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nsleep 0.05\nexec cc \"$@\"\n",
            log.display()
        ),
    );
    s.script("gen.sh", "#!/bin/sh\necho \"$2\" >> logs/gen.log\nsleep 0.05\necho \"variant $2\" > \"$1/data.txt\"\n");
    s.script(
        "golden.sh",
        "#!/bin/sh\necho \"$3\" >> logs/golden.log\ncksum < \"$1/data.txt\" > \"$2/sum.txt\"\n",
    );
    for p in 0..10 {
        s.write(&format!("kernels/p{p}.c"), &kernel_source(p));
    }
    let mut y = format!(
        "version: 1\nplatform: x86\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: {}\n    identity: \"cc --version\"\nscenes:\n",
        yq(&format!("{} -O0 -o {{out}} {{source}} {{includes}}", cc.display()))
    );
    for i in 0..8 {
        let tag = if i % 2 == 0 { "even" } else { "odd" };
        y.push_str(&format!(
            "  - name: s{i}\n    tags: [{tag}]\n    kernels:\n"
        ));
        for (n, p) in [(0, i % 10), (1, (i + 1) % 10), (2, (i + 3) % 10)] {
            y.push_str(&format!(
                "      - name: k{n}\n        toolchain: cc\n        source: kernels/p{p}.c\n        include_dirs: [include]\n"
            ));
        }
        let v = i % 4;
        y.push_str(&format!(
            "    fixture:\n      run: \"./gen.sh {{out}} {v}\"\n      inputs: [gen.sh]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}} {v}\"\n      inputs: [golden.sh]\n"
        ));
    }
    s.manifest(&y);
    s
}

/// Lines of a log, counted per value (for the compiler log: per source file).
fn per_line(text: &str, key: impl Fn(&str) -> Option<String>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        if let Some(k) = key(l) {
            *m.entry(k).or_insert(0) += 1;
        }
    }
    m
}

#[test]
fn concurrency_four_warms_build_each_key_once() {
    const T: &str = "concurrency_warms";
    let rounds = pick(3, 20);
    let mut faults = Faults::new(T);
    let s = shared_suite();
    let selections: [&[&str]; 4] = [
        &["-j", "2", "warm", "--tag", "even"],
        &["-j", "2", "warm", "--tag", "odd"],
        &[
            "-j", "2", "warm", "-k", "s1", "-k", "s2", "-k", "s3", "-k", "s4",
        ],
        &["-j", "2", "warm"],
    ];
    let mut max_builds = 0;
    let mut total_builds = 0;
    for round in 0..rounds {
        let _ = fs::remove_dir_all(s.path("cache"));
        for l in ["cc.log", "gen.log", "golden.log"] {
            let _ = fs::remove_file(s.path("logs").join(l));
        }
        let runs: Vec<(Child, Capture)> = selections.iter().map(|a| start(sr(&s, a))).collect();
        for (i, (child, cap)) in runs.into_iter().enumerate() {
            let r = finish(child, cap, LIMIT);
            let failed = warm_counts(&r.stderr).map(|c| c.2);
            faults.check(r.is(0) && failed == Some(0), || {
                format!("round {round}: warm #{i}: {}", r.desc())
            });
        }
        let cc = per_line(&s.read("logs/cc.log"), |l| {
            l.split_whitespace()
                .find(|w| w.ends_with(".c"))
                .map(String::from)
        });
        let gen = per_line(&s.read("logs/gen.log"), |l| Some(format!("fixture {l}")));
        let gold = per_line(&s.read("logs/golden.log"), |l| Some(format!("golden {l}")));
        let all: BTreeMap<String, usize> = cc.into_iter().chain(gen).chain(gold).collect();
        faults.check(all.len() == 18, || {
            format!("round {round}: expected 18 distinct keys built, got {all:?}")
        });
        for (k, n) in &all {
            max_builds = max_builds.max(*n);
            total_builds += n;
            faults.check(*n == 1, || format!("round {round}: {k} built {n} times"));
        }
        let v = exec(sr(&s, &["cache", "verify"]), LIMIT);
        faults.check(v.is(0), || format!("round {round}: verify: {}", v.desc()));
        faults.check(entry_dirs(&s.path("cache")).len() == 18, || {
            format!(
                "round {round}: {} entries, expected 18",
                entry_dirs(&s.path("cache")).len()
            )
        });
        let tmp = tmp_leftovers(&s.path("cache"));
        faults.check(tmp.is_empty(), || {
            format!("round {round}: tmp left: {tmp:?}")
        });
    }
    figure(
        T,
        &format!(
            "{rounds} rounds × 4 concurrent warms (overlapping selections, 18 keys): {total_builds} builds, most builds of one key {max_builds}; failures: {}",
            faults.count()
        ),
    );
    faults.finish();
}

/// Set the last-use time (meta.json's mtime) of every entry back by 30 days.
fn backdate_all(cache: &Path) {
    let old = SystemTime::now() - Duration::from_secs(30 * 24 * 3600);
    for dir in entry_dirs(cache).values() {
        if let Ok(f) = fs::File::options().write(true).open(dir.join("meta.json")) {
            let _ = f.set_modified(old);
        }
    }
}

#[test]
fn concurrency_prune_racing_warm_keeps_what_warm_reported() {
    const T: &str = "concurrency_prune";
    let rounds = pick(12, 60);
    let mut rng = Rng::new(T);
    let mut faults = Faults::new(T);
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    s.script("gen.sh", "#!/bin/sh\necho \"$2\" > \"$1/v.txt\"\n");
    let mut y = String::from("version: 1\ncache:\n  dir: cache\nscenes:\n");
    let n = 60;
    for i in 0..n {
        y.push_str(&format!(
            "  - name: f{i}\n    fixture:\n      run: \"./gen.sh {{out}} {i}\"\n      inputs: [gen.sh]\n"
        ));
    }
    s.manifest(&y);
    let cache = s.path("cache");
    let r = exec(sr(&s, &["warm"]), LIMIT);
    assert!(r.is(0), "first warm: {}", r.desc());

    let (mut pruned, mut checked, mut published) = (0usize, 0usize, 0usize);
    for round in 0..rounds {
        backdate_all(&cache);
        // A few entries are missing, so the warm also publishes while prune runs.
        let dirs: Vec<PathBuf> = entry_dirs(&cache).into_values().collect();
        let k = rng.below(6);
        for i in rng.sample(dirs.len(), k) {
            let _ = fs::remove_dir_all(&dirs[i]);
        }
        let prune_first = rng.chance(0.5);
        let stagger = Duration::from_micros(rng.below(20_000) as u64);
        let spawn_prune = || start(sr(&s, &["cache", "prune", "--max-age", "1d"]));
        let (p, w) = if prune_first {
            let p = spawn_prune();
            sleep(stagger);
            (p, start(sr(&s, &["-j", "2", "warm"])))
        } else {
            let w = start(sr(&s, &["-j", "2", "warm"]));
            sleep(stagger);
            (spawn_prune(), w)
        };
        let pr = finish(p.0, p.1, LIMIT);
        let wr = finish(w.0, w.1, LIMIT);
        faults.check(pr.is(0), || format!("round {round}: prune: {}", pr.desc()));
        faults.check(wr.is(0), || format!("round {round}: warm: {}", wr.desc()));
        if let Some(n) = pr
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("pruned "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<usize>().ok())
        {
            pruned += n;
        }
        // Every entry the warm record calls hit or built must still be there.
        let rec = read_json(&s.path("build/scenerun/warm.json")).unwrap_or_default();
        let dirs = entry_dirs(&cache);
        for step in rec["steps"].as_array().cloned().unwrap_or_default() {
            let outcome = step["outcome"].as_str().unwrap_or("");
            if outcome != "hit" && outcome != "built" {
                faults.add(format!("round {round}: warm step {step} is {outcome}"));
                continue;
            }
            if outcome == "built" {
                published += 1;
            }
            checked += 1;
            let id = (
                step["kind"].as_str().unwrap_or("").to_string(),
                step["key"].as_str().unwrap_or("").to_string(),
            );
            let present = dirs.get(&id).is_some_and(|d| meta_files(d).is_some());
            faults.check(present, || {
                format!(
                    "round {round}: warm reported {} {} {outcome}, but prune removed it",
                    id.0, step["scene"]
                )
            });
        }
        // And the device phase agrees: nothing is missing.
        let d = exec(sr(&s, &["device", "--no-lock"]), LIMIT);
        faults.check(d.is(0), || {
            format!("round {round}: device after the race: {}", d.desc())
        });
    }
    figure(
        T,
        &format!(
            "{rounds} rounds of `cache prune` racing `warm` on {n} entries aged 30 days: prune evicted {pruned}, warm reported {checked} (of which {published} published during the race), every one present afterwards; failures: {}",
            faults.count()
        ),
    );
    faults.finish();
}

// ------------------------------------------------------------------ 3. corruption

/// 5 scenes, each a kernel (real `cc`), a 3-file fixture and a golden; the device step
/// records the checksum of every file it receives, through the lock tool.
fn corruption_suite() -> Suite {
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    s.write("include/common.h", "#define SCALE 7\n");
    s.script(
        "gen.sh",
        "#!/bin/sh\necho \"$2\" >> logs/gen.log\nyes \"$2 a\" | head -c 70000 > \"$1/a.bin\"\nyes \"$2 b\" | head -c 3000 > \"$1/b.txt\"\nmkdir \"$1/sub\"\necho \"$2\" > \"$1/sub/c.txt\"\n",
    );
    s.script(
        "golden.sh",
        "#!/bin/sh\necho \"$3\" >> logs/golden.log\ncat \"$1/a.bin\" \"$1/b.txt\" | cksum > \"$2/sum.txt\"\n",
    );
    s.script(
        "device.sh",
        "#!/bin/sh\nout=\"logs/seen-$SCENERUN_SCENE.txt\"\n: > \"$out\"\nfor f in \"$1\"/* \"$2\"/* \"$2\"/sub/* \"$3\"/*; do [ -f \"$f\" ] && printf '%s %s\\n' \"${f##*/}\" \"$(cksum < \"$f\")\" >> \"$out\"; done\nexit 0\n",
    );
    let mut y = header(&s, Some("--timeout 60 --max-time 120"));
    for j in 0..5 {
        let src = format!("kernels/k{j}.c");
        s.write(&src, &kernel_source(j + 1));
        y.push_str(&format!(
            "  - name: s{j}\n    kernels:\n      - name: k\n        toolchain: cc\n        source: {src}\n        include_dirs: [include]\n    fixture:\n      run: \"./gen.sh {{out}} {{scene}}\"\n      inputs: [gen.sh]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}} {{scene}}\"\n      inputs: [golden.sh]\n    device:\n      run: \"./device.sh {{kernels}} {{fixture}} {{golden}} {{devices}}\"\n"
        ));
    }
    s.manifest(&y);
    s
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Damage {
    FlipByte,
    Truncate,
    DeleteFile,
    DeleteRecord,
}

fn damage(rng: &mut Rng, dir: &Path, how: Damage) {
    let files = meta_files(dir).expect("intact entry has a record");
    let (rel, size, _) = files[rng.below(files.len())].clone();
    let f = entry_file(dir, &rel);
    match how {
        Damage::FlipByte => {
            let mut bytes = fs::read(&f).unwrap();
            let at = rng.below(bytes.len());
            bytes[at] ^= 1 + rng.below(255) as u8;
            fs::write(&f, bytes).unwrap();
        }
        Damage::Truncate => {
            let fh = fs::File::options().write(true).open(&f).unwrap();
            fh.set_len(rng.below(size as usize) as u64).unwrap();
        }
        Damage::DeleteFile => fs::remove_file(&f).unwrap(),
        Damage::DeleteRecord => fs::remove_file(dir.join("meta.json")).unwrap(),
    }
}

/// The device step's view: scene → its checksum lines.
fn seen(s: &Suite) -> BTreeMap<String, String> {
    (0..5)
        .map(|j| (format!("s{j}"), s.read(&format!("logs/seen-s{j}.txt"))))
        .collect()
}

fn clear_seen(s: &Suite) {
    for j in 0..5 {
        let _ = fs::remove_file(s.path(&format!("logs/seen-s{j}.txt")));
    }
}

#[test]
fn corruption_is_found_rebuilt_and_never_served() {
    const T: &str = "corruption";
    let rounds = pick(8, 40);
    let mut rng = Rng::new(T);
    let mut faults = Faults::new(T);
    let s = corruption_suite();
    let cache = s.path("cache");
    let r = exec(sr(&s, &["warm"]), LIMIT);
    assert!(r.is(0), "first warm: {}", r.desc());
    let reference = entry_records(&cache);
    assert_eq!(reference.len(), 15);
    let r = exec(sr(&s, &["device"]), LIMIT);
    assert!(r.is(0), "first device: {}", r.desc());
    let baseline = seen(&s);
    assert!(
        baseline.values().all(|v| v.lines().count() == 5),
        "{baseline:?}"
    );

    let kinds = [
        Damage::FlipByte,
        Damage::Truncate,
        Damage::DeleteFile,
        Damage::DeleteRecord,
    ];
    let mut per_kind: BTreeMap<String, (usize, usize)> = BTreeMap::new(); // damaged, found
    let (mut fix_rounds, mut direct_rounds, mut refused_locks) = (0, 0, 0);
    for round in 0..rounds {
        // Flow A: verify, verify --fix, warm. Flow B (damage a hit can see by `stat`):
        // device refuses before the lock, warm rebuilds.
        let direct = round % 2 == 1;
        let ids: Vec<(EntryId, PathBuf)> = entry_dirs(&cache).into_iter().collect();
        let k = 1 + rng.below(ids.len() / 3);
        let mut damaged: BTreeMap<EntryId, Damage> = BTreeMap::new();
        for (n, i) in rng.sample(ids.len(), k).into_iter().enumerate() {
            // The first damage of a round cycles through the kinds, so that even the
            // fast profile meets each one; the others are random.
            let how = match (direct, n) {
                (true, 0) => kinds[1 + (round / 2) % 3],
                (true, _) => kinds[1 + rng.below(3)],
                (false, 0) => kinds[(round / 2) % 4],
                (false, _) => kinds[rng.below(4)],
            };
            damage(&mut rng, &ids[i].1, how);
            damaged.insert(ids[i].0.clone(), how);
        }
        let wanted: BTreeSet<EntryId> = damaged.keys().cloned().collect();

        if direct {
            direct_rounds += 1;
            let _ = fs::remove_file(s.path("lock-events.log"));
            let d = exec(sr(&s, &["device"]), LIMIT);
            let requests = s
                .read("lock-events.log")
                .lines()
                .filter(|l| l.starts_with("request"))
                .count();
            faults.check(d.is(6) && requests == 0, || {
                format!(
                    "round {round}: device on damaged entries {damaged:?}: {} lock requests; {}",
                    requests,
                    d.desc()
                )
            });
            if d.is(6) && requests == 0 {
                refused_locks += 1;
            }
        } else {
            fix_rounds += 1;
            let v = exec(sr(&s, &["cache", "verify"]), LIMIT);
            let found = corrupt_reported(&v.stdout);
            for (id, how) in &damaged {
                let e = per_kind.entry(format!("{how:?}")).or_default();
                e.0 += 1;
                if found.contains(id) {
                    e.1 += 1;
                }
            }
            faults.check(v.is(1) && found == wanted, || {
                format!(
                    "round {round}: verify found {found:?}, damaged {damaged:?}: {}",
                    v.desc()
                )
            });
            let f = exec(sr(&s, &["cache", "verify", "--fix"]), LIMIT);
            faults.check(f.is(1) && corrupt_reported(&f.stdout) == wanted, || {
                format!("round {round}: verify --fix: {}", f.desc())
            });
            let v = exec(sr(&s, &["cache", "verify"]), LIMIT);
            faults.check(v.is(0), || {
                format!("round {round}: verify after --fix: {}", v.desc())
            });
        }
        let before = (
            s.count("logs/cc.log"),
            s.count("logs/gen.log"),
            s.count("logs/golden.log"),
        );
        let w = exec(sr(&s, &["warm"]), LIMIT);
        let after = (
            s.count("logs/cc.log"),
            s.count("logs/gen.log"),
            s.count("logs/golden.log"),
        );
        let rebuilt = (after.0 - before.0) + (after.1 - before.1) + (after.2 - before.2);
        // The logging cc wrapper runs once per compile.
        faults.check(w.is(0) && rebuilt == damaged.len(), || {
            format!(
                "round {round}: warm rebuilt {rebuilt} steps for {} damaged entries {damaged:?}: {}",
                damaged.len(),
                w.desc()
            )
        });
        let v = exec(sr(&s, &["cache", "verify"]), LIMIT);
        faults.check(v.is(0), || {
            format!("round {round}: verify after warm: {}", v.desc())
        });
        faults.check(entry_records(&cache) == reference, || {
            format!("round {round}: cache differs from the first build after the rebuild")
        });
        clear_seen(&s);
        let d = exec(sr(&s, &["device"]), LIMIT);
        faults.check(d.is(0), || {
            format!("round {round}: device after the rebuild: {}", d.desc())
        });
        let got = seen(&s);
        faults.check(got == baseline, || {
            format!("round {round}: the device step received other artifacts than the first build: {got:?}")
        });
    }
    let kinds_text: Vec<String> = per_kind
        .iter()
        .map(|(k, (d, f))| format!("{k} {f}/{d}"))
        .collect();
    figure(
        T,
        &format!(
            "{rounds} rounds ({fix_rounds} verify→--fix→warm, {direct_rounds} device→warm): verify found {} of the damaged entries; device refused before the lock {refused_locks}/{direct_rounds}; warm rebuilt exactly the damaged entries and the device step always received the first build's bytes; failures: {}",
            kinds_text.join(", "),
            faults.count()
        ),
    );
    faults.finish();
}

// ------------------------------------------------------------------ 4. resource exhaustion

/// A mount made for one test, lazily unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn run(args: &[&str]) -> bool {
        StdCommand::new("mount")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// A tmpfs of `size` at `at` (None where mounting is not permitted).
    fn tmpfs(at: &Path, size: &str) -> Option<Mount> {
        fs::create_dir_all(at).ok()?;
        let opt = format!("size={size}");
        Mount::run(&["-t", "tmpfs", "-o", &opt, "tmpfs", at.to_str()?]).then(|| Mount(at.into()))
    }

    /// `dir` bind-mounted read-only over itself.
    fn read_only_bind(dir: &Path) -> Option<Mount> {
        let d = dir.to_str()?;
        if !Mount::run(&["--bind", d, d]) {
            return None;
        }
        let m = Mount(dir.into());
        Mount::run(&["-o", "remount,bind,ro", d]).then_some(m)
    }

    fn remount_ro(&self) -> bool {
        Mount::run(&["-o", "remount,ro", self.0.to_str().unwrap()])
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = StdCommand::new("umount")
            .arg("-l")
            .arg(&self.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A suite of fixture-only scenes: `name → fixture script body` (`$1` is `{out}`).
fn fixture_suite(scenes: &[(&str, &str)]) -> Suite {
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    let mut y = String::from("version: 1\ncache:\n  dir: cache\nscenes:\n");
    for (name, body) in scenes {
        s.script(&format!("{name}.sh"), &format!("#!/bin/sh\n{body}\n"));
        y.push_str(&format!(
            "  - name: {name}\n    fixture:\n      run: \"./{name}.sh {{out}}\"\n      inputs: [{name}.sh]\n"
        ));
    }
    s.manifest(&y);
    s
}

/// The warm record's entry for one scene's step.
fn warm_step(s: &Suite, scene: &str) -> serde_json::Value {
    let rec = read_json(&s.path("build/scenerun/warm.json")).unwrap_or_default();
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

#[test]
fn resource_full_disk() {
    const T: &str = "resource_full_disk";
    let mut faults = Faults::new(T);
    let mut checks = 0;
    // (a) scenerun's own write (the integrity record) hits the full disk.
    let s = fixture_suite(&[("fill", "cat /dev/zero > \"$1/fill\" 2>/dev/null\nexit 0")]);
    let mnt = s.path("mnt");
    let Some(_m) = Mount::tmpfs(&mnt, "512k") else {
        figure(
            T,
            "skipped: this machine does not permit mounting a small tmpfs",
        );
        return;
    };
    let cache = mnt.join("cache");
    let cache_s = cache.to_str().unwrap();
    let r = exec(sr(&s, &["--cache-dir", cache_s, "warm"]), LIMIT);
    checks += 1;
    faults.check(
        r.is(3) && r.stderr.contains("disk full") && r.stderr.contains(cache_s),
        || format!("(a) a full disk while publishing: expected exit 3 naming the path and `disk full`: {}", r.desc()),
    );
    nothing_half_published(&mut faults, "(a)", &s, &cache, 0);
    // The space came back with the staging dir: a fitting build works now.
    s.script("fill.sh", "#!/bin/sh\necho small > \"$1/fill\"\n");
    let r = exec(sr(&s, &["--cache-dir", cache_s, "warm"]), LIMIT);
    checks += 1;
    faults.check(r.is(0), || {
        format!("(a) warm after the failure: {}", r.desc())
    });
    nothing_half_published(&mut faults, "(a) after", &s, &cache, 1);

    // (b) the step's own write hits the full disk: a clean step failure naming the cause.
    s.script(
        "fill.sh",
        "#!/bin/sh\nhead -c 2097152 /dev/zero > \"$1/big\"\n",
    );
    let _ = fs::remove_dir_all(&cache);
    for strict in [false, true] {
        let mut args = vec!["--cache-dir", cache_s, "warm"];
        if strict {
            args.push("--strict");
        }
        let r = exec(sr(&s, &args), LIMIT);
        checks += 1;
        let step = warm_step(&s, "fill");
        let tail = step["log_tail"].as_str().unwrap_or("");
        faults.check(
            r.is(if strict { 1 } else { 0 })
                && r.stderr.contains("FAILED")
                && step["outcome"] == "failed"
                && tail.contains("No space left on device"),
            || {
                format!(
                    "(b) strict={strict}: expected a step failure naming ENOSPC: {step}\n{}",
                    r.desc()
                )
            },
        );
        nothing_half_published(&mut faults, "(b)", &s, &cache, 0);
    }
    figure(T, &format!("tmpfs of 512 KiB: {checks} runs (publish hits ENOSPC → exit 3 `disk full`; step hits ENOSPC → step failure naming it; recovery after space returns), nothing half-published; failures: {}", faults.count()));
    faults.finish();
}

#[test]
fn resource_file_size_limit() {
    const T: &str = "resource_ulimit_f";
    let mut faults = Faults::new(T);
    let s = fixture_suite(&[
        ("big", "head -c 4194304 /dev/zero > \"$1/big\""),
        ("small", "head -c 1000 /dev/zero > \"$1/small\""),
    ]);
    let mut c = sr(&s, &["warm"]);
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 20,
                rlim_max: 1 << 20,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = exec(c, LIMIT);
    let big = warm_step(&s, "big");
    let small = warm_step(&s, "small");
    faults.check(r.is(0) && r.signal.is_none(), || {
        format!(
            "`ulimit -f 1024`: scenerun must survive (no SIGXFSZ) and exit 0: {}",
            r.desc()
        )
    });
    // The step gets either EFBIG or the default SIGXFSZ; its log names either.
    let big_tail = big["log_tail"].as_str().unwrap_or("");
    faults.check(
        big["outcome"] == "failed"
            && (big_tail.contains("File too large")
                || big_tail.contains("File size limit exceeded")),
        || format!("the step over the limit must fail naming the file size limit: {big}"),
    );
    faults.check(small["outcome"] == "built", || {
        format!("the step within the limit must be built: {small}")
    });
    nothing_half_published(&mut faults, "ulimit -f", &s, &s.path("cache"), 1);
    figure(T, &format!("`ulimit -f` 1 MiB, a 4 MiB fixture and a 1 KB one: 1 run, the big step fails naming the limit (`File size limit exceeded`), the small one is published, nothing half-published; failures: {}", faults.count()));
    faults.finish();
}

#[test]
fn resource_read_only_cache() {
    const T: &str = "resource_read_only";
    let mut faults = Faults::new(T);
    let mut runs = 0;
    let s = fixture_suite(&[("f", "echo one > \"$1/v.txt\"")]);
    // (a) the cache path runs through a regular file (root ignores permission bits).
    s.write("notadir", "x");
    for cmd in [&["warm"][..], &["cache", "prune"][..]] {
        let mut args = vec!["--cache-dir", "notadir/cache"];
        args.extend_from_slice(cmd);
        let r = exec(sr(&s, &args), LIMIT);
        runs += 1;
        faults.check(
            r.is(3)
                && r.stderr.contains("cache unusable")
                && r.stderr.contains("notadir/cache")
                && r.stderr.contains("Not a directory"),
            || {
                format!(
                    "(a) {cmd:?} with a cache under a regular file: {}",
                    r.desc()
                )
            },
        );
    }
    faults.check(
        !s.path("notadir.d").exists() && s.path("notadir").is_file(),
        || "(a) created something".into(),
    );

    // (b) the entries directory is read-only (bind mount): publish fails → exit 3, staging removed.
    let cache = s.path("cache");
    fs::create_dir_all(cache.join("entries")).unwrap();
    let mut mounted = 0;
    if let Some(m) = Mount::read_only_bind(&cache.join("entries")) {
        mounted += 1;
        let r = exec(sr(&s, &["warm"]), LIMIT);
        runs += 1;
        faults.check(
            r.is(3) && r.stderr.contains("Read-only file system") && r.stderr.contains("entries"),
            || {
                format!(
                    "(b) read-only entries dir: expected exit 3 naming it: {}",
                    r.desc()
                )
            },
        );
        let tmp = tmp_leftovers(&cache);
        faults.check(tmp.is_empty(), || format!("(b) staging left: {tmp:?}"));
        drop(m);
        let r = exec(sr(&s, &["warm"]), LIMIT);
        runs += 1;
        faults.check(r.is(0), || {
            format!("(b) warm once writable again: {}", r.desc())
        });
        nothing_half_published(&mut faults, "(b)", &s, &cache, 1);
    }

    // (c) the whole cache is a read-only filesystem: the device phase still reads it,
    // a warm that needs to build is exit 3 and changes nothing.
    let mnt = s.path("ro");
    if let Some(m) = Mount::tmpfs(&mnt, "4m") {
        let c = mnt.join("cache");
        let cs = c.to_str().unwrap();
        let r = exec(sr(&s, &["--cache-dir", cs, "warm"]), LIMIT);
        faults.check(r.is(0), || format!("(c) populate: {}", r.desc()));
        let before = entry_records(&c);
        if m.remount_ro() {
            mounted += 1;
            let d = exec(sr(&s, &["--cache-dir", cs, "device", "--no-lock"]), LIMIT);
            runs += 1;
            faults.check(d.is(0), || {
                format!("(c) device on a read-only cache: {}", d.desc())
            });
            let v = exec(sr(&s, &["--cache-dir", cs, "cache", "verify"]), LIMIT);
            runs += 1;
            faults.check(v.is(0), || {
                format!("(c) verify on a read-only cache: {}", v.desc())
            });
            s.script("f.sh", "#!/bin/sh\necho two > \"$1/v.txt\"\n");
            let r = exec(sr(&s, &["--cache-dir", cs, "warm"]), LIMIT);
            runs += 1;
            faults.check(
                r.is(3) && r.stderr.contains("Read-only file system") && r.stderr.contains(cs),
                || format!("(c) warm with a miss on a read-only cache: {}", r.desc()),
            );
            faults.check(entry_records(&c) == before, || {
                "(c) the read-only cache changed".into()
            });
        }
    }
    figure(T, &format!("{runs} runs (cache under a regular file; read-only entries dir; read-only filesystem, {mounted} of 2 mounts made): exit 3 naming path and cause, device and verify still work read-only, nothing half-published; failures: {}", faults.count()));
    faults.finish();
}

#[test]
fn resource_missing_compiler() {
    const T: &str = "resource_missing_cc";
    let mut faults = Faults::new(T);
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    // A PATH with a shell and nothing else.
    let bindir = s.path("nocc-bin");
    fs::create_dir_all(&bindir).unwrap();
    std::os::unix::fs::symlink("/bin/sh", bindir.join("sh")).unwrap();
    s.write("kernels/k.c", "int main(void) { return 0; }\n");
    s.script("gen.sh", "#!/bin/sh\necho ok > \"$1/v.txt\"\n");
    let write = |identity: bool| {
        s.manifest(&format!(
            "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"cc -O0 -o {{out}} {{source}}\"\n{}scenes:\n  - name: kern\n    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/k.c\n  - name: fix\n    fixture:\n      run: \"./gen.sh {{out}}\"\n      inputs: [gen.sh]\n",
            if identity { "    identity: \"cc --version\"\n" } else { "" }
        ));
    };
    let with_path = |args: &[&str]| {
        let mut c = sr(&s, args);
        c.env("PATH", &bindir);
        exec(c, LIMIT)
    };
    write(false);
    for strict in [false, true] {
        let r = with_path(if strict {
            &["warm", "--strict"]
        } else {
            &["warm"]
        });
        let k = warm_step(&s, "kern");
        let f = warm_step(&s, "fix");
        faults.check(
            r.is(if strict { 1 } else { 0 })
                && k["outcome"] == "failed"
                && k["log_tail"].as_str().unwrap_or("").contains("cc: not found")
                && r.stderr.contains("kern")
                && (f["outcome"] == "built" || f["outcome"] == "hit"),
            || format!("strict={strict}: compile without cc must fail its scene naming `cc: not found`: {k}\n{}", r.desc()),
        );
        nothing_half_published(&mut faults, "missing cc", &s, &s.path("cache"), 1);
    }
    write(true);
    let r = with_path(&["warm"]);
    faults.check(
        r.is(3) && r.stderr.contains("identity command") && r.stderr.contains("cc --version"),
        || {
            format!(
                "a failing identity command is exit 3 naming it: {}",
                r.desc()
            )
        },
    );
    nothing_half_published(&mut faults, "identity", &s, &s.path("cache"), 1);
    figure(T, &format!("3 runs with no `cc` on PATH: compile step fails naming `cc: not found` (exit 0, --strict 1), the identity command failing is exit 3 naming it, nothing half-published; failures: {}", faults.count()));
    faults.finish();
}

// ------------------------------------------------------------------ 5. hostile input

use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};

fn runner(cases: usize) -> TestRunner {
    TestRunner::new(PtConfig {
        cases: cases as u32,
        failure_persistence: None,
        ..PtConfig::default()
    })
}

/// A valid manifest using most of the format, and the files it names.
const RICH_MANIFEST: &str = r#"version: 1
platform: a2a3
env:
  SIMPLER_SCHEDULER_TIMEOUT_MS: "2000"
cache:
  dir: build/cache
  max_size: 50GiB
  max_age: 14d
toolchains:
  cc:
    compile: "cc -c {source} -o {out} {includes} {flags}"
    depfile: "-MD -MF {depfile}"
    include_flag: "-I"
  other:
    compile: "./cc2 {source} {out} {platform} {scene} {kernel}"
lock:
  submit: "task-submit --timeout 1800 --device auto --device-num {device_count} --run {run}"
  device_env: TASK_DEVICE
  device_count: 2
scenes:
  - name: vector_add
    platform: a2a3
    tags: [smoke, big]
    env: {B: "x ${HOME} {{lit}}"}
    kernels:
      - name: add
        toolchain: cc
        source: kernels/add.c
        include_dirs: [include, "$HOME/include"]
        flags: ["-O2", "-DX=1"]
      - name: mul
        toolchain: other
        source: kernels/mul.c
    fixture:
      run: "./gen.sh --seed 7 --out {out} {scene} {platform} {threads}"
      inputs: [gen.sh, "data/**/*.json"]
      persist: true
      memory: 1.5GB
      threads: 4
      timeout: 1h 30m
    golden:
      run: "./golden.sh {fixture} {out}"
      inputs: [golden.sh]
    device:
      run: "./run.sh {kernels} {fixture} {golden} {devices} {scene} {platform}"
      devices: 2
      exclusive: false
      timeout: 10m
  - name: solo.v2
    kernels:
      - name: add
        toolchain: cc
        source: kernels/add.c
    device:
      run: "./run.sh {kernels} { echo; } {a,b}"
      exclusive: true
"#;

/// The files RICH_MANIFEST names, in `dir`.
fn rich_files(dir: &Path) {
    for (p, t) in [
        ("kernels/add.c", "#include \"a.h\"\nint add;\n"),
        ("kernels/mul.c", "int mul;\n"),
        ("include/a.h", "#define A 1\n"),
        ("gen.sh", "#!/bin/sh\n"),
        ("golden.sh", "#!/bin/sh\n"),
        ("run.sh", "#!/bin/sh\n"),
        ("cc2", "#!/bin/sh\n"),
        ("data/x/y.json", "{}\n"),
    ] {
        let f = dir.join(p);
        fs::create_dir_all(f.parent().unwrap()).unwrap();
        fs::write(f, t).unwrap();
    }
}

/// Tokens that tend to reach deep into the parser and validator.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "{{",
    "}}",
    "{out}",
    "{run}",
    "{fixture}",
    "{bogus}",
    "{devices}",
    "..",
    "../",
    "/",
    "\n",
    "\n  ",
    "  - ",
    "- name: x\n",
    ": ",
    ":",
    "\"",
    "'",
    "\t",
    "#",
    "&a ",
    "*a",
    "!!binary ",
    "!!int ",
    "~",
    "null",
    "[]",
    "{}",
    "[",
    "]",
    "0",
    "-1",
    "1e999",
    "99999999999999999999999",
    "0x10",
    "1.5GB",
    "GiB",
    "14d",
    "-5m",
    "d",
    "version: 2\n",
    "scenes:",
    "kernels:",
    "toolchain: ",
    "source: ",
    "devices: ",
    "threads: ",
    "\u{0}",
    "\u{feff}",
    "ü",
    "$(touch PWNED)",
    "`x`",
    "; ",
    "?",
    "*",
    "**",
    "<<: *a\n",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "|\n",
    ">\n",
    "\\",
    "\r\n",
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Delete(usize, usize),
    Insert(usize, usize),
    Duplicate(usize, usize),
    SwapLines(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Flip(a, b)),
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(a, t)| Mutation::Insert(a, t)),
        (any::<usize>(), 1usize..80).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
    ]
}

fn apply(base: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = base.to_vec();
    for m in muts {
        let n = b.len().max(1);
        match *m {
            Mutation::Flip(at, x) => {
                if !b.is_empty() {
                    let i = at % b.len();
                    b[i] ^= x.max(1);
                }
            }
            Mutation::Delete(at, len) => {
                let i = at % n;
                let j = (i + len).min(b.len());
                if i < j {
                    b.drain(i..j);
                }
            }
            Mutation::Insert(at, t) => {
                let i = at % (b.len() + 1);
                b.splice(i..i, TOKENS[t].bytes());
            }
            Mutation::Duplicate(at, len) => {
                let i = at % n;
                let j = (i + len).min(b.len());
                if i < j {
                    let piece: Vec<u8> = b[i..j].to_vec();
                    b.splice(j..j, piece);
                }
            }
            Mutation::SwapLines(x, y) => {
                let text = String::from_utf8_lossy(&b).to_string();
                let mut lines: Vec<&str> = text.split('\n').collect();
                let (i, j) = (x % lines.len(), y % lines.len());
                lines.swap(i, j);
                b = lines.join("\n").into_bytes();
            }
        }
    }
    b
}

/// Structured garbage: YAML-ish token soup.
fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            (0..TOKENS.len()).prop_map(|i| TOKENS[i].to_string()),
            "[a-z_]{1,8}".prop_map(|s| s),
            any::<char>().prop_map(|c| c.to_string()),
        ],
        0..120,
    )
    .prop_map(|v| v.concat())
}

#[test]
fn hostile_manifest_parser_never_panics() {
    const T: &str = "hostile_manifest_lib";
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    rich_files(&d);
    let file = Path::new("scenes.yaml");
    scenerun::manifest::parse(RICH_MANIFEST, file, &d).expect("the base manifest is valid");
    let cases = pick(1500, 25000);
    let mut parsed = [0usize; 2];
    let counts = std::cell::RefCell::new(&mut parsed);
    let tally = |r: &Result<scenerun::manifest::Manifest, scenerun::manifest::ManifestErrors>| {
        counts.borrow_mut()[r.is_ok() as usize] += 1;
    };
    // Arbitrary text.
    runner(cases / 3)
        .run(&any::<String>(), |t| {
            tally(&scenerun::manifest::parse(&t, file, &d));
            Ok(())
        })
        .unwrap();
    // Arbitrary bytes, as the loader would see them after UTF-8 decoding.
    runner(cases / 6)
        .run(&prop::collection::vec(any::<u8>(), 0..600), |b| {
            tally(&scenerun::manifest::parse(
                &String::from_utf8_lossy(&b),
                file,
                &d,
            ));
            Ok(())
        })
        .unwrap();
    runner(cases / 6)
        .run(&soup(), |t| {
            tally(&scenerun::manifest::parse(&t, file, &d));
            Ok(())
        })
        .unwrap();
    // Mutations of the valid manifest.
    runner(cases / 3)
        .run(&prop::collection::vec(mutation(), 1..6), |m| {
            let b = apply(RICH_MANIFEST.as_bytes(), &m);
            let r = scenerun::manifest::parse(&String::from_utf8_lossy(&b), file, &d);
            // Every error carries a message (the loader prints them all).
            if let Err(e) = &r {
                prop_assert!(!e.diags.is_empty() && e.diags.iter().all(|x| !x.message.is_empty()));
            }
            tally(&r);
            Ok(())
        })
        .unwrap();
    let total = parsed[0] + parsed[1];
    figure(
        T,
        &format!(
            "{total} inputs to manifest::parse (arbitrary text, bytes, token soup, mutated valid manifests): no panic; {} accepted, {} rejected with messages; failures: 0",
            parsed[1], parsed[0]
        ),
    );
}

#[test]
fn hostile_manifest_binary_exits_0_or_4() {
    const T: &str = "hostile_manifest_cli";
    let s = Suite::new();
    rich_files(s.dir());
    s.manifest(RICH_MANIFEST);
    let r = exec(sr(&s, &["plan"]), LIMIT);
    assert!(r.is(0), "base manifest plans: {}", r.desc());
    let cases = pick(80, 1500);
    let codes: std::cell::RefCell<BTreeMap<i32, usize>> = Default::default();
    let bad: std::cell::RefCell<Vec<String>> = Default::default();
    let strategy = prop_oneof![
        3 => prop::collection::vec(mutation(), 1..6).prop_map(|m| apply(RICH_MANIFEST.as_bytes(), &m)),
        1 => prop::collection::vec(any::<u8>(), 0..400),
        1 => soup().prop_map(String::into_bytes),
    ];
    let mut runner = runner(cases);
    let result = runner.run(&strategy, |bytes| {
        fs::write(s.path("scenes.yaml"), &bytes).unwrap();
        let r = exec(sr(&s, &["plan"]), LIMIT);
        let code = r.code.unwrap_or(-1);
        *codes.borrow_mut().entry(code).or_insert(0) += 1;
        let ok = (r.is(0) || r.is(4)) && !r.stderr.contains("panicked");
        if !ok {
            bad.borrow_mut().push(format!(
                "{:?}\n{}",
                String::from_utf8_lossy(&bytes),
                r.desc()
            ));
        }
        prop_assert!(
            ok,
            "exit {:?} for {:?}: {}",
            r.code,
            String::from_utf8_lossy(&bytes),
            r.desc()
        );
        Ok(())
    });
    figure(
        T,
        &format!(
            "{cases} manifests (mutated, arbitrary bytes, token soup) through `scenerun plan`: exit codes {:?}; failures: {}",
            codes.borrow(),
            bad.borrow().len()
        ),
    );
    result.unwrap();
}

/// Escape a path the way gcc writes it in a depfile.
fn make_escape(p: &str) -> String {
    p.replace('$', "$$").replace('#', "\\#").replace(' ', "\\ ")
}

#[test]
fn hostile_depfile_parser_never_panics_and_round_trips() {
    const T: &str = "hostile_depfile";
    let cases = pick(3000, 50000);
    runner(cases / 2)
        .run(&any::<String>(), |t| {
            let _ = scenerun::warm::depfile::parse(&t);
            Ok(())
        })
        .unwrap();
    let depfile_soup = prop::collection::vec(
        prop_oneof![
            Just("\\".to_string()),
            Just("\\\n".to_string()),
            Just("\\\r\n".to_string()),
            Just(":".to_string()),
            Just(": ".to_string()),
            Just("$$".to_string()),
            Just("$".to_string()),
            Just("#".to_string()),
            Just("\\#".to_string()),
            Just("\\ ".to_string()),
            Just(" ".to_string()),
            Just("\n".to_string()),
            "[a-z./]{1,6}".prop_map(|s| s),
            any::<char>().prop_map(|c| c.to_string()),
        ],
        0..80,
    )
    .prop_map(|v| v.concat());
    runner(cases / 4)
        .run(&depfile_soup, |t| {
            let _ = scenerun::warm::depfile::parse(&t);
            Ok(())
        })
        .unwrap();
    // What a compiler writes for any list of paths comes back as that list.
    let paths = prop::collection::vec("[a-zA-Z0-9_./ $#+=,@%~ü-]{1,24}", 1..12);
    runner(cases / 4)
        .run(&(paths, any::<u64>()), |(paths, breaks)| {
            let mut text = String::from("build/out.o:");
            for (i, p) in paths.iter().enumerate() {
                if breaks >> (i % 64) & 1 == 1 {
                    text.push_str(" \\\n ");
                } else {
                    text.push(' ');
                }
                text.push_str(&make_escape(p));
            }
            text.push('\n');
            let mut want: Vec<String> = Vec::new();
            for p in &paths {
                if !want.contains(p) {
                    want.push(p.clone());
                }
            }
            let got = scenerun::warm::depfile::parse(&text);
            prop_assert_eq!(&got, &want, "depfile text {:?}", text);
            Ok(())
        })
        .unwrap();
    figure(T, &format!("{cases} depfile texts (arbitrary, make-syntax soup, compiler-escaped path lists that must round-trip): no panic, every path list round-tripped; failures: 0"));
}

/// Argument vectors written by `printf '%s\0' "$@"`.
fn argv(p: &Path) -> Vec<String> {
    let b = fs::read(p).unwrap_or_default();
    let mut v: Vec<String> = b
        .split(|c| *c == 0)
        .map(|s| String::from_utf8_lossy(s).to_string())
        .collect();
    v.pop();
    v
}

/// Files anywhere under `root` whose name starts with PWNED.
fn pwned(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with("PWNED") {
                out.push(p.clone());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            }
        }
    }
    out
}

#[test]
fn hostile_paths_flags_and_env_stay_one_argument() {
    const T: &str = "hostile_paths";
    let mut faults = Faults::new(T);
    let s = Suite::new();
    let hd = "h d'q\"$(touch PWNED_d1)`touch PWNED_d2`;touch PWNED_d3;\nü✓ x";
    let h = s.path(hd);
    fs::create_dir_all(h.join("logs")).unwrap();
    let src = "kernels/a b'c\"d$(touch PWNED_s1)e`touch PWNED_s2`;touch PWNED_s3;\nü.c";
    let inc = "inc dir;$(touch PWNED_i1)'\"`touch PWNED_i2`";
    let data = "data/in put;$(touch PWNED_f1)`touch PWNED_f2`'\".txt";
    let flags = [
        "-DX=$(touch PWNED_g1)",
        "-DY=`touch PWNED_g2`",
        "a b;touch PWNED_g3",
        "new\nline && touch PWNED_g4",
        "ü'\"|touch PWNED_g5",
    ];
    let env_val = "$(touch PWNED_e1);`touch PWNED_e2` 'q' \"dq\"";
    let put = |rel: &str, text: &str, exe: bool| {
        let p = h.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
        if exe {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
    };
    put(src, "int main(void) { return 0; }\n", false);
    put(&format!("{inc}/x.h"), "#define X 1\n", false);
    put(data, "data\n", false);
    put(
        "bin/argv-cc",
        "#!/bin/sh\nprintf '%s\\0' \"$@\" > logs/argv-compile\ncp \"$1\" \"$2\"\n",
        true,
    );
    put(
        "gen.sh",
        "#!/bin/sh\nprintf '%s\\0' \"$@\" > logs/argv-fixture\nprintf '%s' \"$X\" > \"$1/x.txt\"\n",
        true,
    );
    put(
        "golden.sh",
        "#!/bin/sh\nprintf '%s\\0' \"$@\" > logs/argv-golden\ncp \"$1/x.txt\" \"$2/x.txt\"\n",
        true,
    );
    put("device.sh", "#!/bin/sh\nprintf '%s\\0' \"$@\" > logs/argv-device\nprintf '%s' \"$X\" > logs/env-device\nfor k in \"$1\"/*; do [ -f \"$k\" ] || exit 9; done\n[ -f \"$2/x.txt\" ] && [ -f \"$3/x.txt\" ]\n", true);
    let flags_yaml: Vec<String> = flags.iter().map(|f| yq(f)).collect();
    let yaml = format!(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"./bin/argv-cc {{source}} {{out}} {{includes}} {{flags}}\"\n{}scenes:\n  - name: s\n    env:\n      X: {}\n    kernels:\n      - name: k\n        toolchain: cc\n        source: {}\n        include_dirs: [{}]\n        flags: [{}]\n    fixture:\n      run: \"./gen.sh {{out}} {{scene}}\"\n      inputs: [gen.sh, {}]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}}\"\n      inputs: [golden.sh]\n    device:\n      run: \"./device.sh {{kernels}} {{fixture}} {{golden}} {{devices}}\"\n",
        lock_submit("--timeout 60 --max-time 120"),
        yq(env_val),
        yq(src),
        yq(inc),
        flags_yaml.join(", "),
        yq(data),
    );
    put("scenes.yaml", &yaml, false);
    let manifest = h.join("scenes.yaml");
    let mut runs = 0;
    for args in [
        &["plan"][..],
        &["warm", "--dry-run"][..],
        &["device", "--dry-run"][..],
        &["warm"][..],
        &["device"][..],
        &["warm"][..],
    ] {
        let r = exec(sr_at(s.dir(), &manifest, args), LIMIT);
        runs += 1;
        faults.check(r.is(0), || {
            format!("{args:?} in a hostile directory: {}", r.desc())
        });
    }
    let last = warm_counts(&exec(sr_at(s.dir(), &manifest, &["warm"]), LIMIT).stderr);
    faults.check(last == Some((0, 3, 0)), || {
        format!("a second warm is all hits: {last:?}")
    });

    let hc = h.canonicalize().unwrap();
    let c = argv(&h.join("logs/argv-compile"));
    let mut want = vec![src.to_string()];
    faults.check(c.len() == 3 + flags.len(), || {
        format!("compile argv: {c:?}")
    });
    if c.len() == 3 + flags.len() {
        want.push(c[1].clone());
        want.push(format!("-I{inc}"));
        want.extend(flags.iter().map(|f| f.to_string()));
        faults.check(c == want, || format!("compile argv {c:?}, wanted {want:?}"));
        faults.check(
            Path::new(&c[1]).starts_with(hc.join("cache/tmp")) && c[1].ends_with("/out"),
            || format!("{{out}} is a staging path in the cache: {}", c[1]),
        );
    }
    let f = argv(&h.join("logs/argv-fixture"));
    faults.check(
        f.len() == 2 && f[0].ends_with("/out") && f[1] == "s",
        || format!("fixture argv: {f:?}"),
    );
    let g = argv(&h.join("logs/argv-golden"));
    faults.check(
        g.len() == 2 && Path::new(&g[0]).starts_with(hc.join("cache/entries/fixture")),
        || format!("golden argv: {g:?}"),
    );
    let d = argv(&h.join("logs/argv-device"));
    faults.check(
        d.len() == 4
            && d[..3]
                .iter()
                .all(|p| Path::new(p).is_dir() && Path::new(p).starts_with(&hc))
            && d[3] == "0",
        || format!("device argv: {d:?}"),
    );
    let env_seen = fs::read_to_string(h.join("logs/env-device")).unwrap_or_default();
    faults.check(env_seen == env_val, || {
        format!("env reached the device step as {env_seen:?}")
    });
    let fixture_x = entry_dirs(&hc.join("cache"))
        .into_iter()
        .find(|(id, _)| id.0 == "fixture")
        .and_then(|(_, d)| fs::read_to_string(d.join("out/x.txt")).ok());
    faults.check(fixture_x.as_deref() == Some(env_val), || {
        format!("env reached the fixture as {fixture_x:?}")
    });
    let p = pwned(s.dir());
    faults.check(p.is_empty(), || format!("shell injection: {p:?}"));
    figure(T, &format!("{runs} runs (plan, dry runs, warm, device through the lock tool) from a directory, source, include dir, input, flags and env made of spaces, quotes, $(), backticks, ;, newlines, unicode: every value arrived as exactly one argument, {} injected commands ran; failures: {}", p.len(), faults.count()));
    faults.finish();
}

#[test]
fn hostile_names_and_escapes_are_rejected() {
    const T: &str = "hostile_names_escapes";
    let mut faults = Faults::new(T);
    let s = Suite::new();
    s.write("kernels/k.c", "int k;\n");
    s.write("gen.sh", "#!/bin/sh\n");
    s.write("inc/a.h", "\n");
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("x.c"), "int x;\n").unwrap();
    fs::write(outside.path().join("in.txt"), "x\n").unwrap();
    fs::create_dir_all(s.path("sub")).unwrap();
    std::os::unix::fs::symlink(outside.path(), s.path("link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("x.c"), s.path("kernels/leak.c")).unwrap();
    std::os::unix::fs::symlink(s.path("gone"), s.path("kernels/dangling.c")).unwrap();
    let parent_file = s.dir().parent().unwrap().join(format!(
        "{}-outside.c",
        s.dir().file_name().unwrap().to_string_lossy()
    ));
    fs::write(&parent_file, "int o;\n").unwrap();
    let parent_rel = format!("../{}", parent_file.file_name().unwrap().to_string_lossy());
    let scene = |name: &str, kernel: &str, source: &str, inc: &str, input: &str| {
        format!(
            "version: 1\ntoolchains:\n  cc:\n    compile: \"cc -c {{source}} -o {{out}}\"\nscenes:\n  - name: {}\n    kernels:\n      - name: {}\n        toolchain: cc\n        source: {}\n        include_dirs: [{}]\n    fixture:\n      run: \"./gen.sh {{out}}\"\n      inputs: [{}]\n",
            yq(name), yq(kernel), yq(source), yq(inc), yq(input)
        )
    };
    let ok = ("s", "k", "kernels/k.c", "inc", "gen.sh");
    s.manifest(&scene(ok.0, ok.1, ok.2, ok.3, ok.4));
    let r = exec(sr(&s, &["plan"]), LIMIT);
    assert!(r.is(0), "the base manifest is valid: {}", r.desc());
    let bad_names = [
        "a b",
        "a'b",
        "a\"b",
        "$(touch PWNED_n1)",
        "`touch PWNED_n2`",
        "a;touch PWNED_n3",
        "a\nb",
        "ü",
        "..",
        ".",
        "",
        "a/b",
        "../x",
        &"x".repeat(129),
    ];
    let mut cases: Vec<(String, String, &str)> = Vec::new();
    for n in bad_names {
        cases.push((
            format!("scene name {n:?}"),
            scene(n, ok.1, ok.2, ok.3, ok.4),
            "name",
        ));
        cases.push((
            format!("kernel name {n:?}"),
            scene(ok.0, n, ok.2, ok.3, ok.4),
            "name",
        ));
    }
    let escapes: Vec<(String, String, &str)> = vec![
        (
            "source through ..".into(),
            scene(ok.0, ok.1, &parent_rel, ok.3, ok.4),
            "escapes",
        ),
        (
            "source ../../etc/passwd".into(),
            scene(ok.0, ok.1, "../../etc/passwd", ok.3, ok.4),
            "escapes",
        ),
        (
            "source inside/../..".into(),
            scene(ok.0, ok.1, "sub/../../x.c", ok.3, ok.4),
            "escapes",
        ),
        (
            "source through a symlinked dir".into(),
            scene(ok.0, ok.1, "link/x.c", ok.3, ok.4),
            "symlink",
        ),
        (
            "source that is a symlink out".into(),
            scene(ok.0, ok.1, "kernels/leak.c", ok.3, ok.4),
            "symlink",
        ),
        (
            "dangling symlink source".into(),
            scene(ok.0, ok.1, "kernels/dangling.c", ok.3, ok.4),
            "symlink",
        ),
        (
            "include dir through ..".into(),
            scene(ok.0, ok.1, ok.2, "../", ok.4),
            "escapes",
        ),
        (
            "include dir through a symlink".into(),
            scene(ok.0, ok.1, ok.2, "link", ok.4),
            "symlink",
        ),
        (
            "input through ..".into(),
            scene(ok.0, ok.1, ok.2, ok.3, "../*"),
            "`..`",
        ),
        (
            "input through a symlink".into(),
            scene(ok.0, ok.1, ok.2, ok.3, "link/in.txt"),
            "symlink",
        ),
        (
            "input glob through a symlink".into(),
            scene(ok.0, ok.1, ok.2, ok.3, "link/*"),
            "symlink",
        ),
    ];
    cases.extend(escapes);
    let n = cases.len();
    for (what, yaml, word) in &cases {
        s.manifest(yaml);
        for cmd in [&["plan"][..], &["warm"][..]] {
            let r = exec(sr(&s, cmd), LIMIT);
            faults.check(r.is(4) && r.stderr.contains(word), || {
                format!(
                    "{what}: {cmd:?} must be exit 4 mentioning `{word}`: {}",
                    r.desc()
                )
            });
        }
    }
    let _ = fs::remove_file(&parent_file);
    let p = pwned(s.dir());
    faults.check(p.is_empty(), || format!("shell injection: {p:?}"));
    faults.check(
        !s.path("cache").exists() && !s.path("build/cache").exists(),
        || "a rejected manifest created a cache".into(),
    );
    figure(T, &format!("{n} hostile manifests ({} bad scene/kernel names, {} `..`/symlink escapes of sources, include dirs and inputs), each through plan and warm: exit 4 with a message naming the problem, nothing run; failures: {}", bad_names.len() * 2, n - bad_names.len() * 2, faults.count()));
    faults.finish();
}

#[test]
fn hostile_artifacts_with_symlinks_fail_their_step() {
    const T: &str = "hostile_artifact_symlinks";
    let mut faults = Faults::new(T);
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    s.script(
        "leak.sh",
        "#!/bin/sh\nln -s /etc/passwd \"$1/leak\"\necho x > \"$1/ok\"\n",
    );
    s.script("root.sh", "#!/bin/sh\nln -s / \"$1/root\"\n");
    s.script("fine.sh", "#!/bin/sh\necho x > \"$1/ok\"\n");
    s.write("kernels/k.c", "int k;\n");
    s.manifest(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  ln:\n    compile: \"ln -s /etc/passwd {out}\"\nscenes:\n  - name: leak\n    fixture:\n      run: \"./leak.sh {out}\"\n      inputs: [leak.sh]\n  - name: root\n    fixture:\n      run: \"./root.sh {out}\"\n      inputs: [root.sh]\n  - name: kern\n    kernels:\n      - name: k\n        toolchain: ln\n        source: kernels/k.c\n  - name: fine\n    fixture:\n      run: \"./fine.sh {out}\"\n      inputs: [fine.sh]\n",
    );
    let r = exec(sr(&s, &["-j", "1", "warm"]), LIMIT);
    faults.check(r.is(0), || {
        format!(
            "warm: a step leaving a symlink fails its scene only (exit 0): {}",
            r.desc()
        )
    });
    for sc in ["leak", "root", "kern"] {
        let st = warm_step(&s, sc);
        faults.check(
            st["outcome"] == "failed"
                && st["error"]
                    .as_str()
                    .unwrap_or("")
                    .contains("not a regular file"),
            || format!("{sc}: expected a step failure naming the symlink: {st}"),
        );
    }
    let fine = warm_step(&s, "fine");
    faults.check(fine["outcome"] == "built", || format!("fine: {fine}"));
    nothing_half_published(&mut faults, "symlink artifacts", &s, &s.path("cache"), 1);
    figure(T, &format!("3 steps leaving symlinks in {{out}} (to a file, to /, as the kernel itself): each fails its own scene naming it, the other scene is built, nothing published; failures: {}", faults.count()));
    faults.finish();
}

// ------------------------------------------------------------------ 6. the lock tool misbehaving

/// Two warm scenes with quick device steps; `lock` is the manifest's lock section.
fn lock_suite(s: &Suite, lock: &str, slow_device: &str) {
    fs::create_dir_all(s.path("logs")).unwrap();
    s.script("gen.sh", "#!/bin/sh\necho \"$2\" > \"$1/v.txt\"\n");
    s.script(
        "device.sh",
        &format!("#!/bin/sh\necho \"$SCENERUN_SCENE $2\" >> logs/device-ran.log\n[ \"$SCENERUN_SCENE\" = slow ] && {{ {slow_device}; }}\nexit 0\n"),
    );
    let mut y = format!("version: 1\ncache:\n  dir: cache\n{lock}scenes:\n");
    for name in ["quick", "slow"] {
        y.push_str(&format!(
            "  - name: {name}\n    fixture:\n      run: \"./gen.sh {{out}} {name}\"\n      inputs: [gen.sh]\n    device:\n      run: \"./device.sh {{fixture}} {{devices}}\"\n"
        ));
    }
    s.manifest(&y);
}

/// Check the outcome of a device phase whose lock tool misbehaved.
fn lock_failed(
    faults: &mut Faults,
    what: &str,
    s: &Suite,
    r: &Run,
    lock_exit: Option<i64>,
    says: &str,
) {
    faults.check(r.is(3), || format!("{what}: expected exit 3: {}", r.desc()));
    faults.check(
        r.stderr.contains("lock command") && r.stderr.contains(says),
        || {
            format!(
                "{what}: the message must name the lock command and say `{says}`: {}",
                r.desc()
            )
        },
    );
    let rep = read_json(&s.path("build/scenerun/report.json"));
    let Some(rep) = rep else {
        faults.add(format!("{what}: no report.json"));
        return;
    };
    faults.check(rep["exit_code"] == 3 && rep["error"].is_string(), || {
        format!("{what}: report.json exit_code/error: {}", rep)
    });
    let scenes = rep["scenes"].as_array().map(|a| a.len()).unwrap_or(0);
    faults.check(scenes == 2, || {
        format!("{what}: report.json lists {scenes} scenes")
    });
    if let Some(code) = lock_exit {
        faults.check(rep["lock"]["exit_code"] == code, || {
            format!(
                "{what}: report.json lock.exit_code {} (expected {code})",
                rep["lock"]["exit_code"]
            )
        });
    }
    faults.check(
        rep["lock"]["command"].is_string() && rep["lock"]["output_tail"].is_string(),
        || format!("{what}: report.json lock section: {}", rep["lock"]),
    );
}

#[test]
fn lock_tool_misbehaving_is_exit_3_with_a_report() {
    const T: &str = "lock_misbehaving";
    let mut faults = Faults::new(T);
    let s = Suite::new();
    let real = |flags: &str| lock_submit(flags);
    let fake = |script: &str| {
        format!(
            "lock:\n  submit: \"./fake-lock.sh --run {{run}}\"\n{}",
            script
        )
    };
    lock_suite(&s, &real("--timeout 10 --max-time 60"), "true");
    let r = exec(sr(&s, &["warm"]), LIMIT);
    assert!(r.is(0), "warm: {}", r.desc());
    let r = exec(sr(&s, &["device"]), LIMIT);
    assert!(r.is(0), "device with a working lock: {}", r.desc());
    let mut cases = 0;
    let mut check = |faults: &mut Faults,
                     what: &str,
                     lock: String,
                     slow: &str,
                     exit: Option<i64>,
                     says: &str,
                     ran_inner: bool| {
        lock_suite(&s, &lock, slow);
        let _ = fs::remove_file(s.path("logs/device-ran.log"));
        let _ = fs::remove_file(s.path("build/scenerun/report.json"));
        let r = exec(sr(&s, &["device"]), LIMIT);
        cases += 1;
        lock_failed(faults, what, &s, &r, exit, says);
        if !ran_inner {
            faults.check(!s.path("logs/device-ran.log").exists(), || {
                format!(
                    "{what}: a device step ran: {}",
                    s.read("logs/device-ran.log")
                )
            });
        }
    };
    // Not installed.
    check(
        &mut faults,
        "lock tool not installed",
        "lock:\n  submit: \"/nonexistent/task-submit --run {run}\"\n".into(),
        "true",
        Some(127),
        "not found",
        false,
    );
    // Refuses before running the inner command: usage error, and a plain exit 1.
    check(
        &mut faults,
        "lock tool refuses (usage)",
        format!(
            "lock:\n  submit: {}\n",
            yq(&format!(
                "{TASK_SUBMIT} --timeout 5 --device-num 99 --run {{run}}"
            ))
        ),
        "true",
        Some(64),
        "exceeds the pool",
        false,
    );
    s.script(
        "fake-lock.sh",
        "#!/bin/sh\necho 'fake-lock: quota exceeded for this project' >&2\nexit 1\n",
    );
    check(
        &mut faults,
        "lock tool refuses (exit 1)",
        fake(""),
        "true",
        Some(1),
        "quota exceeded",
        false,
    );
    // Returns 0 although the inner run never happened (and stale results are on disk).
    s.script(
        "fake-lock.sh",
        "#!/bin/sh\necho 'fake-lock: granted (not really)'\nexit 0\n",
    );
    check(
        &mut faults,
        "lock tool returns 0 without running",
        fake(""),
        "true",
        Some(0),
        "granted (not really)",
        false,
    );
    // Runs the inner command but hands over no device ids.
    s.script("fake-lock.sh", "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --run ] && run=$2; shift; done\necho 'fake-lock: running without ids'\nenv -u TASK_DEVICE sh -c \"$run\"\n");
    check(
        &mut faults,
        "lock tool hands over no ids",
        fake(""),
        "true",
        None,
        "TASK_DEVICE",
        false,
    );
    // Returns while the inner run goes on in the background, outside the lock.
    s.script("fake-lock.sh", "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --run ] && run=$2; shift; done\nTASK_DEVICE=0 setsid sh -c \"$run\" > /dev/null 2>&1 &\nsleep 0.3\necho 'fake-lock: done (the run is still going)'\nexit 0\n");
    check(
        &mut faults,
        "lock tool returns while the run goes on",
        fake(""),
        "sleep 1.25",
        Some(0),
        "still running outside",
        true,
    );
    // Killed by a signal.
    s.script(
        "fake-lock.sh",
        "#!/bin/sh\necho 'fake-lock: dying'\nkill -9 $$\n",
    );
    check(
        &mut faults,
        "lock tool killed by SIGKILL",
        fake(""),
        "true",
        None,
        "fake-lock: dying",
        false,
    );
    // Queue timeout: another job holds every device.
    let mut holder = StdCommand::new(TASK_SUBMIT);
    holder
        .args([
            "--device",
            "auto",
            "--device-num",
            "4",
            "--run",
            "sleep 300.41",
        ])
        .env("TASK_SUBMIT_POOL", s.path("pool"))
        .env("TASK_SUBMIT_LOG", s.path("holder.log"))
        .env("TASK_SUBMIT_DEVICES", "0-3")
        .current_dir(s.dir())
        .stdin(Stdio::null());
    let (mut holder, _cap) = start(holder);
    let t = Instant::now();
    while !s.read("holder.log").contains("acquire") && t.elapsed() < secs(30) {
        sleep(Duration::from_millis(20));
    }
    check(
        &mut faults,
        "queue timeout",
        real("--timeout 0.3 --max-time 60"),
        "true",
        Some(75),
        "timed out",
        false,
    );
    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    let _ = wait_bounded(&mut holder, secs(20));
    // --max-time kills the inner run midway: the slow scene's device step sleeps (or
    // ignores SIGTERM too), the quick one has passed by then on the other device. The
    // lock tool's grace is longer than scenerun's, so the inner run gets to report.
    let max_time = format!(
        "lock:\n  submit: {}\n  device_count: 2\n",
        yq(&format!("TASK_SUBMIT_GRACE=6 {TASK_SUBMIT} --timeout 10 --max-time 2 --device auto --device-num {{device_count}} --run {{run}}"))
    );
    for (what, slow) in [
        ("--max-time kills the run", "sleep 300.42"),
        (
            "--max-time, step ignores SIGTERM",
            "trap '' TERM; sleep 300.43",
        ),
    ] {
        check(
            &mut faults,
            what,
            max_time.clone(),
            slow,
            Some(124),
            "max-time",
            true,
        );
        let rep = read_json(&s.path("build/scenerun/report.json")).unwrap_or_default();
        let scene = |n: &str| {
            rep["scenes"]
                .as_array()
                .and_then(|a| a.iter().find(|x| x["name"] == n).cloned())
                .unwrap_or_default()
        };
        faults.check(
            scene("quick")["outcome"] == "passed" && scene("slow")["outcome"] != "passed",
            || {
                format!(
                    "{what}: the report keeps what ran before the kill: {}\n{}",
                    rep["scenes"],
                    s.read("build/scenerun/lock.log")
                )
            },
        );
    }
    let left = survivors(|| procs_matching("sleep 300.4"), secs(15));
    faults.check(left.is_empty(), || {
        format!("device steps outlived the lock tool's kill: {left:?}")
    });
    // And it works again afterwards: nothing was left holding the lock.
    lock_suite(&s, &real("--timeout 5 --max-time 60"), "true");
    let r = exec(sr(&s, &["device"]), LIMIT);
    faults.check(r.is(0), || {
        format!("device after the failures: {}", r.desc())
    });
    figure(T, &format!("{cases} misbehaviours (not installed, refuses ×2, returns 0 without running, returns while the run goes on, no ids, SIGKILLed, queue timeout, --max-time ×2): each exit 3 naming the lock command with its output tail, report.json written with exit_code 3, the lock's exit code and every scene; no device step outlived a kill; failures: {}", faults.count()));
    faults.finish();
}

// ------------------------------------------------------------------ 7. stubborn children

#[test]
fn stubborn_children_are_killed_and_never_waited_for() {
    const T: &str = "stubborn_children";
    let mut faults = Faults::new(T);
    let mut cases = 0;
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    s.script("stubborn.sh", "#!/bin/sh\ntrap '' TERM\necho started > logs/stubborn.started\nsleep 300.51\nsleep 300.51\n");
    s.script(
        "bg.sh",
        "#!/bin/sh\nsleep 300.52 &\n( trap '' TERM; sleep 300.52 ) &\necho x > \"$1/v.txt\"\n",
    );
    s.script("escape.sh", "#!/bin/sh\nsetsid sleep 300.53 > /dev/null 2>&1 &\necho $! > logs/escaped.pid\necho x > \"$1/v.txt\"\n");
    s.script("dev-stubborn.sh", "#!/bin/sh\ntrap '' TERM\nsleep 300.54\n");
    s.script(
        "dev-bg.sh",
        "#!/bin/sh\nsleep 300.55 &\n( trap '' TERM; exec sleep 300.55 ) &\nexit 0\n",
    );
    s.script("ok.sh", "#!/bin/sh\necho x > \"$1/v.txt\"\n");
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\n{}scenes:\n  - name: stubborn\n    tags: [stubborn]\n    fixture:\n      run: \"./stubborn.sh {{out}}\"\n      inputs: [stubborn.sh]\n      timeout: 1s\n  - name: bg\n    tags: [bg]\n    fixture:\n      run: \"./bg.sh {{out}}\"\n      inputs: [bg.sh]\n  - name: escape\n    tags: [escape]\n    fixture:\n      run: \"./escape.sh {{out}}\"\n      inputs: [escape.sh]\n  - name: devstubborn\n    tags: [dev]\n    fixture:\n      run: \"./ok.sh {{out}} 1\"\n      inputs: [ok.sh]\n    device:\n      run: \"./dev-stubborn.sh\"\n      timeout: 1s\n  - name: devbg\n    tags: [dev]\n    fixture:\n      run: \"./ok.sh {{out}} 2\"\n      inputs: [ok.sh]\n    device:\n      run: \"./dev-bg.sh\"\n",
        lock_submit("--timeout 5 --max-time 120")
    ));
    let gone = |marker: &str| survivors(|| procs_matching(marker), secs(10));

    // A warm step that ignores SIGTERM past its timeout: killed after the grace.
    let r = exec(sr(&s, &["warm", "--tag", "stubborn"]), secs(60));
    cases += 1;
    let st = warm_step(&s, "stubborn");
    faults.check(
        r.is(0)
            && st["outcome"] == "failed"
            && st["error"].as_str().unwrap_or("").contains("timed out"),
        || format!("warm step ignoring SIGTERM: {st}\n{}", r.desc()),
    );
    let left = gone("sleep 300.51");
    faults.check(left.is_empty(), || {
        format!("the stubborn warm step survived: {left:?}")
    });

    // A warm step that leaves background children (one ignoring SIGTERM): not waited for, killed.
    let r = exec(sr(&s, &["warm", "--tag", "bg"]), secs(60));
    cases += 1;
    faults.check(r.is(0) && warm_step(&s, "bg")["outcome"] == "built", || {
        format!("warm step with background children: {}", r.desc())
    });
    let left = gone("sleep 300.52");
    faults.check(left.is_empty(), || {
        format!("background children outlived their step: {left:?}")
    });

    // A child that leaves the step's process group (setsid) does not keep warm waiting either.
    let r = exec(sr(&s, &["warm", "--tag", "escape"]), secs(60));
    cases += 1;
    faults.check(r.is(0) && !r.hung, || {
        format!("warm step with a setsid child: {}", r.desc())
    });
    if let Ok(pid) = s.read("logs/escaped.pid").trim().parse::<i32>() {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    // SIGTERM to warm while a step ignores it: exit 2, the step killed, nothing published.
    let _ = fs::remove_dir_all(s.path("cache"));
    let _ = fs::remove_file(s.path("logs/stubborn.started"));
    s.script("stubborn.sh", "#!/bin/sh\ntrap '' TERM\necho started > logs/stubborn.started\nsleep 300.56\necho late > \"$1/v.txt\"\n");
    let (child, cap) = start(sr(&s, &["warm", "--tag", "stubborn"]));
    let started = wait_for_file(&s.path("logs/stubborn.started"), secs(30));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let r = finish(child, cap, secs(60));
    cases += 1;
    faults.check(started && r.is(2), || {
        format!("SIGTERM to warm: expected exit 2: {}", r.desc())
    });
    let left = gone("sleep 300.56");
    faults.check(left.is_empty(), || {
        format!("a step outlived the interrupted warm: {left:?}")
    });
    faults.check(
        entry_dirs(&s.path("cache")).is_empty() && tmp_leftovers(&s.path("cache")).is_empty(),
        || {
            format!(
                "interrupted warm left {:?} / tmp {:?}",
                entry_dirs(&s.path("cache")),
                tmp_leftovers(&s.path("cache"))
            )
        },
    );

    // kill -9 of warm: its steps die with it (the watchdog).
    let _ = fs::remove_file(s.path("logs/stubborn.started"));
    let (mut child, cap) = start(sr(&s, &["warm", "--tag", "stubborn"]));
    let started = wait_for_file(&s.path("logs/stubborn.started"), secs(30));
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    drop(cap);
    cases += 1;
    let left = gone("sleep 300.56");
    faults.check(started && left.is_empty(), || {
        format!("a step outlived kill -9 of warm: {left:?}")
    });

    // Device steps: ignoring SIGTERM past the timeout, and leaving background children;
    // without the lock and through it.
    let r = exec(sr(&s, &["warm", "--tag", "dev"]), secs(60));
    assert!(r.is(0), "warm dev: {}", r.desc());
    for no_lock in [true, false] {
        let mut args = vec!["device", "--tag", "dev"];
        if no_lock {
            args.push("--no-lock");
        }
        let r = exec(sr(&s, &args), secs(90));
        cases += 1;
        let rep = read_json(&s.path("build/scenerun/report.json")).unwrap_or_default();
        let outcome = |n: &str| {
            rep["scenes"]
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .find(|x| x["name"] == n)
                        .map(|x| x["outcome"].clone())
                })
                .unwrap_or_default()
        };
        faults.check(
            r.is(1) && outcome("devstubborn") == "timed_out" && outcome("devbg") == "passed",
            || {
                format!(
                    "device (no_lock={no_lock}): stubborn timed out, background passed: {rep}\n{}",
                    r.desc()
                )
            },
        );
        let left = gone("sleep 300.54");
        faults.check(left.is_empty(), || {
            format!("device step ignoring SIGTERM survived: {left:?}")
        });
        let left = gone("sleep 300.55");
        faults.check(left.is_empty(), || {
            format!("device step's background children survived: {left:?}")
        });
    }
    // The lock was released: an immediate second acquisition (timeout 5 s) succeeds.
    let events = s.read("lock-events.log");
    let acquires = events.lines().filter(|l| l.starts_with("acquire")).count();
    let releases = events.lines().filter(|l| l.starts_with("release")).count();
    faults.check(acquires == 1 && releases == 1, || {
        format!("lock events: {events}")
    });
    let r = exec(sr(&s, &["device", "-k", "devbg"]), secs(90));
    cases += 1;
    faults.check(r.is(0), || {
        format!("the lock is free after a step left children: {}", r.desc())
    });

    // kill -9 of the device phase (no lock): the running device step dies with it.
    s.script(
        "dev-stubborn.sh",
        "#!/bin/sh\ntrap '' TERM\necho started > logs/dev.started\nsleep 300.57\n",
    );
    let (mut child, cap) = start(sr(&s, &["device", "--no-lock", "-k", "devstubborn"]));
    let started = wait_for_file(&s.path("logs/dev.started"), secs(30));
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    drop(cap);
    cases += 1;
    let left = gone("sleep 300.57");
    faults.check(started && left.is_empty(), || {
        format!("a device step outlived kill -9 of device: {left:?}")
    });

    figure(T, &format!("{cases} cases (warm/device steps ignoring SIGTERM past their timeout, background children incl. ones ignoring SIGTERM and a setsid escapee, SIGTERM and kill -9 of warm and device, through the lock and without): every step group killed after the 2 s grace, scenerun never waited for a leftover child, the lock released; failures: {}", faults.count()));
    faults.finish();
}

#[test]
fn hostile_depfile_names_from_real_cc() {
    const T: &str = "hostile_depfile_cc";
    let mut faults = Faults::new(T);
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    // Found only through a flag (the include scanner does not follow flags): the
    // compiler's depfile is the only record of it, with its name escaped by gcc.
    let hdr_dir = "hid den $d #x";
    let hdr = "we ird $x #h;`q`'.h";
    s.write(&format!("{hdr_dir}/{hdr}"), "#define V 1\n");
    s.write(
        "kernels/k.c",
        &format!("#include <stdio.h>\n#include <{hdr}>\nint main(void) {{ printf(\"%d\\n\", V); return 0; }}\n"),
    );
    let cc = s.logging_cc();
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: {}\n    depfile: \"-MD -MF {{depfile}}\"\nscenes:\n  - name: s\n    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/k.c\n        flags: [{}]\n",
        yq(&format!("{} -O0 -o {{out}} {{source}} {{flags}}", cc.display())),
        yq(&format!("-I{hdr_dir}"))
    ));
    let mut steps = Vec::new();
    for (i, edit) in [None, None, Some("#define V 2\n"), None]
        .into_iter()
        .enumerate()
    {
        if let Some(text) = edit {
            s.write(&format!("{hdr_dir}/{hdr}"), text);
        }
        let before = s.count("logs/cc.log");
        let r = exec(sr(&s, &["warm"]), LIMIT);
        let compiled = s.count("logs/cc.log") - before;
        steps.push(compiled);
        let want = usize::from(i == 0 || i == 2);
        faults.check(
            r.is(0) && compiled == want && warm_counts(&r.stderr).is_some_and(|c| c.2 == 0),
            || {
                format!(
                    "warm #{i}: compiled {compiled}, expected {want}: {}",
                    r.desc()
                )
            },
        );
    }
    let entry = entry_dirs(&s.path("cache")).into_values().next();
    let meta = entry
        .and_then(|d| read_json(&d.join("meta.json")))
        .unwrap_or_default();
    let deps: Vec<String> = meta["deps"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d["path"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let want = format!("{hdr_dir}/{hdr}");
    faults.check(deps.contains(&want), || {
        format!("the depfile record lacks {want:?}: {deps:?}")
    });
    figure(T, &format!("a header named {hdr:?} in {hdr_dir:?}, reached only through a flag: recorded from gcc's depfile under its exact name, compiles per warm {steps:?} (an edit rebuilt it, nothing else did); failures: {}", faults.count()));
    faults.finish();
}

#[test]
fn concurrency_verify_fix_racing_warm_keeps_what_warm_rebuilt() {
    const T: &str = "concurrency_verify_fix";
    let rounds = pick(8, 40);
    let mut rng = Rng::new(T);
    let mut faults = Faults::new(T);
    let s = Suite::new();
    fs::create_dir_all(s.path("logs")).unwrap();
    s.script(
        "gen.sh",
        "#!/bin/sh\nyes \"$2\" | head -c 200000 > \"$1/v.bin\"\n",
    );
    let mut y = String::from("version: 1\ncache:\n  dir: cache\nscenes:\n");
    let n = 40;
    for i in 0..n {
        y.push_str(&format!(
            "  - name: f{i}\n    fixture:\n      run: \"./gen.sh {{out}} {i}\"\n      inputs: [gen.sh]\n"
        ));
    }
    s.manifest(&y);
    let cache = s.path("cache");
    let r = exec(sr(&s, &["warm"]), LIMIT);
    assert!(r.is(0), "first warm: {}", r.desc());
    let (mut damaged_total, mut rebuilt) = (0, 0);
    for round in 0..rounds {
        // Truncated entries: `verify --fix` removes them while warm rebuilds them.
        let dirs: Vec<PathBuf> = entry_dirs(&cache).into_values().collect();
        let k = 1 + rng.below(dirs.len() / 2);
        for i in rng.sample(dirs.len(), k) {
            let f = dirs[i].join("out/v.bin");
            let fh = fs::File::options().write(true).open(&f).unwrap();
            fh.set_len(10).unwrap();
        }
        damaged_total += k;
        let v = start(sr(&s, &["cache", "verify", "--fix"]));
        sleep(Duration::from_micros(rng.below(30_000) as u64));
        let w = start(sr(&s, &["-j", "2", "warm"]));
        let vr = finish(v.0, v.1, LIMIT);
        let wr = finish(w.0, w.1, LIMIT);
        faults.check(!vr.hung && (vr.is(0) || vr.is(1)), || {
            format!("round {round}: verify --fix: {}", vr.desc())
        });
        faults.check(wr.is(0), || format!("round {round}: warm: {}", wr.desc()));
        rebuilt += warm_counts(&wr.stderr).map(|c| c.0).unwrap_or(0);
        let d = exec(sr(&s, &["device", "--no-lock"]), LIMIT);
        faults.check(d.is(0), || {
            format!(
                "round {round}: device after warm raced verify --fix (warm's entries must be there): {}",
                d.desc()
            )
        });
        // Leave the cache whole for the next round.
        let r = exec(sr(&s, &["warm"]), LIMIT);
        faults.check(r.is(0), || {
            format!("round {round}: repair warm: {}", r.desc())
        });
        let v = exec(sr(&s, &["cache", "verify"]), LIMIT);
        faults.check(v.is(0), || format!("round {round}: verify: {}", v.desc()));
    }
    figure(
        T,
        &format!(
            "{rounds} rounds of `cache verify --fix` racing `warm` over {damaged_total} truncated entries of {n}: warm rebuilt {rebuilt} during the race, the device phase found every entry warm reported; failures: {}",
            faults.count()
        ),
    );
    faults.finish();
}
