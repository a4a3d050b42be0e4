//! The nesting limit (docs/cache-trust.md): the YAML parser scenerun uses takes time
//! quadratic in the depth of flow collections (`[[[[...`, `{a: {a: ...`), so a 400 KB
//! manifest of brackets would take minutes. One linear pass finds the first point where
//! flow nesting passes `LIMIT` and the manifest is refused (exit 4) before the parser
//! sees it. Nesting of any kind past the same limit is refused by the parser itself
//! (`yaml::parse`, which runs this pass first).
//!
//! The pass is a conservative scanner, not a parser: it skips comments, quoted scalars
//! and block scalars (`|`, `>`), and counts `[` / `{` only where a flow collection can
//! start, so brackets inside commands (`[ -f x ]`, `a[1]`) do not count.

/// Deepest flow nesting accepted.
pub const LIMIT: usize = 100;

/// Where nesting first goes past `limit`: (line, column), both 1-based. One pass over
/// the bytes; a run of bytes that mean nothing here (most of a manifest) is stepped over
/// at once, and only its last byte is kept as the one before what follows.
pub fn too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    scan(text, limit, true)
}

/// `too_deep`; with `runs` false, one byte at a time (what the tests hold it to).
fn scan(text: &str, limit: usize, runs: bool) -> Option<(usize, usize)> {
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
        if runs && !SPECIAL[c as usize] {
            let run = b[i..]
                .iter()
                .position(|x| SPECIAL[*x as usize])
                .unwrap_or(b.len() - i);
            prev = Some(b[i + run - 1]);
            i += run;
            continue;
        }
        let at_start = matches!(prev, None | Some(b':' | b'-' | b',' | b'[' | b'{' | b'?'));
        match c {
            b'\n' => {
                i += 1;
                line += 1;
                line_start = i;
                continue;
            }
            b' ' | b'\t' | b'\r' if runs => {
                i += b[i..]
                    .iter()
                    .take_while(|x| matches!(x, b' ' | b'\t' | b'\r'))
                    .count();
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

/// The bytes `too_deep` looks at; any other byte only becomes the previous one.
const SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut k = 0;
    let bytes = b"\n \t\r#'\"[]{}|>";
    while k < bytes.len() {
        t[bytes[k] as usize] = true;
        k += 1;
    }
    t
};

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

    #[test]
    fn skipping_runs_agrees_with_the_byte_at_a_time_scan() {
        // Manifest-like text from pieces that exercise every rule, in random orders.
        let pieces = [
            "a: ",
            "- ",
            "[",
            "]",
            "{",
            "}",
            ", ",
            "x",
            "k: v",
            "\n",
            "  ",
            "\t",
            "# c [\n",
            "'q [ ''",
            "'",
            "\"d [ \\\" ",
            "\"",
            "|\n",
            ">-\n",
            "  [[\n",
            "run: t [ -f ]",
            "a[1]",
            "?",
            ":",
            "\r\n",
            "#",
            " #x\n",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..20_000 {
            let len = 1 + next(40);
            let text: String = (0..len).map(|_| pieces[next(pieces.len())]).collect();
            for limit in [0, 1, 2, 3, 5] {
                assert_eq!(
                    too_deep(&text, limit),
                    scan(&text, limit, false),
                    "{text:?} limit {limit}"
                );
            }
        }
    }
}
