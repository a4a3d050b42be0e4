//! The live file: the inner run appends one typed line (a JSON object) per thing it has
//! to show — the run starting, a scene settled or tried, a warning, a lane process's
//! end — to a JSON-lines file in the job dir, and the outer follows that file while the
//! lock command (or the in-process inner run) runs: the inner run's own stderr belongs
//! to the lock tool, so the file is the one channel to the user. Nothing here words a
//! line: report/ (`report::live`) renders them.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::events::{Attempt, Event, FollowUp, LaneRecord};
use super::SceneOutcome;
use crate::base::notice::LaneNotice;

/// One line of the live file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Live {
    /// Scenes settled so far, of `total`.
    pub done: usize,
    pub total: usize,
    /// A failure or warning (kept by `-q`).
    pub loud: bool,
    /// Whether it is a pass (green) or not (red) or neutral.
    pub ok: Option<bool>,
    pub line: Line,
}

/// What one line of the live file says.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    /// The run starts: this many scenes on these ids.
    Run { scenes: usize, ids: Vec<String> },
    /// A scene settled without running (failed in warm, no device step, not warm...).
    Settled {
        name: String,
        outcome: SceneOutcome,
        message: Option<String>,
    },
    /// One attempt of scene `name` ended; `follow`: what comes after it.
    Attempt {
        name: String,
        attempt: Attempt,
        follow: FollowUp,
    },
    /// Something a lane process did was ignored or worked around.
    Warning { notice: LaneNotice },
    /// A lane process ended.
    Lane { record: LaneRecord },
}

/// Appends the inner run's lines to the live file.
pub struct Writer {
    file: Option<std::fs::File>,
    total: usize,
    done: usize,
}

impl Writer {
    pub fn new(path: &Path, total: usize) -> Writer {
        Writer {
            file: std::fs::File::create(path).ok(),
            total,
            done: 0,
        }
    }

    fn write(&mut self, loud: bool, ok: Option<bool>, line: Line) {
        let l = Live {
            done: self.done,
            total: self.total,
            loud,
            ok,
            line,
        };
        if let Some(f) = self.file.as_mut() {
            if let Ok(mut s) = serde_json::to_string(&l) {
                s.push('\n');
                let _ = f.write_all(s.as_bytes());
            }
        }
    }

    /// The run starts on `ids`.
    pub fn run(&mut self, ids: &[String]) {
        let line = Line::Run {
            scenes: self.total,
            ids: ids.to_vec(),
        };
        self.write(false, None, line);
    }

    /// A scene settled without running.
    pub fn settled(&mut self, name: &str, outcome: SceneOutcome, message: Option<&str>) {
        self.done += 1;
        let ok = outcome.passed();
        let line = Line::Settled {
            name: name.to_string(),
            outcome,
            message: message.map(str::to_string),
        };
        self.write(!ok, Some(ok), line);
    }

    /// One event; `name` gives scene names, `follow` what comes after an attempt.
    pub fn event(&mut self, e: &Event, name: &str, follow: FollowUp) {
        match e {
            Event::Attempt { attempt, .. } => {
                if follow == FollowUp::Final {
                    self.done += 1;
                }
                let ok = attempt.outcome.not_a_failure();
                let line = Line::Attempt {
                    name: name.to_string(),
                    attempt: attempt.clone(),
                    follow,
                };
                self.write(!ok, Some(ok), line);
            }
            Event::Warning(w) => self.write(true, None, Line::Warning { notice: w.clone() }),
            Event::Lane(r) => {
                let line = Line::Lane { record: r.clone() };
                self.write(r.restart_reason.is_some(), None, line);
            }
            Event::Fault { .. } | Event::Done { .. } | Event::Started { .. } => {}
        }
    }
}
