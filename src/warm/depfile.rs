//! Make-style depfiles as compilers write them (`-MD -MF`): several rules, line
//! continuations, `\ ` escaped spaces, `$$`. Only prerequisites matter: they are the
//! files the compiler read. Fixture and golden steps may also write one path per line
//! (`parse_any` tells the two apart, see docs/pytest.md).

/// The files a depfile names, as an entry's record keeps them: each resolved against
/// `base` (lexically), those under `staging` (what the step itself wrote) left out,
/// named as keys name files (relative to `base` when inside it) with the content hash
/// `hash` gives. Err: the first name that cannot be hashed, as the depfile wrote it, and
/// why.
pub fn recorded(
    paths: Vec<String>,
    base: &std::path::Path,
    staging: &std::path::Path,
    mut hash: impl FnMut(&std::path::Path) -> std::io::Result<String>,
) -> Result<Vec<crate::cache::Dep>, (String, std::io::Error)> {
    let mut deps = Vec::new();
    for p in paths {
        let path = crate::key::normalize(&base.join(&p));
        if path.starts_with(staging) {
            continue;
        }
        match hash(&path) {
            Ok(h) => deps.push(crate::cache::Dep {
                path: crate::key::key_name(base, &path).into(),
                blake3: h.into(),
            }),
            Err(e) => return Err((p, e)),
        }
    }
    Ok(deps)
}

/// A depfile of a fixture or golden step: Make-style when its first non-empty line
/// contains `: ` or ends with `:`, else one path per line (blank lines skipped).
pub fn parse_any(text: &str) -> Vec<String> {
    let first = text
        .lines()
        .map(str::trim_end)
        .find(|l| !l.trim().is_empty());
    let make = first.is_some_and(|l| l.contains(": ") || l.ends_with(':'));
    if make {
        return parse(text);
    }
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        if !out.iter().any(|p| p == line) {
            out.push(line.to_string());
        }
    }
    out
}

/// Every prerequisite, in order of first appearance, without duplicates.
pub fn parse(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let joined = text.replace("\\\r\n", " ").replace("\\\n", " ");
    for line in joined.lines() {
        let mut tokens: Vec<String> = Vec::new();
        let mut cur = String::new();
        let mut after_colon = false;
        let mut prereqs_from = None;
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            match c {
                '\\' if matches!(
                    chars.get(i + 1),
                    Some(' ') | Some('#') | Some(':') | Some('\\') | Some('\t')
                ) =>
                {
                    cur.push(chars[i + 1]);
                    i += 2;
                    continue;
                }
                '$' if chars.get(i + 1) == Some(&'$') => {
                    cur.push('$');
                    i += 2;
                    continue;
                }
                ' ' | '\t' => {
                    if !cur.is_empty() {
                        tokens.push(std::mem::take(&mut cur));
                    }
                }
                ':' if !after_colon && chars.get(i + 1).is_none_or(|n| n.is_whitespace()) => {
                    if !cur.is_empty() {
                        tokens.push(std::mem::take(&mut cur));
                    }
                    after_colon = true;
                    prereqs_from = Some(tokens.len());
                }
                '#' if cur.is_empty() => break,
                _ => cur.push(c),
            }
            i += 1;
        }
        if !cur.is_empty() {
            tokens.push(cur);
        }
        if let Some(from) = prereqs_from {
            for t in tokens.into_iter().skip(from) {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcc_style() {
        let d = "out.o: src/a.c include/a\\ b.h \\\n  include/c.h\ninclude/c.h:\nother.o x.o: src/a.c $$HOME/d.h\n";
        assert_eq!(
            parse(d),
            ["src/a.c", "include/a b.h", "include/c.h", "$HOME/d.h"]
        );
    }

    #[test]
    fn one_path_per_line_or_make() {
        assert_eq!(
            parse_any("a.py\n\nb dir/c.py\na.py\n"),
            ["a.py", "b dir/c.py"]
        );
        assert_eq!(
            parse_any("\nout: a.py b\\ c.py \\\n d.py\n"),
            ["a.py", "b c.py", "d.py"]
        );
        assert_eq!(parse_any("out:\n"), Vec::<String>::new());
        assert!(parse_any("").is_empty());
    }

    #[test]
    fn garbage_does_not_panic() {
        for t in ["", ":", "\\", "a:\\", "::: \\ \\", "# c\n x", "\u{0}:\u{1}"] {
            let _ = parse(t);
        }
    }
}
