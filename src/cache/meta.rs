//! The integrity record, `meta.json`: what an entry holds (each file's size and BLAKE3)
//! and the depfile entries re-checked on every hit; how a lookup reads it cheaply
//! (`MetaView`, strings borrowed where JSON lets them be) and how it is read in full.

use std::borrow::Cow;
use std::io;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{Damage, Kind, LAYOUT};
use crate::base::fsutil;

/// One file of an entry, as recorded at publish time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileRecord {
    /// Relative to the entry's `out` ("" when `out` is itself the file).
    pub path: String,
    pub size: u64,
    pub blake3: String,
    /// Its size, times and inode once it was published read-only (or last confirmed):
    /// any change since (a step writing into `{fixture}`, even as root) shows here
    /// before the entry is served again. Valid in the copy of the entry `Meta::copy`
    /// names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<crate::base::fsutil::Stamp>,
}

impl FileRecord {
    pub fn new(path: String, size: u64, blake3: String) -> FileRecord {
        FileRecord {
            path,
            size,
            blake3,
            stamp: None,
        }
    }
}

/// Which copy of an entry the file stamps were taken in: its directory's device and
/// inode. A cache restored from an archive, or copied, has other ones: its stamps say
/// nothing there, and are taken again.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct CopyId {
    pub dev: u64,
    pub ino: u64,
}

impl CopyId {
    pub fn of(m: &std::fs::Metadata) -> CopyId {
        use std::os::unix::fs::MetadataExt;
        CopyId {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// A file the compiler reported reading (from its depfile), re-checked on every hit.
/// Shared strings: the records of one plan name the same few hundred files thousands of
/// times, and a hit's record holds the plan's own copy of each name and hash.
/// A dependency whose `blake3` is this is a place that must hold no regular file (a
/// header or library that would be found before one the compile read:
/// docs/compile-cache.md); a file there makes the entry stale.
pub const ABSENT: &str = "absent";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Dep {
    /// Relative to the manifest's directory when inside it, else absolute.
    pub path: Arc<str>,
    pub blake3: Arc<str>,
}

/// `meta.json` as a lookup reads it: the same fields as `Meta`, strings borrowed from the
/// record's bytes where JSON lets them be, so a record whose dependency changed costs no
/// allocation per line, and a hit's dependencies become the shared `key::DepNow` strings.
pub(super) struct MetaView<'a> {
    pub(super) layout: u32,
    pub(super) kind: Kind,
    pub(super) key: Cow<'a, str>,
    pub(super) built_by: Cow<'a, str>,
    pub(super) duration_secs: f64,
    pub(super) files: Vec<FileRecord>,
    pub(super) deps: Deps<'a>,
    pub(super) copy: Option<CopyId>,
    pub(super) signature: Option<String>,
    pub(super) stamps_seal: Option<String>,
}

/// `Meta` with `deps` left as its JSON text (checked by serde to be valid JSON).
#[derive(Deserialize)]
struct MetaRaw<'a> {
    layout: u32,
    kind: Kind,
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(borrow)]
    built_by: Cow<'a, str>,
    duration_secs: f64,
    files: Vec<FileRecord>,
    /// Absent: `[]`, as `Meta` defaults it (a `null` stays `null`, which `Meta`
    /// refuses).
    #[serde(default = "no_deps", borrow)]
    deps: &'a serde_json::value::RawValue,
    #[serde(default)]
    copy: Option<CopyId>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    stamps_seal: Option<String>,
}

fn no_deps() -> &'static serde_json::value::RawValue {
    serde_json::from_str("[]").expect("valid JSON")
}

/// A record's dependencies: its JSON text when written exactly as scenerun writes it
/// (read in place, nothing allocated per line), else what serde parsed.
pub(super) enum Deps<'a> {
    Canonical { text: &'a str, count: usize },
    Parsed(Vec<Dep>),
}

impl<'a> MetaView<'a> {
    /// Parse a record: its dependencies in place when they are written as
    /// `serde_json::to_vec(&Meta)` writes them (`canonical_count`), else (whitespace,
    /// another field order, an escape) by serde, so the answer and any error message
    /// are serde's.
    pub(super) fn parse(bytes: &'a [u8]) -> serde_json::Result<MetaView<'a>> {
        if let Ok(raw) = serde_json::from_slice::<MetaRaw<'a>>(bytes) {
            let text = raw.deps.get();
            if let Some(count) = canonical_count(text) {
                return Ok(MetaView {
                    layout: raw.layout,
                    kind: raw.kind,
                    key: raw.key,
                    built_by: raw.built_by,
                    duration_secs: raw.duration_secs,
                    files: raw.files,
                    deps: Deps::Canonical { text, count },
                    copy: raw.copy,
                    signature: raw.signature,
                    stamps_seal: raw.stamps_seal,
                });
            }
        }
        // Anything else is what serde makes of the record type itself.
        let m: Meta = serde_json::from_slice(bytes)?;
        Ok(MetaView {
            layout: m.layout,
            kind: m.kind,
            key: Cow::Owned(m.key),
            built_by: Cow::Owned(m.built_by),
            duration_secs: m.duration_secs,
            files: m.files,
            deps: Deps::Parsed(m.deps),
            copy: m.copy,
            signature: m.signature,
            stamps_seal: m.stamps_seal,
        })
    }
}

