//! The remote cache: one cache for a fleet of runners, over the Bazel HTTP cache layout
//! (plain GET / HEAD / PUT; blobs at `{url}/cas/<sha256>`, entry records at
//! `{url}/ac/<key>`). See docs/remote-cache.md.
//!
//! Invariants kept here:
//! - A downloaded entry reaches the local store only through `Store::stage` +
//!   `Store::publish_digested` (the same atomic rename as a build), and only after every
//!   blob's size and sha256 matched its record; a blob that does not match is dropped
//!   with its staging dir. Each blob is read once: sha256 (checked here) and the size
//!   and BLAKE3 of the local integrity record come from the same pass as it streams in.
//! - Uploads send every blob first and the record last, so a reader never finds a record
//!   whose blobs are not there yet.
//! - A remote failure is a warning and a local build, never a failed job — unless
//!   `--remote-required`, where connection errors, timeouts, 5xx and 401/403 are exit 3.
//!   After the first such failure the direction (reads or writes) is switched off for
//!   the rest of the run, so an unreachable server costs one timeout, not one per step.

pub mod http;
pub mod record;

use std::collections::HashSet;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::base::fsutil;
use crate::base::notice::{Direction, Notice, Tell};
use crate::base::units::short_size;
use crate::cache::digest::{self, CopyError, Digester};
use crate::cache::sign::Keys;
use crate::cache::{Entry, FileRecord, Kind, Meta, Store};
use crate::key::{self, Files};
use crate::manifest::remote::RemoteConfig;
use anyhow::{Context, Result};
use http::{Client, Failure};
use record::{Record, RemoteFile};
use serde::{Deserialize, Serialize};

/// Records are small; a larger answer is not a record.
const RECORD_LIMIT: u64 = 16 << 20;
/// Blobs of one entry moving at once (entries themselves move in parallel on warm's slots).
const BLOB_WIDTH: usize = 4;
/// HEAD requests at once for `--plan`.
const HEAD_WIDTH: usize = 8;
const STATS_FILE: &str = "last-remote.json";

/// Counters of one run; saved for `cache stats`.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
pub struct Totals {
    pub hits: u64,
    pub misses: u64,
    pub bytes_down: u64,
    pub bytes_up: u64,
    pub uploaded: u64,
    pub failures: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    bytes_down: AtomicU64,
    bytes_up: AtomicU64,
    uploaded: AtomicU64,
    failures: AtomicU64,
}

/// How the command line asks for the remote (`--remote`, `--remote-write`,
/// `--no-remote`, `--remote-required` and their environment variables).
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// The URL, over `cache.remote.url`.
    pub url: Option<String>,
    /// Upload what this run builds.
    pub write: bool,
    /// No remote, whatever else says so.
    pub off: bool,
    /// A remote that cannot be reached, times out, fails or refuses is exit 3.
    pub required: bool,
}

/// What a lookup on the remote gave.
pub enum Fetched {
    /// Downloaded, verified and published locally; bytes moved.
    Published(u64),
    Miss,
}

/// A file of a downloaded entry that cannot be laid out or written in staging: what the
/// record said does not fit here (a miss with a warning). A cache that is unusable
/// anyway fails the local build that follows.
fn unstorable(path: &Path, e: &std::io::Error) -> Error {
    Error::Remote(Failure::Unstorable {
        path: crate::base::error::clip(&path.display().to_string(), 120).into_owned(),
        why: e.to_string(),
    })
}

enum Error {
    Remote(Failure),
    /// The local store (exit 3 whatever the remote settings).
    Local(anyhow::Error),
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Self {
        Error::Remote(f)
    }
}

pub struct Remote {
    client: Client,
    pub url: String,
    write: bool,
    required: bool,
    max_upload: u64,
    /// The run's one key pair (`signing:`), the local store's.
    keys: std::sync::Arc<Keys>,
    reads_off: AtomicBool,
    writes_off: AtomicBool,
    counters: Counters,
    warned: Mutex<HashSet<Notice>>,
    /// Where its warnings and notes go (the terminal, in a run): the remote knows
    /// nothing of how they are shown.
    notes: std::sync::Arc<dyn Tell>,
}

