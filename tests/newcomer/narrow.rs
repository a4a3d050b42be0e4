//! On a narrow terminal warm's progress line fits its width: run in a real pty (util-linux
//! `script`) set to 40 columns, every progress line drawn is at most 40 columns wide. The
//! pty has no row count (as one made without a size, e.g. by `docker exec -t`): indicatif
//! then takes the width for 80, so scenerun fits the line itself.

use std::path::Path;

use super::*;

/// The visible lines a terminal was sent: escape sequences removed, split at `\r`/`\n`.
fn drawn_lines(raw: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(raw);
    let mut out = Vec::new();
    let mut line = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                // CSI: ESC [ params final-byte
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for d in chars.by_ref() {
                        if d.is_ascii_alphabetic() {
                            break;
                        }
                    }
                }
            }
            '\r' | '\n' => out.push(std::mem::take(&mut line)),
            c => line.push(c),
        }
    }
    out.push(line);
    out.into_iter().filter(|l| !l.trim().is_empty()).collect()
}

#[test]
fn warms_bar_fits_a_40_column_terminal() {
    if !Path::new("/usr/bin/script").exists() {
        eprintln!("SKIPPED: needs util-linux `script` for a pty");
        return;
    }
    let s = Suite::new();
    let mut yaml = String::from("version: 1\nscenes:\n");
    for i in 0..6 {
        yaml.push_str(&format!(
            "  - name: a_rather_long_scene_name_{i}\n    fixture: {{ run: \"sleep 0.3; echo {i} > {{out}}/f\" }}\n    device: {{ run: \"true\" }}\n"
        ));
    }
    s.manifest(&yaml);
    let bin = assert_cmd::cargo::cargo_bin("scenerun");
    let inner = format!(
        "stty cols 40; {} --manifest {} -j 2 warm",
        bin.display(),
        s.path("scenes.yaml").display()
    );
    let o = std::process::Command::new("/usr/bin/script")
        .args(["-qfec", &inner, "/dev/null"])
        .current_dir(s.dir())
        .env_remove("CI")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let lines = drawn_lines(&o.stdout);
    // The progress lines (redrawn in place); the summary after them is text that wraps.
    let bars: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("warm ") && !l.starts_with("warm records"))
        .collect();
    assert!(!bars.is_empty(), "a progress line was drawn: {lines:#?}");
    for l in &bars {
        assert!(
            l.chars().count() <= 40,
            "{} columns on a 40-column terminal: {l:?}",
            l.chars().count()
        );
    }
}
