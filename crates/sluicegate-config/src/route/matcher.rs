//! A route's `match` mapping: host (exact or `*.` wildcard), one of `path`
//! (exact, or a template with `{name}` segments), `path_prefix` and
//! `path_regex`, methods, and required header values
//! (exact or `~regex`), query parameters and cookies.

use std::collections::HashMap;
use std::net::Ipv6Addr;

use crate::model::{HostMatch, Match, PathMatch, ValueMatch};
use crate::reader::{self, fields, Cx, Path};
use crate::route::value_regex::{regex_error, ValueRegex};
use crate::yaml::{quote, Node, Pos};

pub(crate) const MATCH_KEYS: &[&str] = &[
    "host",
    "path",
    "path_prefix",
    "path_regex",
    "methods",
    "headers",
    "query",
    "cookies",
];

pub(crate) const PATH_KEYS: &[&str] = &["path", "path_prefix", "path_regex"];

pub(super) fn any() -> Match {
    Match {
        host: None,
        path: PathMatch::Any,
        methods: Vec::new(),
        headers: Vec::new(),
        query: Vec::new(),
        cookies: Vec::new(),
    }
}

/// Decodes a `match` mapping. Sets `has_prefix` when `path_prefix` was
/// given, valid or not (so that `strip_prefix` is not reported as well).
pub(super) fn match_(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    has_prefix: &mut bool,
) -> Option<Match> {
    let f = fields(cx, node, path, "match", MATCH_KEYS)?;
    let mut ok = true;
    let mut out = any();
    if let Some(n) = f.get("host") {
        out.host = host_match(cx, n, path.key("host"));
        ok &= out.host.is_some();
    }

    *has_prefix = f.get("path_prefix").is_some();
    let mut given = PATH_KEYS.iter().filter_map(|k| f.get(k).map(|n| (*k, n)));
    if let Some((key, n)) = given.next() {
        let p = path.key(key);
        let parsed = match key {
            "path" => template_or_path(cx, n, p),
            "path_prefix" => path_text(cx, n, p).map(|s| {
                let trimmed = s.trim_end_matches('/');
                PathMatch::Prefix(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
            }),
            _ => path_regex(cx, n, p).map(PathMatch::Regex),
        };
        match parsed {
            Some(m) => out.path = m,
            None => ok = false,
        }
        for (_, extra) in given {
            cx.at(
                extra.pos,
                path,
                "give only one of path, path_prefix, path_regex",
            );
            ok = false;
        }
    }

    if let Some(n) = f.get("methods") {
        match methods(cx, n, path.key("methods")) {
            Some(m) => out.methods = m,
            None => ok = false,
        }
    }
    if let Some(n) = f.get("headers") {
        match match_headers(cx, n, path.key("headers")) {
            Some(h) => out.headers = h,
            None => ok = false,
        }
    }
    if let Some(n) = f.get("query") {
        match match_pairs(cx, n, path.key("query"), Pairs::Query) {
            Some(q) => out.query = q,
            None => ok = false,
        }
    }
    if let Some(n) = f.get("cookies") {
        match match_pairs(cx, n, path.key("cookies"), Pairs::Cookies) {
            Some(c) => out.cookies = c,
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// `example.com` (exact) or `*.example.com` (any subdomain), lower-cased, no port.
fn host_match(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<HostMatch> {
    let text = reader::string(cx, node, path)?;
    let host = text.trim().to_ascii_lowercase();
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        if inner.parse::<Ipv6Addr>().is_ok() {
            return Some(HostMatch::Exact(host));
        }
    }
    let why = if host.contains(':') {
        Some("a port is not allowed (hosts are matched without their port)")
    } else if host == "*" {
        Some("omit host to match any host")
    } else if host.strip_prefix("*.").unwrap_or(&host).contains('*') {
        Some("a wildcard is only allowed as a leading \"*.\", e.g. *.example.com")
    } else if !crate::reader::is_host_name(host.strip_prefix("*.").unwrap_or(&host)) {
        Some("expected a host name like api.example.com or *.example.com")
    } else {
        None
    };
    if let Some(why) = why {
        cx.at(
            node.pos,
            path,
            format_args!("bad host {}: {why}", quote(text)),
        );
        return None;
    }
    Some(match host.strip_prefix('*') {
        Some(suffix) => HostMatch::Suffix(suffix.to_string()),
        None => HostMatch::Exact(host),
    })
}

/// A path for `path` or `path_prefix`: starts with '/', no query, fragment,
/// spaces or control characters.
fn path_text<'n>(cx: &mut Cx, node: &'n Node, path: Path<'_>) -> Option<&'n str> {
    let text = reader::string(cx, node, path)?;
    let why = if !text.starts_with('/') {
        Some("must start with \"/\"")
    } else if text.contains(['?', '#']) {
        Some("must not contain '?' or '#' (only the path is matched)")
    } else if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("must not contain spaces or control characters")
    } else {
        None
    };
    match why {
        Some(why) => {
            cx.at(node.pos, path, format_args!("{why}, found {}", quote(text)));
            None
        }
        None => Some(text),
    }
}

/// `path`: a template when it holds a `{`, else an exact path.
fn template_or_path(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<PathMatch> {
    let text = reader::string(cx, node, path)?;
    if !super::template::is_template(text) {
        return path_text(cx, node, path).map(|s| PathMatch::Exact(s.to_string()));
    }
    match super::template::parse(text) {
        Ok(t) => Some(PathMatch::Template(t)),
        Err(why) => {
            cx.at(
                node.pos,
                path,
                format_args!("bad path template {}: {why}", quote(text)),
            );
            None
        }
    }
}

fn path_regex(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<String> {
    let text = reader::string(cx, node, path)?;
    match regex::Regex::new(text) {
        Ok(_) => Some(text.to_string()),
        Err(e) => {
            cx.at(
                node.pos,
                path,
                format_args!("invalid regex {}: {}", quote(text), regex_error(&e)),
            );
            None
        }
    }
}

/// One method or a list of them: letters only, upper-cased, no duplicates.
fn methods(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<String>> {
    const EXPECTED: &str = "an HTTP method like GET or POST";
    if node.as_scalar().is_some() {
        return method(cx, node, path, EXPECTED).map(|m| vec![m]);
    }
    let items = reader::list(cx, node, path, "a list of HTTP methods, e.g. [GET, POST]")?;
    if items.is_empty() {
        cx.at(
            node.pos,
            path,
            "must not be empty (omit methods to match any method)",
        );
        return None;
    }
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(m) = method(cx, item, p, EXPECTED) else {
            ok = false;
            continue;
        };
        let also = |first| format!("duplicate method {m} (also methods[{first}])");
        if !reader::unique(cx, &mut seen, m.clone(), i, (item.pos, p), also) {
            ok = false;
            continue;
        }
        out.push(m);
    }
    ok.then_some(out)
}

fn method(cx: &mut Cx, node: &Node, path: Path<'_>, expected: &str) -> Option<String> {
    let text = reader::scalar(cx, node, path, expected)?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_alphabetic()) {
        cx.expected(node, path, expected);
        return None;
    }
    Some(text.to_ascii_uppercase())
}

/// `headers:` in a match: lower-cased token names, each with the exact
/// value required, or a regex after `~` that the whole value must match.
fn match_headers(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<(String, ValueMatch)>> {
    let entries = reader::free_map(
        cx,
        node,
        path,
        "a mapping of header names to values, e.g. { x-env: canary }",
    )?;
    let mut seen: HashMap<String, Pos> = HashMap::with_capacity(entries.len());
    let mut out = Vec::with_capacity(entries.len());
    let mut ok = true;
    for (key, name, value) in entries {
        let lower = name.to_ascii_lowercase();
        let Some((name, text)) = reader::header(cx, key, &lower, value, path, &mut seen) else {
            ok = false;
            continue;
        };
        let want = match text.strip_prefix('~') {
            None => ValueMatch::Exact(text.to_string()),
            Some(re) => {
                // The regex crate's message for a syntax error; the DFA's
                // for what parses but cannot be compiled to one.
                let why = match regex::Regex::new(re) {
                    Err(e) => Some(format!("invalid regex {}: {}", quote(re), regex_error(&e))),
                    Ok(_) => ValueRegex::new(re).err().map(|e| {
                        format!("regex {} cannot be compiled for matching: {e}", quote(re))
                    }),
                };
                if let Some(why) = why {
                    cx.at(value.pos, path.key(name), why);
                    ok = false;
                    continue;
                }
                ValueMatch::Regex(re.to_string())
            }
        };
        out.push((name.to_string(), want));
    }
    ok.then_some(out)
}

/// Which `match` mapping of names to values [`match_pairs`] reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pairs {
    Query,
    Cookies,
}

/// `query:` or `cookies:` in a match: names (case-sensitive, unique) each
/// with the value required. Query names and values are any text without
/// control characters (compared after the request's are decoded); cookie
/// names are tokens and values cookie octets (RFC 6265), compared as sent.
fn match_pairs(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    which: Pairs,
) -> Option<Vec<(String, String)>> {
    let example = match which {
        Pairs::Query => "a mapping of query parameter names to values, e.g. { version: \"2\" }",
        Pairs::Cookies => "a mapping of cookie names to values, e.g. { beta: \"1\" }",
    };
    let entries = reader::free_map(cx, node, path, example)?;
    if entries.is_empty() {
        cx.at(
            node.pos,
            path,
            "must not be empty (omit it to match any request)",
        );
        return None;
    }
    let mut seen: HashMap<String, Pos> = HashMap::with_capacity(entries.len());
    let mut out = Vec::with_capacity(entries.len());
    let mut ok = true;
    for (key, name, value) in entries {
        let bad_name = match which {
            Pairs::Query => (name.is_empty() || name.chars().any(char::is_control))
                .then_some("bad query parameter name"),
            Pairs::Cookies => (!reader::is_token(name)).then_some("bad cookie name"),
        };
        if let Some(what) = bad_name {
            cx.at(key.pos, path, format_args!("{what} {}", quote(name)));
            ok = false;
            continue;
        }
        let also = |first| format!("duplicate name {} (first at {first})", quote(name));
        if !reader::unique(
            cx,
            &mut seen,
            name.to_string(),
            key.pos,
            (key.pos, path),
            also,
        ) {
            ok = false;
            continue;
        }
        let p = path.key(name);
        let Some(text) = reader::scalar(cx, value, p, "a string") else {
            ok = false;
            continue;
        };
        let why = match which {
            Pairs::Query => text
                .chars()
                .any(char::is_control)
                .then_some("a query value must not contain control characters"),
            Pairs::Cookies => (!text.bytes().all(cookie_octet)).then_some(
                "a cookie value must not contain spaces, '\"', ',', ';', '\\' or control characters",
            ),
        };
        if let Some(why) = why {
            cx.at(value.pos, p, why);
            ok = false;
            continue;
        }
        out.push((name.to_string(), text.to_string()));
    }
    ok.then_some(out)
}

/// RFC 6265's cookie-octet: what a cookie value may hold, unquoted.
fn cookie_octet(b: u8) -> bool {
    matches!(b, 0x21 | 0x23..=0x2b | 0x2d..=0x3a | 0x3c..=0x5b | 0x5d..=0x7e)
}
