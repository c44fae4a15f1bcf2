//! The top-level `cache` mapping (the store: its memory bound and largest
//! object) and a route's `cache` mapping (key, freshness defaults, stale
//! windows, tags).

use std::collections::HashMap;
use std::time::Duration;

use crate::model::{CacheKeyPart, CacheStore, RouteCache};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

pub(crate) const CACHE_KEYS: &[&str] = &["memory", "max_object"];

pub(crate) const ROUTE_CACHE_KEYS: &[&str] = &[
    "key",
    "default_ttl",
    "stale_while_revalidate",
    "stale_if_error",
    "tags_header",
];

/// The smallest store: below this, a few objects would fill it.
const MIN_MEMORY: u64 = 1024 * 1024;
/// `max_object` when not given (never above `memory`).
const DEFAULT_MAX_OBJECT: u64 = 8 * 1024 * 1024;
/// The longest window a stale object may be served in.
const MAX_STALE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Decodes `cache: { memory, max_object }`: `memory` required, at least
/// 1MiB; `max_object` from 1 byte to `memory`.
pub(crate) fn store(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<CacheStore> {
    let f = fields(cx, node, path, "cache", CACHE_KEYS)?;
    let memory = f.require(cx, path, "memory").and_then(|n| {
        let p = path.key("memory");
        let m = reader::size(cx, n, p)?;
        if m < MIN_MEMORY {
            cx.at(
                n.pos,
                p,
                format_args!("must be at least {MIN_MEMORY} (1MiB), found {m}"),
            );
            return None;
        }
        Some(m)
    });
    let max_object = match f.get("max_object") {
        None => Some(None),
        Some(n) => {
            let p = path.key("max_object");
            reader::size(cx, n, p).and_then(|m| match memory {
                Some(memory) if m == 0 || m > memory => {
                    let msg = format_args!("must be from 1 to memory ({memory}), found {m}");
                    cx.at(n.pos, p, msg);
                    None
                }
                _ => Some(Some(m)),
            })
        }
    };
    let memory = memory?;
    Some(CacheStore {
        memory,
        max_object: max_object?.unwrap_or(DEFAULT_MAX_OBJECT.min(memory)),
    })
}

/// Decodes a route's `cache`. `authenticated`: the route's auth names an
/// app, which the key part `app` needs.
pub(crate) fn route_cache(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    authenticated: bool,
) -> Option<RouteCache> {
    let f = fields(cx, node, path, "cache", ROUTE_CACHE_KEYS)?;
    let key = match f.get("key") {
        None => Some(CacheKeyPart::default_key()),
        Some(n) => key(cx, n, path.key("key"), authenticated),
    };
    let mut window = |name: &str| -> Option<Duration> {
        let Some(n) = f.get(name) else {
            return Some(Duration::ZERO);
        };
        let p = path.key(name);
        if is_zero(n) {
            return Some(Duration::ZERO);
        }
        let d = reader::duration(cx, n, p)?;
        if d > MAX_STALE {
            cx.at(n.pos, p, format_args!("at most 168h (7 days), found {d:?}"));
            return None;
        }
        Some(d)
    };
    let default_ttl = window("default_ttl");
    let stale_while_revalidate = window("stale_while_revalidate");
    let stale_if_error = window("stale_if_error");
    let tags_header = match f.get("tags_header") {
        None => Some(None),
        Some(n) => {
            let p = path.key("tags_header");
            reader::string(cx, n, p).and_then(|name| {
                if reader::is_token(name) {
                    Some(Some(name.to_ascii_lowercase()))
                } else {
                    cx.at(n.pos, p, format_args!("bad header name {}", quote(name)));
                    None
                }
            })
        }
    };
    Some(RouteCache {
        key: key?,
        default_ttl: default_ttl?,
        stale_while_revalidate: stale_while_revalidate?,
        stale_if_error: stale_if_error?,
        tags_header: tags_header?,
    })
}

/// A zero duration, which these windows allow (`0`, `0s`, `0ms`...).
fn is_zero(node: &Node) -> bool {
    node.as_scalar().is_some_and(|t| {
        let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == 'µ');
        !digits.is_empty() && digits.bytes().all(|b| b == b'0')
    })
}

/// The key: a non-empty list of `host`, `path`, `query`, `app` and
/// `header:NAME`, each once.
fn key(cx: &mut Cx, node: &Node, path: Path<'_>, authenticated: bool) -> Option<Vec<CacheKeyPart>> {
    const EXPECTED: &str = "a list of host, path, query, app or header:NAME";
    let items = reader::list(cx, node, path, EXPECTED)?;
    if items.is_empty() {
        cx.at(node.pos, path, "must name at least one part");
        return None;
    }
    let mut parts = Vec::with_capacity(items.len());
    let mut seen: HashMap<String, Pos> = HashMap::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(text) = reader::scalar(cx, item, p, EXPECTED) else {
            ok = false;
            continue;
        };
        let part = match text {
            "host" => CacheKeyPart::Host,
            "path" => CacheKeyPart::Path,
            "query" => CacheKeyPart::Query,
            "app" if authenticated => CacheKeyPart::App,
            "app" => {
                let why = "app needs the route's auth (app_key, jwt or mtls) to know the app";
                cx.at(item.pos, p, why);
                ok = false;
                continue;
            }
            _ => match text.strip_prefix("header:") {
                Some(name) if reader::is_token(name) => {
                    CacheKeyPart::Header(name.to_ascii_lowercase())
                }
                _ => {
                    let msg =
                        format_args!("unknown key part {} (expected {EXPECTED})", quote(text));
                    cx.at(item.pos, p, msg);
                    ok = false;
                    continue;
                }
            },
        };
        let norm = text.to_ascii_lowercase();
        if let Some(first) = seen.get(&norm) {
            let msg = format_args!("duplicate key part {} (first at {first})", quote(text));
            cx.at(item.pos, p, msg);
            ok = false;
            continue;
        }
        seen.insert(norm, item.pos);
        parts.push(part);
    }
    ok.then_some(parts)
}
