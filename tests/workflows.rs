//! Integration tests: the workflows in workflows/ run against the demo.
//!
//! Every file in `workflows/` is loaded and checked for the shape CI relies on (triggers,
//! jobs, steps, every `uses:` pinned to at least a major version, cache restore keys that
//! really are prefixes of the key, reports uploaded also when the job failed). Then each
//! job is run the way a runner would run it, for every combination of its matrix: every
//! `run:` step that calls scenerun, with its `${{ … }}` expressions replaced by test values,
//! in `bash -eo pipefail`, in a fresh copy of `fixtures/` as the workspace, with this
//! build's scenerun first on PATH and the stand-in lock tool from `fixtures/bin`. It must
//! succeed; the lock tool's log must show exactly one acquisition per `scenerun device`
//! (none for `--no-lock`); the paths the workflow uploads and caches must hold the
//! reports and the cache that scenerun really wrote; and the shards of a job together
//! must run every demo scene exactly once. One cache (`runner.temp`) is shared by all
//! runs, as `actions/cache` would restore it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::{Mapping, Value};

use crate::common::*;

const WORKFLOWS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/workflows");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");

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

fn map<'a>(v: &'a Value, what: &str) -> &'a Mapping {
    v.as_mapping()
        .unwrap_or_else(|| panic!("{what}: expected a mapping, got {v:?}"))
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => panic!("expected a scalar, got {other:?}"),
    }
}

