//! A route's external authorization: `forward_auth` (an HTTP service
//! asked about every request) and `ext_authz` (Envoy's gRPC check).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::model::{AuthTarget, ExtAuthz, ForwardAuth, OnAuthError};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

pub(crate) const FORWARD_AUTH_KEYS: &[&str] = &[
    "url",
    "request_headers",
    "response_headers",
    "cache",
    "timeout",
    "on_error",
];

pub(crate) const EXT_AUTHZ_KEYS: &[&str] = &["service", "timeout", "on_error"];

/// The check's time when `timeout` is absent.
pub const DEFAULT_AUTH_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest a decision may be cached.
const MAX_CACHE: Duration = Duration::from_secs(24 * 3600);

/// Header names no list may hold: the connection's own, framing, and
/// those the gateway writes itself.
const RESERVED: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "content-length",
    "te",
    "trailer",
    "upgrade",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-forwarded-method",
    "x-forwarded-uri",
];

/// Decodes `forward_auth: { url, request_headers, response_headers,
/// cache, timeout, on_error }`.
pub(super) fn forward_auth(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
) -> Option<ForwardAuth> {
    let f = fields(cx, node, path, "forward_auth", FORWARD_AUTH_KEYS)?;
    let url = f.require(cx, path, "url").and_then(|n| {
        let p = path.key("url");
        let text = reader::string(cx, n, p)?;
        match parse_url(text, services) {
            Ok((target, rest)) => Some((text.to_string(), target, rest)),
            Err(why) => {
                cx.at(n.pos, p, format_args!("{why}, found {}", quote(text)));
                None
            }
        }
    });
    let request_headers = match f.get("request_headers") {
        None => Some(vec!["authorization".to_string(), "cookie".to_string()]),
        Some(n) => names(cx, n, path.key("request_headers")),
    };
    let response_headers = match f.get("response_headers") {
        None => Some(Vec::new()),
        Some(n) => names(cx, n, path.key("response_headers")),
    };
    let cache = match f.get("cache") {
        None => Some(Duration::ZERO),
        Some(n) if is_zero(n) => Some(Duration::ZERO),
        Some(n) => {
            let p = path.key("cache");
            reader::duration(cx, n, p).and_then(|d| {
                if d > MAX_CACHE {
                    cx.at(n.pos, p, format_args!("at most 24h, found {d:?}"));
                    None
                } else {
                    Some(d)
                }
            })
        }
    };
    let timeout = timeout(cx, &f, path);
    let on_error = on_error(cx, &f, path);
    let (url, target, rest) = url?;
    Some(ForwardAuth {
        url,
        target,
        path: rest,
        request_headers: request_headers?,
        response_headers: response_headers?,
        cache: cache?,
        timeout: timeout?,
        on_error: on_error?,
    })
}

/// Decodes `ext_authz: { service, timeout, on_error }`.
pub(super) fn ext_authz(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
) -> Option<ExtAuthz> {
    let f = fields(cx, node, path, "ext_authz", EXT_AUTHZ_KEYS)?;
    let service = f.require(cx, path, "service").and_then(|n| {
        let p = path.key("service");
        let name = reader::string(cx, n, p)?;
        if !services.contains_key(name) {
            cx.at(n.pos, p, format_args!("unknown service {}", quote(name)));
            return None;
        }
        Some(name.to_string())
    });
    let timeout = timeout(cx, &f, path);
    let on_error = on_error(cx, &f, path);
    Some(ExtAuthz {
        service: service?,
        timeout: timeout?,
        on_error: on_error?,
    })
}

fn timeout(cx: &mut Cx, f: &reader::Fields<'_>, path: Path<'_>) -> Option<Duration> {
    match f.get("timeout") {
        None => Some(DEFAULT_AUTH_TIMEOUT),
        Some(n) => reader::duration(cx, n, path.key("timeout")),
    }
}

fn on_error(cx: &mut Cx, f: &reader::Fields<'_>, path: Path<'_>) -> Option<OnAuthError> {
    match f.get("on_error") {
        None => Some(OnAuthError::Deny),
        Some(n) => match n.as_scalar() {
            Some("deny") => Some(OnAuthError::Deny),
            Some("allow") => Some(OnAuthError::Allow),
            _ => {
                cx.expected(n, path.key("on_error"), "deny or allow");
                None
            }
        },
    }
}

