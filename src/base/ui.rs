//! Terminal output: results on stdout, progress and diagnostics on stderr; indicatif only
//! on a TTY outside CI; `NO_COLOR` and `--color` honoured; `-q` keeps failures and the
//! final line. Invariant: nothing reaches stdout or stderr through here with a raw control
//! character or bidirectional override (`escape`): text from records, lanes, generators
//! and steps is untrusted.

use std::borrow::Cow;
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};

/// `--color`: when stderr gets colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Color {
    Auto,
    Always,
    Never,
}

/// `--format`: how results are printed on stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct Ui {
    pub quiet: bool,
    pub verbose: u8,
    pub color: bool,
    /// Progress bars (TTY, not CI).
    pub bars: bool,
    pub github: bool,
    /// The progress bar on screen, if any, shared by every clone of this `Ui`: a line
    /// printed from another thread meanwhile (a remote-cache warning) goes above it
    /// instead of through it.
    pub bar: BarSlot,
    /// The words of a notice posted on the `warning` board: report/'s one renderer of
    /// notices (`report::notice::words`), handed in by the entry, as this layer may not
    /// call up into report/.
    pub words: Words,
}

/// A notice's line, as report/ words it.
pub type Words = fn(&crate::base::notice::Notice) -> String;

#[derive(Debug, Clone, Default)]
pub struct BarSlot(
    Arc<Mutex<Option<indicatif::ProgressBar>>>,
    /// Tests only: the lines that would have reached stderr, kept here instead.
    #[cfg(test)]
    Option<Arc<Mutex<String>>>,
);

impl BarSlot {
    /// Tests only: a slot that keeps what would be printed on stderr, for `taken`.
    #[cfg(test)]
    pub fn capturing() -> BarSlot {
        BarSlot(Arc::default(), Some(Arc::default()))
    }

    /// Tests only: what was kept since the last call (escaped as it would be printed).
    #[cfg(test)]
    pub fn taken(&self) -> String {
        self.1
            .as_ref()
            .map(|c| std::mem::take(&mut *c.lock().unwrap()))
            .unwrap_or_default()
    }

    pub fn set(&self, bar: Option<indicatif::ProgressBar>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = bar;
    }

    /// `line` on stderr, above the bar when one is shown.
    fn eprint(&self, line: &str) {
        #[cfg(test)]
        if let Some(c) = &self.1 {
            c.lock().unwrap().push_str(&format!("{line}\n"));
            return;
        }
        match self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            Some(pb) => pb.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}

/// Whether `--color` and the environment ask for color: `auto` means a terminal that is
/// not `TERM=dumb`, without `NO_COLOR`.
fn color_on(choice: Color, tty: bool, no_color: bool, dumb: bool) -> bool {
    match choice {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => tty && !dumb && !no_color,
    }
}

impl Ui {
    /// The terminal as `-q`, `-v` (a count) and `--color` and the environment ask for.
    pub fn new(quiet: bool, verbose: u8, choice: Color, words: Words) -> Ui {
        let dumb = std::env::var("TERM").as_deref() == Ok("dumb");
        let tty = std::io::stderr().is_terminal();
        let color = color_on(choice, tty, std::env::var_os("NO_COLOR").is_some(), dumb);
        Ui {
            quiet,
            verbose,
            color,
            bars: tty && !dumb && std::env::var_os("CI").is_none() && !quiet,
            github: std::env::var("GITHUB_ACTIONS").as_deref() == Ok("true"),
            bar: BarSlot::default(),
            words,
        }
    }

    /// `text` as it may be written: escaped, keeping this `Ui`'s own colours.
    pub(crate) fn safe<'t>(&self, text: &'t str) -> Cow<'t, str> {
        escape_keeping(text, self.color)
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn red(&self, t: &str) -> String {
        self.paint("31", t)
    }

    pub fn green(&self, t: &str) -> String {
        self.paint("32", t)
    }

    pub fn yellow(&self, t: &str) -> String {
        self.paint("33", t)
    }

    pub fn dim(&self, t: &str) -> String {
        self.paint("2", t)
    }

