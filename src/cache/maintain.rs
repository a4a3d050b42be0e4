//! `scenerun cache stats | verify | prune | clean`. Prune never evicts an entry used in
//! the last 24 h (a device phase may still be queued for it); prune and clean never
//! remove one whose key lock is held (being built, hit-checked or published), and never
//! count a removal that failed. Every command first checks the directory is a cache
//! (`Store::check`); nothing here follows a link (docs/cache-trust.md).

use std::fs;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{read_meta, Damage, Kind, Store};
use crate::base::fsutil;
use crate::base::notice::Notice;
use crate::base::units::short_size;

pub const RECENT: Duration = Duration::from_secs(24 * 3600);

/// How long a warm that put nothing new in the cache may skip its prune after a prune
/// with the same limits (docs/cache.md): the prune walks every entry, and what it would
/// evict then is only what aged past a limit since, an hour late at most.
pub const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// The limits of the last prune that ran to its end (`last-prune.json`); the file's
/// mtime says when it ended.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct LastPrune {
    max_age_secs: u64,
    max_size: Option<u64>,
}

const LAST_PRUNE: &str = "last-prune.json";

/// Whether a prune with these limits ended less than `PRUNE_EVERY` ago.
pub fn pruned_lately(store: &Store, max_age: Duration, max_size: Option<u64>) -> bool {
    let path = store.root.join(LAST_PRUNE);
    let Some(bytes) = fsutil::read_kept(&path, fsutil::Cap::SMALL) else {
        return false;
    };
    let same = serde_json::from_slice::<LastPrune>(&bytes).is_ok_and(|l| {
        l == LastPrune {
            max_age_secs: max_age.as_secs(),
            max_size,
        }
    });
    let since = fs::symlink_metadata(&path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok());
    same && since.is_some_and(|d| d < PRUNE_EVERY)
}

/// Hits and misses of the last warm, for `cache stats`.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct LastWarm {
    pub hits: usize,
    pub built: usize,
    pub failed: usize,
    pub wall_secs: f64,
}

impl LastWarm {
    pub fn save(&self, store: &Store) {
        if let Ok(b) = serde_json::to_vec_pretty(self) {
            let _ = fsutil::write_atomic(&store.root.join("last-warm.json"), &b);
        }
    }
}

/// Entries and bytes per kind, in `Kind::ALL` order: one walk over the entries.
fn kind_totals(store: &Store) -> Vec<(Kind, usize, u64)> {
    let mut totals: Vec<(Kind, usize, u64)> = Kind::ALL.iter().map(|&k| (k, 0, 0)).collect();
    for (kind, _, dir) in store.entries() {
        let bytes = read_meta(&dir)
            .ok()
            .flatten()
            .map(|m| m.bytes())
            .unwrap_or(0);
        if let Some(t) = totals.iter_mut().find(|t| t.0 == kind) {
            t.1 += 1;
            t.2 += bytes;
        }
    }
    totals
}

/// The summary the last warm left in the cache dir, if any.
fn last_warm(store: &Store) -> Option<LastWarm> {
    fsutil::read_kept(&store.root.join("last-warm.json"), fsutil::Cap::SMALL)
        .and_then(|b| serde_json::from_slice::<LastWarm>(&b).ok())
}

pub fn stats(store: &Store) -> Result<String> {
    store.check()?;
    let mut out = format!("cache {}\n", store.root.display());
    let mut total = (0usize, 0u64);
    for (kind, n, bytes) in kind_totals(store) {
        total.0 += n;
        total.1 += bytes;
        out.push_str(&format!(
            "  {:<8} {n:>6} entries  {:>10}\n",
            kind.name(),
            short_size(bytes)
        ));
    }
    out.push_str(&format!(
        "  {:<8} {:>6} entries  {:>10}\n",
        "total",
        total.0,
        short_size(total.1)
    ));
    match last_warm(store) {
        Some(w) => out.push_str(&format!(
            "last warm: {} hits, {} misses ({} built, {} failed), {:.1}s\n",
            w.hits,
            w.built + w.failed,
            w.built,
            w.failed,
            w.wall_secs
        )),
        None => out.push_str("last warm: none recorded\n"),
    }
    Ok(out)
}

