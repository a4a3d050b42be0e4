//! Cache trust (docs/cache-trust.md): whatever is planted in a cache dir, scenerun never
//! reads, writes or deletes outside it, and never serves what it did not build. Every
//! test plants a real attack (real symlinks, FIFOs, foreign files), runs the real binary,
//! and checks that the victim files outside the cache survive byte for byte and that
//! nothing planted is served (the step runs again: its run log grows).

mod args;
mod attacks;
pub mod bounded;
mod compiled;
mod discovery;
mod inputs;
mod kept;
mod lock_orphan;
mod maintain;
mod numbers;
mod planted;
mod readonly;
mod remote_records;
mod restored;
mod secrets;
pub(crate) mod signed;
mod terminal;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::common::*;

/// A fast suite (no C compiler): one scene whose kernel is "compiled" by `cp`, a
/// fixture writing two files, and a golden reading the fixture. Each step logs its runs.
pub fn light_suite() -> Suite {
    let s = Suite::with_logs();
    s.write("kernels/k.c", "int k;\n");
    s.script(
        "gen.sh",
        "#!/bin/sh\necho run >> logs/gen.log\necho 20 > \"$1/input.txt\"\nmkdir -p \"$1/sub\"\necho deep > \"$1/sub/more.txt\"\n",
    );
    s.script(
        "golden.sh",
        "#!/bin/sh\necho run >> logs/golden.log\ncat \"$1/input.txt\" > \"$2/expected.txt\"\n",
    );
    s.manifest(
        "version: 1\nplatform: a2a3\ncache:\n  dir: cache\ntoolchains:\n  cp:\n    compile: \"echo run >> logs/cc.log; cp {source} {out}\"\nscenes:\n  - name: s0\n    kernels:\n      - name: k\n        toolchain: cp\n        source: kernels/k.c\n    fixture:\n      run: \"./gen.sh {out}\"\n      inputs: [gen.sh]\n    golden:\n      run: \"./golden.sh {fixture} {out}\"\n      inputs: [golden.sh]\n    device:\n      run: \"true\"\n",
    );
    s
}

/// A directory outside the cache, full of things an attack would like to delete or
/// overwrite: files, nested dirs named like cache internals, an executable.
pub struct Victim {
    pub dir: tempfile::TempDir,
}

impl Victim {
    pub fn new() -> Victim {
        let v = Victim {
            dir: tempfile::tempdir().unwrap(),
        };
        let w = |rel: &str, text: &str| {
            let p = v.path(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, text).unwrap();
        };
        w("precious.txt", "do not delete\n");
        w("fixture.1.2/out/input.txt", "20\n");
        w("fixture.1.2.lock", "");
        w("trash.1.1/data.bin", "keep me too\n");
        w("ab/abcdef/meta.json", "{}");
        w("ab/abcdef/out/x", "old stage\n");
        w("deep/a/b/c.txt", "nested\n");
        fs::set_permissions(v.path("precious.txt"), fs::Permissions::from_mode(0o640)).unwrap();
        v
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Every node under the victim: path → (kind, mode, content or link target).
    pub fn snapshot(&self) -> BTreeMap<PathBuf, (String, u32, Vec<u8>)> {
        snapshot(self.dir.path())
    }
}

pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, (String, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let ft = m.file_type();
            let (kind, body) = if ft.is_symlink() {
                (
                    "link",
                    fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                )
            } else if ft.is_dir() {
                todo.push(p.clone());
                ("dir", Vec::new())
            } else if ft.is_file() {
                ("file", fs::read(&p).unwrap())
            } else {
                ("special", Vec::new())
            };
            out.insert(rel, (kind.to_string(), m.mode(), body));
        }
    }
    out
}

/// Run a command with a bound: a hang is a failure, not a stuck test run.
pub fn run_bounded(mut c: std::process::Command, limit: Duration) -> Output {
    let child = c
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            panic!("scenerun did not finish within {limit:?} (a hang)");
        }
    }
}

/// `scenerun --manifest <suite>/scenes.yaml ARGS` as a plain process, bounded.
pub fn run(s: &Suite, args: &[&str]) -> Output {
    let mut c = scenerun_process();
    c.current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .args(args);
    run_bounded(c, Duration::from_secs(120))
}

/// The only entry directory of a kind (after one warm of the light suite).
pub fn only_entry(s: &Suite, kind: &str) -> PathBuf {
    let all: Vec<PathBuf> = entry_dirs(&s.path("cache"))
        .into_iter()
        .filter(|((k, _), _)| k == kind)
        .map(|(_, p)| p)
        .collect();
    assert_eq!(all.len(), 1, "{kind} entries: {all:?}");
    all[0].clone()
}

/// Warm once and check everything was built.
pub fn warm_fresh(s: &Suite) {
    let o = run(s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!((s.count("logs/cc.log"), s.count("logs/gen.log")), (1, 1));
}

pub fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

pub fn mkfifo(p: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", p.display());
}
