//! A scene test's verdict (`test:`, run in warm): the one file a test step leaves in its
//! `{out}`, written by the step (or, when it exits 0 and writes nothing, by warm as
//! `passed`) and read back, size-capped and without following links, by `device`.

use std::borrow::Cow;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The verdict's file name inside the step's `{out}` directory.
pub const FILE: &str = "verdict.json";

/// What warm writes for a test that exited 0 and wrote no verdict.
pub const PASSED: &str = "{\"outcome\": \"passed\"}\n";

/// How a test ended, in pytest's words, and `not_reached` (the suite's own runner would
/// have stopped before it): a scene test's verdict, a lane's end event, a reportlog
/// record's outcome. The one enum that holds these words: attempt and scene outcomes wrap
/// it (`AttemptOutcome::Test`, `SceneOutcome::Test`) beside scenerun's own endings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
    Xfailed,
    Xpassed,
    Error,
    NotReached,
}

impl Outcome {
    pub const ALL: [Outcome; 7] = [
        Outcome::Passed,
        Outcome::Failed,
        Outcome::Skipped,
        Outcome::Xfailed,
        Outcome::Xpassed,
        Outcome::Error,
        Outcome::NotReached,
    ];

    /// The word table: what JSON carries (serde writes the same, a test checks it).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Skipped => "skipped",
            Outcome::Xfailed => "xfailed",
            Outcome::Xpassed => "xpassed",
            Outcome::Error => "error",
            Outcome::NotReached => "not_reached",
        }
    }

    /// The word a person reads ("not reached").
    pub fn word(self) -> Cow<'static, str> {
        spoken(self.as_str())
    }

    /// Not a failure: pytest exits 0 on skips, xfails and xpasses alone.
    pub fn passed(self) -> bool {
        !matches!(self, Outcome::Failed | Outcome::Error)
    }

    /// Rule 1, one node's phases (setup, call, teardown) -> the node's verdict, as
    /// pytest counts a node: the worst phase, where a failure of any phase beats the
    /// call's own verdict and a passed phase says nothing. Setup passed + call skipped is
    /// skipped; call passed + teardown failed is an error (docs/pytest.md).
    pub fn of_phases(self, next: Outcome) -> Outcome {
        if phase_rank(next) > phase_rank(self) {
            next
        } else {
            self
        }
    }

    /// Rule 2, the tests of one scene -> the scene's verdict: any error, else any
    /// failure, else the verdict of the test that ran the furthest: one passed test and
    /// one skipped make a passed scene; a scene is skipped only when none of its tests
    /// ran (docs/pytest.md says why).
    pub fn of_tests(self, next: Outcome) -> Outcome {
        if scene_rank(next) > scene_rank(self) {
            next
        } else {
            self
        }
    }
}

/// Rule 1's order, weakest first (pytest's own node verdict).
fn phase_rank(o: Outcome) -> u8 {
    match o {
        Outcome::Passed => 0,
        Outcome::Xpassed => 1,
        Outcome::Xfailed => 2,
        Outcome::Skipped => 3,
        Outcome::NotReached => 4,
        Outcome::Failed => 5,
        Outcome::Error => 6,
    }
}

/// Rule 2's order, weakest first: a failure over anything, then what ran over what did not.
fn scene_rank(o: Outcome) -> u8 {
    match o {
        Outcome::NotReached => 0,
        Outcome::Skipped => 1,
        Outcome::Xfailed => 2,
        Outcome::Xpassed => 3,
        Outcome::Passed => 4,
        Outcome::Failed => 5,
        Outcome::Error => 6,
    }
}

