//! Integration tests: the workflows in workflows/ run against the demo.
//!
//! Every file in `workflows/` is loaded and checked for the shape CI relies on (triggers,
//! jobs, steps, every `uses:` pinned to at least a major version, the scene tests through
//! this repository's action with a manifest that exists, no cache key or report path kept
//! in sync by hand). Then each job is run the way a runner would run it
//! (tests/runner.rs), for every combination of its matrix: its steps, and the action's
//! steps behind `uses: ./`, in a fresh copy of `fixtures/` as the workspace, with the
//! stand-in lock tool. It must succeed; the lock tool's log must show exactly one
//! acquisition per job that takes the lock (none without it); the reports must be
//! uploaded; and the shards of a job together must run every demo scene exactly once.
//! One runner temp dir and one cache store are shared by all runs of a workflow, as a
//! runner's disk and GitHub's cache are.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use serde_yaml::{Mapping, Value};

use crate::action::Bench;
use crate::common::*;
use crate::runner::*;

const WORKFLOWS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/workflows");

struct Workflow {
    file: String,
    doc: Value,
}

/// Every `*.yml` / `*.yaml` in workflows/, sorted by name.
fn workflows() -> Vec<Workflow> {
    let mut files: Vec<PathBuf> = fs::read_dir(WORKFLOWS)
        .expect("workflows/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yml" | "yaml")))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let file = p.file_name().unwrap().to_string_lossy().into_owned();
            let text = fs::read_to_string(&p).unwrap();
            let doc: Value = serde_yaml::from_str(&text)
                .unwrap_or_else(|e| panic!("{file}: not valid YAML: {e}"));
            Workflow { file, doc }
        })
        .collect()
}

/// `on:` is the string "on" to a YAML 1.2 parser, but `true` to a YAML 1.1 one.
fn triggers(doc: &Mapping) -> Option<&Value> {
    doc.get("on").or_else(|| doc.get(Value::Bool(true)))
}

fn jobs(wf: &Workflow) -> Vec<(String, &Mapping)> {
    let doc = map(&wf.doc, &wf.file);
    let jobs = map(
        doc.get("jobs")
            .unwrap_or_else(|| panic!("{}: no `jobs:`", wf.file)),
        &format!("{}: jobs", wf.file),
    );
    jobs.iter()
        .map(|(k, v)| (text(k), map(v, &format!("{}: jobs.{}", wf.file, text(k)))))
        .collect()
}

fn steps<'a>(file: &str, job: &str, j: &'a Mapping) -> Vec<&'a Mapping> {
    j.get("steps")
        .and_then(Value::as_sequence)
        .unwrap_or_else(|| panic!("{file}: jobs.{job}: no `steps:` list"))
        .iter()
        .enumerate()
        .map(|(i, s)| map(s, &format!("{file}: jobs.{job}.steps[{i}]")))
        .collect()
}

/// `owner/repo[/path]@ref` with ref a major version (`v4`), a fuller version (`v4.1.7`)
/// or a full commit SHA; `./local` actions and `docker://image:tag` pass too.
pub fn pinned(uses: &str) -> bool {
    if uses.starts_with("./") {
        return true;
    }
    if let Some(image) = uses.strip_prefix("docker://") {
        return image
            .rsplit_once(':')
            .is_some_and(|(_, tag)| tag != "latest")
            || image.contains("@sha256:");
    }
    let Some((action, git_ref)) = uses.split_once('@') else {
        return false;
    };
    let parts: Vec<&str> = action.split('/').collect();
    if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
        return false;
    }
    let sha = git_ref.len() == 40 && git_ref.bytes().all(|b| b.is_ascii_hexdigit());
    let version = git_ref.strip_prefix('v').is_some_and(|v| {
        let nums: Vec<&str> = v.split('.').collect();
        nums.len() <= 3
            && nums
                .iter()
                .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    });
    sha || version
}

/// Every combination of a job's `strategy.matrix` (lists only: include/exclude are not used).
fn matrix_runs(file: &str, job: &str, j: &Mapping) -> Vec<BTreeMap<String, String>> {
    let mut runs = vec![BTreeMap::new()];
    let Some(m) = j
        .get("strategy")
        .and_then(|s| s.get("matrix"))
        .and_then(Value::as_mapping)
    else {
        return runs;
    };
    for (k, v) in m {
        let k = text(k);
        assert!(
            k != "include" && k != "exclude",
            "{file}: jobs.{job}: matrix {k}: not supported by this test (add it)"
        );
        let values = v
            .as_sequence()
            .unwrap_or_else(|| panic!("{file}: jobs.{job}: matrix {k}: expected a list"));
        let mut next = Vec::new();
        for r in &runs {
            for val in values {
                let mut r = r.clone();
                r.insert(k.clone(), text(val));
                next.push(r);
            }
        }
        runs = next;
    }
    runs
}

fn demo_scenes() -> BTreeSet<String> {
    let doc: Value =
        serde_yaml::from_str(&fs::read_to_string(format!("{DEMO}/scenes.yaml")).unwrap()).unwrap();
    doc["scenes"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|s| text(&s["name"]))
        .collect()
}

