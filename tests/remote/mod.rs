//! The remote cache against a real nginx (WebDAV PUT, bearer token on writes): a second
//! checkout with an empty local cache builds nothing; tampered blobs, a server that is
//! down or never answers, a refused write, signed and unsigned records; a large fixture
//! over loopback. Counts compiler and generator runs, never seconds.

pub mod server;
mod trust;

use std::fs;
use std::process::Output;

use base64::Engine;

use crate::common::{code, copy_tree, show, stderr, stdout, Suite};
use server::{flip_byte, Nginx, TOKEN};

/// `n` scenes, each with its own kernel (unique keys), fixture and golden. The compiler
/// wrapper and scripts are named relative to the manifest, so two checkouts in different
/// directories share every key; each checkout counts its own runs in `logs/`.
pub fn fleet_suite(n: usize, remote: &str, fixture_bytes: u64) -> Suite {
    let s = Suite::with_logs();
    s.script(
        "bin/cc-log",
        "#!/bin/sh\nmkdir -p logs\necho \"$*\" >> logs/cc.log\nexec cc \"$@\"\n",
    );
    s.write("include/common.h", "#define SCALE 3\n");
    s.script(
        "gen.sh",
        "#!/bin/sh\necho fixture >> logs/gen.log\nmkdir -p \"$1/data\"\necho \"$2\" > \"$1/input.txt\"\nhead -c \"$3\" /dev/urandom > \"$1/data/blob.bin\"\n",
    );
    s.script(
        "golden.sh",
        "#!/bin/sh\necho golden >> logs/golden.log\ncat \"$1/input.txt\" \"$1/input.txt\" > \"$2/expected.txt\"\n",
    );
    s.script(
        "device.sh",
        "#!/bin/sh\nfor k in \"$1\"/*; do test -s \"$k\" || exit 1; done\ntest -s \"$2/input.txt\" && test -s \"$3/expected.txt\"\n",
    );
    let mut yaml = format!(
        "version: 1\ncache:\n  dir: cache\n{remote}toolchains:\n  cc:\n    compile: \"./bin/cc-log -c {{source}} -o {{out}} {{includes}} {{flags}}\"\n    identity: \"cc --version\"\n    depfile: \"-MD -MF {{depfile}}\"\nscenes:\n"
    );
    for i in 0..n {
        s.write(
            &format!("kernels/k{i}.c"),
            &format!("#include \"common.h\"\nint k{i}(int x) {{ return x * SCALE + {i}; }}\n"),
        );
        yaml.push_str(&format!(
            "  - name: s{i}\n    kernels:\n      - name: k\n        toolchain: cc\n        source: kernels/k{i}.c\n        include_dirs: [include]\n    fixture:\n      run: \"./gen.sh {{out}} s{i} {fixture_bytes}\"\n      inputs: [gen.sh]\n    golden:\n      run: \"./golden.sh {{fixture}} {{out}}\"\n      inputs: [golden.sh]\n    device:\n      run: \"./device.sh {{kernels}} {{fixture}} {{golden}}\"\n"
        ));
    }
    s.manifest(&yaml);
    s
}

/// `cache.remote` with this URL and extra lines (each `    key: value\n`).
pub fn remote_yaml(url: &str, extra: &str) -> String {
    format!("  remote:\n    url: \"{url}\"\n    timeout: 20s\n{extra}")
}

/// Another checkout of the same sources: a fresh directory, empty cache and logs.
pub fn checkout(of: &Suite) -> Suite {
    let s = Suite::with_logs();
    copy_tree(of.dir(), s.dir(), &["cache", "build", "logs"]);
    s
}