/// `0`, `0s`, `0ms`...: none.
fn is_zero(node: &Node) -> bool {
    node.as_scalar().is_some_and(|t| {
        let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == 'µ');
        !digits.is_empty() && digits.bytes().all(|b| b == b'0')
    })
}

/// A list of header names, lower-cased, each once, none reserved.
fn names(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<String>> {
    let items = reader::list(cx, node, path, "a list of header names")?;
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(name) = reader::string(cx, item, p) else {
            ok = false;
            continue;
        };
        let lower = name.to_ascii_lowercase();
        if !reader::is_token(name) {
            cx.at(item.pos, p, format_args!("bad header name {}", quote(name)));
            ok = false;
        } else if RESERVED.contains(&lower.as_str()) {
            cx.at(
                item.pos,
                p,
                format_args!("{} is the gateway's own to write", quote(name)),
            );
            ok = false;
        } else if out.contains(&lower) {
            cx.at(item.pos, p, format_args!("{} is listed twice", quote(name)));
            ok = false;
        } else {
            out.push(lower);
        }
    }
    ok.then_some(out)
}

/// Splits `http[s]://HOST[:PORT][/PATH][?QUERY]`: HOST an IP address (in
/// brackets for IPv6) or a service's name.
fn parse_url(
    text: &str,
    services: &HashMap<&str, Pos>,
) -> Result<(AuthTarget, String), &'static str> {
    const EXPECTED: &str =
        "expected http://HOST[:PORT]/PATH or https://..., HOST an IP address or a service's name";
    let (https, rest) = if let Some(r) = text.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = text.strip_prefix("https://") {
        (true, r)
    } else {
        return Err(EXPECTED);
    };
    let cut = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(cut);
    if tail.contains('#') || tail.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err("no fragment, spaces or control characters in the URL");
    }
    let tail = match tail.strip_prefix('?') {
        Some(q) => format!("/?{q}"),
        None if tail.is_empty() => "/".to_string(),
        None => tail.to_string(),
    };
    if authority.contains('@') {
        return Err("no user information in the URL");
    }
    // A service's name (never with a port: its endpoints have theirs).
    if services.contains_key(authority) {
        return Ok((AuthTarget::Service(authority.to_string()), tail));
    }
    let default_port = if https { 443 } else { 80 };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or(EXPECTED)?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| EXPECTED)?,
            None if after.is_empty() => default_port,
            None => return Err(EXPECTED),
        };
        (h, port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse::<u16>().map_err(|_| EXPECTED)?),
            None => (authority, default_port),
        }
    };
    let ip: IpAddr = host.parse().map_err(|_| {
        "the URL's host must be an IP address or the name of a service (for a host name, define a service and name it)"
    })?;
    if port == 0 {
        return Err(EXPECTED);
    }
    Ok((
        AuthTarget::Address {
            addr: SocketAddr::new(ip, port),
            https,
        },
        tail,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_an_address_or_a_service() {
        let mut services = HashMap::new();
        services.insert("authz", Pos { line: 1, col: 1 });
        let (t, p) = parse_url("http://127.0.0.1:9000/check?a=1", &services).unwrap();
        assert_eq!(
            t,
            AuthTarget::Address {
                addr: "127.0.0.1:9000".parse().unwrap(),
                https: false
            }
        );
        assert_eq!(p, "/check?a=1");
        let (t, p) = parse_url("https://[::1]", &services).unwrap();
        assert_eq!(
            t,
            AuthTarget::Address {
                addr: "[::1]:443".parse().unwrap(),
                https: true
            }
        );
        assert_eq!(p, "/");
        let (t, _) = parse_url("http://authz/v1/check", &services).unwrap();
        assert_eq!(t, AuthTarget::Service("authz".into()));
        assert_eq!(parse_url("http://authz?x", &services).unwrap().1, "/?x");
        for bad in [
            "ftp://127.0.0.1/",
            "http://auth.example.com/check",
            "http://127.0.0.1:99999/",
            "http://u@127.0.0.1/",
            "http://127.0.0.1/a b",
            "http://127.0.0.1/#f",
        ] {
            assert!(parse_url(bad, &services).is_err(), "{bad}");
        }
    }
}
