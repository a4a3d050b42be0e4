//! `scenes_from:` generators, `{depfile}` and `identity:` of fixture and golden steps,
//! with shell-script generators and steps that log every run (counted, not timed).

use crate::common::*;

/// A generator that logs each run and prints `n` scenes whose fixture logs its runs.
fn generated_suite(n: usize) -> Suite {
    let s = Suite::with_logs();
    s.script(
        "fix.sh",
        "#!/bin/sh\necho \"$2\" >> logs/fix.log\necho data > \"$1/data.txt\"\n",
    );
    s.write("list.txt", &format!("{n}\n"));
    s.script(
        "gen.sh",
        "#!/bin/sh\necho run >> logs/gen.log\nn=$(cat list.txt)\necho 'scenes:'\ni=0\nwhile [ $i -lt $n ]; do\n  echo \"  - name: g$i\"\n  echo '    fixture:'\n  echo \"      run: \\\"./fix.sh {out} g$i\\\"\"\n  echo '      inputs: [fix.sh]'\n  i=$((i+1))\ndone\n",
    );
    s.manifest(
        "version: 1\ncache:\n  dir: cache\nenv:\n  MODE: a\nscenes_from:\n  - run: \"./gen.sh\"\n    inputs: [gen.sh, list.txt]\n",
    );
    s
}

#[test]
fn generator_runs_only_when_its_inputs_command_or_env_change() {
    let s = generated_suite(3);
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(stdout(&o).contains("g2"), "{}", show(&o));
    assert_eq!(
        s.count("logs/gen.log"),
        1,
        "plan runs an uncached generator once"
    );
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/fix.log"), 3);
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 1, "cached: nothing runs");
    assert_eq!(s.count("logs/fix.log"), 3);

    // An input's content.
    s.write("list.txt", "4\n");
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2);
    assert_eq!(
        s.count("logs/fix.log"),
        4,
        "only the new scene's fixture runs"
    );
    // The env of the manifest.
    let m = s.read("scenes.yaml").replace("MODE: a", "MODE: b");
    s.manifest(&m);
    s.cmd(&["plan"]).assert().success();
    assert_eq!(s.count("logs/gen.log"), 3);
    // The command.
    let m = s
        .read("scenes.yaml")
        .replace("\"./gen.sh\"", "\"./gen.sh --again\"");
    s.manifest(&m);
    s.cmd(&["plan"]).assert().success();
    s.cmd(&["plan"]).assert().success();
    assert_eq!(s.count("logs/gen.log"), 4);
}

#[test]
fn a_damaged_cached_output_runs_the_generator_again() {
    let s = generated_suite(2);
    s.cmd(&["plan"]).assert().success();
    let dir = s.path("cache/generated");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("g1", "evil")).unwrap();
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(!stdout(&o).contains("evil"), "{}", show(&o));
    assert_eq!(s.count("logs/gen.log"), 2);
}

fn suite_with_generator(output: &str, literal: &str) -> Suite {
    let s = Suite::with_logs();
    s.script("fix.sh", "#!/bin/sh\necho x > \"$1/x\"\n");
    s.write("out.yaml", output);
    s.script("gen.sh", "#!/bin/sh\ncat out.yaml\n");
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nscenes_from:\n  - run: \"./gen.sh\"\n    inputs: [out.yaml]\n{literal}"
    ));
    s
}

#[test]
fn invalid_generated_scenes_name_the_generator_and_the_output_line() {
    let out = "- name: fine\n  fixture:\n    run: \"./fix.sh {out}\"\n- name: \"bad name\"\n  fixture:\n    run: \"./fix.sh {out}\"\n- name: other\n  fixture:\n    run: \"./fix.sh {nope}\"\n";
    let s = suite_with_generator(out, "");
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("scenes_from[0] (`./gen.sh`)"), "{err}");
    assert!(
        err.contains("output line 4: scenes[1].name: bad scene name"),
        "{err}"
    );
    assert!(
        err.contains("output line 9: scenes[2].fixture.run"),
        "{err}"
    );
    assert!(
        !s.path("cache/generated").exists(),
        "invalid output is not kept"
    );
}

#[test]
fn generator_failures_and_bad_output_are_usage_errors() {
    let s = suite_with_generator("[not yaml\n", "");
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(
        stderr(&o).contains("scenes_from[0] (`./gen.sh`) printed invalid YAML/JSON"),
        "{}",
        show(&o)
    );

    let s = suite_with_generator("{version: 1}\n", "");
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(stderr(&o).contains("a list of scenes"), "{}", show(&o));

    let s = suite_with_generator("", "");
    s.script(
        "gen.sh",
        "#!/bin/sh\necho 'no module named pytest' >&2\nexit 3\n",
    );
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    let err = stderr(&o);
    assert!(err.contains("scenes_from[0] (`./gen.sh`) failed"), "{err}");
    assert!(err.contains("no module named pytest"), "{err}");
}

