//! Integration tests: `scenerun fleet simulate` (docs/fleet.md), through the real binary.
//! The simulator's closed-form checks (D/D/1, Erlang C, the seed's figures) are unit
//! tests beside it; here: flags, output, exit codes, determinism.

use serde_json::Value;

use crate::common::*;

fn simulate(args: &[&str]) -> std::process::Output {
    let mut c = scenerun();
    c.args(["fleet", "simulate"]).args(args);
    c.output().expect("run scenerun")
}

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--format", "json"]);
    let o = simulate(&all);
    assert_eq!(code(&o), 0, "{}", show(&o));
    serde_json::from_slice(&o.stdout).expect("json on stdout")
}

#[test]
fn fixed_arrivals_with_a_shorter_fixed_hold_never_wait() {
    let doc = json(&[
        "--cards",
        "1",
        "--jobs",
        "1000",
        "--arrival",
        "fixed:10",
        "--hold",
        "fixed:9",
    ]);
    let g = &doc["flows"]["given"];
    assert_eq!(g["mean_wait_secs"], 0.0, "{doc}");
    assert_eq!(g["p50_wait_secs"], 0.0);
    assert_eq!(g["p95_wait_secs"], 0.0);
    assert_eq!(g["mean_wall_secs"], 9.0);
    assert_eq!(g["device_share"], 1.0);
    assert_eq!(g["makespan_secs"], 999.0 * 10.0 + 9.0);
    assert_eq!(g["jobs"], 1000);
    let u = g["utilization"].as_f64().unwrap();
    assert!((u - 9000.0 / 9999.0).abs() < 1e-9, "{u}");
    assert!(doc["flows"].get("old").is_none() && doc["flows"].get("new").is_none());
    // A hold longer than the interval queues: the same command can show a wait.
    let doc = json(&[
        "--cards",
        "1",
        "--jobs",
        "1000",
        "--arrival",
        "fixed:10",
        "--hold",
        "fixed:11",
    ]);
    assert!(doc["flows"]["given"]["mean_wait_secs"].as_f64().unwrap() > 100.0);
}

#[test]
fn the_same_seed_prints_the_same_bytes() {
    let args = |seed: &'static str| {
        [
            "--cards",
            "4",
            "--jobs",
            "20000",
            "--arrival",
            "poisson:1.5",
            "--hold",
            "exp:2",
            "--cards-per-job",
            "2",
            "--seed",
            seed,
            "--format",
            "json",
        ]
    };
    let a = simulate(&args("7"));
    let b = simulate(&args("7"));
    let c = simulate(&args("8"));
    assert_eq!(code(&a), 0, "{}", show(&a));
    assert_eq!(a.stdout, b.stdout);
    assert_ne!(a.stdout, c.stdout, "another seed, other arrivals");
    let doc: Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(doc["seed"], 7);
    assert_eq!(doc["arrival"], "poisson:1.5");
    assert_eq!(doc["hold"], "exp:2");
    assert_eq!(doc["cards_per_job"], 2);
    for key in [
        "mean_wait_secs",
        "p50_wait_secs",
        "p95_wait_secs",
        "mean_wall_secs",
        "utilization",
        "device_share",
        "makespan_secs",
    ] {
        assert!(doc["flows"]["given"][key].is_f64(), "{key} in {doc}");
    }
}

#[test]
fn the_text_table_names_each_flow_and_figure() {
    let o = simulate(&[
        "--cards",
        "2",
        "--jobs",
        "500",
        "--arrival",
        "poisson:0.5",
        "--hold",
        "exp:3",
    ]);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("fleet: 500 jobs on 2 cards, arrivals poisson:0.5"),
        "{out}"
    );
    for word in [
        "wait mean",
        "p50",
        "p95",
        "wall mean",
        "utilization",
        "device share",
        "makespan",
    ] {
        assert!(out.contains(word), "{word} missing:\n{out}");
    }
    assert!(out.lines().any(|l| l.starts_with("given ")), "{out}");
}

