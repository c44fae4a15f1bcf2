//! YAML text to a small tree of nodes that each carry their 1-based line and column.
//!
//! Built from `yaml-rust2`'s event parser, driven event by event with an
//! explicit stack (no recursion, so deeply nested input cannot overflow the
//! stack). Nesting deeper than [`MAX_DEPTH`] is refused: the schema never
//! needs more than a handful of levels. Aliases and multi-document streams are
//! refused with a positioned error; tags are ignored except `!!str`, which
//! makes a scalar count as quoted.
//!
//! One top-level list can be streamed ([`parse_streaming`]): each of its
//! items goes to a sink as soon as it is complete and is not kept in the
//! tree, so a config with a million apps never holds a million subtrees.

use compact_str::CompactString;
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::ConfigError;

/// Deepest nesting of lists and mappings accepted.
pub(crate) const MAX_DEPTH: usize = 64;

/// What a renumbered position (line 0, see [`Pos::synthetic`]) shows when
/// formatted into a message, for `document` to replace by its path:
/// `\u{1}N\u{2}` cannot come from user text, which messages quote with
/// escapes.
pub(crate) const MARK_OPEN: char = '\u{1}';
pub(crate) const MARK_CLOSE: char = '\u{2}';

/// A 1-based line and column (kept small: every node has one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pos {
    pub line: u32,
    pub col: u32,
}

impl Pos {
    fn from_marker(m: &Marker) -> Pos {
        // yaml-rust2 0.11 counts lines from 1 and columns from 0.
        let small = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Pos {
            line: small(m.line()).max(1),
            col: small(m.col()).saturating_add(1),
        }
    }

    /// The position given to node number `id` of a document decoded for
    /// the admin API (line 0): formatted as a mark that
    /// `document` turns into the node's path.
    pub fn synthetic(id: usize) -> Pos {
        Pos {
            line: 0,
            col: u32::try_from(id).unwrap_or(u32::MAX),
        }
    }

    pub fn error(self, message: String) -> ConfigError {
        ConfigError {
            line: self.line as usize,
            col: self.col as usize,
            message,
        }
    }
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            return write!(f, "{MARK_OPEN}{}{MARK_CLOSE}", self.col);
        }
        write!(f, "{}:{}", self.line, self.col)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub pos: Pos,
    pub value: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// `plain` is false for quoted and block scalars (and `!!str`-tagged ones):
    /// only plain scalars can be null or booleans.
    Scalar {
        text: CompactString,
        plain: bool,
    },
    // Vecs, not boxed slices: shrinking every small list and mapping to
    // its length costs a reallocation each, millions in a big config.
    List(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub key: Node,
    pub value: Node,
}

impl Node {
    /// A plain empty scalar, `~` or `null` (any YAML 1.2 core spelling).
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar { text, plain: true }
            if matches!(&**text, "" | "~" | "null" | "Null" | "NULL"))
    }

    /// The scalar's text, if this is a scalar that is not null.
    pub fn as_scalar(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar { text, .. } if !self.is_null() => Some(text),
            _ => None,
        }
    }

    /// Whether this is a plain (unquoted) scalar.
    pub fn is_plain(&self) -> bool {
        matches!(&self.value, Value::Scalar { plain: true, .. })
    }

    /// What this node is, for "found ..." in error messages.
    pub fn describe(&self) -> String {
        match &self.value {
            _ if self.is_null() => "null".to_string(),
            Value::Scalar { text, .. } => quote(text),
            Value::List(_) => "a list".to_string(),
            Value::Map(_) => "a mapping".to_string(),
        }
    }
}

/// `text` in double quotes with escapes, cut short if long, for messages.
pub(crate) fn quote(text: &str) -> String {
    const MAX_CHARS: usize = 60;
    match text.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{:?}...", &text[..cut]),
        None => format!("{text:?}"),
    }
}

enum Frame {
    List {
        pos: Pos,
        items: Vec<Node>,
    },
    Map {
        pos: Pos,
        entries: Vec<Entry>,
        key: Option<Node>,
    },
}

/// Parses `text` into the tree of its one document; `Ok(None)` for a stream
/// with no document at all (empty text or only comments).
#[cfg(test)]
pub(crate) fn parse(text: &str) -> Result<Option<Node>, ConfigError> {
    parse_streaming(text, "", &mut |_| {})
}

