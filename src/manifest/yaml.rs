//! The manifest's YAML in one pass: `yaml_rust2`'s event stream becomes a small tree of
//! [`Node`]s, each with the line and column it starts at, and serde deserializes the
//! `raw::*` structs straight from that tree. Every error carries the key path and the
//! position of the node it is about, built from typed parts (which node, what was
//! expected, what was found) — never by reading an error message's text.
//!
//! A raw struct field of type [`Node`] keeps that part of the document as a node (with
//! its positions), to be taken apart later on its own, so one mistake does not hide the
//! next (see `Ctx::take` in `validate.rs`). [`Positions`] is what a check that runs after
//! serde consumed the nodes looks a position up in: taken from the nodes, never from a
//! second reading of the text.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};
use serde::Deserialize;
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Where a node starts: 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pos {
    pub line: usize,
    pub col: usize,
}

/// One YAML node and where it starts. Kept small: a big manifest is hundreds of
/// thousands of nodes, all alive at once, and they set a `plan`'s peak memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    line: u32,
    col: u32,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A scalar as written; `plain` when unquoted (only plain scalars can be numbers,
    /// booleans or null).
    Scalar {
        text: Box<str>,
        plain: bool,
    },
    Seq(Vec<Node>),
    /// Entries in document order; keys are nodes too (a key can be anything in YAML).
    Map(Vec<(Node, Node)>),
}

/// What a scalar means under YAML 1.2's core schema.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Resolved {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str,
}

impl Node {
    pub fn new(pos: Pos, kind: Kind) -> Node {
        // Past 4 G lines or columns the position saturates; the text is refused long
        // before that by the manifest's size.
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Node {
            line: narrow(pos.line),
            col: narrow(pos.col),
            kind,
        }
    }

    pub fn pos(&self) -> Pos {
        Pos {
            line: self.line as usize,
            col: self.col as usize,
        }
    }

    /// The text of a scalar (a mapping key, a string value).
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    /// The value of an integer scalar.
    pub fn as_int(&self) -> Option<i128> {
        match self.resolve() {
            Some(Resolved::Int(i)) => Some(i),
            _ => None,
        }
    }

    fn resolve(&self) -> Option<Resolved> {
        match &self.kind {
            Kind::Scalar { text, plain: true } => Some(resolve_plain(text)),
            Kind::Scalar { .. } => Some(Resolved::Str),
            _ => None,
        }
    }

    /// How a message names this node: `-2`, ``a string `smoke` ``, `a mapping`.
    pub fn describe(&self) -> String {
        match (&self.kind, self.resolve()) {
            (Kind::Seq(_), _) => "a sequence".into(),
            (Kind::Map(_), _) => "a mapping".into(),
            (_, Some(Resolved::Null)) => "nothing (null)".into(),
            (Kind::Scalar { text, .. }, Some(Resolved::Str)) => {
                format!("a string `{}`", crate::base::error::clip(text, QUOTED))
            }
            (Kind::Scalar { text, .. }, _) => crate::base::error::clip(text, QUOTED).into_owned(),
        }
    }

    /// The first entry of key `name` in a mapping: its key node and its value.
    pub fn entry(&self, name: &str) -> Option<(&Node, &Node)> {
        let Kind::Map(entries) = &self.kind else {
            return None;
        };
        entries
            .iter()
            .find(|(k, _)| k.as_str() == Some(name))
            .map(|(k, v)| (k, v))
    }

    /// The node of key `name` in a mapping, taken out of it.
    pub fn remove(&mut self, name: &str) -> Option<Node> {
        let Kind::Map(entries) = &mut self.kind else {
            return None;
        };
        let i = entries.iter().position(|(k, _)| k.as_str() == Some(name))?;
        Some(entries.remove(i).1)
    }
}

