//! Command templates: `{placeholder}` parsing, per-context validation and shell-quoted
//! rendering. Every substituted value is quoted here, so a path with spaces or `;$()`
//! reaches the command as one word; nothing else in scenerun builds a command string.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Every placeholder name scenerun knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ph {
    Source,
    Out,
    Depfile,
    Includes,
    Flags,
    Platform,
    Scene,
    Kernel,
    Threads,
    Fixture,
    Kernels,
    Golden,
    Devices,
    DeviceCount,
    Run,
    Args,
    Scenes,
    Results,
    SelectionPaths,
    SelectionArgs,
    Outputs,
}

impl Ph {
    const ALL: [Ph; 21] = [
        Ph::Source,
        Ph::Out,
        Ph::Depfile,
        Ph::Includes,
        Ph::Flags,
        Ph::Platform,
        Ph::Scene,
        Ph::Kernel,
        Ph::Threads,
        Ph::Fixture,
        Ph::Kernels,
        Ph::Golden,
        Ph::Devices,
        Ph::DeviceCount,
        Ph::Run,
        Ph::Args,
        Ph::Scenes,
        Ph::Results,
        Ph::SelectionPaths,
        Ph::SelectionArgs,
        Ph::Outputs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Ph::Source => "source",
            Ph::Out => "out",
            Ph::Depfile => "depfile",
            Ph::Includes => "includes",
            Ph::Flags => "flags",
            Ph::Platform => "platform",
            Ph::Scene => "scene",
            Ph::Kernel => "kernel",
            Ph::Threads => "threads",
            Ph::Fixture => "fixture",
            Ph::Kernels => "kernels",
            Ph::Golden => "golden",
            Ph::Devices => "devices",
            Ph::DeviceCount => "device_count",
            Ph::Run => "run",
            Ph::Args => "args",
            Ph::Scenes => "scenes",
            Ph::Results => "results",
            Ph::SelectionPaths => "selection_paths",
            Ph::SelectionArgs => "selection_args",
            Ph::Outputs => "outputs",
        }
    }

    fn from_name(name: &str) -> Option<Ph> {
        Ph::ALL.iter().copied().find(|p| p.name() == name)
    }
}

/// Which placeholders each kind of command may use (docs/manifest.md).
pub mod allowed {
    use super::Ph::{self, *};
    pub const COMPILE: &[Ph] = &[
        Source, Out, Depfile, Includes, Flags, Platform, Scene, Kernel,
    ];
    pub const DEPFILE: &[Ph] = &[Depfile, Out, Source];
    pub const FIXTURE: &[Ph] = &[Out, Scene, Platform, Threads, Depfile];
    pub const GOLDEN: &[Ph] = &[Out, Scene, Platform, Threads, Fixture, Depfile];
    /// A scene's `test:` (a CPU-only test run in warm), with `{fixture}` and `{golden}`
    /// when the scene has them.
    pub const TEST: &[Ph] = &[Out, Scene, Platform, Threads, Fixture, Golden, Depfile];
    /// Top-level `prepare:` steps: shared by every scene, so no `{scene}`.
    pub const PREPARE: &[Ph] = &[Out, Platform, Threads, Depfile];
    pub const DEVICE: &[Ph] = &[Kernels, Fixture, Golden, Devices, Scene, Platform, Outputs];
    pub const LOCK: &[Ph] = &[DeviceCount, Run];
    /// `lanes.*.run`: one process runs a batch of scenes (docs/lanes.md).
    pub const LANE: &[Ph] = &[
        Devices,
        Args,
        Scenes,
        Results,
        Platform,
        SelectionPaths,
        SelectionArgs,
    ];
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Seg {
    Lit(String),
    Ph(Ph),
}

/// A parsed command template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    pub segs: Vec<Seg>,
}

