//! A small GitHub Actions runner for the tests: it runs a job's steps, and the steps of
//! this repository's composite action (`action.yml`, `uses: ./`), the way a runner does.
//!
//! `run:` steps run for real in `bash --noprofile --norc -eo pipefail` (the runner's
//! `shell: bash`) with the variables a runner sets (GITHUB_ACTIONS, GITHUB_OUTPUT per
//! step, GITHUB_PATH, GITHUB_STEP_SUMMARY, RUNNER_TEMP, GITHUB_ACTION_PATH, ...); their
//! outputs feed `${{ steps.X.outputs.Y }}`, and `if:` conditions are evaluated. The
//! actions of other repositories are stand-ins that act on the file system as the real
//! ones do: actions/cache and actions/cache/restore|save copy the path to and from a
//! store of saved keys (exact key first, then the newest save under each restore-key
//! prefix), upload-artifact checks and records its paths, and the rest are recorded.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::{Mapping, Value};

use crate::common::copy_tree;

pub const REPO: &str = env!("CARGO_MANIFEST_DIR");

pub fn map<'a>(v: &'a Value, what: &str) -> &'a Mapping {
    v.as_mapping()
        .unwrap_or_else(|| panic!("{what}: expected a mapping, got {v:?}"))
}

pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => panic!("expected a scalar, got {other:?}"),
    }
}

pub fn get_str(m: &Mapping, key: &str) -> Option<String> {
    m.get(key).map(text)
}

pub fn with_str(step: &Mapping, key: &str) -> Option<String> {
    step.get("with")
        .and_then(Value::as_mapping)
        .and_then(|w| get_str(w, key))
}

pub fn uses_of(step: &Mapping) -> String {
    get_str(step, "uses").unwrap_or_default()
}

pub fn action_is(step: &Mapping, name: &str) -> bool {
    uses_of(step).split('@').next() == Some(name)
}

pub fn lines(s: &str) -> Vec<String> {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// action.yml, parsed.
pub fn action() -> Value {
    let text = fs::read_to_string(Path::new(REPO).join("action.yml")).expect("action.yml");
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("action.yml: not valid YAML: {e}"))
}

/// Every `${{ … }}` in `s`, its inner text trimmed.
pub fn expressions(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find("${{") {
        let after = &rest[i + 3..];
        let j = after
            .find("}}")
            .unwrap_or_else(|| panic!("unterminated `${{{{` in {s:?}"));
        out.push(after[..j].trim().to_string());
        rest = &after[j + 2..];
    }
    out
}

fn truthy(v: &str) -> bool {
    !v.is_empty() && v != "false" && v != "0"
}

/// The part of the expression language the workflows and the action use: `||` over
/// `&&` over operands; an operand is `!x`, `a == b`, `a != b`, a status function,
/// a 'literal' or a context value that `lookup` gives.
pub fn eval(e: &str, failed: bool, lookup: &dyn Fn(&str) -> String) -> String {
    let e = e.trim();
    if e.contains("||") {
        let mut last = String::new();
        for alt in e.split("||") {
            last = eval(alt, failed, lookup);
            if truthy(&last) {
                return last;
            }
        }
        return last;
    }
    if e.contains("&&") {
        let mut last = String::new();
        for op in e.split("&&") {
            last = eval(op, failed, lookup);
            if !truthy(&last) {
                return last;
            }
        }
        return last;
    }
    if let Some((a, b)) = e.split_once("!=") {
        return (eval(a, failed, lookup) != eval(b, failed, lookup)).to_string();
    }
    if let Some((a, b)) = e.split_once("==") {
        return (eval(a, failed, lookup) == eval(b, failed, lookup)).to_string();
    }
    if let Some(x) = e.strip_prefix('!') {
        return (!truthy(&eval(x, failed, lookup))).to_string();
    }
    if let Some(lit) = e.strip_prefix('\'').and_then(|l| l.strip_suffix('\'')) {
        return lit.to_string();
    }
    match e {
        "always()" | "true" => "true".into(),
        "cancelled()" | "false" => "false".into(),
        "success()" => (!failed).to_string(),
        "failure()" => failed.to_string(),
        _ => lookup(e),
    }
}

/// `s` with every `${{ … }}` replaced by its value.
pub fn subst(s: &str, failed: bool, lookup: &dyn Fn(&str) -> String) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${{") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 3..];
        let j = after.find("}}").unwrap();
        out.push_str(&eval(&after[..j], failed, lookup));
        rest = &after[j + 2..];
    }
    out.push_str(rest);
    out
}

