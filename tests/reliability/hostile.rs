//! Hostile input to the parsers (docs/guarantees.md rows 5a, 5b): manifests and
//! depfiles never panic, compiler-escaped paths round-trip.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};

use super::*;
use crate::common::*;

fn runner(cases: usize) -> TestRunner {
    TestRunner::new(PtConfig {
        cases: cases as u32,
        failure_persistence: None,
        ..PtConfig::default()
    })
}

/// A valid manifest using most of the format, and the files it names.
const RICH_MANIFEST: &str = r#"version: 1
platform: a2a3
env:
  SIMPLER_SCHEDULER_TIMEOUT_MS: "2000"
cache:
  dir: build/cache
  max_size: 50GiB
  max_age: 14d
toolchains:
  cc:
    compile: "cc -c {source} -o {out} {includes} {flags}"
    depfile: "-MD -MF {depfile}"
    include_flag: "-I"
  other:
    compile: "./cc2 {source} {out} {platform} {scene} {kernel}"
lock:
  submit: "task-submit --timeout 1800 --device auto --device-num {device_count} --run {run}"
  device_env: TASK_DEVICE
  device_count: 2
scenes:
  - name: vector_add
    platform: a2a3
    tags: [smoke, big]
    env: {B: "x ${HOME} {{lit}}"}
    kernels:
      - name: add
        toolchain: cc
        source: kernels/add.c
        include_dirs: [include, "$HOME/include"]
        flags: ["-O2", "-DX=1"]
      - name: mul
        toolchain: other
        source: kernels/mul.c
    fixture:
      run: "./gen.sh --seed 7 --out {out} {scene} {platform} {threads}"
      inputs: [gen.sh, "data/**/*.json"]
      persist: true
      memory: 1.5GB
      threads: 4
      timeout: 1h 30m
    golden:
      run: "./golden.sh {fixture} {out}"
      inputs: [golden.sh]
    device:
      run: "./run.sh {kernels} {fixture} {golden} {devices} {scene} {platform}"
      devices: 2
      exclusive: false
      timeout: 10m
  - name: solo.v2
    kernels:
      - name: add
        toolchain: cc
        source: kernels/add.c
    device:
      run: "./run.sh {kernels} { echo; } {a,b}"
      exclusive: true
"#;

/// The files RICH_MANIFEST names, in `dir`.
fn rich_files(dir: &Path) {
    for (p, t) in [
        ("kernels/add.c", "#include \"a.h\"\nint add;\n"),
        ("kernels/mul.c", "int mul;\n"),
        ("include/a.h", "#define A 1\n"),
        ("gen.sh", "#!/bin/sh\n"),
        ("golden.sh", "#!/bin/sh\n"),
        ("run.sh", "#!/bin/sh\n"),
        ("cc2", "#!/bin/sh\n"),
        ("data/x/y.json", "{}\n"),
    ] {
        let f = dir.join(p);
        fs::create_dir_all(f.parent().unwrap()).unwrap();
        fs::write(f, t).unwrap();
    }
}

/// Tokens that tend to reach deep into the parser and validator.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "{{",
    "}}",
    "{out}",
    "{run}",
    "{fixture}",
    "{bogus}",
    "{devices}",
    "..",
    "../",
    "/",
    "\n",
    "\n  ",
    "  - ",
    "- name: x\n",
    ": ",
    ":",
    "\"",
    "'",
    "\t",
    "#",
    "&a ",
    "*a",
    "!!binary ",
    "!!int ",
    "~",
    "null",
    "[]",
    "{}",
    "[",
    "]",
    "0",
    "-1",
    "1e999",
    "99999999999999999999999",
    "0x10",
    "1.5GB",
    "GiB",
    "14d",
    "-5m",
    "d",
    "version: 2\n",
    "scenes:",
    "kernels:",
    "toolchain: ",
    "source: ",
    "devices: ",
    "threads: ",
    "\u{0}",
    "\u{feff}",
    "ü",
    "$(touch PWNED)",
    "`x`",
    "; ",
    "?",
    "*",
    "**",
    "<<: *a\n",
    "---\n",
    "...\n",
    "%YAML 1.2\n",
    "|\n",
    ">\n",
    "\\",
    "\r\n",
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Delete(usize, usize),
    Insert(usize, usize),
    Duplicate(usize, usize),
    SwapLines(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Flip(a, b)),
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(a, t)| Mutation::Insert(a, t)),
        (any::<usize>(), 1usize..80).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
    ]
}

fn apply(base: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = base.to_vec();
    for m in muts {
        let n = b.len().max(1);
        match *m {
            Mutation::Flip(at, x) => {
                if !b.is_empty() {
                    let i = at % b.len();
                    b[i] ^= x.max(1);
                }
            }
            Mutation::Delete(at, len) => {
                let i = at % n;
                let j = (i + len).min(b.len());
                if i < j {
                    b.drain(i..j);
                }
            }
            Mutation::Insert(at, t) => {
                let i = at % (b.len() + 1);
                b.splice(i..i, TOKENS[t].bytes());
            }
            Mutation::Duplicate(at, len) => {
                let i = at % n;
                let j = (i + len).min(b.len());
                if i < j {
                    let piece: Vec<u8> = b[i..j].to_vec();
                    b.splice(j..j, piece);
                }
            }
            Mutation::SwapLines(x, y) => {
                let text = String::from_utf8_lossy(&b).to_string();
                let mut lines: Vec<&str> = text.split('\n').collect();
                let (i, j) = (x % lines.len(), y % lines.len());
                lines.swap(i, j);
                b = lines.join("\n").into_bytes();
            }
        }
    }
    b
}