fn always_if(step: &Mapping) -> bool {
    get_str(step, "if").is_some_and(|c| c.contains("always()") || c.contains("!cancelled()"))
}

/// The step of a job that runs this repository's action.
fn action_step<'a>(f: &str, job: &str, steps: &[&'a Mapping]) -> &'a Mapping {
    let found: Vec<&&Mapping> = steps.iter().filter(|s| uses_of(s) == "./").collect();
    assert_eq!(
        found.len(),
        1,
        "{f}: jobs.{job}: one step runs the scene tests through the action (`uses: ./`)"
    );
    found[0]
}

#[test]
fn every_workflow_has_the_structure_ci_relies_on() {
    let wfs = workflows();
    let names: Vec<&str> = wfs.iter().map(|w| w.file.as_str()).collect();
    for want in ["scene-tests.yml", "scene-tests-sim.yml"] {
        assert!(
            names.contains(&want),
            "workflows/{want} missing; have {names:?}"
        );
    }
    for wf in &wfs {
        let f = &wf.file;
        let doc = map(&wf.doc, f);
        assert!(get_str(doc, "name").is_some(), "{f}: no `name:`");
        let on = triggers(doc).unwrap_or_else(|| panic!("{f}: no `on:` triggers"));
        let on_empty = match on {
            Value::Mapping(m) => m.is_empty(),
            Value::Sequence(s) => s.is_empty(),
            Value::String(s) => s.is_empty(),
            _ => true,
        };
        assert!(!on_empty, "{f}: `on:` names no event");
        // Nothing kept in sync by hand: the action derives the cache key and the report
        // dir from the manifest it is given.
        let raw: String = fs::read_to_string(Path::new(WORKFLOWS).join(f))
            .unwrap()
            .lines()
            .map(|l| l.split(" #").next().unwrap())
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        for by_hand in ["hashFiles(", "SCENE_DIR", "build/scenerun", "cargo install"] {
            assert!(
                !raw.contains(by_hand),
                "{f}: `{by_hand}` (the action does it)"
            );
        }

        for (job, j) in jobs(wf) {
            assert!(j.get("runs-on").is_some(), "{f}: jobs.{job}: no `runs-on:`");
            let steps = steps(f, &job, j);
            assert!(!steps.is_empty(), "{f}: jobs.{job}: no steps");
            assert!(
                action_is(steps[0], "actions/checkout"),
                "{f}: jobs.{job}: the first step must check the repository out"
            );
            for (i, s) in steps.iter().enumerate() {
                let at = format!("{f}: jobs.{job}.steps[{i}]");
                let (uses, run) = (s.get("uses"), s.get("run"));
                assert!(
                    uses.is_some() != run.is_some(),
                    "{at}: a step has exactly one of `uses:` and `run:`"
                );
                if let Some(u) = uses {
                    let u = text(u);
                    assert!(pinned(&u), "{at}: `uses: {u}` is not pinned to a version (owner/repo@vN or a commit SHA)");
                }
            }
            let act = action_step(f, &job, &steps);
            let manifest = with_str(act, "manifest")
                .unwrap_or_else(|| panic!("{f}: jobs.{job}: the action step names no manifest"));
            assert!(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(&manifest)
                    .is_file(),
                "{f}: jobs.{job}: manifest {manifest} does not exist"
            );
            if matrix_runs(f, &job, j).len() > 1 {
                let part = with_str(act, "partition").unwrap_or_default();
                assert!(
                    part.contains("${{ matrix."),
                    "{f}: jobs.{job}: a matrix job gives each run its partition"
                );
                // The default artifact name carries the partition; a given one must differ too.
                if let Some(name) = with_str(act, "artifact-name") {
                    assert!(
                        name.contains("${{ matrix."),
                        "{f}: jobs.{job}: artifact names must differ per matrix run"
                    );
                }
            }
            for s in &steps {
                if action_is(s, "mikepenz/action-junit-report") {
                    assert!(
                        always_if(s),
                        "{f}: jobs.{job}: publish the test report with `if: always()`"
                    );
                }
            }
        }
    }

    // The two workflows this repository promises.
    let lock = wfs.iter().find(|w| w.file == "scene-tests.yml").unwrap();
    let (job, j) = jobs(lock).into_iter().next().unwrap();
    assert!(
        format!("{:?}", j["runs-on"]).contains("self-hosted"),
        "scene-tests.yml: jobs.{job} must run on self-hosted runners (the fleet lock)"
    );
    let shards: Vec<String> = matrix_runs(&lock.file, &job, j)
        .iter()
        .map(|m| m["shard"].clone())
        .collect();
    assert_eq!(
        shards,
        ["1", "2"],
        "scene-tests.yml: matrix.shard must be [1, 2]"
    );
    let act = action_step(&lock.file, &job, &steps(&lock.file, &job, j));
    assert_eq!(
        with_str(act, "partition").as_deref(),
        Some("${{ matrix.shard }}/2"),
        "scene-tests.yml: each shard runs --partition ${{{{ matrix.shard }}}}/2"
    );
    assert_eq!(
        with_str(act, "devices"),
        None,
        "scene-tests.yml takes the lock"
    );

    let sim = wfs
        .iter()
        .find(|w| w.file == "scene-tests-sim.yml")
        .unwrap();
    let (job, j) = jobs(sim).into_iter().next().unwrap();
    assert!(
        !format!("{:?}", j["runs-on"]).contains("self-hosted"),
        "scene-tests-sim.yml: jobs.{job} runs on a GitHub-hosted runner"
    );
    let act = action_step(&sim.file, &job, &steps(&sim.file, &job, j));
    assert_eq!(
        with_str(act, "devices").as_deref(),
        Some("0-15"),
        "scene-tests-sim.yml: runs without the lock on ids 0-15"
    );
}