/// `cache stats --format json`: the same figures as the text, for scripts.
pub fn stats_json(store: &Store) -> Result<serde_json::Value> {
    store.check()?;
    let mut kinds = serde_json::Map::new();
    let (mut n_all, mut b_all) = (0usize, 0u64);
    for (kind, n, bytes) in kind_totals(store) {
        n_all += n;
        b_all += bytes;
        kinds.insert(
            kind.name().to_string(),
            serde_json::json!({"entries": n, "bytes": bytes}),
        );
    }
    let last = last_warm(store).map(|w| {
        serde_json::json!({
            "hits": w.hits,
            "misses": w.built + w.failed,
            "built": w.built,
            "failed": w.failed,
            "wall_secs": w.wall_secs,
        })
    });
    Ok(serde_json::json!({
        "version": 1,
        "cache_dir": store.root.display().to_string(),
        "kinds": kinds,
        "total": {"entries": n_all, "bytes": b_all},
        "last_warm": last,
        "last_warm_remote": super::remote::last_totals(store),
    }))
}

/// Re-hash every entry. Returns the number of corrupt entries; with `fix` they are removed.
pub fn verify(store: &Store, fix: bool, report: &mut dyn FnMut(String)) -> Result<usize> {
    store.check()?;
    let mut bad = 0;
    let mut failed_removals = Vec::new();
    // A link or file where a shard or entry directory belongs: corrupt, never followed;
    // `--fix` removes the link itself.
    let strays = store.strays();
    for (kind, path) in &strays {
        bad += 1;
        let found = fsutil::node(path)
            .map(|n| n.describe())
            .unwrap_or("unreadable");
        report(format!(
            "corrupt {} {}: {found} where a directory belongs",
            kind.name(),
            path.strip_prefix(&store.root).unwrap_or(path).display()
        ));
        if fix {
            match store.discard(path) {
                Ok(()) => report(format!("removed {}", path.display())),
                Err(e) => failed_removals.push(format!("{}: {e}", path.display())),
            }
        }
    }
    let entries = store.entries();
    for (kind, key, dir) in &entries {
        if let Err(why) = verify_entry(*kind, key, dir) {
            bad += 1;
            report(format!("corrupt {} {}: {why}", kind.name(), key));
            if fix {
                // Hold the key lock so a concurrent warm does not see a half-removed entry.
                let _lock = store.lock_key(*kind, key)?;
                // Look again under the lock: a warm may have replaced it since.
                if verify_entry(*kind, key, dir).is_ok() {
                    report(format!("kept {} {}: rebuilt meanwhile", kind.name(), key));
                    continue;
                }
                match store.discard(dir) {
                    Ok(()) => report(format!("removed {} {}", kind.name(), key)),
                    Err(e) => failed_removals.push(format!("{} {key}: {e}", kind.name())),
                }
            }
        }
    }
    report(format!(
        "verified {} entries: {} intact, {bad} corrupt",
        entries.len() + strays.len(),
        entries.len() + strays.len() - bad
    ));
    removal_errors(store, &failed_removals)?;
    Ok(bad)
}

fn verify_entry(kind: Kind, key: &str, dir: &std::path::Path) -> Result<(), Damage> {
    let meta = read_meta(dir)?.ok_or(Damage::RecordMissing)?;
    if meta.key != key || meta.kind != kind {
        return Err(Damage::OtherKey);
    }
    let out = dir.join("out");
    // The listing first: no path in the record may leave `out`, nothing is followed.
    super::guard::check_listing(&out, &meta.files)?;
    for f in &meta.files {
        let p = if f.path.is_empty() {
            out.clone()
        } else {
            out.join(&f.path)
        };
        let d =
            super::digest_in_cache(&p, super::Digester::new()).map_err(|e| Damage::CannotRead {
                path: f.path.clone(),
                error: e.to_string(),
            })?;
        if d.blake3 != f.blake3 {
            return Err(Damage::Content(f.path.clone()));
        }
    }
    Ok(())
}

/// Removals that failed: reported by the caller, and the command exits 3.
fn removal_errors(store: &Store, failed: &[String]) -> Result<()> {
    if failed.is_empty() {
        return Ok(());
    }
    Err(crate::base::error::err!(
        Infra,
        "cache {}: could not remove {} entr{} (not counted as removed):\n  {}",
        store.root.display(),
        failed.len(),
        if failed.len() == 1 { "y" } else { "ies" },
        failed.join("\n  ")
    ))
}

/// What a prune did, as it reports it.
struct Pruned {
    removed: usize,
    freed: u64,
    /// The cache's size after it (counted only when a size cap is set).
    total: u64,
    in_use: usize,
}

impl Pruned {
    fn report(&self, max_size: Option<u64>, report: &mut dyn FnMut(Notice)) {
        let Pruned {
            removed,
            freed,
            total,
            in_use,
        } = *self;
        report(Notice::Pruned {
            removed,
            freed,
            now: max_size.map(|_| total),
        });
        if in_use > 0 {
            report(Notice::PruneKeptBusy { count: in_use });
        }
        if let Some(cap) = max_size.filter(|&cap| total > cap) {
            report(Notice::PruneOverCap { total, cap });
        }
    }
}

