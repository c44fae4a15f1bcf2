//! Typed reads from the YAML tree that record a positioned, field-naming error on failure.
//!
//! Every reader returns `Option`: `None` means "wrong, and already reported",
//! so decoding goes on and finds the other problems in the same file. The
//! entries of a list or mapping that must differ (names, addresses,
//! methods, headers) are all checked by [`unique`]; across a million apps,
//! by [`duplicates`], which sorts hashes instead of keeping every text.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::units;
use crate::yaml::{quote, Node, Pos, Value};
use crate::ConfigError;

/// Where a node sits in the config, e.g. `services[0].endpoints[1].addr`.
/// Built on the stack as decoding descends; only formatted for errors.
#[derive(Clone, Copy)]
pub(crate) enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    pub fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    pub fn index(&'a self, index: usize) -> Path<'a> {
        Path::Index(self, index)
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(Path::Root, key) => f.write_str(key),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
        }
    }
}

/// The errors found so far.
#[derive(Default)]
pub(crate) struct Cx {
    pub errors: Vec<ConfigError>,
}

impl Cx {
    /// Records `message` at `pos` as it is.
    pub fn error(&mut self, pos: Pos, message: String) {
        self.errors.push(pos.error(message));
    }

    /// Records `path: message` at `pos`.
    pub fn at(&mut self, pos: Pos, path: Path<'_>, message: impl fmt::Display) {
        let message = match path {
            Path::Root => message.to_string(),
            _ => format!("{path}: {message}"),
        };
        self.error(pos, message);
    }

    /// Records "path: expected EXPECTED, found WHAT-NODE-IS".
    pub fn expected(&mut self, node: &Node, path: Path<'_>, expected: &str) {
        self.at(
            node.pos,
            path,
            format_args!("expected {expected}, found {}", node.describe()),
        );
    }
}

/// Most keys a schema mapping may have (the top level has twenty-one).
const MAX_FIELDS: usize = 32;

/// A schema mapping's values by key, after unknown and duplicate keys were
/// reported. Null values count as absent.
pub(crate) struct Fields<'n> {
    pub pos: Pos,
    names: &'static [&'static str],
    slots: [Option<&'n Node>; MAX_FIELDS],
}

impl<'n> Fields<'n> {
    /// The value given for `name`, unless absent or null.
    pub fn get(&self, name: &str) -> Option<&'n Node> {
        let i = self.names.iter().position(|n| *n == name)?;
        self.slots.get(i).copied().flatten()
    }

    /// Like `get`, but a missing value is reported at the mapping.
    pub fn require(&self, cx: &mut Cx, path: Path<'_>, name: &str) -> Option<&'n Node> {
        let value = self.get(name);
        if value.is_none() {
            cx.at(
                self.pos,
                path,
                format_args!("missing required key {}", quote(name)),
            );
        }
        value
    }
}

/// Reads `node` as a mapping with the keys `names`. `what` names the mapping
/// in messages about its keys ("unknown key \"x\" in service ...").
pub(crate) fn fields<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    what: &str,
    names: &'static [&'static str],
) -> Option<Fields<'n>> {
    debug_assert!(names.len() <= MAX_FIELDS);
    let Value::Map(entries) = &node.value else {
        let expected = format!("a mapping with keys {}", names.join(", "));
        cx.expected(node, path, &expected);
        return None;
    };
    let mut out = Fields {
        pos: node.pos,
        names,
        slots: [None; MAX_FIELDS],
    };
    let mut key_pos: [Option<Pos>; MAX_FIELDS] = [None; MAX_FIELDS];
    for entry in entries {
        let Some(key) = key_text(cx, &entry.key, path) else {
            continue;
        };
        let Some(i) = names
            .iter()
            .position(|n| *n == key)
            .filter(|i| *i < MAX_FIELDS)
        else {
            cx.error(
                entry.key.pos,
                format!(
                    "unknown key {} in {what} (expected one of: {})",
                    quote(key),
                    names.join(", ")
                ),
            );
            continue;
        };
        if let Some(first) = key_pos[i] {
            cx.error(
                entry.key.pos,
                format!("duplicate key {} in {what} (first at {first})", quote(key)),
            );
            continue;
        }
        key_pos[i] = Some(entry.key.pos);
        if !entry.value.is_null() {
            out.slots[i] = Some(&entry.value);
        }
    }
    Some(out)
}

/// A mapping key's text; keys must be non-null scalars.
pub(crate) fn key_text<'n>(cx: &mut Cx, key: &'n Node, path: Path<'_>) -> Option<&'n str> {
    let text = key.as_scalar();
    if text.is_none() {
        cx.expected(key, path, "a string as mapping key");
    }
    text
}

