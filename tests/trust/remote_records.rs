//! Records on the remote cache are untrusted input (docs/remote-cache.md): whoever can
//! write to the server (any upload-token holder, or the server itself) decides what a
//! record says. A record whose file listing cannot be laid out safely, or that claims
//! more bytes than the local cache can take, is a miss with a warning — the step is
//! built locally and the job goes on, never exit 3 (without `--remote-required`, and
//! not even with it: the server answered, the record is just unusable).

use std::fs;

use crate::remote::server::{Nginx, TOKEN};
use crate::remote::{checkout, fleet_suite, remote_yaml, run, runs};

use super::*;

/// What a hostile record's file list says, written over a real fixture record (same
/// blob, same size, only the listing changed).
fn odd_listings(sha: &str, b3: &str, size: u64) -> Vec<(&'static str, serde_json::Value)> {
    let file = |path: &str, size: u64| serde_json::json!({"path": path, "size": size, "sha256": sha, "blake3": b3});
    let deep = vec!["d"; 3000].join("/");
    vec![
        (
            "colliding a//b and a/b",
            serde_json::json!([file("a//b", size), file("a/b", size)]),
        ),
        (
            "a/./b beside a/b",
            serde_json::json!([file("a/./b", size), file("a/b", size)]),
        ),
        ("a directory dir/", serde_json::json!([file("dir/", size)])),
        (
            "a NUL in a name",
            serde_json::json!([file("a\u{0}b", size)]),
        ),
        (
            "a 300-byte name",
            serde_json::json!([file(&"n".repeat(300), size)]),
        ),
        ("a 3000-deep path", serde_json::json!([file(&deep, size)])),
        (
            "a trailing slash on a file",
            serde_json::json!([file("x/", size), file("y", size)]),
        ),
        (
            "more bytes than the cache can take",
            serde_json::json!([file("big", 1 << 60)]),
        ),
        (
            "sizes that overflow when added",
            serde_json::json!([file("a", u64::MAX), file("b", u64::MAX)]),
        ),
    ]
}

#[test]
fn an_odd_remote_record_is_a_miss_with_a_warning_never_exit_3() {
    let ngx = Nginx::start();
    let url = ngx.url();
    let a = fleet_suite(1, &remote_yaml(&url, ""), 100);
    let o = run(
        &a,
        &["warm", "--remote-write"],
        &[("SCENERUN_REMOTE_TOKEN", TOKEN)],
    );
    assert_eq!(code(&o), 0, "{}", show(&o));
    let fixture = ngx
        .stored("ac")
        .into_iter()
        .find(|p| {
            fs::read_to_string(p)
                .unwrap()
                .contains("\"kind\":\"fixture\"")
        })
        .expect("a fixture record on the server");
    let original: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&fixture).unwrap()).unwrap();
    let first = &original["files"][0];
    let (sha, b3, size) = (
        first["sha256"].as_str().unwrap().to_string(),
        first["blake3"].as_str().unwrap().to_string(),
        first["size"].as_u64().unwrap(),
    );
    let mut faults = Vec::new();
    for (what, files) in odd_listings(&sha, &b3, size) {
        let mut rec = original.clone();
        rec["files"] = files;
        fs::write(&fixture, serde_json::to_vec(&rec).unwrap()).unwrap();
        for required in [false, true] {
            let b = checkout(&a);
            let mut args = vec!["warm"];
            if required {
                args.push("--remote-required");
            }
            let o = run(&b, &args, &[]);
            let fine = code(&o) == 0
                && runs(&b) == (0, 1, 0)
                && stderr(&o).contains("warning: remote cache:");
            if !fine {
                faults.push(format!(
                    "{what} (required: {required}): runs {:?}\n{}",
                    runs(&b),
                    show(&o)
                ));
            }
            if what.starts_with("more bytes") && !stderr(&o).contains("not downloaded") {
                faults.push(format!("{what}: downloaded anyway: {}", show(&o)));
            }
            // Nothing of the record was laid out outside the cache.
            assert!(!b.path("a").exists() && !b.path("dir").exists());
        }
    }
    assert!(
        faults.is_empty(),
        "{} case(s):\n{}",
        faults.len(),
        faults.join("\n")
    );
}
