//! Each attack from the field report, planted for real: the victim survives byte for
//! byte and nothing planted is served.

use std::fs;

use super::*;

/// `tmp/` and `entries/<kind>/` as symlinks: every command that would sweep, publish or
/// delete there is exit 3 and the victim is untouched.
#[test]
fn a_link_at_the_caches_own_dirs_is_exit_3_and_never_followed() {
    for spot in [
        "tmp",
        "locks",
        "entries",
        "entries/golden",
        "entries/fixture",
    ] {
        let s = light_suite();
        warm_fresh(&s);
        let v = Victim::new();
        let before = v.snapshot();
        let p = s.path(&format!("cache/{spot}"));
        fs::rename(&p, s.path("moved-away")).unwrap();
        symlink(v.dir.path(), &p);
        fs::remove_dir_all(s.path("moved-away")).unwrap();
        for args in [
            &["warm"][..],
            &["plan"],
            &["cache", "clean"],
            &["cache", "prune", "--max-age", "1d"],
            &["cache", "verify", "--fix"],
            &["cache", "stats"],
        ] {
            let o = run(&s, args);
            assert_eq!(code(&o), 3, "{spot}: {args:?}\n{}", show(&o));
            assert!(stderr(&o).contains("a symlink"), "{spot}: {}", show(&o));
        }
        assert_eq!(v.snapshot(), before, "victim changed through cache/{spot}");
        assert!(fs::symlink_metadata(&p).unwrap().file_type().is_symlink());
    }
}

/// A shard or an entry replaced by a link to an outside copy of a real entry: not served
/// (the step runs again), the link removed, its target untouched.
#[test]
fn a_link_at_a_shard_or_entry_is_corruption_rebuilt_and_only_the_link_removed() {
    for level in ["shard", "entry"] {
        let s = light_suite();
        warm_fresh(&s);
        let entry = only_entry(&s, "fixture");
        let v = Victim::new();
        let spot = if level == "shard" {
            entry.parent().unwrap().to_path_buf()
        } else {
            entry.clone()
        };
        // The victim holds a perfect copy: following the link would serve it as a hit.
        copy_tree(&spot, &v.path("copy"), &[]);
        let before = v.snapshot();
        fs::remove_dir_all(&spot).unwrap();
        symlink(&v.path("copy"), &spot);

        let o = run(&s, &["cache", "verify"]);
        assert_eq!(code(&o), 1, "{level}: {}", show(&o));
        assert!(
            stdout(&o).contains("a symlink where a directory belongs"),
            "{}",
            show(&o)
        );

        let o = run(&s, &["warm"]);
        assert_eq!(code(&o), 0, "{level}: {}", show(&o));
        assert_eq!(
            s.count("logs/gen.log"),
            2,
            "{level}: a planted entry was served"
        );
        assert!(!fs::symlink_metadata(&spot)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(v.snapshot(), before, "{level}: victim changed");
        let o = run(&s, &["cache", "verify"]);
        assert_eq!(code(&o), 0, "{level}: {}", show(&o));
    }
}

/// `verify --fix` and `clean` remove a planted link itself, never what it points at.
#[test]
fn verify_fix_and_clean_remove_links_not_targets() {
    for args in [&["cache", "verify", "--fix"][..], &["cache", "clean"]] {
        let s = light_suite();
        warm_fresh(&s);
        let v = Victim::new();
        let before = v.snapshot();
        let kind_dir = s.path("cache/entries/kernel");
        symlink(v.dir.path(), &kind_dir.join("zz"));
        let shard = fs::read_dir(&kind_dir)
            .unwrap()
            .flatten()
            .find(|e| e.file_type().unwrap().is_dir())
            .unwrap()
            .path();
        symlink(&v.path("deep"), &shard.join("0".repeat(64)));
        let o = run(&s, args);
        assert!(matches!(code(&o), 0 | 1), "{args:?}: {}", show(&o));
        assert!(
            fs::symlink_metadata(kind_dir.join("zz")).is_err(),
            "{args:?}"
        );
        assert_eq!(v.snapshot(), before, "{args:?}: victim changed");
    }
}

/// The entry's `out` replaced by a link to outside files of the same sizes.
#[test]
fn out_replaced_by_a_link_is_not_a_hit() {
    let s = light_suite();
    warm_fresh(&s);
    let entry = only_entry(&s, "fixture");
    let v = Victim::new();
    copy_tree(&entry.join("out"), &v.path("fake-out"), &[]);
    fs::write(v.path("fake-out/input.txt"), "66\n").unwrap(); // same size, other bytes
    let before = v.snapshot();
    fs::remove_dir_all(entry.join("out")).unwrap();
    symlink(&v.path("fake-out"), &entry.join("out"));
    let o = run(&s, &["plan"]);
    assert!(stdout(&o).contains("stale"), "{}", show(&o));
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2, "the planted out/ was served");
    assert_eq!(v.snapshot(), before);
    assert_eq!(
        fs::read_to_string(only_entry(&s, "fixture").join("out/input.txt")).unwrap(),
        "20\n"
    );
}