impl Remote {
    /// The remote for this run from the manifest, the command line and the environment
    /// (`--no-remote` > `--remote`/`$SCENERUN_REMOTE_URL` > `cache.remote.url`; writes
    /// when `--remote-write`/`$SCENERUN_REMOTE_WRITE` or `cache.remote.write`). Records
    /// are signed and verified with `keys`, the local store's.
    pub fn configure(
        cfg: &RemoteConfig,
        flags: &Flags,
        keys: std::sync::Arc<Keys>,
        notes: std::sync::Arc<dyn Tell>,
    ) -> Result<Option<Remote>> {
        if flags.off {
            return Ok(None);
        }
        let url = flags
            .url
            .as_deref()
            .map(|u| u.trim().trim_end_matches('/').to_string())
            .filter(|u| !u.is_empty())
            .or_else(|| cfg.url.clone());
        let Some(url) = url else {
            if flags.required {
                return Err(crate::base::error::err!(Usage,
                    "--remote-required, but no remote cache is configured (cache.remote.url, --remote or $SCENERUN_REMOTE_URL)"
                ));
            }
            return Ok(None);
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(crate::base::error::err!(
                Usage,
                "remote cache URL `{}` is not an http:// or https:// URL",
                crate::base::proc::without_userinfo(&url)
            ));
        }
        let write = flags.write || cfg.write;
        let token = std::env::var(&cfg.token_env).ok().filter(|t| !t.is_empty());
        let client = Client::new(&url, cfg.timeout, token.as_deref());
        Ok(Some(Remote {
            url: client.base().to_string(),
            client,
            write,
            required: flags.required,
            max_upload: cfg.max_upload,
            keys,
            reads_off: AtomicBool::new(false),
            writes_off: AtomicBool::new(false),
            counters: Counters::default(),
            warned: Mutex::new(HashSet::new()),
            notes,
        }))
    }

    pub fn writes(&self) -> bool {
        self.write
    }

    /// A warning, said once per run.
    fn warn(&self, n: Notice) {
        if self
            .warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(n.clone())
        {
            self.notes.tell(n);
        }
    }

    /// A failed remote operation: exit 3 under `--remote-required` when the server is
    /// unusable, else a warning (and that direction switched off when it is unusable).
    fn failed(&self, f: Failure, writing: bool) -> Result<()> {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        if f.is_infra() {
            if self.required {
                return Err(crate::base::error::err!(
                    Infra,
                    "remote cache: {f} (--remote-required)"
                ));
            }
            let (flag, off) = if writing {
                (&self.writes_off, Direction::Uploads)
            } else {
                (&self.reads_off, Direction::Downloads)
            };
            if !flag.swap(true, Ordering::SeqCst) {
                self.warn(Notice::RemoteFailed {
                    failure: f.to_string(),
                    off: Some(off),
                });
            }
        } else {
            self.warn(Notice::RemoteFailed {
                failure: f.to_string(),
                off: None,
            });
        }
        Ok(())
    }

    fn local(e: anyhow::Error) -> Error {
        Error::Local(e)
    }

    /// Look `key` up on the remote; on a whole, verified entry publish it into `store`.
    /// Err only for the local store, or a server failure under `--remote-required`.
    pub fn fetch(
        &self,
        store: &Store,
        kind: Kind,
        key: &str,
        base: &Path,
        files: &Files,
    ) -> Result<Fetched> {
        if self.reads_off.load(Ordering::SeqCst) {
            return Ok(Fetched::Miss);
        }
        match self.try_fetch(store, kind, key, base, files) {
            Ok(Some(bytes)) => {
                self.counters.hits.fetch_add(1, Ordering::Relaxed);
                Ok(Fetched::Published(bytes))
            }
            Ok(None) => {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                Ok(Fetched::Miss)
            }
            Err(Error::Local(e)) => Err(e),
            // Cancelled: whatever the transfer gave is dropped with its staging dir.
            Err(Error::Remote(_)) if crate::base::proc::interrupted() => Ok(Fetched::Miss),
            Err(Error::Remote(f)) => {
                self.counters.misses.fetch_add(1, Ordering::Relaxed);
                self.failed(f, false).map(|()| Fetched::Miss)
            }
        }
    }

