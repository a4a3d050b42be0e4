//! Small file-system helpers shared by the cache, the warm record and the reports, and
//! the checked opens that keep scenerun inside its cache: `lstat` before walking,
//! `O_NOFOLLOW` for files inside the cache, `O_NONBLOCK` + `fstat` so a FIFO or a
//! device is refused instead of blocking or being read forever (docs/cache-trust.md).

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Write a file so that readers see the old content or the new, never a torn one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |f| f.write_all(bytes))
}

/// `write_atomic` of what `write` streams into the file (through a buffer): a large
/// document need not exist whole in memory first.
pub fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id(),
        unique()
    ));
    let result = (|| {
        let mut f = io::BufWriter::new(fs::File::create(&tmp)?);
        write(&mut f)?;
        f.flush()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Open (creating) a file that exists only to be `flock`ed. A symlink in its place is
/// refused (ELOOP), never followed: a lock file must not create or touch anything else.
pub fn open_lock_file(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Bytes an unprivileged writer may still put on the filesystem holding `path`; None
/// when it cannot be asked.
pub fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs fills the zeroed struct it is given and reads a NUL-terminated path.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; both pointers are valid for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Make every directory from `root` down to `dir` a real one, following no link: a
/// symlink or file planted where one belongs (a report dir's `logs/<scene>`) is removed
/// and a directory made in its place; missing ones are made. `root` itself is the user's
/// choice and is only created if missing.
pub fn real_dirs(root: &Path, dir: &Path) -> io::Result<()> {
    fs::create_dir_all(root)?;
    let rel = dir.strip_prefix(root).map_err(|_| {
        io::Error::other(format!("{} is not under {}", dir.display(), root.display()))
    })?;
    let mut at = root.to_path_buf();
    for c in rel.components() {
        at.push(c);
        match node(&at)? {
            Node::Dir => continue,
            Node::Missing => {}
            // Never followed, never written through: the link (or file) itself goes.
            // Steps of one scene start their logs in parallel: another may have
            // removed it (and made the directory) since we looked.
            _ => remove_file_if_there(&at)?,
        }
        match fs::create_dir(&at) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && node(&at)? == Node::Dir => {}
            other => other?,
        }
    }
    Ok(())
}

/// Remove a file or link; already gone, or already replaced by a directory (by a
/// step starting its log beside ours), is fine.
fn remove_file_if_there(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(_) if node(path)? == Node::Dir => Ok(()),
        other => other,
    }
}

/// Start a log at `path`, under `root` (`real_dirs`), with `header`: created or truncated,
/// never through a link (one in its place is removed).
pub fn start_log(root: &Path, path: &Path, header: &str) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    real_dirs(root, path.parent().unwrap_or(root))?;
    if node(path)? == Node::Symlink {
        remove_file_if_there(path)?;
    }
    let mut f = fs::File::options()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.write_all(header.as_bytes())
}

/// Open a log for appending, never through a link (ELOOP if one is there).
pub fn append_log(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::File::options()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// A number unique within this process.
pub fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Remove a file or a directory tree; absent is fine. A tree scenerun made read-only
/// (a published entry: directories 0555) is made writable first, directory by
/// directory and never through a link, when removing it as it is is refused.
pub fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => match fs::remove_dir_all(path) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                dirs_writable(path)?;
                fs::remove_dir_all(path)
            }
            other => other,
        },
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Give every directory under `root` (itself included) its owner's write and search
/// bits, walking by `lstat`: links are neither followed nor changed.
fn dirs_writable(root: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let m = fs::symlink_metadata(&dir)?;
        if !m.is_dir() {
            continue;
        }
        fs::set_permissions(
            &dir,
            fs::Permissions::from_mode(m.permissions().mode() | 0o700),
        )?;
        for e in fs::read_dir(&dir)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok(())
}

