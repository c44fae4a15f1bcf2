//! Path templates in the router: a trie of segments. A literal segment is
//! looked up by hash (one table for all nodes, keyed by parent and text);
//! parameter edges are tried after it, typed ones (in the order they first
//! appear in the file) before untyped ones, and a `{name:*}` last, with
//! backtracking when a branch ends without a route whose other conditions
//! hold. The trie is a tree, so a lookup visits each node at most once,
//! and only nodes along the request's path: the cost follows the path's
//! segments and the edges tried at each, not the number of routes.
//!
//! A match leaves its parameters in [`Params`]: spans of the path the
//! router saw, in a fixed array, without allocating. Types are checked on
//! the percent-decoded segment (`alpha` and `alnum` on its UTF-8 text).

use std::hash::BuildHasher;
use std::ops::Range;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use sluicegate_config::{ParamType, PathTemplate, TemplateSegment, ValueRegex, MAX_PARAMS};

/// The parameters of the template route a request matched, as spans of
/// the path the router saw (its normal form), in the template's order.
/// Only meaningful after a template route matched: other matches leave it
/// as it was.
#[derive(Debug, Clone)]
pub struct Params {
    len: u8,
    spans: [(u32, u32); MAX_PARAMS],
}

impl Default for Params {
    fn default() -> Params {
        Params {
            len: 0,
            spans: [(0, 0); MAX_PARAMS],
        }
    }
}

impl Params {
    /// How many parameters were captured.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where parameter `i` (its index in the route's template) is in the
    /// path the router saw.
    pub fn span(&self, i: usize) -> Option<Range<usize>> {
        let &(s, e) = self.spans[..self.len()].get(i)?;
        Some(s as usize..e as usize)
    }

    /// Parameter `i`'s bytes, as in `path` (the path the router saw:
    /// normalised, so escapes other than of unreserved characters are
    /// kept). What `split_by` and per-parameter limits key on.
    pub fn get<'p>(&self, path: &'p [u8], i: usize) -> Option<&'p [u8]> {
        path.get(self.span(i)?)
    }

    fn set(&mut self, depth: usize, span: Range<usize>) {
        if let Some(s) = self.spans.get_mut(depth) {
            *s = (span.start as u32, span.end as u32);
        }
    }
}

/// What a typed parameter's segment must be.
#[derive(Debug)]
enum Check {
    Int,
    Uint,
    Uuid,
    Hex,
    Alpha,
    Alnum,
    Regex(ValueRegex),
}

impl Check {
    fn new(ty: &ParamType) -> Result<Option<Check>, String> {
        Ok(Some(match ty {
            ParamType::Any => return Ok(None),
            ParamType::Int => Check::Int,
            ParamType::Uint => Check::Uint,
            ParamType::Uuid => Check::Uuid,
            ParamType::Hex => Check::Hex,
            ParamType::Alpha => Check::Alpha,
            ParamType::Alnum => Check::Alnum,
            ParamType::Regex(re) => Check::Regex(ValueRegex::new(re)?),
        }))
    }

    /// Whether the non-empty segment `seg` (as in the path) holds.
    fn holds(&self, seg: &[u8]) -> bool {
        match self {
            Check::Int => match decoded(seg).next() {
                Some(b'-') => digits_within(decoded(seg).skip(1), i64::MIN.unsigned_abs()),
                _ => digits_within(decoded(seg), i64::MAX as u64),
            },
            Check::Uint => digits_within(decoded(seg), u64::MAX),
            Check::Hex => decoded(seg).all(|b| b.is_ascii_hexdigit()),
            Check::Uuid => {
                let mut n = 0;
                decoded(seg).all(|b| {
                    n += 1;
                    match n {
                        9 | 14 | 19 | 24 => b == b'-',
                        _ => b.is_ascii_hexdigit(),
                    }
                }) && n == 36
            }
            Check::Alpha => chars_all(seg, char::is_alphabetic),
            Check::Alnum => chars_all(seg, char::is_alphanumeric),
            Check::Regex(re) => re.is_match_bytes(decoded(seg)),
        }
    }
}

