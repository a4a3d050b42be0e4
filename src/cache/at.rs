//! Opens relative to the cache's own directories, for the hit path: a no-op warm checks
//! thousands of entries, and every check by absolute path walks the whole path in the
//! kernel again (docs/cache-trust.md, "No symlink is followed inside the cache").
//!
//! Invariant kept here: every path is resolved with `openat2(RESOLVE_NO_SYMLINKS |
//! RESOLVE_BENEATH)` from a directory opened the same way from the cache root, and the
//! last component is `lstat`ed or opened `O_NOFOLLOW`, so no link is followed anywhere
//! inside the cache — not even if one is swapped in while scenerun runs. Every function
//! answers `Err` when it cannot give that answer (an old kernel, anything unexpected):
//! callers then take the path-by-path checks in `guard`, which name what they found.

use std::ffi::{CStr, CString};
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::OnceLock;

use super::Kind;

/// The cache's `entries/<kind>` and `locks` directories, opened once per store handle
/// on first use (a failure is not remembered: the next call tries again).
#[derive(Debug, Default)]
pub struct Dirs {
    kinds: [OnceLock<OwnedFd>; Kind::ALL.len()],
    locks: OnceLock<OwnedFd>,
}

impl Dirs {
    pub fn kind(&self, root: &Path, kind: Kind) -> io::Result<BorrowedFd<'_>> {
        cached(&self.kinds[kind as usize], root, &["entries/", kind.name()])
    }

    pub fn locks(&self, root: &Path) -> io::Result<BorrowedFd<'_>> {
        cached(&self.locks, root, &["locks"])
    }
}

/// The directory `rel` (its parts joined) below `root`, opened once into `slot`.
fn cached<'a>(
    slot: &'a OnceLock<OwnedFd>,
    root: &Path,
    rel: &[&str],
) -> io::Result<BorrowedFd<'a>> {
    if let Some(fd) = slot.get() {
        return Ok(fd.as_fd());
    }
    // The cache dir itself may be a link (the user's choice, docs/cache-trust.md);
    // nothing below it may be.
    let root = {
        use std::os::unix::fs::OpenOptionsExt;
        fs::File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(root)?
    };
    let fd = open_dir(root.as_raw_fd(), rel)?;
    // A racing thread's fd wins; ours is closed.
    let _ = slot.set(fd);
    Ok(slot.get().expect("just set").as_fd())
}

/// `parts` joined and NUL-terminated, on the stack when short (every path here is:
/// two thousand hits would otherwise cost two allocations each per call).
fn with_path<R>(parts: &[&str], f: impl FnOnce(&CStr) -> io::Result<R>) -> io::Result<R> {
    let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
    let mut buf = [0u8; 192];
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len >= buf.len() {
        return f(&CString::new(parts.concat()).map_err(|_| invalid())?);
    }
    let mut at = 0;
    for p in parts {
        buf[at..at + p.len()].copy_from_slice(p.as_bytes());
        at += p.len();
    }
    f(CStr::from_bytes_with_nul(&buf[..=len]).map_err(|_| invalid())?)
}

