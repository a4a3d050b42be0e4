//! The compile cache changes nothing a compile does (docs/compile-cache.md): each probe
//! is a device step that compiles with the real `cc` through a counting wrapper named in
//! `compile_cache:`, run twice or more with one thing changed between runs. A change to
//! anything the compile reads is a compile (the wrapper counts it), and what the cache
//! put at `-o` is byte for byte what the plain compiler makes there.

use super::*;

/// The wrapper the manifest names: logs every run that compiles (not `--version`, not
/// the `-E -v` search path probe) to `$CC_RUNS_LOG`, then runs the real `cc`. The same
/// bytes in every checkout.
fn wrapper(extra: &str) -> String {
    format!(
        "#!/bin/sh\ncase \" $* \" in *' --version '*|*' -E '*) ;; *) echo \"$*\" >> \"$CC_RUNS_LOG\";; esac\nexec cc {extra} \"$@\"\n"
    )
}

/// A suite whose one scene runs `build.sh` (the probe's compiles) under the lock.
fn probe(build: &str) -> Suite {
    let s = Suite::with_logs();
    s.script("tools/cc-15", &wrapper(""));
    s.script(
        "build.sh",
        &format!("#!/bin/sh\nset -e\nmkdir -p out\n{build}"),
    );
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\nenv:\n  CC_RUNS_LOG: {log}\n  PATH: \"{tools}:{path}\"\ncompile_cache:\n  compilers: [cc-15]\nscenes:\n  - name: build\n    device:\n      run: ./build.sh\n",
        tools = s.path("tools").display(),
        path = std::env::var("PATH").unwrap(),
        log = s.path("logs/cc-runs.log").display(),
    ));
    s
}

/// One device run, which must pass; the compiles it counted.
fn device(s: &Suite) -> Value {
    let o = no_lock(s, "0");
    expect_code(&o, 0);
    let r = report(s);
    assert!(outcomes(&r).values().all(|o| o == "passed"), "{}", show(&o));
    r["device"]["compiles"].clone()
}

fn runs(s: &Suite) -> usize {
    s.count("logs/cc-runs.log")
}