/// The bytes of `seg` with `%XX` escapes decoded (a malformed escape, which
/// a normalised path never has, stays as it is).
fn decoded(seg: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let b = *seg.get(i)?;
        if b == b'%' {
            let hex = |j: usize| seg.get(j).and_then(|&c| (c as char).to_digit(16));
            if let (Some(h), Some(l)) = (hex(i + 1), hex(i + 2)) {
                i += 3;
                return Some((h << 4 | l) as u8);
            }
        }
        i += 1;
        Some(b)
    })
}

/// One or more ASCII digits whose value is at most `max`.
fn digits_within(bytes: impl Iterator<Item = u8>, max: u64) -> bool {
    let mut value: u64 = 0;
    let mut any = false;
    for b in bytes {
        if !b.is_ascii_digit() {
            return false;
        }
        value = match value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
        {
            Some(v) if v <= max => v,
            _ => return false,
        };
        any = true;
    }
    any
}

/// The decoded bytes of `seg` are UTF-8 text of one or more characters,
/// each of which `pred` holds for.
fn chars_all(seg: &[u8], pred: fn(char) -> bool) -> bool {
    let mut it = decoded(seg);
    let mut any = false;
    while let Some(b) = it.next() {
        let n = match b {
            0..=0x7f => 1,
            0xc2..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf4 => 4,
            _ => return false,
        };
        let mut buf = [b, 0, 0, 0];
        for slot in buf.iter_mut().take(n).skip(1) {
            match it.next() {
                Some(c) => *slot = c,
                None => return false,
            }
        }
        match std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.chars().next())
        {
            Some(c) if pred(c) => any = true,
            _ => return false,
        }
    }
    any
}

/// One node of the trie: where a request is after some segments.
#[derive(Debug, Default)]
struct Node {
    /// Typed parameter edges, in the order they first appear.
    typed: Vec<(ParamType, Check, u32)>,
    /// The untyped parameter edge.
    any: Option<u32>,
    /// Routes whose template ends here, in file order.
    end: Vec<u32>,
    /// Routes whose template's `{name:*}` starts here, in file order.
    rest: Vec<u32>,
    /// Some literal edge leaves this node (else the table is not probed).
    literals: bool,
}

/// A literal edge: from `parent`, the segment `key` leads to `child`.
#[derive(Debug)]
struct Lit {
    parent: u32,
    key: Box<[u8]>,
    child: u32,
}

/// Every template route of a router.
#[derive(Debug, Default)]
pub(super) struct Templates {
    /// The root first; none at all without template routes (so a router
    /// without them tells so from its own length field, nothing loaded).
    nodes: Vec<Node>,
    /// Literal edges; keys come from the config, so a fast non-keyed hash
    /// is safe (a request can only probe the table).
    literals: HashTable<Lit>,
}

fn hash(parent: u32, key: &[u8]) -> u64 {
    FxBuildHasher.hash_one((parent, key))
}

impl Templates {
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn new_node(&mut self) -> u32 {
        self.nodes.push(Node::default());
        (self.nodes.len() - 1) as u32
    }

    fn literal(&self, parent: u32, key: &[u8]) -> Option<u32> {
        self.literals
            .find(hash(parent, key), |l| l.parent == parent && *l.key == *key)
            .map(|l| l.child)
    }

