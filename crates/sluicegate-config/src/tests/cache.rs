//! The `cache` store and a route's `cache`: what they decode to, and each
//! mistake named where it is.

use std::time::Duration;

use super::{errors, ok};
use crate::*;

fn config(store: &str, route: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
{store}services:
  - name: s
    endpoints: [\"127.0.0.1:9001\"]
routes:
  - name: r
    service: s
    cache: {route}
"
    )
}

const STORE: &str = "cache: { memory: 256MiB }\n";

#[test]
fn the_store_and_a_route_decode_with_their_defaults() {
    let c = ok(&config(STORE, "{}"));
    assert_eq!(
        c.cache,
        Some(CacheStore {
            memory: 256 << 20,
            max_object: 8 << 20
        })
    );
    assert_eq!(
        c.routes[0].cache,
        Some(RouteCache {
            key: vec![CacheKeyPart::Host, CacheKeyPart::Path, CacheKeyPart::Query],
            default_ttl: Duration::ZERO,
            stale_while_revalidate: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            tags_header: None,
        })
    );
    let route = "{ key: [path, header:Accept-Language], default_ttl: 0s, stale_while_revalidate: 10s, stale_if_error: 5m, tags_header: Cache-Tag }";
    let c = ok(&config(
        "cache: { memory: 2MiB, max_object: 64KiB }\n",
        route,
    ));
    assert_eq!(c.cache.unwrap().max_object, 64 << 10);
    let rc = c.routes[0].cache.clone().unwrap();
    assert_eq!(
        rc.key,
        [
            CacheKeyPart::Path,
            CacheKeyPart::Header("accept-language".into())
        ]
    );
    assert_eq!(rc.stale_while_revalidate, Duration::from_secs(10));
    assert_eq!(rc.stale_if_error, Duration::from_secs(300));
    assert_eq!(rc.tags_header.as_deref(), Some("cache-tag"));
    // A small store: the largest object is the store.
    let c = ok(&config("cache: { memory: 1MiB }\n", "{}"));
    assert_eq!(c.cache.unwrap().max_object, 1 << 20);
}

#[test]
fn store_mistakes_are_named() {
    assert_eq!(
        errors(&config("cache: { max_object: 1MiB }\n", "{}")),
        ["2:8: cache: missing required key \"memory\""]
    );
    assert_eq!(
        errors(&config("cache: { memory: 1KiB }\n", "{}")),
        ["2:18: cache.memory: must be at least 1048576 (1MiB), found 1024"]
    );
    assert_eq!(
        errors(&config("cache: { memory: 1MiB, max_object: 2MiB }\n", "{}")),
        ["2:36: cache.max_object: must be from 1 to memory (1048576), found 2097152"]
    );
    assert_eq!(
        errors(&config("", "{}")),
        ["6:3: routes[0].cache: needs the top-level cache (its memory) to store answers in"]
    );
}

#[test]
fn route_mistakes_are_named() {
    let e = errors(&config(STORE, "{ key: [host, cookie:x] }"));
    assert_eq!(
        e,
        ["9:26: routes[0].cache.key[1]: unknown key part \"cookie:x\" (expected a list of host, path, query, app or header:NAME)"]
    );
    let e = errors(&config(STORE, "{ key: [path, path] }"));
    assert_eq!(
        e,
        ["9:26: routes[0].cache.key[1]: duplicate key part \"path\" (first at 9:20)"]
    );
    let e = errors(&config(STORE, "{ key: [app] }"));
    assert_eq!(
        e,
        ["9:20: routes[0].cache.key[0]: app needs the route's auth (app_key, jwt or mtls) to know the app"]
    );
    let e = errors(&config(STORE, "{ key: [] }"));
    assert_eq!(
        e,
        ["9:19: routes[0].cache.key: must name at least one part"]
    );
    let e = errors(&config(STORE, "{ stale_if_error: 200h }"));
    assert_eq!(
        e,
        ["9:30: routes[0].cache.stale_if_error: at most 168h (7 days), found 720000s"]
    );
    let e = errors(&config(STORE, "{ tags_header: \"a b\" }"));
    assert_eq!(
        e,
        ["9:27: routes[0].cache.tags_header: bad header name \"a b\""]
    );
    let e = errors(&config(STORE, "{ ttl: 1s }"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("unknown key \"ttl\" in cache"), "{e:?}");
}

#[test]
fn cache_needs_a_service() {
    let text = "listen: 127.0.0.1:8080
cache: { memory: 8MiB }
routes:
  - name: r
    respond: { status: 200 }
    cache: {}
";
    assert_eq!(
        errors(text),
        ["6:12: routes[0].cache: only applies to routes with a service"]
    );
}

/// Through the admin API's document form: the keys round-trip, and a
/// mistake is named by its JSON path.
#[test]
fn json_documents_decode_and_name_the_path() {
    let doc =
        Document::from_yaml(&config(STORE, "{ key: [host, path], stale_if_error: 1m }")).unwrap();
    let json = doc.to_json();
    assert_eq!(json["routes"][0]["cache"]["key"][1], "path");
    let c = Document::from_json(&json).decode().unwrap();
    assert_eq!(c.routes[0].cache.as_ref().unwrap().key.len(), 2);
    assert_eq!(c.cache.as_ref().unwrap().memory, 256 << 20);
    let mut bad = json.clone();
    bad["routes"][0]["cache"]["key"][0] = serde_json::json!("nope");
    let problems = Document::from_json(&bad).decode().unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "$.routes[0].cache.key[0]");
    let mut bad = json.clone();
    bad["cache"]["memory"] = serde_json::json!("1KiB");
    let problems = Document::from_json(&bad).decode().unwrap_err();
    assert_eq!(problems[0].path, "$.cache.memory");
}
