//! Where each node of a YAML document is: a map from key paths
//! (`scenes[2].kernels[0].source`) to line and column, so validation errors found after
//! deserialization can still point into the file.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::Marker;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

#[derive(Debug, Default)]
pub struct Locations {
    map: HashMap<String, Pos>,
}

impl Locations {
    /// Index `text`. A document the event parser rejects yields the locations before the
    /// error (the loader reports the syntax error with its own position). Events are
    /// pulled one at a time (the parser's own `load` recurses once per level, and a 20 KB
    /// `? ? ? …` overflowed the stack), and nothing deeper than the parser's nesting limit
    /// is indexed.
    pub fn index(text: &str) -> Locations {
        let mut rx = Receiver::default();
        let mut parser = Parser::new_from_str(text);
        while let Ok((ev, mark)) = parser.next_token() {
            if matches!(ev, Event::StreamEnd | Event::DocumentEnd)
                || (matches!(ev, Event::MappingStart(..) | Event::SequenceStart(..))
                    && rx.stack.len() >= super::yaml::MAX_DEPTH)
            {
                break;
            }
            rx.on_event(ev, mark);
        }
        Locations { map: rx.map }
    }

    /// The position of exactly `path`.
    pub fn find_exact(&self, path: &str) -> Option<Pos> {
        self.map.get(path).copied()
    }

    /// The lines of the document's top-level keys.
    pub fn top_level_lines(&self) -> Vec<usize> {
        self.map
            .iter()
            .filter(|(k, _)| !k.is_empty() && !k.contains(['.', '[']))
            .map(|(_, p)| p.line)
            .collect()
    }

    /// The position of `path`, or of its nearest ancestor that has one.
    pub fn find(&self, path: &str) -> Option<Pos> {
        let mut p = path;
        loop {
            if let Some(pos) = self.map.get(p) {
                return Some(*pos);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }
}

enum Frame {
    Map { path: String, key: Option<String> },
    Seq { path: String, index: usize },
}

#[derive(Default)]
struct Receiver {
    stack: Vec<Frame>,
    map: HashMap<String, Pos>,
}

impl Receiver {
    /// The path of the node that starts now, or None when it is a mapping key.
    fn value_path(&self) -> Option<String> {
        match self.stack.last() {
            None => Some(String::new()),
            Some(Frame::Map { key: None, .. }) => None,
            Some(Frame::Map { path, key: Some(k) }) => Some(join(path, k)),
            Some(Frame::Seq { path, index }) => Some(format!("{path}[{index}]")),
        }
    }

    fn advance(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Map { key, .. }) => *key = None,
            Some(Frame::Seq { index, .. }) => *index += 1,
            None => {}
        }
    }

    fn record(&mut self, path: &str, mark: Marker) {
        self.map.entry(path.to_string()).or_insert(Pos {
            line: mark.line(),
            col: mark.col() + 1,
        });
    }
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

impl MarkedEventReceiver for Receiver {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        match ev {
            Event::Scalar(v, ..) => match self.value_path() {
                None => {
                    if let Some(Frame::Map { path, key }) = self.stack.last_mut() {
                        let p = join(path, &v);
                        *key = Some(v);
                        self.record(&p, mark);
                    }
                }
                Some(p) => {
                    self.record(&p, mark);
                    self.advance();
                }
            },
            Event::Alias(_) => {
                if let Some(p) = self.value_path() {
                    self.record(&p, mark);
                }
                self.advance();
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                // A collection used as a mapping key gets a placeholder name.
                let path = self.value_path().unwrap_or_else(|| "?".to_string());
                self.record(&path, mark);
                self.stack.push(if matches!(ev, Event::MappingStart(..)) {
                    Frame::Map { path, key: None }
                } else {
                    Frame::Seq { path, index: 0 }
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
                self.advance();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_point_at_lines() {
        let text = "version: 1\nscenes:\n  - name: a\n    kernels:\n      - name: k\n        source: x.c\n  - name: b\n";
        let l = Locations::index(text);
        assert_eq!(l.find("version").unwrap().line, 1);
        assert_eq!(l.find("scenes[0].kernels[0].source").unwrap().line, 6);
        assert_eq!(l.find("scenes[1].name").unwrap().line, 7);
        assert_eq!(l.find("scenes[1].nope").unwrap().line, 7);
        assert_eq!(l.find("scenes[0].kernels[0].source").unwrap().col, 9);
    }
}
