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

/// Errors shown of one manifest; the rest are counted.
pub const MAX_SHOWN: usize = 50;
/// Characters of a source line shown under an error; a longer line is cut around the
/// column.
const EXCERPT: usize = 200;
/// Characters of an error's key path and message shown (both can quote the text).
pub const MAX_MESSAGE: usize = 300;

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
        for d in self.diags.iter().take(MAX_SHOWN) {
            write!(f, "\n  {}", self.file)?;
            if let Some(line) = d.line {
                write!(f, ":{line}")?;
                if let Some(col) = d.col {
                    write!(f, ":{col}")?;
                }
            }
            let said = if d.path.is_empty() {
                clip(&d.message, MAX_MESSAGE)
            } else {
                clip(&format!("{}: {}", d.path, d.message), MAX_MESSAGE)
                    .into_owned()
                    .into()
            };
            write!(f, ": {said}")?;
            if let Some(src) = d.line.and_then(|l| lines.get(l.wrapping_sub(1))) {
                let n = d.line.unwrap_or(0);
                let w = n.to_string().len();
                let (shown, col) = excerpt(src, d.col.unwrap_or(1), EXCERPT);
                write!(f, "\n  {n:>w$} | {shown}")?;
                if d.col.is_some() {
                    let pad: String = shown
                        .chars()
                        .take(col.saturating_sub(1))
                        .map(|c| if c == '\t' { '\t' } else { ' ' })
                        .collect();
                    write!(f, "\n  {:>w$} | {pad}^", "")?;
                }
            }
        }
        if n > MAX_SHOWN {
            write!(f, "\n  … and {} more errors", n - MAX_SHOWN)?;
        }
        Ok(())
    }
}

/// At most `max` characters of `s`, cut with `…`.
pub fn clip(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(max) {
        None => s.into(),
        Some((end, _)) => format!("{}…", &s[..end]).into(),
    }
}

/// At most `width` characters of `line` around column `col` (1-based, in characters),
/// with `…` where it was cut, and the column within what is shown.
fn excerpt(line: &str, col: usize, width: usize) -> (String, usize) {
    let chars: Vec<char> = line.chars().collect();
    if chars.len() <= width {
        return (line.to_string(), col);
    }
    let at = col.saturating_sub(1).min(chars.len());
    let from = at.saturating_sub(width / 2).min(chars.len() - width);
    let to = from + width;
    let mut out = String::new();
    if from > 0 {
        out.push('…');
    }
    out.extend(&chars[from..to]);
    if to < chars.len() {
        out.push('…');
    }
    (out, at - from + 1 + usize::from(from > 0))
}

impl std::error::Error for ManifestErrors {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_around_the_column() {
        let line: String = ('a'..='z').cycle().take(1000).collect();
        let (shown, col) = excerpt(&line, 500, 200);
        assert_eq!(shown.chars().count(), 202, "200 and two `…`");
        assert!(shown.starts_with('…') && shown.ends_with('…'));
        assert_eq!(shown.chars().nth(col - 1), line.chars().nth(499));
        let (shown, col) = excerpt(&line, 3, 200);
        assert_eq!((shown.chars().count(), col), (201, 3));
        let (shown, col) = excerpt(&line, 1000, 200);
        assert_eq!(shown.chars().nth(col - 1), Some('l'));
        assert_eq!(excerpt("short", 2, 200), ("short".to_string(), 2));
    }
}
