//! The HTTP cache (`cache`) on the real binary against a real upstream
//! on loopback, whose requests are counted: a fresh answer is served
//! from memory (`Age`, `Cache-Status: sluicegate; hit`) until it expires;
//! `s-maxage` wins over `max-age`; `no-store`, `private`, `Set-Cookie`,
//! a `206` and a request with `Authorization` are not stored (but with
//! `public`); `Vary` keeps one object per value; a `HEAD` is answered
//! from a stored `GET`; a `POST` removes the key's object; a client's
//! `no-cache` or `max-age=0` goes upstream; a matching `If-None-Match`
//! gets a `304` from memory; HTTP/2 clients are answered from the cache
//! too; a request its route's auth refuses never gets a stored body; and
//! `stale_if_error` answers a 5xx or a dead upstream with the stale object;
//! `stale_while_revalidate` answers it at once while one refresh runs,
//! which revalidates an object with an `ETag` (a `304` keeps its body);
//! a stale object with validators is revalidated in the foreground, its
//! waiters answered from the refreshed object; and waiters of a fetch
//! are answered as it arrives (HTTP/1.1 and HTTP/2), cut when it is;
//! the request's `max-stale`, `min-fresh` and `only-if-cached` are read.

mod http_common;

use std::time::Duration;

use http_common::{service, wait_until, Gw};
use sluicegate_testkit::{
    free_port, http_get, http_request, KeepAliveClient, Proto, Response, TestUpstream,
};

const KEY: &str = "cache-app-key-0123456789";

fn start(up: &TestUpstream) -> Gw {
    start_with_admin(up, free_port())
}

fn start_with_admin(up: &TestUpstream, admin: u16) -> Gw {
    Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\n\
         cache: {{ memory: 8MiB, max_object: 64KiB }}\n\
         services:\n{}\
         routes:\n\
         \x20 - name: c\n    match: {{ path_prefix: /c }}\n    service: web\n    cache: {{ key: [host, path, query] }}\n\
         \x20 - name: k\n    match: {{ path_prefix: /k }}\n    service: web\n    auth: app_key\n    cache: {{ key: [host, path, query, app] }}\n\
         apps:\n  - id: shop\n    keys: [\"{KEY}\"]\n",
        service("web", &[up.addr()], "")
    ))
}

fn get(gw: &Gw, path: &str, headers: &[(&str, &str)]) -> Response {
    http_request(gw.addr(), "GET", path, headers, b"")
}

fn status_of(r: &Response) -> &str {
    r.header("cache-status").unwrap_or("")
}

const HIT: &str = "sluicegate; hit";
const STORED: &str = "sluicegate; fwd=miss; stored";

#[test]
fn a_fresh_answer_is_served_from_memory_until_it_expires() {
    let up = TestUpstream::start();
    let gw = start(&up);
    let path = "/c/fresh?size=100&header=cache-control:max-age=1";
    let first = get(&gw, path, &[]);
    assert_eq!(first.status, 200);
    assert_eq!(status_of(&first), STORED);
    assert_eq!(up.requests_seen(), 1);
    let second = get(&gw, path, &[]);
    assert_eq!(second.status, 200);
    assert_eq!(status_of(&second), HIT);
    assert_eq!(second.body, first.body);
    assert_eq!(second.header("cache-control"), Some("max-age=1"));
    let age: u64 = second.header("age").expect("Age").parse().unwrap();
    assert!(age <= 1, "age {age}");
    assert_eq!(up.requests_seen(), 1, "the hit did not go upstream");
    // Past its second it is stale: the next request goes upstream and
    // stores the answer anew.
    let mut last = String::new();
    let expired = wait_until(Duration::from_secs(5), || {
        let r = get(&gw, path, &[]);
        last = status_of(&r).to_string();
        last != HIT
    });
    assert!(expired, "still a hit after 5 s");
    assert_eq!(last, "sluicegate; fwd=stale; stored");
    assert_eq!(up.requests_seen(), 2);
    assert_eq!(status_of(&get(&gw, path, &[])), HIT);
    assert_eq!(up.requests_seen(), 2);

    // s-maxage wins over max-age for a shared cache.
    let path = "/c/shared?header=cache-control:max-age=0,s-maxage=60";
    assert_eq!(status_of(&get(&gw, path, &[])), STORED);
    assert_eq!(status_of(&get(&gw, path, &[])), HIT);
    assert_eq!(up.requests_seen(), 3);
}