/// Records naming paths outside the entry, and files the record does not list.
#[test]
fn a_record_leaving_out_or_an_extra_file_is_not_a_hit() {
    let bad_paths = [
        "../../../../../../etc/passwd",
        "/etc/passwd",
        "sub/../../meta.json",
    ];
    for (i, bad) in bad_paths.iter().enumerate() {
        let s = light_suite();
        warm_fresh(&s);
        let entry = only_entry(&s, "fixture");
        let meta_path = entry.join("meta.json");
        let mut meta: serde_json::Value =
            serde_json::from_slice(&fs::read(&meta_path).unwrap()).unwrap();
        let size = fs::metadata("/etc/passwd").map(|m| m.len()).unwrap_or(1);
        meta["files"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"path": bad, "size": size, "blake3": "0"}));
        fs::write(&meta_path, serde_json::to_vec(&meta).unwrap()).unwrap();
        let o = run(&s, &["warm"]);
        assert_eq!(code(&o), 0, "{}", show(&o));
        assert_eq!(s.count("logs/gen.log"), 2, "record #{i} `{bad}` was served");
    }
    let s = light_suite();
    warm_fresh(&s);
    let entry = only_entry(&s, "fixture");
    fs::write(entry.join("out/sub/injected.py"), "import os\n").unwrap();
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2, "an injected file was served");
    let fresh = only_entry(&s, "fixture");
    assert!(!fresh.join("out/sub/injected.py").exists());
}

/// `--cache-dir` at a non-empty directory that is not a cache: refused before anything
/// is swept. An empty directory is adopted and gets the marker.
#[test]
fn a_non_empty_dir_without_the_marker_is_not_a_cache() {
    let s = light_suite();
    let v = Victim::new();
    fs::create_dir_all(v.path("tmp/stage-lookalike")).unwrap();
    fs::write(v.path("tmp/stage-lookalike/f"), "x").unwrap();
    let before = v.snapshot();
    let dir = v.dir.path().to_str().unwrap().to_string();
    for args in [
        &["--cache-dir", &dir, "warm"][..],
        &["--cache-dir", &dir, "cache", "clean"],
        &["--cache-dir", &dir, "cache", "prune"],
        &["--cache-dir", &dir, "cache", "verify", "--fix"],
        &["--cache-dir", &dir, "plan"],
    ] {
        let o = run(&s, args);
        assert_eq!(code(&o), 3, "{args:?}: {}", show(&o));
        assert!(
            stderr(&o).contains("is not a scenerun cache"),
            "{}",
            show(&o)
        );
    }
    assert_eq!(v.snapshot(), before);
    assert_eq!(s.count("logs/gen.log"), 0);

    let empty = tempfile::tempdir().unwrap();
    let e = empty.path().to_str().unwrap();
    let o = run(&s, &["--cache-dir", e, "warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let marker = fs::read_to_string(empty.path().join("scenerun-cache.json")).unwrap();
    assert!(marker.contains("\"layout\""), "{marker}");
}

/// A cache dir other users can write to gets a warning (and still works).
#[test]
fn a_cache_writable_by_others_is_warned_about() {
    let s = light_suite();
    warm_fresh(&s);
    let o = run(&s, &["warm"]);
    assert!(!stderr(&o).contains("warning: cache dir"), "{}", show(&o));
    fs::set_permissions(s.path("cache"), fs::Permissions::from_mode(0o777)).unwrap();
    let o = run(&s, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(
        stderr(&o).contains("warning: cache dir") && stderr(&o).contains("all users"),
        "{}",
        show(&o)
    );
}
