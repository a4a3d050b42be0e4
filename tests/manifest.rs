//! Integration tests: manifest validation (DESIGN.md §3). Every rule is checked through
//! the real binary: exit 4, the exact number of errors (so nothing else slipped in), and
//! an error line that names the file, the line and the key path.

use std::fs;
use std::os::unix::fs::symlink;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

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

#[test]
fn base_manifest_is_valid() {
    let s = suite();
    s.manifest(BASE);
    s.cmd(&["plan"]).assert().success();
}

#[test]
fn unknown_field_at_top_level() {
    let (s, yaml) = replaced("platform: a2a3\n", "platform: a2a3\ncolour: red\n");
    let err = manifest_errors(&s, 1);
    let col = assert_diag(
        &s,
        &err,
        line_of(&yaml, "colour"),
        "colour",
        "unknown field `colour`",
    );
    assert_eq!(col, 1, "{err}");
}

#[test]
fn unknown_field_in_a_scene() {
    let (s, yaml) = replaced("    tags: [smoke]\n", "    tags: [smoke]\n    retries: 3\n");
    let err = manifest_errors(&s, 1);
    let col = assert_diag(
        &s,
        &err,
        line_of(&yaml, "retries"),
        "scenes[0].retries",
        "unknown field `retries`",
    );
    assert_eq!(col, 5, "{err}");
}

#[test]
fn unknown_field_in_a_kernel() {
    let (s, yaml) = replaced(
        "        source: kernels/k.c\n",
        "        source: kernels/k.c\n        optimise: true\n",
    );
    let err = manifest_errors(&s, 1);
    let col = assert_diag(
        &s,
        &err,
        line_of(&yaml, "optimise"),
        "scenes[0].kernels[0].optimise",
        "unknown field `optimise`",
    );
    assert_eq!(col, 9, "{err}");
}

#[test]
fn all_errors_are_reported_at_once() {
    let (s, yaml) = suite_with(|b| {
        b.replace("  dir: cache\n", "  dir: cache\n  size: 1GiB\n")
            .replace("    identity:", "    identiy: x\n    identity:")
            .replace(
                "      inputs: [gen.sh, \"data/*.json\"]\n",
                "      inputs: [gen.sh, \"data/*.json\"]\n      input: [gen.sh]\n",
            )
            .replace(
                "      inputs: [golden.sh]\n",
                "      inputs: [golden.sh]\n      persists: false\n",
            )
            .replace(
                "{golden} {devices}\"\n",
                "{golden} {devices}\"\n      device: 2\n",
            )
            .replace("source: kernels/k.c", "source: kernels/gone.c")
    });
    let err = manifest_errors(&s, 6);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "size: 1GiB"),
        "cache.size",
        "unknown field `size`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "identiy"),
        "toolchains.cc.identiy",
        "unknown field `identiy`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "input: [gen.sh]"),
        "scenes[0].fixture.input",
        "unknown field `input`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "persists"),
        "scenes[0].golden.persists",
        "unknown field `persists`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "device: 2"),
        "scenes[0].device.device",
        "unknown field `device`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "gone.c"),
        "scenes[0].kernels[0].source",
        "kernels/gone.c",
    );
}

#[test]
fn duplicate_scene_names() {
    let (s, yaml) = suite_with(|b| {
        format!("{b}  - name: beta\n    device: {{run: \"true\"}}\n  - name: alpha\n    device: {{run: \"true\"}}\n")
    });
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of_nth(&yaml, "name: alpha", 1),
        "scenes[2].name",
        "duplicate scene name `alpha`",
    );
}

#[test]
fn duplicate_kernel_names_within_a_scene() {
    let second = "      - name: k\n        toolchain: cc\n        source: kernels/k.c\n";
    let (s, yaml) = suite_with(|b| {
        // A second `k` in alpha is an error; a `k` in another scene is not.
        let b = b.replace("    fixture:\n", &format!("{second}    fixture:\n"));
        format!("{b}  - name: beta\n    kernels:\n{second}")
    });
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of_nth(&yaml, "- name: k", 1),
        "scenes[0].kernels[1].name",
        "duplicate kernel name `k`",
    );
}

