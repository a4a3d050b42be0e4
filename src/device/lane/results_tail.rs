//! Reading a lane's results file while the lane runs (docs/lanes.md, results
//! protocol). The file is the lane's to damage, so it is read defensively: whole lines,
//! bounded chunks, capped lines, never through a link or a FIFO.

use std::path::PathBuf;
use std::sync::mpsc::Sender;

use super::batch::{Batch, Effect, ProcessEnd, ProtocolError};
use crate::base::notice::LaneNotice;
use crate::base::proc;
use crate::base::proc::output::{OutputFile, Unreadable};
use crate::device::events::Event;

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
    file: OutputFile,
    partial: Vec<u8>,
    /// A protocol error was reported: nothing more is read.
    broken: bool,
    /// Ignored lines (warnings) so far.
    warned: usize,
}

impl Tail {
    pub(super) fn new(path: PathBuf) -> Tail {
        Tail {
            file: OutputFile::new(&path),
            path,
            partial: Vec::new(),
            broken: false,
            warned: 0,
        }
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
            let _ = tx.send(Event::Warning(LaneNotice::MoreIgnored {
                more,
                lane: lane.to_string(),
                process: n,
            }));
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
        // At the end the process is gone: read what is there, not what might follow.
        let mut stop: Option<u64> = None;
        loop {
            let got = self.file.read(READ_CHUNK).map_err(|e| self.unreadable(e))?;
            if got.restarted {
                self.partial.clear();
            }
            let stop = *stop.get_or_insert(got.len);
            self.partial.extend_from_slice(&got.bytes);
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
            let caught_up = got.bytes.is_empty() || self.file.pos() >= stop;
            if !at_end || caught_up || proc::interrupted() {
                break;
            }
        }
        if at_end && !self.partial.is_empty() {
            out.push(String::from_utf8_lossy(&std::mem::take(&mut self.partial)).to_string());
        }
        Ok(())
    }

    /// How a results file that cannot be read breaks the protocol.
    fn unreadable(&self, e: Unreadable) -> ProtocolError {
        match e {
            Unreadable::CannotStat(e) => ProtocolError::CannotStat {
                path: self.path.clone(),
                error: e.to_string(),
            },
            Unreadable::NotRegular(e) => ProtocolError::NotRegular(e.to_string()),
            Unreadable::CannotFstat(e) => ProtocolError::Unreadable(e.to_string()),
        }
    }
}

fn too_long() -> ProtocolError {
    ProtocolError::LineTooLong {
        mib: MAX_RESULTS_LINE >> 20,
    }
}
