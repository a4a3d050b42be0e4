//! Reading a lane's results file while the lane runs (docs/lanes.md, results
//! protocol). The file is the lane's to damage, so it is read defensively: whole lines,
//! bounded chunks, capped lines, never through a link or a FIFO.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::mpsc::Sender;

use super::batch::{Batch, Effect, ProcessEnd, ProtocolError};
use crate::device::events::Event;
use crate::proc;

/// Warnings shown per lane process (ignored results lines); the rest are counted.
const MAX_WARNINGS: usize = 20;

/// Longest line of a results file (docs/lanes.md): a longer one is a protocol error.
pub const MAX_RESULTS_LINE: usize = 1 << 20;
/// Bytes of a results file read per poll: what a lane writes faster is read over
/// several polls, so the deadlines and the cancel are checked in between.
const READ_CHUNK: u64 = 1 << 20;

/// Reads what a lane appends to its results file, whole lines at a time. The file is the
/// lane's to damage: it is opened without following a link or blocking on a FIFO, and
/// read only when it is a regular file; each poll reads a bounded chunk; a line is
/// capped. A file truncated meanwhile is read again from its start, and one replaced by
/// a new file at the path is read from the new one's start: lines already read keep
/// their results either way.
pub(super) struct Tail {
    path: PathBuf,
    /// The open file and its (device, inode).
    file: Option<(std::fs::File, (u64, u64))>,
    pos: u64,
    partial: Vec<u8>,
    /// A protocol error was reported: nothing more is read.
    broken: bool,
    /// Ignored lines (warnings) so far.
    warned: usize,
}

impl Tail {
    pub(super) fn new(path: PathBuf) -> Tail {
        Tail {
            path,
            file: None,
            pos: 0,
            partial: Vec::new(),
            broken: false,
            warned: 0,
        }
    }

    /// Open the file at the path when it is not the one open (first seen, or replaced).
    /// A path that is gone keeps the file open as it is. Err: why the path breaks the
    /// protocol.
    fn follow(&mut self) -> Result<(), ProtocolError> {
        use std::os::unix::fs::MetadataExt;
        let here = match std::fs::symlink_metadata(&self.path) {
            Ok(m) => (m.dev(), m.ino()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => {
                return Err(ProtocolError::CannotStat {
                    path: self.path.clone(),
                    error: e.to_string(),
                })
            }
        };
        if self.file.as_ref().is_some_and(|(_, id)| *id == here) {
            return Ok(());
        }
        let f = match crate::fsutil::open_regular_nofollow(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(ProtocolError::NotRegular(e.to_string())),
        };
        let id = f
            .metadata()
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| ProtocolError::Unreadable(e.to_string()))?;
        self.file = Some((f, id));
        self.pos = 0;
        self.partial.clear();
        Ok(())
    }

    /// What the lane wrote since the last poll, attributed at `now`: its effects, past
    /// the first `MAX_WARNINGS` warnings only counted. A protocol error marks the process
    /// to be stopped.
    pub(super) fn results(
        &mut self,
        finished: bool,
        now: f64,
        machine: &mut Batch,
        killing: &mut Option<ProcessEnd>,
    ) -> Vec<Effect> {
        let lines = self.lines(finished).unwrap_or_else(|why| {
            killing.get_or_insert(ProcessEnd::Protocol(why));
            Vec::new()
        });
        let mut out = Vec::new();
        for line in lines {
            for e in machine.feed(&line, now) {
                if matches!(e, Effect::Warn(_)) {
                    self.warned += 1;
                    if self.warned > MAX_WARNINGS {
                        continue;
                    }
                }
                out.push(e);
            }
        }
        out
    }

    /// One warning that counts the warnings not shown, if any.
    pub(super) fn report_unshown(&self, lane: &str, n: usize, tx: &Sender<Event>) {
        if let Some(more) = self.warned.checked_sub(MAX_WARNINGS).filter(|&m| m > 0) {
            let _ = tx.send(Event::Warning(format!(
                "{more} more ignored results lines of lane `{lane}` (process {n}) not shown"
            )));
        }
    }

    /// Complete lines appended since the last call (and, at the end, a last line
    /// without its newline). Err: the lane broke the protocol (said once).
    fn lines(&mut self, at_end: bool) -> Result<Vec<String>, ProtocolError> {
        let mut out = Vec::new();
        if self.broken {
            return Ok(out);
        }
        let r = self.read(at_end, &mut out);
        if r.is_err() {
            self.broken = true;
        }
        r.map(|()| out)
    }

    fn read(&mut self, at_end: bool, out: &mut Vec<String>) -> Result<(), ProtocolError> {
        self.follow()?;
        let Some((f, _)) = self.file.as_mut() else {
            return Ok(());
        };
        // At the end the process is gone: read what is there, not what might follow.
        let mut stop: Option<u64> = None;
        loop {
            let len = f.metadata().map(|m| m.len()).unwrap_or(0);
            if len < self.pos {
                // Truncated: what is there now was written since.
                self.pos = 0;
                self.partial.clear();
            }
            let stop = *stop.get_or_insert(len);
            let want = len.min(stop).saturating_sub(self.pos).min(READ_CHUNK);
            let mut buf = Vec::new();
            if want > 0 && f.seek(SeekFrom::Start(self.pos)).is_ok() {
                let _ = f.by_ref().take(want).read_to_end(&mut buf);
            }
            self.pos += buf.len() as u64;
            self.partial.extend_from_slice(&buf);
            while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.partial.drain(..=nl).collect();
                if line.len() - 1 > MAX_RESULTS_LINE {
                    return Err(too_long());
                }
                out.push(String::from_utf8_lossy(&line[..line.len() - 1]).to_string());
            }
            if self.partial.len() > MAX_RESULTS_LINE {
                return Err(too_long());
            }
            if !at_end || buf.is_empty() || self.pos >= stop || proc::interrupted() {
                break;
            }
        }
        if at_end && !self.partial.is_empty() {
            out.push(String::from_utf8_lossy(&std::mem::take(&mut self.partial)).to_string());
        }
        Ok(())
    }
}

fn too_long() -> ProtocolError {
    ProtocolError::LineTooLong {
        mib: MAX_RESULTS_LINE >> 20,
    }
}
