//! Property: plant any tree of files, directories, symlinks (to victim files and dirs)
//! and FIFOs anywhere in a warmed cache; then warm, prune, verify --fix and clean. No
//! command hangs or panics, each ends 0, 1 or 3, and nothing outside the cache changes.

use std::fs;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;

#[derive(Debug, Clone)]
enum Plant {
    File,
    Dir,
    LinkToVictimDir,
    LinkToVictimFile,
    Fifo,
}

/// Where to plant, relative to the cache: its own dirs, inside a kind, a shard, an
/// entry, an entry's `out`, a lock.
fn spots(cache: &Path) -> Vec<PathBuf> {
    let mut out = vec![
        cache.join("tmp"),
        cache.join("locks"),
        cache.join("entries"),
    ];
    for kind in ["kernel", "fixture", "golden"] {
        out.push(cache.join("entries").join(kind));
    }
    for dir in entry_dirs(cache).values() {
        out.push(dir.parent().unwrap().to_path_buf());
        out.push(dir.clone());
        out.push(dir.join("out"));
    }
    out
}

fn plant(at: &Path, what: &Plant, v: &Victim) {
    let _ = match what {
        Plant::File => fs::write(at, b"planted"),
        Plant::Dir => fs::create_dir_all(at.join("inner")),
        Plant::LinkToVictimDir => std::os::unix::fs::symlink(v.path("deep"), at),
        Plant::LinkToVictimFile => std::os::unix::fs::symlink(v.path("precious.txt"), at),
        // Where the parent is a file (a kernel's `out`), nothing can be planted: skipped.
        Plant::Fifo => std::process::Command::new("mkfifo")
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .map(|_| ()),
    };
}

fn plant_strategy() -> impl Strategy<Value = Vec<(usize, u8, Plant, bool)>> {
    let what = prop_oneof![
        Just(Plant::File),
        Just(Plant::Dir),
        Just(Plant::LinkToVictimDir),
        Just(Plant::LinkToVictimFile),
        Just(Plant::Fifo),
    ];
    // (spot index, name choice, what, replace the spot itself instead of adding inside)
    proptest::collection::vec(
        (0usize..64, 0u8..6, what, proptest::bool::weighted(0.3)),
        1..6,
    )
}

const NAMES: [&str; 6] = [
    "x",
    "meta.json",
    "trash.9.9",
    "fixture.1.1",
    "fixture.1.1.lock",
    "aa",
];

#[test]
fn planted_trees_never_change_anything_outside_the_cache() {
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    // Exit codes seen and plants made, printed as a figure (`--nocapture`).
    let exits = std::cell::RefCell::new(std::collections::BTreeMap::<i32, usize>::new());
    let planted = std::cell::Cell::new(0usize);
    runner
        .run(&plant_strategy(), |plants| {
            let s = light_suite();
            warm_fresh(&s);
            // Old enough for prune to evict what it can.
            let old = std::time::SystemTime::now() - std::time::Duration::from_secs(30 * 86400);
            for dir in entry_dirs(&s.path("cache")).values() {
                let f = fs::File::options()
                    .write(true)
                    .open(dir.join("meta.json"))
                    .unwrap();
                f.set_modified(old).unwrap();
            }
            let v = Victim::new();
            let before = v.snapshot();
            let suite_files: Vec<_> = ["gen.sh", "golden.sh", "kernels/k.c", "scenes.yaml"]
                .iter()
                .map(|f| fs::read(s.path(f)).unwrap())
                .collect();
            let cache = s.path("cache");
            for (spot, name, what, replace) in &plants {
                let spots = spots(&cache);
                let at = &spots[spot % spots.len()];
                let target = if *replace {
                    at.clone()
                } else {
                    at.join(NAMES[*name as usize])
                };
                // Plant (and clear) only inside the cache: an earlier plant may have made
                // a path of the listing lead out through a link, and the test itself must
                // not write or delete there.
                let inside = target
                    .parent()
                    .and_then(|p| p.canonicalize().ok())
                    .is_some_and(|p| p.starts_with(cache.canonicalize().unwrap()));
                if !inside {
                    continue;
                }
                if *replace {
                    let _ = match fs::symlink_metadata(&target) {
                        Ok(m) if m.is_dir() => fs::remove_dir_all(&target),
                        _ => fs::remove_file(&target),
                    };
                }
                if fs::symlink_metadata(&target).is_err() {
                    plant(&target, what, &v);
                    if fs::symlink_metadata(&target).is_ok() {
                        planted.set(planted.get() + 1);
                    }
                }
            }
            for args in [
                &["warm"][..],
                &["cache", "prune", "--max-age", "1d"],
                &["cache", "verify", "--fix"],
                &["warm"],
                &["cache", "clean"],
            ] {
                let o = run(&s, args);
                *exits.borrow_mut().entry(code(&o)).or_default() += 1;
                prop_assert!(
                    matches!(code(&o), 0 | 1 | 3),
                    "{args:?} after {plants:?}: {}",
                    show(&o)
                );
                prop_assert!(!stderr(&o).contains("panicked"), "{}", show(&o));
            }
            prop_assert_eq!(&v.snapshot(), &before, "victim changed after {:?}", plants);
            for (f, old) in ["gen.sh", "golden.sh", "kernels/k.c", "scenes.yaml"]
                .iter()
                .zip(&suite_files)
            {
                prop_assert_eq!(&fs::read(s.path(f)).unwrap(), old, "{} changed", f);
            }
            Ok(())
        })
        .unwrap();
    eprintln!(
        "figure trust_planted: 24 cases, {} things planted, exits {:?}, victim and suite unchanged",
        planted.get(),
        exits.borrow()
    );
}