/// Make a published tree read-only to whoever uses it: every write bit removed, so
/// regular files are 0444 (0555 when executable: a kernel object is run), directories
/// 0555. Nothing is followed; only what `walk_files` accepts is there.
pub fn make_read_only(root: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let read_only = |p: &Path, m: &fs::Metadata| {
        let mode = m.permissions().mode() & 0o7777;
        let want = if mode & 0o111 != 0 { 0o555 } else { 0o444 };
        fs::set_permissions(p, fs::Permissions::from_mode(want))
    };
    let meta = fs::symlink_metadata(root)?;
    if meta.is_file() {
        return read_only(root, &meta);
    }
    let mut dirs = vec![root.to_path_buf()];
    let mut i = 0;
    while i < dirs.len() {
        for e in fs::read_dir(&dirs[i])? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                dirs.push(e.path());
            } else if t.is_file() {
                read_only(&e.path(), &e.metadata()?)?;
            }
        }
        i += 1;
    }
    for d in dirs.iter().rev() {
        fs::set_permissions(d, fs::Permissions::from_mode(0o555))?;
    }
    Ok(())
}

/// Every regular file under `root` (root itself if it is a file), relative paths with `/`,
/// sorted. Symlinks are an error: an artifact must be self-contained.
pub fn walk_files(root: &Path) -> io::Result<Vec<(String, u64)>> {
    Ok(walk_stamped(root)?
        .into_iter()
        .map(|(p, s)| (p, s.size))
        .collect())
}

/// `walk_files` with each file's `Stamp` (from the same `lstat`).
pub fn walk_stamped(root: &Path) -> io::Result<Vec<(String, Stamp)>> {
    Ok(walk(root, usize::MAX, Others::Refuse)?.0)
}

/// The regular files under directory `root` (relative paths with `/`, sorted), at most
/// `max` of them (true: there were more), never following a link: links and special
/// files are left out. What a step left behind, listed without trusting it.
pub fn walk_regular(root: &Path, max: usize) -> io::Result<(Vec<String>, bool)> {
    let (files, more) = walk(root, max, Others::Skip)?;
    Ok((files.into_iter().map(|(p, _)| p).collect(), more))
}

/// What a walk does with a link or a special file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Others {
    /// An error: an artifact must be self-contained.
    Refuse,
    /// Left out.
    Skip,
}

/// The one walker: regular files under `root` (root itself if it is one), by `lstat`,
/// at most `max` (true: more were there), sorted.
fn walk(root: &Path, max: usize, others: Others) -> io::Result<(Vec<(String, Stamp)>, bool)> {
    let mut out = Vec::new();
    let meta = fs::symlink_metadata(root)?;
    if meta.is_file() {
        out.push((String::new(), Stamp::of(&meta)));
        return Ok((out, false));
    }
    let not_regular = |p: &Path| {
        io::Error::other(format!(
            "{} is not a regular file (symlinks and special files cannot be cached)",
            p.display()
        ))
    };
    if !meta.is_dir() {
        return Err(not_regular(root));
    }
    let mut more = false;
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for e in fs::read_dir(&dir)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().to_string();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let ft = e.file_type()?;
            if ft.is_dir() {
                stack.push((e.path(), rel));
            } else if ft.is_file() {
                if out.len() >= max {
                    more = true;
                    continue;
                }
                out.push((rel, Stamp::of(&e.metadata()?)));
            } else if others == Others::Refuse {
                return Err(not_regular(&e.path()));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((out, more))
}

/// True when an I/O error means the disk or quota is full.
pub fn is_disk_full(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EFBIG) | Some(libc::EDQUOT)
    )
}

/// What `lstat` found at a path (never following a symlink).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Missing,
    Dir,
    File,
    Symlink,
    /// A FIFO, socket or device.
    Special,
}

impl Node {
    pub fn describe(self) -> &'static str {
        match self {
            Node::Missing => "missing",
            Node::Dir => "a directory",
            Node::File => "a regular file",
            Node::Symlink => "a symlink",
            Node::Special => "a special file (FIFO, socket or device)",
        }
    }
}

