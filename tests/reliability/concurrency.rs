//! Concurrency (docs/guarantees.md rows 2a–2c): warms racing warms, `cache prune`
//! and `cache verify --fix`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::thread::sleep;
use std::time::{Duration, SystemTime};

use super::*;
use crate::common::*;

/// 8 scenes drawing kernels from a pool of 10 sources and fixtures from 4 variants, so
/// overlapping selections share keys. The compiler wrapper sleeps to widen races.
fn shared_suite() -> Suite {
    let s = Suite::with_logs();
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

/// `n` fixture-only scenes `f0..f{n-1}`, each `./gen.sh {out} <i>` with this script,
/// warmed once.
fn warmed_fixtures(n: usize, gen: &str) -> Suite {
    let s = Suite::with_logs();
    s.script("gen.sh", gen);
    let mut y = String::from("version: 1\ncache:\n  dir: cache\nscenes:\n");
    for i in 0..n {
        y.push_str(&format!(
            "  - name: f{i}\n    fixture:\n      run: \"./gen.sh {{out}} {i}\"\n      inputs: [gen.sh]\n"
        ));
    }
    s.manifest(&y);
    let r = exec(sr(&s, &["warm"]), LIMIT);
    assert!(r.is(0), "first warm: {}", r.desc());
    s
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
    let n = 60;
    let s = warmed_fixtures(n, "#!/bin/sh\necho \"$2\" > \"$1/v.txt\"\n");
    let cache = s.path("cache");

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
        let rec = s.record("warm.json").unwrap_or_default();
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

#[test]
fn concurrency_verify_fix_racing_warm_keeps_what_warm_rebuilt() {
    const T: &str = "concurrency_verify_fix";
    let rounds = pick(8, 40);
    let mut rng = Rng::new(T);
    let mut faults = Faults::new(T);
    let n = 40;
    let s = warmed_fixtures(n, "#!/bin/sh\nyes \"$2\" | head -c 200000 > \"$1/v.bin\"\n");
    let cache = s.path("cache");
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
