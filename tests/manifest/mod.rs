//! Integration tests: manifest validation (docs/manifest.md). Every rule is checked through
//! the real binary: exit 4, the exact number of errors (so nothing else slipped in), and
//! an error line that names the file, the line and the key path.
//!
//! This file holds the valid base manifest and the checks the topic modules share.

mod fields;
mod paths;
mod values;

use crate::common::*;

/// A valid manifest: one scene with every kind of step.
const BASE: &str = r#"version: 1
platform: a2a3
cache:
  dir: cache
toolchains:
  cc:
    compile: "cc -c {source} -o {out} {includes} {flags}"
    identity: "cc --version"
scenes:
  - name: alpha
    tags: [smoke]
    kernels:
      - name: k
        toolchain: cc
        source: kernels/k.c
        include_dirs: [include]
        flags: ["-O1"]
    fixture:
      run: "./gen.sh {out}"
      inputs: [gen.sh, "data/*.json"]
    golden:
      run: "./golden.sh {fixture} {out}"
      inputs: [golden.sh]
    device:
      run: "./device.sh {kernels} {fixture} {golden} {devices}"
"#;

/// The files BASE names.
fn suite() -> Suite {
    let s = Suite::new();
    s.write(
        "kernels/k.c",
        "#include \"k.h\"\nint k(void) { return K; }\n",
    );
    s.write("include/k.h", "#define K 1\n");
    s.write("data/a.json", "{}\n");
    s.script("gen.sh", "#!/bin/sh\necho 1 > \"$1/in.txt\"\n");
    s.script("golden.sh", "#!/bin/sh\ncp \"$1/in.txt\" \"$2/out.txt\"\n");
    s.script("device.sh", "#!/bin/sh\nexit 0\n");
    s
}

/// `suite()` with BASE edited by `edit` (which must change it).
fn suite_with(edit: impl FnOnce(&str) -> String) -> (Suite, String) {
    let s = suite();
    let yaml = edit(BASE);
    assert_ne!(yaml, BASE, "the edit must change the manifest");
    s.manifest(&yaml);
    (s, yaml)
}

/// Replace `from` (which must occur) in BASE.
fn replaced(from: &str, to: &str) -> (Suite, String) {
    suite_with(|b| {
        assert!(b.contains(from), "BASE has no `{from}`");
        b.replacen(from, to, 1)
    })
}

/// The 1-based line of the `nth` (0-based) line containing `needle`.
fn line_of_nth(yaml: &str, needle: &str, nth: usize) -> usize {
    yaml.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(needle))
        .nth(nth)
        .unwrap_or_else(|| panic!("no line {nth} with `{needle}` in:\n{yaml}"))
        .0
        + 1
}

fn line_of(yaml: &str, needle: &str) -> usize {
    line_of_nth(yaml, needle, 0)
}

/// Run `plan`; expect exit 4, nothing on stdout, and exactly `n` errors. Returns stderr.
fn manifest_errors(s: &Suite, n: usize) -> String {
    let out = s.cmd(&["plan"]).assert().code(4).get_output().clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        out.stdout.is_empty(),
        "stdout on a manifest error: {:?}",
        out.stdout
    );
    let head = format!(
        "error: manifest {} has {n} error{}:",
        s.path("scenes.yaml").display(),
        if n == 1 { "" } else { "s" }
    );
    assert!(err.starts_with(&head), "expected `{head}`, got:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Assert an error line `  <file>:<line>:<col>: <path>: ...<msg>...`; returns its column.
fn assert_diag(s: &Suite, err: &str, line: usize, path: &str, msg: &str) -> usize {
    let prefix = format!("  {}:{line}:", s.path("scenes.yaml").display());
    for l in err.lines() {
        let Some(rest) = l.strip_prefix(&prefix) else {
            continue;
        };
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let after = &rest[digits..];
        if digits > 0 && after.starts_with(&format!(": {path}: ")) && after.contains(msg) {
            return rest[..digits].parse().unwrap();
        }
    }
    panic!("expected an error at line {line} for `{path}` saying `{msg}`, got:\n{err}");
}
