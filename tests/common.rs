//! Shared helpers for the integration tests: a temp suite directory, the real binary,
//! logging wrappers that count compiler / script invocations.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

pub const TASK_SUBMIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/bin/task-submit");
pub const DEMO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/demo");

/// The scenerun binary, with CI-like terminal settings and no inherited scenerun env.
pub fn scenerun() -> Command {
    let mut c = Command::cargo_bin("scenerun").expect("binary built");
    c.env("CI", "true")
        .env("NO_COLOR", "1")
        .env_remove("SCENERUN_MANIFEST")
        .env_remove("SCENERUN_CACHE_DIR")
        .env_remove("GITHUB_ACTIONS")
        .env_remove("GITHUB_STEP_SUMMARY");
    c
}

/// A suite in a temp directory.
pub struct Suite {
    pub tmp: tempfile::TempDir,
}

impl Suite {
    pub fn new() -> Suite {
        Suite {
            tmp: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir().join(rel)
    }

    /// Write a file (parents created).
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, text).unwrap();
        p
    }

    /// Write an executable script.
    pub fn script(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.write(rel, text);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    pub fn manifest(&self, yaml: &str) -> PathBuf {
        self.write("scenes.yaml", yaml)
    }

    /// `scenerun --manifest <suite>/scenes.yaml ARGS...`, run in the suite dir.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = scenerun();
        c.current_dir(self.dir())
            .arg("--manifest")
            .arg(self.path("scenes.yaml"))
            .args(args);
        c
    }

    /// A compiler wrapper `bin/cc-log` that appends one line per run to `logs/cc.log`,
    /// then runs the real `cc`.
    pub fn logging_cc(&self) -> PathBuf {
        let log = self.path("logs/cc.log");
        self.script(
            "bin/cc-log",
            &format!(
                "#!/bin/sh\nmkdir -p '{d}'\necho \"$*\" >> '{log}'\nexec cc \"$@\"\n",
                d = log.parent().unwrap().display(),
                log = log.display()
            ),
        )
    }

    /// Lines in a log file under the suite (0 when absent).
    pub fn count(&self, rel: &str) -> usize {
        fs::read_to_string(self.path(rel))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).unwrap_or_default()
    }
}

/// A small but real suite: `n` scenes, each with a kernel compiled by the logging `cc`,
/// a fixture and golden that log their runs, and a device step that runs the kernel.
pub fn basic_suite(n: usize) -> Suite {
    let s = Suite::new();
    let cc = s.logging_cc();
    s.write(
        "include/common.h",
        "#include \"inner.h\"\n#define SCALE 2\n",
    );
    s.write("include/inner.h", "#define OFFSET 1\n");
    s.write("include/unrelated.h", "#define NOTHING 0\n");
    s.write(
        "kernels/k.c",
        "#include <stdio.h>\n#include <stdlib.h>\n#include \"common.h\"\nint main(int c, char **v) { long x = c > 1 ? atol(v[1]) : 0; printf(\"%ld\\n\", x * SCALE + OFFSET); return 0; }\n",
    );
    s.script(
        "gen.sh",
        "#!/bin/sh\necho fixture >> logs/gen.log\necho 20 > \"$1/input.txt\"\n",
    );
    s.script(
        "golden.sh",
        "#!/bin/sh\necho golden >> logs/golden.log\nx=$(cat \"$1/input.txt\")\necho $((x * 2 + 1)) > \"$2/expected.txt\"\n",
    );
    s.script(
        "device.sh",
        "#!/bin/sh\necho \"$4\" >> logs/device.log\ngot=$(\"$1/k\" $(cat \"$2/input.txt\"))\n[ \"$got\" = \"$(cat \"$3/expected.txt\")\" ] || { echo \"mismatch: $got\"; exit 1; }\n",
    );
    fs::create_dir_all(s.path("logs")).unwrap();
    let mut yaml = format!(
        "version: 1\nplatform: a2a3\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"{} -c {{source}} -o {{out}}.o {{includes}} {{flags}} && {} {{out}}.o -o {{out}}\"\n    identity: \"cc --version\"\nlock:\n  submit: \"{} --timeout 60 --max-time 120 --device auto --device-num {{device_count}} --run {{run}}\"\nscenes:\n",
        cc.display(),
        cc.display(),
        TASK_SUBMIT
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "  - name: s{i}\n    tags: [t{}]\n    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/k.c\n        include_dirs: [include]\n        flags: [\"-O1\"]\n    fixture:\n      run: \"./gen.sh {{out}} {i}\"\n      inputs: [gen.sh]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}}\"\n      inputs: [golden.sh]\n    device:\n      run: \"./device.sh {{kernels}} {{fixture}} {{golden}} {{devices}}\"\n",
            i % 2
        ));
    }
    s.manifest(&yaml);
    s
}
