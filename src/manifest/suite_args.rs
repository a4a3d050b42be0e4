//! `suite_args:` — the words that select a suite (`--platform {platform}`, `--manual
//! include`, `-m "not sdma"`, levels), written once and put wherever a command says
//! `{suite_args}`: the `scenes_from` generator, `prepare:` steps, lanes, workers, steps.
//! Invariant: the words reach every such command as the same shell words (each quoted),
//! before the command is parsed, so keys and `--plan` see the expanded command.

use crate::base::template::quote;

/// The placeholder as written in a command.
pub const PLACEHOLDER: &str = "{suite_args}";

/// Why `suite_args:` or a command's `{suite_args}` cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SuiteArgsError {
    /// A word of `suite_args:` has a placeholder other than `{platform}`.
    #[error("`{name}` in `{word}`: only `{{platform}}` is filled in suite_args")]
    Placeholder { name: String, word: String },
    #[error("`{{suite_args}}` is used, and the manifest has no top-level `suite_args:`")]
    NoSuiteArgs,
}

/// The shell text `words` expand to: each word quoted, `{platform}` kept as the
/// placeholder (filled like any other), literal braces doubled for the template parser.
/// Err: a word with a placeholder other than `{platform}`.
pub fn expansion(words: &[String]) -> Result<String, SuiteArgsError> {
    let mut out = Vec::with_capacity(words.len());
    for w in words {
        let mut text = String::new();
        for (i, part) in w.split("{platform}").enumerate() {
            if i > 0 {
                text.push_str("{platform}");
            }
            if part.contains('{') || part.contains('}') {
                if let Some(start) = part.find('{') {
                    let end = part[start..].find('}').map(|e| start + e + 1);
                    let name = end.map_or(&part[start..], |e| &part[start..e]);
                    if end.is_some() && !name.contains(' ') {
                        return Err(SuiteArgsError::Placeholder {
                            name: name.to_string(),
                            word: w.clone(),
                        });
                    }
                }
            }
            if !part.is_empty() {
                text.push_str(&quote(part).replace('{', "{{").replace('}', "}}"));
            }
        }
        if text.is_empty() {
            text.push_str("''");
        }
        out.push(text);
    }
    Ok(out.join(" "))
}

/// `text` with every `{suite_args}` (not `{{suite_args}}`) replaced by `expansion`;
/// None when it has none. Err when it has one and the manifest has no `suite_args:`.
pub fn substitute(text: &str, expansion: Option<&str>) -> Option<Result<String, SuiteArgsError>> {
    let found = replace(text, PLACEHOLDER, expansion.unwrap_or(""))?;
    Some(match expansion {
        Some(_) => Ok(found),
        None => Err(SuiteArgsError::NoSuiteArgs),
    })
}

/// `text` with every `placeholder` (written `{name}`, not `{{name}}`) replaced by
/// `with`; None when it has none. The one scan `{suite_args}` and the selections'
/// placeholders share.
pub fn replace(text: &str, placeholder: &str, with: &str) -> Option<String> {
    if !text.contains(placeholder) {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found = false;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("{{") || tail.starts_with("}}") {
            out.push_str(&tail[..2]);
            rest = &tail[2..];
        } else if let Some(after) = tail.strip_prefix(placeholder) {
            found = true;
            out.push_str(with);
            rest = after;
        } else {
            out.push_str(&tail[..1]);
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn words_are_quoted_and_platform_stays_a_placeholder() {
        let e = expansion(&words(&[
            "--platform",
            "{platform}",
            "-m",
            "not sdma",
            "--x={platform}",
        ]));
        assert_eq!(
            e.unwrap(),
            "--platform {platform} -m 'not sdma' '--x='{platform}"
        );
        assert!(expansion(&words(&["{devices}"])).is_err());
        assert_eq!(expansion(&words(&["a{b"])).unwrap(), "a{{b");
    }

    #[test]
    fn only_the_placeholder_is_replaced() {
        let got = substitute(
            "pytest {args} {suite_args} {{suite_args}}",
            Some("--p {platform}"),
        );
        assert_eq!(
            got.unwrap().unwrap(),
            "pytest {args} --p {platform} {{suite_args}}"
        );
        assert!(substitute("pytest {args}", Some("x")).is_none());
        assert!(substitute("{{suite_args}}", Some("x")).is_none());
        assert!(substitute("run {suite_args}", None).unwrap().is_err());
    }
}
