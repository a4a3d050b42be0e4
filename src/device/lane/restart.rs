//! When a lane process asks for a restart without writing a restart line
//! (`lanes.<name>.restart_on`, docs/lanes.md): its exit status, or a line of its output
//! matching a pattern. The output is scanned as it is written, a bounded chunk per look,
//! so a poisoned runtime that keeps running is restarted without waiting for its end.

use std::path::Path;

use crate::base::proc::output::OutputFile;
use crate::manifest::RestartOn;

/// Bytes of output read per look.
const CHUNK: u64 = 1 << 20;
/// A line longer than this is matched in pieces of this size.
const MAX_LINE: usize = 64 << 10;

/// `restart_on`, compiled.
#[derive(Debug, Default)]
pub struct RestartRules {
    codes: Vec<i32>,
    patterns: Vec<regex::Regex>,
}

impl RestartRules {
    pub fn new(r: Option<&RestartOn>) -> RestartRules {
        let Some(r) = r else {
            return RestartRules::default();
        };
        RestartRules {
            codes: r.exit_codes.clone(),
            // Validated with the manifest; one that fails here is dropped.
            patterns: r
                .patterns
                .iter()
                .filter_map(|p| regex::Regex::new(p).ok())
                .collect(),
        }
    }

    pub fn has_patterns(&self) -> bool {
        !self.patterns.is_empty()
    }

    /// Why exit status `code` asks for a restart, if it does.
    pub fn on_exit(&self, code: i32) -> Option<String> {
        self.codes
            .contains(&code)
            .then(|| format!("exit status {code} is in restart_on"))
    }

    /// Why this line of output asks for a restart, if it does.
    pub fn on_line(&self, line: &str) -> Option<String> {
        self.patterns
            .iter()
            .find(|p| p.is_match(line))
            .map(|p| format!("its output matches the restart pattern `{}`", p.as_str()))
    }
}

/// Reads the lines a process appends to its log, from a position on.
#[derive(Debug, Default)]
pub struct OutputScan {
    pos: u64,
    partial: Vec<u8>,
}

impl OutputScan {
    /// Scan from `pos` (what came before is not the process's own output).
    pub fn from(pos: u64) -> OutputScan {
        OutputScan {
            pos,
            partial: Vec::new(),
        }
    }

    /// The complete lines written since the last call (`at_end`: the last one without
    /// its newline too).
    pub fn lines(&mut self, log: &Path, at_end: bool) -> Vec<String> {
        let mut out = OutputFile::from(log, self.pos);
        let got = out.read(CHUNK).unwrap_or_default();
        self.pos = out.pos();
        if got.restarted {
            self.partial.clear();
        }
        self.partial.extend_from_slice(&got.bytes);
        let mut out = Vec::new();
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            out.push(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
        }
        if self.partial.len() > MAX_LINE || (at_end && !self.partial.is_empty()) {
            out.push(String::from_utf8_lossy(&std::mem::take(&mut self.partial)).into_owned());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_patterns_say_why() {
        let r = RestartRules::new(Some(&RestartOn {
            exit_codes: vec![75],
            patterns: vec!["runtime (poisoned|lost)".into()],
        }));
        assert_eq!(
            r.on_exit(75).as_deref(),
            Some("exit status 75 is in restart_on")
        );
        assert_eq!(r.on_exit(1), None);
        assert!(r
            .on_line("E: runtime poisoned by stream 3")
            .unwrap()
            .contains("runtime (poisoned|lost)"));
        assert_eq!(r.on_line("all fine"), None);
        assert!(!RestartRules::new(None).has_patterns());
    }

    #[test]
    fn lines_come_whole_and_once() {
        let t = tempfile::tempdir().unwrap();
        let log = t.path().join("log");
        std::fs::write(&log, "$ cmd\nfirst\nsec").unwrap();
        let mut scan = OutputScan::from(6);
        assert_eq!(scan.lines(&log, false), ["first"]);
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(b"ond\nthird").unwrap();
        assert_eq!(scan.lines(&log, false), ["second"]);
        assert_eq!(scan.lines(&log, true), ["third"]);
        assert!(scan.lines(&log, true).is_empty());
    }
}
