//! The board for the base layer's notices, which belong to no phase: typed where they
//! arise (`notice::Notice`), kept once each per process, and said by the terminal
//! (`ui::Ui`, in report/'s words) before the next line it prints, or when the command
//! ends (`entry::run`). Nothing here words or prints.

use std::sync::{Mutex, PoisonError};

use crate::base::notice::Notice;

/// Posted and said (`said` only grows: each warning is said once per process).
struct Board {
    pending: Vec<Notice>,
    said: Vec<Notice>,
}

static BOARD: Mutex<Board> = Mutex::new(Board {
    pending: Vec::new(),
    said: Vec::new(),
});

/// Post `w`, unless it was posted before in this process.
pub fn post(w: Notice) {
    let mut b = BOARD.lock().unwrap_or_else(PoisonError::into_inner);
    if !b.said.contains(&w) {
        b.said.push(w.clone());
        b.pending.push(w);
    }
}

/// The warnings posted and not yet taken, in the order they were posted.
pub fn take() -> Vec<Notice> {
    std::mem::take(&mut BOARD.lock().unwrap_or_else(PoisonError::into_inner).pending)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_warning_is_taken_once_however_often_it_is_posted() {
        let w = Notice::SealKey {
            path: PathBuf::from("/nowhere/seal.key (test of warning.rs)"),
            error: "denied".into(),
        };
        post(w.clone());
        post(w.clone());
        let taken: Vec<Notice> = take().into_iter().filter(|t| *t == w).collect();
        assert_eq!(taken, std::slice::from_ref(&w));
        post(w.clone());
        assert!(!take().contains(&w));
    }
}