/// Structured garbage: YAML-ish token soup.
fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            (0..TOKENS.len()).prop_map(|i| TOKENS[i].to_string()),
            "[a-z_]{1,8}".prop_map(|s| s),
            any::<char>().prop_map(|c| c.to_string()),
        ],
        0..120,
    )
    .prop_map(|v| v.concat())
}

#[test]
fn hostile_manifest_parser_never_panics() {
    const T: &str = "hostile_manifest_lib";
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    rich_files(&d);
    let file = Path::new("scenes.yaml");
    scenerun::manifest::parse(RICH_MANIFEST, file, &d).expect("the base manifest is valid");
    let cases = pick(1500, 25000);
    let mut parsed = [0usize; 2];
    let counts = std::cell::RefCell::new(&mut parsed);
    let tally = |r: &Result<scenerun::manifest::Manifest, scenerun::manifest::ManifestErrors>| {
        counts.borrow_mut()[r.is_ok() as usize] += 1;
    };
    // Arbitrary text.
    runner(cases / 3)
        .run(&any::<String>(), |t| {
            tally(&scenerun::manifest::parse(&t, file, &d));
            Ok(())
        })
        .unwrap();
    // Arbitrary bytes, as the loader would see them after UTF-8 decoding.
    runner(cases / 6)
        .run(&prop::collection::vec(any::<u8>(), 0..600), |b| {
            tally(&scenerun::manifest::parse(
                &String::from_utf8_lossy(&b),
                file,
                &d,
            ));
            Ok(())
        })
        .unwrap();
    runner(cases / 6)
        .run(&soup(), |t| {
            tally(&scenerun::manifest::parse(&t, file, &d));
            Ok(())
        })
        .unwrap();
    // Mutations of the valid manifest.
    runner(cases / 3)
        .run(&prop::collection::vec(mutation(), 1..6), |m| {
            let b = apply(RICH_MANIFEST.as_bytes(), &m);
            let r = scenerun::manifest::parse(&String::from_utf8_lossy(&b), file, &d);
            // Every error carries a message (the loader prints them all).
            if let Err(e) = &r {
                prop_assert!(!e.diags.is_empty() && e.diags.iter().all(|x| !x.message.is_empty()));
            }
            tally(&r);
            Ok(())
        })
        .unwrap();
    let total = parsed[0] + parsed[1];
    figure(
        T,
        &format!(
            "{total} inputs to manifest::parse (arbitrary text, bytes, token soup, mutated valid manifests): no panic; {} accepted, {} rejected with messages; failures: 0",
            parsed[1], parsed[0]
        ),
    );
}

#[test]
fn hostile_manifest_binary_exits_0_or_4() {
    const T: &str = "hostile_manifest_cli";
    let s = Suite::new();
    rich_files(s.dir());
    s.manifest(RICH_MANIFEST);
    let r = exec(sr(&s, &["plan"]), LIMIT);
    assert!(r.is(0), "base manifest plans: {}", r.desc());
    let cases = pick(80, 1500);
    let codes: std::cell::RefCell<BTreeMap<i32, usize>> = Default::default();
    let bad: std::cell::RefCell<Vec<String>> = Default::default();
    let strategy = prop_oneof![
        3 => prop::collection::vec(mutation(), 1..6).prop_map(|m| apply(RICH_MANIFEST.as_bytes(), &m)),
        1 => prop::collection::vec(any::<u8>(), 0..400),
        1 => soup().prop_map(String::into_bytes),
    ];
    let mut runner = runner(cases);
    let result = runner.run(&strategy, |bytes| {
        fs::write(s.path("scenes.yaml"), &bytes).unwrap();
        let r = exec(sr(&s, &["plan"]), LIMIT);
        let code = r.code.unwrap_or(-1);
        *codes.borrow_mut().entry(code).or_insert(0) += 1;
        let ok = (r.is(0) || r.is(4)) && !r.stderr.contains("panicked");
        if !ok {
            bad.borrow_mut().push(format!(
                "{:?}\n{}",
                String::from_utf8_lossy(&bytes),
                r.desc()
            ));
        }
        prop_assert!(
            ok,
            "exit {:?} for {:?}: {}",
            r.code,
            String::from_utf8_lossy(&bytes),
            r.desc()
        );
        Ok(())
    });
    figure(
        T,
        &format!(
            "{cases} manifests (mutated, arbitrary bytes, token soup) through `scenerun plan`: exit codes {:?}; failures: {}",
            codes.borrow(),
            bad.borrow().len()
        ),
    );
    result.unwrap();
}