pub fn run(s: &Suite, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = s.cmd(args);
    c.env_remove("SCENERUN_REMOTE_URL")
        .env_remove("SCENERUN_REMOTE_WRITE")
        .env_remove("SCENERUN_REMOTE_TOKEN")
        .env_remove("SCENERUN_SIGNING_KEY");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

pub fn ok(o: &Output) {
    assert_eq!(code(o), 0, "{}", show(o));
}

/// Runs logged by the suite's compiler wrapper and scripts: (cc, gen, golden).
pub fn runs(s: &Suite) -> (usize, usize, usize) {
    (
        s.count("logs/cc.log"),
        s.count("logs/gen.log"),
        s.count("logs/golden.log"),
    )
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[test]
fn a_second_checkout_with_an_empty_cache_builds_nothing() {
    let ngx = Nginx::start();
    let a = fleet_suite(3, "", 4096);
    // Writer: URL and write switch from the environment.
    let o = run(
        &a,
        &["warm"],
        &[
            ("SCENERUN_REMOTE_URL", &ngx.url()),
            ("SCENERUN_REMOTE_WRITE", "1"),
            ("SCENERUN_REMOTE_TOKEN", TOKEN),
        ],
    );
    ok(&o);
    assert_eq!(runs(&a), (3, 3, 3), "{}", show(&o));
    assert_eq!(ngx.stored("ac").len(), 9, "one record per entry");
    assert!(stderr(&o).contains("up"), "{}", show(&o));

    // A third checkout previews with HEAD requests only.
    let c = checkout(&a);
    let gets_before = ngx.requests("GET", "/");
    let o = run(&c, &["--remote", &ngx.url(), "plan"], &[]);
    ok(&o);
    assert_eq!(stdout(&o).matches("remote-hit").count(), 9, "{}", show(&o));
    assert_eq!(
        ngx.requests("GET", "/"),
        gets_before,
        "--plan downloads nothing"
    );
    assert!(ngx.requests("HEAD", "/ac/") >= 9);
    assert!(!c.path("cache/entries").exists(), "--plan writes nothing");

    // Reader: `--remote` after the subcommand, no token, empty local cache.
    let b = checkout(&a);
    let o = run(&b, &["warm", "--remote", &ngx.url()], &[]);
    ok(&o);
    assert_eq!(runs(&b), (0, 0, 0), "nothing built: {}", show(&o));
    assert_eq!(stderr(&o).matches("remote-hit").count(), 9, "{}", show(&o));
    assert_eq!(ngx.stored("ac").len(), 9, "the reader wrote nothing");
    // The trace's warm spans say what came down.
    let trace: serde_json::Value =
        serde_json::from_slice(&fs::read(b.path("build/scenerun/trace.json")).unwrap()).unwrap();
    let served = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["args"]["remote_bytes"].as_u64().is_some_and(|n| n > 0))
        .count();
    assert_eq!(served, 9, "{trace}");
    let stats = run(&b, &["cache", "stats"], &[]);
    ok(&stats);
    assert!(
        stdout(&stats).contains("last warm, remote: 9 hits, 0 misses"),
        "{}",
        show(&stats)
    );
    let stats = run(&b, &["cache", "stats", "--format", "json"], &[]);
    ok(&stats);
    let v: serde_json::Value = serde_json::from_str(&stdout(&stats)).unwrap();
    assert_eq!(v["last_warm_remote"]["hits"], 9, "{}", show(&stats));
    assert_eq!(v["last_warm"]["hits"], 9, "{}", show(&stats));
    // The integrity records written while the blobs streamed in (no second read) are
    // the ones the builder's publish computed from its files.
    assert_eq!(records(&b), records(&a));
    // What came down is whole: verify re-hashes it, and the device phase runs on it.
    ok(&run(&b, &["cache", "verify"], &[]));
    ok(&run(&b, &["device", "--no-lock"], &[]));
    // A second warm is all local hits: no remote traffic needed.
    let gets = ngx.requests("GET", "/");
    ok(&run(&b, &["warm", "--remote", &ngx.url()], &[]));
    assert_eq!(ngx.requests("GET", "/"), gets);
    // --no-remote wins over the environment: a fresh checkout then builds for itself.
    let d = checkout(&a);
    ok(&run(
        &d,
        &["warm", "--no-remote"],
        &[("SCENERUN_REMOTE_URL", &ngx.url())],
    ));
    assert_eq!(runs(&d), (3, 3, 3));
}

#[test]
fn a_tampered_blob_is_never_published() {
    let ngx = Nginx::start();
    let a = fleet_suite(2, &remote_yaml(&ngx.url(), ""), 1000);
    ok(&run(
        &a,
        &["warm", "--remote-write"],
        &[("SCENERUN_REMOTE_TOKEN", TOKEN)],
    ));
    let blobs = ngx.stored("cas");
    assert!(!blobs.is_empty());
    let mut tampered = Vec::new();
    for b in &blobs {
        flip_byte(b);
        tampered.push(fs::read(b).unwrap());
    }
    let b = checkout(&a);
    let o = run(&b, &["warm", "--remote-required"], &[]);
    // A bad blob is not a server failure: even --remote-required builds locally.
    ok(&o);
    assert_eq!(runs(&b), (2, 2, 2), "{}", show(&o));
    assert!(
        stderr(&o).contains("is not what its record says"),
        "{}",
        show(&o)
    );
    // Nothing in the local cache holds tampered bytes; the local entries are whole.
    for dir in crate::common::entry_dirs(&b.path("cache")).values() {
        for f in walk(&dir.join("out")) {
            assert!(
                !tampered.contains(&fs::read(&f).unwrap()),
                "{}",
                f.display()
            );
        }
    }
    ok(&run(&b, &["cache", "verify"], &[]));
    ok(&run(&b, &["device", "--no-lock"], &[]));
    assert!(
        fs::read_dir(b.path("cache/tmp")).unwrap().count() == 0,
        "no staging left behind"
    );
}

/// Each entry's recorded files (path, size, BLAKE3), by (kind, key).
fn records(s: &Suite) -> std::collections::BTreeMap<(String, String), serde_json::Value> {
    crate::common::entry_dirs(&s.path("cache"))
        .into_iter()
        .map(|(id, dir)| {
            let mut meta: serde_json::Value =
                serde_json::from_slice(&fs::read(dir.join("meta.json")).unwrap()).unwrap();
            // Each file's stamp (size, times, inode) is of this machine's copy.
            for f in meta["files"].as_array_mut().unwrap() {
                f.as_object_mut().unwrap().remove("stamp");
            }
            (id, meta["files"].clone())
        })
        .collect()
}

#[test]
fn a_blob_of_the_wrong_size_is_never_published() {
    let ngx = Nginx::start();
    let a = fleet_suite(1, &remote_yaml(&ngx.url(), ""), 1000);
    ok(&run(
        &a,
        &["warm", "--remote-write"],
        &[("SCENERUN_REMOTE_TOKEN", TOKEN)],
    ));
    // Every blob one byte longer: its first bytes are right, its sha256 is never reached.
    for b in ngx.stored("cas") {
        let mut bytes = fs::read(&b).unwrap();
        bytes.push(b'x');
        fs::write(&b, bytes).unwrap();
    }
    let b = checkout(&a);
    let o = run(&b, &["warm"], &[]);
    ok(&o);
    assert_eq!(runs(&b), (1, 1, 1), "{}", show(&o));
    assert!(
        stderr(&o).contains("more than the recorded"),
        "{}",
        show(&o)
    );
    ok(&run(&b, &["cache", "verify"], &[]));
    assert_eq!(fs::read_dir(b.path("cache/tmp")).unwrap().count(), 0);
}

#[test]
fn a_damaged_local_entry_is_not_offered_to_the_fleet() {
    let ngx = Nginx::start();
    let a = fleet_suite(1, &remote_yaml(&ngx.url(), ""), 1000);
    ok(&run(&a, &["warm", "--no-remote"], &[]));
    // Same size, other bytes, in a copy of the cache (as a restored archive is one):
    // there every file is re-hashed before it is served (docs/cache-trust.md), so the
    // damaged fixture is rebuilt locally, never served, and never offered to the fleet:
    // what is uploaded is the rebuilt one.
    let dirs = crate::common::entry_dirs(&a.path("cache"));
    let (_, fixture) = dirs.iter().find(|((k, _), _)| k == "fixture").unwrap();
    flip_byte(&fixture.join("out/data/blob.bin"));
    let st = std::process::Command::new("cp")
        .args(["-a", "cache", "restored"])
        .current_dir(a.dir())
        .status()
        .unwrap();
    assert!(st.success());
    let restored = a.path("restored");
    // Write-through of local hits: the damaged one is not uploaded, the others are.
    let o = run(
        &a,
        &[
            "--cache-dir",
            restored.to_str().unwrap(),
            "warm",
            "--remote-write",
        ],
        &[("SCENERUN_REMOTE_TOKEN", TOKEN)],
    );
    ok(&o);
    assert_eq!(runs(&a), (1, 2, 1), "the fixture rebuilt: {}", show(&o));
    assert_eq!(
        ngx.stored("ac").len(),
        3,
        "kernel, golden and the rebuilt fixture"
    );
    ok(&run(
        &a,
        &["--cache-dir", restored.to_str().unwrap(), "cache", "verify"],
        &[],
    ));
}

fn walk(p: &std::path::Path) -> Vec<std::path::PathBuf> {
    if p.is_file() {
        return vec![p.to_path_buf()];
    }
    fs::read_dir(p)
        .map(|rd| rd.flatten().flat_map(|e| walk(&e.path())).collect())
        .unwrap_or_default()
}

#[test]
fn a_server_that_is_down_is_a_warning_unless_required() {
    // Nothing listens on the port (held, so no other test's server takes it).
    let refusing = server::RefusingPort::new();
    let url = format!("http://127.0.0.1:{}/scenerun", refusing.port);
    let a = fleet_suite(3, &remote_yaml(&url, ""), 100);
    let o = run(&a, &["warm"], &[]);
    ok(&o);
    assert_eq!(runs(&a), (3, 3, 3), "{}", show(&o));
    // One warning for the whole run, not one per step.
    assert_eq!(
        stderr(&o).matches("warning: remote cache").count(),
        1,
        "{}",
        show(&o)
    );
    assert!(stderr(&o).contains("cannot reach"), "{}", show(&o));

    let b = checkout(&a);
    let o = run(&b, &["--remote-required", "warm"], &[]);
    assert_eq!(code(&o), 3, "{}", show(&o));
    assert!(stderr(&o).contains("--remote-required"), "{}", show(&o));
    // --plan under --remote-required cannot say what the remote has: exit 3 too.
    let o = run(&b, &["plan", "--remote-required"], &[]);
    assert_eq!(code(&o), 3, "{}", show(&o));
    let o = run(&b, &["plan"], &[]);
    ok(&o);
    drop(refusing);
}

#[test]
fn a_server_that_goes_away_is_a_warning() {
    let ngx = Nginx::start();
    let a = fleet_suite(1, &remote_yaml(&ngx.url(), ""), 100);
    ngx.stop();
    let o = run(&a, &["warm"], &[]);
    ok(&o);
    assert_eq!(runs(&a).0, 1, "{}", show(&o));
}

#[test]
fn a_server_that_never_answers_times_out() {
    // Accepts connections (the kernel's backlog) but never answers a request.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://127.0.0.1:{}/scenerun",
        silent.local_addr().unwrap().port()
    );
    let a = fleet_suite(
        1,
        &format!("  remote:\n    url: \"{url}\"\n    timeout: 1s\n"),
        10,
    );
    let o = run(&a, &["warm", "--remote-required"], &[]);
    assert_eq!(code(&o), 3, "{}", show(&o));
    assert!(stderr(&o).contains("timed out"), "{}", show(&o));
    let o = run(&a, &["warm"], &[]);
    ok(&o);
    assert_eq!(runs(&a).0, 1, "built locally after the timeout");
    drop(silent);
}