#[test]
fn pinned_helper() {
    assert!(pinned("actions/checkout@v4"));
    assert!(pinned("actions/cache/restore@v4.2.0"));
    assert!(pinned(
        "mikepenz/action-junit-report@0123456789abcdef0123456789abcdef01234567"
    ));
    assert!(pinned("./"));
    assert!(!pinned("actions/checkout"));
    assert!(!pinned("actions/checkout@main"));
    assert!(!pinned("dtolnay/rust-toolchain@stable"));
    assert!(!pinned("actions/checkout@v"));
}

/// Run one job of `wf` for one matrix combination, in a fresh workspace; the scenes its
/// report says ran.
fn run_job(
    wf: &Workflow,
    job: &str,
    j: &Mapping,
    matrix: BTreeMap<String, String>,
    bench: &Bench,
    run_id: u32,
) -> BTreeSet<String> {
    let f = &wf.file;
    let label = format!("{f}: jobs.{job} {matrix:?}");
    let pool = Pool::new("0-15");
    let mut r = bench.runner(run_id, &pool);
    let mut scope = Scope {
        matrix,
        ..Scope::default()
    };
    for level in [map(&wf.doc, f), j] {
        if let Some(env) = level.get("env").and_then(Value::as_mapping) {
            for (k, v) in env {
                let v = r.subst(&scope, &text(v));
                scope.env.insert(text(k), v);
            }
        }
    }
    let job_steps: Vec<Value> = j["steps"].as_sequence().unwrap().clone();
    r.run_steps(&mut scope, &job_steps, None);
    assert!(r.finish(), "{label}: the job failed: {:#?}", r.events.ran);

    let act = action_step(f, job, &steps(f, job, j));
    let takes_lock = with_str(act, "devices").is_none();
    assert_eq!(
        pool.acquisitions(),
        usize::from(takes_lock),
        "{label}: lock acquisitions"
    );
    assert!(
        fs::read_to_string(r.summary()).is_ok_and(|t| !t.trim().is_empty()),
        "{label}: nothing was appended to $GITHUB_STEP_SUMMARY"
    );
    let id = get_str(act, "id").unwrap_or_else(|| panic!("{label}: the action step has no id"));
    let reports = PathBuf::from(&scope.steps[&id]["report-dir"]);
    assert_eq!(reports, r.workspace.join("fixtures/demo/build/scenerun"));
    let (_, uploaded) = r
        .events
        .uploads
        .first()
        .unwrap_or_else(|| panic!("{label}: no upload"));
    for want in ["report.json", "junit.xml", "logs"] {
        assert!(
            uploaded.contains(&reports.join(want)),
            "{label}: {want} not uploaded"
        );
    }
    for s in steps(f, job, j) {
        if let Some(p) = with_str(s, "report_paths") {
            let p = r.workspace.join(r.subst(&scope, &p));
            assert!(
                p.is_file(),
                "{label}: the test report {} does not exist",
                p.display()
            );
        }
    }
    let report = json_file(&reports.join("report.json"));
    assert_eq!(report["exit_code"], 0, "{label}: report.json: {report:#}");
    let mut scenes = BTreeSet::new();
    for (name, outcome) in outcomes(&report) {
        assert_eq!(outcome, "passed", "{label}: {name}");
        scenes.insert(name);
    }
    scenes
}

#[test]
fn every_workflow_runs_against_the_demo() {
    let all = demo_scenes();
    for wf in workflows() {
        let bench = Bench::new(); // one runner disk and one cache store per workflow
        bench.seed_build();
        let mut run_id = 0;
        for (job, j) in jobs(&wf) {
            let mut seen = BTreeSet::new();
            let mut total = 0;
            for m in matrix_runs(&wf.file, &job, j) {
                run_id += 1;
                let scenes = run_job(&wf, &job, j, m, &bench, run_id);
                total += scenes.len();
                seen.extend(scenes);
            }
            // Shards are disjoint and together run every scene.
            assert_eq!(
                seen, all,
                "{}: jobs.{job}: scenes run over all matrix runs",
                wf.file
            );
            assert_eq!(
                total,
                all.len(),
                "{}: jobs.{job}: a scene ran in two shards",
                wf.file
            );
        }
    }
}
