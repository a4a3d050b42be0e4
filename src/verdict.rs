//! A scene test's verdict (`test:`, run in warm): the one file a test step leaves in its
//! `{out}`, written by the step (or, when it exits 0 and writes nothing, by warm as
//! `passed`) and read back, size-capped and without following links, by `device`.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The verdict's file name inside the step's `{out}` directory.
pub const FILE: &str = "verdict.json";

/// What warm writes for a test that exited 0 and wrote no verdict.
pub const PASSED: &str = "{\"outcome\": \"passed\"}\n";

/// How a test ended, in pytest's words, and `not_reached` (the suite's own runner would
/// have stopped before it): a scene test's verdict and a lane's end event alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// A test's verdict: how it ended and, for anything but a pass, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    let cap = crate::fsutil::Cap::new("a test's verdict", 1024 * 1024);
    let bytes = crate::fsutil::read_capped(&path, cap)
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