#[test]
fn a_refused_write_is_a_warning_unless_required() {
    let ngx = Nginx::start();
    let a = fleet_suite(2, &remote_yaml(&ngx.url(), ""), 100);
    // No token: nginx answers 401 to every PUT.
    let o = run(&a, &["warm", "--remote-write"], &[]);
    ok(&o);
    assert!(stderr(&o).contains("HTTP 401"), "{}", show(&o));
    assert_eq!(
        stderr(&o).matches("warning: remote cache").count(),
        1,
        "{}",
        show(&o)
    );
    assert!(ngx.stored("ac").is_empty(), "no record was written");
    assert_eq!(runs(&a), (2, 2, 2));

    let b = checkout(&a);
    let o = run(&b, &["warm", "--remote-write", "--remote-required"], &[]);
    assert_eq!(code(&o), 3, "{}", show(&o));
    assert!(ngx.stored("ac").is_empty());

    // A wrong token is refused the same way.
    let c = checkout(&a);
    let o = run(
        &c,
        &["warm", "--remote-write"],
        &[("SCENERUN_REMOTE_TOKEN", "not-the-token")],
    );
    ok(&o);
    assert!(stderr(&o).contains("HTTP 401"), "{}", show(&o));
    assert!(ngx.stored("ac").is_empty());
}