    /// The base layer's warnings posted since the last line (`warning::take`), each
    /// said once, before whatever this terminal prints next. A test's capturing terminal
    /// leaves them (they belong to the process, not to the test).
    fn posted(&self) -> Vec<String> {
        #[cfg(test)]
        if self.bar.1.is_some() {
            return Vec::new();
        }
        crate::base::warning::take()
            .iter()
            .map(|w| self.safe(&(self.words)(w)).into_owned())
            .collect()
    }

    /// Say the base layer's warnings still unsaid (the command ends).
    pub fn say_posted(&self) {
        for w in self.posted() {
            self.bar.eprint(&w);
        }
    }

    /// An error report (already formatted by `error::render`).
    pub fn error(&self, text: &str) {
        self.say_posted();
        let text = escape(text);
        let mut e = std::io::stderr().lock();
        let _ = match text.strip_prefix("error:") {
            Some(rest) => write!(e, "{}{rest}", self.red("error:")),
            None => write!(e, "{text}"),
        };
    }

    /// A progress or status line on stderr (suppressed by -q).
    pub fn info(&self, line: &str) {
        self.say_posted();
        if !self.quiet {
            self.bar.eprint(&self.safe(line));
        }
    }

    /// A line that -q keeps (failures, the final summary).
    pub fn always(&self, line: &str) {
        self.say_posted();
        self.bar.eprint(&self.safe(line));
    }

    /// Result text on stdout (JSON stays JSON: the escapes are its own).
    pub fn out(&self, text: &str) {
        let text = self.safe(text);
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
    }

    /// A line on stderr above `bar` (the device phase's live lines), escaped.
    pub fn above(&self, bar: Option<&indicatif::ProgressBar>, text: &str) {
        let text = self.safe(text);
        for line in self.posted().iter().map(String::as_str).chain([&*text]) {
            match bar {
                Some(b) => b.println(line),
                None => {
                    let mut e = std::io::stderr().lock();
                    let _ = writeln!(e, "{line}");
                }
            }
        }
    }
}

/// The colour sequences `Ui::paint` writes, kept by `escape_keeping` when colour is on.
const OWN_COLOURS: [&str; 5] = ["\x1b[31m", "\x1b[32m", "\x1b[33m", "\x1b[2m", "\x1b[0m"];

/// Whether `c` must not reach a terminal as it is: a C0 control other than newline and
/// tab, DEL, a C1 control, or a Unicode bidirectional control (embeddings, overrides,
/// isolates and marks: they reorder what a terminal or a CI log shows, "Trojan Source").
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Whether a byte can start an `unsafe_char`: a C0 control other than newline and tab,
/// DEL, or the lead byte of a C1 control (0xc2), of U+061C (0xd8) or of the bidi marks
/// (0xe2). Every such byte is a char boundary (none is a continuation byte).
fn suspect(b: u8) -> bool {
    (b < 0x20 && b != b'\n' && b != b'\t') | (b == 0x7f) | (b == 0xc2) | (b == 0xd8) | (b == 0xe2)
}

/// Whether `text` holds an `unsafe_char`. Most text has none, and a plan's text is
/// megabytes: blocks of 32 bytes are tested without a branch per byte (the compiler
/// makes that a few vector compares), and only a block with a suspect byte is looked
/// at char by char, from its suspect bytes.
fn needs_escape(text: &str) -> bool {
    const BLOCK: usize = 32;
    let bytes = text.as_bytes();
    let suspect_at =
        |i: usize| suspect(bytes[i]) && text[i..].chars().next().is_some_and(unsafe_char);
    let mut blocks = bytes.chunks_exact(BLOCK);
    for (k, block) in blocks.by_ref().enumerate() {
        if block.iter().fold(false, |any, &b| any | suspect(b))
            && (k * BLOCK..(k + 1) * BLOCK).any(suspect_at)
        {
            return true;
        }
    }
    let tail = bytes.len() - blocks.remainder().len();
    (tail..bytes.len()).any(suspect_at)
}

