//! Hostile paths and names (docs/guarantees.md rows 5c, 5d): no shell injection,
//! `..`/symlink escapes rejected, symlinked artifacts fail their step.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::*;
use crate::common::*;

/// Argument vectors written by `printf '%s\0' "$@"`.
fn argv(p: &Path) -> Vec<String> {
    let b = fs::read(p).unwrap_or_default();
    let mut v: Vec<String> = b
        .split(|c| *c == 0)
        .map(|s| String::from_utf8_lossy(s).to_string())
        .collect();
    v.pop();
    v
}

/// Files anywhere under `root` whose name starts with PWNED.
fn pwned(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with("PWNED") {
                out.push(p.clone());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            }
        }
    }
    out
}

#[test]
fn hostile_paths_flags_and_env_stay_one_argument() {
    const T: &str = "hostile_paths";
    let mut faults = Faults::new(T);
    let s = Suite::new();
    let hd = "h d'q\"$(touch PWNED_d1)`touch PWNED_d2`;touch PWNED_d3;\nü✓ x";
    let h = s.path(hd);
    fs::create_dir_all(h.join("logs")).unwrap();
    let src = "kernels/a b'c\"d$(touch PWNED_s1)e`touch PWNED_s2`;touch PWNED_s3;\nü.c";
    let inc = "inc dir;$(touch PWNED_i1)'\"`touch PWNED_i2`";
    let data = "data/in put;$(touch PWNED_f1)`touch PWNED_f2`'\".txt";
    let flags = [
        "-DX=$(touch PWNED_g1)",
        "-DY=`touch PWNED_g2`",
        "a b;touch PWNED_g3",
        "new\nline && touch PWNED_g4",
        "ü'\"|touch PWNED_g5",
    ];
    let env_val = "$(touch PWNED_e1);`touch PWNED_e2` 'q' \"dq\"";
    let put = |rel: &str, text: &str, exe: bool| {
        let p = h.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
        if exe {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }
    };
    put(src, "int main(void) { return 0; }\n", false);
    put(&format!("{inc}/x.h"), "#define X 1\n", false);
    put(data, "data\n", false);
    put(
        "bin/argv-cc",
        "#!/bin/sh\nprintf '%s\\0' \"$@\" > logs/argv-compile\ncp \"$1\" \"$2\"\n",
        true,
    );
    put(
        "gen.sh",
        "#!/bin/sh\nprintf '%s\\0' \"$@\" > logs/argv-fixture\nprintf '%s' \"$X\" > \"$1/x.txt\"\n",
        true,
    );
    put(
        "golden.sh",
        "#!/bin/sh\nprintf '%s\\0' \"$@\" > logs/argv-golden\ncp \"$1/x.txt\" \"$2/x.txt\"\n",
        true,
    );
    put("device.sh", "#!/bin/sh\nprintf '%s\\0' \"$@\" > logs/argv-device\nprintf '%s' \"$X\" > logs/env-device\nfor k in \"$1\"/*; do [ -f \"$k\" ] || exit 9; done\n[ -f \"$2/x.txt\" ] && [ -f \"$3/x.txt\" ]\n", true);
    let flags_yaml: Vec<String> = flags.iter().map(|f| yq(f)).collect();
    let yaml = format!(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"./bin/argv-cc {{source}} {{out}} {{includes}} {{flags}}\"\n{}scenes:\n  - name: s\n    env:\n      X: {}\n    kernels:\n      - name: k\n        toolchain: cc\n        source: {}\n        include_dirs: [{}]\n        flags: [{}]\n    fixture:\n      run: \"./gen.sh {{out}} {{scene}}\"\n      inputs: [gen.sh, {}]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}}\"\n      inputs: [golden.sh]\n    device:\n      run: \"./device.sh {{kernels}} {{fixture}} {{golden}} {{devices}}\"\n",
        lock_submit("--timeout 60 --max-time 120"),
        yq(env_val),
        yq(src),
        yq(inc),
        flags_yaml.join(", "),
        yq(data),
    );
    put("scenes.yaml", &yaml, false);
    let manifest = h.join("scenes.yaml");
    let mut runs = 0;
    for args in [
        &["plan"][..],
        &["warm", "--dry-run"][..],
        &["device", "--dry-run"][..],
        &["warm"][..],
        &["device"][..],
        &["warm"][..],
    ] {
        let r = exec(sr_at(s.dir(), &manifest, args), LIMIT);
        runs += 1;
        faults.check(r.is(0), || {
            format!("{args:?} in a hostile directory: {}", r.desc())
        });
    }
    let last = warm_counts(&exec(sr_at(s.dir(), &manifest, &["warm"]), LIMIT).stderr);
    faults.check(last == Some((0, 3, 0)), || {
        format!("a second warm is all hits: {last:?}")
    });

    let hc = h.canonicalize().unwrap();
    let c = argv(&h.join("logs/argv-compile"));
    let mut want = vec![src.to_string()];
    faults.check(c.len() == 3 + flags.len(), || {
        format!("compile argv: {c:?}")
    });
    if c.len() == 3 + flags.len() {
        want.push(c[1].clone());
        want.push(format!("-I{inc}"));
        want.extend(flags.iter().map(|f| f.to_string()));
        faults.check(c == want, || format!("compile argv {c:?}, wanted {want:?}"));
        faults.check(
            Path::new(&c[1]).starts_with(hc.join("cache/tmp")) && c[1].ends_with("/out"),
            || format!("{{out}} is a staging path in the cache: {}", c[1]),
        );
    }
    let f = argv(&h.join("logs/argv-fixture"));
    faults.check(
        f.len() == 2 && f[0].ends_with("/out") && f[1] == "s",
        || format!("fixture argv: {f:?}"),
    );
    let g = argv(&h.join("logs/argv-golden"));
    faults.check(
        g.len() == 2 && Path::new(&g[0]).starts_with(hc.join("cache/entries/fixture")),
        || format!("golden argv: {g:?}"),
    );
    let d = argv(&h.join("logs/argv-device"));
    faults.check(
        d.len() == 4
            && d[..3]
                .iter()
                .all(|p| Path::new(p).is_dir() && Path::new(p).starts_with(&hc))
            && d[3] == "0",
        || format!("device argv: {d:?}"),
    );
    let env_seen = fs::read_to_string(h.join("logs/env-device")).unwrap_or_default();
    faults.check(env_seen == env_val, || {
        format!("env reached the device step as {env_seen:?}")
    });
    let fixture_x = entry_dirs(&hc.join("cache"))
        .into_iter()
        .find(|(id, _)| id.0 == "fixture")
        .and_then(|(_, d)| fs::read_to_string(d.join("out/x.txt")).ok());
    faults.check(fixture_x.as_deref() == Some(env_val), || {
        format!("env reached the fixture as {fixture_x:?}")
    });
    let p = pwned(s.dir());
    faults.check(p.is_empty(), || format!("shell injection: {p:?}"));
    figure(T, &format!("{runs} runs (plan, dry runs, warm, device through the lock tool) from a directory, source, include dir, input, flags and env made of spaces, quotes, $(), backticks, ;, newlines, unicode: every value arrived as exactly one argument, {} injected commands ran; failures: {}", p.len(), faults.count()));
    faults.finish();
}

