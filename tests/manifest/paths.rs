//! Files and globs that must exist, paths that may not escape the suite, and include
//! dirs with environment variables.

use std::fs;
use std::os::unix::fs::symlink;

use super::*;

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