/// `lstat` a path: what is there, without following a symlink.
pub fn node(path: &Path) -> io::Result<Node> {
    match fs::symlink_metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            Ok(if t.is_symlink() {
                Node::Symlink
            } else if t.is_dir() {
                Node::Dir
            } else if t.is_file() {
                Node::File
            } else {
                Node::Special
            })
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Node::Missing),
        Err(e) => Err(e),
    }
}

/// The error for a path that must be a regular file and is not (a FIFO, a device, a
/// directory, or a symlink where links are not followed).
#[derive(Debug)]
pub struct NotRegular {
    pub path: std::path::PathBuf,
    pub found: &'static str,
}

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is {}, not a regular file",
            self.path.display(),
            self.found
        )
    }
}

impl std::error::Error for NotRegular {}

pub fn not_regular(path: &Path, found: &'static str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        NotRegular {
            path: path.to_path_buf(),
            found,
        },
    )
}

/// True when an I/O error says the path was not a regular file.
pub fn is_not_regular(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<NotRegular>().is_some())
}

fn open_checked(path: &Path, follow: bool) -> io::Result<fs::File> {
    open_checked_len(path, follow).map(|(f, _)| f)
}

/// `open_checked`, and the file's size from the same `fstat`.
fn open_checked_len(path: &Path, follow: bool) -> io::Result<(fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let f = match fs::File::options()
        .read(true)
        .custom_flags(flags)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) && !follow => {
            return Err(not_regular(path, "a symlink"))
        }
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    let t = meta.file_type();
    if !t.is_file() {
        let found = if t.is_dir() {
            "a directory"
        } else {
            "a special file (FIFO, socket or device)"
        };
        return Err(not_regular(path, found));
    }
    Ok((f, meta.len()))
}

/// Open a regular file for reading, following symlinks (a checkout may link its
/// sources), but never blocking on a FIFO and never reading a device or a directory.
pub fn open_regular(path: &Path) -> io::Result<fs::File> {
    open_checked(path, true)
}

/// Open a regular file for reading inside the cache: a symlink at the last component is
/// refused, never followed; a FIFO never blocks.
pub fn open_regular_nofollow(path: &Path) -> io::Result<fs::File> {
    open_checked(path, false)
}

/// What tells whether a file changed without reading it: size, mtime and ctime (ns
/// since the epoch), inode. A rewrite by rename gives a new inode, an edit in place new
/// times, and no process can set a ctime back. The stat memo, the manifest memo's binary
/// and the warm record all compare files by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stamp {
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub ino: u64,
}

impl Stamp {
    pub fn of(m: &fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Stamp {
            size: m.len(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
            ino: m.ino(),
        }
    }

    /// The stamp of the file at `path` (links followed); None when it cannot be stat'ed.
    pub fn at(path: &Path) -> Option<Stamp> {
        fs::metadata(path).ok().map(|m| Stamp::of(&m))
    }
}

/// When `path` last changed, by the clock the filesystem stamps files with (its ctime,
/// ns since the epoch): stat a file just written to learn "now" on that clock, so that
/// a file changed after it has a ctime not before it, on any filesystem with fine
/// timestamps. Cannot be read: the system clock, less a tick of that coarse clock.
pub fn file_clock_at(path: &Path) -> i128 {
    match Stamp::at(path) {
        Some(s) => s.ctime_ns,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128 - 10_000_000),
    }
}

/// Whether the file at `path` changed (ctime) at or after `since` (`file_clock_at`), or
/// is gone.
pub fn changed_since(path: &Path, since: i128) -> bool {
    Stamp::at(path).is_none_or(|s| s.ctime_ns >= since)
}

/// The most scenerun reads of one kind of file it keeps or is handed (docs/guarantees.md,
/// "Bounds"): a file past its cap is damaged, never read. `what` names the kind in
/// messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    pub what: &'static str,
    pub bytes: u64,
}

const MIB: u64 = 1 << 20;