    fn try_fetch(
        &self,
        store: &Store,
        kind: Kind,
        key: &str,
        base: &Path,
        files: &Files,
    ) -> Result<Option<u64>, Error> {
        let Some(bytes) = self.client.get_small(&format!("ac/{key}"), RECORD_LIMIT)? else {
            return Ok(None);
        };
        let rec = Record::parse(&bytes, kind, key, &self.keys)?;
        // Files the compiler read where the entry was built must be the same here, as for
        // a local hit; if not, this runner builds its own.
        for dep in &rec.deps {
            match files.hash(&key::key_path(base, &dep.path)) {
                Ok(h) if *h == *dep.blake3 => {}
                _ => return Ok(None),
            }
        }
        // A record may claim anything: what cannot fit is not downloaded at all.
        if let Some(free) = crate::base::fsutil::free_bytes(&store.root) {
            if rec.bytes() > free {
                let (key, bytes) = (key.to_string(), rec.bytes());
                return Err(Failure::TooBig { key, bytes, free }.into());
            }
        }
        let staging = store.stage(kind).map_err(Self::local)?;
        let out = staging.out();
        let records = Mutex::new(Vec::with_capacity(rec.files.len()));
        each_parallel(&rec.files, BLOB_WIDTH, |f| {
            let dest = if f.path.is_empty() {
                out.clone()
            } else {
                out.join(&f.path)
            };
            if let Some(dir) = dest.parent() {
                fs::create_dir_all(dir).map_err(|e| unstorable(dir, &e))?;
            }
            let r = self.fetch_blob(f, &dest)?;
            records
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(r);
            Ok(())
        })?;
        let files = records.into_inner().expect("file records");
        // Nothing is published once the run is cancelled, not even a whole download.
        if crate::base::proc::interrupted() {
            let url = self.client.url(&format!("ac/{key}"));
            return Err(Failure::Cancelled { url }.into());
        }
        let mut meta = Meta::new(
            kind,
            key,
            &rec.built_by,
            rec.duration_secs,
            files,
            rec.deps.clone(),
        );
        // The writer's signature over this very content (each blob's BLAKE3 was
        // checked against the record): the entry is signed without this process's key.
        meta.signature = rec.signature.clone();
        store.publish_digested(staging, meta).map_err(Self::local)?;
        Ok(Some(rec.bytes()))
    }

    /// Stream one blob into `dest`, hashing as it comes; any mismatch is `Tampered`.
    /// Gives the blob's local integrity record, digested in the same pass.
    fn fetch_blob(&self, f: &RemoteFile, dest: &Path) -> Result<FileRecord, Error> {
        let path = format!("cas/{}", f.sha256);
        let url = self.client.url(&path);
        let Some(body) = self.client.get(&path)? else {
            return Err(Failure::BlobMissing { url }.into());
        };
        let file = fs::File::create_new(dest).map_err(|e| unstorable(dest, &e))?;
        let got = digest::copy(body, file, Digester::with_sha256(), f.size, |k| {
            self.counters.bytes_down.fetch_add(k, Ordering::Relaxed);
        })
        .map_err(|e| match e {
            CopyError::Read(e) => Error::Remote(http::io_failure(&url, &e)),
            CopyError::Write(e) => unstorable(dest, &e),
            CopyError::TooLong => Failure::Tampered {
                url: url.clone(),
                why: format!("more than the recorded {} bytes", f.size),
            }
            .into(),
        })?;
        if got.size != f.size {
            return Err(Failure::Tampered {
                url,
                why: format!("{} bytes, recorded {}", got.size, f.size),
            }
            .into());
        }
        let sha256 = got.sha256.expect("asked for");
        if sha256 != f.sha256 {
            return Err(Failure::Tampered {
                url,
                why: format!("its sha256 is {sha256}"),
            }
            .into());
        }
        if got.blake3 != f.blake3 {
            return Err(Failure::Tampered {
                url,
                why: format!("its BLAKE3 is {}", got.blake3),
            }
            .into());
        }
        Ok(FileRecord::new(f.path.clone(), got.size, got.blake3))
    }