#[test]
fn hostile_names_and_escapes_are_rejected() {
    const T: &str = "hostile_names_escapes";
    let mut faults = Faults::new(T);
    let s = Suite::new();
    s.write("kernels/k.c", "int k;\n");
    s.write("gen.sh", "#!/bin/sh\n");
    s.write("inc/a.h", "\n");
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("x.c"), "int x;\n").unwrap();
    fs::write(outside.path().join("in.txt"), "x\n").unwrap();
    fs::create_dir_all(s.path("sub")).unwrap();
    std::os::unix::fs::symlink(outside.path(), s.path("link")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("x.c"), s.path("kernels/leak.c")).unwrap();
    std::os::unix::fs::symlink(s.path("gone"), s.path("kernels/dangling.c")).unwrap();
    let parent_file = s.dir().parent().unwrap().join(format!(
        "{}-outside.c",
        s.dir().file_name().unwrap().to_string_lossy()
    ));
    fs::write(&parent_file, "int o;\n").unwrap();
    let parent_rel = format!("../{}", parent_file.file_name().unwrap().to_string_lossy());
    let scene = |name: &str, kernel: &str, source: &str, inc: &str, input: &str| {
        format!(
            "version: 1\ntoolchains:\n  cc:\n    compile: \"cc -c {{source}} -o {{out}}\"\nscenes:\n  - name: {}\n    kernels:\n      - name: {}\n        toolchain: cc\n        source: {}\n        include_dirs: [{}]\n    fixture:\n      run: \"./gen.sh {{out}}\"\n      inputs: [{}]\n",
            yq(name), yq(kernel), yq(source), yq(inc), yq(input)
        )
    };
    let ok = ("s", "k", "kernels/k.c", "inc", "gen.sh");
    s.manifest(&scene(ok.0, ok.1, ok.2, ok.3, ok.4));
    let r = exec(sr(&s, &["plan"]), LIMIT);
    assert!(r.is(0), "the base manifest is valid: {}", r.desc());
    let bad_names = [
        "a b",
        "a'b",
        "a\"b",
        "$(touch PWNED_n1)",
        "`touch PWNED_n2`",
        "a;touch PWNED_n3",
        "a\nb",
        "ü",
        "..",
        ".",
        "",
        "a/b",
        "../x",
        &"x".repeat(129),
    ];
    let mut cases: Vec<(String, String, &str)> = Vec::new();
    for n in bad_names {
        cases.push((
            format!("scene name {n:?}"),
            scene(n, ok.1, ok.2, ok.3, ok.4),
            "name",
        ));
        cases.push((
            format!("kernel name {n:?}"),
            scene(ok.0, n, ok.2, ok.3, ok.4),
            "name",
        ));
    }
    let escapes: Vec<(String, String, &str)> = vec![
        (
            "source through ..".into(),
            scene(ok.0, ok.1, &parent_rel, ok.3, ok.4),
            "escapes",
        ),
        (
            "source ../../etc/passwd".into(),
            scene(ok.0, ok.1, "../../etc/passwd", ok.3, ok.4),
            "escapes",
        ),
        (
            "source inside/../..".into(),
            scene(ok.0, ok.1, "sub/../../x.c", ok.3, ok.4),
            "escapes",
        ),
        (
            "source through a symlinked dir".into(),
            scene(ok.0, ok.1, "link/x.c", ok.3, ok.4),
            "symlink",
        ),
        (
            "source that is a symlink out".into(),
            scene(ok.0, ok.1, "kernels/leak.c", ok.3, ok.4),
            "symlink",
        ),
        (
            "dangling symlink source".into(),
            scene(ok.0, ok.1, "kernels/dangling.c", ok.3, ok.4),
            "symlink",
        ),
        (
            "include dir through ..".into(),
            scene(ok.0, ok.1, ok.2, "../", ok.4),
            "escapes",
        ),
        (
            "include dir through a symlink".into(),
            scene(ok.0, ok.1, ok.2, "link", ok.4),
            "symlink",
        ),
        (
            "input through ..".into(),
            scene(ok.0, ok.1, ok.2, ok.3, "../*"),
            "`..`",
        ),
        (
            "input through a symlink".into(),
            scene(ok.0, ok.1, ok.2, ok.3, "link/in.txt"),
            "symlink",
        ),
        (
            "input glob through a symlink".into(),
            scene(ok.0, ok.1, ok.2, ok.3, "link/*"),
            "symlink",
        ),
    ];
    cases.extend(escapes);
    let n = cases.len();
    for (what, yaml, word) in &cases {
        s.manifest(yaml);
        for cmd in [&["plan"][..], &["warm"][..]] {
            let r = exec(sr(&s, cmd), LIMIT);
            faults.check(r.is(4) && r.stderr.contains(word), || {
                format!(
                    "{what}: {cmd:?} must be exit 4 mentioning `{word}`: {}",
                    r.desc()
                )
            });
        }
    }
    let _ = fs::remove_file(&parent_file);
    let p = pwned(s.dir());
    faults.check(p.is_empty(), || format!("shell injection: {p:?}"));
    faults.check(
        !s.path("cache").exists() && !s.path("build/cache").exists(),
        || "a rejected manifest created a cache".into(),
    );
    figure(T, &format!("{n} hostile manifests ({} bad scene/kernel names, {} `..`/symlink escapes of sources, include dirs and inputs), each through plan and warm: exit 4 with a message naming the problem, nothing run; failures: {}", bad_names.len() * 2, n - bad_names.len() * 2, faults.count()));
    faults.finish();
}