#[test]
fn answers_that_must_not_be_stored_are_not() {
    let up = TestUpstream::start();
    let admin = free_port();
    let gw = start_with_admin(&up, admin);
    let cases = [
        ("/c/ns?header=cache-control:no-store,max-age=60", "no-store"),
        ("/c/pv?header=cache-control:private,max-age=60", "private"),
        (
            "/c/ck?header=cache-control:max-age=60&header=set-cookie:a=b",
            "set-cookie",
        ),
        ("/c/pt?status=206&header=cache-control:max-age=60", "status"),
        ("/c/none", "no-freshness"),
    ];
    for (path, why) in cases {
        let before = up.requests_seen();
        for _ in 0..2 {
            let r = get(&gw, path, &[]);
            assert_eq!(
                status_of(&r),
                format!("sluicegate; fwd=miss; detail={why}"),
                "{path}"
            );
        }
        assert_eq!(up.requests_seen(), before + 2, "{path}");
    }
    // A request with Authorization: not stored, unless the answer says
    // it may be (public).
    let auth = [("Authorization", "Bearer x")];
    let path = "/c/auth?header=cache-control:max-age=60";
    let r = get(&gw, path, &auth);
    assert_eq!(status_of(&r), "sluicegate; fwd=miss; detail=authorization");
    let path = "/c/pub?header=cache-control:public,max-age=60";
    assert_eq!(status_of(&get(&gw, path, &auth)), STORED);
    assert_eq!(status_of(&get(&gw, path, &auth)), HIT);

    // The route's counters: 12 misses, 1 store, 1 hit.
    let metric = |series: &str| -> Option<u64> {
        let text = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
    };
    let route = "{route=\"c\"}";
    let counted = wait_until(Duration::from_secs(5), || {
        metric(&format!("sluicegate_cache_misses_total{route}")) == Some(12)
    });
    assert!(
        counted,
        "misses: {:?}",
        metric(&format!("sluicegate_cache_misses_total{route}"))
    );
    assert_eq!(
        metric(&format!("sluicegate_cache_stores_total{route}")),
        Some(1)
    );
    assert_eq!(
        metric(&format!("sluicegate_cache_hits_total{route}")),
        Some(1)
    );
}

#[test]
fn vary_head_post_and_the_client_s_own_directives() {
    let up = TestUpstream::start();
    let gw = start(&up);
    // Vary: one object per value of the field.
    let path = "/c/vary?header=cache-control:max-age=60&header=vary:accept-language";
    let fr = [("Accept-Language", "fr")];
    let de = [("Accept-Language", "de")];
    assert_eq!(status_of(&get(&gw, path, &fr)), STORED);
    assert_eq!(status_of(&get(&gw, path, &de)), STORED);
    assert_eq!(status_of(&get(&gw, path, &fr)), HIT);
    assert_eq!(status_of(&get(&gw, path, &de)), HIT);
    assert_eq!(up.requests_seen(), 2);

    // HEAD from a stored GET: its length, no body.
    let path = "/c/head?size=300&header=cache-control:max-age=60";
    assert_eq!(get(&gw, path, &[]).body.len(), 300);
    let head = http_request(gw.addr(), "HEAD", path, &[], b"");
    assert_eq!(status_of(&head), HIT);
    assert_eq!(head.header("content-length"), Some("300"));
    assert!(head.body.is_empty());
    assert_eq!(up.requests_seen(), 3);

    // A POST to the key removes its object.
    let posted = http_request(gw.addr(), "POST", path, &[], b"new");
    assert_eq!(posted.status, 200);
    assert_eq!(up.requests_seen(), 4);
    assert_eq!(status_of(&get(&gw, path, &[])), STORED);
    assert_eq!(up.requests_seen(), 5);

    // The client's no-cache and max-age=0 go upstream (and refresh it).
    for cc in ["no-cache", "max-age=0"] {
        let r = get(&gw, path, &[("Cache-Control", cc)]);
        assert_eq!(status_of(&r), "sluicegate; fwd=request; stored", "{cc}");
    }
    assert_eq!(up.requests_seen(), 7);
    assert_eq!(status_of(&get(&gw, path, &[])), HIT);
    assert_eq!(up.requests_seen(), 7);
}

#[test]
fn conditional_requests_http2_clients_and_auth() {
    let up = TestUpstream::start();
    let gw = start(&up);
    // If-None-Match against a fresh stored object: 304 from memory.
    let path = "/c/etag?header=cache-control:max-age=60&header=etag:%22v1%22";
    assert_eq!(status_of(&get(&gw, path, &[])), STORED);
    let r = get(&gw, path, &[("If-None-Match", "\"v0\", W/\"v1\"")]);
    assert_eq!(r.status, 304);
    assert_eq!(status_of(&r), HIT);
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert!(r.body.is_empty());
    let r = get(&gw, path, &[("If-None-Match", "\"v2\"")]);
    assert_eq!((r.status, status_of(&r)), (200, HIT));
    assert_eq!(up.requests_seen(), 1);

    // HTTP/2 clients: a miss stored, then hits, the same body to both
    // protocols.
    let path = "/c/h2?size=2000&header=cache-control:max-age=60";
    let miss = Proto::H2c.get(gw.addr(), path, &[]);
    assert_eq!((miss.status, status_of(&miss)), (200, STORED));
    let hit = Proto::H2c.get(gw.addr(), path, &[]);
    assert_eq!((hit.status, status_of(&hit)), (200, HIT));
    assert_eq!(hit.body, miss.body);
    assert_eq!(hit.body.len(), 2000);
    let h1 = get(&gw, path, &[]);
    assert_eq!((status_of(&h1), h1.body.clone()), (HIT, miss.body));
    assert_eq!(up.requests_seen(), 2);

    // The route's auth runs first: no key, no stored body.
    let path = "/k/a?size=50&header=cache-control:public,max-age=60";
    let keyed = [("X-App-Key", KEY)];
    assert_eq!(status_of(&get(&gw, path, &keyed)), STORED);
    assert_eq!(status_of(&get(&gw, path, &keyed)), HIT);
    let refused = get(&gw, path, &[]);
    assert_eq!(refused.status, 401);
    assert!(refused.header("cache-status").is_none());
    assert_ne!(refused.body.len(), 50);
    assert_eq!(up.requests_seen(), 3);
}

