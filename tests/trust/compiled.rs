//! Compiled entries (`compile_cache:`, docs/cache-trust.md "Compiles the tests start"):
//! `device` signs an entry only when this run's shim built it and the entry still holds
//! what the shim told the run it published, never on the word of the compile log a step
//! can write; a forged log line is ignored with a notice, never a panic; an entry's
//! stdout and stderr are read capped and never through a link. A device step plays the
//! attacker: it compiles through the shim with the real `cc`, then tampers.

use std::fs;
use std::os::unix::fs::MetadataExt;

use super::signed::keypair;
use super::*;

/// The one file a compiled entry holds under `out/result/` (named as the compile's output).
fn the_output(entry: &std::path::Path) -> std::path::PathBuf {
    let mut files: Vec<_> = fs::read_dir(entry.join("out/result"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.remove(0)
}

/// A suite whose one device step runs `step.sh`: it compiles `kernel.c` through the
/// shim of `tcc-15` (the real `cc`, each compile logged), runs what it built (appending
/// its output to `logs/ran.log`), then does whatever `attack.sh` does.
fn suite(signing: &str) -> Suite {
    let s = Suite::with_logs();
    s.script(
        "tools/tcc-15",
        &format!(
            "#!/bin/sh\ncase \" $* \" in *' -o '*) echo \"$*\" >> '{}';; esac\nexec cc \"$@\"\n",
            s.path("logs/cc-runs.log").display()
        ),
    );
    s.write(
        "kernel.c",
        "#include <stdio.h>\nint main(void) { printf(\"41\\n\"); return 0; }\n",
    );
    s.script(
        "step.sh",
        "#!/bin/sh\nset -e\nmkdir -p out\ntcc-15 -O2 -o out/prog kernel.c\n./out/prog >> logs/ran.log\nLOG=$(dirname \"$(dirname \"$(command -v tcc-15)\")\")/compiles.jsonl\nexport LOG\n./attack.sh\n",
    );
    s.script("attack.sh", "#!/bin/sh\n");
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\n{signing}env:\n  PATH: \"{tools}:{path}\"\ncompile_cache:\n  compilers: [tcc-15]\nscenes:\n  - name: s\n    device:\n      run: ./step.sh\n",
        tools = s.path("tools").display(),
        path = std::env::var("PATH").unwrap(),
    ));
    s
}

fn device(s: &Suite, key: Option<&str>) -> Output {
    let mut c = scenerun_process();
    c.current_dir(s.dir())
        .arg("--manifest")
        .arg(s.path("scenes.yaml"))
        .args(["device", "--no-lock", "--devices", "0"]);
    if let Some(k) = key {
        c.env("MY_ENTRY_KEY", k);
    }
    run_bounded(c, Duration::from_secs(120))
}

fn compiled_entries(s: &Suite) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(shards) = fs::read_dir(s.path("cache/entries/compiled")) else {
        return out;
    };
    for sh in shards.flatten() {
        for e in fs::read_dir(sh.path()).unwrap().flatten() {
            out.push(e.path());
        }
    }
    out
}

fn meta(entry: &Path) -> serde_json::Value {
    serde_json::from_slice(&fs::read(entry.join("meta.json")).unwrap()).unwrap()
}

fn write_meta(entry: &Path, v: &serde_json::Value) {
    let p = entry.join("meta.json");
    let _ = fs::set_permissions(&p, fs::Permissions::from_mode(0o644));
    fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
}

/// The step swaps the object of the entry its compile just published (unsigned: a lane
/// never holds the signing key) for another program, and rewrites the record to match.
/// `device` must not sign it, and the next run must compile again, not run the swap.
#[test]
fn device_never_signs_an_entry_a_step_swapped_after_its_compile() {
    let (private, public) = keypair(21);
    let s = suite(&format!(
        "  verify_key: \"{public}\"\n  sign_key_env: MY_ENTRY_KEY\n"
    ));
    // The swap: a program printing 666, and its BLAKE3, made here with the real cc.
    s.write(
        "evil.c",
        "#include <stdio.h>\nint main(void) { printf(\"666\\n\"); return 0; }\n",
    );
    let st = std::process::Command::new("cc")
        .args(["-O2", "-o", "evil.bin", "evil.c"])
        .current_dir(s.dir())
        .status()
        .unwrap();
    assert!(st.success());
    let evil = fs::read(s.path("evil.bin")).unwrap();
    s.write(
        "swap.py",
        &format!(
            r#"import json, os, shutil, stat, sys
log = os.environ["LOG"]
keys = [json.loads(l).get("key") for l in open(log) if '"built"' in l]
key = [k for k in keys if k][-1]
entry = os.path.join("cache/entries/compiled", key[:2], key)
name = os.listdir(os.path.join(entry, "out/result"))[0]
res = os.path.join(entry, "out/result", name)
os.chmod(res, 0o755)
shutil.copyfile("evil.bin", res)
m = json.load(open(os.path.join(entry, "meta.json")))
for f in m["files"]:
    f.pop("stamp", None)
    if f["path"] == "result/" + name:
        f["size"] = {size}
        f["blake3"] = "{hash}"
m.pop("copy", None)
json.dump(m, open(os.path.join(entry, "meta.json"), "w"))
"#,
            size = evil.len(),
            hash = blake3::hash(&evil).to_hex()
        ),
    );
    s.script("attack.sh", "#!/bin/sh\npython3 swap.py\n");

    let o = device(&s, Some(&private));
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/cc-runs.log"), 1);
    let entries = compiled_entries(&s);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        fs::read(the_output(&entries[0])).unwrap(),
        evil,
        "the step swapped it"
    );
    assert!(
        meta(&entries[0]).get("signature").is_none(),
        "device signed what the step swapped: {}",
        show(&o)
    );

    // The next run compiles again (the swap is unsigned: a miss) and runs the real one.
    s.script("attack.sh", "#!/bin/sh\n");
    let o = device(&s, Some(&private));
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/cc-runs.log"), 2, "{}", show(&o));
    assert_eq!(s.read("logs/ran.log"), "41\n41\n");
    // An honest run's entry is signed, and served the time after.
    let o = device(&s, Some(&private));
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/cc-runs.log"), 2, "{}", show(&o));
    assert_eq!(s.read("logs/ran.log"), "41\n41\n41\n");
}