fn resolve_plain(t: &str) -> Resolved {
    match t {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "true" | "True" | "TRUE" => return Resolved::Bool(true),
        "false" | "False" | "FALSE" => return Resolved::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Resolved::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Resolved::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Resolved::Float(f64::NAN),
        _ => {}
    }
    let (neg, digits) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let int = if let Some(h) = digits.strip_prefix("0x") {
        i128::from_str_radix(h, 16).ok()
    } else if let Some(o) = digits.strip_prefix("0o") {
        i128::from_str_radix(o, 8).ok()
    } else if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        digits.parse::<i128>().ok()
    } else {
        None
    };
    if let Some(i) = int {
        return Resolved::Int(if neg { -i } else { i });
    }
    let float_like = t
        .bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && t.bytes().any(|b| b.is_ascii_digit());
    match t.parse::<f64>() {
        Ok(f) if float_like => Resolved::Float(f),
        _ => Resolved::Str,
    }
}

/// A YAML syntax error, with where the parser stopped.
#[derive(Debug)]
pub struct SyntaxError {
    pub pos: Pos,
    pub message: String,
}

/// Alias expansions beyond this many nodes are refused ("billion laughs").
const MAX_EXPANDED: usize = 1_000_000;

fn pos(m: &Marker) -> Pos {
    Pos {
        line: m.line(),
        col: m.col() + 1,
    }
}

fn count(n: &Node) -> usize {
    let mut total = 0;
    let mut todo = vec![n];
    while let Some(n) = todo.pop() {
        total += 1;
        match &n.kind {
            Kind::Scalar { .. } => {}
            Kind::Seq(items) => todo.extend(items),
            Kind::Map(entries) => todo.extend(entries.iter().flat_map(|(k, v)| [k, v])),
        }
    }
    total
}

/// Deepest nesting of collections, flow or block, that `parse` accepts (docs/cache-trust.md):
/// nothing recursive can then run deep enough to overflow a stack, whatever the text.
pub const MAX_DEPTH: usize = super::depth::LIMIT;

fn too_deep(pos: Pos, what: &str) -> SyntaxError {
    SyntaxError {
        pos,
        message: format!(
            "nested deeper than {MAX_DEPTH} levels of {what} (scenerun's limit; see docs/cache-trust.md)"
        ),
    }
}

/// The node anchor `id` names, used at `at` under `depth` open collections, with its
/// height; `expanded` counts the nodes aliases have put in the tree so far (bounded).
fn expand_alias(
    anchors: &HashMap<usize, (Node, usize)>,
    id: usize,
    at: Pos,
    depth: usize,
    expanded: &mut usize,
) -> Result<(Node, usize), SyntaxError> {
    let (n, height) = anchors.get(&id).cloned().ok_or_else(|| SyntaxError {
        pos: at,
        message: "alias to an unknown anchor".into(),
    })?;
    *expanded += count(&n);
    if *expanded > MAX_EXPANDED {
        return Err(SyntaxError {
            pos: at,
            message: format!("aliases expand to more than {MAX_EXPANDED} nodes"),
        });
    }
    if depth + height > MAX_DEPTH {
        return Err(too_deep(at, "collections (with aliases expanded)"));
    }
    Ok((n, height))
}

