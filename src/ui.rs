//! Terminal output: results on stdout, progress and diagnostics on stderr; indicatif only
//! on a TTY outside CI; `NO_COLOR` and `--color` honoured; `-q` keeps failures and the
//! final line.

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
}

#[derive(Debug, Clone, Default)]
pub struct BarSlot(Arc<Mutex<Option<indicatif::ProgressBar>>>);

impl BarSlot {
    pub fn set(&self, bar: Option<indicatif::ProgressBar>) {
        *self.0.lock().expect("bar slot") = bar;
    }

    /// `line` on stderr, above the bar when one is shown.
    fn eprint(&self, line: &str) {
        match self.0.lock().expect("bar slot").as_ref() {
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
    pub fn new(quiet: bool, verbose: u8, choice: Color) -> Ui {
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
        }
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

    pub fn dim(&self, t: &str) -> String {
        self.paint("2", t)
    }

    /// An error report (already formatted by `error::render`).
    pub fn error(&self, text: &str) {
        let mut e = std::io::stderr().lock();
        let _ = match text.strip_prefix("error:") {
            Some(rest) => write!(e, "{}{rest}", self.red("error:")),
            None => write!(e, "{text}"),
        };
    }

    /// A progress or status line on stderr (suppressed by -q).
    pub fn info(&self, line: &str) {
        if !self.quiet {
            self.bar.eprint(line);
        }
    }

    /// A line that -q keeps (failures, the final summary).
    pub fn always(&self, line: &str) {
        self.bar.eprint(line);
    }

    /// Result text on stdout.
    pub fn out(&self, text: &str) {
        let mut o = std::io::stdout().lock();
        let _ = o.write_all(text.as_bytes());
        let _ = o.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn term_dumb_and_no_color_turn_auto_color_off() {
        assert!(color_on(Color::Auto, true, false, false));
        assert!(!color_on(Color::Auto, true, false, true));
        assert!(!color_on(Color::Auto, true, true, false));
        assert!(!color_on(Color::Auto, false, false, false));
        assert!(color_on(Color::Always, false, true, true));
    }
}
