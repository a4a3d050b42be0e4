//! Unknown fields, names, duplicates, toolchain references and placeholders; all
//! errors reported at once.

use super::*;

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

/// `suite_args:` reaches every command that says `{suite_args}`: the `prepare:` step, a
/// fixture and a lane alike, quoted word by word, with `{platform}` filled.
#[test]
fn suite_args_are_written_once_and_reach_every_command() {
    let s = Suite::new();
    let yaml = |words: &str| {
        format!(
            r#"version: 1
platform: sim
suite_args: [{words}]
prepare:
  - {{name: kernels, run: "echo prepare {{suite_args}} > {{out}}/x"}}
lanes:
  rt: {{run: "echo lane {{args}} {{suite_args}} --device {{devices}}"}}
scenes:
  - name: a
    fixture: {{run: "echo fix {{suite_args}} > {{out}}/x"}}
    device: {{lane: rt, args: [t.py]}}
"#
        )
    };
    s.manifest(&yaml(
        r#"--platform, "{platform}", --manual, include, -m, "not sdma""#,
    ));
    let o = s.cmd(&["run", "--dry-run", "--no-lock"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = stdout(&o);
    let words = "--platform sim --manual include -m 'not sdma'";
    for cmd in [
        format!("echo prepare {words} > <out>/x"),
        format!("echo fix {words} > <out>/x"),
        format!("echo lane t.py {words} --device <devices>"),
    ] {
        assert!(out.contains(&cmd), "{cmd:?} in:\n{out}");
    }
    // The words are part of the keys of the steps that use them.
    let keys = |s: &Suite| {
        let o = s.cmd(&["plan", "--format", "json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["warm"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|st| st["key"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let before = keys(&s);
    s.manifest(&yaml(r#"--platform, "{platform}", --manual, exclude"#));
    let after = keys(&s);
    assert!(
        before.iter().zip(&after).all(|(a, b)| a != b),
        "{before:?} {after:?}"
    );

    // A placeholder other than {platform} in a word, and {suite_args} without suite_args.
    s.manifest(&yaml(r#"--device, "{devices}""#));
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(
        stderr(&o).contains("only `{platform}` is filled"),
        "{}",
        show(&o)
    );
    s.manifest(&yaml("x").replace("suite_args: [x]\n", ""));
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(
        stderr(&o).contains("the manifest has no top-level `suite_args:`"),
        "{}",
        show(&o)
    );
}
