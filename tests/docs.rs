//! The docs are true: every ```sh/```bash and ```yaml example of README.md and docs/
//! runs here, and docs/manifest.md lists every key the loader accepts.
//!
//! Info strings say how an example runs (after the language, space-separated):
//! - ```yaml: a whole manifest, loaded by `scenerun plan` (files of the reader's own
//!   project that it names may be missing; nothing else may be wrong).
//! - ```yaml fragment: part of a manifest; put into a small one (a mapping's keys at the
//!   top level over it, a list as more scenes) and loaded by `scenerun plan`.
//!   ```yaml fragment=scene: keys of one scene, merged into its scene.
//! - ```yaml workflow: GitHub Actions steps: parsed, not run (counted as no-run).
//! - ```sh: run with bash in a scratch copy of fixtures/ (scenerun and the stand-in lock
//!   tool on PATH); `exit=N` the exit code it must end with (default 0); `dir=PATH` where
//!   it runs; `after=warm` / `after=run`: in `dir`, `scenerun warm` / `scenerun run`
//!   first; `output`: the next block (plain text) is exactly what it prints on stdout.
//! - `no-run` (any language): cannot run here (a real card, GitHub, a server, this
//!   repository's own build); counted and printed, never silently skipped.
//!
//! A fence without a language is text (output, a diagram), never a command: a line of it
//! that starts with `$ ` is a transcript and fails this test (make it ```sh).

use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One fenced block: where, its language and attributes, its text.
struct Block {
    at: String,
    lang: String,
    attrs: Vec<String>,
    text: String,
}

impl Block {
    fn has(&self, attr: &str) -> bool {
        self.attrs.iter().any(|a| a == attr)
    }

    fn value(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
    }
}

/// README.md and every page under docs/, as (path relative to the repository, text).
fn pages() -> Vec<(String, String)> {
    let mut names: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    names.sort();
    names.insert(0, "README.md".into());
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(Path::new(ROOT).join(&n)).unwrap();
            (n, text)
        })
        .collect()
}

fn blocks() -> Vec<Block> {
    let mut out = Vec::new();
    for (page, text) in pages() {
        let mut cur: Option<Block> = None;
        for (i, line) in text.lines().enumerate() {
            let fence = line.trim_start().strip_prefix("```");
            match (&mut cur, fence) {
                (None, Some(info)) => {
                    let mut words = info.split_whitespace().map(str::to_string);
                    cur = Some(Block {
                        at: format!("{page}:{}", i + 1),
                        lang: words.next().unwrap_or_default(),
                        attrs: words.collect(),
                        text: String::new(),
                    });
                }
                (Some(_), Some("")) => out.push(cur.take().unwrap()),
                (Some(b), _) => {
                    b.text.push_str(line);
                    b.text.push('\n');
                }
                (None, None) => {}
            }
        }
        assert!(cur.is_none(), "{page}: a fence is never closed");
    }
    out
}

/// What the examples came to, printed at the end.
#[derive(Default)]
struct Tally {
    ran: Vec<String>,
    no_run: Vec<String>,
}