/// `key=value` and `key<<DELIM … DELIM` lines of a GITHUB_OUTPUT file.
pub fn parse_outputs(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut it = text.lines();
    while let Some(line) = it.next() {
        if let Some((k, delim)) = line.split_once("<<") {
            let mut v = Vec::new();
            for l in it.by_ref() {
                if l == delim {
                    break;
                }
                v.push(l);
            }
            out.insert(k.to_string(), v.join("\n"));
        } else if let Some((k, v)) = line.split_once('=') {
            out.insert(k.to_string(), v.to_string());
        }
    }
    out
}

/// What the stand-ins of other repositories' actions saw.
#[derive(Debug, Default, Clone)]
pub struct Events {
    /// (key asked for, key restored if any) of each cache restore.
    pub restores: Vec<(String, Option<String>)>,
    /// Keys saved (a key already in the store is not saved again, as on GitHub).
    pub saves: Vec<String>,
    /// (artifact name, paths that existed) of each upload.
    pub uploads: Vec<(String, Vec<PathBuf>)>,
    /// Steps that ran, as `uses` or `run:<id or name>`, with their exit codes.
    pub ran: Vec<(String, i32)>,
}

/// One job on one runner. `temp` (RUNNER_TEMP) and `store` (the saved caches) may be
/// shared by several jobs, as a runner's temp dir and GitHub's cache are.
pub struct Runner {
    pub workspace: PathBuf,
    pub temp: PathBuf,
    pub store: PathBuf,
    pub github: PathBuf,
    /// Directories added through GITHUB_PATH, newest first, before `base_path`.
    pub path_added: Vec<PathBuf>,
    pub base_path: String,
    /// Variables every step gets (the lock pool, test knobs).
    pub env: BTreeMap<String, String>,
    pub run_id: u32,
    pub events: Events,
    /// Post steps (actions/cache saves) to run when the job ends.
    post: Vec<(PathBuf, String)>,
    failed: bool,
}

/// One scope of step outputs: a job's, or an action's.
#[derive(Default)]
pub struct Scope {
    pub steps: BTreeMap<String, BTreeMap<String, String>>,
    pub inputs: BTreeMap<String, String>,
    pub matrix: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
}

impl Runner {
    pub fn new(workspace: &Path, temp: &Path, store: &Path, base_path: String) -> Runner {
        let github = workspace.parent().unwrap().join("github");
        fs::create_dir_all(&github).unwrap();
        fs::create_dir_all(store).unwrap();
        Runner {
            workspace: workspace.to_path_buf(),
            temp: temp.to_path_buf(),
            store: store.to_path_buf(),
            github,
            path_added: Vec::new(),
            base_path,
            env: BTreeMap::new(),
            run_id: 1001,
            events: Events::default(),
            post: Vec::new(),
            failed: false,
        }
    }

    pub fn summary(&self) -> PathBuf {
        self.github.join("step-summary.md")
    }

    fn lookup(&self, scope: &Scope, e: &str) -> String {
        if let Some(rest) = e.strip_prefix("steps.") {
            let (id, out) = rest
                .split_once(".outputs.")
                .unwrap_or_else(|| panic!("`{e}`: only steps.X.outputs.Y is known"));
            return scope
                .steps
                .get(id)
                .and_then(|o| o.get(out))
                .cloned()
                .unwrap_or_default();
        }
        if let Some(k) = e.strip_prefix("inputs.") {
            return scope
                .inputs
                .get(k)
                .cloned()
                .unwrap_or_else(|| panic!("`{e}`: no input {k}"));
        }
        if let Some(k) = e.strip_prefix("matrix.") {
            return scope
                .matrix
                .get(k)
                .cloned()
                .unwrap_or_else(|| panic!("`{e}`: no matrix key {k}"));
        }
        if let Some(k) = e.strip_prefix("env.") {
            return scope.env.get(k).cloned().unwrap_or_default();
        }
        if e.starts_with("secrets.") || e.starts_with("vars.") {
            return String::new();
        }
        match e {
            "runner.temp" => self.temp.display().to_string(),
            "runner.os" => "Linux".into(),
            "runner.arch" => "X64".into(),
            "github.workspace" => self.workspace.display().to_string(),
            "github.sha" => "0123456789abcdef0123456789abcdef01234567".into(),
            "github.ref" => "refs/heads/main".into(),
            "github.event_name" => "push".into(),
            "github.run_id" => self.run_id.to_string(),
            _ => panic!("no test value for `${{{{ {e} }}}}`: add one to Runner::lookup"),
        }
    }

    pub fn subst(&self, scope: &Scope, s: &str) -> String {
        subst(s, self.failed, &|e| self.lookup(scope, e))
    }

    fn condition(&self, scope: &Scope, step: &Mapping) -> bool {
        let c = get_str(step, "if").unwrap_or_else(|| "success()".into());
        let c = c.trim();
        let c = c
            .strip_prefix("${{")
            .and_then(|c| c.strip_suffix("}}"))
            .unwrap_or(c);
        let uses_status = ["always()", "success()", "failure()", "cancelled()"]
            .iter()
            .any(|f| c.contains(f));
        let v = eval(c, self.failed, &|e| self.lookup(scope, e));
        truthy(&v) && (uses_status || !self.failed)
    }