impl<'a> Deps<'a> {
    pub(super) fn len(&self) -> usize {
        match self {
            Deps::Canonical { count, .. } => *count,
            Deps::Parsed(v) => v.len(),
        }
    }

    /// (path, blake3) of each dependency, in record order.
    pub(super) fn iter(&self) -> Box<dyn Iterator<Item = (&str, &str)> + '_> {
        match self {
            Deps::Canonical { text, .. } => {
                let mut rest = match *text {
                    "[]" => "",
                    t => &t[1..],
                };
                Box::new(std::iter::from_fn(move || {
                    if rest.is_empty() {
                        return None;
                    }
                    let (path, blake3, r) =
                        canonical_step(rest).expect("checked by canonical_count");
                    rest = if r == "]" { "" } else { &r[1..] };
                    Some((path, blake3))
                }))
            }
            Deps::Parsed(v) => Box::new(v.iter().map(|d| (&*d.path, &*d.blake3))),
        }
    }
}

/// How many dependencies `text` lists when it is exactly what `serde_json::to_vec` writes
/// for them — no whitespace, `path` then `blake3`, no escape in either — else None.
/// `text` is valid JSON, so a string without a backslash is its own value: what serde
/// would give.
fn canonical_count(text: &str) -> Option<usize> {
    let mut rest = text.strip_prefix('[')?;
    if rest == "]" {
        return Some(0);
    }
    let mut n = 0;
    loop {
        let (_, _, r) = canonical_step(rest)?;
        n += 1;
        match r {
            "]" => return Some(n),
            r => rest = r.strip_prefix(',')?,
        }
    }
}

