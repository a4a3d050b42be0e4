//! examples/simpler's manifests, the onboard ones included, planned without simpler, a
//! device or a simulator: against fixtures/simpler-shape (a pytest suite with simpler's
//! command-line options, markers, levels and paths, and none of its code), collected for
//! real by the plugin, once per selection. `plan --format json` must show every
//! selection of upstream's job with its scenes, one lock command, SDMA last on the
//! onboard a2a3 job, and the daily switch widening the main run.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// A copy of the shape suite with examples/simpler's files at its root, as docs/adopting.md
/// says to copy them.
fn shape() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("simpler");
    copy_tree(
        &Path::new(REPO).join("fixtures/simpler-shape"),
        &root,
        &["build", "__pycache__"],
    );
    for e in std::fs::read_dir(Path::new(REPO).join("examples/simpler")).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, root.join(p.file_name().unwrap())).unwrap();
    }
    (dir, root)
}

fn plan(root: &Path, manifest: &str, extra: &[&str]) -> Value {
    let venv = crate::pytest_suite::venv();
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = scenerun()
        .current_dir(root)
        .env("PATH", path)
        .env_remove("PYTHONPATH")
        .env_remove("SCENERUN_PROFILE")
        .args(["--manifest", manifest])
        .args(extra)
        .args(["plan", "--format", "json"])
        .output()
        .unwrap();
    expect_code(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&o)))
}

fn selections(p: &Value) -> Vec<String> {
    p["selections"]
        .as_array()
        .expect("plan json names the selections")
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

/// (selection, scene name, order) of every scene the plan runs on the device.
fn scenes(p: &Value) -> Vec<(String, String, String)> {
    p["device"]["scenes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let word = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            (word("selection"), word("name"), word("order"))
        })
        .collect()
}

/// Every selection of upstream's job, each with scenes, one lock command for all.
fn whole_job(p: &Value, want: &[&str]) {
    assert_eq!(selections(p), want, "the job's pytest commands, in order");
    let scenes = scenes(p);
    for sel in want {
        assert!(
            scenes.iter().any(|(s, _, _)| s == sel),
            "selection {sel} has no scene: {scenes:?}"
        );
    }
    assert!(scenes
        .iter()
        .all(|(s, n, _)| n.starts_with(&format!("{s}/"))));
    let lock = p["device"]["lock_command"]
        .as_str()
        .expect("one lock command");
    assert!(lock.starts_with("task-submit "), "{lock}");
    assert_eq!(lock.matches("task-submit").count(), 1, "{lock}");
}

#[test]
fn the_simulator_jobs_are_one_plan_each() {
    let (_d, root) = shape();
    let p = plan(&root, "scenes.yaml", &[]);
    whole_job(
        &p,
        &[
            "main",
            "dep_gen",
            "dep_gen_hbg",
            "chip_swimlane",
            "pmu",
            "args_dump",
        ],
    );
    // The smokes' classes are manual on the simulator: only their selections run them.
    let scenes = scenes(&p);
    assert!(
        !scenes
            .iter()
            .any(|(s, n, _)| s == "main" && n.contains("dep_gen")),
        "{scenes:?}"
    );
    let p = plan(&root, "scenes-a5sim.yaml", &[]);
    whole_job(
        &p,
        &["main", "dep_gen", "chip_swimlane", "pmu", "args_dump"],
    );
    assert!(scenes_of(&p).iter().all(|n| !n.contains("Hbg")));
}

fn scenes_of(p: &Value) -> Vec<String> {
    scenes(p).into_iter().map(|(_, n, _)| n).collect()
}

#[test]
fn the_onboard_a2a3_job_runs_sdma_last_in_the_same_acquisition() {
    let (_d, root) = shape();
    let p = plan(&root, "scenes-a2a3.yaml", &[]);
    whole_job(
        &p,
        &[
            "main",
            "dep_gen",
            "chip_swimlane",
            "pmu",
            "args_dump",
            "dep_gen_hbg",
            "sdma",
        ],
    );
    let scenes = scenes(&p);
    let sdma: Vec<_> = scenes.iter().filter(|(s, _, _)| s == "sdma").collect();
    assert_eq!(sdma.len(), 1, "{scenes:?}");
    assert!(sdma.iter().all(|(_, _, o)| o == "last"), "{sdma:?}");
    // Nothing else waits for the end, and main leaves SDMA to its own selection.
    assert!(
        scenes
            .iter()
            .filter(|(s, _, _)| s != "sdma")
            .all(|(_, _, o)| o != "last"),
        "{scenes:?}"
    );
    assert!(!scenes
        .iter()
        .any(|(s, n, _)| s == "main" && n.contains("sdma")));
    // On hardware the DFX classes are not manual: the main run has them too, as upstream's.
    assert!(scenes
        .iter()
        .any(|(s, n, _)| s == "main" && n.contains("Test_pmu")));

    let p = plan(&root, "scenes-a5.yaml", &[]);
    whole_job(
        &p,
        &["main", "dep_gen", "chip_swimlane", "pmu", "args_dump"],
    );
}

