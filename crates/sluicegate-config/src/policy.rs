//! A route's header policies (`request_headers` and `response_headers`,
//! each `{ set, add, remove }`), its `cors`, and `ip` rules (per route and
//! global).

use std::collections::HashMap;

use crate::model::{Cidr, Cors, HeaderOps, IpRules, OriginMatch};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

pub(crate) const OPS_KEYS: &[&str] = &["set", "add", "remove"];

/// Headers a policy may not touch: framing and hop-by-hop headers, Host
/// and the X-Forwarded-* headers are the gateway's to write, and X-App-Id
/// is set by app-key auth.
const RESERVED: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "host",
    "x-app-id",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
];

/// Decodes one `{ set, add, remove }` mapping.
pub(crate) fn header_ops(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<HeaderOps> {
    let f = fields(cx, node, path, "header policy", OPS_KEYS)?;
    let mut ok = true;
    let mut out = HeaderOps::default();
    let reserved = |cx: &mut Cx, pos: Pos, p: Path<'_>, name: &str| {
        let lower = name.to_ascii_lowercase();
        if RESERVED.contains(&lower.as_str()) {
            cx.at(
                pos,
                p,
                format_args!(
                    "{} is managed by the gateway and cannot be changed here",
                    quote(name)
                ),
            );
            return true;
        }
        false
    };
    for (key, list) in [("set", &mut out.set), ("add", &mut out.add)] {
        let Some(n) = f.get(key) else { continue };
        let p = path.key(key);
        let expected = "a mapping of header names to values, e.g. { x-env: prod }";
        let Some(entries) = reader::free_map(cx, n, p, expected) else {
            ok = false;
            continue;
        };
        let mut seen: HashMap<String, Pos> = HashMap::new();
        for (k, name, value) in entries {
            if reserved(cx, k.pos, p, name) {
                ok = false;
                continue;
            }
            match reader::header(cx, k, name, value, p, &mut seen) {
                Some((name, value)) => list.push((name.to_string(), value.to_string())),
                None => ok = false,
            }
        }
    }
    if let Some(n) = f.get("remove") {
        let p = path.key("remove");
        for (i, item) in reader::list(cx, n, p, "a list of header names")
            .unwrap_or(&[])
            .iter()
            .enumerate()
        {
            let Some(name) = reader::string(cx, item, p.index(i)) else {
                ok = false;
                continue;
            };
            if !reader::is_token(name) {
                cx.at(
                    item.pos,
                    p.index(i),
                    format_args!("bad header name {}", quote(name)),
                );
                ok = false;
            } else if !name.eq_ignore_ascii_case("x-app-id")
                && reserved(cx, item.pos, p.index(i), name)
            {
                // X-App-Id may be named in `remove`: a client's is never
                // forwarded anyway, on any route.
                ok = false;
            } else {
                out.remove.push(name.to_ascii_lowercase());
            }
        }
    }
    ok.then_some(out)
}

pub(crate) const IP_KEYS: &[&str] = &["allow", "deny"];
pub(crate) const CORS_KEYS: &[&str] = &[
    "origins",
    "methods",
    "headers",
    "expose_headers",
    "credentials",
    "max_age",
];