fn cvt(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// `openat2` beneath `dir`, with no symlink in any component of `path`.
#[cfg(target_os = "linux")]
fn openat2(dir: libc::c_int, path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `open_how` is plain data; zeroed is its documented "no options" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64;
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH;
    loop {
        // SAFETY: `path` is NUL-terminated and `how` is a valid `open_how` of the size
        // passed; the kernel returns a new fd that nothing else owns.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir,
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        match cvt(r) {
            // SAFETY: a successful openat2 returns an open fd we now own.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // EAGAIN: the kernel could not resolve without races; the caller's slow path
            // answers instead.
            Err(e) => return Err(e),
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn openat2(_dir: libc::c_int, _path: &CStr, _flags: libc::c_int) -> io::Result<OwnedFd> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// A directory beneath `dir` (a handle to look in, not to read).
fn open_dir(dir: libc::c_int, parts: &[&str]) -> io::Result<OwnedFd> {
    with_path(parts, |p| openat2(dir, p, libc::O_PATH | libc::O_DIRECTORY))
}

/// An entry directory `<kk>/<key>` beneath its kind directory.
pub fn entry(kind_dir: BorrowedFd<'_>, key: &str) -> io::Result<OwnedFd> {
    let shard = super::shard_of(key);
    open_dir(kind_dir.as_raw_fd(), &[shard, "/", key])
}

/// `lstat` of a name in `dir`.
pub fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: zeroed `stat` is valid plain data for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `st` is a valid out-pointer, `dir` is open.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    cvt(r as libc::c_long)?;
    Ok(st)
}

/// Open a file in `dir` for reading, `O_NOFOLLOW | O_NONBLOCK` (a FIFO never blocks).
/// `O_NOATIME` where the file is ours: every warm touches a record's mtime, so under
/// `relatime` each read would also write its atime (an inode dirtied per hit, for a
/// time nothing reads).
pub fn open_read(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<fs::File> {
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let open = |flags| {
        // SAFETY: `name` is NUL-terminated, `dir` is open.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
        cvt(fd as libc::c_long)
            // SAFETY: a successful openat returns an open fd we now own.
            .map(|_| unsafe { fs::File::from_raw_fd(fd) })
    };
    match open(flags | libc::O_NOATIME) {
        // Not the file's owner: O_NOATIME is refused, not the open.
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(flags),
        other => other,
    }
}

/// Open (creating) the lock file `<kind>-<key>.lock` in `dir`, as
/// `fsutil::open_lock_file` does by path.
pub fn open_lock(dir: BorrowedFd<'_>, kind: &str, key: &str) -> io::Result<fs::File> {
    with_path(&[kind, "-", key, ".lock"], |name| {
        // SAFETY: `name` is NUL-terminated, `dir` is open.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_WRONLY
                    | libc::O_CREAT
                    | libc::O_NOFOLLOW
                    | libc::O_NONBLOCK
                    | libc::O_CLOEXEC,
                0o666 as libc::c_uint,
            )
        };
        cvt(fd as libc::c_long)?;
        // SAFETY: a successful openat returns an open fd we now own.
        Ok(unsafe { fs::File::from_raw_fd(fd) })
    })
}

/// Set a name's mtime in `dir` to now, without following a link (the link itself would
/// be touched, never its target).
pub fn touch_at(dir: libc::c_int, name: &CStr) -> io::Result<()> {
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
    ];
    // SAFETY: `name` is NUL-terminated, `times` holds two timespecs, `dir` is an open
    // fd or AT_FDCWD.
    let r = unsafe {
        libc::utimensat(
            dir,
            name.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    cvt(r as libc::c_long).map(|_| ())
}

/// `touch_at` of an absolute or relative path.
pub fn touch(path: &Path) -> io::Result<()> {
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    touch_at(libc::AT_FDCWD, &path)
}

/// What identifies one `meta.json` file: a record replaced (a new entry renamed into
/// place, a file written over it) or touched by another process differs in one of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
    size: i64,
    ctime: (i64, i64),
}

impl FileId {
    pub fn of(st: &libc::stat) -> FileId {
        FileId {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

pub fn is_file(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// The `Stamp` of what an `lstat`/`fstat` gave (as `Stamp::of` makes it from metadata).
pub fn stamp(st: &libc::stat) -> crate::base::fsutil::Stamp {
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    crate::base::fsutil::Stamp {
        size: st.st_size as u64,
        mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
        ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
        ino: st.st_ino,
    }
}

/// `fstat` of an open file.
pub fn fstat(f: &fs::File) -> io::Result<libc::stat> {
    // SAFETY: zeroed `stat` is valid plain data for the kernel to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `f` is open, `st` is a valid out-pointer.
    let r = unsafe { libc::fstat(f.as_raw_fd(), &mut st) };
    cvt(r as libc::c_long)?;
    Ok(st)
}