/// Parse the first document of `text` (an empty document is a null scalar). Text nested
/// deeper than `MAX_DEPTH` is refused: flow nesting by a linear pre-scan before the
/// parser sees it (the parser is quadratic in it), any nesting as it reaches the limit.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    if let Some((line, col)) = super::depth::too_deep(text, MAX_DEPTH) {
        return Err(too_deep(Pos { line, col }, "`[` / `{`"));
    }
    /// A collection being read: the node, its anchor (0: none), a mapping key waiting
    /// for its value, and the height of its tallest child so far.
    struct Frame {
        node: Node,
        anchor: usize,
        key: Option<Node>,
        height: usize,
    }
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    // Anchored nodes with their heights: an alias puts the whole node where it is used,
    // so its height counts there too (anchors of aliases could nest without end).
    let mut anchors: HashMap<usize, (Node, usize)> = HashMap::new();
    let mut expanded = 0usize;
    let mut root: Option<Node> = None;
    loop {
        let (ev, mark) = parser.next_token().map_err(|e| SyntaxError {
            pos: pos(e.marker()),
            message: e.info().to_string(),
        })?;
        // A finished node, with its anchor id (0: none) and height (a scalar: 0).
        let done: Option<(Node, usize, usize)> = match ev {
            Event::StreamEnd | Event::DocumentEnd if stack.is_empty() => break,
            Event::Scalar(text, style, anchor, tag) => {
                // `!!str 1` is the string "1"; any other tag leaves the value as written.
                let plain = style == TScalarStyle::Plain && tag.is_none_or(|t| t.suffix != "str");
                Some((scalar(pos(&mark), text.into_boxed_str(), plain), anchor, 0))
            }
            Event::Alias(id) => {
                let at = pos(&mark);
                let (n, height) = expand_alias(&anchors, id, at, stack.len(), &mut expanded)?;
                Some((n, 0, height))
            }
            Event::SequenceStart(..) | Event::MappingStart(..) if stack.len() >= MAX_DEPTH => {
                return Err(too_deep(pos(&mark), "collections"));
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                let kind = if matches!(ev, Event::SequenceStart(..)) {
                    Kind::Seq(Vec::new())
                } else {
                    Kind::Map(Vec::new())
                };
                stack.push(Frame {
                    node: Node::new(pos(&mark), kind),
                    anchor,
                    key: None,
                    height: 0,
                });
                None
            }
            Event::SequenceEnd | Event::MappingEnd => stack.pop().map(|mut f| {
                // Growth slack of every small list and mapping adds up to a third of the
                // tree; a shrinking realloc stays in place.
                match &mut f.node.kind {
                    Kind::Seq(items) => items.shrink_to_fit(),
                    Kind::Map(entries) => entries.shrink_to_fit(),
                    Kind::Scalar { .. } => {}
                }
                (f.node, f.anchor, f.height + 1)
            }),
            _ => None,
        };
        let Some((node, anchor, height)) = done else {
            continue;
        };
        if anchor != 0 {
            anchors.insert(anchor, (node.clone(), height));
        }
        let Some(parent) = stack.last_mut() else {
            root = Some(node);
            break;
        };
        parent.height = parent.height.max(height);
        match (&mut parent.node.kind, parent.key.take()) {
            (Kind::Seq(items), _) => items.push(node),
            (Kind::Map(_), None) => parent.key = Some(node),
            (Kind::Map(entries), Some(k)) => entries.push((k, node)),
            (Kind::Scalar { .. }, _) => {}
        }
    }
    Ok(root.unwrap_or_else(|| scalar(Pos { line: 1, col: 1 }, Box::default(), true)))
}

fn scalar(at: Pos, text: Box<str>, plain: bool) -> Node {
    Node::new(at, Kind::Scalar { text, plain })
}

/// The position of every node of a document by its key path
/// (`scenes[2].kernels[0].source`): a mapping entry at its key, a sequence item and the
/// root where they start; of two nodes with one path, the first in the document. Taken
/// from the nodes before serde consumes them, so checks made after deserialization can
/// still point into the file.
///
/// Taken on every load, so it is cheap: a path is kept as the FNV-1a hash of its text,
/// computed a segment at a time (nothing allocated per node), in one vector that is
/// sorted only when a position is first looked up (a manifest without errors never
/// is). Two paths of one manifest sharing a 64-bit hash would at worst put a message on
/// the wrong line.
#[derive(Debug, Default)]
pub struct Positions {
    /// (hash of the path, line, column), in document order until `sorted`; then by
    /// hash, of equal hashes the first in the document only.
    at: Vec<(u64, u32, u32)>,
    sorted: bool,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME))
}

/// The hash of `parent` + `[i]`.
fn index_hash(parent: u64, i: usize) -> u64 {
    let mut buf = [0u8; 22];
    let mut at = buf.len() - 1;
    buf[at] = b']';
    let mut n = i;
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    at -= 1;
    buf[at] = b'[';
    fnv(parent, &buf[at..])
}

/// The hash of `parent` + `.name` (of `name` alone under the empty path), and whether
/// that path is empty.
fn key_hash(parent: u64, parent_empty: bool, name: &str) -> (u64, bool) {
    if parent_empty {
        (fnv(parent, name.as_bytes()), name.is_empty())
    } else {
        (fnv(fnv(parent, b"."), name.as_bytes()), false)
    }
}