/// One `{"path":"…","blake3":"…"}` at the start of `rest`: its two strings and what
/// follows its `}`.
fn canonical_step(rest: &str) -> Option<(&str, &str, &str)> {
    /// A string's content up to its closing quote, and what follows that quote.
    fn plain(s: &str) -> Option<(&str, &str)> {
        let end = quote_or_backslash(s.as_bytes())?;
        (s.as_bytes()[end] == b'"').then(|| (&s[..end], &s[end + 1..]))
    }
    let (path, r) = plain(rest.strip_prefix(r#"{"path":""#)?)?;
    let (blake3, r) = plain(r.strip_prefix(r#","blake3":""#)?)?;
    Some((path, blake3, r.strip_prefix('}')?))
}

/// The index of the first `"` or `\` in `s`, eight bytes at a time (a record is ~9 KB
/// of such strings).
fn quote_or_backslash(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte of `x` is zero: its high bit set in the result; no false bit below the
    // first zero byte, so the lowest set bit names the first match.
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut words = s.chunks_exact(8);
    let mut at = 0;
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        let hit = zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\')));
        if hit != 0 {
            return Some(at + (hit.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'"' || b == b'\\')
        .map(|p| at + p)
}

/// The integrity record, `meta.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub layout: u32,
    pub kind: Kind,
    pub key: String,
    /// Which step built it first (informational).
    pub built_by: String,
    pub duration_secs: f64,
    pub files: Vec<FileRecord>,
    #[serde(default)]
    pub deps: Vec<Dep>,
    /// The copy of the entry its files' stamps were taken in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<CopyId>,
    /// `ed25519:<base64>` over the record without stamps, copy and signature, by the
    /// key in the manifest's `signing.key_env` (docs/cache-trust.md, "Signed entries").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// This user's seal over the stamps, `copy` and each file's BLAKE3 (`seal_stamps`):
    /// stamps are trusted only when it verifies, so stamps rewritten by whoever can
    /// write the cache make the files be re-hashed, never skip it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamps_seal: Option<String>,
}

impl Meta {
    pub fn new(
        kind: Kind,
        key: &str,
        built_by: &str,
        duration_secs: f64,
        files: Vec<FileRecord>,
        deps: Vec<Dep>,
    ) -> Meta {
        Meta {
            layout: LAYOUT,
            kind,
            key: key.to_string(),
            built_by: built_by.to_string(),
            duration_secs,
            files,
            deps,
            copy: None,
            signature: None,
            stamps_seal: None,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Ok(None): no entry. Err: an entry directory without a readable record.
pub fn read_meta(dir: &Path) -> Result<Option<Meta>, Damage> {
    match read_record(dir)? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Damage::RecordUnreadable(e.to_string())),
        None => Ok(None),
    }
}

/// The bytes of an entry's `meta.json` (see `read_meta`).
pub(super) fn read_record(dir: &Path) -> Result<Option<Vec<u8>>, Damage> {
    match fsutil::read_capped(&dir.join("meta.json"), fsutil::Cap::META) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if fsutil::node(dir).ok() != Some(fsutil::Node::Missing) {
                Err(Damage::RecordMissing)
            } else {
                Ok(None)
            }
        }
        Err(e) => Err(Damage::RecordUnreadable(e.to_string())),
    }
}

/// What the seal over an entry's stamps covers: its kind and key, the copy they were
/// taken in, and each file's path, BLAKE3 and stamp (binding the stamps to the recorded
/// content, which a signature covers). Length-prefixed.
fn stamps_body(copy: CopyId, files: &[FileRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut field = |b: &[u8]| {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        out.extend_from_slice(b);
    };
    field(&copy.dev.to_le_bytes());
    field(&copy.ino.to_le_bytes());
    for f in files {
        field(f.path.as_bytes());
        field(f.blake3.as_bytes());
        field(&f.size.to_le_bytes());
        match &f.stamp {
            Some(s) => {
                field(&s.size.to_le_bytes());
                field(&s.mtime_ns.to_le_bytes());
                field(&s.ctime_ns.to_le_bytes());
                field(&s.ino.to_le_bytes());
            }
            None => field(b"-"),
        }
    }
    out
}

const STAMPS_DOMAIN: &str = "scenerun cache stamps v1";

/// The seal of an entry's stamps taken in `copy` (see `Meta::stamps_seal`).
pub fn seal_stamps(kind: Kind, key: &str, copy: CopyId, files: &[FileRecord]) -> String {
    let name = format!("{}/{key}", kind.name());
    crate::base::seal::tag(STAMPS_DOMAIN, &name, &stamps_body(copy, files))
}

/// Whether `seal` is this user's seal of these stamps.
pub fn stamps_sealed(
    (kind, key): (Kind, &str),
    copy: CopyId,
    files: &[FileRecord],
    seal: Option<&str>,
) -> bool {
    let name = format!("{}/{key}", kind.name());
    seal.is_some_and(|t| {
        crate::base::seal::verify(STAMPS_DOMAIN, &name, &stamps_body(copy, files), t)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps_of(bytes: &[u8]) -> Vec<(String, String)> {
        MetaView::parse(bytes)
            .unwrap()
            .deps
            .iter()
            .map(|(p, h)| (p.to_string(), h.to_string()))
            .collect()
    }

    #[test]
    fn records_parse_as_serde_parses_them() {
        let dep = |p: &str, h: &str| Dep {
            path: p.into(),
            blake3: h.into(),
        };
        let file = FileRecord::new(String::new(), 3, "ff".into());
        for deps in [
            vec![],
            vec![dep("a.c", "01")],
            vec![dep("/usr/include/x.h", "02"), dep("q\"uote\\d/é.h", "03")],
        ] {
            let meta = Meta::new(Kind::Kernel, "k", "b", 0.5, vec![file.clone()], deps);
            let bytes = serde_json::to_vec(&meta).unwrap();
            let want: Vec<(String, String)> = meta
                .deps
                .iter()
                .map(|d| (d.path.to_string(), d.blake3.to_string()))
                .collect();
            assert_eq!(deps_of(&bytes), want);
            // Pretty-printed (another writer): serde's own parse, the same answer.
            assert_eq!(deps_of(&serde_json::to_vec_pretty(&meta).unwrap()), want);
        }
        let no_deps = br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[]}"#;
        assert!(deps_of(no_deps).is_empty());
        let swapped = br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[],"deps":[{"blake3":"h","path":"p"}]}"#;
        assert_eq!(deps_of(swapped), vec![("p".into(), "h".into())]);
        for bad in [
            &br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[],"deps":null}"#[..],
            br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[],"deps":[{"path":"p"}]}"#,
            br#"{"layout":1,"kind":"kernel","key":"k","built_by":"b","duration_secs":1,"files":[],"deps":[{"path":"p","blake3":"h","path":"q"}]}"#,
        ] {
            let ours = MetaView::parse(bad).err().map(|e| e.to_string());
            let serde = serde_json::from_slice::<Meta>(bad)
                .err()
                .map(|e| e.to_string());
            assert!(ours.is_some());
            assert_eq!(ours, serde);
        }
    }
}