impl Cap {
    /// An entry's integrity record, `meta.json` (10,000 files make 1 MB).
    pub const META: Cap = Cap::new("an integrity record (meta.json)", 64 * MIB);
    /// `history.json`, `inputs.json` (the key-input records) in the cache.
    pub const HISTORY: Cap = Cap::new("the step history", 64 * MIB);
    pub const KEY_INPUTS: Cap = Cap::new("the key-input records", 64 * MIB);
    /// Small bookkeeping files: the marker, `last-prune.json`, `last-warm.json`, the
    /// remote statistics.
    pub const SMALL: Cap = Cap::new("a cache bookkeeping file", MIB);
    /// A cached `scenes_from` output: the generator's own cap and its header.
    pub const GENERATED: Cap = Cap::new("a cached scenes_from output", 64 * MIB + 4096);
    /// The memos and records of the job dir.
    pub const STAT_MEMO: Cap = Cap::new("the stat memo", 256 * MIB);
    pub const CLOSURE_MEMO: Cap = Cap::new("the include-closure memo", 256 * MIB);
    pub const MANIFEST_MEMO: Cap = Cap::new("the kept manifest (manifest.json)", 256 * MIB);
    pub const WARM_RECORD: Cap = Cap::new("the warm record (warm.json)", 256 * MIB);
    /// What a device phase writes and reads back: the frozen plan, the results.
    pub const DEVICE_RUN: Cap = Cap::new("a device run's plan or results", 256 * MIB);
    /// `report.json` and `trace.json` of a report dir.
    pub const REPORT: Cap = Cap::new("a report (report.json)", 256 * MIB);
    pub const TRACE: Cap = Cap::new("a trace (trace.json)", 256 * MIB);
    /// The manifest, `scenes.yaml`.
    pub const MANIFEST: Cap = Cap::new("a manifest", 64 * MIB);
    /// A step's depfile.
    pub const DEPFILE: Cap = Cap::new("a depfile", 64 * MIB);
    /// What a kept compile printed (`compiled` entries' stdout and stderr).
    pub const COMPILER_MESSAGES: Cap = Cap::new("a kept compile's messages", 16 * MIB);

    pub const fn new(what: &'static str, bytes: u64) -> Cap {
        Cap { what, bytes }
    }
}

/// The error for a file larger than its kind's cap (found by `fstat`, before a byte is
/// read).
#[derive(Debug)]
pub struct TooLarge {
    pub path: std::path::PathBuf,
    pub size: u64,
    pub cap: Cap,
}

impl std::fmt::Display for TooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} has {} bytes, more than {} may have ({} MiB)",
            self.path.display(),
            self.size,
            self.cap.what,
            self.cap.bytes >> 20
        )
    }
}

impl std::error::Error for TooLarge {}

/// True when an I/O error says the file was over its cap.
pub fn is_too_large(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<TooLarge>().is_some())
}

/// Read a whole regular file of one kind, the one bounded read of every file scenerun
/// keeps or is handed (cache records, memos, reports): opened without following a link
/// at its last component (`O_NOFOLLOW`) and without blocking on a FIFO
/// (`O_NONBLOCK`), checked to be a regular file and at most `cap` bytes by `fstat`
/// before anything is allocated. A file that grows past the cap while it is read is an
/// error too: at most `cap` + 1 bytes are ever read, so a sparse 1 TiB file costs one
/// `fstat`.
pub fn read_capped(path: &Path, cap: Cap) -> io::Result<Vec<u8>> {
    let (f, len) = open_checked_len(path, false)?;
    read_all_capped(f, len, path, cap)
}

/// `read_capped` of a file scenerun keeps for itself (a memo, the history, a record):
/// None when it is absent or cannot be used, which costs only what the file saved. One
/// that is there but over its cap, a link or a special file is damaged: a warning
/// posted once per process (`warning`), then treated as absent (it is rewritten whole by the
/// next save).
pub fn read_kept(path: &Path, cap: Cap) -> Option<Vec<u8>> {
    match read_capped(path, cap) {
        Ok(bytes) => Some(bytes),
        Err(e) if is_too_large(&e) || is_not_regular(&e) => {
            crate::base::warning::post(crate::base::notice::Notice::Damaged {
                error: e.to_string(),
            });
            None
        }
        Err(_) => None,
    }
}

