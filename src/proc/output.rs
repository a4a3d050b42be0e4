//! Reading a child's output files (step logs, lane logs and results, the lock command's
//! output) while the child may still be appending to them. Invariant: never through a
//! link or a FIFO, and never more than the cap each use gives.

use std::path::Path;

/// The last `max` bytes of a log, on line boundaries.
pub fn log_tail(path: &Path, max: usize) -> String {
    use std::io::{Read, Seek, SeekFrom};
    // Only the end is read: a step may have written gigabytes.
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(max as u64);
    let mut bytes = Vec::new();
    if f.seek(SeekFrom::Start(start)).is_err()
        || f.take(max as u64).read_to_end(&mut bytes).is_err()
    {
        return String::new();
    }
    let mut text = String::from_utf8_lossy(&bytes).to_string();
    if start > 0 {
        if let Some(nl) = text.find('\n') {
            text = text[nl + 1..].to_string();
        }
    }
    text
}
