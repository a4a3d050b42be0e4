//! The read-only view of the cache's entries that device steps and lanes get
//! (docs/cache-trust.md, "Entries are read-only to steps"; anchor: Bazel's
//! linux-sandbox): each child started from now on enters a private mount namespace in
//! which the entry directories are read-only bind mounts, so a write into `{fixture}`
//! fails in the step that tried it (EROFS, root included) and every other process reads
//! the published bytes. Invariant: once `enter_for_children` succeeded, no child is
//! started without the view; where a namespace cannot be made (not root, no
//! CAP_SYS_ADMIN), the view is never set and the stamps' detection stays.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The directories every child sees read-only (prepared before any fork: the child
/// only reads them).
static VIEW: OnceLock<Vec<CString>> = OnceLock::new();

/// How device steps and lanes see the cache's entries on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// A private mount namespace with the entries bind-mounted read-only.
    ReadOnlyMount,
    /// Not root: the entries' mode bits (0444/0555) refuse a write.
    ModeBits,
    /// Root without a mount namespace: a write is not refused, only detected (stamps).
    DetectOnly(String),
}

impl Mode {
    /// For `--plan` and the docs: how a device step's write into an entry ends.
    pub fn describe(&self) -> String {
        match self {
            Mode::ReadOnlyMount => {
                "read-only bind mount in a private mount namespace: a write fails in its step"
                    .into()
            }
            Mode::ModeBits => "mode bits (0444/0555): a write fails in its step".into(),
            Mode::DetectOnly(why) => {
                format!("detection only ({why}): a write is caught before the next scene is served")
            }
        }
    }
}

fn cstrings(dirs: &[PathBuf]) -> Option<Vec<CString>> {
    dirs.iter()
        .map(|d| CString::new(d.as_os_str().as_bytes()).ok())
        .collect()
}

/// Which mode this process would get for `dirs` (existing directories), probed by a
/// forked child that enters the view and exits: nothing is run.
pub fn mode(dirs: &[PathBuf]) -> Mode {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Mode::ModeBits;
    }
    // Debug builds only: the tests of the detection run where namespaces can be made.
    #[cfg(debug_assertions)]
    if std::env::var_os("SCENERUN_DEBUG_NO_NAMESPACE").is_some() {
        return Mode::DetectOnly("SCENERUN_DEBUG_NO_NAMESPACE is set".into());
    }
    let Some(view) = cstrings(dirs) else {
        return Mode::DetectOnly("a path holds a NUL byte".into());
    };
    // SAFETY: the child calls only async-signal-safe functions (unshare, mount, _exit)
    // on memory prepared before the fork; the parent waits for it.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return Mode::DetectOnly(format!("cannot fork: {}", io::Error::last_os_error()));
        }
        if pid == 0 {
            let code = match enter(&view) {
                Ok(()) => 0,
                Err(e) => e.raw_os_error().unwrap_or(1).clamp(1, 255),
            };
            libc::_exit(code);
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return Mode::DetectOnly("cannot wait for the probe".into());
            }
        }
        match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
            (true, 0) => Mode::ReadOnlyMount,
            (true, e) => Mode::DetectOnly(format!(
                "no private mount namespace: {}",
                io::Error::from_raw_os_error(e)
            )),
            _ => Mode::DetectOnly("the probe died".into()),
        }
    }
}

/// From now on every child (`own_group`) enters the view of `dirs`, when `mode` says a
/// mount namespace can be made here; the mode in effect.
pub fn enter_for_children(dirs: &[PathBuf]) -> Mode {
    let m = mode(dirs);
    if m == Mode::ReadOnlyMount {
        if let Some(view) = cstrings(dirs) {
            let _ = VIEW.set(view);
        }
    }
    m
}

/// In a forked child before exec: enter the view, if one was set. Only async-signal-safe
/// calls (an atomic load, unshare, mount) on memory prepared before the fork.
pub(super) fn enter_in_child() -> io::Result<()> {
    match VIEW.get() {
        Some(view) => enter(view),
        None => Ok(()),
    }
}

/// A private mount namespace (nothing propagates back), each of `view` a read-only bind
/// mount of itself.
fn enter(view: &[CString]) -> io::Result<()> {
    let ok = |r: libc::c_int| match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    };
    let none = std::ptr::null();
    // SAFETY: plain syscalls on NUL-terminated strings that outlive them.
    unsafe {
        ok(libc::unshare(libc::CLONE_NEWNS))?;
        ok(libc::mount(
            none,
            c"/".as_ptr(),
            none,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        for d in view {
            ok(libc::mount(
                d.as_ptr(),
                d.as_ptr(),
                none,
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            ok(libc::mount(
                none,
                d.as_ptr(),
                none,
                libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY,
                std::ptr::null(),
            ))?;
        }
    }
    Ok(())
}

/// The entry directories of the cache at `root` that device steps are handed paths
/// into (kernels, fixtures, goldens; not `compiled`, which the compiler shims inside
/// lanes write), those that exist.
pub fn entry_dirs(root: &Path) -> Vec<PathBuf> {
    use crate::base::stepid::Kind;
    [Kind::Kernel, Kind::Fixture, Kind::Golden]
        .iter()
        .map(|k| root.join("entries").join(k.name()))
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
        .collect()
}
