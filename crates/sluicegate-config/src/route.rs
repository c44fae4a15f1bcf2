//! The `routes` list: names, `match` conditions, and the action (proxy to a service or respond).

use std::collections::HashMap;
use std::net::Ipv6Addr;

use crate::model::{Action, Auth, HeaderOps, HostMatch, Match, PathMatch, Route};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

const ROUTE_KEYS: &[&str] = &[
    "name",
    "match",
    "service",
    "respond",
    "strip_prefix",
    "auth",
    "limit",
    "request_headers",
    "response_headers",
    "cors",
    "ip",
    "rewrite",
    "upgrade",
];
const MATCH_KEYS: &[&str] = &[
    "host",
    "path",
    "path_prefix",
    "path_regex",
    "methods",
    "headers",
];
const RESPOND_KEYS: &[&str] = &["status", "body", "headers"];
const PATH_KEYS: &[&str] = &["path", "path_prefix", "path_regex"];

/// Decodes the routes list, in file order. `services` holds every defined
/// service name; `client_ca` says whether some listener asks clients for a
/// certificate (which `auth: mtls` needs).
pub(crate) fn routes(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
    client_ca: bool,
) -> Vec<Route> {
    let Some(items) = reader::list(cx, node, path, "a list of routes") else {
        return Vec::new();
    };
    let mut names: HashMap<&str, Pos> = HashMap::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        if let Some(route) = route(cx, item, p, services, &mut names, client_ca) {
            out.push(route);
        }
    }
    out
}

fn route<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
    names: &mut HashMap<&'n str, Pos>,
    client_ca: bool,
) -> Option<Route> {
    let f = fields(cx, node, path, "route", ROUTE_KEYS)?;
    let name = f
        .require(cx, path, "name")
        .and_then(|n| route_name(cx, n, path.key("name"), names));

    let mut has_prefix = false;
    let matcher = match f.get("match") {
        None => Some(any()),
        Some(m) => match_(cx, m, path.key("match"), &mut has_prefix),
    };

    let strip_prefix = match f.get("strip_prefix") {
        None => Some(false),
        Some(n) => reader::boolean(cx, n, path.key("strip_prefix")),
    };

    let action = match (f.get("service"), f.get("respond")) {
        (Some(_), Some(respond)) => {
            cx.at(
                respond.pos,
                path,
                "give either service or respond, not both",
            );
            None
        }
        (None, None) => {
            cx.at(
                f.pos,
                path,
                "missing \"service\" (where to proxy) or \"respond\" (what to answer)",
            );
            None
        }
        (Some(service), None) => {
            let p = path.key("service");
            let name = reader::string(cx, service, p);
            if let Some(name) = name.filter(|n| !services.contains_key(*n)) {
                cx.at(
                    service.pos,
                    p,
                    format_args!("unknown service {}", quote(name)),
                );
            }
            if strip_prefix == Some(true) && !has_prefix {
                let at = f.get("strip_prefix").map_or(f.pos, |n| n.pos);
                cx.at(
                    at,
                    path.key("strip_prefix"),
                    "needs match.path_prefix (the prefix to strip)",
                );
            }
            name.map(|n| Action::Proxy {
                service: n.to_string(),
                strip_prefix: strip_prefix.unwrap_or(false),
            })
        }
        (None, Some(respond)) => {
            if strip_prefix == Some(true) {
                let at = f.get("strip_prefix").map_or(f.pos, |n| n.pos);
                cx.at(
                    at,
                    path.key("strip_prefix"),
                    "only applies to routes with a service",
                );
            }
            respond_action(cx, respond, path.key("respond"))
        }
    };
    let auth = match f.get("auth") {
        None => Some(Auth::None),
        Some(n) => {
            let p = path.key("auth");
            match reader::scalar(cx, n, p, "app_key, jwt, mtls or none") {
                Some("none") => Some(Auth::None),
                Some("app_key") => Some(Auth::AppKey),
                Some("jwt") => Some(Auth::Jwt),
                Some("mtls") if client_ca => Some(Auth::Mtls),
                Some("mtls") => {
                    cx.at(
                        n.pos,
                        p,
                        "mtls needs a listener with tls.client_ca (no listener asks clients for a certificate)",
                    );
                    None
                }
                Some(other) => {
                    cx.at(
                        n.pos,
                        p,
                        format_args!(
                            "unknown auth {} (expected app_key, jwt, mtls or none)",
                            quote(other)
                        ),
                    );
                    None
                }
                None => None,
            }
        }
    };
    let limit = match f.get("limit") {
        None => Some(None),
        Some(n) => crate::apps::route_limit(cx, n, path.key("limit")).map(Some),
    };
    let mut ops = |key: &str| match f.get(key) {
        None => Some(HeaderOps::default()),
        Some(n) => crate::policy::header_ops(cx, n, path.key(key)),
    };
    let request_headers = ops("request_headers");
    let response_headers = ops("response_headers");
    let cors = match f.get("cors") {
        None => Some(None),
        Some(n) => crate::policy::cors(cx, n, path.key("cors")).map(Some),
    };
    let ip = match f.get("ip") {
        None => Some(Default::default()),
        Some(n) => crate::policy::ip_rules(cx, n, path.key("ip")),
    };
    let rewrite = match f.get("rewrite") {
        None => Some(None),
        Some(n) => {
            if f.get("respond").is_some() {
                cx.at(
                    n.pos,
                    path.key("rewrite"),
                    "only applies to routes with a service",
                );
                None
            } else {
                rewrite(cx, n, path.key("rewrite")).map(Some)
            }
        }
    };
    let upgrade = match f.get("upgrade") {
        None => Some(vec!["websocket".to_string()]),
        Some(n) => {
            if f.get("respond").is_some() {
                cx.at(
                    n.pos,
                    path.key("upgrade"),
                    "only applies to routes with a service",
                );
                None
            } else {
                upgrade(cx, n, path.key("upgrade"))
            }
        }
    };
    Some(Route {
        name: name?.to_string(),
        matcher: matcher?,
        action: action?,
        auth: auth?,
        limit: limit?,
        request_headers: request_headers?,
        response_headers: response_headers?,
        cors: cors?,
        ip: ip?,
        rewrite: rewrite?,
        upgrade: upgrade?,
    })
}