    /// Upload a published entry when writes are on: blobs first (those the server lacks),
    /// the record last. `unless_present`: skip when the server already has the record
    /// (a local hit the fleet may not have yet). Returns the bytes sent.
    pub fn upload(&self, entry: &Entry, unless_present: bool) -> Result<u64> {
        if !self.write || self.writes_off.load(Ordering::SeqCst) {
            return Ok(0);
        }
        if self.keys.verifies_remote() && !self.keys.signs() {
            self.warn(Notice::RemoteUnsigned {
                sign_env: self.keys.sign_env().map(str::to_string),
            });
            return Ok(0);
        }
        let meta = &entry.meta;
        if meta.bytes() > self.max_upload {
            self.notes.tell(Notice::RemoteTooBig {
                built_by: meta.built_by.clone(),
                bytes: meta.bytes(),
                cap: self.max_upload,
            });
            return Ok(0);
        }
        match self.try_upload(entry, unless_present) {
            Ok(sent) => Ok(sent),
            Err(Error::Local(e)) => Err(e),
            Err(Error::Remote(_)) if crate::base::proc::interrupted() => Ok(0),
            Err(Error::Remote(f)) => self.failed(f, true).map(|()| 0),
        }
    }

    fn try_upload(&self, entry: &Entry, unless_present: bool) -> Result<u64, Error> {
        let meta = &entry.meta;
        let ac = format!("ac/{}", meta.key);
        if unless_present && self.client.head(&ac)? {
            return Ok(0);
        }
        let out = entry.out();
        let mut files = Vec::new();
        for f in &meta.files {
            let p = if f.path.is_empty() {
                out.clone()
            } else {
                out.join(&f.path)
            };
            // One pass gives the blob's name and re-checks the local record: an entry
            // damaged since it was published is not offered to the fleet.
            let d = crate::cache::digest_in_cache(&p, Digester::with_sha256())
                .with_context(|| format!("reading {}", p.display()))
                .map_err(Self::local)?;
            if d.size != f.size || d.blake3 != f.blake3 {
                self.warn(Notice::RemoteMismatch { path: p.clone() });
                return Ok(0);
            }
            let sha256 = d.sha256.expect("asked for");
            files.push((
                RemoteFile {
                    path: f.path.clone(),
                    size: f.size,
                    sha256,
                    blake3: f.blake3.clone(),
                },
                p,
            ));
        }
        let sent = AtomicU64::new(0);
        each_parallel(&files, BLOB_WIDTH, |(f, p)| {
            let cas = format!("cas/{}", f.sha256);
            if self.client.head(&cas)? {
                return Ok(());
            }
            let file = fs::File::open(p)
                .with_context(|| format!("reading {}", p.display()))
                .map_err(Self::local)?;
            self.client.put(&cas, file)?;
            sent.fetch_add(f.size, Ordering::Relaxed);
            self.counters.bytes_up.fetch_add(f.size, Ordering::Relaxed);
            Ok(())
        })?;
        let rec = Record {
            format: record::FORMAT,
            kind: meta.kind,
            key: meta.key.clone(),
            files: files.into_iter().map(|(f, _)| f).collect(),
            deps: meta.deps.clone(),
            built_by: meta.built_by.clone(),
            duration_secs: meta.duration_secs,
            // One scheme: the signature this entry carries locally, made here.
            signature: self.keys.signature(meta),
        };
        let body = serde_json::to_vec(&rec).expect("record serializes");
        self.client.put(&ac, body)?;
        self.counters.uploaded.fetch_add(1, Ordering::Relaxed);
        Ok(sent.into_inner())
    }