#[test]
fn concurrent_misses_for_one_key_make_one_upstream_request() {
    let up = TestUpstream::start();
    let gw = start(&up);
    // 1,000 requests over 250 keep-alive connections, all started at
    // once, against an upstream that takes 500 ms.
    let path = "/c/slow?delay=500&size=1000&header=cache-control:max-age=60";
    let (conns, each) = (250, 4);
    let barrier = std::sync::Barrier::new(conns);
    let statuses: Vec<Vec<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..conns)
            .map(|_| {
                s.spawn(|| {
                    let mut c = KeepAliveClient::connect(gw.addr()).expect("connect");
                    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    barrier.wait();
                    (0..each)
                        .map(|_| {
                            let r = c.get(path).expect("answer");
                            assert_eq!((r.status, r.body.len()), (200, 1000));
                            status_of(&r).to_string()
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<&str> = statuses.iter().flatten().map(String::as_str).collect();
    assert_eq!(all.len(), 1000);
    assert_eq!(up.requests_seen(), 1, "one fetch for the key");
    assert_eq!(all.iter().filter(|s| **s == STORED).count(), 1);
    let coalesced = all
        .iter()
        .filter(|s| **s == "sluicegate; hit; detail=coalesced")
        .count();
    assert!(coalesced > 0, "none waited for the fetch");
    assert_eq!(all.iter().filter(|s| **s == HIT).count(), 999 - coalesced);
}

/// Routes whose key leaves the query out (so that the test upstream's
/// `status=` or `delay=` change its answer on the same key), with
/// `stale_if_error` (`s`), `stale_while_revalidate` (`w`), neither (`n`).
fn start_stale(up_addr: std::net::SocketAddr, admin: u16) -> Gw {
    Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\n\
         cache: {{ memory: 8MiB, max_object: 64KiB }}\n\
         services:\n{}\
         routes:\n\
         \x20 - name: s\n    match: {{ path_prefix: /s }}\n    service: web\n    cache: {{ key: [host, path], stale_if_error: 60s }}\n\
         \x20 - name: n\n    match: {{ path_prefix: /n }}\n    service: web\n    cache: {{ key: [host, path] }}\n\
         \x20 - name: w\n    match: {{ path_prefix: /w }}\n    service: web\n    cache: {{ key: [host, path], stale_while_revalidate: 60s }}\n",
        service("web", &[up_addr], "")
    ))
}

#[test]
fn stale_if_error_answers_a_5xx_or_a_dead_upstream_with_the_stale_object() {
    let up = TestUpstream::start();
    let admin = free_port();
    let gw = start_stale(up.addr(), admin);
    // Stored, fresh for a second.
    let ok = "?size=100&header=cache-control:max-age=1";
    let first = get(&gw, &format!("/s/a{ok}"), &[]);
    assert_eq!(status_of(&first), STORED);
    let second = get(&gw, &format!("/s/a{ok}"), &[]);
    assert_eq!(status_of(&second), HIT);
    // Stale, and the upstream answers 503: the stale object answers.
    let mut last = (0, String::new());
    let served = wait_until(Duration::from_secs(5), || {
        let r = get(&gw, "/s/a?status=503", &[]);
        last = (r.status, status_of(&r).to_string());
        last.1 != HIT
    });
    assert!(served, "still a hit after 5 s");
    assert_eq!(last, (200, "sluicegate; fwd=stale; fwd-status=503".into()));
    let r = get(&gw, "/s/a?status=503", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, first.body);
    let age: u64 = r.header("age").expect("Age").parse().unwrap();
    assert!(age >= 1, "age {age}");
    // A route without stale_if_error relays the 5xx.
    assert_eq!(status_of(&get(&gw, &format!("/n/a{ok}"), &[])), STORED);
    let relayed = wait_until(Duration::from_secs(5), || {
        get(&gw, "/n/a?status=503", &[]).status == 503
    });
    assert!(relayed, "the 503 was not relayed");
    // A 2xx still replaces the stale object.
    let fresh = get(&gw, &format!("/s/a{ok}"), &[]);
    assert_eq!(status_of(&fresh), "sluicegate; fwd=stale; stored");

    // The upstream gone (connections refused): the stale object answers
    // with the error's status (502, or 503 once the endpoint is out of
    // rotation), once it is stale.
    drop(up);
    let mut last = (0, String::new());
    let served = wait_until(Duration::from_secs(5), || {
        let r = get(&gw, "/s/a", &[]);
        last = (r.status, status_of(&r).to_string());
        last.1 != HIT
    });
    assert!(served, "still a hit after 5 s");
    assert_eq!(last.0, 200, "{last:?}");
    assert!(
        last.1 == "sluicegate; fwd=stale; fwd-status=502"
            || last.1 == "sluicegate; fwd=stale; fwd-status=503",
        "{last:?}"
    );
    assert_eq!(r_body(&gw, "/s/a"), fresh.body);
    // Without stale_if_error: the error.
    assert!(get(&gw, "/n/a", &[]).status >= 502);
    let metrics = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("sluicegate_cache_stale_total{route=\"s\"}"))
        .unwrap_or_default()
        .to_string();
    let n: u64 = line.rsplit(' ').next().unwrap_or("0").parse().unwrap_or(0);
    assert_eq!(n, 4, "{line}");
}

fn r_body(gw: &Gw, path: &str) -> Vec<u8> {
    get(gw, path, &[]).body
}

#[test]
fn stale_while_revalidate_answers_at_once_and_refreshes_once() {
    let up = TestUpstream::start();
    let admin = free_port();
    let gw = start_stale(up.addr(), admin);
    let first = get(&gw, "/w/a?size=100&header=cache-control:max-age=1", &[]);
    assert_eq!(status_of(&first), STORED);
    assert_eq!(up.requests_seen(), 1);
    // Once stale, each request is answered from it at once; the first
    // starts the refresh, whose upstream takes 3 s and answers a new
    // object, fresh for a minute.
    let slow = "/w/a?size=100&delay=3000&header=cache-control:max-age=60&header=x-v:2";
    let mut last = String::new();
    let stale = wait_until(Duration::from_secs(5), || {
        let r = get(&gw, slow, &[]);
        last = status_of(&r).to_string();
        assert!(r.header("x-v").is_none(), "the new object came early");
        last != HIT
    });
    assert!(stale, "still a hit after 5 s");
    assert_eq!(last, "sluicegate; hit; detail=stale");
    let started = std::time::Instant::now();
    for _ in 0..5 {
        let r = get(&gw, slow, &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, first.body);
        assert_eq!(status_of(&r), "sluicegate; hit; detail=stale");
        assert!(r.header("age").expect("Age").parse::<u64>().unwrap() >= 1);
    }
    // Answered without waiting for the refresh's 3 s.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The refresh stores the new object: the next requests hit it.
    let mut last = String::new();
    let refreshed = wait_until(Duration::from_secs(10), || {
        let r = get(&gw, slow, &[]);
        last = status_of(&r).to_string();
        r.header("x-v") == Some("2")
    });
    assert!(refreshed, "not refreshed: {last}");
    assert_eq!(last, HIT);
    assert_eq!(up.requests_seen(), 2, "one refresh for every stale answer");
    let refresh = up.last_request().expect("the refresh");
    assert!(refresh.header("x-forwarded-for").is_some());
}

#[test]
fn a_refresh_revalidates_with_the_validators_and_a_304_keeps_the_body() {
    let up = TestUpstream::start();
    let admin_port = free_port();
    let gw = start_stale(up.addr(), admin_port);
    let stored = "/w/r?size=300&header=cache-control:max-age=1&header=etag:%22v1%22";
    let first = get(&gw, stored, &[]);
    assert_eq!(status_of(&first), STORED);
    assert_eq!(first.body.len(), 300);
    // Stale: answered from memory, while the refresh asks with the
    // object's ETag and gets a 304 (fresh for a minute, a new field).
    let not_modified = "/w/r?status=304&header=cache-control:max-age=60&header=x-v:2";
    let mut last = String::new();
    let stale = wait_until(Duration::from_secs(5), || {
        let r = get(&gw, not_modified, &[]);
        assert_eq!(r.status, 200);
        last = status_of(&r).to_string();
        last != HIT
    });
    assert!(stale, "still a hit after 5 s");
    assert_eq!(last, "sluicegate; hit; detail=stale");
    let mut last = String::new();
    let revalidated = wait_until(Duration::from_secs(10), || {
        let r = get(&gw, not_modified, &[]);
        last = status_of(&r).to_string();
        r.header("x-v") == Some("2")
    });
    assert!(revalidated, "not revalidated: {last}");
    let r = get(&gw, not_modified, &[]);
    assert_eq!((r.status, status_of(&r)), (200, HIT));
    assert_eq!(r.body, first.body, "the body kept");
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert_eq!(r.header("cache-control"), Some("max-age=60"));
    assert_eq!(up.requests_seen(), 2);
    let refresh = up.last_request().expect("the refresh");
    assert_eq!(refresh.header("if-none-match"), Some("\"v1\""));
    // Counted as a revalidation (and a store).
    assert_eq!(
        metric(
            admin_port,
            "sluicegate_cache_revalidated_total{route=\"w\"}"
        ),
        Some(1)
    );
    assert_eq!(
        metric(admin_port, "sluicegate_cache_stores_total{route=\"w\"}"),
        Some(2)
    );
}

/// A sample of the gateway's `/metrics` (`series` with its labels).
fn metric(admin: u16, series: &str) -> Option<u64> {
    let text = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn the_memory_bound_holds_with_ten_times_its_size_in_keys() {
    // 1 MiB of store, 10 MiB of distinct answers (4 KiB bodies):
    // the store never holds more than its bound, evicts, and the keys
    // just read still hit.
    let up = TestUpstream::start();
    let port = free_port();
    let gw = Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{port}\" }}\n\
         cache: {{ memory: 1MiB, max_object: 16KiB }}\n\
         services:\n{}\
         routes:\n\
         \x20 - name: m\n    match: {{ path_prefix: /m }}\n    service: web\n    cache: {{ key: [path, query] }}\n",
        service("web", &[up.addr()], "")
    ));
    let bound = 1024 * 1024;
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let path = |i: usize| format!("/m/{i}?size=4096&header=cache-control:max-age=600");
    let keys = 10 * bound / 4096;
    for i in 0..keys {
        let r = client.get(&path(i)).unwrap();
        assert_eq!((r.status, r.body.len()), (200, 4096));
        assert_eq!(status_of(&r), STORED, "{i}");
        if i % 256 == 255 {
            let v = json(&http_get(("127.0.0.1", port), "/cache", &[]));
            let bytes = v["bytes"].as_u64().unwrap();
            assert!(bytes <= bound as u64, "{bytes} bytes held after {i} keys");
        }
    }
    let v = json(&http_get(("127.0.0.1", port), "/cache", &[]));
    let (bytes, objects) = (v["bytes"].as_u64().unwrap(), v["objects"].as_u64().unwrap());
    let evictions = v["evictions"].as_u64().unwrap();
    eprintln!(
        "{keys} keys of 4 KiB in 1 MiB: {bytes} bytes, {objects} objects, {evictions} evictions"
    );
    assert!(bytes <= bound as u64 && bytes > bound as u64 / 2, "{bytes}");
    assert_eq!(evictions + objects, keys as u64);
    // The store's families in /metrics say the same.
    assert_eq!(
        metric(port, "sluicegate_cache_memory_bytes"),
        Some(bound as u64)
    );
    assert_eq!(metric(port, "sluicegate_cache_objects"), Some(objects));
    assert_eq!(metric(port, "sluicegate_cache_bytes"), Some(bytes));
    assert_eq!(
        metric(port, "sluicegate_cache_evictions_total"),
        Some(evictions)
    );
    // The last keys stored are still held.
    let seen = up.requests_seen();
    for i in keys - 50..keys {
        let r = client.get(&path(i)).unwrap();
        assert_eq!(status_of(&r), HIT, "{i}");
    }
    assert_eq!(up.requests_seen(), seen);
    // An early one was evicted.
    assert_eq!(status_of(&client.get(&path(0)).unwrap()), STORED);
}

/// Gets `path` until its answer is no longer a hit (the object went
/// stale), within 5 s; that answer.
fn until_stale(gw: &Gw, path: &str, headers: &[(&str, &str)]) -> Response {
    let mut last = None;
    let stale = wait_until(Duration::from_secs(5), || {
        let r = get(gw, path, headers);
        let hit = status_of(&r) == HIT;
        last = Some(r);
        !hit
    });
    assert!(stale, "still a hit after 5 s");
    last.expect("an answer")
}

#[test]
fn a_stale_object_is_revalidated_in_the_foreground() {
    let up = TestUpstream::start();
    let gw = start_stale(up.addr(), free_port());
    let stored = "/n/v?size=300&header=cache-control:max-age=1&header=etag:%22v1%22";
    let first = get(&gw, stored, &[]);
    assert_eq!(status_of(&first), STORED);
    // Stale: the request goes upstream with the object's ETag (not the
    // client's own tag); the 304 (fresh for a minute, a new field)
    // refreshes the object, whose body answers the client.
    let not_modified = "/n/v?status=304&header=cache-control:max-age=60&header=x-v:2";
    let other = [("If-None-Match", "\"v0\"")];
    let r = until_stale(&gw, not_modified, &other);
    assert_eq!(
        (r.status, status_of(&r)),
        (200, "sluicegate; fwd=stale; fwd-status=304")
    );
    assert_eq!(r.body, first.body, "the body kept");
    assert_eq!(r.header("x-v"), Some("2"));
    assert_eq!(r.header("etag"), Some("\"v1\""));
    let sent = up.last_request().expect("the revalidation");
    assert_eq!(sent.header("if-none-match"), Some("\"v1\""));
    assert_eq!(up.requests_seen(), 2);
    // Refreshed for a minute: hits, with the 304's fields.
    let r = get(&gw, not_modified, &[]);
    assert_eq!(
        (status_of(&r), r.header("cache-control")),
        (HIT, Some("max-age=60"))
    );
    assert_eq!(r.body, first.body);
    // The client's no-cache revalidates it too; its own matching tag
    // gets a 304.
    let mine = [("Cache-Control", "no-cache"), ("If-None-Match", "\"v1\"")];
    let r = get(&gw, not_modified, &mine);
    assert_eq!(
        (r.status, status_of(&r)),
        (304, "sluicegate; fwd=request; fwd-status=304")
    );
    assert!(r.body.is_empty());
    assert_eq!(up.requests_seen(), 3);

    // Last-Modified: If-Modified-Since; a 200 replaces the object.
    let lm = "Sun, 06 Nov 1994 08:49:37 GMT";
    let encoded = lm.replace(' ', "%20");
    let stored =
        format!("/n/lm?size=100&header=cache-control:max-age=1&header=last-modified:{encoded}");
    assert_eq!(status_of(&get(&gw, &stored, &[])), STORED);
    let changed = "/n/lm?size=200&header=cache-control:max-age=60&header=x-v:3";
    let r = until_stale(&gw, changed, &[]);
    assert_eq!(
        (r.status, status_of(&r)),
        (200, "sluicegate; fwd=stale; fwd-status=200; stored")
    );
    assert_eq!(r.body.len(), 200);
    let sent = up.last_request().expect("the revalidation");
    assert_eq!(sent.header("if-modified-since"), Some(lm));
    let r = get(&gw, changed, &[]);
    assert_eq!((status_of(&r), r.body.len()), (HIT, 200));

    // Stored with no-cache: revalidated before each use.
    let path = "/n/nc?size=50&header=cache-control:no-cache,max-age=60&header=etag:%22n%22";
    assert_eq!(status_of(&get(&gw, path, &[])), STORED);
    let before = up.requests_seen();
    let again = "/n/nc?status=304&header=cache-control:no-cache,max-age=60";
    for _ in 0..2 {
        let r = get(&gw, again, &[]);
        assert_eq!(
            (r.status, status_of(&r), r.body.len()),
            (200, "sluicegate; fwd=stale; fwd-status=304", 50)
        );
    }
    assert_eq!(up.requests_seen(), before + 2);
}

#[test]
fn the_waiters_of_a_revalidation_get_the_refreshed_object() {
    let up = TestUpstream::start();
    let gw = start_stale(up.addr(), free_port());
    let stored = "/n/w?size=500&header=cache-control:max-age=1&header=etag:%22w%22";
    let first = get(&gw, stored, &[]);
    assert_eq!(status_of(&first), STORED);
    // Stale after its second (a HEAD goes upstream for a stale object
    // without refreshing it).
    let stale = wait_until(Duration::from_secs(5), || {
        status_of(&http_request(gw.addr(), "HEAD", stored, &[], b"")) != HIT
    });
    assert!(stale, "still a hit after 5 s");
    // 20 requests at once: one revalidates (its 304 takes 600 ms), the
    // others wait for it and get the refreshed object.
    let before = up.requests_seen();
    let slow = "/n/w?status=304&delay=600&header=cache-control:max-age=60&header=x-v:2";
    let barrier = std::sync::Barrier::new(20);
    let answers: Vec<Response> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    get(&gw, slow, &[])
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(up.requests_seen(), before + 1, "one revalidation");
    let mut statuses: Vec<&str> = answers.iter().map(status_of).collect();
    statuses.sort_unstable();
    statuses.dedup();
    for r in &answers {
        assert_eq!(
            (r.status, r.header("x-v")),
            (200, Some("2")),
            "{statuses:?}"
        );
        assert_eq!(r.body, first.body);
    }
    let revalidated = "sluicegate; fwd=stale; fwd-status=304";
    let one = answers
        .iter()
        .filter(|r| status_of(r) == revalidated)
        .count();
    assert_eq!(one, 1, "{statuses:?}");
    let coalesced = answers
        .iter()
        .filter(|r| status_of(r) == "sluicegate; hit; detail=coalesced")
        .count();
    assert!(coalesced > 0, "{statuses:?}");
}

#[test]
fn the_request_s_max_stale_min_fresh_and_only_if_cached() {
    let up = TestUpstream::start();
    let gw = start_stale(up.addr(), free_port());
    let head_until_stale = |path: &str| {
        let stale = wait_until(Duration::from_secs(5), || {
            status_of(&http_request(gw.addr(), "HEAD", path, &[], b"")) != HIT
        });
        assert!(stale, "{path}: still a hit after 5 s");
    };
    let stored = "/n/ms?size=10&header=cache-control:max-age=1";
    assert_eq!(status_of(&get(&gw, stored, &[])), STORED);
    let must = "/n/mr?size=10&header=cache-control:max-age=1,must-revalidate";
    assert_eq!(status_of(&get(&gw, must, &[])), STORED);
    head_until_stale(stored);
    head_until_stale(must);
    let before = up.requests_seen();
    // max-stale: the stale object answers, with or without a bound.
    for cc in ["max-stale", "max-stale=3600", "only-if-cached, max-stale"] {
        let r = get(&gw, stored, &[("Cache-Control", cc)]);
        assert_eq!(
            (r.status, status_of(&r)),
            (200, "sluicegate; hit; detail=stale"),
            "{cc}"
        );
        assert_eq!(r.body.len(), 10);
    }
    // only-if-cached: a 504 for what is stale or not stored, never
    // upstream.
    for path in [stored, "/n/nothing-here"] {
        let r = get(&gw, path, &[("Cache-Control", "only-if-cached")]);
        assert_eq!(
            (r.status, status_of(&r)),
            (504, "sluicegate; detail=only-if-cached"),
            "{path}"
        );
    }
    assert_eq!(up.requests_seen(), before, "none went upstream");
    // must-revalidate: never served stale, whatever the request takes.
    let r = get(&gw, must, &[("Cache-Control", "max-stale")]);
    assert_eq!(status_of(&r), "sluicegate; fwd=stale; stored");
    assert_eq!(up.requests_seen(), before + 1);
    // min-fresh: a fresh object that will not stay fresh long enough
    // goes upstream.
    let minute = "/n/mf?size=10&header=cache-control:max-age=60";
    assert_eq!(status_of(&get(&gw, minute, &[])), STORED);
    let r = get(&gw, minute, &[("Cache-Control", "min-fresh=10")]);
    assert_eq!(status_of(&r), HIT);
    let r = get(&gw, minute, &[("Cache-Control", "min-fresh=3600")]);
    assert_eq!(status_of(&r), "sluicegate; fwd=request; stored");
    assert_eq!(up.requests_seen(), before + 3);
}

/// An answer read as it came: its status and `Cache-Status`, when its
/// first body byte came and when it ended, its body, and whether it
/// ended whole (its length, or its last chunk or stream end).
#[derive(Debug)]
struct Timed {
    status: u16,
    cache_status: String,
    first_byte: Option<std::time::Instant>,
    ended: std::time::Instant,
    body: Vec<u8>,
    whole: bool,
}

const TIMED_MAX: Duration = Duration::from_secs(10);

/// A `GET` over HTTP/1.1 (the connection closing after it), read as it
/// comes.
fn h1_timed(addr: std::net::SocketAddr, path: &str) -> Timed {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(TIMED_MAX)).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n");
    c.write_all(req.as_bytes()).unwrap();
    let (mut raw, mut buf) = (Vec::new(), [0u8; 16384]);
    let mut head_end = None;
    let mut first_byte = None;
    loop {
        let n = c.read(&mut buf).unwrap_or(0);
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
        if head_end.is_none() {
            head_end = raw.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
        }
        if head_end.is_some_and(|h| raw.len() > h) && first_byte.is_none() {
            first_byte = Some(std::time::Instant::now());
        }
    }
    let ended = std::time::Instant::now();
    let h = head_end.expect("a head");
    let head = String::from_utf8_lossy(&raw[..h]).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    let field = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    };
    let rest = &raw[h..];
    let (body, whole) = if field("transfer-encoding").as_deref() == Some("chunked") {
        dechunk(rest)
    } else {
        let n: usize = field("content-length").expect("a length").parse().unwrap();
        (rest.to_vec(), rest.len() == n)
    };
    Timed {
        status,
        cache_status: field("cache-status").unwrap_or_default(),
        first_byte,
        ended,
        body,
        whole,
    }
}

