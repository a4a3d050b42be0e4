//! Errors that decide an exit code, as types: a manifest's diagnostics (exit 4), each
//! with its place in the file. `exit` maps them onto the exit-code table.

use std::fmt;

/// One problem in a manifest.
#[derive(Debug, Clone)]
pub struct Diag {
    pub line: Option<usize>,
    pub col: Option<usize>,
    /// The key path, e.g. `scenes[1].kernels[0].source`.
    pub path: String,
    pub message: String,
}

/// Every problem found in one manifest.
#[derive(Debug)]
pub struct ManifestErrors {
    pub file: String,
    pub diags: Vec<Diag>,
}

impl fmt::Display for ManifestErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.diags.len();
        write!(
            f,
            "manifest {} has {n} error{}:",
            self.file,
            if n == 1 { "" } else { "s" }
        )?;
        // The offending line goes under each message, as rustc and just show it. The
        // file is read again here: errors are rare, and a file that cannot be read (or
        // text that was not a file) just gets no excerpt.
        let text = std::fs::read_to_string(&self.file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for d in &self.diags {
            write!(f, "\n  {}", self.file)?;
            if let Some(line) = d.line {
                write!(f, ":{line}")?;
                if let Some(col) = d.col {
                    write!(f, ":{col}")?;
                }
            }
            if d.path.is_empty() {
                write!(f, ": {}", d.message)?;
            } else {
                write!(f, ": {}: {}", d.path, d.message)?;
            }
            if let Some(src) = d.line.and_then(|l| lines.get(l.wrapping_sub(1))) {
                let n = d.line.unwrap_or(0);
                let w = n.to_string().len();
                write!(f, "\n  {n:>w$} | {src}")?;
                if let Some(col) = d.col {
                    let pad: String = src
                        .chars()
                        .take(col.saturating_sub(1))
                        .map(|c| if c == '\t' { '\t' } else { ' ' })
                        .collect();
                    write!(f, "\n  {:>w$} | {pad}^", "")?;
                }
            }
        }
        Ok(())
    }
}

impl std::error::Error for ManifestErrors {}