fn route_name<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    names: &mut HashMap<&'n str, Pos>,
) -> Option<&'n str> {
    let name = reader::string(cx, node, path)?;
    if let Some(first) = names.get(name) {
        cx.at(
            node.pos,
            path,
            format_args!("duplicate route name {} (first at {first})", quote(name)),
        );
        return None;
    }
    names.insert(name, node.pos);
    if !reader::is_name(name) {
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

fn any() -> Match {
    Match {
        host: None,
        path: PathMatch::Any,
        methods: Vec::new(),
        headers: Vec::new(),
    }
}

/// Decodes a `match` mapping. Sets `has_prefix` when `path_prefix` was
/// given, valid or not (so that `strip_prefix` is not reported as well).
fn match_(cx: &mut Cx, node: &Node, path: Path<'_>, has_prefix: &mut bool) -> Option<Match> {
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
            "path" => path_text(cx, n, p).map(|s| PathMatch::Exact(s.to_string())),
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

/// The regex crate's message on one line: syntax errors come with a caret
/// diagram over several lines, of which the `error: ...` line says what is wrong.
fn regex_error(e: &regex::Error) -> String {
    let text = e.to_string();
    text.lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .map(str::to_string)
        .unwrap_or_else(|| text.split_whitespace().collect::<Vec<_>>().join(" "))
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
        if let Some(first) = seen.get(&m) {
            cx.at(
                item.pos,
                p,
                format_args!("duplicate method {m} (also methods[{first}])"),
            );
            ok = false;
            continue;
        }
        seen.insert(m.clone(), i);
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

/// `headers:` in a match: lower-cased token names, each with the exact value required.
fn match_headers(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<(String, String)>> {
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
        let Some((name, value)) = reader::header(cx, key, &lower, value, path, &mut seen) else {
            ok = false;
            continue;
        };
        out.push((name.to_string(), value.to_string()));
    }
    ok.then_some(out)
}

/// `upgrade: [websocket, ...]`: the protocols a client may switch to
/// through the route (`Upgrade` tokens, compared case-insensitively); an
/// empty list allows none. `h2c` is refused: an upgrade to it from
/// HTTP/1.1 is a known smuggling path, and the gateway never makes one.
fn upgrade(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<String>> {
    const EXPECTED: &str = "a list of protocols, e.g. [websocket]";
    let items = reader::list(cx, node, path, EXPECTED)?;
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(text) = reader::scalar(cx, item, p, "a protocol name") else {
            ok = false;
            continue;
        };
        // A protocol is a token, with an optional "/version".
        let valid = !text.is_empty()
            && text.split('/').count() <= 2
            && text.split('/').all(reader::is_token);
        if !valid {
            cx.at(
                item.pos,
                p,
                format_args!("bad protocol name {}", quote(text)),
            );
            ok = false;
        } else if text.eq_ignore_ascii_case("h2c") {
            cx.at(
                item.pos,
                p,
                "h2c is never upgraded to from HTTP/1.1 (a smuggling path); clients speak HTTP/2 with prior knowledge instead",
            );
            ok = false;
        } else if !out.iter().any(|o| o.eq_ignore_ascii_case(text)) {
            out.push(text.to_ascii_lowercase());
        }
    }
    ok.then_some(out)
}

/// Headers the gateway sets itself on a `respond` answer.
const FRAMING_HEADERS: &[&str] = &["content-length", "transfer-encoding"];

fn respond_action(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Action> {
    let f = fields(cx, node, path, "respond", RESPOND_KEYS)?;
    let mut ok = true;
    let mut status = 200u16;
    if let Some(n) = f.get("status") {
        match reader::int_in(cx, n, path.key("status"), 100, 599) {
            Some(s) => status = u16::try_from(s).unwrap_or(200),
            None => ok = false,
        }
    }
    let mut body = String::new();
    if let Some(n) = f.get("body") {
        match reader::string(cx, n, path.key("body")) {
            Some(b) => body = b.to_string(),
            None => ok = false,
        }
        if !body.is_empty() && (status < 200 || status == 204 || status == 304) {
            cx.at(
                n.pos,
                path.key("body"),
                format_args!("a {status} response cannot have a body"),
            );
            ok = false;
        }
    }
    let mut headers = Vec::new();
    if let Some(n) = f.get("headers") {
        let p = path.key("headers");
        let expected = "a mapping of header names to values, e.g. { content-type: text/plain }";
        if let Some(entries) = reader::free_map(cx, n, p, expected) {
            let mut seen: HashMap<String, Pos> = HashMap::with_capacity(entries.len());
            for (key, name, value) in entries {
                if FRAMING_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                    cx.at(
                        key.pos,
                        p,
                        format_args!("{} is set by the gateway, remove it", quote(name)),
                    );
                    ok = false;
                    continue;
                }
                match reader::header(cx, key, name, value, p, &mut seen) {
                    Some((name, value)) => headers.push((name.to_string(), value.to_string())),
                    None => ok = false,
                }
            }
        } else {
            ok = false;
        }
    }
    ok.then_some(Action::Respond {
        status,
        body,
        headers,
    })
}

/// Decodes `rewrite: { regex, replacement }`.
fn rewrite(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<crate::model::Rewrite> {
    let f = fields(cx, node, path, "rewrite", &["regex", "replacement"])?;
    let re = f.require(cx, path, "regex").and_then(|n| {
        let p = path.key("regex");
        let text = reader::string(cx, n, p)?;
        match regex::bytes::Regex::new(text) {
            Ok(_) => Some(text),
            Err(e) => {
                cx.at(n.pos, p, format_args!("invalid regex: {e}"));
                None
            }
        }
    });
    let replacement = f.require(cx, path, "replacement").and_then(|n| {
        let p = path.key("replacement");
        let text = reader::string(cx, n, p)?;
        // Literal text must be fit for a request line: no spaces or controls.
        if text
            .bytes()
            .any(|b| b <= b' ' || b == 0x7f || b == b'?' || b == b'#')
        {
            cx.at(
                n.pos,
                p,
                "a replacement cannot contain spaces, control characters, ? or #",
            );
            return None;
        }
        Some(text)
    });
    Some(crate::model::Rewrite {
        regex: re?.to_string(),
        replacement: replacement?.to_string(),
    })
}