/// Like `parse`, but when the document is a mapping whose key `key` holds a
/// list, each item of that list is handed to `sink` as soon as it is
/// complete, in order, and the list stays empty in the tree. An empty `key`
/// streams nothing.
pub(crate) fn parse_streaming(
    text: &str,
    key: &str,
    sink: &mut dyn FnMut(Node),
) -> Result<Option<Node>, ConfigError> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Node> = None;
    let mut documents = 0usize;
    loop {
        let (event, marker) = match parser.next_token() {
            Ok(next) => next,
            Err(e) => {
                return Err(error(
                    Pos::from_marker(e.marker()),
                    format!("invalid YAML: {}", e.info()),
                ))
            }
        };
        let pos = Pos::from_marker(&marker);
        let node = match event {
            Event::StreamEnd => return Ok(root),
            Event::Nothing | Event::StreamStart | Event::DocumentEnd => continue,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err(error(
                        pos,
                        "a config file holds one YAML document, found a second one".to_string(),
                    ));
                }
                continue;
            }
            Event::Alias(_) => {
                return Err(error(
                    pos,
                    "YAML aliases (*name) are not supported: write the value out".to_string(),
                ))
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(error(
                        pos,
                        format!("nesting deeper than {MAX_DEPTH} levels"),
                    ));
                }
                stack.push(if matches!(event, Event::SequenceStart(..)) {
                    Frame::List {
                        pos,
                        items: Vec::new(),
                    }
                } else {
                    Frame::Map {
                        pos,
                        entries: Vec::new(),
                        key: None,
                    }
                });
                continue;
            }
            Event::Scalar(text, style, _anchor, tag) => {
                let is_str_tag = tag.is_some_and(|t| t.suffix == "str");
                Node {
                    pos,
                    value: Value::Scalar {
                        text: CompactString::from(text),
                        plain: style == TScalarStyle::Plain && !is_str_tag,
                    },
                }
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Frame::List { pos, items }) => Node {
                    pos,
                    value: Value::List(items),
                },
                Some(Frame::Map {
                    mut pos, entries, ..
                }) => {
                    // A block mapping's start marker points past its first
                    // key: the first key is where the mapping begins.
                    if let Some(first) = entries.first() {
                        pos = pos.min(first.key.pos);
                    }
                    Node {
                        pos,
                        value: Value::Map(entries),
                    }
                }
                None => return Err(error(pos, "invalid YAML: unbalanced end".to_string())),
            },
        };
        if let [Frame::Map { key: Some(k), .. }, Frame::List { .. }] = &stack[..] {
            if !key.is_empty() && k.as_scalar() == Some(key) {
                sink(node);
                continue;
            }
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame::List { items, .. }) => items.push(node),
            Some(Frame::Map { entries, key, .. }) => match key.take() {
                None => *key = Some(node),
                Some(k) => entries.push(Entry {
                    key: k,
                    value: node,
                }),
            },
        }
    }
}

fn error(pos: Pos, message: String) -> ConfigError {
    pos.error(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(n: &Node) -> (&str, Pos) {
        (n.as_scalar().unwrap_or("<not a scalar>"), n.pos)
    }

    fn p(line: u32, col: u32) -> Pos {
        Pos { line, col }
    }

    #[test]
    fn positions_are_one_based() {
        let root = parse("a: 1\nb:\n  - x\n  - { c: \"y\" }\n")
            .unwrap()
            .unwrap();
        assert_eq!(root.pos, p(1, 1));
        let Value::Map(entries) = &root.value else {
            panic!("not a map")
        };
        assert_eq!(scalar(&entries[0].key), ("a", p(1, 1)));
        assert_eq!(scalar(&entries[0].value), ("1", p(1, 4)));
        let list = &entries[1].value;
        assert_eq!(list.pos, p(3, 3));
        let Value::List(items) = &list.value else {
            panic!("not a list")
        };
        assert_eq!(scalar(&items[0]), ("x", p(3, 5)));
        assert_eq!(items[1].pos, p(4, 5));
        let Value::Map(inner) = &items[1].value else {
            panic!("not a map")
        };
        assert_eq!(scalar(&inner[0].value), ("y", p(4, 10)));
        assert!(!inner[0].value.is_plain());
    }

    #[test]
    fn nulls_and_quoting() {
        let root = parse("a:\nb: ~\nc: \"\"\nd: null\ne: !!str null\n")
            .unwrap()
            .unwrap();
        let Value::Map(entries) = &root.value else {
            panic!("not a map")
        };
        let nulls: Vec<bool> = entries.iter().map(|e| e.value.is_null()).collect();
        assert_eq!(nulls, [true, true, false, true, false]);
    }

    #[test]
    fn empty_stream_has_no_document() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("# only a comment\n").unwrap(), None);
    }

    #[test]
    fn syntax_errors_have_positions() {
        let e = parse("a: b: c\n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 5));
        assert!(e.message.starts_with("invalid YAML: "), "{}", e.message);
        let e = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!((e.line, e.col), (2, 1));
        let e = parse("a: &x 1\nb: *x\n").unwrap_err();
        assert_eq!((e.line, e.col), (2, 4));
        assert!(e.message.contains("aliases"));
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let e = parse(&"- ".repeat(100_000)).unwrap_err();
        assert!(e.message.contains("nesting"), "{}", e.message);
        let e = parse(&"[".repeat(10_000)).unwrap_err();
        assert!(e.line >= 1);
    }

    #[test]
    fn a_streamed_list_goes_to_the_sink_and_stays_empty() {
        let text = "a: [1]\napps:\n  - x\n  - { apps: [deep] }\nb:\n  apps: [2]\n";
        let mut got = Vec::new();
        let root = parse_streaming(text, "apps", &mut |n| got.push(n))
            .unwrap()
            .unwrap();
        // Only the top-level list's items, in order, whole.
        assert_eq!(got.len(), 2);
        assert_eq!(scalar(&got[0]), ("x", p(3, 5)));
        assert_eq!(got[1].pos, p(4, 5));
        assert!(matches!(&got[1].value, Value::Map(m) if m.len() == 1));
        // The tree keeps the list, empty, where it was; the rest as usual.
        assert_eq!(root, {
            let mut full = parse(text).unwrap().unwrap();
            if let Value::Map(entries) = &mut full.value {
                entries[1].value.value = Value::List(Vec::new());
            }
            full
        });
    }

    #[test]
    fn long_scalars_are_cut_in_messages() {
        let long = "x".repeat(200);
        let q = quote(&long);
        assert!(q.len() < 80 && q.ends_with("..."), "{q}");
        assert_eq!(quote("a\"b"), "\"a\\\"b\"");
    }
}