/// Columns of the terminal on stderr: what the terminal says, else `$COLUMNS`, else 80.
pub fn columns() -> usize {
    // SAFETY: a zeroed winsize is a valid value; TIOCGWINSZ writes one into it, which
    // lives through the call.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    if unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0
    {
        return usize::from(ws.ws_col);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .filter(|&c: &usize| c > 0)
        .unwrap_or(80)
}

/// Columns a progress line keeps for its message (the running steps) at least.
const MESSAGE_ROOM: usize = 20;

/// Warm's progress bar for a terminal `columns` wide with `total` steps: its template
/// and the columns left for the message (the running steps). The bar (at most 30
/// columns) shrinks so that `warm [bar] pos/len` leaves the message room, and goes when
/// it would be under 8; one column stays free (a line that fills the last column wraps
/// on some terminals). The message is cut to its room by the caller ([`fit`]): a wide
/// element would be padded to what indicatif takes for the width, not the terminal's.
pub fn warm_bar(columns: usize, total: usize) -> (String, usize) {
    let digits = total.to_string().len();
    // "warm " + "[" + "] " + "pos/len" + " "
    let fixed = 5 + 3 + 2 * digits + 1 + 1;
    match columns.saturating_sub(fixed + MESSAGE_ROOM + 1).min(30) {
        0..=7 => (
            "warm {pos}/{len} {msg}".to_string(),
            columns.saturating_sub(fixed - 3 + 1),
        ),
        n => (
            format!("warm [{{bar:{n}}}] {{pos}}/{{len}} {{msg}}"),
            columns.saturating_sub(fixed + n + 1),
        ),
    }
}

/// stderr as the terminal a progress bar draws on, `columns` wide ([`columns`]):
/// indicatif's own guess is 80 columns where the terminal reports no rows, and it pads
/// each line to the width it believes.
#[derive(Debug)]
pub struct BarTerm {
    columns: u16,
}

impl BarTerm {
    pub fn new(columns: usize) -> BarTerm {
        BarTerm {
            columns: u16::try_from(columns).unwrap_or(u16::MAX),
        }
    }

    fn put(&self, s: &str) -> std::io::Result<()> {
        use std::io::Write;
        std::io::stderr().lock().write_all(s.as_bytes())
    }

    fn csi(&self, n: usize, code: char) -> std::io::Result<()> {
        match n {
            0 => Ok(()),
            n => self.put(&format!("\x1b[{n}{code}")),
        }
    }
}

impl indicatif::TermLike for BarTerm {
    fn width(&self) -> u16 {
        self.columns
    }

    fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'A')
    }

    fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'B')
    }

    fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'C')
    }

    fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
        self.csi(n, 'D')
    }

    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.put(&format!("{s}\n"))
    }

    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }

    fn clear_line(&self) -> std::io::Result<()> {
        self.put("\r\x1b[2K")
    }

    fn flush(&self) -> std::io::Result<()> {
        use std::io::Write;
        std::io::stderr().flush()
    }
}

/// `text` cut to `room` columns (chars), ending in `…` when cut.
pub fn fit(text: &str, room: usize) -> Cow<'_, str> {
    if text.chars().count() <= room {
        return Cow::Borrowed(text);
    }
    let kept: String = text.chars().take(room.saturating_sub(1)).collect();
    Cow::Owned(format!("{kept}…"))
}

/// `[ 7/42]`: a progress counter, the count padded to the width of the total so that
/// the lines below each other stay aligned.
pub fn counter(done: usize, total: usize) -> String {
    let w = total.to_string().len();
    format!("[{done:>w$}/{total}]")
}

/// Text from outside scenerun as a terminal may be given it: each `unsafe_char` becomes
/// `\uXXXX` (which is also how JSON writes it, so JSON stays JSON and means the same).
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_keeping(text, false)
}