#[test]
fn bad_names() {
    let long = "x".repeat(129);
    let ok_long = "y".repeat(128);
    let bad = ["a b", "x;y", "$(id)", "..", ".", long.as_str()];
    let (s, yaml) = suite_with(|b| {
        let mut y = b.replace("      - name: k\n", "      - name: \"k k\"\n");
        for name in bad.iter().chain([&ok_long.as_str()]) {
            y.push_str(&format!(
                "  - name: \"{name}\"\n    device: {{run: \"true\"}}\n"
            ));
        }
        y
    });
    let err = manifest_errors(&s, bad.len() + 1);
    for (i, name) in bad.iter().enumerate() {
        assert_diag(
            &s,
            &err,
            line_of(&yaml, &format!("name: \"{name}\"")),
            &format!("scenes[{}].name", i + 1),
            &format!("bad scene name `{name}`"),
        );
    }
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "\"k k\""),
        "scenes[0].kernels[0].name",
        "bad kernel name `k k`",
    );
    assert!(!err.contains(&ok_long), "128 characters is allowed:\n{err}");
}

#[test]
fn missing_source_file() {
    let (s, yaml) = replaced("source: kernels/k.c", "source: kernels/missing.c");
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "missing.c"),
        "scenes[0].kernels[0].source",
        "source file not found: `kernels/missing.c`",
    );
}

#[test]
fn input_glob_matching_nothing() {
    let (s, yaml) = suite_with(|b| {
        b.replace("\"data/*.json\"", "\"nodata/**/*.json\"")
            .replace("inputs: [golden.sh]", "inputs: [golden.sh, missing.sh]")
    });
    let err = manifest_errors(&s, 2);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "nodata"),
        "scenes[0].fixture.inputs[1]",
        "`nodata/**/*.json` matches no file",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "missing.sh"),
        "scenes[0].golden.inputs[1]",
        "missing.sh",
    );
}

#[test]
fn unknown_toolchain() {
    let (s, yaml) = replaced("toolchain: cc", "toolchain: gcc");
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "toolchain: gcc"),
        "scenes[0].kernels[0].toolchain",
        "unknown toolchain `gcc` (defined: cc)",
    );
}

#[test]
fn placeholder_out_of_its_context() {
    let (s, yaml) = suite_with(|b| {
        let b = b
            .replace("\"./gen.sh {out}\"", "\"./gen.sh {out} {fixture}\"")
            .replace(
                "{out} {includes} {flags}",
                "{out} {includes} {flags} {fixture}",
            );
        // {golden} in a scene that has no golden.
        format!("{b}  - name: beta\n    device:\n      run: \"./device.sh {{golden}}\"\n")
    });
    let err = manifest_errors(&s, 3);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "./gen.sh"),
        "scenes[0].fixture.run",
        "`{fixture}`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "compile:"),
        "toolchains.cc.compile",
        "`{fixture}`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "./device.sh {golden}"),
        "scenes[1].device.run",
        "`{golden}`",
    );
}

#[test]
fn unknown_placeholder_anywhere() {
    let (s, yaml) = suite_with(|b| {
        b.replace("{includes} {flags}", "{includes} {flags} {bogus}")
            .replace("./gen.sh {out}", "./gen.sh {out} {bogus}")
            .replace(
                "./golden.sh {fixture} {out}",
                "./golden.sh {fixture} {out} {bogus}",
            )
            .replace("{golden} {devices}", "{golden} {devices} {bogus}")
            .replace(
                "scenes:\n",
                "lock:\n  submit: \"task-submit --run {run} {bogus}\"\nscenes:\n",
            )
    });
    let err = manifest_errors(&s, 5);
    for (needle, path) in [
        ("compile:", "toolchains.cc.compile"),
        ("submit:", "lock.submit"),
        ("./gen.sh", "scenes[0].fixture.run"),
        ("./golden.sh", "scenes[0].golden.run"),
        ("./device.sh", "scenes[0].device.run"),
    ] {
        assert_diag(
            &s,
            &err,
            line_of(&yaml, needle),
            path,
            "unknown placeholder `{bogus}`",
        );
    }
}

