//! SIGINT/SIGTERM during remote-cache transfers (docs/guarantees.md, "Bounds"): a server
//! that trickles a blob, or never reads an upload, does not hold a cancelled `warm`: it
//! exits 2 at once, and nothing it was downloading is published. The server is a small
//! HTTP responder in this file that does exactly that and counts what happened.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::*;

/// What the slow server saw.
#[derive(Default)]
struct Seen {
    /// A blob download started (headers and the first bytes sent).
    blob_started: AtomicBool,
    /// Bytes of blob sent before the client went away.
    blob_bytes: AtomicU64,
    /// The client closed the blob's connection before its end.
    blob_abandoned: AtomicBool,
    /// An upload's headers arrived (its body is never read).
    put_started: AtomicBool,
}

/// Claimed size of the trickled blob: at 64 KiB per 50 ms it would take ~25 s.
const BLOB: u64 = 32 << 20;

/// Serve on a free loopback port: under `/cache`, `GET ac/<key>` a fixture record naming
/// one blob and `GET cas/...` that blob at a trickle; any other `GET` or `HEAD` 404; a
/// `PUT`'s headers are read, its body never.
fn slow_server() -> (String, Arc<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/cache", l.local_addr().unwrap());
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let s = s.clone();
            std::thread::spawn(move || serve(conn, &s));
        }
    });
    (url, seen)
}

fn serve(conn: TcpStream, seen: &Seen) {
    let mut r = BufReader::new(conn.try_clone().unwrap());
    let mut w = conn;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
        }
        if method == "PUT" {
            seen.put_started.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(600));
            return;
        }
        let key = path.rsplit('/').next().unwrap_or("");
        if method == "GET" && path.starts_with("/cache/ac/") {
            let rec = serde_json::json!({
                "format": 2, "kind": "fixture", "key": key,
                "files": [{"path": "blob.bin", "size": BLOB, "sha256": "0".repeat(64), "blake3": "0".repeat(64)}],
                "deps": [], "built_by": "fixture/s/fixture", "duration_secs": 1.0,
            })
            .to_string();
            let _ = write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{rec}",
                rec.len()
            );
            continue;
        }
        if method == "GET" && path.starts_with("/cache/cas/") {
            let _ = write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {BLOB}\r\n\r\n");
            let chunk = vec![7u8; 64 << 10];
            let mut sent = 0u64;
            while sent < BLOB {
                if w.write_all(&chunk).is_err() {
                    seen.blob_abandoned.store(true, Ordering::SeqCst);
                    return;
                }
                sent += chunk.len() as u64;
                seen.blob_bytes.store(sent, Ordering::SeqCst);
                seen.blob_started.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(50));
            }
            return;
        }
        let _ = write!(w, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    }
}

/// One scene with only a fixture (its script logs each run), through the slow server.
fn transfer_suite(url: &str, fixture_mib: usize) -> Suite {
    let s = Suite::with_logs();
    s.script(
        "gen.sh",
        &format!(
            "#!/bin/sh\necho run >> logs/gen.log\nhead -c {}M /dev/urandom > \"$1/blob.bin\"\n",
            fixture_mib
        ),
    );
    s.manifest(&format!(
        "version: 1\ncache:\n  dir: cache\n  remote:\n    url: \"{url}\"\n    timeout: 60s\nscenes:\n  - name: s\n    fixture:\n      run: \"./gen.sh {{out}}\"\n      inputs: [gen.sh]\n"
    ));
    s
}

fn wait_flag(flag: &AtomicBool, limit: Duration) -> bool {
    wait_until(limit, || flag.load(Ordering::SeqCst))
}

/// A download in progress (the blob trickling in): SIGTERM or SIGINT ends `warm` with
/// exit 2 and the connection closed; nothing is published, no staging dir left, the
/// fixture never ran.
#[test]
fn a_cancel_during_a_download_exits_2_at_once_and_publishes_nothing() {
    const T: &str = "transfer_download_cancel";
    let mut faults = Faults::new(T);
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let (url, seen) = slow_server();
        let s = transfer_suite(&url, 1);
        let (child, cap) = start(sr(&s, &["warm"]));
        let downloading = wait_flag(&seen.blob_started, secs(60));
        unsafe { libc::kill(child.id() as i32, sig) };
        let t = Instant::now();
        let r = finish(child, cap, secs(30));
        let took = t.elapsed();
        faults.check(downloading && r.is(2), || {
            format!("signal {sig}: downloading {downloading}: {}", r.desc())
        });
        let closed = wait_flag(&seen.blob_abandoned, secs(10));
        faults.check(closed, || format!("signal {sig}: the download went on"));
        let cache = s.path("cache");
        let entries = entry_dirs(&cache).len();
        faults.check(entries == 0, || format!("signal {sig}: {entries} entries"));
        let tmp = tmp_leftovers(&cache);
        faults.check(tmp.is_empty(), || {
            format!("signal {sig}: left in tmp: {tmp:?}")
        });
        faults.check(s.count("logs/gen.log") == 0, || {
            format!("signal {sig}: the fixture ran after the cancel")
        });
        figure(
            T,
            &format!(
                "signal {sig} {} KiB into a {} MiB download → exit {:?} in {} ms",
                seen.blob_bytes.load(Ordering::SeqCst) >> 10,
                BLOB >> 20,
                r.code,
                took.as_millis()
            ),
        );
    }
    faults.finish();
}

/// An upload the server never reads (the socket's buffers full, the write blocked):
/// SIGTERM ends `warm` with exit 2 at once; the local entry, published before the
/// upload, is whole.
#[test]
fn a_cancel_during_a_stalled_upload_exits_2_at_once() {
    const T: &str = "transfer_upload_cancel";
    let (url, seen) = slow_server();
    // Under this prefix every read finds nothing: the fixture is built, then uploaded.
    let s = transfer_suite(&url.replace("/cache", "/uploads"), 16);
    let mut c = sr(&s, &["warm", "--remote-write"]);
    c.env("SCENERUN_REMOTE_TOKEN", "t");
    let (child, cap) = start(c);
    let uploading = wait_flag(&seen.put_started, secs(60));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    let r = finish(child, cap, secs(30));
    let took = t.elapsed();
    assert!(uploading && r.is(2), "uploading {uploading}: {}", r.desc());
    let mut v = sr(&s, &["cache", "verify"]);
    v.arg("--no-remote");
    let v = exec(v, LIMIT);
    assert!(v.is(0), "{}", v.desc());
    figure(
        T,
        &format!(
            "SIGTERM during a stalled 16 MiB upload → exit {:?} in {} ms",
            r.code,
            took.as_millis()
        ),
    );
}