    /// Adds route `route` (its index) under template `t`.
    pub(super) fn add(&mut self, t: &PathTemplate, route: u32) -> Result<(), String> {
        if self.nodes.is_empty() {
            self.nodes.push(Node::default());
        }
        let mut node = 0u32;
        for seg in &t.segments {
            node = match seg {
                TemplateSegment::Literal(l) => match self.literal(node, l.as_bytes()) {
                    Some(child) => child,
                    None => {
                        let child = self.new_node();
                        let lit = Lit {
                            parent: node,
                            key: l.as_bytes().into(),
                            child,
                        };
                        self.literals
                            .insert_unique(hash(node, l.as_bytes()), lit, |l| {
                                hash(l.parent, &l.key)
                            });
                        self.nodes[node as usize].literals = true;
                        child
                    }
                },
                TemplateSegment::Param { ty, .. } => match Check::new(ty)? {
                    None => match self.nodes[node as usize].any {
                        Some(child) => child,
                        None => {
                            let child = self.new_node();
                            self.nodes[node as usize].any = Some(child);
                            child
                        }
                    },
                    Some(check) => {
                        let n = &self.nodes[node as usize];
                        match n.typed.iter().find(|(t, _, _)| t == ty) {
                            Some(&(_, _, child)) => child,
                            None => {
                                let child = self.new_node();
                                self.nodes[node as usize]
                                    .typed
                                    .push((ty.clone(), check, child));
                                child
                            }
                        }
                    }
                },
                TemplateSegment::Rest { .. } => {
                    self.nodes[node as usize].rest.push(route);
                    return Ok(());
                }
            };
        }
        self.nodes[node as usize].end.push(route);
        Ok(())
    }

    /// The first route (by precedence, then file order) whose template
    /// matches `path` and for which `ok` holds; its parameters in `params`.
    pub(super) fn find(
        &self,
        path: &[u8],
        params: &mut Params,
        ok: &mut dyn FnMut(u32) -> bool,
    ) -> Option<u32> {
        if path.first() != Some(&b'/') || self.nodes.is_empty() {
            return None;
        }
        let found = self.walk(0, path, 0, 0, params, ok);
        if found.is_none() {
            params.len = 0;
        }
        found
    }

    /// From `node`, with `path[..pos]` consumed (`pos` is at a `/` or the
    /// end) and `depth` parameters captured.
    fn walk(
        &self,
        node: u32,
        path: &[u8],
        pos: usize,
        depth: usize,
        params: &mut Params,
        ok: &mut dyn FnMut(u32) -> bool,
    ) -> Option<u32> {
        let n = &self.nodes[node as usize];
        let mut done = |routes: &[u32], params: &mut Params, depth: usize| {
            let r = routes.iter().copied().find(|&r| ok(r))?;
            params.len = depth as u8;
            Some(r)
        };
        if pos == path.len() {
            if let Some(r) = done(&n.end, params, depth) {
                return Some(r);
            }
            if n.rest.is_empty() {
                return None;
            }
            params.set(depth, pos..pos);
            return done(&n.rest, params, depth + 1);
        }
        let start = pos + 1;
        let end = memchr::memchr(b'/', &path[start..]).map_or(path.len(), |k| start + k);
        let seg = &path[start..end];
        if n.literals {
            if let Some(child) = self.literal(node, seg) {
                if let Some(r) = self.walk(child, path, end, depth, params, ok) {
                    return Some(r);
                }
            }
        }
        if !seg.is_empty() && depth < MAX_PARAMS {
            for (_, check, child) in &n.typed {
                if check.holds(seg) {
                    params.set(depth, start..end);
                    if let Some(r) = self.walk(*child, path, end, depth + 1, params, ok) {
                        return Some(r);
                    }
                }
            }
            if let Some(child) = n.any {
                params.set(depth, start..end);
                if let Some(r) = self.walk(child, path, end, depth + 1, params, ok) {
                    return Some(r);
                }
            }
        }
        if n.rest.is_empty() || depth >= MAX_PARAMS {
            return None;
        }
        params.set(depth, start..path.len());
        let n = &self.nodes[node as usize];
        let r = n.rest.iter().copied().find(|&r| ok(r))?;
        params.len = depth as u8 + 1;
        Some(r)
    }
}

/// A text (a rewrite's replacement, a header value) whose `${name}`
/// references to a template's parameters are resolved at load: the text
/// before each reference, and the parameter's index; then the rest.
#[derive(Debug)]
pub struct Expand {
    parts: Box<[(Box<[u8]>, usize)]>,
    tail: Box<[u8]>,
}

