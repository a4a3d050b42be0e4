//! Reading a child's output files (step logs, lane logs and results files, the lock
//! command's output) while the child may still be appending to them: one reader,
//! `OutputFile`, for every such read. Invariant: never through a link or a FIFO, never
//! a special file, and never more than the cap each use gives, however large the file.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A child's output file, read as the child appends to it: each read returns what was
/// appended since the last one. It is opened without following a link at its path or
/// blocking on a FIFO, and only when it is a regular file (`fsutil::open_regular_nofollow`).
/// It stays open between reads, so one deleted meanwhile is read on; one replaced at the
/// path by another file, or truncated, is read again from its start (`Appended::restarted`).
#[derive(Debug)]
pub struct OutputFile {
    path: PathBuf,
    /// The open file and its (device, inode).
    file: Option<(File, (u64, u64))>,
    pos: u64,
}

/// What one read found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Appended {
    pub bytes: Vec<u8>,
    /// The file was replaced or truncated since the last read: `bytes` come from its
    /// start, and what was read before is not in it any more.
    pub restarted: bool,
    /// Bytes appended since the last read that this one skipped (`read_last`).
    pub skipped: u64,
    /// The file's length when this read looked (0 while there is no file).
    pub len: u64,
}

/// Why a child's output file cannot be read: it is there, but not as a regular file.
#[derive(Debug)]
pub enum Unreadable {
    /// The path cannot be looked at (not for being absent).
    CannotStat(io::Error),
    /// A link, a FIFO, a directory or another special file.
    NotRegular(io::Error),
    /// The opened file cannot be looked at.
    CannotFstat(io::Error),
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::CannotStat(e) | Unreadable::NotRegular(e) | Unreadable::CannotFstat(e) => {
                e.fmt(f)
            }
        }
    }
}

impl std::error::Error for Unreadable {}

impl OutputFile {
    /// The file at `path`, read from its start.
    pub fn new(path: &Path) -> OutputFile {
        OutputFile::from(path, 0)
    }

    /// The file at `path`, read from byte `pos` on (what came before is not the
    /// child's own output, or was read already).
    pub fn from(path: &Path, pos: u64) -> OutputFile {
        OutputFile {
            path: path.to_path_buf(),
            file: None,
            pos,
        }
    }

    /// Where the next read starts.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// The first `cap` bytes appended since the last read (the rest waits for the next
    /// one). No file at the path yet: nothing, and no error.
    pub fn read(&mut self, cap: u64) -> Result<Appended, Unreadable> {
        self.read_capped(cap, false, None)
    }

    /// The last `cap` bytes appended since the last read; the ones before them are
    /// skipped (counted in `Appended::skipped`), never read.
    pub fn read_last(&mut self, cap: u64) -> Result<Appended, Unreadable> {
        self.read_capped(cap, true, None)
    }

    /// As `read_last`, of what was appended before byte `end` only (the child said its
    /// output up to there is one thing's); the next read starts at `end`. An `end` the
    /// file has not reached, or that was read past already, says nothing: all that was
    /// appended is read.
    pub fn read_last_before(&mut self, cap: u64, end: u64) -> Result<Appended, Unreadable> {
        self.read_capped(cap, true, Some(end))
    }

    fn read_capped(
        &mut self,
        cap: u64,
        last: bool,
        end: Option<u64>,
    ) -> Result<Appended, Unreadable> {
        let mut got = Appended {
            restarted: self.follow()?,
            ..Appended::default()
        };
        let Some((f, _)) = self.file.as_mut() else {
            return Ok(got);
        };
        got.len = f.metadata().map_err(Unreadable::CannotFstat)?.len();
        if got.len < self.pos {
            // Truncated: what is there now was written since.
            self.pos = 0;
            got.restarted = true;
        }
        let upto = end
            .filter(|e| (self.pos..=got.len).contains(e))
            .unwrap_or(got.len);
        let new = upto - self.pos;
        if last && new > cap {
            got.skipped = new - cap;
            self.pos += got.skipped;
        }
        let want = new.min(cap);
        if want > 0 && f.seek(SeekFrom::Start(self.pos)).is_ok() {
            let _ = f.by_ref().take(want).read_to_end(&mut got.bytes);
        }
        self.pos += got.bytes.len() as u64;
        Ok(got)
    }

    /// Open the file at the path when it is not the one open (first seen, or replaced);
    /// a path that is gone keeps the open file as it is. True: a file was replaced, the
    /// new one is read from its start.
    fn follow(&mut self) -> Result<bool, Unreadable> {
        let here = match std::fs::symlink_metadata(&self.path) {
            Ok(m) => (m.dev(), m.ino()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Unreadable::CannotStat(e)),
        };
        if self.file.as_ref().is_some_and(|(_, id)| *id == here) {
            return Ok(false);
        }
        let f = match crate::base::fsutil::open_regular_nofollow(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Unreadable::NotRegular(e)),
        };
        let meta = f.metadata().map_err(Unreadable::CannotFstat)?;
        let replaced = self.file.is_some();
        self.file = Some((f, (meta.dev(), meta.ino())));
        if replaced {
            self.pos = 0;
        }
        Ok(replaced)
    }
}