impl Positions {
    /// The positions of `root` and everything under it.
    pub fn of(root: &Node) -> Positions {
        enum Kids<'a> {
            Seq(std::iter::Enumerate<std::slice::Iter<'a, Node>>),
            Map(std::slice::Iter<'a, (Node, Node)>),
        }
        fn kids(n: &Node) -> Option<Kids<'_>> {
            match &n.kind {
                Kind::Scalar { .. } => None,
                Kind::Seq(items) => Some(Kids::Seq(items.iter().enumerate())),
                Kind::Map(entries) => Some(Kids::Map(entries.iter())),
            }
        }
        let mut at = vec![(FNV_OFFSET, root.line, root.col)];
        // Depth first, in document order, without recursion: a frame per open
        // collection (the depth is bounded by `MAX_DEPTH`).
        let mut stack: Vec<(u64, bool, Kids)> = Vec::new();
        if let Some(k) = kids(root) {
            stack.push((FNV_OFFSET, true, k));
        }
        while let Some((h, empty, kids_of)) = stack.last_mut() {
            let next = match kids_of {
                Kids::Seq(it) => it
                    .next()
                    .map(|(i, n)| (index_hash(*h, i), false, n.line, n.col, n)),
                Kids::Map(it) => it.next().map(|(k, v)| {
                    let (kh, ke) = key_hash(*h, *empty, k.as_str().unwrap_or("?"));
                    (kh, ke, k.line, k.col, v)
                }),
            };
            let Some((ch, ce, line, col, n)) = next else {
                stack.pop();
                continue;
            };
            at.push((ch, line, col));
            if let Some(k) = kids(n) {
                stack.push((ch, ce, k));
            }
        }
        Positions { at, sorted: false }
    }

    /// The position of exactly `path`.
    pub fn find_exact(&mut self, path: &str) -> Option<Pos> {
        if !self.sorted {
            // Stable: of equal hashes, the first in the document stays first.
            self.at.sort_by_key(|e| e.0);
            self.at.dedup_by_key(|e| e.0);
            self.sorted = true;
        }
        let h = fnv(FNV_OFFSET, path.as_bytes());
        let i = self.at.binary_search_by_key(&h, |e| e.0).ok()?;
        let (_, line, col) = self.at[i];
        Some(Pos {
            line: line as usize,
            col: col as usize,
        })
    }

