//! A restored cache is verified, not re-stamped (docs/cache-trust.md, "Another copy of
//! the cache"): a cache copied with `cp -a` or restored from a tar archive has new
//! inodes, so its stamps say nothing; a file swapped there for other bytes of the same
//! size must be re-hashed before it is served, signed or not. The same for a record whose
//! `copy` field was dropped in place. `warm` rebuilds what `cache verify` calls corrupt
//! (counted: the generator and the "compiler" log each run), and `device` refuses it
//! before any step sees it.

use std::fs;

use super::signed::keypair;
use super::*;

/// The light suite, with a device step that logs what it read of the fixture.
fn suite(signing: &str) -> Suite {
    let s = light_suite();
    let text = s.read("scenes.yaml");
    let text = text
        .replace(
            "cache:\n  dir: cache\n",
            &format!("cache:\n  dir: cache\n{signing}"),
        )
        .replace(
            "      run: \"true\"\n",
            "      run: \"cat {fixture}/input.txt >> logs/device.log\"\n",
        );
    s.manifest(&text);
    s
}

fn run_env(s: &Suite, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = scenerun_process();
    c.current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run_bounded(c, Duration::from_secs(120))
}

/// Other bytes of the same size in place of `file` (written through a new inode-less
/// path: the same file, its mode bits given back first).
fn swap(file: &Path, bytes: &[u8]) {
    let before = fs::read(file).unwrap();
    assert_eq!(before.len(), bytes.len(), "same size");
    assert_ne!(before, bytes);
    fs::set_permissions(file, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(file, bytes).unwrap();
    fs::set_permissions(file, fs::Permissions::from_mode(0o444)).unwrap();
}

fn entry_in(cache: &Path, kind: &str) -> PathBuf {
    let all: Vec<PathBuf> = entry_dirs(cache)
        .into_iter()
        .filter(|((k, _), _)| k == kind)
        .map(|(_, p)| p)
        .collect();
    assert_eq!(all.len(), 1, "{kind}: {all:?}");
    all[0].clone()
}

fn sh(dir: &Path, line: &str) {
    let st = std::process::Command::new("sh")
        .args(["-c", line])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success(), "{line}");
}

/// `cp -a`, then tar: each restore with a swapped fixture file and a swapped kernel
/// object; with and without `cache.verify_key`.
#[test]
fn a_restored_cache_with_a_swapped_file_is_rehashed_and_rebuilt() {
    let (private, public) = keypair(11);
    let signing = format!("  verify_key: \"{public}\"\n  sign_key_env: MY_ENTRY_KEY\n");
    for (signed, restore) in [
        (false, "cp -a cache restored"),
        (
            false,
            "tar cf c.tar cache && mkdir r && tar xf c.tar -C r && mv r/cache restored",
        ),
        (true, "cp -a cache restored"),
        (
            true,
            "tar cf c.tar cache && mkdir r && tar xf c.tar -C r && mv r/cache restored",
        ),
    ] {
        let s = suite(if signed { &signing } else { "" });
        let env: &[(&str, &str)] = if signed {
            &[("MY_ENTRY_KEY", private.as_str())]
        } else {
            &[]
        };
        let o = run_env(&s, &["warm"], env);
        assert_eq!(code(&o), 0, "{}", show(&o));
        assert_eq!((s.count("logs/cc.log"), s.count("logs/gen.log")), (1, 1));
        sh(s.dir(), restore);
        let restored = s.path("restored");
        swap(
            &entry_in(&restored, "fixture").join("out/input.txt"),
            b"66\n",
        );
        swap(&entry_in(&restored, "kernel").join("out"), b"int j;\n");
        let dir = restored.to_str().unwrap();
        let case = format!("{restore} (signed: {signed})");

        // `cache verify` calls it corrupt; `device` agrees: not warm, no step ran.
        let o = run_env(&s, &["--cache-dir", dir, "cache", "verify"], &[]);
        assert_eq!(code(&o), 1, "{case}: {}", show(&o));
        let o = run_env(
            &s,
            &["--cache-dir", dir, "device", "--no-lock", "--devices", "0"],
            &[],
        );
        assert_eq!(code(&o), 6, "{case}: device served it: {}", show(&o));
        assert_eq!(s.count("logs/device.log"), 0, "{case}");

        // `warm` rebuilds both, and then serves them.
        let o = run_env(&s, &["--cache-dir", dir, "warm"], env);
        assert_eq!(code(&o), 0, "{case}: {}", show(&o));
        assert_eq!(
            (s.count("logs/cc.log"), s.count("logs/gen.log")),
            (2, 2),
            "{case}: rebuilt: {}",
            show(&o)
        );
        let o = run_env(&s, &["--cache-dir", dir, "cache", "verify"], &[]);
        assert_eq!(code(&o), 0, "{case}: {}", show(&o));
        let o = run_env(
            &s,
            &["--cache-dir", dir, "device", "--no-lock", "--devices", "0"],
            &[],
        );
        assert_eq!(code(&o), 0, "{case}: {}", show(&o));
        assert_eq!(s.read("logs/device.log"), "20\n", "{case}");
        let o = run_env(&s, &["--cache-dir", dir, "warm"], env);
        assert_eq!(code(&o), 0, "{case}: {}", show(&o));
        assert_eq!(
            (s.count("logs/cc.log"), s.count("logs/gen.log")),
            (2, 2),
            "{case}: then hits"
        );
    }
}