/// Reads a mapping whose keys are free-form (headers): each key with its
/// value node, after duplicate keys (exactly equal) were reported.
pub(crate) fn free_map<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    expected: &str,
) -> Option<Vec<(&'n Node, &'n str, &'n Node)>> {
    let Value::Map(entries) = &node.value else {
        cx.expected(node, path, expected);
        return None;
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        if let Some(key) = key_text(cx, &entry.key, path) {
            out.push((&entry.key, key, &entry.value));
        }
    }
    Some(out)
}

/// Reads `node` as a list.
pub(crate) fn list<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    expected: &str,
) -> Option<&'n [Node]> {
    match &node.value {
        Value::List(items) => Some(items),
        _ => {
            cx.expected(node, path, expected);
            None
        }
    }
}

/// Reads `node` as a string: any non-null scalar.
pub(crate) fn string<'n>(cx: &mut Cx, node: &'n Node, path: Path<'_>) -> Option<&'n str> {
    scalar(cx, node, path, "a string")
}

/// Reads any non-null scalar, reporting `expected` otherwise.
pub(crate) fn scalar<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    expected: &str,
) -> Option<&'n str> {
    let text = node.as_scalar();
    if text.is_none() {
        cx.expected(node, path, expected);
    }
    text
}

/// Parses a decimal integer made of ASCII digits only.
pub(crate) fn parse_uint(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Reads an integer in `min..=max`.
pub(crate) fn int_in(cx: &mut Cx, node: &Node, path: Path<'_>, min: u64, max: u64) -> Option<u64> {
    let expected = if max == u64::MAX {
        if min == 1 {
            "a positive integer".to_string()
        } else {
            format!("an integer of at least {min}")
        }
    } else {
        format!("an integer from {min} to {max}")
    };
    let text = scalar(cx, node, path, &expected)?;
    let value = parse_uint(text).filter(|n| (min..=max).contains(n));
    if value.is_none() {
        cx.expected(node, path, &expected);
    }
    value
}

/// Reads a positive integer that fits in `usize`.
pub(crate) fn positive_usize(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<usize> {
    let max = u64::try_from(usize::MAX).unwrap_or(u64::MAX);
    int_in(cx, node, path, 1, max).and_then(|n| usize::try_from(n).ok())
}

/// Reads `true` or `false` (plain scalars; YAML 1.2 core spellings).
pub(crate) fn boolean(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<bool> {
    let value = match node.as_scalar() {
        Some("true" | "True" | "TRUE") if node.is_plain() => Some(true),
        Some("false" | "False" | "FALSE") if node.is_plain() => Some(false),
        _ => None,
    };
    if value.is_none() {
        cx.expected(node, path, "true or false");
    }
    value
}

/// Reads a file path: a non-empty string without NUL, kept as written (a
/// relative path is taken from the gateway's working directory by whoever
/// opens the file; the loader does not look at the file).
pub(crate) fn file_path(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<PathBuf> {
    const EXPECTED: &str = "a file path";
    let text = scalar(cx, node, path, EXPECTED)?;
    if text.trim().is_empty() || text.contains('\0') {
        cx.expected(node, path, EXPECTED);
        return None;
    }
    Some(PathBuf::from(text))
}

/// Reads a duration such as `250ms` or `1m30s` (see `units::parse_duration`).
pub(crate) fn duration(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Duration> {
    const EXPECTED: &str = "a duration like 250ms, 1s, 2m, 1h or 1m30s";
    let text = scalar(cx, node, path, EXPECTED)?;
    units::parse_duration(text)
        .map_err(|reason| cx.at(node.pos, path, reason))
        .ok()
}

/// Reads a byte size such as `16384` or `10MiB` (see `units::parse_size`).
pub(crate) fn size(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<u64> {
    const EXPECTED: &str = "a size in bytes like 16384, 512KiB, 10MiB or 1GB";
    let text = scalar(cx, node, path, EXPECTED)?;
    units::parse_size(text)
        .map_err(|reason| cx.at(node.pos, path, reason))
        .ok()
}

/// Reads a duration field of `f` into `slot`, leaving the default when absent.
pub(crate) fn duration_field(
    cx: &mut Cx,
    f: &Fields<'_>,
    path: Path<'_>,
    name: &str,
    slot: &mut Duration,
) {
    if let Some(node) = f.get(name) {
        if let Some(d) = duration(cx, node, path.key(name)) {
            *slot = d;
        }
    }
}

/// RFC 9110 token characters (header names, methods).
pub(crate) fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

/// Whether `text` may be sent as a header value: no control characters
/// other than horizontal tab.
pub(crate) fn is_header_value(text: &str) -> bool {
    !text.chars().any(|c| c.is_control() && c != '\t')
}

/// Names of services and routes: `[A-Za-z0-9_.-]+`.
pub(crate) fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The one check behind every entry of a list or mapping that must differ
/// from the others (names, addresses, methods, header names): records
/// `key` in `seen` as given at `here` and returns true, unless an earlier
/// entry had it; then reports `message(first)` at `at` (the entry's
/// position and path), where `first` is what that earlier entry recorded,
/// and returns false.
pub(crate) fn unique<K: std::hash::Hash + Eq, V: Copy, M: fmt::Display>(
    cx: &mut Cx,
    seen: &mut HashMap<K, V>,
    key: K,
    here: V,
    at: (Pos, Path<'_>),
    message: impl FnOnce(V) -> M,
) -> bool {
    match seen.entry(key) {
        Entry::Occupied(first) => {
            cx.at(at.0, at.1, message(*first.get()));
            false
        }
        Entry::Vacant(slot) => {
            slot.insert(here);
            true
        }
    }
}

/// A service's or a route's name (`what`): a string no earlier one of
/// its kind has (kept in `names` with its position) made of letters,
/// digits, '_', '.' and '-'.
pub(crate) fn unique_name<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    names: &mut HashMap<&'n str, Pos>,
    what: &str,
) -> Option<&'n str> {
    let name = string(cx, node, path)?;
    let given = |first| format!("duplicate {what} name {} (first at {first})", quote(name));
    if !unique(cx, names, name, node.pos, (node.pos, path), given) {
        return None;
    }
    if !is_name(name) {
        cx.at(
            node.pos,
            path,
            format_args!(
                "bad name {}: use letters, digits, '_', '.' and '-'",
                quote(name)
            ),
        );
        return None;
    }
    Some(name)
}

/// Checks one header entry: a token name (as `name`, compared
/// case-insensitively for duplicates) and a sendable string value.
pub(crate) fn header<'a, 'n>(
    cx: &mut Cx,
    key: &Node,
    name: &'a str,
    value: &'n Node,
    path: Path<'_>,
    seen: &mut HashMap<String, Pos>,
) -> Option<(&'a str, &'n str)> {
    if !is_token(name) {
        cx.at(
            key.pos,
            path,
            format_args!("bad header name {}", quote(name)),
        );
        return None;
    }
    let lower = name.to_ascii_lowercase();
    let given = |first| format!("duplicate header {} (first at {first})", quote(name));
    if !unique(cx, seen, lower, key.pos, (key.pos, path), given) {
        return None;
    }
    let p = path.key(name);
    let text = scalar(cx, value, p, "a string")?;
    if !is_header_value(text) {
        cx.at(
            value.pos,
            p,
            "a header value must not contain control characters (such as line breaks)",
        );
        return None;
    }
    Some((name, text))
}

/// Letters, digits, '-', '_' in dot-separated non-empty labels, at most 253 bytes.
pub(crate) fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Where an app id or key was given (the `item`th key of app `app`), and a
/// hash of its text to sort by.
#[derive(Clone, Copy)]
pub(crate) struct Seen {
    hash: u64,
    pub pos: Pos,
    pub app: u32,
    pub item: u32,
}

impl Seen {
    pub(crate) fn new(
        h: &impl std::hash::BuildHasher,
        text: impl std::hash::Hash,
        pos: Pos,
        app: u32,
        item: u32,
    ) -> Self {
        Seen {
            hash: h.hash_one(text),
            pos,
            app,
            item,
        }
    }
}

/// Each later occurrence of a text given more than once, with the first
/// one, in the order they were given. `text` finds an entry's text.
pub(crate) fn duplicates<'a, T: PartialEq + ?Sized + 'a>(
    seen: &mut [Seen],
    text: impl Fn(&Seen) -> &'a T,
) -> Vec<(Seen, Seen)> {
    seen.sort_unstable_by_key(|s| (s.hash, s.app, s.item));
    let mut out = Vec::new();
    for run in seen.chunk_by(|a, b| a.hash == b.hash) {
        for (i, s) in run.iter().enumerate() {
            // The first earlier entry with the same text (hashes can collide).
            if let Some(first) = run[..i].iter().find(|f| text(f) == text(s)) {
                out.push((*first, *s));
            }
        }
    }
    out.sort_unstable_by_key(|(_, d)| (d.app, d.item));
    out
}