    /// The position of `path`, or of its nearest ancestor that has one.
    pub fn find(&mut self, path: &str) -> Option<Pos> {
        let mut p = path;
        loop {
            if let Some(pos) = self.find_exact(p) {
                return Some(pos);
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }
}

/// One step of a key path.
#[derive(Debug, Clone)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A deserialization error: what is wrong, where, and under which keys.
#[derive(Debug)]
pub struct Error {
    pub pos: Option<Pos>,
    /// Innermost first (pushed while the error travels out).
    segs: Vec<Seg>,
    pub problem: Problem,
}

/// What went wrong, rendered in one place.
#[derive(Debug)]
pub enum Problem {
    WrongType {
        expected: String,
        found: String,
    },
    Missing(&'static str),
    Unknown {
        field: String,
        expected: &'static [&'static str],
    },
    Other(String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::WrongType { expected, found } => {
                write!(f, "expected {expected}, found {found}")
            }
            Problem::Missing(field) => write!(f, "missing field `{field}`"),
            Problem::Unknown { field, expected } => {
                write!(f, "{}", unknown_field(field, expected))
            }
            Problem::Other(m) => f.write_str(m),
        }
    }
}

/// Characters of a scalar or key from the text quoted in a message.
const QUOTED: usize = 80;

/// "unknown field `kernals`, did you mean `kernels`?" or the list of known fields.
pub fn unknown_field(field: &str, known: &[&str]) -> String {
    let field = &*crate::base::error::clip(field, QUOTED);
    match did_you_mean(field, known) {
        Some(k) => format!("unknown field `{field}` (did you mean `{k}`?)"),
        None => format!(
            "unknown field `{field}` (expected one of: {})",
            known.join(", ")
        ),
    }
}

/// The closest known name, when it is close enough to be a typo.
pub fn did_you_mean<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, k)| *d <= (k.len().max(name.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

impl Error {
    fn new(problem: Problem) -> Error {
        Error {
            pos: None,
            segs: Vec::new(),
            problem,
        }
    }

    fn at(mut self, p: Pos) -> Error {
        self.pos.get_or_insert(p);
        self
    }

    fn under(mut self, seg: Seg) -> Error {
        self.segs.push(seg);
        self
    }

    /// The full key path below `prefix`.
    pub fn path(&self, prefix: &str) -> String {
        let mut out = prefix.to_string();
        let segs = self.segs.iter().rev();
        // A missing field is named in its path: `scenes[0].name: missing field `name``.
        let missing = match &self.problem {
            Problem::Missing(f) => Some(Seg::Key(f.to_string())),
            _ => None,
        };
        for s in segs.chain(missing.iter()) {
            match s {
                Seg::Key(k) if out.is_empty() => out.push_str(k),
                Seg::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.problem.fmt(f)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::new(Problem::Other(msg.to_string()))
    }

    fn invalid_type(unexp: de::Unexpected, exp: &dyn de::Expected) -> Self {
        Error::new(Problem::WrongType {
            expected: exp.to_string(),
            found: unexp.to_string(),
        })
    }

    fn invalid_value(unexp: de::Unexpected, exp: &dyn de::Expected) -> Self {
        Self::invalid_type(unexp, exp)
    }

    fn missing_field(field: &'static str) -> Self {
        Error::new(Problem::Missing(field))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        Error::new(Problem::Unknown {
            field: field.to_string(),
            expected,
        })
    }
}

thread_local! {
    /// Hands a node to `Node::deserialize` (see `NODE_TOKEN`).
    static STASH: RefCell<Option<Node>> = const { RefCell::new(None) };
}

/// The newtype name by which `Node::deserialize` asks our deserializer for the node
/// itself rather than a rebuilt value.
const NODE_TOKEN: &str = "$scenerun::manifest::Node";

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a manifest node")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
                STASH
                    .with(|s| s.borrow_mut().take())
                    .ok_or_else(|| E::custom("a node can only be read from the manifest"))
            }
        }
        d.deserialize_newtype_struct(NODE_TOKEN, V)
    }
}

impl<'de> IntoDeserializer<'de, Error> for Node {
    type Deserializer = Node;
    fn into_deserializer(self) -> Node {
        self
    }
}

fn wrong(node: &Node, expected: &str) -> Error {
    Error::new(Problem::WrongType {
        expected: expected.to_string(),
        found: node.describe(),
    })
    .at(node.pos())
}

impl Node {
    /// An integer that fits `T` (whose range is `min..=max`), or the error that says
    /// which bound it missed.
    fn int<T: TryFrom<i128>>(&self, min: i128, max: i128) -> Result<T, Error> {
        let expected = match self.as_int() {
            Some(i) => match T::try_from(i) {
                Ok(t) => return Ok(t),
                Err(_) if i > max => format!("an integer of at most {max}"),
                Err(_) if min == 0 => "a non-negative integer".to_string(),
                Err(_) => format!("an integer of at least {min}"),
            },
            None if min == 0 => "a non-negative integer".to_string(),
            None => "an integer".to_string(),
        };
        Err(wrong(self, &expected))
    }
}