/// Evict by age, then by size (least recently used first), never a recent entry.
pub fn prune(
    store: &Store,
    max_age: Duration,
    max_size: Option<u64>,
    report: &mut dyn FnMut(Notice),
) -> Result<()> {
    store.check()?;
    let mut failed_removals = Vec::new();
    let mut in_use = 0usize;
    let now = SystemTime::now();
    let entry_bytes = |dir: &std::path::Path| {
        read_meta(dir)
            .ok()
            .flatten()
            .map(|m| m.bytes())
            .unwrap_or(0)
    };
    // Sizes are read only when a cap needs them (or for what is removed): after every
    // warm this runs over the whole cache, so the common case is one stat per entry.
    let sized = max_size.is_some();
    let mut live = Vec::new();
    for (kind, key, dir) in store.entries() {
        // An entry this process just marked used (the warm before this prune touched
        // its record) was used now: no need to ask its mtime.
        let used = if store.touched_now(kind, &key) {
            now
        } else {
            fs::symlink_metadata(dir.join("meta.json"))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        let bytes = if sized { entry_bytes(&dir) } else { 0 };
        live.push((used, kind, key, dir, bytes));
    }
    live.sort_by_key(|e| e.0);
    let mut total: u64 = live.iter().map(|e| e.4).sum();
    let (mut removed, mut freed) = (0usize, 0u64);
    for (used, kind, key, dir, bytes) in &live {
        let age = now.duration_since(*used).unwrap_or_default();
        let too_old = age > max_age;
        let too_big = max_size.is_some_and(|cap| total > cap);
        if !(too_old || too_big) || age < RECENT {
            continue;
        }
        // Skip entries someone is building or publishing right now.
        let _lock = match store.try_lock_key(*kind, key) {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                in_use += 1;
                report(Notice::PruneKeptInUse {
                    kind: kind.name(),
                    key: key.clone(),
                });
                continue;
            }
            Err(e) => {
                failed_removals.push(format!("{} {key}: cannot take its lock: {e}", kind.name()));
                continue;
            }
        };
        // Look again under the lock: a warm may have used (touched) it since the listing.
        let used_now = fs::symlink_metadata(dir.join("meta.json"))
            .and_then(|m| m.modified())
            .unwrap_or(*used);
        let age_now = now.duration_since(used_now).unwrap_or_default();
        if age_now < RECENT || (age_now <= max_age && !too_big) {
            continue;
        }
        let bytes = if sized { *bytes } else { entry_bytes(dir) };
        match store.discard(dir) {
            Ok(()) => {
                total = total.saturating_sub(bytes);
                removed += 1;
                freed += bytes;
            }
            Err(e) => failed_removals.push(format!("{} {key}: {e}", kind.name())),
        }
    }
    let pruned = Pruned {
        removed,
        freed,
        total,
        in_use,
    };
    pruned.report(max_size, report);
    removal_errors(store, &failed_removals)?;
    let done = LastPrune {
        max_age_secs: max_age.as_secs(),
        max_size,
    };
    if let Ok(b) = serde_json::to_vec(&done) {
        let _ = fsutil::write_atomic(&store.root.join(LAST_PRUNE), &b);
    }
    Ok(())
}

/// What `cache clean` did.
#[derive(Debug, Default)]
pub struct Cleaned {
    pub removed: usize,
    /// Entries whose key lock another scenerun holds: kept.
    pub in_use: Vec<String>,
}

/// Remove every entry nobody is using (its key lock is free), and every stray link or
/// file among the entries (the link itself). A removal that fails is exit 3.
pub fn clean(store: &Store) -> Result<Cleaned> {
    store.check()?;
    let mut done = Cleaned::default();
    let mut failed_removals = Vec::new();
    for (_, path) in store.strays() {
        if let Err(e) = store.discard(&path) {
            failed_removals.push(format!("{}: {e}", path.display()));
        }
    }
    for (kind, key, dir) in store.entries() {
        let _lock = match store.try_lock_key(kind, &key) {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                done.in_use.push(format!("{} {key}", kind.name()));
                continue;
            }
            Err(e) => {
                failed_removals.push(format!("{} {key}: cannot take its lock: {e}", kind.name()));
                continue;
            }
        };
        match store.discard(&dir) {
            Ok(()) => done.removed += 1,
            Err(e) => failed_removals.push(format!("{} {key}: {e}", kind.name())),
        }
    }
    store.sweep_tmp();
    removal_errors(store, &failed_removals)?;
    Ok(done)
}