/// The last `max` bytes of a child's output file, from a line's start when more came
/// before them; empty when it cannot be read as one.
pub fn log_tail(path: &Path, max: usize) -> String {
    let Ok(got) = OutputFile::new(path).read_last(max as u64) else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&got.bytes);
    match text.find('\n') {
        Some(nl) if got.skipped > 0 => text[nl + 1..].to_string(),
        _ => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(path: &Path, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    #[test]
    fn each_read_returns_what_was_appended_since_the_last_up_to_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("step.log");
        let mut out = OutputFile::new(&log);
        assert_eq!(out.read(100).unwrap(), Appended::default(), "no file yet");
        append(&log, b"one\n");
        assert_eq!(out.read(100).unwrap().bytes, b"one\n");
        assert_eq!(out.read(100).unwrap().bytes, b"", "nothing new");
        append(&log, b"0123456789");
        let first = out.read(4).unwrap();
        assert_eq!((first.bytes.as_slice(), first.len), (&b"0123"[..], 14));
        assert_eq!(
            out.read(100).unwrap().bytes,
            b"456789",
            "the rest, next time"
        );
        append(&log, b"abcdefgh");
        let last = out.read_last(3).unwrap();
        assert_eq!((last.bytes.as_slice(), last.skipped), (&b"fgh"[..], 5));
        assert_eq!(out.pos(), 22);
        let mut from = OutputFile::from(&log, 18);
        assert_eq!(from.read(100).unwrap().bytes, b"efgh");
    }

    /// A child that says where one thing's output ends (a lane's `output_bytes`): that
    /// share is read, and the next one starts there, whatever came after it already.
    #[test]
    fn a_share_ends_where_the_child_said_and_the_next_starts_there() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("lane.log");
        append(&log, b"header\nscene a wrote this\nscene b began");
        let mut out = OutputFile::from(&log, 7);
        let a = out.read_last_before(100, 26).unwrap();
        assert_eq!(a.bytes, b"scene a wrote this\n");
        assert_eq!(out.pos(), 26);
        let capped = OutputFile::from(&log, 7).read_last_before(5, 26).unwrap();
        assert_eq!(
            (capped.bytes.as_slice(), capped.skipped),
            (&b"this\n"[..], 14)
        );
        // An end the file has not reached, or one read past already: all that is there.
        let past = OutputFile::from(&log, 7)
            .read_last_before(100, 1000)
            .unwrap();
        assert_eq!(past.bytes, b"scene a wrote this\nscene b began");
        let behind = OutputFile::from(&log, 26).read_last_before(100, 3).unwrap();
        assert_eq!(behind.bytes, b"scene b began");
    }

    #[test]
    fn a_truncated_or_replaced_file_is_read_from_its_start_a_deleted_one_read_on() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("results");
        append(&log, b"aaaa");
        let mut out = OutputFile::new(&log);
        assert_eq!(out.read(100).unwrap().bytes, b"aaaa");
        std::fs::write(&log, b"b").unwrap();
        let got = out.read(100).unwrap();
        assert_eq!((got.bytes.as_slice(), got.restarted), (&b"b"[..], true));
        let new = dir.path().join("new");
        std::fs::write(&new, b"cccccc").unwrap();
        std::fs::rename(&new, &log).unwrap();
        let got = out.read(100).unwrap();
        assert_eq!(
            (got.bytes.as_slice(), got.restarted),
            (&b"cccccc"[..], true)
        );
        // Still open: what is appended through another name is read on.
        let keep = dir.path().join("kept");
        std::fs::hard_link(&log, &keep).unwrap();
        std::fs::remove_file(&log).unwrap();
        append(&keep, b"d");
        assert_eq!(out.read(100).unwrap().bytes, b"d");
    }

    #[test]
    fn a_link_or_a_fifo_is_refused_never_followed_nor_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"not the child's output\n").unwrap();
        let log = dir.path().join("step.log");
        std::os::unix::fs::symlink(&secret, &log).unwrap();
        assert!(matches!(
            OutputFile::new(&log).read(100),
            Err(Unreadable::NotRegular(_))
        ));
        assert_eq!(log_tail(&log, 100), "", "a step log's tail through a link");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            OutputFile::new(&fifo).read(100),
            Err(Unreadable::NotRegular(_))
        ));
    }

    #[test]
    fn a_tail_starts_at_a_line_when_more_came_before() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("step.log");
        append(&log, b"first line\nsecond\nthird\n");
        assert_eq!(log_tail(&log, 100), "first line\nsecond\nthird\n");
        assert_eq!(log_tail(&log, 10), "third\n");
        assert_eq!(log_tail(&dir.path().join("absent"), 10), "");
    }
}