    /// Which of these keys the server has a record for (HEAD only, for `--plan`).
    /// A failure counts as "not there", with a warning (exit 3 under `--remote-required`).
    pub fn has_records(&self, keys: &[&str]) -> Result<Vec<bool>> {
        let found: Vec<AtomicBool> = keys.iter().map(|_| AtomicBool::new(false)).collect();
        let idx: Vec<usize> = (0..keys.len()).collect();
        let r = each_parallel(&idx, HEAD_WIDTH, |&i| {
            if self.reads_off.load(Ordering::SeqCst) {
                return Ok(());
            }
            match self.client.head(&format!("ac/{}", keys[i])) {
                Ok(b) => {
                    found[i].store(b, Ordering::Relaxed);
                    Ok(())
                }
                Err(f) if f.is_infra() => Err(Error::Remote(f)),
                Err(f) => {
                    self.warn(Notice::RemoteFailed {
                        failure: f.to_string(),
                        off: None,
                    });
                    Ok(())
                }
            }
        });
        if let Err(Error::Remote(f)) = r {
            self.failed(f, false)?;
        }
        Ok(found.into_iter().map(AtomicBool::into_inner).collect())
    }

    pub fn totals(&self) -> Totals {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Totals {
            hits: g(&c.hits),
            misses: g(&c.misses),
            bytes_down: g(&c.bytes_down),
            bytes_up: g(&c.bytes_up),
            uploaded: g(&c.uploaded),
            failures: g(&c.failures),
        }
    }
}

impl Totals {
    /// For the warm summary and `cache stats`.
    pub fn line(&self) -> String {
        format!(
            "{} hits, {} misses, {} down, {} up ({} entries uploaded){}",
            self.hits,
            self.misses,
            short_size(self.bytes_down),
            short_size(self.bytes_up),
            self.uploaded,
            if self.failures > 0 {
                format!(", {} failed requests", self.failures)
            } else {
                String::new()
            }
        )
    }
}

/// Remember this warm's remote counters for `cache stats` (forget them when the warm ran
/// without a remote, so the stats never describe an older run).
pub fn save_totals(store: &Store, remote: Option<&Remote>) {
    let path = store.root.join(STATS_FILE);
    match remote {
        Some(r) => {
            if let Ok(b) = serde_json::to_vec_pretty(&r.totals()) {
                let _ = fsutil::write_atomic(&path, &b);
            }
        }
        None => {
            let _ = fs::remove_file(&path);
        }
    }
}

/// What the remote cache moved in the last warm; None when it ran without one.
pub fn last_totals(store: &Store) -> Option<Totals> {
    fsutil::read_kept(&store.root.join(STATS_FILE), fsutil::Cap::SMALL)
        .and_then(|b| serde_json::from_slice::<Totals>(&b).ok())
}

/// The `cache stats` line about the remote in the last warm.
pub fn stats_text(store: &Store) -> String {
    match last_totals(store) {
        Some(t) => format!("last warm, remote: {}\n", t.line()),
        None => "last warm, remote: not used\n".into(),
    }
}

/// Run `f` over `items` on at most `width` threads; the first error stops the rest.
fn each_parallel<T: Sync>(
    items: &[T],
    width: usize,
    f: impl Fn(&T) -> Result<(), Error> + Sync,
) -> Result<(), Error> {
    if items.len() <= 1 {
        return items.iter().try_for_each(&f);
    }
    let next = AtomicUsize::new(0);
    let first: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..width.min(items.len()) {
            s.spawn(|| loop {
                if first
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .is_some()
                {
                    break;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(item) = items.get(i) else { break };
                if let Err(e) = f(item) {
                    first
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .get_or_insert(e);
                    break;
                }
            });
        }
    });
    match first.into_inner().expect("first error") {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