/// `escape`, keeping `OWN_COLOURS` when `colours` is on.
fn escape_keeping(text: &str, colours: bool) -> Cow<'_, str> {
    if !needs_escape(text) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if colours {
            if let Some(own) = OWN_COLOURS.iter().find(|s| rest.starts_with(**s)) {
                out.push_str(own);
                rest = &rest[own.len()..];
                continue;
            }
        }
        if unsafe_char(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every colour `Ui` paints with reaches the terminal as a colour, not escaped:
    /// yellow (a skip in the summary table and the live lines) was once missing.
    #[test]
    fn its_own_colours_are_kept_when_colour_is_on() {
        let ui = Ui {
            quiet: false,
            verbose: 0,
            color: true,
            bars: false,
            github: false,
            bar: BarSlot::default(),
            words: |_| String::new(),
        };
        for painted in [ui.red("x"), ui.green("x"), ui.yellow("x"), ui.dim("x")] {
            assert_eq!(ui.safe(&painted), painted);
        }
        let plain = Ui {
            color: false,
            ..ui.clone()
        };
        assert_eq!(plain.safe(&ui.yellow("x")), "\\u001b[33mx\\u001b[0m");
    }

    /// The bar line (fixed part + the message's room) never exceeds the terminal's
    /// width where that leaves the message 20 columns; the bar is at most 30 columns and
    /// goes on a narrow terminal.
    #[test]
    fn the_warm_bar_fits_the_terminal() {
        for columns in [40, 50, 60, 80, 120, 300] {
            for total in [9, 42, 20_000] {
                let (t, room) = warm_bar(columns, total);
                let bar = t
                    .split("{bar:")
                    .nth(1)
                    .map_or(0, |r| r[..r.find('}').unwrap()].parse::<usize>().unwrap());
                let pos_len = 2 * total.to_string().len() + 1;
                let fixed = "warm ".len() + if bar > 0 { bar + 3 } else { 0 } + pos_len + 1;
                assert!(bar <= 30, "{columns}: {t}");
                assert_eq!(fixed + room + 1, columns, "{columns}, {total}: {t}");
                assert!(room >= MESSAGE_ROOM, "{columns}, {total}: {t}");
            }
        }
        assert_eq!(warm_bar(80, 42).0, "warm [{bar:30}] {pos}/{len} {msg}");
        assert_eq!(warm_bar(30, 42).0, "warm {pos}/{len} {msg}");
        assert_eq!(warm_bar(60, 42).0, "warm [{bar:25}] {pos}/{len} {msg}");
        assert_eq!(fit("abcdef", 4), "abc…");
        assert_eq!(fit("abc", 4), "abc");
    }

    #[test]
    fn controls_and_bidi_are_escaped_own_colours_kept() {
        let t = "a\x1b[2Jb\u{9b}c\rd\u{202e}e\u{2066}f\x7fg\n\th";
        assert_eq!(
            escape(t),
            "a\\u001b[2Jb\\u009bc\\u000dd\\u202ee\\u2066f\\u007fg\n\th"
        );
        assert!(matches!(escape("plain é ✓ text\n"), Cow::Borrowed(_)));
        // Found wherever it sits: in a block, across blocks, in the tail; and not found
        // in a long text of suspect lead bytes that start only safe chars.
        let long = "─✓ é é ".repeat(40);
        assert!(matches!(escape(&long), Cow::Borrowed(_)));
        for at in [0, 31, 32, 33, 95, long.len()] {
            let at = (at..=long.len())
                .find(|&i| long.is_char_boundary(i))
                .unwrap();
            let mut t = long.clone();
            t.insert(at, '\u{202e}');
            assert!(needs_escape(&t), "at {at}");
            assert_eq!(escape(&t).matches("\\u202e").count(), 1, "at {at}");
        }
        let painted = "\x1b[31mred\x1b[0m \x1b[7m";
        assert_eq!(
            escape_keeping(painted, true),
            "\x1b[31mred\x1b[0m \\u001b[7m"
        );
        assert_eq!(
            escape_keeping(painted, false),
            "\\u001b[31mred\\u001b[0m \\u001b[7m"
        );
        // JSON written by serde_json stays valid JSON, with the same meaning.
        let json = serde_json::to_string(&serde_json::json!({"m": "x\u{202e}\u{85}y"})).unwrap();
        let v: serde_json::Value = serde_json::from_str(&escape(&json)).unwrap();
        assert_eq!(v["m"], "x\u{202e}\u{85}y");
    }

    #[test]
    fn term_dumb_and_no_color_turn_auto_color_off() {
        assert!(color_on(Color::Auto, true, false, false));
        assert!(!color_on(Color::Auto, true, false, true));
        assert!(!color_on(Color::Auto, true, true, false));
        assert!(!color_on(Color::Auto, false, false, false));
        assert!(color_on(Color::Always, false, true, true));
    }
}