/// A chunked body's data, and whether its last chunk came.
fn dechunk(mut rest: &[u8]) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (body, false);
        };
        let size = std::str::from_utf8(&rest[..eol]).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return (body, rest[eol..].starts_with(b"\r\n\r\n"));
        }
        let Some(data) = rest.get(eol + 2..eol + 2 + n) else {
            return (body, false);
        };
        body.extend_from_slice(data);
        rest = rest.get(eol + 4 + n..).unwrap_or_default();
    }
}

/// A `GET` over HTTP/2 (prior knowledge), read as it comes; a reset
/// stream ends it not whole.
fn h2_timed(addr: std::net::SocketAddr, path: &str) -> Timed {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let req = http::Request::get(format!("http://cache.test{path}"))
            .body(())
            .unwrap();
        let (res, _) = client.send_request(req, true).unwrap();
        let res = tokio::time::timeout(TIMED_MAX, res).await.unwrap().unwrap();
        let (parts, mut body) = res.into_parts();
        let (mut data, mut first_byte, mut whole) = (Vec::new(), None, true);
        while let Some(chunk) = tokio::time::timeout(TIMED_MAX, body.data()).await.unwrap() {
            let Ok(chunk) = chunk else {
                whole = false;
                break;
            };
            let _ = body.flow_control().release_capacity(chunk.len());
            if !chunk.is_empty() && first_byte.is_none() {
                first_byte = Some(std::time::Instant::now());
            }
            data.extend_from_slice(&chunk);
        }
        let cache_status = parts.headers.get("cache-status");
        Timed {
            status: parts.status.as_u16(),
            cache_status: cache_status.map_or("", |v| v.to_str().unwrap()).to_string(),
            first_byte,
            ended: std::time::Instant::now(),
            body: data,
            whole,
        }
    })
}