/// Escape a path the way gcc writes it in a depfile.
fn make_escape(p: &str) -> String {
    p.replace('$', "$$").replace('#', "\\#").replace(' ', "\\ ")
}

#[test]
fn hostile_depfile_parser_never_panics_and_round_trips() {
    const T: &str = "hostile_depfile";
    let cases = pick(3000, 50000);
    runner(cases / 2)
        .run(&any::<String>(), |t| {
            let _ = scenerun::warm::depfile::parse(&t);
            Ok(())
        })
        .unwrap();
    let depfile_soup = prop::collection::vec(
        prop_oneof![
            Just("\\".to_string()),
            Just("\\\n".to_string()),
            Just("\\\r\n".to_string()),
            Just(":".to_string()),
            Just(": ".to_string()),
            Just("$$".to_string()),
            Just("$".to_string()),
            Just("#".to_string()),
            Just("\\#".to_string()),
            Just("\\ ".to_string()),
            Just(" ".to_string()),
            Just("\n".to_string()),
            "[a-z./]{1,6}".prop_map(|s| s),
            any::<char>().prop_map(|c| c.to_string()),
        ],
        0..80,
    )
    .prop_map(|v| v.concat());
    runner(cases / 4)
        .run(&depfile_soup, |t| {
            let _ = scenerun::warm::depfile::parse(&t);
            Ok(())
        })
        .unwrap();
    // What a compiler writes for any list of paths comes back as that list.
    let paths = prop::collection::vec("[a-zA-Z0-9_./ $#+=,@%~ü-]{1,24}", 1..12);
    runner(cases / 4)
        .run(&(paths, any::<u64>()), |(paths, breaks)| {
            let mut text = String::from("build/out.o:");
            for (i, p) in paths.iter().enumerate() {
                if breaks >> (i % 64) & 1 == 1 {
                    text.push_str(" \\\n ");
                } else {
                    text.push(' ');
                }
                text.push_str(&make_escape(p));
            }
            text.push('\n');
            let mut want: Vec<String> = Vec::new();
            for p in &paths {
                if !want.contains(p) {
                    want.push(p.clone());
                }
            }
            let got = scenerun::warm::depfile::parse(&text);
            prop_assert_eq!(&got, &want, "depfile text {:?}", text);
            Ok(())
        })
        .unwrap();
    figure(T, &format!("{cases} depfile texts (arbitrary, make-syntax soup, compiler-escaped path lists that must round-trip): no panic, every path list round-tripped; failures: 0"));
}

#[test]
fn hostile_depfile_names_from_real_cc() {
    const T: &str = "hostile_depfile_cc";
    let mut faults = Faults::new(T);
    let s = Suite::with_logs();
    // Found only through a flag (the include scanner does not follow flags): the
    // compiler's depfile is the only record of it, with its name escaped by gcc.
    let hdr_dir = "hid den $d #x";
    let hdr = "we ird $x #h;`q`'.h";
    s.write(&format!("{hdr_dir}/{hdr}"), "#define V 1\n");
    s.write(
        "kernels/k.c",
        &format!("#include <stdio.h>\n#include <{hdr}>\nint main(void) {{ printf(\"%d\\n\", V); return 0; }}\n"),
    );
    let cc = s.logging_cc();
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: {}\n    depfile: \"-MD -MF {{depfile}}\"\nscenes:\n  - name: s\n    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/k.c\n        flags: [{}]\n",
        yq(&format!("{} -O0 -o {{out}} {{source}} {{flags}}", cc.display())),
        yq(&format!("-I{hdr_dir}"))
    ));
    let mut steps = Vec::new();
    for (i, edit) in [None, None, Some("#define V 2\n"), None]
        .into_iter()
        .enumerate()
    {
        if let Some(text) = edit {
            s.write(&format!("{hdr_dir}/{hdr}"), text);
        }
        let before = s.count("logs/cc.log");
        let r = exec(sr(&s, &["warm"]), LIMIT);
        let compiled = s.count("logs/cc.log") - before;
        steps.push(compiled);
        let want = usize::from(i == 0 || i == 2);
        faults.check(
            r.is(0) && compiled == want && warm_counts(&r.stderr).is_some_and(|c| c.2 == 0),
            || {
                format!(
                    "warm #{i}: compiled {compiled}, expected {want}: {}",
                    r.desc()
                )
            },
        );
    }
    let entry = entry_dirs(&s.path("cache")).into_values().next();
    let meta = entry
        .and_then(|d| read_json(&d.join("meta.json")))
        .unwrap_or_default();
    let deps: Vec<String> = meta["deps"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d["path"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let want = format!("{hdr_dir}/{hdr}");
    faults.check(deps.contains(&want), || {
        format!("the depfile record lacks {want:?}: {deps:?}")
    });
    figure(T, &format!("a header named {hdr:?} in {hdr_dir:?}, reached only through a flag: recorded from gcc's depfile under its exact name, compiles per warm {steps:?} (an edit rebuilt it, nothing else did); failures: {}", faults.count()));
    faults.finish();
}
