//! The exit-code table (docs/cli.md, "Exit codes"), in one place. Which error takes
//! which code is `error::Error::code`.

/// What the process exits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exit {
    /// Every selected scene passed (for `warm`: the pass completed).
    Ok = 0,
    /// One or more scenes failed.
    Failed = 1,
    /// SIGINT or SIGTERM.
    Interrupted = 2,
    /// Cache unusable, lock command failed or timed out, toolchain identity failed.
    Infra = 3,
    /// Usage or manifest error.
    Usage = 4,
    /// No scene selected.
    NoneSelected = 5,
    /// `device` found artifacts missing and did not take the lock.
    NotWarm = 6,
}

impl Exit {
    pub fn code(self) -> i32 {
        self as i32
    }
}
