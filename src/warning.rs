//! Warnings of the base layer, which belongs to no phase: typed where they arise, kept
//! once each per process, and said by the terminal (`ui::Ui`) before the next line it
//! prints, or when the command ends (`entry::run`). Nothing here prints.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

/// What the base layer has to warn about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// A file scenerun keeps for itself (a memo, the history, a record) is there but
    /// over its cap, a link or a special file: treated as absent (`fsutil::read_kept`).
    Damaged { error: String },
    /// This user's seal key cannot be read or made (`seal`): a key of this process only
    /// is used instead.
    SealKey { path: PathBuf, error: String },
    /// The manifest writes a key that a newer one replaces; it still works, for now.
    Deprecated {
        key: &'static str,
        instead: &'static str,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Damaged { error } => write!(
                f,
                "warning: {error}; ignored as damaged (it is rewritten by the next save)"
            ),
            Warning::SealKey { path, error } => write!(
                f,
                "warning: cannot use the seal key {}: {error}; outputs kept by earlier runs (scenes_from) are made again",
                path.display()
            ),
            Warning::Deprecated { key, instead } => write!(
                f,
                "warning: manifest: `{key}` is deprecated and will be refused in a later release; write `{instead}` (docs/manifest.md)"
            ),
        }
    }
}

/// Posted and said (`said` only grows: each warning is said once per process).
struct Board {
    pending: Vec<Warning>,
    said: Vec<Warning>,
}

static BOARD: Mutex<Board> = Mutex::new(Board {
    pending: Vec::new(),
    said: Vec::new(),
});

/// Post `w`, unless it was posted before in this process.
pub fn post(w: Warning) {
    let mut b = BOARD.lock().unwrap_or_else(PoisonError::into_inner);
    if !b.said.contains(&w) {
        b.said.push(w.clone());
        b.pending.push(w);
    }
}

/// The warnings posted and not yet taken, in the order they were posted.
pub fn take() -> Vec<Warning> {
    std::mem::take(&mut BOARD.lock().unwrap_or_else(PoisonError::into_inner).pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_warning_is_taken_once_however_often_it_is_posted() {
        let w = Warning::SealKey {
            path: PathBuf::from("/nowhere/seal.key (test of warning.rs)"),
            error: "denied".into(),
        };
        post(w.clone());
        post(w.clone());
        let taken: Vec<Warning> = take().into_iter().filter(|t| *t == w).collect();
        assert_eq!(taken, std::slice::from_ref(&w));
        post(w.clone());
        assert!(!take().contains(&w));
    }
}