#[test]
fn remote_required_without_a_remote_is_a_usage_error() {
    let a = fleet_suite(1, "", 10);
    let o = run(&a, &["warm", "--remote-required"], &[]);
    assert_eq!(code(&o), 4, "{}", show(&o));
    assert!(stderr(&o).contains("no remote cache is configured"));
}

/// A 1 GiB fixture over loopback (about 25 s in a debug build: the hashing crates are
/// optimized in test builds too, see Cargo.toml).
#[test]
fn a_large_fixture_goes_up_and_comes_down_whole() {
    let bytes: u64 = 1 << 30;
    let ngx = Nginx::start();
    let a = fleet_suite(1, &remote_yaml(&ngx.url(), "    max_upload: 2GiB\n"), bytes);
    ok(&run(
        &a,
        &["warm", "--remote-write"],
        &[("SCENERUN_REMOTE_TOKEN", TOKEN)],
    ));
    let b = checkout(&a);
    let o = run(&b, &["warm"], &[]);
    ok(&o);
    assert_eq!(runs(&b), (0, 0, 0), "{}", show(&o));
    let blob = |s: &Suite| {
        let dirs = crate::common::entry_dirs(&s.path("cache"));
        let (_, d) = dirs.iter().find(|((k, _), _)| k == "fixture").unwrap();
        d.join("out/data/blob.bin")
    };
    let (fa, fb) = (blob(&a), blob(&b));
    assert_eq!(fs::metadata(&fb).unwrap().len(), bytes);
    assert!(
        fs::read(&fa).unwrap() == fs::read(&fb).unwrap(),
        "the blob came down byte for byte"
    );
    let stats = stdout(&run(&b, &["cache", "stats"], &[]));
    assert!(stats.contains("3 hits"), "{stats}");

    // Over max_upload: kept locally, not uploaded.
    let ngx2 = Nginx::start();
    let c = checkout(&a);
    let yaml = fs::read_to_string(c.path("scenes.yaml"))
        .unwrap()
        .replace(&ngx.url(), &ngx2.url())
        .replace("max_upload: 2GiB", "max_upload: 1MiB");
    fs::write(c.path("scenes.yaml"), yaml).unwrap();
    let o = run(
        &c,
        &["warm", "--remote-write"],
        &[("SCENERUN_REMOTE_TOKEN", TOKEN)],
    );
    ok(&o);
    assert!(stderr(&o).contains("kept locally only"), "{}", show(&o));
    assert_eq!(ngx2.stored("ac").len(), 2, "kernel and golden only");
}