/// Decodes a route's `cors`.
pub(crate) fn cors(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Cors> {
    let f = fields(cx, node, path, "cors", CORS_KEYS)?;
    let mut ok = true;
    let mut origins = Vec::new();
    if let Some(n) = f.require(cx, path, "origins") {
        let p = path.key("origins");
        for (i, item) in reader::list(cx, n, p, "a list of origins")
            .unwrap_or(&[])
            .iter()
            .enumerate()
        {
            match reader::string(cx, item, p.index(i)).map(origin) {
                Some(Ok(o)) => origins.push(o),
                Some(Err(why)) => {
                    cx.at(item.pos, p.index(i), why);
                    ok = false;
                }
                None => ok = false,
            }
        }
        if origins.is_empty() && ok {
            cx.at(n.pos, p, "list at least one origin");
            ok = false;
        }
    } else {
        ok = false;
    }
    let mut names = |key: &str, token_check: bool, upper: bool| -> Vec<String> {
        let mut out = Vec::new();
        let Some(n) = f.get(key) else { return out };
        let p = path.key(key);
        for (i, item) in reader::list(cx, n, p, "a list of names")
            .unwrap_or(&[])
            .iter()
            .enumerate()
        {
            let Some(t) = reader::string(cx, item, p.index(i)) else {
                ok = false;
                continue;
            };
            if token_check && !reader::is_token(t) {
                cx.at(item.pos, p.index(i), format_args!("bad name {}", quote(t)));
                ok = false;
                continue;
            }
            out.push(if upper {
                t.to_ascii_uppercase()
            } else {
                t.to_string()
            });
        }
        out
    };
    let mut methods = names("methods", true, true);
    let headers: Vec<String> = names("headers", true, false)
        .into_iter()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    let expose_headers = names("expose_headers", true, false);
    if f.get("methods").is_none() {
        methods = vec!["GET".into(), "HEAD".into(), "POST".into()];
    }
    let credentials = match f.get("credentials") {
        None => false,
        Some(n) => reader::boolean(cx, n, path.key("credentials")).unwrap_or_else(|| {
            ok = false;
            false
        }),
    };
    if credentials && origins.contains(&OriginMatch::Any) {
        let at = f.get("credentials").map_or(f.pos, |n| n.pos);
        cx.at(
            at,
            path.key("credentials"),
            "browsers refuse credentials with origin \"*\": list the origins",
        );
        ok = false;
    }
    let max_age = match f.get("max_age") {
        None => None,
        Some(n) => {
            let d = reader::duration(cx, n, path.key("max_age"));
            ok &= d.is_some();
            d
        }
    };
    ok.then_some(Cors {
        origins,
        methods,
        headers,
        expose_headers,
        credentials,
        max_age,
    })
}

/// Parses `*`, `scheme://host[:port]` or `scheme://*.suffix[:port]`.
fn origin(text: &str) -> Result<OriginMatch, String> {
    if text == "*" {
        return Ok(OriginMatch::Any);
    }
    let bad = || {
        format!(
            "expected an origin like https://shop.example.com, https://*.example.com or *, found {}",
            quote(text)
        )
    };
    let lower = text.to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://").ok_or_else(bad)?;
    if !matches!(scheme, "http" | "https") || rest.is_empty() {
        return Err(bad());
    }
    let host_ok = |h: &str| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':' | b'[' | b']'))
    };
    if let Some(suffix) = rest.strip_prefix("*.") {
        if !host_ok(suffix) || suffix.contains('*') {
            return Err(bad());
        }
        return Ok(OriginMatch::Suffix {
            scheme: format!("{scheme}://"),
            suffix: format!(".{suffix}"),
        });
    }
    if !host_ok(rest) {
        return Err(bad());
    }
    Ok(OriginMatch::Exact(lower))
}

/// Decodes `ip: { allow: [...], deny: [...] }`.
pub(crate) fn ip_rules(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<IpRules> {
    let f = fields(cx, node, path, "ip", IP_KEYS)?;
    let mut ok = true;
    let mut out = IpRules::default();
    for (key, list) in [("allow", &mut out.allow), ("deny", &mut out.deny)] {
        let Some(n) = f.get(key) else { continue };
        let p = path.key(key);
        for (i, item) in reader::list(cx, n, p, "a list of address blocks")
            .unwrap_or(&[])
            .iter()
            .enumerate()
        {
            match reader::string(cx, item, p.index(i)).map(Cidr::parse) {
                Some(Ok(c)) => list.push(c),
                Some(Err(why)) => {
                    cx.at(item.pos, p.index(i), why);
                    ok = false;
                }
                None => ok = false,
            }
        }
    }
    ok.then_some(out)
}