/// Forged lines in the compile log (a multi-byte key, a path, garbage): ignored with a
/// notice; the run ends as its scene did and writes both reports.
#[test]
fn forged_compile_log_lines_are_ignored_with_a_notice() {
    let (private, public) = keypair(22);
    let s = suite(&format!(
        "  verify_key: \"{public}\"\n  sign_key_env: MY_ENTRY_KEY\n"
    ));
    s.script(
        "attack.sh",
        "#!/bin/sh\n{\necho '{\"compile\":\"built\",\"key\":\"a\u{e9}\u{e9}\"}'\necho '{\"compile\":\"built\",\"key\":\"\u{e9}\"}'\necho '{\"compile\":\"built\",\"key\":\"../../../../tmp/x\"}'\necho 'garbage ]]'\necho '{\"compile\":\"built\",\"key\":7}'\n} >> \"$LOG\"\n",
    );
    let o = device(&s, Some(&private));
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert!(
        s.path("build/scenerun/report.json").is_file(),
        "{}",
        show(&o)
    );
    assert!(s.path("build/scenerun/junit.xml").is_file(), "{}", show(&o));
    assert!(
        stderr(&o).contains("compile log") && stderr(&o).contains("ignored"),
        "no notice: {}",
        show(&o)
    );
}

/// An entry's `stdout` that is a link (to /dev/zero, to a big file) or a file past the
/// cap whose record was rewritten to match (hash and stamps): never read whole. The
/// compile is served only from an entry whose messages are read under their cap;
/// otherwise it runs again.
#[test]
fn an_entrys_stdout_is_read_capped_and_never_through_a_link() {
    let s = suite("");
    let o = device(&s, None);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/cc-runs.log"), 1);
    let o = device(&s, None);
    assert_eq!(code(&o), 0, "{}", show(&o));
    assert_eq!(s.count("logs/cc-runs.log"), 1, "a hit: {}", show(&o));

    let big = s.path("big.txt");
    fs::File::create(&big).unwrap().set_len(1 << 30).unwrap();
    let mut runs = 1;
    for plant in ["/dev/zero", big.to_str().unwrap(), "over the cap"] {
        let entries = compiled_entries(&s);
        assert_eq!(entries.len(), 1, "{entries:?}");
        let entry = &entries[0];
        let out = entry.join("out");
        fs::set_permissions(&out, fs::Permissions::from_mode(0o755)).unwrap();
        let stdout = out.join("stdout");
        let _ = fs::remove_file(&stdout);
        let mut m = meta(entry);
        let files = m["files"].as_array_mut().unwrap();
        files.retain(|f| f["path"] != "stdout");
        if plant == "over the cap" {
            // A regular file past the messages' cap (16 MiB), recorded with its true
            // BLAKE3 and the very stamp it has: a consistent entry a lookup serves.
            let len: u64 = (16 << 20) + 1;
            fs::File::create(&stdout).unwrap().set_len(len).unwrap();
            let hash = blake3::hash(&vec![0u8; len as usize]).to_hex().to_string();
            let st = fs::symlink_metadata(&stdout).unwrap();
            let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
            files.push(serde_json::json!({
                "path": "stdout", "size": st.len(), "blake3": hash,
                "stamp": {"size": st.len(), "mtime_ns": ns(st.mtime(), st.mtime_nsec()),
                          "ctime_ns": ns(st.ctime(), st.ctime_nsec()), "ino": st.ino()}
            }));
            files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
        } else {
            symlink(Path::new(plant), &stdout);
        }
        write_meta(entry, &m);
        let o = device(&s, None);
        assert_eq!(code(&o), 0, "{plant}: {}", show(&o));
        runs += 1;
        assert_eq!(
            s.count("logs/cc-runs.log"),
            runs,
            "{plant}: not compiled again: {}",
            show(&o)
        );
        assert_eq!(s.read("logs/ran.log").lines().last(), Some("41"));
    }
}