#[test]
fn shell_variables_pass_and_double_braces_are_literal() {
    let (s, _) = suite_with(|b| {
        b.replace(
            "\"./gen.sh {out}\"",
            "\"./gen.sh {out} ${HOME} {{literal}} }} $SCENERUN_SCENE\"",
        )
        .replace(
            "{golden} {devices}\"",
            "{golden} {devices} ${SCENERUN_DEVICES:-none} {{x}}\"",
        )
    });
    let out = s
        .cmd(&["run", "--dry-run"])
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l == "./gen.sh <out> ${HOME} {literal} } $SCENERUN_SCENE"),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("./device.sh ")
            && l.ends_with(" <devices> ${SCENERUN_DEVICES:-none} {x}")),
        "{text}"
    );
}

#[test]
fn relative_paths_may_not_escape_through_dotdot() {
    let (s, yaml) = suite_with(|b| {
        b.replace("source: kernels/k.c", "source: kernels/../../outside.c")
            .replace(
                "include_dirs: [include]",
                "include_dirs: [include, ../include]",
            )
            .replace("inputs: [golden.sh]", "inputs: [golden.sh, ../golden.sh]")
            .replace("\"data/*.json\"", "\"../data/*.json\"")
    });
    let err = manifest_errors(&s, 4);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "outside.c"),
        "scenes[0].kernels[0].source",
        "through `..`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "include_dirs"),
        "scenes[0].kernels[0].include_dirs[1]",
        "through `..`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "../golden.sh"),
        "scenes[0].golden.inputs[1]",
        "../golden.sh",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "../data"),
        "scenes[0].fixture.inputs[1]",
        "../data/*.json",
    );
}

#[test]
fn dotdot_that_stays_inside_is_fine() {
    let (s, _) = replaced("source: kernels/k.c", "source: include/../kernels/./k.c");
    s.cmd(&["plan"]).assert().success();
}

#[test]
fn relative_paths_may_not_escape_through_a_symlink() {
    let other = tempfile::tempdir().unwrap();
    fs::write(other.path().join("k.c"), "int k(void) { return 0; }\n").unwrap();
    fs::create_dir(other.path().join("inc")).unwrap();
    fs::write(other.path().join("in.json"), "{}\n").unwrap();
    let (s, yaml) = suite_with(|b| {
        b.replace("source: kernels/k.c", "source: kernels/link.c")
            .replace(
                "include_dirs: [include]",
                "include_dirs: [include, linkinc]",
            )
            // A symlink that stays inside is fine.
            .replace("inputs: [golden.sh]", "inputs: [golden.sh, alias.sh]")
    });
    symlink(other.path().join("k.c"), s.path("kernels/link.c")).unwrap();
    symlink(other.path().join("inc"), s.path("linkinc")).unwrap();
    symlink(other.path().join("in.json"), s.path("data/link.json")).unwrap();
    symlink("golden.sh", s.path("alias.sh")).unwrap();
    let err = manifest_errors(&s, 3);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "link.c"),
        "scenes[0].kernels[0].source",
        "through a symlink",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "linkinc"),
        "scenes[0].kernels[0].include_dirs[1]",
        "through a symlink",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "data/*.json"),
        "scenes[0].fixture.inputs[1]",
        "data/link.json",
    );
}