impl Expand {
    /// `text` cut at its references for which `param` gives an index
    /// (other references stay in the text); `None` when it has none.
    pub fn new(text: &str, param: impl Fn(&str) -> Option<usize>) -> Option<Expand> {
        let mut parts = Vec::new();
        let mut from = 0;
        for (at, name) in sluicegate_config::template_references(text) {
            if let Some(i) = param(name) {
                parts.push((text.as_bytes()[from..at.start].into(), i));
                from = at.end;
            }
        }
        (!parts.is_empty()).then(|| Expand {
            parts: parts.into(),
            tail: text.as_bytes()[from..].into(),
        })
    }

    /// Appends the text to `out`, each reference replaced by its
    /// parameter's bytes in `path` (the path the router saw) and each
    /// piece of text between them given to `text` to append.
    pub fn write(
        &self,
        params: &Params,
        path: &[u8],
        out: &mut Vec<u8>,
        mut text: impl FnMut(&[u8], &mut Vec<u8>),
    ) {
        for (before, i) in self.parts.iter() {
            text(before, out);
            out.extend_from_slice(params.get(path, *i).unwrap_or_default());
        }
        text(&self.tail, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(ty: &str, seg: &str) -> bool {
        let t = match ty {
            "int" => ParamType::Int,
            "uint" => ParamType::Uint,
            "uuid" => ParamType::Uuid,
            "hex" => ParamType::Hex,
            "alpha" => ParamType::Alpha,
            "alnum" => ParamType::Alnum,
            re => ParamType::Regex(re.into()),
        };
        Check::new(&t).unwrap().unwrap().holds(seg.as_bytes())
    }

    #[test]
    fn types_on_decoded_segments() {
        for yes in ["0", "12", "-3", "007", "%31%32", "9223372036854775807"] {
            assert!(check("int", yes), "{yes}");
        }
        assert!(check("int", "-9223372036854775808"));
        for no in ["", "-", "1a", "+1", "9223372036854775808", "1.5", "%2D"] {
            assert!(!check("int", no), "{no}");
        }
        assert!(check("uint", "18446744073709551615"));
        for no in ["-1", "18446744073709551616", "x"] {
            assert!(!check("uint", no), "{no}");
        }
        assert!(check("uuid", "123e4567-E89B-12d3-a456-426614174000"));
        for no in [
            "123e4567e89b12d3a456426614174000",
            "123e4567-e89b-12d3-a456-42661417400",
            "123e4567-e89b-12d3-a456-4266141740000",
            "123e4567-e89b-12d3-a456_426614174000",
            "g23e4567-e89b-12d3-a456-426614174000",
        ] {
            assert!(!check("uuid", no), "{no}");
        }
        assert!(check("hex", "DeadBeef09"));
        assert!(!check("hex", "beefy"));
        assert!(check("alpha", "J%C3%BCrgen"));
        assert!(check("alpha", "Jürgen"));
        assert!(!check("alpha", "J%C3rgen"), "invalid UTF-8");
        assert!(!check("alpha", "%FF"));
        assert!(!check("alpha", "abc1"));
        assert!(check("alnum", "abc1%C3%A9"));
        assert!(!check("alnum", "a-b"));
        assert!(!check("alnum", "a%20b"));
        assert!(check("v[0-9]+", "v12"));
        assert!(check("a b", "a%20b"), "the regex sees the decoded text");
        assert!(!check("v[0-9]+", "v12x"));
    }

    #[test]
    fn expands_parameters_only() {
        let param = |n: &str| ["id", "rest"].iter().position(|p| *p == n);
        assert!(Expand::new("/v2/$1/${x}", param).is_none());
        let e = Expand::new("/v2/${id}/$1/${x}/${rest}", param).unwrap();
        let path = b"/u/42/a/b";
        let mut p = Params::default();
        p.set(0, 3..5);
        p.set(1, 6..9);
        p.len = 2;
        let mut out = Vec::new();
        e.write(&p, path, &mut out, |t, o| o.extend_from_slice(t));
        assert_eq!(out, b"/v2/42/$1/${x}/a/b");
    }
}
