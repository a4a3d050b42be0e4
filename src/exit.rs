//! The exit-code table (docs/cli.md, "Exit codes"), in one place, and how an error chain maps onto it.

use std::fmt;

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

/// An error that knows its exit code. Phases wrap their failures in it where the code is
/// not obvious from the error type alone.
#[derive(Debug)]
pub struct Coded {
    pub exit: Exit,
    pub message: String,
    pub hint: Option<String>,
}

impl Coded {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Coded {
            exit,
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Coded {}

/// Build a coded error in one expression: `bail_code!(Exit::Usage, "bad {x}")`.
#[macro_export]
macro_rules! coded {
    ($exit:expr, $($arg:tt)*) => {
        anyhow::Error::new($crate::exit::Coded::new($exit, format!($($arg)*)))
    };
}

/// The exit code of an error: the first coded error or manifest error in its chain;
/// anything else is an infrastructure error (I/O, a command that could not start).
pub fn exit_of(err: &anyhow::Error) -> Exit {
    // A `Coded` attached with `.context()` is found by anyhow's own downcast only.
    if let Some(c) = err.downcast_ref::<Coded>() {
        return c.exit;
    }
    for cause in err.chain() {
        if let Some(c) = cause.downcast_ref::<Coded>() {
            return c.exit;
        }
        if cause
            .downcast_ref::<crate::error::ManifestErrors>()
            .is_some()
        {
            return Exit::Usage;
        }
    }
    Exit::Infra
}

/// `error: <what>`, indented `caused by:` lines, then a hint if one helps.
pub fn render(err: &anyhow::Error) -> String {
    let mut out = format!("error: {err}\n");
    for cause in err.chain().skip(1) {
        out.push_str(&format!("  caused by: {cause}\n"));
    }
    let mut hinted = false;
    for cause in err.chain() {
        if let Some(Coded {
            hint: Some(hint), ..
        }) = cause.downcast_ref::<Coded>()
        {
            out.push_str(&format!("hint: {hint}\n"));
            hinted = true;
        }
    }
    // A `Coded` attached with `.context()` is not visible through `chain()`'s
    // `dyn Error` downcast; anyhow's own downcast finds it.
    let context_hint = err.downcast_ref::<Coded>().and_then(|c| c.hint.as_ref());
    if let (false, Some(hint)) = (hinted, context_hint) {
        out.push_str(&format!("hint: {hint}\n"));
    }
    out
}