/// A JSON word as a person reads it: `timed_out` -> `timed out`.
pub fn spoken(word: &'static str) -> Cow<'static, str> {
    if word.contains('_') {
        Cow::Owned(word.replace('_', " "))
    } else {
        Cow::Borrowed(word)
    }
}

/// "55 passed, 8 skipped, 4 failed": passed and failed always, the others when any, in
/// pytest's order of words.
pub fn summary_line(counts: impl Iterator<Item = Outcome>) -> String {
    let mut n = std::collections::BTreeMap::new();
    for t in counts {
        *n.entry(t).or_insert(0usize) += 1;
    }
    let order = [
        Outcome::Passed,
        Outcome::Skipped,
        Outcome::Xfailed,
        Outcome::Xpassed,
        Outcome::NotReached,
        Outcome::Failed,
        Outcome::Error,
    ];
    order
        .into_iter()
        .filter_map(|t| {
            let k = n.get(&t).copied().unwrap_or(0);
            let always = matches!(t, Outcome::Passed | Outcome::Failed);
            (k > 0 || always).then(|| {
                let word = if t == Outcome::Error && k != 1 {
                    "errors".into()
                } else {
                    t.word()
                };
                format!("{k} {word}")
            })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A test's verdict: how it ended and, for anything but a pass, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The longest message kept (the rest is cut, marked).
const MAX_MESSAGE: usize = 64 * 1024;

/// Read the verdict in `out` (the test step's artifact directory). Err: why it cannot
/// be read, for the scene's failure message.
pub fn read(out: &Path) -> Result<Verdict, String> {
    let path = out.join(FILE);
    let cap = crate::base::fsutil::Cap::new("a test's verdict", 1024 * 1024);
    let bytes = crate::base::fsutil::read_capped(&path, cap)
        .map_err(|e| format!("reading the test's verdict {}: {e}", path.display()))?;
    let mut v: Verdict = serde_json::from_slice(&bytes).map_err(|e| {
        format!(
            "the test's verdict {} is not {{\"outcome\": passed|failed|skipped|xfailed|xpassed|error|not_reached, \"message\": ...}}: {e}",
            path.display()
        )
    })?;
    if let Some(m) = v.message.as_mut().filter(|m| m.len() > MAX_MESSAGE) {
        let mut end = MAX_MESSAGE;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m.truncate(end);
        m.push_str(" [cut]");
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_word_is_what_serde_writes() {
        for o in Outcome::ALL {
            assert_eq!(
                serde_json::to_string(&o).unwrap(),
                format!("\"{}\"", o.as_str())
            );
        }
        assert_eq!(Outcome::NotReached.word(), "not reached");
    }

    #[test]
    fn the_two_rules() {
        use Outcome::*;
        let node = |v: &[Outcome]| v.iter().fold(Passed, |a, b| a.of_phases(*b));
        // setup passed, call skipped; call passed, teardown failed.
        assert_eq!(node(&[Passed, Skipped, Passed]), Skipped);
        assert_eq!(node(&[Passed, Passed, Error]), Error);
        assert_eq!(node(&[Passed, Failed, Error]), Error);
        let scene = |v: &[Outcome]| v[1..].iter().fold(v[0], |a, b| a.of_tests(*b));
        assert_eq!(scene(&[Passed, Skipped]), Passed);
        assert_eq!(scene(&[Skipped, Passed]), Passed);
        assert_eq!(scene(&[Skipped, Skipped]), Skipped);
        assert_eq!(scene(&[Xfailed, Skipped]), Xfailed);
        assert_eq!(scene(&[Passed, Failed, Skipped]), Failed);
        assert_eq!(scene(&[Failed, Error]), Error);
    }

    #[test]
    fn reads_what_a_step_writes_and_refuses_the_rest() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(FILE), PASSED).unwrap();
        assert_eq!(read(d.path()).unwrap().outcome, Outcome::Passed);
        std::fs::write(
            d.path().join(FILE),
            r#"{"outcome": "skipped", "message": "needs a2a3"}"#,
        )
        .unwrap();
        let v = read(d.path()).unwrap();
        assert_eq!(
            (v.outcome, v.message.as_deref()),
            (Outcome::Skipped, Some("needs a2a3"))
        );
        std::fs::write(d.path().join(FILE), r#"{"outcome": "fine"}"#).unwrap();
        assert!(read(d.path()).unwrap_err().contains("is not {\"outcome\""));
        std::fs::remove_file(d.path().join(FILE)).unwrap();
        assert!(read(d.path())
            .unwrap_err()
            .contains("reading the test's verdict"));
    }
}
