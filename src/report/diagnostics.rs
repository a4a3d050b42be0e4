//! Compiler diagnostics in a step's output (`file:line:col: error: message`, as gcc,
//! clang and most tools print them), turned into GitHub `::error`/`::warning`
//! annotations on the right file and line.

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: u32,
    pub col: Option<u32>,
    /// `error` or `warning` (`fatal error` counts as an error).
    pub error: bool,
    pub message: String,
}

/// Parse one output line; None when it is not a diagnostic.
pub fn parse_line(line: &str) -> Option<Diagnostic> {
    let line = line.trim_end();
    // The file name ends at the first `:<digits>:`.
    let mut search = 0;
    let (file, rest) = loop {
        let i = search + line[search..].find(':')?;
        let after = &line[i + 1..];
        let digits = after.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 && after[digits..].starts_with(':') && i > 0 {
            break (&line[..i], after);
        }
        search = i + 1;
    };
    if file.trim().is_empty() || file.starts_with(' ') {
        return None;
    }
    let mut parts = rest.splitn(2, ':');
    let line_no: u32 = parts.next()?.parse().ok()?;
    let mut rest = parts.next()?;
    let mut col = None;
    let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
    if digits > 0 && rest[digits..].starts_with(':') {
        col = rest[..digits].parse().ok();
        rest = &rest[digits + 1..];
    }
    let rest = rest.trim_start();
    let (error, message) = if let Some(m) = rest
        .strip_prefix("fatal error:")
        .or_else(|| rest.strip_prefix("error:"))
    {
        (true, m)
    } else if let Some(m) = rest.strip_prefix("warning:") {
        (false, m)
    } else {
        return None;
    };
    Some(Diagnostic {
        file: file.to_string(),
        line: line_no,
        col,
        error,
        message: message.trim().to_string(),
    })
}

/// Every diagnostic in `text`, at most `max`, errors first.
pub fn parse(text: &str, max: usize) -> Vec<Diagnostic> {
    let mut all: Vec<Diagnostic> = text.lines().filter_map(parse_line).collect();
    all.sort_by_key(|d| !d.error);
    all.truncate(max);
    all
}

/// The path GitHub wants: relative to the workspace (else to the current directory),
/// for a file named relative to the directory the step ran in.
pub fn repo_path(run_dir: &Path, file: &str) -> String {
    let abs = crate::key::normalize(&run_dir.join(file));
    let base = std::env::var_os("GITHUB_WORKSPACE")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::current_dir().ok());
    match base.as_deref().and_then(|b| abs.strip_prefix(b).ok()) {
        Some(rel) => rel.display().to_string(),
        None => abs.display().to_string(),
    }
}

pub fn escape_data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// The workflow command for one diagnostic.
pub fn annotation(d: &Diagnostic, run_dir: &Path, title: &str) -> String {
    let mut props = format!(
        "file={},line={}",
        escape_property(&repo_path(run_dir, &d.file)),
        d.line
    );
    if let Some(c) = d.col {
        props.push_str(&format!(",col={c}"));
    }
    props.push_str(&format!(",title={}", escape_property(title)));
    format!(
        "::{} {props}::{}",
        if d.error { "error" } else { "warning" },
        escape_data(&d.message)
    )
}

/// A workflow command without a file.
pub fn plain_error(title: &str, message: &str) -> String {
    format!(
        "::error title={}::{}",
        escape_property(title),
        escape_data(message)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcc_and_clang_lines() {
        let d = parse_line("kernels/add.c:3:10: error: expected ';' before '}' token").unwrap();
        assert_eq!(
            d,
            Diagnostic {
                file: "kernels/add.c".into(),
                line: 3,
                col: Some(10),
                error: true,
                message: "expected ';' before '}' token".into()
            }
        );
        let d = parse_line("include/x.h:7: warning: no newline").unwrap();
        assert_eq!((d.line, d.col, d.error), (7, None, false));
        let d = parse_line("a.c:1:2: fatal error: y.h: No such file or directory").unwrap();
        assert_eq!(d.message, "y.h: No such file or directory");
        assert!(parse_line("In file included from a.c:1:").is_none());
        assert!(parse_line("    3 |   int x").is_none());
        assert!(parse_line("cc1: all warnings being treated as errors").is_none());
        assert!(parse_line("a.c: In function 'f':").is_none());
    }

    #[test]
    fn annotation_escapes_properties() {
        let d = parse_line("/w/a,b.c:3:1: error: 100% bad").unwrap();
        let a = annotation(&d, Path::new("/"), "compile s/k");
        assert!(a.starts_with("::error file="), "{a}");
        assert!(
            a.contains("a%2Cb.c,line=3,col=1,title=compile s/k::100%25 bad"),
            "{a}"
        );
    }
}
