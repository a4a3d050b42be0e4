//! The manifest loader on arbitrary bytes: `scenerun::manifest::parse` must return a
//! manifest or a list of errors, never panic, whatever the text (the loader itself
//! rejects non-UTF-8 before parsing; the lossy decoding here feeds it the rest).
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// A directory with the files the seed manifests name, so that validation gets past
/// "missing file" and into the deeper checks.
fn suite_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("scenerun-fuzz-{}", std::process::id()));
        for (p, text) in [
            ("kernels/add.c", "#include \"a.h\"\nint add;\n"),
            ("kernels/mul.c", "int mul;\n"),
            ("include/a.h", "#define A 1\n"),
            ("gen.sh", "#!/bin/sh\n"),
            ("golden.sh", "#!/bin/sh\n"),
            ("run.sh", "#!/bin/sh\n"),
            ("data/x/y.json", "{}\n"),
        ] {
            let f = dir.join(p);
            let _ = std::fs::create_dir_all(f.parent().unwrap());
            let _ = std::fs::write(f, text);
        }
        dir.canonicalize().unwrap_or(dir)
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match scenerun::manifest::parse(&text, Path::new("scenes.yaml"), suite_dir()) {
        Ok(_) => {}
        Err(e) => assert!(!e.diags.is_empty(), "an error without a message"),
    }
});
