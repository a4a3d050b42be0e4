//! Small file-system helpers shared by the cache, the warm record and the reports.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

/// Write a file so that readers see the old content or the new, never a torn one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}.{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id(),
        unique()
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.flush()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Open (creating) a file that exists only to be `flock`ed.
pub fn open_lock_file(path: &Path) -> io::Result<fs::File> {
    fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
}

/// A number unique within this process.
pub fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Remove a file or a directory tree; absent is fine.
pub fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Every regular file under `root` (root itself if it is a file), relative paths with `/`,
/// sorted. Symlinks are an error: an artifact must be self-contained.
pub fn walk_files(root: &Path) -> io::Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    let meta = fs::symlink_metadata(root)?;
    if meta.is_file() {
        out.push((String::new(), meta.len()));
        return Ok(out);
    }
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a regular file (symlinks and special files cannot be cached)",
            root.display()
        )));
    }
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
                out.push((rel, e.metadata()?.len()));
            } else {
                return Err(io::Error::other(format!(
                    "{} is not a regular file (symlinks and special files cannot be cached)",
                    e.path().display()
                )));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// True when an I/O error means the disk or quota is full.
pub fn is_disk_full(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSPC) | Some(libc::EFBIG) | Some(libc::EDQUOT)
    )
}