/// Starts `path` on a thread, waits until the upstream has it (one more
/// request than `before`), then gets it from 3 HTTP/1.1 and 3 HTTP/2
/// clients at once: the leader's answer, then the others'.
fn lead_and_wait(gw: &Gw, up: &TestUpstream, path: &str) -> (Timed, Vec<Timed>) {
    let before = up.requests_seen();
    let addr = gw.addr();
    std::thread::scope(|s| {
        let leader = s.spawn(|| h1_timed(addr, path));
        let sent = wait_until(Duration::from_secs(5), || up.requests_seen() > before);
        assert!(sent, "the leader's request never came upstream");
        let waiters: Vec<_> = (0..6)
            .map(|i| {
                s.spawn(move || match i % 2 {
                    0 => h1_timed(addr, path),
                    _ => h2_timed(addr, path),
                })
            })
            .collect();
        let waiters = waiters.into_iter().map(|w| w.join().unwrap()).collect();
        (leader.join().unwrap(), waiters)
    })
}

#[test]
fn waiters_are_answered_as_the_fetch_arrives() {
    let up = TestUpstream::start();
    let gw = start(&up);
    // 60,000 bytes: the first 1,000 at once, the rest 1.5 s later; with
    // a length, then chunked (to HTTP/1.1 waiters chunked, to HTTP/2
    // ones until the stream's end).
    for chunked in ["0", "1"] {
        let path = format!(
            "/c/streamed-{chunked}?size=60000&first=1000&body_delay=1500&chunked={chunked}&header=cache-control:max-age=60"
        );
        let before = up.requests_seen();
        let (leader, waiters) = lead_and_wait(&gw, &up, &path);
        assert_eq!(up.requests_seen(), before + 1, "one fetch for all");
        let body = sluicegate_testkit::upstream::pattern(60000);
        assert_eq!(leader.cache_status, STORED);
        assert!(leader.whole && leader.body == body);
        for w in &waiters {
            assert_eq!(w.status, 200, "{w:?}");
            assert_eq!(w.cache_status, "sluicegate; hit; detail=coalesced");
            assert!(w.whole, "chunked={chunked}: not whole");
            assert!(w.body == body, "chunked={chunked}: another body");
            // Its first bytes came well before the rest (1.5 s later).
            let first = w.first_byte.expect("body bytes");
            let waited = w.ended.duration_since(first);
            assert!(
                waited > Duration::from_millis(700),
                "chunked={chunked}: the first bytes came {waited:?} before the end"
            );
        }
    }

    // A fetch cut after its head (its upstream closes mid-body): the
    // waiters that had the head are cut too (the connection closed, the
    // stream reset), and none goes upstream.
    let path = "/c/cut?close=mid&body_delay=1000&header=cache-control:max-age=60";
    let before = up.requests_seen();
    let (leader, waiters) = lead_and_wait(&gw, &up, path);
    assert!(!leader.whole);
    for w in &waiters {
        assert_eq!(w.status, 200, "{w:?}");
        assert_eq!(w.cache_status, "sluicegate; hit; detail=coalesced");
        assert!(!w.whole, "a cut answer looked whole: {w:?}");
    }
    assert_eq!(up.requests_seen(), before + 1);
}