/// `read_capped` for a file a link may name (the manifest in a checkout).
pub fn read_capped_following(path: &Path, cap: Cap) -> io::Result<Vec<u8>> {
    let (f, len) = open_checked_len(path, true)?;
    read_all_capped(f, len, path, cap)
}

/// `read_all` of an opened file whose `fstat` gave `len`, refusing more than `cap`.
pub fn read_all_capped(f: fs::File, len: u64, path: &Path, cap: Cap) -> io::Result<Vec<u8>> {
    let too_large = |size| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            TooLarge {
                path: path.to_path_buf(),
                size,
                cap,
            },
        )
    };
    if len > cap.bytes {
        return Err(too_large(len));
    }
    let bytes = read_all(f, len, cap.bytes)?;
    if bytes.len() as u64 > cap.bytes {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// The rest of an open regular file whose size an `fstat` just gave (at most `cap` + 1
/// bytes, whatever it grows to meanwhile): one buffer of that size, read through `take`
/// so std does not probe the size again (an `fstat` and an `lseek` per read: thousands
/// of records per plan). The first read asks for one byte more than the size: a
/// regular file gives fewer bytes than asked only at its end, so a file that did not
/// grow takes one `read`, not a second one to find the end.
fn read_all(mut f: fs::File, len: u64, cap: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let len = len.min(cap);
    let mut buf = vec![0u8; len as usize + 1];
    let n = loop {
        match f.read(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => break other?,
        }
    };
    buf.truncate(n);
    if n == len as usize + 1 {
        // It grew: read on, to one byte past the cap at most.
        f.take(cap.saturating_add(1).saturating_sub(n as u64))
            .read_to_end(&mut buf)?;
    }
    Ok(buf)
}

/// Create a directory that must be a real one: an existing directory is fine; a symlink
/// or file in its place is an error naming what was found (nothing is followed).
pub fn ensure_real_dir(path: &Path) -> io::Result<()> {
    match node(path)? {
        Node::Dir => Ok(()),
        Node::Missing => match fs::create_dir(path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && node(path)? == Node::Dir => {
                Ok(())
            }
            Err(e) => Err(e),
        },
        other => Err(io::Error::other(format!(
            "{} is {}, not a directory",
            path.display(),
            other.describe()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps of one scene start their logs at once; a link planted at the scene's log
    /// directory is replaced by one of them, and none of them fails for it.
    #[test]
    fn logs_started_in_parallel_over_a_planted_link_all_start() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("job");
        let victim = tmp.path().join("victim");
        fs::create_dir_all(&victim).unwrap();
        let mut failures = Vec::new();
        for round in 0..200 {
            let _ = remove_any(&root);
            fs::create_dir_all(root.join("logs")).unwrap();
            std::os::unix::fs::symlink(&victim, root.join("logs/s0")).unwrap();
            let barrier = std::sync::Barrier::new(6);
            std::thread::scope(|t| {
                let handles: Vec<_> = (0..6)
                    .map(|k| {
                        let (root, barrier) = (&root, &barrier);
                        t.spawn(move || {
                            barrier.wait();
                            let log = root.join(format!("logs/s0/step{k}.log"));
                            start_log(root, &log, "header\n")
                        })
                    })
                    .collect();
                for h in handles {
                    if let Err(e) = h.join().unwrap() {
                        failures.push(format!("round {round}: {e}"));
                    }
                }
            });
        }
        assert!(
            failures.is_empty(),
            "{} failed: {:?}",
            failures.len(),
            &failures[..failures.len().min(3)]
        );
        assert_eq!(
            fs::read_dir(&victim).unwrap().count(),
            0,
            "written through the link"
        );
    }
}
