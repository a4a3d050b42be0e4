//! README.md and the `docs/` pages are real: the JSON samples are JSON, every `scenerun`
//! subcommand shown exists, and every relative link points at a file of the repository
//! (the shell and YAML examples run in tests/docs.rs).

use crate::common::*;

/// README.md, then every page under docs/, as (path relative to the repository, text).
fn pages() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut names = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(root.join(&n)).unwrap();
            (n, text)
        })
        .collect()
}

fn blocks(lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (_, text) in pages() {
        out.extend(blocks_of(&text, lang));
    }
    out
}

fn blocks_of(page: &str, lang: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in page.lines() {
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
    for sub in [
        "warm",
        "device",
        "run",
        "plan",
        "cache",
        "explain",
        "list",
        "completions",
    ] {
        let out = scenerun().args([sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "`scenerun {sub} --help` fails");
    }
    let out = scenerun()
        .args(["fleet", "simulate", "--help"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`scenerun fleet simulate --help` fails"
    );
    for sub in ["stats", "verify", "prune", "clean"] {
        let out = scenerun().args(["cache", sub, "--help"]).output().unwrap();
        assert!(out.status.success(), "`scenerun cache {sub} --help` fails");
    }
}

/// A subcommand's `--help` lists its own options first; the global ones and the remote
/// cache's (global too) come after, each under a heading of its own.
#[test]
fn a_subcommands_help_shows_its_own_options_first() {
    for sub in ["warm", "device", "run", "plan", "list", "explain"] {
        let out = scenerun().args([sub, "--help"]).output().unwrap();
        let text = stdout(&out);
        let heading = |h: &str| {
            text.lines()
                .position(|l| l == h)
                .unwrap_or_else(|| panic!("`{sub} --help` has no `{h}`:\n{text}"))
        };
        let (own, global, remote) = (
            heading("Options:"),
            heading("Global options:"),
            heading("Remote cache options:"),
        );
        assert!(own < global && global < remote, "`{sub} --help`:\n{text}");
        let section = |from: usize| {
            text.lines()
                .skip(from + 1)
                .take_while(|l| !l.ends_with("options:"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert!(
            !section(own).contains("--remote"),
            "`{sub} --help`:\n{text}"
        );
        assert!(
            !section(own).contains("--manifest"),
            "`{sub} --help`:\n{text}"
        );
        for flag in [
            "--remote ",
            "--remote-write",
            "--no-remote",
            "--remote-required",
        ] {
            assert!(section(remote).contains(flag), "`{sub} --help`:\n{text}");
        }
    }
}

#[test]
fn readme_is_a_short_guide_with_working_links() {
    let all = pages();
    let readme = &all[0].1;
    assert!(
        readme.lines().count() <= 250,
        "README.md is the guide; the reference lives in docs/"
    );
    assert!(
        !blocks_of(readme, "yaml").is_empty(),
        "README shows a manifest"
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, text) in &all {
        let base = root.join(name);
        let base = base.parent().unwrap();
        // Markdown links `](target)`: relative ones must name an existing file.
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].split('#').next().unwrap();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            assert!(
                base.join(target).exists(),
                "{name}: link to {target} points nowhere"
            );
        }
        assert!(
            !text.contains("DESIGN.md"),
            "{name} cites a design file outside the repository"
        );
    }
}