#[test]
fn hostile_artifacts_with_symlinks_fail_their_step() {
    const T: &str = "hostile_artifact_symlinks";
    let mut faults = Faults::new(T);
    let s = Suite::with_logs();
    s.script(
        "leak.sh",
        "#!/bin/sh\nln -s /etc/passwd \"$1/leak\"\necho x > \"$1/ok\"\n",
    );
    s.script("root.sh", "#!/bin/sh\nln -s / \"$1/root\"\n");
    s.script("fine.sh", "#!/bin/sh\necho x > \"$1/ok\"\n");
    s.write("kernels/k.c", "int k;\n");
    s.manifest(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  ln:\n    compile: \"ln -s /etc/passwd {out}\"\nscenes:\n  - name: leak\n    fixture:\n      run: \"./leak.sh {out}\"\n      inputs: [leak.sh]\n  - name: root\n    fixture:\n      run: \"./root.sh {out}\"\n      inputs: [root.sh]\n  - name: kern\n    kernels:\n      - name: k\n        toolchain: ln\n        source: kernels/k.c\n  - name: fine\n    fixture:\n      run: \"./fine.sh {out}\"\n      inputs: [fine.sh]\n",
    );
    let r = exec(sr(&s, &["-j", "1", "warm"]), LIMIT);
    faults.check(r.is(0), || {
        format!(
            "warm: a step leaving a symlink fails its scene only (exit 0): {}",
            r.desc()
        )
    });
    for sc in ["leak", "root", "kern"] {
        let st = warm_step(&s, sc);
        faults.check(
            st["outcome"] == "failed"
                && st["error"]
                    .as_str()
                    .unwrap_or("")
                    .contains("not a regular file"),
            || format!("{sc}: expected a step failure naming the symlink: {st}"),
        );
    }
    let fine = warm_step(&s, "fine");
    faults.check(fine["outcome"] == "built", || format!("fine: {fine}"));
    nothing_half_published(&mut faults, "symlink artifacts", &s, &s.path("cache"), 1);
    figure(T, &format!("3 steps leaving symlinks in {{out}} (to a file, to /, as the kernel itself): each fails its own scene naming it, the other scene is built, nothing published; failures: {}", faults.count()));
    faults.finish();
}
