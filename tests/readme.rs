//! README.md examples are real: the manifest reference parses and validates, the JSON
//! samples are JSON, and every `scenerun` subcommand it shows exists.

use crate::common::*;

fn blocks(lang: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in readme.lines() {
        match &mut cur {
            None if line.trim_start() == format!("```{lang}") => cur = Some(String::new()),
            Some(text) if line.trim_start() == "```" => {
                out.push(std::mem::take(text));
                cur = None;
            }
            Some(text) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    out
}

/// Manifest examples validate; the only errors allowed are files of the reader's own
/// project that the example names (a missing source or input). Other YAML (workflow
/// snippets) must parse.
#[test]
fn readme_yaml_examples_validate() {
    let yaml = blocks("yaml");
    let manifests: Vec<&String> = yaml
        .iter()
        .filter(|t| t.contains("version: 1") && t.contains("scenes:"))
        .collect();
    assert!(!manifests.is_empty(), "README has a manifest example");
    for text in &yaml {
        serde_yaml::from_str::<serde_yaml::Value>(text)
            .unwrap_or_else(|e| panic!("README YAML does not parse ({e}):\n{text}"));
    }
    // The manifest reference itself must validate with no error at all.
    let mut clean = 0;
    for text in manifests {
        let s = Suite::new();
        // The files the reference names.
        s.write("kernels/add.c", "int main(void) { return 0; }\n");
        std::fs::create_dir_all(s.path("include")).unwrap();
        s.script("gen.sh", "#!/bin/sh\n");
        s.script("golden.sh", "#!/bin/sh\n");
        s.write("data/a/b.json", "{}\n");
        s.write("scenes.yaml", text);
        // `plan` validates everything and runs nothing but identity commands.
        let out = s.cmd(&["plan"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        match out.status.code() {
            Some(0) => clean += 1,
            Some(4) => {
                let problems: Vec<&str> = err
                    .lines()
                    .skip(1)
                    .filter(|l| !(l.contains("not found") || l.contains("matches no file")))
                    .collect();
                assert!(
                    problems.is_empty(),
                    "README example has errors:\n{text}\n{err}"
                );
            }
            // A toolchain the machine lacks (a vendor compiler's identity) is exit 3.
            Some(3) => assert!(err.contains("identity"), "{err}"),
            other => panic!("README example: exit {other:?}\n{text}\n{err}"),
        }
    }
    assert!(clean >= 1, "the manifest reference validates cleanly");
}

#[test]
fn readme_json_samples_parse() {
    let json = blocks("json");
    assert!(
        json.len() >= 2,
        "README documents report.json and plan JSON"
    );
    for text in json {
        serde_json::from_str::<serde_json::Value>(&text)
            .unwrap_or_else(|e| panic!("README JSON sample does not parse ({e}):\n{text}"));
    }
}

#[test]
fn readme_subcommands_exist() {
    for sub in ["warm", "device", "run", "plan", "cache"] {
        let out = scenerun().args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "`scenerun {sub} --help` fails");
    }
    for sub in ["stats", "verify", "prune", "clean"] {
        let out = scenerun().args(["cache", sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "`scenerun cache {sub} --help` fails");
    }
}
