//! Files scenerun keeps and later turns into commands — a `scenes_from` generator's
//! output in the cache (`generated/<key>.yaml`), the kept parse of the manifest — are
//! used only when this user's scenerun wrote them: a copy from another project sharing
//! the cache, or a file forged with a valid-looking header, makes the generator run
//! again and never runs a planted command. A link at `generated/` is refused, and its
//! sweep deletes nothing outside the cache.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;

/// A project in `dir` whose generator `gen.sh` prints the scenes in `scenes.txt`, with
/// its cache at `cache` (shared between projects in these tests).
fn project(dir: &Path, cache: &Path, scenes: &str) {
    fs::create_dir_all(dir.join("logs")).unwrap();
    fs::write(dir.join("scenes.txt"), scenes).unwrap();
    let gen = dir.join("gen.sh");
    fs::write(
        &gen,
        "#!/bin/sh\necho run >> logs/gen.log\ncat scenes.txt\n",
    )
    .unwrap();
    fs::set_permissions(&gen, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(
        dir.join("scenes.yaml"),
        format!(
            "version: 1\ncache:\n  dir: {}\nscenes_from:\n  - run: \"./gen.sh\"\n    inputs: [gen.sh, scenes.txt]\n",
            cache.display()
        ),
    )
    .unwrap();
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    let mut c = scenerun_process();
    c.current_dir(dir)
        .arg("--manifest")
        .arg(dir.join("scenes.yaml"))
        .args(args);
    run_bounded(c, Duration::from_secs(120))
}

fn generated(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(cache.join("generated"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    v.sort();
    v
}

const HONEST: &str = "scenes:\n  - name: honest\n    fixture:\n      run: \"echo ok > {out}/a\"\n";

/// Scenes whose fixture leaves `PWNED` in `dir`.
fn evil(dir: &Path) -> String {
    format!(
        "scenes:\n  - name: honest\n    fixture:\n      run: \"touch {}; echo ok > {{out}}/a\"\n",
        dir.join("PWNED").display()
    )
}

#[test]
fn a_generator_output_planted_in_the_cache_never_runs() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("shared-cache");
    let (victim, attacker) = (t.path().join("victim"), t.path().join("attacker"));
    project(&victim, &cache, HONEST);
    let o = run_in(&victim, &["plan"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let [mine] = &generated(&cache)[..] else {
        panic!("one kept output: {:?}", generated(&cache));
    };
    let mine = mine.clone();

    // 1. Another project's `plan`, on the same cache, keeps its own (evil) output; it
    //    is copied over the victim's, as whoever can write the cache could.
    project(&attacker, &cache, &evil(&victim));
    let o = run_in(&attacker, &["plan"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let theirs = generated(&cache)
        .into_iter()
        .find(|p| *p != mine)
        .expect("the attacker's output");
    fs::copy(&theirs, &mine).unwrap();
    let o = run_in(&victim, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(!victim.join("PWNED").exists(), "a copied output ran");
    assert_eq!(
        fs::read_to_string(victim.join("logs/gen.log"))
            .unwrap()
            .lines()
            .count(),
        2,
        "the generator ran again instead"
    );

    // 2. A forged file: the old header (a BLAKE3 of the body, which anyone can compute)
    //    over an evil body.
    let body = evil(&victim);
    let forged = format!(
        "# scenerun scenes_from output {}\n{body}",
        blake3_hex(body.as_bytes())
    );
    fs::write(&mine, &forged).unwrap();
    // The current header, with any seal: the same.
    let text = fs::read_to_string(&theirs).unwrap();
    let header = text.lines().next().unwrap().to_string();
    for planted in [forged, format!("{header}\n{body}")] {
        fs::write(&mine, planted).unwrap();
        let o = run_in(&victim, &["warm"]);
        assert_eq!(code(&o), 0, "{}", show(&o));
        assert!(!victim.join("PWNED").exists(), "a forged output ran");
    }
    assert_eq!(
        fs::read_to_string(victim.join("logs/gen.log"))
            .unwrap()
            .lines()
            .count(),
        4
    );
    // Its own output it still trusts: no run.
    let o = run_in(&victim, &["warm"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(
        fs::read_to_string(victim.join("logs/gen.log"))
            .unwrap()
            .lines()
            .count(),
        4
    );
}

/// BLAKE3 as `b3sum` prints it: anyone can compute it.
fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

#[test]
fn a_link_at_generated_is_refused_and_its_target_untouched() {
    let t = tempfile::tempdir().unwrap();
    let cache = t.path().join("cache");
    let dir = t.path().join("p");
    project(&dir, &cache, HONEST);
    let o = run_in(&dir, &["plan"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    // The victim: old files the sweep would delete, and the place outputs are written.
    let v = Victim::new();
    let old = std::time::SystemTime::now() - Duration::from_secs(400 * 86400);
    for rel in ["precious.txt", "deep/a/b/c.txt"] {
        fs::File::options()
            .write(true)
            .open(v.path(rel))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let before = v.snapshot();
    fs::remove_dir_all(cache.join("generated")).unwrap();
    symlink(v.dir.path(), &cache.join("generated"));
    // A new output is made (the input changed), then the sweep of old ones would run.
    fs::write(dir.join("scenes.txt"), HONEST.replace("honest", "other")).unwrap();
    for args in [&["plan"][..], &["warm"], &["list"]] {
        let o = run_in(&dir, args);
        assert_eq!(code(&o), 3, "{args:?}: {}", show(&o));
        assert!(stderr(&o).contains("symlink"), "{}", show(&o));
    }
    assert_eq!(v.snapshot(), before, "nothing outside the cache changed");
}