#[test]
fn absolute_paths_are_allowed() {
    let other = tempfile::tempdir().unwrap();
    let o = other.path().canonicalize().unwrap();
    fs::write(
        o.join("abs.c"),
        "#include \"h.h\"\nint k(void) { return H; }\n",
    )
    .unwrap();
    fs::create_dir(o.join("inc")).unwrap();
    fs::write(o.join("inc/h.h"), "#define H 1\n").unwrap();
    fs::write(o.join("input.txt"), "x\n").unwrap();
    let o = o.display();
    let (s, _) = suite_with(|b| {
        b.replace("source: kernels/k.c", &format!("source: {o}/abs.c"))
            .replace(
                "include_dirs: [include]",
                &format!("include_dirs: [{o}/inc]"),
            )
            .replace(
                "inputs: [golden.sh]",
                &format!("inputs: [golden.sh, \"{o}/*.txt\"]"),
            )
    });
    let out = s
        .cmd(&["warm", "--dry-run"])
        .assert()
        .success()
        .get_output()
        .clone();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(&format!("cc -c {o}/abs.c -o <out> -I{o}/inc -O1")),
        "{text}"
    );
}

#[test]
fn bad_size() {
    let (s, yaml) = suite_with(|b| {
        b.replace(
            "inputs: [gen.sh, \"data/*.json\"]",
            "inputs: [gen.sh]\n      memory: 40 gigs",
        )
        .replace("  dir: cache\n", "  dir: cache\n  max_size: lots\n")
    });
    let err = manifest_errors(&s, 2);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "memory:"),
        "scenes[0].fixture.memory",
        "bad size `40 gigs`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "max_size"),
        "cache.max_size",
        "bad size `lots`",
    );
}

#[test]
fn bad_duration() {
    let (s, yaml) = suite_with(|b| {
        b.replace(
            "inputs: [golden.sh]",
            "inputs: [golden.sh]\n      timeout: soon",
        )
        .replace(
            "{golden} {devices}\"",
            "{golden} {devices}\"\n      timeout: 0s",
        )
        .replace("  dir: cache\n", "  dir: cache\n  max_age: forever\n")
    });
    let err = manifest_errors(&s, 3);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "timeout: soon"),
        "scenes[0].golden.timeout",
        "bad duration `soon`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "timeout: 0s"),
        "scenes[0].device.timeout",
        "bad duration `0s`",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "max_age"),
        "cache.max_age",
        "bad duration `forever`",
    );
}

#[test]
fn devices_zero() {
    let (s, yaml) = replaced(
        "{golden} {devices}\"\n",
        "{golden} {devices}\"\n      devices: 0\n",
    );
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "devices: 0"),
        "scenes[0].device.devices",
        "at least 1",
    );
}

/// A device count no fleet has must be a manifest error, not a plan that allocates one
/// slot per id (it used to take minutes and gigabytes, or abort).
#[test]
fn absurd_device_counts_are_rejected() {
    let (s, yaml) = suite_with(|b| {
        b.replace(
            "{golden} {devices}\"\n",
            "{golden} {devices}\"\n      devices: 4000000000\n",
        )
        .replace(
            "scenes:\n",
            "lock:\n  submit: \"task-submit --run {run}\"\n  device_count: 100000000\nscenes:\n",
        )
    });
    // Bounded: before the check this ran for minutes or aborted.
    s.cmd(&["plan"])
        .timeout(Duration::from_secs(30))
        .assert()
        .code(4);
    let err = manifest_errors(&s, 2);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "devices: 4000000000"),
        "scenes[0].device.devices",
        "at most",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "device_count"),
        "lock.device_count",
        "at most",
    );
}

#[test]
fn scene_with_no_steps() {
    let (s, yaml) = suite_with(|b| {
        format!("{b}  - name: empty\n    tags: [x]\n  - name: empty2\n    kernels: []\n")
    });
    let err = manifest_errors(&s, 2);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "name: empty"),
        "scenes[1]",
        "scene `empty` has no steps",
    );
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "name: empty2"),
        "scenes[2]",
        "scene `empty2` has no steps",
    );
}

#[test]
fn wrong_type_is_reported_once_at_its_scene() {
    let (s, yaml) = replaced("    tags: [smoke]\n", "    tags: smoke\n");
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "- name: alpha"),
        "scenes[0]",
        "expected a sequence",
    );
    assert!(
        !err.contains("scenes[0]: scenes[0]"),
        "the path is printed twice:\n{err}"
    );
}