/// An admin API call with a bearer token and a JSON body.
fn admin(admin: u16, method: &str, path: &str, token: &str, body: &str) -> Response {
    let auth = format!("Bearer {token}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    http_request(
        ("127.0.0.1", admin),
        method,
        path,
        &headers,
        body.as_bytes(),
    )
}

fn json(r: &Response) -> serde_json::Value {
    serde_json::from_str(&r.body_str()).expect("a JSON body")
}

#[test]
fn the_admin_api_reports_the_cache_and_purges_by_tag_prefix_key_and_route() {
    let up = TestUpstream::start();
    let port = free_port();
    let dir = std::env::temp_dir().join(format!(
        "sluicegate-cache-admin-{}-{port}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (read, write) = (dir.join("read.token"), dir.join("write.token"));
    std::fs::write(&read, "cache-reader\n").unwrap();
    std::fs::write(&write, "cache-writer\n").unwrap();
    let gw = Gw::start(&format!(
        "admin:\n  listen: \"127.0.0.1:{port}\"\n  tokens: [{{ token_file: {}, role: read }}, {{ token_file: {}, role: write }}]\n\
         cache: {{ memory: 8MiB, max_object: 64KiB }}\n\
         services:\n{}\
         routes:\n\
         \x20 - name: t\n    match: {{ path_prefix: /t }}\n    service: web\n    cache: {{ key: [host, path, query], tags_header: x-tags }}\n\
         \x20 - name: c\n    match: {{ path_prefix: /c }}\n    service: web\n    cache: {{ key: [host, path, query] }}\n",
        read.display(),
        write.display(),
        service("web", &[up.addr()], "")
    ));
    let q = "?size=2000&header=cache-control:max-age=60";
    let tagged = |tags: &str| format!("{q}&header=x-tags:{tags}");
    let (a, b, c) = (
        format!("/t/a{}", tagged("red,%20blue")),
        format!("/t/b{}", tagged("blue")),
        format!("/t/c{}", tagged("green")),
    );
    let x = "/c/x?size=10&header=cache-control:max-age=60".to_string();
    for path in [&a, &b, &c, &x] {
        assert_eq!(status_of(&get(&gw, path, &[])), STORED, "{path}");
    }
    assert_eq!(status_of(&get(&gw, &a, &[])), HIT);

    // The report: a read token may see it.
    let r = admin(port, "GET", "/cache", "cache-reader", "");
    assert_eq!(r.status, 200, "{}", r.body_str());
    let v = json(&r);
    assert_eq!(v["objects"], 4);
    assert_eq!(v["memory"], 8 * 1024 * 1024);
    assert_eq!(
        (v["hits"].as_u64(), v["misses"].as_u64()),
        (Some(1), Some(4))
    );
    assert!((v["hit_ratio"].as_f64().unwrap() - 0.2).abs() < 1e-9);
    assert_eq!(v["routes"][0]["route"], "t");
    assert_eq!(v["routes"][0]["objects"], 3);
    assert_eq!(v["routes"][1]["route"], "c");
    assert!(v["bytes"].as_u64().unwrap() > 3 * 2000);

    // A purge needs a write token and a condition, each a string.
    assert_eq!(
        admin(
            port,
            "POST",
            "/cache/purge",
            "cache-reader",
            r#"{"tag":"blue"}"#
        )
        .status,
        403
    );
    let bad = admin(port, "POST", "/cache/purge", "cache-writer", "{}");
    assert_eq!(bad.status, 400);
    assert_eq!(json(&bad)["problems"][0]["path"], "$");
    let bad = admin(port, "POST", "/cache/purge", "cache-writer", r#"{"tag":5}"#);
    assert_eq!(bad.status, 400);
    assert_eq!(json(&bad)["problems"][0]["path"], "$.tag");
    assert_eq!(up.requests_seen(), 4);

    // By tag: the two tagged blue.
    let purge = |body: &str| {
        let r = admin(port, "POST", "/cache/purge", "cache-writer", body);
        assert_eq!(r.status, 200, "{}", r.body_str());
        json(&r)["purged"].as_u64().unwrap()
    };
    assert_eq!(purge(r#"{"tag":"blue"}"#), 2);
    assert_eq!(status_of(&get(&gw, &c, &[])), HIT);
    assert_eq!(status_of(&get(&gw, &a, &[])), STORED);
    assert_eq!(status_of(&get(&gw, &b, &[])), STORED);
    assert_eq!(up.requests_seen(), 6);
    // By key prefix (host, path, query run together), by route, by key.
    assert_eq!(purge(r#"{"prefix":"127.0.0.1/t/c?"}"#), 1);
    assert_eq!(status_of(&get(&gw, &c, &[])), STORED);
    assert_eq!(purge(r#"{"route":"c"}"#), 1);
    assert_eq!(status_of(&get(&gw, &x, &[])), STORED);
    let key = serde_json::json!({ "key": format!("127.0.0.1{b}"), "route": "t" });
    assert_eq!(purge(&key.to_string()), 1);
    assert_eq!(purge(&key.to_string()), 0);
    assert_eq!(status_of(&get(&gw, &b, &[])), STORED);
    assert_eq!(status_of(&get(&gw, &a, &[])), HIT);
    let _ = std::fs::remove_dir_all(&dir);
}