#[test]
fn bad_values_are_usage_errors() {
    let base = ["--cards", "2", "--jobs", "10"];
    for (extra, says) in [
        (
            vec!["--arrival", "poisson:0", "--hold", "exp:1"],
            "--arrival",
        ),
        (
            vec!["--arrival", "uniform:3", "--hold", "exp:1"],
            "poisson:RATE_PER_S or fixed:SECS",
        ),
        (
            vec!["--arrival", "fixed:-1", "--hold", "exp:1"],
            "--arrival",
        ),
        (vec!["--arrival", "fixed:1", "--hold", "exp:0"], "--hold"),
        (
            vec!["--arrival", "fixed:1", "--hold", "normal:3"],
            "exp:MEAN_S or fixed:SECS",
        ),
        (vec!["--arrival", "fixed:1"], "--hold"),
        (
            vec![
                "--arrival",
                "fixed:1",
                "--hold",
                "exp:1",
                "--cards-per-job",
                "3",
            ],
            "could never start",
        ),
        (
            vec![
                "--arrival",
                "fixed:1",
                "--hold",
                "exp:1",
                "--cards-per-job",
                "0",
            ],
            "at least 1",
        ),
        (
            vec!["--arrival", "fixed:1", "--hold", "exp:1", "--compare"],
            "--compare",
        ),
        (
            vec!["--arrival", "fixed:1", "--old-acquisitions", "8"],
            "--from-reports",
        ),
        (
            vec![
                "--arrival",
                "fixed:1",
                "--hold",
                "exp:1",
                "--from-reports",
                ".",
            ],
            "--from-reports",
        ),
        (
            vec!["--arrival", "fixed:1", "--from-reports", "no/such/dir"],
            "no report.json",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(extra.iter());
        let o = simulate(&args);
        assert_eq!(code(&o), 4, "{args:?}: {}", show(&o));
        assert!(
            stderr(&o).contains(says),
            "{args:?} should say {says}: {}",
            show(&o)
        );
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    let o = simulate(&["--cards", "0", "--arrival", "fixed:1", "--hold", "exp:1"]);
    assert_eq!(code(&o), 4, "{}", show(&o));
}

/// The demo suite's smoke scenes, warmed and then run through the stand-in lock tool in
/// a temp copy (`demo/` beside `bin/`, as the demo's lock command expects): a real
/// report dir, warm record, trace and history.
fn demo_run(pool: &Pool) -> Suite {
    let s = Suite::new();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    copy_tree(&repo.join("fixtures/demo"), &s.path("demo"), &["build"]);
    copy_tree(&repo.join("fixtures/bin"), &s.path("bin"), &[]);
    demo_phases(&s, pool);
    assert_eq!(pool.acquisitions(), 1, "{:?}", pool.events());
    s
}

/// `warm` then `device` on the demo copy's smoke scenes.
fn demo_phases(s: &Suite, pool: &Pool) {
    for phase in ["warm", "device"] {
        let mut c = scenerun();
        c.current_dir(s.path("demo"))
            .args(["--manifest", "scenes.yaml", phase, "--tag", "smoke"]);
        pool.apply(&mut c);
        let o = c.output().unwrap();
        assert_eq!(code(&o), 0, "demo {phase}: {}", show(&o));
    }
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `fleet simulate --from-reports DIRS` (its JSON on stdout).
fn shapes_of_output(
    cwd: &std::path::Path,
    dirs: &[&std::path::Path],
    global: &[&str],
) -> std::process::Output {
    let mut c = scenerun();
    c.current_dir(cwd).args(global).args([
        "fleet",
        "simulate",
        "--cards",
        "8",
        "--jobs",
        "10",
        "--arrival",
        "fixed:60",
        "--old-acquisitions",
        "2",
        "--format",
        "json",
        "--from-reports",
    ]);
    c.args(dirs);
    let o = c.output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    o
}

/// Each report dir's shapes, as `fleet simulate --from-reports DIRS` prints them.
fn shapes_of(cwd: &std::path::Path, dirs: &[&std::path::Path], global: &[&str]) -> Vec<Value> {
    let doc: Value = serde_json::from_slice(&shapes_of_output(cwd, dirs, global).stdout).unwrap();
    doc["runs"].as_array().expect("runs").clone()
}

#[test]
fn compare_runs_on_the_demos_real_reports() {
    let pool = Pool::new("0-3");
    let s = demo_run(&pool);
    let reports = s.path("demo/build/scenerun");
    let dir = reports.to_str().unwrap();
    assert!(reports.join("report.json").is_file() && reports.join("warm.json").is_file());
    let sim = |rate: &str, extra: &[&str]| {
        let mut c = scenerun();
        c.current_dir(s.dir()).args([
            "fleet",
            "simulate",
            "--cards",
            "8",
            "--jobs",
            "3000",
            "--arrival",
            rate,
            "--from-reports",
            dir,
            "--old-acquisitions",
            "4",
        ]);
        c.args(extra);
        let o = c.output().unwrap();
        assert_eq!(code(&o), 0, "{}", show(&o));
        o
    };
    // Without --compare: the new flow only, and what each run's shapes are.
    let doc: Value =
        serde_json::from_slice(&sim("poisson:0.01", &["--format", "json"]).stdout).unwrap();
    assert!(doc["flows"].get("old").is_none(), "{doc:#}");
    let run = &doc["runs"][0];
    assert_eq!(run["report_dir"], dir);
    // The demo's widest smoke scene takes 2 ids: the lock granted 2.
    assert_eq!(run["cards"], 2, "{doc:#}");
    assert_eq!(run["old_acquisitions"], 4);
    let (old_held, new_held) = (num(&run["old_held_secs"]), num(&run["new_held_secs"]));
    // Old holds the cards through every kernel build, fixture and golden as well.
    assert!(old_held > new_held && new_held > 0.0, "{run:#}");
    assert!(num(&run["warm_secs"]) > 0.0, "{run:#}");
    assert!(num(&run["device_card_secs"]) > 0.0, "{run:#}");

    // The old flow at an offered load of 0.8 of the 8 cards, both flows on those arrivals.
    let rate = 0.8 * 8.0 / (2.0 * old_held);
    let arrival = format!("poisson:{rate}");
    let doc: Value =
        serde_json::from_slice(&sim(&arrival, &["--compare", "--format", "json"]).stdout).unwrap();
    let (old, new) = (&doc["flows"]["old"], &doc["flows"]["new"]);
    assert_eq!(old["acquisitions"], 4 * 3000, "{doc:#}");
    assert_eq!(new["acquisitions"], 3000);
    assert!((num(&old["utilization"]) - 0.8).abs() < 0.1, "{doc:#}");
    assert!(
        num(&new["utilization"]) < num(&old["utilization"]),
        "{doc:#}"
    );
    assert!(
        num(&old["mean_wait_secs"]) > num(&new["mean_wait_secs"]),
        "{doc:#}"
    );
    assert!(
        num(&old["device_share"]) < num(&new["device_share"]),
        "{doc:#}"
    );
    assert!(num(&new["device_share"]) <= 1.0);
    // The text table shows both flows and the run; the chart draws both.
    let svg = s.path("fleet.svg");
    let text = stdout(&sim(
        &arrival,
        &["--compare", "--svg", svg.to_str().unwrap()],
    ));
    assert!(text.lines().any(|l| l.starts_with("old ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("new ")), "{text}");
    assert!(text.contains(&format!("run {dir}: 2 cards")), "{text}");
    let chart = std::fs::read_to_string(&svg).expect("the chart is written");
    assert!(chart.contains("<svg") && chart.trim_end().ends_with("</svg>"));
    for label in [
        "old: warm inside the lock",
        "new: warm &amp;&amp; device",
        "jobs queued",
        "cards busy",
    ] {
        assert!(chart.contains(label), "{label} missing from the chart");
    }
}

#[test]
fn the_chart_of_given_jobs_has_one_flow_and_a_bad_path_is_an_error() {
    let s = Suite::new();
    let svg = s.path("given.svg");
    let args = [
        "--cards",
        "4",
        "--jobs",
        "2000",
        "--arrival",
        "poisson:1.5",
        "--hold",
        "exp:2",
        "--svg",
    ];
    let mut all = args.to_vec();
    all.push(svg.to_str().unwrap());
    let o = simulate(&all);
    assert_eq!(code(&o), 0, "{}", show(&o));
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(
        chart.lines().any(|l| l.trim() == "given"),
        "the legend names the flow"
    );
    assert!(!chart.contains("warm inside the lock"));
    let mut all = args.to_vec();
    // Missing directories are made; a file in the way is an error.
    s.write("plain-file", "x");
    let missing = s.path("plain-file/given.svg");
    all.push(missing.to_str().unwrap());
    let o = simulate(&all);
    assert_eq!(code(&o), 3, "{}", show(&o));
    assert!(stderr(&o).contains("writing"), "{}", show(&o));
}

#[test]
fn the_old_flow_builds_from_history_when_a_run_warmed_from_the_cache() {
    let pool = Pool::new("0-3");
    let s = demo_run(&pool);
    let reports = s.path("demo/build/scenerun");
    // report.json alone, as CI artifacts often are: the warm record (in the checkout's
    // job dir) and the history (in its cache) are found through the suite's manifest.
    std::fs::create_dir_all(s.path("ci-run")).unwrap();
    std::fs::copy(reports.join("report.json"), s.path("ci-run/report.json")).unwrap();
    // Nothing tells where the copy's manifest is: it says so, and its builds are unknown.
    let mut lost = shapes_of_output(s.dir(), &[&s.path("ci-run")], &[]);
    assert!(stderr(&lost).contains("pass --manifest"), "{}", show(&lost));
    let doc: Value = serde_json::from_slice(&std::mem::take(&mut lost.stdout)).unwrap();
    assert_eq!(doc["runs"][0]["warm_secs"], 0.0, "{doc:#}");
    // From the suite's checkout (--manifest), the copy reads as the original.
    let first = shapes_of(
        s.dir(),
        &[&reports, &s.path("ci-run")],
        &["--manifest", "demo/scenes.yaml"],
    );
    assert_eq!(first.len(), 2);
    assert_eq!(
        first[0]["old_held_secs"], first[1]["old_held_secs"],
        "{first:#?}"
    );
    assert_eq!(first[0]["new_held_secs"], first[1]["new_held_secs"]);
    // Without a trace, the warm time outside the lock is the sum of the builds.
    assert!(num(&first[1]["warm_secs"]) > 0.0, "{first:#?}");

    // A second run warms from the cache: its warm phase is short, but the old flow has
    // no cache and still builds everything in the lock, as long as the history says.
    demo_phases(&s, &pool);
    let record = read_json(&reports.join("warm.json")).unwrap();
    let steps = record["steps"].as_array().unwrap();
    assert!(steps.iter().all(|st| st["outcome"] == "hit"), "{record:#}");
    let second = shapes_of(s.dir(), &[&reports], &[]);
    let warm = |r: &Vec<Value>| num(&r[0]["warm_secs"]);
    assert!(warm(&second) < warm(&first), "{first:#?} {second:#?}");
    let (a, b) = (
        num(&first[0]["old_held_secs"]),
        num(&second[0]["old_held_secs"]),
    );
    assert!((b - a).abs() < 0.5 * a, "old hold {a} s, then {b} s");
}

/// Flags past their documented bounds are usage errors; within them, nothing runs away
/// (a bounded wait) and no figure printed is NaN or infinite.
#[test]
fn flags_past_their_bounds_are_usage_errors_and_no_figure_is_nan_or_inf() {
    let bounded = |args: &[&str]| {
        let mut c = scenerun_process();
        c.args(["fleet", "simulate"]).args(args);
        crate::trust::run_bounded(c, std::time::Duration::from_secs(60))
    };
    let svg = tempfile::tempdir().unwrap();
    let chart = svg.path().join("c.svg");
    let chart = chart.to_str().unwrap();
    let base = ["--cards", "2", "--arrival", "poisson:1"];
    for extra in [
        &["--jobs", "1000000000000", "--hold", "exp:1"][..],
        &["--hold", "fixed:1e308"],
        &["--hold", "fixed:1e308", "--svg", chart],
        &["--hold", "exp:1e300"],
        &["--hold", "exp:1", "--cards-per-job", "4000000000"],
    ] {
        let mut args = base.to_vec();
        args.extend(extra);
        let o = bounded(&args);
        assert_eq!(code(&o), 4, "{args:?}: {}", show(&o));
        assert!(o.stdout.is_empty(), "{args:?}: {}", show(&o));
    }
    for arrival in ["poisson:1e-300", "poisson:1e300", "fixed:1e300"] {
        let o = bounded(&["--cards", "2", "--arrival", arrival, "--hold", "exp:1"]);
        assert_eq!(code(&o), 4, "{arrival}: {}", show(&o));
    }
    // The largest values taken: finite figures, a chart.
    for format in ["text", "json"] {
        let o = bounded(&[
            "--cards",
            "1",
            "--jobs",
            "2000",
            "--arrival",
            "fixed:31536000",
            "--hold",
            "fixed:31536000",
            "--svg",
            chart,
            "--format",
            format,
        ]);
        assert_eq!(code(&o), 0, "{}", show(&o));
        let out = stdout(&o).to_lowercase();
        assert!(
            !out.contains("nan") && !out.contains("inf"),
            "{format}: {out}"
        );
    }
    assert!(std::fs::read_to_string(chart).unwrap().contains("<svg"));
}

/// A report dir whose files are FIFOs, links to `/dev/zero`, sparse terabytes, or hold
/// negative or huge times is a usage error naming the file: never a hang, never an
/// allocation of its size, never a negative makespan.
#[test]
fn hostile_report_dirs_are_usage_errors_never_a_hang() {
    let s = crate::trust::light_suite();
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let o = s
        .cmd(&["device", "--no-lock", "--devices", "0"])
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    // The history would stand in for the report's own times.
    let _ = std::fs::remove_file(s.path("cache/history.json"));
    let report = s.path("build/scenerun");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(report.join("report.json")).unwrap()).unwrap();
    let fifo = |p: &std::path::Path| {
        let _ = std::fs::remove_file(p);
        crate::trust::mkfifo(p);
    };
    let with_duration = |secs: f64| {
        let mut d = doc.clone();
        d["scenes"][0]["duration_secs"] = serde_json::json!(secs);
        move |p: &std::path::Path| std::fs::write(p, serde_json::to_vec(&d).unwrap()).unwrap()
    };
    type Plant = Box<dyn Fn(&std::path::Path)>;
    let cases: Vec<(&str, &str, Plant)> = vec![
        ("report.json", "report.json", Box::new(fifo)),
        ("trace.json", "trace.json", Box::new(fifo)),
        (
            "warm.json",
            "warm.json",
            Box::new(|p: &std::path::Path| {
                let _ = std::fs::remove_file(p);
                std::os::unix::fs::symlink("/dev/zero", p).unwrap();
            }),
        ),
        (
            "report.json",
            "report.json",
            Box::new(crate::trust::bounded::sparse_tib),
        ),
        ("report.json", "-5", Box::new(with_duration(-5.0))),
        ("report.json", "1e308", Box::new(with_duration(1e308))),
    ];
    let mut failures = Vec::new();
    for (i, (file, says, plant)) in cases.into_iter().enumerate() {
        let dir = s.path(&format!("copy{i}"));
        copy_tree(&report, &dir, &["logs", "device", "job"]);
        plant(&dir.join(file));
        let mut c = scenerun_process();
        c.current_dir(s.dir()).args([
            "fleet",
            "simulate",
            "--cards",
            "2",
            "--jobs",
            "10",
            "--arrival",
            "fixed:60",
            "--from-reports",
            dir.to_str().unwrap(),
        ]);
        let o = crate::trust::run_bounded(c, std::time::Duration::from_secs(60));
        if code(&o) != 4 || !stderr(&o).contains(says) || !o.stdout.is_empty() {
            failures.push(format!("{file} ({says}): exit {}: {}", code(&o), show(&o)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}