#[test]
fn generated_names_clashing_with_literal_scenes_exit_4() {
    let out = "scenes:\n  - name: a\n    fixture:\n      run: \"./fix.sh {out}\"\n  - name: lit\n    fixture:\n      run: \"./fix.sh {out}\"\n";
    let literal = "scenes:\n  - name: lit\n    fixture:\n      run: \"./fix.sh {out}\"\n";
    let s = suite_with_generator(out, literal);
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(
        stderr(&o).contains(
            "scenes_from[0] (`./gen.sh`) output line 5: scene `lit` clashes with scenes[0] of the manifest"
        ),
        "{}",
        show(&o)
    );
}

/// Fixture and golden scripts that read helper files and say so in `{depfile}`: the
/// fixture one path per line, the golden Make-style.
fn depfile_suite() -> Suite {
    let s = Suite::with_logs();
    s.write("fhelp.txt", "1\n");
    s.write("ghelp a.txt", "2\n");
    s.write("unrelated.txt", "3\n");
    s.script(
        "fix.sh",
        "#!/bin/sh\necho \"$3\" >> logs/fix.log\ncat fhelp.txt > \"$1/in\"\nprintf 'fhelp.txt\\n\\n' > \"$2\"\n",
    );
    s.script(
        "gold.sh",
        "#!/bin/sh\necho \"$4\" >> logs/gold.log\ncat \"$1/in\" 'ghelp a.txt' > \"$2/out\"\nprintf 'out: %s \\\\\\n  ghelp\\\\ a.txt\\n' \"$1/in\" > \"$3\"\n",
    );
    let mut yaml = String::from("version: 1\ncache:\n  dir: cache\nscenes:\n");
    for i in 0..2 {
        yaml.push_str(&format!(
            "  - name: s{i}\n    fixture:\n      run: \"./fix.sh {{out}} {{depfile}} s{i}\"\n      inputs: [fix.sh]\n    golden:\n      run: \"./gold.sh {{fixture}} {{out}} {{depfile}} s{i}\"\n      inputs: [gold.sh]\n"
        ));
    }
    s.manifest(&yaml);
    s
}

#[test]
fn fixture_and_golden_depfiles_are_recorded_and_rechecked() {
    let s = depfile_suite();
    s.cmd(&["warm"]).assert().success();
    assert_eq!((s.count("logs/fix.log"), s.count("logs/gold.log")), (2, 2));
    s.cmd(&["warm"]).assert().success();
    assert_eq!((s.count("logs/fix.log"), s.count("logs/gold.log")), (2, 2));

    // A file no depfile names: nothing reruns.
    s.write("unrelated.txt", "33\n");
    s.cmd(&["warm"]).assert().success();
    assert_eq!((s.count("logs/fix.log"), s.count("logs/gold.log")), (2, 2));

    // A golden's helper (a path with a space, Make-style): only the goldens rerun.
    s.write("ghelp a.txt", "22\n");
    let o = s.cmd(&["plan"]).output().unwrap();
    assert!(
        stdout(&o).contains("ghelp a.txt changed since it was built"),
        "{}",
        show(&o)
    );
    s.cmd(&["warm"]).assert().success();
    assert_eq!((s.count("logs/fix.log"), s.count("logs/gold.log")), (2, 4));

    // The fixture's helper (one path per line): the fixtures rerun under the same key,
    // and so do the goldens computed from them (the fixture may have come out different).
    s.write("fhelp.txt", "11\n");
    let o = s.cmd(&["plan"]).output().unwrap();
    assert!(
        stdout(&o).contains("its fixture is rebuilt: fhelp.txt changed"),
        "{}",
        show(&o)
    );
    s.cmd(&["warm"]).assert().success();
    assert_eq!((s.count("logs/fix.log"), s.count("logs/gold.log")), (4, 6));
    s.cmd(&["warm"]).assert().success();
    assert_eq!((s.count("logs/fix.log"), s.count("logs/gold.log")), (4, 6));
}