/// A value to put in place of a placeholder.
pub enum Val<'a> {
    /// One word, shell-quoted.
    One(Cow<'a, str>),
    /// Several words, each quoted, separated by spaces.
    Many(Cow<'a, [String]>),
    /// Inserted as it is (masks such as `<out>`, already-quoted text).
    Raw(Cow<'a, str>),
    /// The placeholder itself, as written (`{out}`): what a key sees of a path.
    Mask(Ph),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError(pub String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Template {
    /// Parse `text`, accepting only the placeholders in `allowed`. `${VAR}` is shell
    /// syntax and passes through; `{{`/`}}` are literal braces; any other `{word}` is an
    /// error. Braces not of the form `{word}` (shell groups, brace expansion) are literal.
    pub fn parse(text: &str, allowed: &[Ph]) -> Result<Template, Vec<TemplateError>> {
        let mut segs = Vec::new();
        let mut lit = String::new();
        let mut errors = Vec::new();
        let b = text.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if c == b'{' && b.get(i + 1) == Some(&b'{') {
                lit.push('{');
                i += 2;
                continue;
            }
            if c == b'}' && b.get(i + 1) == Some(&b'}') {
                lit.push('}');
                i += 2;
                continue;
            }
            if c == b'$' && b.get(i + 1) == Some(&b'{') {
                // Shell parameter expansion: copy through its closing brace.
                let end = text[i..].find('}').map(|e| i + e + 1).unwrap_or(b.len());
                lit.push_str(&text[i..end]);
                i = end;
                continue;
            }
            if c == b'{' {
                if let Some(len) = word_len(&b[i + 1..]) {
                    if b.get(i + 1 + len) == Some(&b'}') {
                        let name = &text[i + 1..i + 1 + len];
                        match Ph::from_name(name) {
                            Some(p) if allowed.contains(&p) => {
                                if !lit.is_empty() {
                                    segs.push(Seg::Lit(std::mem::take(&mut lit)));
                                }
                                segs.push(Seg::Ph(p));
                            }
                            _ => errors.push(TemplateError(format!(
                                "unknown placeholder `{{{name}}}` here (allowed: {}; write `{{{{` for a literal brace)",
                                allowed
                                    .iter()
                                    .map(|p| format!("{{{}}}", p.name()))
                                    .collect::<Vec<_>>()
                                    .join(" ")
                            ))),
                        }
                        i += len + 2;
                        continue;
                    }
                }
            }
            // Copy one whole UTF-8 character.
            let ch = text[i..].chars().next().expect("in bounds");
            lit.push(ch);
            i += ch.len_utf8();
        }
        if !lit.is_empty() {
            segs.push(Seg::Lit(lit));
        }
        if errors.is_empty() {
            Ok(Template { segs })
        } else {
            Err(errors)
        }
    }

    pub fn uses(&self, p: Ph) -> bool {
        self.segs.contains(&Seg::Ph(p))
    }

    /// Fill every placeholder with `value(ph)`, quoting as the value asks.
    pub fn render<'a>(&self, mut value: impl FnMut(Ph) -> Val<'a>) -> String {
        // Sized for a typical command at once: a plan renders one per step (thousands),
        // and growing from empty reallocated each a few times.
        let mut out = String::with_capacity(256);
        for seg in &self.segs {
            match seg {
                Seg::Lit(s) => out.push_str(s),
                Seg::Ph(p) => match value(*p) {
                    Val::One(s) => out.push_str(&quote(&s)),
                    Val::Many(words) => {
                        for (i, w) in words.iter().enumerate() {
                            if i > 0 {
                                out.push(' ');
                            }
                            out.push_str(&quote(w));
                        }
                    }
                    Val::Raw(s) => out.push_str(&s),
                    Val::Mask(p) => {
                        out.push('{');
                        out.push_str(p.name());
                        out.push('}');
                    }
                },
            }
        }
        out
    }
}

fn word_len(b: &[u8]) -> Option<usize> {
    let first = *b.first()?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    Some(
        b.iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .count(),
    )
}

/// Shell-quote one word (single quotes unless it is plainly safe).
pub fn quote(s: &str) -> Cow<'_, str> {
    shell_words::quote(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mask_is_its_placeholder_as_written() {
        for p in Ph::ALL {
            let t = Template {
                segs: vec![Seg::Ph(p)],
            };
            assert_eq!(t.render(Val::Mask), format!("{{{}}}", p.name()));
        }
    }

    fn render_all(t: &Template) -> String {
        t.render(|p| match p {
            Ph::Out => Val::One("/tmp/a b;$(x)".into()),
            Ph::Flags => Val::Many(vec!["-O2".into(), "-D X=1".into()].into()),
            _ => Val::Raw(format!("<{}>", p.name()).into()),
        })
    }

    #[test]
    fn placeholders_braces_and_shell_vars() {
        let t = Template::parse(
            "gen {out} ${HOME} {{x}} {flags} { echo; } {a,b}",
            allowed::COMPILE,
        )
        .unwrap();
        assert_eq!(
            render_all(&t),
            "gen '/tmp/a b;$(x)' ${HOME} {x} -O2 '-D X=1' { echo; } {a,b}"
        );
    }

    #[test]
    fn unknown_and_out_of_context_placeholders_are_errors() {
        let e = Template::parse("./gen.sh {fixture} {bogus}", allowed::FIXTURE).unwrap_err();
        assert_eq!(e.len(), 2);
        assert!(e[0].0.contains("{fixture}"), "{e:?}");
        assert!(e[1].0.contains("{bogus}"), "{e:?}");
    }

    #[test]
    fn unicode_passes_through() {
        let t = Template::parse("echo héllo {out} ✓", allowed::FIXTURE).unwrap();
        assert_eq!(render_all(&t), "echo héllo '/tmp/a b;$(x)' ✓");
    }
}
