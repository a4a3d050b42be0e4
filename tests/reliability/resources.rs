//! Resource exhaustion (docs/guarantees.md row 4): a full disk, `ulimit -f`, a
//! read-only cache, a missing compiler.

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};

use super::*;
use crate::common::*;

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
    let s = Suite::with_logs();
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
    let s = Suite::with_logs();
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