#[test]
fn every_shell_and_yaml_example_in_the_docs_runs() {
    let all = blocks();
    let mut tally = Tally::default();
    let mut failures = Vec::new();
    for (i, b) in all.iter().enumerate() {
        if b.lang.is_empty() {
            if let Some(l) = b.text.lines().find(|l| l.starts_with("$ ")) {
                failures.push(format!(
                    "{}: a transcript in a text block (`{l}`): make it ```sh",
                    b.at
                ));
            }
            continue;
        }
        if !matches!(b.lang.as_str(), "sh" | "bash" | "yaml") {
            continue;
        }
        let unknown: Vec<&String> = b
            .attrs
            .iter()
            .filter(|a| {
                !matches!(a.as_str(), "no-run" | "fragment" | "workflow" | "output")
                    && !["exit=", "dir=", "after=", "fragment="]
                        .iter()
                        .any(|p| a.starts_with(p))
            })
            .collect();
        if !unknown.is_empty() {
            failures.push(format!("{}: unknown attributes {unknown:?}", b.at));
            continue;
        }
        let result = if b.lang == "yaml" && b.has("workflow") {
            // GitHub runs these; here they must at least be YAML.
            tally
                .no_run
                .push(format!("{} (workflow steps, parsed)", b.at));
            serde_yaml::from_str::<serde_yaml::Value>(&b.text)
                .map(|_| ())
                .map_err(|e| format!("does not parse: {e}"))
        } else if b.has("no-run") {
            tally.no_run.push(b.at.clone());
            Ok(())
        } else {
            tally.ran.push(b.at.clone());
            if b.lang == "yaml" {
                load_manifest(b)
            } else {
                // `output`: the next block (plain text) is what it prints.
                let expected = b
                    .has("output")
                    .then(|| all.get(i + 1).map(|n| n.text.as_str()));
                match expected {
                    Some(None) => Err("`output` but no block follows".into()),
                    Some(Some(text)) => run_shell(b, Some(text)),
                    None => run_shell(b, None),
                }
            }
        };
        if let Err(why) = result {
            failures.push(format!("{}: {why}\n{}", b.at, b.text));
        }
    }
    println!(
        "docs examples: {} ran, {} marked no-run",
        tally.ran.len(),
        tally.no_run.len()
    );
    for n in &tally.no_run {
        println!("  no-run: {n}");
    }
    assert!(
        failures.is_empty(),
        "{} doc examples are wrong:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(tally.ran.len() >= 20, "the docs lost their examples");
}

/// The files the manifest examples name in the reader's own project, so that `plan`
/// can check everything else.
fn project(s: &Suite) {
    s.write("kernels/add.c", "int main(void) { return 0; }\n");
    std::fs::create_dir_all(s.path("include")).unwrap();
    for script in ["gen.sh", "golden.sh", "run.sh", "run_on_device.sh"] {
        s.script(script, "#!/bin/sh\n");
    }
    s.write("data/a/b.json", "{}\n");
}

/// A manifest every fragment goes into: its keys replace these.
const BASE: &str = r#"
version: 1
toolchains:
  cc: { compile: "cc -c {source} -o {out}" }
lock:
  submit: "task-submit --device-num {device_count} --run {run}"
lanes:
  npu_l2: { run: "python -m pytest {args}" }
scenes:
  - name: base
    fixture: { run: "./gen.sh {out}", inputs: [gen.sh] }
"#;

fn load_manifest(b: &Block) -> Result<(), String> {
    let text = if b.has("fragment") || b.value("fragment").is_some() {
        let frag: serde_yaml::Value =
            serde_yaml::from_str(&b.text).map_err(|e| format!("does not parse: {e}"))?;
        let mut base: serde_yaml::Mapping = serde_yaml::from_str(BASE).unwrap();
        match frag {
            // `fragment=scene`: keys of a scene, merged into the base scene.
            serde_yaml::Value::Mapping(m) if b.value("fragment") == Some("scene") => base
                .get_mut("scenes")
                .and_then(|v| v.get_mut(0))
                .and_then(|v| v.as_mapping_mut())
                .unwrap()
                .extend(m),
            serde_yaml::Value::Mapping(m) => base.extend(m),
            serde_yaml::Value::Sequence(scenes) => base
                .get_mut("scenes")
                .and_then(|v| v.as_sequence_mut())
                .unwrap()
                .extend(scenes),
            other => return Err(format!("a fragment is a mapping or a list, not {other:?}")),
        }
        serde_yaml::to_string(&base).unwrap()
    } else {
        if !b.text.lines().any(|l| l.starts_with("version:")) {
            return Err("not a whole manifest (no `version:`): mark it ```yaml fragment".into());
        }
        b.text.clone()
    };
    let s = Suite::new();
    project(&s);
    s.write("scenes.yaml", &text);
    // `plan` validates everything and runs nothing but identity commands.
    let out = s.cmd(&["plan"]).output().unwrap();
    let err = stderr(&out);
    match code(&out) {
        0 => Ok(()),
        4 => {
            // Files of the reader's own project are allowed to be missing here.
            let problems: Vec<&str> = err
                .lines()
                .skip(1)
                .filter(|l| !l.contains(" | "))
                .filter(|l| !(l.contains("not found") || l.contains("matches no file")))
                .filter(|l| !l.trim().is_empty())
                .collect();
            if problems.is_empty() {
                Ok(())
            } else {
                Err(format!("`scenerun plan` finds errors:\n{err}"))
            }
        }
        // A vendor compiler this machine lacks (its identity command fails).
        3 if err.contains("identity") => Ok(()),
        c => Err(format!(
            "`scenerun plan` exits {c}:\n{err}\nmanifest:\n{text}"
        )),
    }
}

/// The directory that holds the scenerun binary the tests run.
fn bin_dir() -> PathBuf {
    assert_cmd::cargo::cargo_bin("scenerun")
        .parent()
        .unwrap()
        .to_path_buf()
}

fn run_shell(b: &Block, expected: Option<&str>) -> Result<(), String> {
    let s = Suite::new();
    copy_tree(
        &Path::new(ROOT).join("fixtures"),
        &s.path("fixtures"),
        &["build"],
    );
    std::fs::create_dir_all(s.path("home")).unwrap();
    let path = format!(
        "{}:{}:{}",
        bin_dir().display(),
        s.path("fixtures/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let dir = s.path(b.value("dir").unwrap_or("."));
    let sh = |script: &str| {
        let mut c = std::process::Command::new("bash");
        c.args(["-e", "-o", "pipefail", "-c", script])
            .env_clear()
            .env("PATH", &path)
            .env("HOME", s.path("home"))
            .env("CI", "true")
            .env("NO_COLOR", "1")
            .env("LANG", "C.UTF-8")
            .env("TASK_SUBMIT_POOL", s.path("pool"))
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = c.spawn().map_err(|e| format!("cannot start bash: {e}"))?;
        let limit = Duration::from_secs(300);
        let out = wait_output(child, limit)?;
        Ok::<_, String>(out)
    };
    if let Some(first) = b.value("after") {
        // Its own outcome is not the example's (the demo has a failing scene).
        sh(&format!("scenerun {first} >/dev/null 2>&1 || true"))?;
    }
    let out = sh(&b.text)?;
    let want: i32 = b.value("exit").map_or(0, |n| n.parse().unwrap());
    if code(&out) == want {
        match expected {
            Some(text) if stdout(&out) != text => Err(format!(
                "prints something else than the block after it:\n{}",
                stdout(&out)
            )),
            _ => Ok(()),
        }
    } else {
        Err(format!(
            "exits {} (the docs say {want}):\n{}",
            code(&out),
            show(&out)
        ))
    }
}

/// Wait for `child` and its output, at most `limit` (then it is killed: a hung example
/// fails instead of hanging the suite).
fn wait_output(
    mut child: std::process::Child,
    limit: Duration,
) -> Result<std::process::Output, String> {
    use std::io::Read;
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let Some(status) = wait_bounded(&mut child, limit) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!("still running after {limit:?}: killed"));
    };
    Ok(std::process::Output {
        status,
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    })
}

/// docs/manifest.md's "Every key": a section per kind of mapping the loader checks
/// (`scenerun::manifest::keys()`, read from the loader's own structs), and in it a table
/// row for each key.
#[test]
fn the_manifest_reference_lists_every_key_the_loader_accepts() {
    let page = std::fs::read_to_string(Path::new(ROOT).join("docs/manifest.md")).unwrap();
    let mut missing = Vec::new();
    let mut keys = 0;
    for m in scenerun::manifest::keys() {
        let Some(section) = section(&page, m.path) else {
            missing.push(format!("no section `### {}`", m.path));
            continue;
        };
        for k in m.keys {
            keys += 1;
            if !section
                .lines()
                .any(|l| l.starts_with(&format!("| `{k}` |")))
            {
                missing.push(format!("{}: no row for `{k}`", m.path));
            }
        }
    }
    println!(
        "docs/manifest.md: {keys} keys in {} mappings",
        scenerun::manifest::keys().len()
    );
    assert!(
        missing.is_empty(),
        "docs/manifest.md misses keys:\n{}",
        missing.join("\n")
    );
}

/// The text of the `### ...` section whose heading, backticks removed, is `path`.
fn section<'a>(page: &'a str, path: &str) -> Option<&'a str> {
    let mut start = None;
    let mut offset = 0;
    for line in page.split_inclusive('\n') {
        let heading = line.trim_end().strip_prefix("### ");
        match (start, heading) {
            (None, Some(h)) if h.replace('`', "") == path => start = Some(offset + line.len()),
            (Some(s), _) if line.starts_with("#") => return Some(&page[s..offset]),
            _ => {}
        }
        offset += line.len();
    }
    start.map(|s| &page[s..])
}