#[test]
fn a_step_with_depfile_that_writes_none_fails() {
    let s = depfile_suite();
    s.script(
        "fix.sh",
        "#!/bin/sh\necho \"$3\" >> logs/fix.log\necho 1 > \"$1/in\"\n",
    );
    let o = s.cmd(&["warm"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(stderr(&o).contains("depfile not written"), "{}", show(&o));
    let o = s.cmd(&["warm", "--strict"]).output().unwrap();
    assert_eq!(code(&o), 1, "{}", show(&o));
}

#[test]
fn step_identity_is_in_the_key_and_runs_once_per_process() {
    let s = Suite::with_logs();
    s.write("version.txt", "lib 1.0\n");
    s.script(
        "id.sh",
        "#!/bin/sh\necho id >> logs/id.log\ncat version.txt\n",
    );
    s.script(
        "fix.sh",
        "#!/bin/sh\necho \"$2\" >> logs/fix.log\necho x > \"$1/x\"\n",
    );
    let mut yaml = String::from("version: 1\ncache:\n  dir: cache\nscenes:\n");
    for i in 0..3 {
        yaml.push_str(&format!(
            "  - name: s{i}\n    fixture:\n      run: \"./fix.sh {{out}} s{i}\"\n      identity: \"./id.sh\"\n"
        ));
    }
    s.manifest(&yaml);
    s.cmd(&["warm"]).assert().success();
    assert_eq!(s.count("logs/id.log"), 1, "once per process");
    assert_eq!(s.count("logs/fix.log"), 3);
    s.cmd(&["warm"]).assert().success();
    assert_eq!(s.count("logs/fix.log"), 3);
    s.write("version.txt", "lib 1.1\n");
    s.cmd(&["warm"]).assert().success();
    assert_eq!(
        s.count("logs/fix.log"),
        6,
        "a new identity output is a new key"
    );

    s.script("id.sh", "#!/bin/sh\nexit 1\n");
    let o = s.cmd(&["plan"]).output().unwrap();
    assert_eq!(code(&o), 3, "{}", show(&o));
    assert!(
        stderr(&o).contains("fixture identity: identity command `./id.sh` failed"),
        "{}",
        show(&o)
    );
}

#[test]
fn a_seal_key_that_cannot_be_used_is_said_once_even_under_q_and_outputs_are_made_again() {
    let s = generated_suite(2);
    let state = s.path("state");
    // A directory where the key file goes: it can be neither read nor made.
    std::fs::create_dir_all(state.join("scenerun/seal.key")).unwrap();
    for args in [&["plan"][..], &["-q", "plan"][..]] {
        let o = s.cmd(args).env("XDG_STATE_HOME", &state).output().unwrap();
        assert_eq!(code(&o), 0, "{}", show(&o));
        let err = stderr(&o);
        assert_eq!(
            err.matches("warning: cannot use the seal key").count(),
            1,
            "{args:?}: {err}"
        );
        assert!(err.contains("seal.key"), "{err}");
    }
    // Each process sealed with a key of its own: neither could trust the other's output.
    assert_eq!(s.count("logs/gen.log"), 2);
}

/// Generators whose outputs are not kept run at once (a whole-job manifest collects once
/// per selection): two generators that each wait for the other's start both finish.
/// One after the other, the first would wait in vain and fail. Their scenes still come
/// in the order written. Needs two cores (the pool has one thread per core).
#[test]
fn generators_whose_outputs_are_not_kept_run_at_once() {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("SKIPPED generators_whose_outputs_are_not_kept_run_at_once: one core, so one generator at a time");
        return;
    }
    let s = Suite::with_logs();
    // `gen.sh ME OTHER`: marks its start, waits up to 20 s for the other's, prints a scene.
    s.script(
        "gen.sh",
        "#!/bin/sh\ntouch \"logs/$1.started\"\ni=0\nwhile [ ! -e \"logs/$2.started\" ]; do\n  i=$((i+1)); [ $i -gt 400 ] && { echo \"$2 never started beside $1\" >&2; exit 1; }\n  sleep 0.05\ndone\nprintf 'scenes:\\n  - name: %s\\n    fixture:\\n      run: \"true {out}\"\\n' \"$1\"\n",
    );
    s.manifest(
        "version: 1\ncache:\n  dir: cache\nscenes_from:\n  - run: \"./gen.sh one two\"\n    inputs: [gen.sh]\n  - run: \"./gen.sh two one\"\n    inputs: [gen.sh]\n",
    );
    let o = s.cmd(&["list"]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", show(&o));
    let out = stdout(&o);
    let names: Vec<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    let one = names.iter().position(|l| l.contains("one"));
    let two = names.iter().position(|l| l.contains("two"));
    assert!(
        one.is_some() && one < two,
        "in the order written: {names:?}"
    );
}
