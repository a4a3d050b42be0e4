//! Every file scenerun reads back from the cache or the job dir is read with a cap for
//! its kind, never through a link and never blocking on a FIFO: a sparse 1 TiB file
//! planted there costs one `fstat` (the command ends as if the file were damaged), not
//! an allocation of its size (which aborted every command, exit 134).

use std::fs;
use std::path::Path;
use std::time::Instant;

use super::*;

/// A sparse file of 1 TiB at `p` (replacing what is there): no disk used.
pub fn sparse_tib(p: &Path) {
    let _ = fs::remove_file(p);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::File::create(p).unwrap().set_len(1 << 40).unwrap();
}

/// The command's outcome, checked: the expected exit code, no abort, no allocation of
/// the planted size. Returns the seconds it took (reported, not asserted).
fn expect(s: &Suite, what: &str, args: &[&str], want: i32) -> f64 {
    let t = Instant::now();
    let o = run(s, args);
    let secs = t.elapsed().as_secs_f64();
    let err = stderr(&o);
    assert!(
        !err.contains("memory allocation") && code(&o) != 134,
        "{what}: `{}` aborted: {}",
        args.join(" "),
        show(&o)
    );
    assert_eq!(code(&o), want, "{what}: `{}`: {}", args.join(" "), show(&o));
    secs
}

#[test]
fn a_sparse_terabyte_in_any_file_scenerun_keeps_costs_nothing() {
    let s = light_suite();
    warm_fresh(&s);
    let o = run(&s, &["device", "--no-lock", "--devices", "0"]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let mut figures = Vec::new();
    // Files a command reads back: each planted alone, the command run, the file
    // restored (removed: each is rewritten or rebuilt by the next save).
    let kept = [
        ("cache/history.json", vec!["plan"], 0),
        ("cache/history.json", vec!["warm"], 0),
        ("cache/last-prune.json", vec!["warm"], 0),
        ("cache/inputs.json", vec!["explain", "-k", "s0"], 0),
        ("cache/last-warm.json", vec!["cache", "stats"], 0),
        ("build/scenerun/manifest.json", vec!["plan"], 0),
        ("build/scenerun/statmemo.json", vec!["plan"], 0),
        ("build/scenerun/closurememo.json", vec!["plan"], 0),
        ("build/scenerun/warm.json", vec!["plan"], 0),
        ("build/scenerun/warm.json", vec!["explain", "-k", "s0"], 0),
        ("cache/scenerun-cache.json", vec!["plan"], 3),
    ];
    for (rel, args, want) in kept {
        let p = s.path(rel);
        let before = fs::read(&p).ok();
        sparse_tib(&p);
        figures.push((rel, expect(&s, rel, &args, want)));
        let _ = fs::remove_file(&p);
        if let Some(b) = before {
            fs::write(&p, b).unwrap();
        }
    }
    // An entry's record: stale for plan, corrupt for verify, rebuilt by warm.
    let meta = only_entry(&s, "fixture").join("meta.json");
    sparse_tib(&meta);
    figures.push(("meta.json (plan)", expect(&s, "meta.json", &["plan"], 0)));
    figures.push((
        "meta.json (verify)",
        expect(&s, "meta.json", &["cache", "verify"], 1),
    ));
    figures.push(("meta.json (warm)", expect(&s, "meta.json", &["warm"], 0)));
    assert_eq!(
        s.count("logs/gen.log"),
        2,
        "the damaged fixture was rebuilt"
    );
    sparse_tib(&only_entry(&s, "fixture").join("meta.json"));
    figures.push((
        "meta.json (verify --fix)",
        expect(&s, "meta.json", &["cache", "verify", "--fix"], 1),
    ));
    for (what, secs) in figures {
        eprintln!("figure bounded_reads: 1 TiB sparse {what}: {secs:.2} s");
    }
}

#[test]
fn a_damaged_file_scenerun_keeps_is_said_once_per_command_even_under_q() {
    let s = light_suite();
    warm_fresh(&s);
    let memo = s.path("build/scenerun/statmemo.json");
    for args in [&["plan"][..], &["-q", "warm"][..], &["-q", "plan"][..]] {
        let _ = fs::remove_file(&memo);
        // A FIFO: reading it would block; it is refused before it is opened for data.
        let made = std::process::Command::new("mkfifo")
            .arg(&memo)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo {}", memo.display());
        let o = run(&s, args);
        assert_eq!(code(&o), 0, "{args:?}: {}", show(&o));
        let err = stderr(&o);
        let said: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("ignored as damaged"))
            .collect();
        assert_eq!(said.len(), 1, "{args:?}: {err}");
        assert!(said[0].contains("statmemo.json"), "{}", said[0]);
    }
    let _ = fs::remove_file(&memo);
}

#[test]
fn a_report_dir_that_is_a_file_is_exit_3_naming_it_and_its_cause() {
    let s = light_suite();
    warm_fresh(&s);
    s.write("reports", "a file where the report dir goes\n");
    let o = run(
        &s,
        &[
            "device",
            "--no-lock",
            "--devices",
            "0",
            "--report-dir",
            "reports",
        ],
    );
    assert_eq!(code(&o), 3, "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("error: cannot use the report dir"), "{err}");
    assert!(err.contains("\n  caused by: "), "{err}");
}
