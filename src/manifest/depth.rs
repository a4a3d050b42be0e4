//! The nesting limit (docs/cache-trust.md): the YAML parser scenerun uses takes time
//! quadratic in the depth of flow collections (`[[[[...`, `{a: {a: ...`), so a 400 KB
//! manifest of brackets would take minutes. One linear pass finds the first point where
//! flow nesting passes `LIMIT` and the manifest is refused (exit 4) before the parser
//! sees it. The deserializer refuses anything nested past 128 levels anyway, so no
//! manifest that used to load is lost.
//!
//! The pass is a conservative scanner, not a parser: it skips comments, quoted scalars
//! and block scalars (`|`, `>`), and counts `[` / `{` only where a flow collection can
//! start, so brackets inside commands (`[ -f x ]`, `a[1]`) do not count.

/// Deepest flow nesting accepted.
pub const LIMIT: usize = 100;

/// Where nesting first goes past `limit`: (line, column), both 1-based. One pass over
/// the bytes.
pub fn too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let (mut i, mut line, mut line_start) = (0usize, 1usize, 0usize);
    let mut depth = 0usize;
    // Indentation of the line that opened a block scalar, while inside it.
    let mut block: Option<usize> = None;
    let mut indent = 0usize;
    // The previous significant byte on this line: where a scalar or collection starts.
    let mut prev: Option<u8> = None;
    while i < b.len() {
        if i == line_start {
            indent = b[i..].iter().take_while(|c| **c == b' ').count();
            prev = None;
            if let Some(parent) = block {
                let end = line_end(b, i);
                let blank = b[i..end].iter().all(|c| matches!(c, b' ' | b'\t' | b'\r'));
                if blank || indent > parent {
                    i = end + 1;
                    line += 1;
                    line_start = i;
                    continue;
                }
                block = None;
            }
        }
        let c = b[i];
        let at_start = matches!(prev, None | Some(b':' | b'-' | b',' | b'[' | b'{' | b'?'));
        match c {
            b'\n' => {
                i += 1;
                line += 1;
                line_start = i;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'#' if i == line_start || matches!(b[i - 1], b' ' | b'\t') => {
                i = line_end(b, i);
                continue;
            }
            b'\'' | b'"' if at_start || depth > 0 => {
                let end = skip_quoted(b, i)?;
                for (k, x) in b[i..end].iter().enumerate() {
                    if *x == b'\n' {
                        line += 1;
                        line_start = i + k + 1;
                    }
                }
                i = end;
                prev = Some(b'"');
                continue;
            }
            b'[' | b'{' if at_start || depth > 0 => {
                depth += 1;
                if depth > limit {
                    return Some((line, i - line_start + 1));
                }
            }
            b']' | b'}' if depth > 0 => depth -= 1,
            b'|' | b'>' if depth == 0 && at_start => {
                let end = line_end(b, i);
                let rest = &text[i + 1..end];
                let rest = rest.split(" #").next().unwrap_or("");
                if rest
                    .trim()
                    .bytes()
                    .all(|x| matches!(x, b'+' | b'-' | b'0'..=b'9'))
                {
                    block = Some(indent);
                    i = end;
                    continue;
                }
            }
            _ => {}
        }
        prev = Some(c);
        i += 1;
    }
    None
}

/// The index of the newline ending the line that holds `i` (or the end of the text).
fn line_end(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|c| *c == b'\n')
        .map_or(b.len(), |p| i + p)
}

/// The byte just past the quoted scalar starting at `at`, or None if it never closes
/// (the parser then reports the unclosed quote).
fn skip_quoted(b: &[u8], at: usize) -> Option<usize> {
    let q = b[at];
    let mut i = at + 1;
    while i < b.len() {
        match b[i] {
            b'\\' if q == b'"' => i += 2,
            c if c == q => {
                if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                    i += 2;
                } else {
                    return Some(i + 1);
                }
            }
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_flow_nesting_only() {
        let deep = format!("a: {}{}\n", "[".repeat(5), "]".repeat(5));
        assert_eq!(too_deep(&deep, 5), None);
        assert_eq!(too_deep(&deep, 4), Some((1, 8)));
        let braces = format!("x: 1\nb: {}1{}\n", "{a: ".repeat(4), "}".repeat(4));
        assert_eq!(too_deep(&braces, 3), Some((2, 16)));
    }

    #[test]
    fn brackets_in_scalars_comments_and_blocks_do_not_count() {
        let text = format!(
            "run: test [ -f x ] && a[1]\n# {o}\nq: '{o}'\nd: \"{o}\\\"\"\nb: |\n  {o}\n  {o}\nc: [1, [2]]\n",
            o = "[[[[[["
        );
        assert_eq!(too_deep(&text, 2), None);
        assert_eq!(too_deep(&text, 1), Some((8, 8)));
    }
}
