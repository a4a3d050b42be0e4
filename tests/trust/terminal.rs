//! Untrusted text on the terminal (docs/cache-trust.md, "Text from outside"): what a
//! cache record, a lane's results line or a generator's output says reaches stdout and
//! stderr with its control characters and bidirectional overrides escaped (`\u001b`,
//! `\u202e`), so it can neither drive the terminal nor reorder what is shown. And the
//! report dir's `logs/<scene>` is never written through a link planted there.

use std::fs;

use super::*;

/// What a hostile text carries: a screen clear, a cursor move, a C1 CSI, a carriage
/// return, a right-to-left override and an isolate.
const HOSTILE: &str = "X\u{1b}[2J\u{1b}[1;1H\u{9b}31m\rY\u{202e}Z\u{2066}W";

/// Characters that must never reach the terminal raw: C0 controls other than newline and
/// tab, DEL, C1 controls, and the Unicode bidirectional controls. With `colours`, the SGR
/// sequences scenerun paints with (`ESC[31m`, `ESC[32m`, `ESC[2m`, `ESC[0m`) are allowed.
fn raw_controls(text: &str, colours: bool) -> Vec<String> {
    let mut rest = text;
    let mut found = Vec::new();
    while let Some(c) = rest.chars().next() {
        if colours {
            if let Some(after) = ["\u{1b}[31m", "\u{1b}[32m", "\u{1b}[2m", "\u{1b}[0m"]
                .iter()
                .find_map(|s| rest.strip_prefix(s))
            {
                rest = after;
                continue;
            }
        }
        let bad = (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if bad {
            found.push(format!("U+{:04X}", c as u32));
        }
        rest = &rest[c.len_utf8()..];
    }
    found
}

fn assert_clean(what: &str, o: &std::process::Output, colours: bool) {
    for (stream, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        let text = String::from_utf8_lossy(bytes);
        let raw = raw_controls(&text, colours);
        assert!(raw.is_empty(), "{what}: raw {raw:?} on {stream}:\n{text}");
    }
}

/// A lane whose results line carries the hostile text as a scene's message and as an
/// unknown scene's name: the live lines, the table and the warnings show it escaped.
#[test]
fn a_results_line_reaches_the_terminal_escaped() {
    let s = Suite::with_logs();
    let msg = serde_json::to_string(HOSTILE).unwrap();
    s.script(
        "lane.sh",
        &format!(
            "#!/bin/sh\nprintf '%s\\n' '{{\"scene\":\"s0\",\"event\":\"end\",\"outcome\":\"failed\",\"message\":{msg}}}' >> \"$2\"\nprintf '%s\\n' '{{\"scene\":{msg},\"event\":\"end\",\"outcome\":\"passed\"}}' >> \"$2\"\nprintf '%s\\n' {} >&2\nexit 0\n",
            shell_words::quote(HOSTILE)
        ),
    );
    s.manifest(
        "version: 1\ncache:\n  dir: cache\nlanes:\n  l:\n    run: \"./lane.sh {scenes} {results}\"\nscenes:\n  - name: s0\n    device:\n      lane: l\n",
    );
    for colour in ["never", "always"] {
        let o = run(
            &s,
            &["--color", colour, "device", "--no-lock", "--devices", "0"],
        );
        assert_eq!(code(&o), 1, "{}", show(&o));
        assert!(
            stderr(&o).contains("\\u001b[2J"),
            "the message is shown, escaped: {}",
            show(&o)
        );
        assert_clean(&format!("device, colour {colour}"), &o, colour == "always");
    }
}

/// A generator that fails printing the hostile text on stderr, and one whose scene
/// names carry it: the errors show it escaped.
#[test]
fn generator_output_reaches_the_terminal_escaped() {
    let s = Suite::with_logs();
    let quoted = shell_words::quote(HOSTILE).to_string();
    s.script(
        "fail.sh",
        &format!("#!/bin/sh\nprintf '%s\\n' {quoted} >&2\nexit 3\n"),
    );
    s.script(
        "names.sh",
        &format!(
            "#!/bin/sh\nprintf -- '- name: %s\\n' {}\n",
            shell_words::quote(&serde_json::to_string(HOSTILE).unwrap())
        ),
    );
    for gen in ["./fail.sh", "./names.sh"] {
        s.manifest(&format!(
            "version: 1\ncache:\n  dir: cache\nscenes_from:\n  - run: \"{gen}\"\nscenes: []\n"
        ));
        let o = run(&s, &["plan"]);
        assert_eq!(code(&o), 4, "{}", show(&o));
        assert!(stderr(&o).contains("\\u202e"), "{gen}: {}", show(&o));
        assert_clean(gen, &o, false);
    }
}

/// A tampered key-input record (`inputs.json` in the cache) whose file name carries the
/// hostile text: `explain` names it, escaped.
#[test]
fn a_tampered_cache_record_reaches_the_terminal_escaped() {
    let s = light_suite();
    warm_fresh(&s);
    let p = s.path("cache/inputs.json");
    let text = fs::read_to_string(&p).unwrap();
    let tampered = text.replacen(
        "\"gen.sh\"",
        &serde_json::to_string(&format!("gen.sh{HOSTILE}")).unwrap(),
        1,
    );
    assert_ne!(text, tampered, "a record names gen.sh: {text}");
    fs::write(&p, tampered).unwrap();
    s.script(
        "gen.sh",
        "#!/bin/sh\necho changed >> logs/gen.log\necho 21 > \"$1/input.txt\"\n",
    );
    for args in [&["explain"][..], &["--color", "always", "explain"]] {
        let o = run(&s, args);
        assert_eq!(code(&o), 0, "{}", show(&o));
        assert!(stdout(&o).contains("\\u202e"), "{}", show(&o));
        assert_clean("explain", &o, args.len() > 1);
    }
}

/// `build/scenerun/logs/<scene>` (and `logs/` itself) planted as links to a victim dir:
/// warm and device write their logs into real directories they make there; the links
/// are gone, the victim is untouched.
#[test]
fn a_link_at_logs_scene_is_never_written_through() {
    for spot in ["logs/s0", "logs"] {
        let s = light_suite();
        let v = Victim::new();
        let before = v.snapshot();
        let at = s.path(&format!("build/scenerun/{spot}"));
        fs::create_dir_all(at.parent().unwrap()).unwrap();
        symlink(v.dir.path(), &at);
        let o = run(&s, &["warm"]);
        assert_eq!(code(&o), 0, "{spot}: {}", show(&o));
        let o = run(&s, &["device", "--no-lock", "--devices", "0"]);
        assert_eq!(code(&o), 0, "{spot}: {}", show(&o));
        assert_eq!(v.snapshot(), before, "{spot}: the victim changed");
        let m = fs::symlink_metadata(&at).unwrap();
        assert!(m.is_dir(), "{spot} is a real directory now");
        assert!(
            s.path("build/scenerun/logs/s0/fixture.log").is_file()
                && s.path("build/scenerun/logs/s0/device.log").is_file(),
            "{spot}: the logs are where they belong"
        );
    }
}