/// `cc ARGS` run plainly in the suite (no cache): what the cached output must equal.
fn plain(s: &Suite, args: &str) {
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("cc {args}"))
        .current_dir(s.dir())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cc {args}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn bytes(s: &Suite, rel: &str) -> Vec<u8> {
    std::fs::read(s.path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Run the program at `rel`, its stdout.
fn output_of(s: &Suite, rel: &str) -> String {
    let o = std::process::Command::new(s.path(rel)).output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

const PRINT_X: &str =
    "#include <stdio.h>\n#include \"x.h\"\nint main(void) { printf(\"%d\\n\", X); return 0; }\n";

#[test]
fn a_new_header_that_shadows_the_one_read_is_a_compile() {
    let s = probe("cc-15 -Ia -Ib -o out/prog k.c\n");
    s.write("k.c", PRINT_X);
    std::fs::create_dir_all(s.path("a")).unwrap();
    s.write("b/x.h", "#define X 1\n");
    device(&s);
    device(&s);
    assert_eq!(runs(&s), 1, "the second run is served");
    assert_eq!(output_of(&s, "out/prog"), "1");
    // a/x.h is found first now: the compile reads it.
    s.write("a/x.h", "#define X 2\n");
    device(&s);
    assert_eq!(runs(&s), 2, "{}", s.read("logs/cc-runs.log"));
    assert_eq!(output_of(&s, "out/prog"), "2");
    // Next to the source (a `"…"` include looks there first).
    s.write("x.h", "#define X 3\n");
    device(&s);
    assert_eq!(output_of(&s, "out/prog"), "3");
    device(&s);
    assert_eq!(runs(&s), 3);
}

#[test]
fn linker_scripts_version_scripts_response_files_and_incbin_data_are_read_files() {
    let s = probe(
        "cc-15 -shared -fPIC -o out/v1.so k.c -Wl,--version-script=v.map -Wl,--build-id=none\n\
         cc-15 -shared -fPIC -o out/v2.so k.c -Xlinker --version-script -Xlinker v.map -Wl,--build-id=none\n\
         cc-15 -o out/t1 main.c -Wl,-T,s.ld -Wl,--build-id=none\n\
         cc-15 -o out/t2 main.c -T s.ld -Wl,--build-id=none\n\
         cc-15 @args.rsp\n\
         cc-15 -c -o out/bin.o blob.c\n",
    );
    s.write(
        "k.c",
        "int f(void) { return 1; }\nint g(void) { return 2; }\n",
    );
    s.write("v.map", "V1 { global: f; local: *; };\n");
    s.write("main.c", "int main(void) { return 0; }\n");
    s.write(
        "s.ld",
        "SECTIONS { .probe : { BYTE(1) } } INSERT AFTER .text;\n",
    );
    s.write("args.rsp", "-DX=1 -o out/rsp main.c\n");
    s.write(
        "blob.c",
        "__asm__(\".section .rodata\\n.incbin \\\"data.bin\\\"\\n\");\n",
    );
    s.write("data.bin", "one");
    let c = device(&s);
    assert_eq!(runs(&s), 6, "{c} {}", s.read("logs/cc-runs.log"));
    device(&s);
    assert_eq!(
        runs(&s),
        6 + 1,
        "served, but the .incbin compile: {}",
        s.read("logs/cc-runs.log")
    );
    // Each read file changes: every command that read it compiles, and what it made
    // is what the plain compiler makes (without a build id: two plain links of the
    // same input differ in it).
    s.write("v.map", "V1 { global: f; g; local: *; };\n");
    s.write(
        "s.ld",
        "SECTIONS { .probe : { BYTE(2) } } INSERT AFTER .text;\n",
    );
    s.write("args.rsp", "-DX=2 -g -o out/rsp main.c\n");
    s.write("data.bin", "two");
    device(&s);
    assert_eq!(runs(&s), 7 + 6, "{}", s.read("logs/cc-runs.log"));
    // Under the same file name: a shared library's version definition names it.
    std::fs::create_dir_all(s.path("plain")).unwrap();
    for (out, args) in [
        ("v1.so", "-shared -fPIC -o plain/v1.so k.c -Wl,--version-script=v.map -Wl,--build-id=none"),
        ("v2.so", "-shared -fPIC -o plain/v2.so k.c -Xlinker --version-script -Xlinker v.map -Wl,--build-id=none"),
        ("t1", "-o plain/t1 main.c -Wl,-T,s.ld -Wl,--build-id=none"),
        ("t2", "-o plain/t2 main.c -T s.ld -Wl,--build-id=none"),
        ("bin.o", "-c -o plain/bin.o blob.c"),
    ] {
        plain(&s, args);
        let (cached, plain) = (format!("out/{out}"), format!("plain/{out}"));
        assert!(bytes(&s, &cached) == bytes(&s, &plain), "{out} differs from cc {args}");
    }
    let c = device(&s);
    assert_eq!(runs(&s), 13 + 1);
    assert_eq!(c["reasons"]["compiled, not kept"], 1, "{c}");
}

#[test]
fn a_wrapper_compiler_edited_under_the_same_name_and_version_is_a_new_compiler() {
    let s = probe("cc-15 -o out/prog k.c\n");
    s.write("k.c", "#include <stdio.h>\n#ifndef W\n#define W 1\n#endif\nint main(void) { printf(\"%d\\n\", W); return 0; }\n");
    device(&s);
    device(&s);
    assert_eq!(runs(&s), 1);
    assert_eq!(output_of(&s, "out/prog"), "1");
    // Same `--version` (it is `cc`'s), new content.
    s.script("tools/cc-15", &wrapper("-DW=2"));
    device(&s);
    assert_eq!(runs(&s), 2, "{}", s.read("logs/cc-runs.log"));
    assert_eq!(output_of(&s, "out/prog"), "2");
}

#[test]
fn every_translation_unit_of_a_command_is_read() {
    let s = probe("cc-15 -o out/prog main.c two.c extra.S\n");
    s.write("main.c", "#include <stdio.h>\n#include \"x.h\"\nint two(void);\nint main(void) { printf(\"%d %d\\n\", X, two()); return 0; }\n");
    s.write("two.c", "#include \"y.h\"\nint two(void) { return Y; }\n");
    s.write("extra.S", "#include \"z.h\"\n.text\n");
    s.write("x.h", "#define X 1\n");
    s.write("y.h", "#define Y 1\n");
    s.write("z.h", "\n");
    device(&s);
    device(&s);
    assert_eq!(runs(&s), 1, "a multi-source build is served");
    assert_eq!(output_of(&s, "out/prog"), "1 1");
    s.write("x.h", "#define X 2\n");
    device(&s);
    assert_eq!(output_of(&s, "out/prog"), "2 1");
    s.write("y.h", "#define Y 2\n");
    device(&s);
    assert_eq!(output_of(&s, "out/prog"), "2 2");
    assert_eq!(runs(&s), 3);
}

#[test]
fn the_variables_the_compiler_reads_and_the_scenes_own_path_are_in_the_key() {
    let s = probe("LD_RUN_PATH=$RUNPATH cc-15 -o out/prog k.c -L$PWD/lib -lk\n");
    s.write("k.c", "int k(void);\nint main(void) { return k(); }\n");
    std::fs::create_dir_all(s.path("lib")).unwrap();
    plain(
        &s,
        "-shared -fPIC -o lib/libk.so -x c - <<'EOF'\nint k(void) { return 0; }\nEOF",
    );
    let text = s.read("scenes.yaml").replace(
        "      run: ./build.sh\n",
        "      run: ./build.sh\n    env:\n      RUNPATH: /opt/one\n",
    );
    s.write("scenes.yaml", &text);
    device(&s);
    s.write("scenes.yaml", &text.replace("/opt/one", "/opt/two"));
    device(&s);
    assert_eq!(runs(&s), 2, "{}", s.read("logs/cc-runs.log"));
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg("LD_RUN_PATH=/opt/two cc -o out/plain k.c -L$PWD/lib -lk")
        .current_dir(s.dir())
        .status()
        .unwrap();
    assert!(o.success());
    assert!(bytes(&s, "out/prog") == bytes(&s, "out/plain"));

    // A scene whose own PATH finds another `cc-15` gets that one.
    let other = s.path("tools2");
    s.script("tools2/cc-15", &wrapper("-DW=2"));
    s.write("w.c", "#include <stdio.h>\n#ifndef W\n#define W 1\n#endif\nint main(void) { printf(\"%d\\n\", W); return 0; }\n");
    s.script(
        "build.sh",
        "#!/bin/sh\nset -e\nmkdir -p out\ncc-15 -o out/$OUT w.c\n",
    );
    let scene = |name: &str, path: &str| {
        format!("  - name: {name}\n    device:\n      run: ./build.sh\n    env:\n      OUT: {name}\n{path}")
    };
    let path = format!(
        "      PATH: \"{}:{}\"\n",
        other.display(),
        std::env::var("PATH").unwrap()
    );
    let head = text.split("scenes:\n").next().unwrap();
    s.write(
        "scenes.yaml",
        &format!("{head}scenes:\n{}{}", scene("one", ""), scene("two", &path)),
    );
    device(&s);
    assert_eq!(output_of(&s, "out/one"), "1");
    assert_eq!(output_of(&s, "out/two"), "2");
}

#[test]
fn outputs_are_written_as_the_compiler_writes_them() {
    use std::os::unix::fs::FileTypeExt;
    let s = probe(
        "cc-15 -c -o out/link.o k.c\n\
         cc-15 -o out/linkprog k.c\n\
         cc-15 -c -o out/null k.c\n\
         cc-15 -S -o - k.c > out/stdout.s\n\
         cc-15 -c -fopt-info-all=out/opt.txt -O2 -o out/opt.o k.c\n",
    );
    s.write("k.c", "int main(void) { return 0; }\n");
    std::fs::create_dir_all(s.path("out")).unwrap();
    s.write("out/real.o", "");
    s.write("out/realprog", "");
    std::os::unix::fs::symlink("real.o", s.path("out/link.o")).unwrap();
    std::os::unix::fs::symlink("realprog", s.path("out/linkprog")).unwrap();
    // A private null device (root only): never replaced by a regular file.
    let null = s.path("out/null");
    let c = std::ffi::CString::new(null.to_str().unwrap()).unwrap();
    // SAFETY: mknod on a path in this test's own temp dir.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } == 0;
    if !made {
        eprintln!("SKIPPED part: cannot make a character device here (not root); the symlinks are still checked");
        std::fs::remove_file(&null).ok();
        let text = s.read("build.sh").replace("cc-15 -c -o out/null k.c\n", "");
        s.script("build.sh", &text);
    }
    for round in 0..2 {
        std::fs::remove_file(s.path("out/opt.txt")).ok();
        device(&s);
        for link in ["out/link.o", "out/linkprog"] {
            let m = std::fs::symlink_metadata(s.path(link)).unwrap();
            assert!(
                m.file_type().is_symlink(),
                "round {round}: {link} was replaced"
            );
        }
        assert!(std::fs::metadata(s.path("out/real.o")).unwrap().len() > 0);
        assert!(output_of(&s, "out/linkprog").is_empty());
        if made {
            let m = std::fs::symlink_metadata(&null).unwrap();
            assert!(
                m.file_type().is_char_device(),
                "round {round}: the device was replaced"
            );
        }
        assert!(s.read("out/stdout.s").contains("main"), "round {round}");
        assert!(!s.path("-").exists());
        assert!(
            s.path("out/opt.txt").exists(),
            "round {round}: -fopt-info's file"
        );
    }
    let c = device(&s);
    assert_eq!(c["reasons"]["-o -: the output goes to stdout"], 1, "{c}");
    assert_eq!(c["reasons"]["writes files besides -o"], 1, "{c}");
}

#[test]
fn two_checkouts_share_entries_unless_the_output_names_the_checkout() {
    let cache = tempfile::tempdir().unwrap();
    let checkout = |build: &str| {
        let s = probe(build);
        let text = s.read("scenes.yaml").replace(
            "  dir: cache\n",
            &format!("  dir: {}\n", cache.path().display()),
        );
        s.write("scenes.yaml", &text);
        s.write("k.c", PRINT_X);
        s.write("inc/x.h", "#define X 5\n");
        s
    };
    let build = "cc-15 -Iinc -o out/prog k.c\ncc-15 -g -c -Iinc -o out/k.o k.c\n";
    let (one, two) = (checkout(build), checkout(build));
    let c = device(&one);
    assert_eq!(runs(&one), 2, "{c} {}", one.read("logs/cc-runs.log"));
    device(&two);
    // The program is one entry for both; the object with debug info names its
    // directory, so each checkout builds its own.
    assert_eq!(runs(&two), 1, "{}", two.read("logs/cc-runs.log"));
    assert_eq!(output_of(&two, "out/prog"), "5");
    plain(&two, "-g -c -Iinc -o out/plain.o k.c");
    assert!(bytes(&two, "out/k.o") == bytes(&two, "out/plain.o"));
    // A header of this checkout changes: this checkout compiles; the entry is then
    // this checkout's (one entry per key), and the other compiles its own again.
    two.write("inc/x.h", "#define X 6\n");
    device(&two);
    assert_eq!(output_of(&two, "out/prog"), "6");
    device(&one);
    assert_eq!(output_of(&one, "out/prog"), "5");
}

/// clang names the objects a compile-and-link command makes for itself
/// `<source>-<hex>.o` in the temporary directory (gcc: `cc<hex>.o`); the linker's
/// dependency file lists them, and they are gone when the command ends. They are not
/// files the compile read: the command is kept and served (it used to be "compiled, not
/// kept", every run). Needs a clang on PATH (`clang`, or Debian's `clang-19`), which
/// .ci/deps.sh installs.
#[test]
fn a_compile_and_link_by_clang_is_kept_despite_its_own_temporary_objects() {
    let Some(clang) = ["clang", "clang-19"].into_iter().find(|c| {
        std::process::Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        panic!("no clang on PATH (`bash .ci/deps.sh` installs one)");
    };
    let s = probe("cc-15 -O2 -o out/prog k.c\n");
    s.script(
        "tools/cc-15",
        &wrapper("").replace("exec cc ", &format!("exec {clang} ")),
    );
    s.write(
        "k.c",
        "#include <stdio.h>\nint main(void) { puts(\"7\"); return 0; }\n",
    );
    let first = device(&s);
    assert_eq!(first["built"], 1, "{first}");
    let again = device(&s);
    assert_eq!(runs(&s), 1, "served, not compiled again: {again}");
    assert_eq!(again["hit"], 1, "{again}");
    assert_eq!(output_of(&s, "out/prog"), "7");
}
