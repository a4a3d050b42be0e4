//! The preview: `plan` snapshots, `--dry-run`/`--plan` running nothing, quoted real
//! paths, the lock command and a failing identity command (docs/cli.md).

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;
use crate::common::*;
// The strict (UTF-8) readers, not common's lossy ones.
use super::stdout;

fn filters(s: &Suite) -> Vec<(String, String)> {
    let mut f = Vec::new();
    let canon = s.dir().canonicalize().unwrap().display().to_string();
    let raw = s.dir().display().to_string();
    f.push((re(&canon), "[SUITE]".to_string()));
    if raw != canon {
        f.push((re(&raw), "[SUITE]".to_string()));
    }
    f.push((re(TASK_SUBMIT), "[TASK_SUBMIT]".to_string()));
    f.push((
        re(&scenerun_exe().display().to_string()),
        "[SCENERUN]".to_string(),
    ));
    f.push((
        r"entries/(\w+)/[0-9a-f]{2}/".into(),
        "entries/$1/[KK]/".into(),
    ));
    // Which view of the entries device steps get depends on the machine (root, namespaces).
    f.push((
        r"(entries as device steps see them: ).*".into(),
        "$1[VIEW]".into(),
    ));
    f.push((r"\b[0-9a-f]{64}\b".into(), "[KEY]".into()));
    f.push((r"\b[0-9a-f]{12}\b".into(), "[KEY12]".into()));
    // Right-aligned durations: the padding depends on the digits.
    f.push((r" +\d+\.\d+s\b".into(), " [DUR]".into()));
    f.push((r"\d+\.\d+s\b".into(), "[DUR]".into()));
    f.push((r#"("\w+_secs": )\d+(\.\d+)?"#.into(), "$1[DUR]".into()));
    f
}

/// Name each distinct key `#1`, `#2`, ... in plan order (full and 12-digit forms), so a
/// snapshot shows which steps share a key without depending on the compiler's version.
fn label_keys(text: &str, plan: &Value) -> String {
    let mut out = text.to_string();
    let mut seen: Vec<String> = Vec::new();
    for st in plan["warm"]["steps"].as_array().unwrap() {
        let k = st["key"].as_str().unwrap().to_string();
        if !seen.contains(&k) {
            seen.push(k);
        }
    }
    for (i, k) in seen.iter().enumerate() {
        out = out.replace(k, &format!("#{}", i + 1));
        out = out.replace(&k[..12], &format!("#{:<11}", i + 1));
    }
    out
}

#[test]
fn plan_text_snapshot() {
    let s = basic_suite(2);
    let text = stdout(s.cmd(&["plan"]).assert().success().get_output());
    let text = label_keys(&text, &plan_json(&s, &[]));
    let mut settings = insta::Settings::clone_current();
    for (from, to) in filters(&s) {
        settings.add_filter(&from, to);
    }
    settings.bind(|| insta::assert_snapshot!("plan_text", text));

    // After a warm: every step a hit, with its time from history.
    s.cmd(&["warm"]).assert().success();
    let text = stdout(s.cmd(&["plan"]).assert().success().get_output());
    let text = label_keys(&text, &plan_json(&s, &[]));
    settings.bind(|| insta::assert_snapshot!("plan_text_warm", text));
}

#[test]
fn plan_json_snapshot() {
    let s = basic_suite(2);
    let v = plan_json(&s, &[]);
    assert_eq!(v["schema"], "scenerun-plan");
    assert_eq!(v["version"], 1);
    let v: Value = serde_json::from_str(&label_keys(&v.to_string(), &v)).unwrap();
    let mut settings = insta::Settings::clone_current();
    for (from, to) in filters(&s) {
        settings.add_filter(&from, to);
    }
    settings.bind(|| insta::assert_json_snapshot!("plan_json", v));
}

#[test]
fn plan_and_dry_run_run_nothing() {
    let s = basic_suite(2);
    let submit_log = s.path("task-submit.log");
    let runs: &[&[&str]] = &[
        &["plan"],
        &["plan", "--format", "json"],
        &["warm", "--plan"],
        &["warm", "--plan", "--format", "json"],
        &["warm", "--dry-run"],
        &["device", "--plan"],
        &["device", "--dry-run"],
        &["device", "--plan", "--no-lock", "--devices", "0-3"],
        &["run", "--plan"],
        &["run", "--dry-run"],
        &["run", "--dry-run", "--no-lock"],
    ];
    for args in runs {
        let out = s
            .cmd(args)
            .env("TASK_SUBMIT_LOG", &submit_log)
            .assert()
            .success()
            .get_output()
            .clone();
        assert!(!out.stdout.is_empty(), "{args:?} printed nothing");
    }
    assert_eq!(s.count("logs/cc.log"), 0, "the compiler ran");
    assert_eq!(s.count("logs/gen.log"), 0, "a fixture ran");
    assert_eq!(s.count("logs/golden.log"), 0, "a golden ran");
    assert_eq!(s.count("logs/device.log"), 0, "a device step ran");
    assert!(!submit_log.exists(), "the lock command was called");
    let entries = files_under(&s.path("cache/entries"));
    assert!(entries.is_empty(), "cache entries appeared: {entries:?}");
    for written in [
        "build/scenerun/device",
        "build/scenerun/warm.json",
        "build/scenerun/logs",
        "build/scenerun/job",
    ] {
        assert!(!s.path(written).exists(), "{written} was written");
    }

    // Still nothing after a warm: the previews show hits and run no more.
    s.cmd(&["warm"]).assert().success();
    let (cc, gen) = (s.count("logs/cc.log"), s.count("logs/gen.log"));
    assert!(cc > 0 && gen == 2);
    for args in runs {
        s.cmd(args)
            .env("TASK_SUBMIT_LOG", &submit_log)
            .assert()
            .success();
    }
    assert_eq!((s.count("logs/cc.log"), s.count("logs/gen.log")), (cc, gen));
    assert_eq!(s.count("logs/device.log"), 0);
    assert!(!submit_log.exists());
    let dry = stdout(
        s.cmd(&["warm", "--dry-run"])
            .assert()
            .success()
            .get_output(),
    );
    assert_eq!(dry.matches("# hit: would not run").count(), 6, "{dry}");
}

/// A suite in a directory whose name needs quoting; returns it and its canonical path.
fn odd_dir_suite() -> (Suite, PathBuf) {
    let s = Suite::new();
    let root = s.path("my suite;$(touch pwned)");
    fs::create_dir_all(root.join("kernels")).unwrap();
    fs::write(root.join("kernels/k.c"), "int main(void) { return 0; }\n").unwrap();
    fs::write(
        root.join("scenes.yaml"),
        format!(
            r#"version: 1
cache: {{dir: cache}}
toolchains:
  cc:
    compile: "cc {{source}} -o {{out}} {{flags}}"
lock:
  submit: "{TASK_SUBMIT} --device-num {{device_count}} --run {{run}}"
scenes:
  - name: s0
    kernels:
      - {{name: k, toolchain: cc, source: kernels/k.c, flags: ["-O1"]}}
    fixture:
      run: "./gen.sh {{out}}"
    golden:
      run: "./golden.sh {{fixture}} {{out}}"
    device:
      run: "./device.sh {{kernels}} {{fixture}} {{golden}} {{devices}}"
      devices: 2
"#
        ),
    )
    .unwrap();
    let canon = root.canonicalize().unwrap();
    (s, canon)
}

fn odd_cmd(root: &Path, args: &[&str]) -> std::process::Output {
    scenerun()
        .current_dir(root)
        .arg("--manifest")
        .arg(root.join("scenes.yaml"))
        .args(args)
        .assert()
        .success()
        .get_output()
        .clone()
}

#[test]
fn dry_run_shows_quoted_real_paths_and_run_time_placeholders() {
    let (s, root) = odd_dir_suite();
    let v: Value =
        serde_json::from_slice(&odd_cmd(&root, &["plan", "--format", "json"]).stdout).unwrap();
    let k = keys_of(&v);
    let text = stdout(&odd_cmd(&root, &["run", "--dry-run"]));
    let line = |start: &str| -> Vec<String> {
        let l = text
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no `{start}` line in:\n{text}"));
        shell_words::split(l).unwrap()
    };
    let root_s = root.display().to_string();
    assert!(
        text.contains(&format!("'{root_s}/")),
        "paths are quoted:\n{text}"
    );

    assert_eq!(line("cc "), ["cc", "kernels/k.c", "-o", "<out>", "-O1"]);
    assert_eq!(line("./gen.sh "), ["./gen.sh", "<out>"]);

    let golden = line("./golden.sh ");
    assert_eq!(golden.len(), 3, "{golden:?}");
    let fixture_path = &golden[1];
    assert!(
        fixture_path.starts_with(&format!("{root_s}/cache/")),
        "{fixture_path}"
    );
    assert!(
        fixture_path.contains(&k["fixture/s0/fixture"]),
        "{fixture_path}"
    );
    assert_eq!(golden[2], "<out>");

    let device = line("./device.sh ");
    assert_eq!(device.len(), 5, "{device:?}");
    assert!(
        device[1].starts_with(&root_s) && device[1].ends_with("kernels"),
        "{device:?}"
    );
    assert_eq!(&device[2], fixture_path);
    assert!(
        device[3].starts_with(&format!("{root_s}/cache/")),
        "{device:?}"
    );
    assert!(device[3].contains(&k["golden/s0/golden"]), "{device:?}");
    assert_eq!(device[4], "<devices>");

    let pwned: Vec<PathBuf> = files_under(s.dir())
        .into_iter()
        .filter(|p| p.ends_with("pwned"))
        .collect();
    assert!(pwned.is_empty(), "{pwned:?}");
}

#[test]
fn lock_command_runs_this_binary_inner_once() {
    let (_s, root) = odd_dir_suite();
    let v: Value =
        serde_json::from_slice(&odd_cmd(&root, &["plan", "--format", "json"]).stdout).unwrap();
    let lock = v["device"]["lock_command"].as_str().unwrap().to_string();
    let words = shell_words::split(&lock).unwrap();
    assert_eq!(words[0], TASK_SUBMIT);
    assert_eq!(
        words[1..3],
        ["--device-num", "2"],
        "{{device_count}} is the largest `devices`"
    );
    assert_eq!(words[3], "--run");
    assert_eq!(words.len(), 5, "{{run}} is one word: {words:?}");
    let inner = shell_words::split(&words[4]).unwrap();
    assert_eq!(inner.len(), 4, "{inner:?}");
    assert_eq!(
        inner[0], "exec",
        "the inner run replaces the lock tool's shell: a forwarded signal reaches it"
    );
    assert_eq!(
        PathBuf::from(&inner[1]),
        scenerun_exe(),
        "the absolute path of this binary"
    );
    assert_eq!(inner[2], "inner");
    assert!(
        Path::new(&inner[3]).starts_with(root.join("build/scenerun")),
        "the frozen plan in the job dir: {inner:?}"
    );

    let text = stdout(&odd_cmd(&root, &["device", "--plan"]));
    assert!(
        text.contains(&format!("lock command (called once):\n  {lock}\n")),
        "{text}"
    );
    let dry = stdout(&odd_cmd(&root, &["device", "--dry-run"]));
    assert!(dry.lines().any(|l| l == lock), "{dry}");
}

#[test]
fn failing_identity_command_is_an_infrastructure_error() {
    let s = basic_suite(1);
    edit_manifest(
        &s,
        "identity: \"cc --version\"",
        "identity: \"echo broken; exit 3\"",
    );
    for (name, args) in [
        ("error_identity_plan", &["plan"][..]),
        ("error_identity_warm", &["warm"]),
        ("error_identity_warm_dry_run", &["warm", "--dry-run"]),
        ("error_identity_device_plan", &["device", "--plan"]),
    ] {
        // Whole: exit 3, the toolchain, its identity command and what it printed.
        let o = s.cmd(args).output().unwrap();
        crate::snapshots::assert_output(name, &o, s.dir());
    }
    assert_eq!(s.count("logs/cc.log"), 0);
    assert_eq!(s.count("logs/gen.log"), 0);
    // A selection without kernels needs no identity.
    edit_manifest(&s, "    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/k.c\n        include_dirs: [include]\n        flags: [\"-O1\"]\n", "");
    edit_manifest(&s, "{kernels} ", "");
    s.cmd(&["plan"]).assert().success();
}

#[test]
fn previews_honour_no_lock_devices() {
    // basic_suite has a lock section; with --no-lock the preview must not show its command
    // and must pack on the ids --devices gives (one here), as the real --no-lock run does.
    let s = basic_suite(2);
    let o = s.cmd(&["plan"]).output().unwrap();
    crate::snapshots::assert_output("plan_locked", &o, s.dir());
    let o = s
        .cmd(&["plan", "--no-lock", "--devices", "0"])
        .output()
        .unwrap();
    crate::snapshots::assert_output("plan_no_lock", &o, s.dir());

    let v = plan_json(&s, &["--no-lock", "--devices", "3,5"]);
    assert_eq!(v["device"]["device_count"], 2);
    assert!(v["device"]["lock_command"].is_null(), "{v}");
    assert_eq!(
        v["device"]["no_lock_devices"],
        serde_json::json!(["3", "5"])
    );

    for args in [
        &["device", "--dry-run", "--no-lock"][..],
        &["run", "--plan", "--no-lock", "--devices", "0"][..],
    ] {
        let out = stdout(s.cmd(args).assert().success().get_output());
        assert!(
            !out.contains(TASK_SUBMIT),
            "{args:?} shows the lock command:\n{out}"
        );
    }
    // -j 0 and a bad id list are usage errors.
    s.cmd(&["-j", "0", "plan"]).assert().code(4);
    s.cmd(&["plan", "--no-lock", "--devices", "0-x"])
        .assert()
        .code(4);
}
