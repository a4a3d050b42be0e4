//! Corruption (docs/guarantees.md row 3): damaged entries are found, rebuilt and never
//! served.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::common::*;

/// 5 scenes, each a kernel (real `cc`), a 3-file fixture and a golden; the device step
/// records the checksum of every file it receives, through the lock tool.
fn corruption_suite() -> Suite {
    let s = Suite::with_logs();
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