fn get_str(m: &Mapping, key: &str) -> Option<String> {
    m.get(key).map(text)
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
fn pinned(uses: &str) -> bool {
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

/// The simple commands of a shell script (split at newlines, `&&`, `||`, `;`, `|`), each
/// as its words with leading keywords and `VAR=value` assignments dropped;
/// `${{ … }}` expressions keep their spaces out, so each stays inside one word.
fn commands(script: &str) -> Vec<Vec<String>> {
    let joined = collapse_expressions(&script.replace("\\\n", " "));
    let mut out = Vec::new();
    for line in joined.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Ok(words) = shell_words::split(line) else {
            continue;
        };
        let mut cur: Vec<String> = Vec::new();
        for w in words.into_iter().chain([";".to_string()]) {
            let separator = matches!(w.as_str(), "&&" | "||" | "|") || w.ends_with(';');
            let w = w.trim_end_matches(';');
            if !w.is_empty() && !matches!(w, "&&" | "||" | "|") {
                let keyword = cur.is_empty()
                    && (matches!(w, "then" | "do" | "else" | "time" | "exec" | "!" | "(")
                        || (w.contains('=') && !w.starts_with('=') && !w.starts_with('-')));
                if !keyword {
                    cur.push(w.to_string());
                }
            }
            if separator && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    out
}

/// `${{ matrix.shard }}` -> `${{matrix.shard}}`.
fn collapse_expressions(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${{") {
        out.push_str(&rest[..i]);
        let Some(j) = rest[i..].find("}}") else { break };
        out.extend(rest[i..i + j].chars().filter(|c| !c.is_whitespace()));
        out.push_str("}}");
        rest = &rest[i + j + 2..];
    }
    out.push_str(rest);
    out
}

fn scenerun_commands(script: &str) -> Vec<Vec<String>> {
    commands(script)
        .into_iter()
        .filter(|c| {
            Path::new(&c[0])
                .file_name()
                .is_some_and(|n| n == "scenerun")
        })
        .collect()
}

/// A scenerun command that takes the fleet lock: `device` or `run`, without `--no-lock`
/// and without a flag that runs nothing.
fn takes_lock(cmd: &[String]) -> bool {
    let sub = cmd
        .iter()
        .skip(1)
        .find(|w| matches!(w.as_str(), "device" | "run" | "warm" | "plan" | "cache"));
    matches!(sub.map(String::as_str), Some("device" | "run"))
        && !cmd
            .iter()
            .any(|w| matches!(w.as_str(), "--no-lock" | "--plan" | "--dry-run"))
}

/// The values a runner would give the expressions, for one run of one job.
#[derive(Clone)]
struct Ctx {
    file: String,
    workspace: PathBuf,
    temp: PathBuf,
    matrix: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
}

impl Ctx {
    fn value(&self, expr: &str) -> String {
        let e = expr.trim();
        // `a == 'x'`, `a && b || c` (GitHub's semantics: the first truthy alternative).
        if e.contains("||") || e.contains("&&") || e.contains("==") {
            return self.logic(e);
        }
        if let Some(lit) = e.strip_prefix('\'').and_then(|l| l.strip_suffix('\'')) {
            return lit.to_string();
        }
        if let Some(k) = e.strip_prefix("matrix.") {
            return self
                .matrix
                .get(k)
                .unwrap_or_else(|| panic!("{}: `${{{{ {e} }}}}`: no matrix key {k}", self.file))
                .clone();
        }
        if let Some(k) = e.strip_prefix("env.") {
            return self
                .env
                .get(k)
                .unwrap_or_else(|| {
                    panic!(
                        "{}: `${{{{ {e} }}}}`: {k} is not set in any env:",
                        self.file
                    )
                })
                .clone();
        }
        if e.starts_with("steps.") && e.contains(".outputs.") {
            return format!("out-{}", e.rsplit('.').next().unwrap());
        }
        if e.starts_with("secrets.") || e.starts_with("vars.") {
            return String::new();
        }
        if e.starts_with("hashFiles(") {
            return "hash0123456789ab".into();
        }
        match e {
            "github.workspace" => self.workspace.display().to_string(),
            "runner.temp" => self.temp.display().to_string(),
            "runner.os" => "Linux".into(),
            "runner.arch" => "X64".into(),
            "github.sha" => "0123456789abcdef0123456789abcdef01234567".into(),
            "github.ref" => "refs/heads/main".into(),
            "github.ref_name" => "main".into(),
            "github.run_id" => "1001".into(),
            "github.run_attempt" => "1".into(),
            "github.repository" => "example/scenerun".into(),
            "github.event_name" => "push".into(),
            _ => panic!(
                "{}: no test value for `${{{{ {e} }}}}` (used where the test needs it): add one to Ctx::value",
                self.file
            ),
        }
    }

    /// The small part of the expression language the workflows use: `||` of `&&` of
    /// operands, an operand being `x == 'lit'` or a value. Falsy is "" or "false".
    fn logic(&self, e: &str) -> String {
        let truthy = |v: &str| !v.is_empty() && v != "false";
        let mut last = String::new();
        for alt in e.split("||") {
            let mut v = String::new();
            for op in alt.split("&&") {
                v = match op.split_once("==") {
                    Some((a, b)) => (self.value(a) == self.value(b)).to_string(),
                    None => self.value(op),
                };
                if !truthy(&v) {
                    break;
                }
            }
            if truthy(&v) {
                return v;
            }
            last = v;
        }
        last
    }

    /// `s` with every `${{ … }}` replaced by its test value.
    fn subst(&self, s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find("${{") {
            out.push_str(&rest[..i]);
            let after = &rest[i + 3..];
            let j = after
                .find("}}")
                .unwrap_or_else(|| panic!("{}: unterminated `${{{{` in {s:?}", self.file));
            out.push_str(&self.value(&after[..j]));
            rest = &after[j + 2..];
        }
        out.push_str(rest);
        out
    }

    /// Merge an `env:` mapping (workflow, job or step level) over the current env.
    fn add_env(&mut self, m: &Mapping, level: &str) {
        if let Some(env) = m.get("env") {
            for (k, v) in map(env, &format!("{}: {level}.env", self.file)) {
                let v = self.subst(&text(v));
                self.env.insert(text(k), v);
            }
        }
    }
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

fn uses_of(step: &Mapping) -> String {
    get_str(step, "uses").unwrap_or_default()
}

fn action_is(step: &Mapping, name: &str) -> bool {
    uses_of(step).split('@').next() == Some(name)
}

fn with_str(step: &Mapping, key: &str) -> Option<String> {
    step.get("with")
        .and_then(Value::as_mapping)
        .and_then(|w| get_str(w, key))
}

fn always_if(step: &Mapping) -> bool {
    get_str(step, "if").is_some_and(|c| c.contains("always()") || c.contains("!cancelled()"))
}

fn lines(s: &str) -> Vec<String> {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
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

        let mut scenerun_steps = 0;
        for (job, j) in jobs(wf) {
            assert!(j.get("runs-on").is_some(), "{f}: jobs.{job}: no `runs-on:`");
            let steps = steps(f, &job, j);
            assert!(!steps.is_empty(), "{f}: jobs.{job}: no steps");
            assert!(
                action_is(steps[0], "actions/checkout"),
                "{f}: jobs.{job}: the first step must check the repository out"
            );
            let mut job_scenerun = 0;
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
                if let Some(r) = run {
                    if let Some(sh) = get_str(s, "shell") {
                        assert_eq!(sh, "bash", "{at}: the test runs scripts with bash only");
                    }
                    job_scenerun += scenerun_commands(&text(r)).len();
                }
            }
            scenerun_steps += job_scenerun;
            if job_scenerun == 0 {
                continue;
            }

            // A job that runs scenerun restores the cache with a fallback, saves it, and
            // uploads the reports also when it failed.
            let restore: Vec<&&Mapping> = steps
                .iter()
                .filter(|s| action_is(s, "actions/cache") || action_is(s, "actions/cache/restore"))
                .collect();
            assert_eq!(
                restore.len(),
                1,
                "{f}: jobs.{job}: one actions/cache(/restore) step"
            );
            assert!(
                with_str(restore[0], "key").is_some(),
                "{f}: jobs.{job}: cache step without `key:`"
            );
            assert!(
                with_str(restore[0], "restore-keys").is_some_and(|k| !lines(&k).is_empty()),
                "{f}: jobs.{job}: cache step without `restore-keys:` (a new commit would start cold)"
            );
            if action_is(restore[0], "actions/cache/restore") {
                let save = steps.iter().find(|s| action_is(s, "actions/cache/save"));
                let save =
                    save.unwrap_or_else(|| panic!("{f}: jobs.{job}: cache restored, never saved"));
                assert_eq!(
                    with_str(save, "path"),
                    with_str(restore[0], "path"),
                    "{f}: jobs.{job}: save another path"
                );
                assert!(
                    get_str(save, "if")
                        .is_some_and(|c| c.contains("!cancelled()") || c.contains("always()")),
                    "{f}: jobs.{job}: save the cache also when a scene failed (`if: !cancelled()`)"
                );
            }
            let upload: Vec<&&Mapping> = steps
                .iter()
                .filter(|s| action_is(s, "actions/upload-artifact"))
                .collect();
            assert_eq!(
                upload.len(),
                1,
                "{f}: jobs.{job}: one actions/upload-artifact step"
            );
            assert!(
                always_if(upload[0]),
                "{f}: jobs.{job}: upload the reports with `if: always()`"
            );
            let paths = with_str(upload[0], "path").unwrap_or_default();
            for want in ["report.json", "junit.xml", "logs"] {
                assert!(
                    paths.contains(&format!("build/scenerun/{want}")),
                    "{f}: jobs.{job}: the artifact does not include build/scenerun/{want}"
                );
            }
            if matrix_runs(f, &job, j).len() > 1 {
                let name = with_str(upload[0], "name").unwrap_or_default();
                assert!(
                    name.contains("${{ matrix."),
                    "{f}: jobs.{job}: artifact names must differ per matrix run"
                );
            }
        }
        assert!(scenerun_steps > 0, "{f}: no step runs scenerun");
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
    let script: String = steps(&lock.file, &job, j)
        .iter()
        .filter_map(|s| get_str(s, "run"))
        .collect();
    let cmds = scenerun_commands(&script);
    for sub in ["warm", "device"] {
        let c = cmds
            .iter()
            .find(|c| c.contains(&sub.to_string()))
            .unwrap_or_else(|| panic!("scene-tests.yml: no `scenerun {sub}`"));
        let at = c.iter().position(|w| w == "--partition");
        assert_eq!(
            at.map(|i| c[i + 1].as_str()),
            Some("${{matrix.shard}}/2"),
            "scene-tests.yml: `scenerun {sub}` must take --partition ${{{{ matrix.shard }}}}/2"
        );
    }
    assert!(script.contains("scenerun warm") && script.contains("&& scenerun device"));

    let sim = wfs
        .iter()
        .find(|w| w.file == "scene-tests-sim.yml")
        .unwrap();
    let (job, j) = jobs(sim).into_iter().next().unwrap();
    assert!(
        !format!("{:?}", j["runs-on"]).contains("self-hosted"),
        "scene-tests-sim.yml: jobs.{job} runs on a GitHub-hosted runner"
    );
    let script: String = steps(&sim.file, &job, j)
        .iter()
        .filter_map(|s| get_str(s, "run"))
        .collect();
    assert!(
        scenerun_commands(&script)
            .iter()
            .any(|c| c[1..] == ["run", "--no-lock", "--devices", "0-15"]),
        "scene-tests-sim.yml: must run `scenerun run --no-lock --devices 0-15`"
    );
}

#[test]
fn pinned_and_commands_helpers() {
    assert!(pinned("actions/checkout@v4"));
    assert!(pinned("actions/cache/restore@v4.2.0"));
    assert!(pinned(
        "mikepenz/action-junit-report@0123456789abcdef0123456789abcdef01234567"
    ));
    assert!(!pinned("actions/checkout"));
    assert!(!pinned("actions/checkout@main"));
    assert!(!pinned("dtolnay/rust-toolchain@stable"));
    assert!(!pinned("actions/checkout@v"));
    let c = commands("FOO=1 scenerun warm --partition ${{ matrix.shard }}/2 && scenerun device\necho \"x && y\" | tee f; then ./target/debug/scenerun run");
    assert_eq!(
        c,
        vec![
            vec!["scenerun", "warm", "--partition", "${{matrix.shard}}/2"],
            vec!["scenerun", "device"],
            vec!["echo", "x && y"],
            vec!["tee", "f"],
            vec!["./target/debug/scenerun", "run"],
        ]
    );
    assert!(takes_lock(&c[1]));
    assert!(!takes_lock(&c[0]));
    assert!(!takes_lock(&[
        "scenerun".into(),
        "run".into(),
        "--no-lock".into()
    ]));
}

/// What one run of one job left behind.
struct JobRun {
    scenes: BTreeSet<String>,
}

fn acquires(log: &Path) -> usize {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("acquire "))
        .count()
}

/// Run one job of `wf` for one matrix combination, in a fresh workspace; `temp` is the
/// runner's temp dir (shared: it holds the scene cache that actions/cache would restore).
fn run_job(
    wf: &Workflow,
    job: &str,
    j: &Mapping,
    matrix: BTreeMap<String, String>,
    temp: &Path,
) -> JobRun {
    let f = &wf.file;
    let label = format!("{f}: jobs.{job} {matrix:?}");
    let ws_tmp = tempfile::tempdir().unwrap();
    let workspace = ws_tmp.path().join("workspace");
    // build/ holds a developer's own cache and reports: not part of a checkout.
    copy_tree(Path::new(FIXTURES), &workspace.join("fixtures"), &["build"]);
    let gh = ws_tmp.path().join("github");
    fs::create_dir_all(&gh).unwrap();
    let lock_log = gh.join("task-submit.log");
    let summary = gh.join("step-summary.md");

    let mut ctx = Ctx {
        file: f.clone(),
        workspace: workspace.clone(),
        temp: temp.to_path_buf(),
        matrix,
        env: BTreeMap::new(),
    };
    ctx.add_env(map(&wf.doc, f), "workflow");
    ctx.add_env(j, &format!("jobs.{job}"));
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_scenerun"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}:{}",
        bin_dir.display(),
        workspace.join("fixtures/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let default_wd = j
        .get("defaults")
        .and_then(|d| d.get("run"))
        .and_then(|r| r.get("working-directory"))
        .map(text);

    // The cache path the workflow saves must be the cache this run's warm wrote: take away
    // the record of the last warm (the cache is shared with earlier runs) and expect it back.
    let restore = steps(f, job, j)
        .into_iter()
        .find(|s| action_is(s, "actions/cache") || action_is(s, "actions/cache/restore"))
        .unwrap_or_else(|| panic!("{label}: no cache step"));
    let cache = PathBuf::from(ctx.subst(&with_str(restore, "path").unwrap()));
    let _ = fs::remove_file(cache.join("last-warm.json"));

    let mut expected_locks = 0;
    let mut warms = 0;
    let mut ran = 0;
    for (i, s) in steps(f, job, j).into_iter().enumerate() {
        let Some(run) = get_str(s, "run") else {
            continue; // a pure `uses:` action: nothing of ours to run
        };
        let cmds = scenerun_commands(&run);
        if cmds.is_empty() {
            continue; // installs, identity probes: the test brings its own scenerun
        }
        let mut sctx = ctx.clone();
        sctx.add_env(s, &format!("jobs.{job}.steps[{i}]"));
        let script = sctx.subst(&run);
        expected_locks += cmds.iter().filter(|c| takes_lock(c)).count();
        warms += cmds
            .iter()
            .filter(|c| c.iter().any(|w| w == "warm" || w == "run"))
            .count();
        let wd = get_str(s, "working-directory").or(default_wd.clone());
        let cwd = wd
            .map(|d| workspace.join(sctx.subst(&d)))
            .unwrap_or(workspace.clone());

        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &script])
            .current_dir(&cwd)
            .env_clear()
            .env("PATH", &path)
            .env(
                "HOME",
                std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()),
            )
            .env("LANG", "C.UTF-8")
            .env("CI", "true")
            .env("NO_COLOR", "1")
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_WORKSPACE", &workspace)
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env("GITHUB_OUTPUT", gh.join("output"))
            .env("GITHUB_ENV", gh.join("env"))
            .env("GITHUB_PATH", gh.join("path"))
            .env("RUNNER_TEMP", temp)
            .env("RUNNER_OS", "Linux")
            .env("TASK_SUBMIT_POOL", gh.join("pool"))
            .env("TASK_SUBMIT_LOG", &lock_log)
            .envs(&sctx.env);
        if let Ok(t) = std::env::var("TMPDIR") {
            cmd.env("TMPDIR", t);
        }
        let out = cmd.output().expect("bash runs");
        assert!(
            out.status.success(),
            "{label}: step {i} failed ({}):\n$ {script}\n--- stdout\n{}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran > 0, "{label}: no step ran scenerun");

    // One `scenerun device` = exactly one lock acquisition; --no-lock takes none.
    assert_eq!(
        acquires(&lock_log),
        expected_locks,
        "{label}: lock acquisitions in {}:\n{}",
        lock_log.display(),
        fs::read_to_string(&lock_log).unwrap_or_default()
    );
    assert!(
        fs::read_to_string(&summary).is_ok_and(|t| !t.trim().is_empty()),
        "{label}: nothing was appended to $GITHUB_STEP_SUMMARY"
    );

    let steps = steps(f, job, j);
    // The artifact uploads what scenerun wrote.
    let upload = steps
        .iter()
        .find(|s| action_is(s, "actions/upload-artifact"))
        .unwrap();
    let mut report = None;
    for p in lines(&with_str(upload, "path").unwrap()) {
        let p = workspace.join(ctx.subst(&p));
        assert!(
            p.exists(),
            "{label}: the artifact path {} does not exist after the run",
            p.display()
        );
        if p.ends_with("report.json") {
            report = Some(p);
        }
    }
    let report: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(report.expect("report.json uploaded")).unwrap())
            .unwrap();
    assert_eq!(report["exit_code"], 0, "{label}: report.json: {report:#}");
    let mut scenes = BTreeSet::new();
    for s in report["scenes"].as_array().unwrap() {
        assert_eq!(s["outcome"], "passed", "{label}: {s:#}");
        scenes.insert(s["name"].as_str().unwrap().to_string());
    }
    if expected_locks > 0 {
        assert!(
            report["lock"]["queue_wait_secs"].is_number(),
            "{label}: no lock timings: {report:#}"
        );
    }

    // The cache the workflow saves is the one scenerun used; its keys fall back by prefix.
    assert!(
        cache.join("scenerun-cache.json").is_file(),
        "{label}: the cached path {} is not a scene cache",
        cache.display()
    );
    if warms > 0 {
        assert!(
            cache.join("last-warm.json").is_file(),
            "{label}: this run's warm did not use the cached path {} (SCENERUN_CACHE_DIR or --cache-dir elsewhere?)",
            cache.display()
        );
    }
    let key = ctx.subst(&with_str(restore, "key").unwrap());
    for rk in lines(&with_str(restore, "restore-keys").unwrap()) {
        let rk = ctx.subst(&rk);
        assert!(
            key.starts_with(&rk),
            "{label}: restore key {rk:?} is not a prefix of the key {key:?}"
        );
    }
    JobRun { scenes }
}

#[test]
fn every_workflow_runs_against_the_demo() {
    let temp = tempfile::tempdir().unwrap(); // runner.temp, shared: one scene cache for all runs
    let all = demo_scenes();
    for wf in workflows() {
        for (job, j) in jobs(&wf) {
            let runs_scenerun = steps(&wf.file, &job, j)
                .iter()
                .any(|s| get_str(s, "run").is_some_and(|r| !scenerun_commands(&r).is_empty()));
            if !runs_scenerun {
                continue;
            }
            let mut seen = BTreeSet::new();
            let mut total = 0;
            for m in matrix_runs(&wf.file, &job, j) {
                let r = run_job(&wf, &job, j, m, temp.path());
                total += r.scenes.len();
                seen.extend(r.scenes);
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