/// An untouched restore is still served (re-hashed once, then stamped), with no rebuild.
#[test]
fn an_untouched_restore_is_served_without_a_rebuild() {
    let s = suite("");
    warm_fresh(&s);
    sh(s.dir(), "cp -a cache restored");
    let dir = s.path("restored");
    let dir = dir.to_str().unwrap();
    for _ in 0..2 {
        let o = run(&s, &["--cache-dir", dir, "warm"]);
        assert_eq!(code(&o), 0, "{}", show(&o));
        assert_eq!((s.count("logs/cc.log"), s.count("logs/gen.log")), (1, 1));
    }
}

/// In place: a file swapped, and the record's `copy` field dropped (so its stamps look
/// like those of another copy). Not served: re-hashed, found changed, rebuilt.
#[test]
fn a_record_without_its_copy_field_is_rehashed_not_restamped() {
    let s = suite("");
    warm_fresh(&s);
    let entry = only_entry(&s, "fixture");
    swap(&entry.join("out/input.txt"), b"66\n");
    let meta = entry.join("meta.json");
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&meta).unwrap()).unwrap();
    assert!(
        v.get("copy").is_some(),
        "a fresh record names its copy: {v}"
    );
    v.as_object_mut().unwrap().remove("copy");
    fs::set_permissions(&meta, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&meta, serde_json::to_vec(&v).unwrap()).unwrap();

    let o = run(&s, &["device", "--no-lock", "--devices", "0"]);
    assert_eq!(code(&o), 6, "device served it: {}", show(&o));
    assert_eq!(s.count("logs/device.log"), 0);
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2, "rebuilt: {}", show(&o));
    let o = run(&s, &["cache", "verify"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
}

/// In place, signed: a file swapped and its stamp in the record rewritten to the new
/// file's (the stamps are not signed, so the signature still verifies). The stamps are
/// sealed with this user's secret: the forged ones are not trusted, the file is
/// re-hashed, and the entry rebuilt.
#[test]
fn forged_stamps_in_a_signed_record_are_not_trusted() {
    use std::os::unix::fs::MetadataExt;
    let (private, public) = keypair(12);
    let s = suite(&format!(
        "  verify_key: \"{public}\"\n  sign_key_env: MY_ENTRY_KEY\n"
    ));
    let env = [("MY_ENTRY_KEY", private.as_str())];
    let o = run_env(&s, &["warm"], &env);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let entry = only_entry(&s, "fixture");
    let file = entry.join("out/input.txt");
    swap(&file, b"66\n");
    let st = fs::symlink_metadata(&file).unwrap();
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    let meta = entry.join("meta.json");
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&meta).unwrap()).unwrap();
    for f in v["files"].as_array_mut().unwrap() {
        if f["path"] == "input.txt" {
            f["stamp"] = serde_json::json!({"size": st.len(),
                "mtime_ns": ns(st.mtime(), st.mtime_nsec()),
                "ctime_ns": ns(st.ctime(), st.ctime_nsec()), "ino": st.ino()});
        }
    }
    fs::set_permissions(&meta, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&meta, serde_json::to_vec(&v).unwrap()).unwrap();

    let o = run_env(&s, &["device", "--no-lock", "--devices", "0"], &[]);
    assert_eq!(code(&o), 6, "device served it: {}", show(&o));
    assert_eq!(s.count("logs/device.log"), 0);
    let o = run_env(&s, &["warm"], &env);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2, "rebuilt: {}", show(&o));
}