#[test]
fn the_daily_switch_widens_the_main_run_from_the_same_manifest() {
    let (_d, root) = shape();
    for manifest in ["scenes.yaml", "scenes-a2a3.yaml"] {
        let per_pr = plan(&root, manifest, &[]);
        let daily = plan(&root, manifest, &["--profile", "daily"]);
        assert_eq!(daily["profile"], "daily");
        let main_args = |p: &Value| p["selections"][0]["args"].clone();
        assert!(main_args(&per_pr).to_string().contains("exclude"));
        assert!(main_args(&daily).to_string().contains("include"));
        let manual = |p: &Value| {
            scenes_of(p)
                .iter()
                .any(|n| n == "main/test_manual_function")
        };
        assert!(!manual(&per_pr) && manual(&daily), "{manifest}");
    }
}

/// A `prepare` step is its own selections' scenes' only: the main run's kernel pass
/// (`prepare[].selections: [main]`, one step) is never a step of a smoke's scene, and
/// the DFX smokes share one pass (`kernels_dfx`, one step for five selections) rather
/// than a collection and a cache check each. What is wrong with their inputs is said
/// once per entry that names it, not once per selection.
#[test]
fn a_selections_prepare_step_is_its_own_scenes_and_its_errors_are_said_once() {
    let (_d, root) = shape();
    let p = plan(&root, "scenes.yaml", &[]);
    let selection_of: std::collections::BTreeMap<String, String> =
        scenes(&p).into_iter().map(|(s, n, _)| (n, s)).collect();
    let prepares: Vec<&Value> = p["warm"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "prepare")
        .collect();
    assert_eq!(
        prepares.len(),
        selection_of.len(),
        "one per scene: {prepares:?}"
    );
    let mut keys = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    for st in prepares {
        let scene = st["scene"].as_str().unwrap();
        let want = match selection_of[scene].as_str() {
            "main" => "kernels.main",
            _ => "kernels_dfx",
        };
        assert_eq!(st["name"], want, "{st}");
        keys.entry(want.to_string())
            .or_default()
            .insert(st["key"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(keys.len(), 2, "{keys:?}");
    for (name, k) in &keys {
        assert_eq!(
            k.len(),
            1,
            "{name} is one step (one key) for all its scenes: {k:?}"
        );
    }

    std::fs::remove_file(root.join("pto_isa.pin")).unwrap();
    let o = scenerun()
        .current_dir(&root)
        .args(["plan"])
        .output()
        .unwrap();
    expect_code(&o, 4);
    let err = String::from_utf8_lossy(&o.stderr);
    // Once per prepare entry that names it (two: the main run's and the smokes'), not
    // once per selection (six).
    assert!(err.contains("has 2 errors"), "{err}");
    for at in ["prepare[0].inputs[4]", "prepare[1].inputs[4]"] {
        assert_eq!(
            err.matches(&format!("{at}: input file not found: `pto_isa.pin`"))
                .count(),
            1,
            "{err}"
        );
    }
}

/// `prepare[].selections` names selections under `selections:`: an unknown name is an
/// error at its place, with the names there are (exit 4), never a step for no scene.
#[test]
fn a_prepare_step_for_an_unknown_selection_is_an_error_at_its_place() {
    let (_d, root) = shape();
    let path = root.join("scenes.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let bad = text.replace("selections: [dep_gen, ", "selections: [dep_gne, ");
    assert_ne!(
        bad, text,
        "the manifest names the smokes' prepare selections"
    );
    std::fs::write(&path, bad).unwrap();
    let o = scenerun()
        .current_dir(&root)
        .args(["plan"])
        .output()
        .unwrap();
    expect_code(&o, 4);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("prepare[1].selections: unknown selection `dep_gne` (defined under `selections:`: main, dep_gen,"),
        "{err}"
    );
}
