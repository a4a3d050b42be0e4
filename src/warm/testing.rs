//! A small plan for the warm phase's unit tests, and hits on it: built from a real
//! manifest, never from hand-made plan structs.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cache::{Entry, Kind, Meta};
use crate::plan::Plan;

/// Two scenes sharing one kernel, each with a fixture and a golden: 5 units, 6 steps.
pub fn plan() -> (tempfile::TempDir, Plan) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.c"), "int k;\n").unwrap();
    let mut y = String::from(
        "version: 1\ncache:\n  dir: cache\ntoolchains:\n  cc:\n    compile: \"cc -c {source} -o {out}\"\nscenes:\n",
    );
    for s in ["a", "b"] {
        y.push_str(&format!(
            "  - name: {s}\n    kernels:\n      - name: k\n        toolchain: cc\n        source: k.c\n    fixture:\n      run: \"gen {{scene}} {{out}}\"\n    golden:\n      run: \"gold {{fixture}} {{out}}\"\n"
        ));
    }
    std::fs::write(dir.path().join("scenes.yaml"), y).unwrap();
    let m = crate::manifest::load(&dir.path().join("scenes.yaml")).unwrap();
    let memo = crate::plan::stat_memo(&m.dir);
    let p = Plan::build(
        m,
        &Default::default(),
        None,
        memo,
        crate::plan::Lookups::Look,
    )
    .unwrap();
    (dir, p)
}

/// An entry of `kind` that is nowhere on disk (for events that carry one).
pub fn entry(kind: Kind) -> Arc<Entry> {
    Arc::new(Entry {
        dir: PathBuf::from("/nowhere"),
        meta: Meta {
            layout: 1,
            kind,
            key: String::new(),
            built_by: String::new(),
            duration_secs: 0.0,
            files: Vec::new(),
            deps: Vec::new(),
            copy: None,
            signature: None,
            stamps_seal: None,
        },
        record: None,
    })
}

/// The unit of the step of `kind` in `scene`.
pub fn unit_of(p: &Plan, kind: Kind, scene: &str) -> usize {
    p.steps
        .iter()
        .find(|s| s.kind == kind && s.id.scene == scene)
        .unwrap()
        .unit
}