#[test]
fn malformed_yaml_reports_its_line() {
    // `device:` indented one space less than its siblings.
    let (s, yaml) = replaced("    device:\n", "   device:\n");
    let err = manifest_errors(&s, 1);
    let line = line_of(&yaml, "   device:");
    assert!(
        err.contains(&format!("{}:{line}:", s.path("scenes.yaml").display()))
            && err.contains("invalid YAML"),
        "expected invalid YAML at line {line}:\n{err}"
    );

    // An unclosed flow sequence.
    let (s, yaml) = replaced("inputs: [golden.sh]", "inputs: [golden.sh");
    let err = manifest_errors(&s, 1);
    let line = line_of(&yaml, "inputs: [golden.sh");
    let reported: usize = err
        .lines()
        .nth(1)
        .and_then(|l| l.split(':').nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no line in:\n{err}"));
    assert!(
        (line..=line + 2).contains(&reported),
        "unclosed `[` on line {line}, reported at {reported}:\n{err}"
    );
}

#[test]
fn missing_manifest_file() {
    let s = suite();
    let out = s.cmd(&["plan"]).assert().code(4).get_output().clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("{}", s.path("scenes.yaml").display())),
        "{err}"
    );
    assert!(err.contains("cannot read"), "{err}");

    // The default, `scenes.yaml` in the current directory.
    let out = scenerun()
        .current_dir(s.dir())
        .arg("plan")
        .assert()
        .code(4)
        .get_output()
        .clone();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("scenes.yaml") && err.contains("cannot read"),
        "{err}"
    );
}

#[test]
fn version_2_is_not_read() {
    let (s, yaml) = replaced("version: 1\n", "version: 2\n");
    let err = manifest_errors(&s, 1);
    assert_diag(
        &s,
        &err,
        line_of(&yaml, "version"),
        "version",
        "unsupported manifest version 2",
    );

    let (s, _) = replaced("version: 1\n", "");
    let err = manifest_errors(&s, 1);
    assert!(err.contains("missing field `version`"), "{err}");
}