macro_rules! ints {
    ($($method:ident $visit:ident $t:ty;)*) => {$(
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            let n: $t = self.int(<$t>::MIN as i128, <$t>::MAX as i128)?;
            v.$visit(n)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Node {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let p = self.pos();
        let r = match (self.resolve(), self.kind) {
            (_, Kind::Seq(items)) => v.visit_seq(Seq {
                items: items.into_iter(),
                index: 0,
            }),
            (_, Kind::Map(entries)) => v.visit_map(Map {
                entries: entries.into_iter(),
                key: None,
            }),
            (Some(Resolved::Null), _) => v.visit_unit(),
            (Some(Resolved::Bool(b)), _) => v.visit_bool(b),
            (Some(Resolved::Int(i)), _) => match (u64::try_from(i), i64::try_from(i)) {
                (Ok(u), _) => v.visit_u64(u),
                (_, Ok(s)) => v.visit_i64(s),
                _ => v.visit_i128(i),
            },
            (Some(Resolved::Float(f)), _) => v.visit_f64(f),
            (_, Kind::Scalar { text, .. }) => v.visit_string(text.into_string()),
        };
        r.map_err(|e: Error| e.at(p))
    }

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let p = self.pos();
        match self.kind {
            // No command, argument, path or name can hold a NUL byte (`"\0"` in a
            // double-quoted scalar): refused here, at load, not when it would run.
            Kind::Scalar { text, .. } if text.contains('\0') => Err(Error::new(Problem::Other(
                "contains a NUL byte, which no command, argument, path or name can hold".into(),
            ))
            .at(p)),
            // A number or boolean where text is expected is taken as written
            // (`name: 2024`); null is not text.
            Kind::Scalar { text, plain } if !(plain && resolve_plain(&text) == Resolved::Null) => v
                .visit_string(text.into_string())
                .map_err(|e: Error| e.at(p)),
            _ => Err(wrong(&self, "a string")),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        self.deserialize_str(v)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        match self.resolve() {
            Some(Resolved::Bool(b)) => v.visit_bool(b).map_err(|e: Error| e.at(self.pos())),
            _ => Err(wrong(&self, "true or false")),
        }
    }

    ints! {
        deserialize_u8 visit_u8 u8;
        deserialize_u16 visit_u16 u16;
        deserialize_u32 visit_u32 u32;
        deserialize_u64 visit_u64 u64;
        deserialize_i8 visit_i8 i8;
        deserialize_i16 visit_i16 i16;
        deserialize_i32 visit_i32 i32;
        deserialize_i64 visit_i64 i64;
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        if self.resolve() == Some(Resolved::Null) {
            v.visit_none()
        } else {
            v.visit_some(self)
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let p = self.pos();
        match self.kind {
            Kind::Seq(items) => v
                .visit_seq(Seq {
                    items: items.into_iter(),
                    index: 0,
                })
                .map_err(|e: Error| e.at(p)),
            _ => Err(wrong(&self, "a sequence")),
        }
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let p = self.pos();
        match self.kind {
            Kind::Map(entries) => v
                .visit_map(Map {
                    entries: entries.into_iter(),
                    key: None,
                })
                .map_err(|e: Error| e.at(p)),
            _ => Err(wrong(&self, "a mapping")),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(v)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        v: V,
    ) -> Result<V::Value, Error> {
        if name == NODE_TOKEN {
            STASH.with(|s| *s.borrow_mut() = Some(self));
            v.visit_unit()
        } else {
            v.visit_newtype_struct(self)
        }
    }

    serde::forward_to_deserialize_any! {
        i128 u128 f32 f64 char bytes byte_buf unit unit_struct tuple
        tuple_struct enum identifier ignored_any
    }
}

struct Seq {
    items: std::vec::IntoIter<Node>,
    index: usize,
}

impl<'de> de::SeqAccess<'de> for Seq {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        let Some(n) = self.items.next() else {
            return Ok(None);
        };
        let i = self.index;
        self.index += 1;
        seed.deserialize(n)
            .map(Some)
            .map_err(|e| e.under(Seg::Index(i)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

struct Map {
    entries: std::vec::IntoIter<(Node, Node)>,
    key: Option<(String, Node)>,
}

impl<'de> de::MapAccess<'de> for Map {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((k, v)) = self.entries.next() else {
            return Ok(None);
        };
        let name = k.as_str().unwrap_or("?").to_string();
        let p = k.pos();
        let key = seed.deserialize(k).map_err(|e| match e.problem {
            // Unknown fields are named by their own path.
            Problem::Unknown { .. } => e.under(Seg::Key(name.clone())).at(p),
            _ => e.at(p),
        })?;
        self.key = Some((name, v));
        Ok(Some(key))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Error> {
        let (name, v) = self.key.take().expect("a value follows its key");
        seed.deserialize(v).map_err(|e| e.under(Seg::Key(name)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_point_at_lines() {
        let text = "version: 1\nscenes:\n  - name: a\n    kernels:\n      - name: k\n        source: x.c\n  - name: b\n";
        let mut l = Positions::of(&parse(text).unwrap());
        assert_eq!(l.find("version").unwrap().line, 1);
        assert_eq!(l.find("scenes[0].kernels[0].source").unwrap().line, 6);
        assert_eq!(l.find("scenes[1].name").unwrap().line, 7);
        assert_eq!(l.find("scenes[1].nope").unwrap().line, 7);
        assert_eq!(l.find("scenes[0].kernels[0].source").unwrap().col, 9);
        assert_eq!(l.find_exact("scenes[1]").unwrap().line, 7);
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Dev {
        devices: Option<u32>,
        run: String,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Scene {
        device: Dev,
    }

    #[test]
    fn wrong_type_names_its_key_and_position() {
        let n = parse("device:\n  run: x\n  devices: -2\n").unwrap();
        let e = Scene::deserialize(n).unwrap_err();
        assert_eq!(e.path("scenes[0]"), "scenes[0].device.devices");
        assert_eq!(e.pos, Some(Pos { line: 3, col: 12 }));
        assert_eq!(e.to_string(), "expected a non-negative integer, found -2");
    }

    #[test]
    fn missing_field_is_at_its_mapping() {
        let e = Scene::deserialize(parse("device:\n  devices: 2\n").unwrap()).unwrap_err();
        assert_eq!(e.path(""), "device.run");
        assert_eq!(e.pos.map(|p| p.line), Some(2));
    }

    #[test]
    fn scalars_resolve_as_yaml_1_2() {
        for (t, r) in [
            ("~", Resolved::Null),
            ("true", Resolved::Bool(true)),
            ("yes", Resolved::Str),
            ("-2", Resolved::Int(-2)),
            ("0x10", Resolved::Int(16)),
            ("1.5", Resolved::Float(1.5)),
            ("1e3", Resolved::Float(1000.0)),
            ("10GiB", Resolved::Str),
            ("e", Resolved::Str),
        ] {
            assert_eq!(resolve_plain(t), r, "{t}");
        }
    }

    #[test]
    fn typos_get_a_suggestion() {
        assert_eq!(
            did_you_mean("kernals", &["name", "kernels"]),
            Some("kernels")
        );
        assert_eq!(did_you_mean("colour", &["name", "kernels"]), None);
    }

    #[test]
    fn nesting_is_bounded_in_every_form() {
        let deep = |unit: &str| unit.repeat(MAX_DEPTH + 1) + "x\n";
        for text in [deep("? "), deep("- "), deep("[")] {
            let e = parse(&text).unwrap_err();
            assert!(e.message.contains("nested deeper than"), "{}", e.message);
        }
        assert!(parse(&("- ".repeat(MAX_DEPTH - 1) + "x\n")).is_ok());
        // Aliases of anchors that nest: each level adds the anchor's whole height.
        let mut text = String::from("a0: &a0 [[[[[[[[[[x]]]]]]]]]]\n");
        for i in 1..20 {
            text.push_str(&format!("a{i}: &a{i} [[[[[[[[[[*a{}]]]]]]]]]]\n", i - 1));
        }
        let e = parse(&text).unwrap_err();
        assert!(e.message.contains("aliases expanded"), "{}", e.message);
    }

    #[test]
    fn aliases_expand_and_are_bounded() {
        let n = parse("a: &x [1, 2]\nb: *x\n").unwrap();
        let Kind::Map(e) = &n.kind else { panic!() };
        assert_eq!(e[0].1.kind, e[1].1.kind);
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            bomb.push_str(&format!(
                "{}: &{} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n",
                (b'a' + i) as char,
                (b'a' + i) as char,
                p = (b'a' + i - 1) as char
            ));
        }
        assert!(parse(&bomb).is_err());
    }
}
