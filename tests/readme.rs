//! README.md examples are real: the manifest reference parses and validates, the JSON
//! samples are JSON, and every `scenerun` subcommand it shows exists.

use crate::common::*;

fn blocks(lang: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
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

#[test]
fn readme_manifest_reference_validates() {
    let yaml = blocks("yaml");
    assert!(!yaml.is_empty(), "README has a yaml example");
    for text in yaml {
        let s = Suite::new();
        // The files the reference names.
        s.write("kernels/add.c", "int main(void) { return 0; }\n");
        std::fs::create_dir_all(s.path("include")).unwrap();
        s.script("gen.sh", "#!/bin/sh\n");
        s.script("golden.sh", "#!/bin/sh\n");
        s.write("data/a/b.json", "{}\n");
        s.write("scenes.yaml", &text);
        // `cc --version` is the identity; `plan` validates everything and runs nothing else.
        let out = s.cmd(&["plan"]).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "README example does not validate:\n{}\n{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn readme_json_samples_parse() {
    let json = blocks("json");
    assert!(json.len() >= 2, "README documents report.json and plan JSON");
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