#[test]
fn include_dirs_expand_environment_variables() {
    let vendor = tempfile::tempdir().unwrap();
    let v = vendor.path().canonicalize().unwrap();
    fs::create_dir(v.join("include")).unwrap();
    fs::write(v.join("include/vendor.h"), "#define VENDOR 1\n").unwrap();
    let (s, _) = suite_with(|b| {
        b.replace(
            "include_dirs: [include]",
            "include_dirs: [include, \"$SCENERUN_T_VENDOR/include\", \"${SCENERUN_T_MISSING}/include\", \"$SCENERUN_T_UNSET\"]",
        )
    });
    s.write(
        "kernels/k.c",
        "#include \"k.h\"\n#include <vendor.h>\nint k(void) { return K + VENDOR; }\n",
    );
    let missing = s.path("not-installed");
    let cmd = |args: &[&str]| {
        let mut c = s.cmd(args);
        c.env("SCENERUN_T_VENDOR", &v)
            .env("SCENERUN_T_MISSING", &missing)
            .env_remove("SCENERUN_T_UNSET");
        c
    };
    let dry = cmd(&["warm", "--dry-run"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let dry = String::from_utf8(dry).unwrap();
    assert!(
        dry.contains(&format!("-Iinclude -I{}/include -O1", v.display())),
        "expanded dir in the command, missing ones skipped:\n{dry}"
    );

    let plain = cmd(&["plan"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(!String::from_utf8(plain).unwrap().contains("does not exist"));
    let verbose = cmd(&["plan", "-v"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let verbose = String::from_utf8(verbose).unwrap();
    let notes: Vec<&str> = verbose
        .lines()
        .filter(|l| l.contains("does not exist; skipped"))
        .collect();
    assert_eq!(notes.len(), 2, "{verbose}");
    assert!(
        notes[0].contains("include_dirs[2]")
            && notes[0].contains("${SCENERUN_T_MISSING}/include")
            && notes[0].contains(&missing.display().to_string()),
        "{verbose}"
    );
    assert!(
        notes[1].contains("include_dirs[3]") && notes[1].contains("$SCENERUN_T_UNSET"),
        "{verbose}"
    );

    // The header found through the expanded dir is part of the kernel's key.
    let key = || {
        let out = cmd(&["plan", "--format", "json"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        v["warm"]["steps"][0]["key"].as_str().unwrap().to_string()
    };
    let before = key();
    fs::write(v.join("include/vendor.h"), "#define VENDOR 2\n").unwrap();
    assert_ne!(before, key());
}

/// A manifest that mutations start from: no identity command (a mutated one could fail
/// with exit 3, which is right but not what this test is about).
const FUZZ_BASE: &str = r#"version: 1
platform: a2a3
env: {A: "1"}
cache: {dir: cache, max_size: 1GiB, max_age: 14d}
toolchains:
  cc:
    compile: "cc -c {source} -o {out} {includes} {flags}"
lock:
  submit: "task-submit --device-num {device_count} --run {run}"
  device_count: 2
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
      memory: 1GiB
      threads: 2
      timeout: 30m
    golden:
      run: "./golden.sh {fixture} {out}"
      inputs: [golden.sh]
    device:
      run: "./device.sh {kernels} {fixture} {golden} {devices}"
      devices: 2
      exclusive: true
      timeout: 10m
  - name: beta
    device: {run: "true {scene}", devices: 1}
"#;

const TOKENS: &[&str] = &[
    ":",
    "-",
    "- ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "\n",
    "  ",
    "\t",
    "'",
    "\"",
    "#",
    "&a ",
    "*a",
    "!!binary ",
    "~",
    "null",
    "9999999999",
    "4000000000",
    "-1",
    "0",
    "1.5",
    "{out}",
    "{bogus}",
    "{{",
    "}}",
    "${X}",
    "..",
    "../",
    "*",
    "**/",
    "?",
    "/",
    "name: alpha",
    "version: 2",
    "é",
    "\u{0}",
    "<<: *a",
];

fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let op = (
        0..4u8,
        any::<prop::sample::Index>(),
        0..40usize,
        0..TOKENS.len(),
    );
    prop::collection::vec(op, 1..6).prop_map(|ops| {
        let mut lines: Vec<String> = FUZZ_BASE.lines().map(str::to_string).collect();
        for (kind, at, len, tok) in ops {
            let i = at.index(lines.len().max(1));
            match kind {
                0 => {
                    // Insert a token inside a line.
                    let l = &mut lines[i];
                    let mut cut = len.min(l.len());
                    while !l.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    l.insert_str(cut, TOKENS[tok]);
                }
                1 => {
                    lines.remove(i);
                }
                2 => {
                    let l = lines[i].clone();
                    lines.insert(i, l);
                }
                _ => {
                    // Cut the tail of a line.
                    let l = &mut lines[i];
                    let mut cut = len.min(l.len());
                    while !l.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    l.truncate(cut);
                }
            }
            if lines.is_empty() {
                lines.push(String::new());
            }
        }
        (lines.join("\n") + "\n").into_bytes()
    })
}

#[test]
fn arbitrary_bytes_and_mutated_manifests_never_panic() {
    let s = suite();
    s.manifest(FUZZ_BASE);
    s.cmd(&["plan"]).assert().success();

    let strategy = prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..300),
        3 => mutated(),
    ];
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |text| {
            fs::write(s.path("scenes.yaml"), &text).unwrap();
            let out = s
                .cmd(&["plan"])
                .timeout(Duration::from_secs(30))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            prop_assert!(
                matches!(out.status.code(), Some(0 | 4 | 5)),
                "exit {:?} for:\n{}\nstderr:\n{err}",
                out.status,
                String::from_utf8_lossy(&text)
            );
            prop_assert!(!err.contains("panicked"), "{err}");
            if out.status.code() == Some(4) {
                prop_assert!(err.starts_with("error: "), "{err}");
            }
            Ok(())
        })
        .unwrap();
}