    fn step_env(&self, scope: &Scope, step: &Mapping) -> BTreeMap<String, String> {
        let mut env = scope.env.clone();
        if let Some(e) = step.get("env").and_then(Value::as_mapping) {
            for (k, v) in e {
                env.insert(text(k), self.subst(scope, &text(v)));
            }
        }
        env
    }

    fn path(&self) -> String {
        let mut parts: Vec<String> = self
            .path_added
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        parts.push(self.base_path.clone());
        parts.join(":")
    }

    /// Run one `run:` step; its outputs, and whether it succeeded.
    fn run_script(
        &mut self,
        label: &str,
        script: &str,
        cwd: &Path,
        env: &BTreeMap<String, String>,
        action_path: Option<&Path>,
    ) -> (BTreeMap<String, String>, i32) {
        let output = self.github.join("output");
        let gh_path = self.github.join("path");
        let _ = fs::remove_file(&output);
        let _ = fs::remove_file(&gh_path);
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-eo", "pipefail", "-c", script])
            .current_dir(cwd)
            .env_clear()
            .env("PATH", self.path())
            .env(
                "HOME",
                std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()),
            )
            .env("LANG", "C.UTF-8")
            .env("CI", "true")
            .env("NO_COLOR", "1")
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_WORKSPACE", &self.workspace)
            .env("GITHUB_STEP_SUMMARY", self.summary())
            .env("GITHUB_OUTPUT", &output)
            .env("GITHUB_ENV", self.github.join("env"))
            .env("GITHUB_PATH", &gh_path)
            .env("GITHUB_RUN_ID", self.run_id.to_string())
            .env("GITHUB_RUN_ATTEMPT", "1")
            .env("RUNNER_TEMP", &self.temp)
            .env("RUNNER_OS", "Linux")
            .env("RUNNER_ARCH", "X64")
            .envs(&self.env)
            .envs(env);
        if let Some(p) = action_path {
            cmd.env("GITHUB_ACTION_PATH", p);
        }
        for k in ["TMPDIR", "CARGO_HOME", "RUSTUP_HOME"] {
            if let Ok(v) = std::env::var(k) {
                cmd.env(k, v);
            }
        }
        let out = cmd.output().expect("bash runs");
        let code = out.status.code().unwrap_or(-1);
        eprintln!(
            "--- {label}: exit {code}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for p in lines(&fs::read_to_string(&gh_path).unwrap_or_default()) {
            self.path_added.insert(0, PathBuf::from(p));
        }
        self.events.ran.push((label.to_string(), code));
        (
            parse_outputs(&fs::read_to_string(&output).unwrap_or_default()),
            code,
        )
    }

    /// The newest saved key equal to `key`, else starting with each prefix in turn.
    fn find_saved(&self, key: &str, prefixes: &[String]) -> Option<String> {
        let mut saved: Vec<(u64, String)> = fs::read_dir(&self.store)
            .unwrap()
            .flatten()
            .map(|e| {
                let k = e.file_name().to_string_lossy().into_owned();
                let order = fs::read_to_string(e.path().join("order"))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                (order, k)
            })
            .collect();
        saved.sort();
        if saved.iter().any(|(_, k)| k == key) {
            return Some(key.to_string());
        }
        prefixes.iter().find_map(|p| {
            saved
                .iter()
                .rev()
                .find(|(_, k)| k.starts_with(p.as_str()))
                .map(|(_, k)| k.clone())
        })
    }

    fn restore(&mut self, path: &Path, key: &str, prefixes: &[String]) -> BTreeMap<String, String> {
        let found = self.find_saved(key, prefixes);
        if let Some(k) = &found {
            let _ = fs::remove_dir_all(path);
            copy_tree(&self.store.join(k).join("data"), path, &[]);
        }
        self.events.restores.push((key.to_string(), found.clone()));
        BTreeMap::from([
            (
                "cache-hit".to_string(),
                (found.as_deref() == Some(key)).to_string(),
            ),
            ("cache-primary-key".to_string(), key.to_string()),
            ("cache-matched-key".to_string(), found.unwrap_or_default()),
        ])
    }

    fn save(&mut self, path: &Path, key: &str) {
        let dest = self.store.join(key);
        if dest.exists() || !path.exists() {
            return;
        }
        let n = fs::read_dir(&self.store).unwrap().count();
        copy_tree(path, &dest.join("data"), &[]);
        fs::write(dest.join("order"), n.to_string()).unwrap();
        self.events.saves.push(key.to_string());
    }

    /// A stand-in for an action of another repository.
    fn foreign(&mut self, scope: &Scope, step: &Mapping) -> BTreeMap<String, String> {
        let given: BTreeMap<String, String> = ["path", "key", "restore-keys", "name"]
            .into_iter()
            .filter_map(|k| with_str(step, k).map(|v| (k.to_string(), self.subst(scope, &v))))
            .collect();
        let with = |k: &str| given.get(k).cloned();
        let name = uses_of(step);
        let action = name.split('@').next().unwrap().to_string();
        self.events.ran.push((name.clone(), 0));
        match action.as_str() {
            "actions/cache" | "actions/cache/restore" => {
                let path = PathBuf::from(with("path").expect("cache: path"));
                let key = with("key").expect("cache: key");
                let prefixes = lines(&with("restore-keys").unwrap_or_default());
                let out = self.restore(&path, &key, &prefixes);
                if action == "actions/cache" && out["cache-hit"] != "true" {
                    self.post.push((path, key));
                }
                out
            }
            "actions/cache/save" => {
                let path = PathBuf::from(with("path").expect("cache/save: path"));
                self.save(&path, &with("key").expect("cache/save: key"));
                BTreeMap::new()
            }
            "actions/upload-artifact" => {
                let paths: Vec<PathBuf> = lines(&with("path").expect("upload: path"))
                    .into_iter()
                    .map(|p| self.workspace.join(p))
                    .filter(|p| p.exists())
                    .collect();
                self.events
                    .uploads
                    .push((with("name").unwrap_or_else(|| "artifact".into()), paths));
                BTreeMap::new()
            }
            _ => BTreeMap::new(), // checkout, setup-python, report publishers: recorded only
        }
    }

    /// Run `steps` in `scope` (a job's steps, or an action's with `action_path`).
    pub fn run_steps(&mut self, scope: &mut Scope, steps: &[Value], action_path: Option<&Path>) {
        for (i, s) in steps.iter().enumerate() {
            let step = map(s, &format!("steps[{i}]"));
            let id = get_str(step, "id");
            let label = id
                .clone()
                .or_else(|| get_str(step, "name"))
                .unwrap_or_else(|| format!("steps[{i}]"));
            if !self.condition(scope, step) {
                self.events.ran.push((format!("skipped:{label}"), 0));
                continue;
            }
            let outputs = if let Some(run) = get_str(step, "run") {
                let script = self.subst(scope, &run);
                let env = self.step_env(scope, step);
                let cwd = get_str(step, "working-directory")
                    .map(|d| self.workspace.join(self.subst(scope, &d)))
                    .unwrap_or_else(|| self.workspace.clone());
                let (out, code) =
                    self.run_script(&format!("run:{label}"), &script, &cwd, &env, action_path);
                if code != 0 {
                    self.failed = true;
                }
                out
            } else if uses_of(step) == "./" {
                let inputs: BTreeMap<String, String> = step
                    .get("with")
                    .and_then(Value::as_mapping)
                    .map(|w| {
                        w.iter()
                            .map(|(k, v)| (text(k), self.subst(scope, &text(v))))
                            .collect()
                    })
                    .unwrap_or_default();
                let env = self.step_env(scope, step);
                self.run_action(inputs, env)
            } else {
                self.foreign(scope, step)
            };
            if let Some(id) = id {
                scope.steps.insert(id, outputs);
            }
        }
    }

    /// Run action.yml with `with` (defaults filled in); its outputs.
    pub fn run_action(
        &mut self,
        with: BTreeMap<String, String>,
        env: BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let doc = action();
        let inputs = map(&doc["inputs"], "action.yml: inputs");
        let mut scope = Scope {
            env,
            ..Scope::default()
        };
        for k in with.keys() {
            assert!(
                inputs.contains_key(k.as_str()),
                "`with: {k}` is not an input of action.yml"
            );
        }
        for (k, spec) in inputs {
            let k = text(k);
            let default = spec.get("default").map(text).unwrap_or_default();
            let v = with.get(&k).cloned().unwrap_or(default);
            scope.inputs.insert(k, v);
        }
        let steps = doc["runs"]["steps"].as_sequence().unwrap().clone();
        self.run_steps(&mut scope, &steps, Some(Path::new(REPO)));
        let mut outputs = BTreeMap::new();
        if let Some(o) = doc["outputs"].as_mapping() {
            for (k, spec) in o {
                let v = self.subst(&scope, &text(&spec["value"]));
                outputs.insert(text(k), v);
            }
        }
        outputs
    }

    /// The job's end: the post steps (actions/cache saves only when the job succeeded,
    /// its `post-if: success()`); whether the job succeeded.
    pub fn finish(&mut self) -> bool {
        for (path, key) in std::mem::take(&mut self.post) {
            if !self.failed {
                self.save(&path, &key);
            }
        }
        !self.failed
    }
}
