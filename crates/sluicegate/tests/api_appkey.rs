//! App-key authentication and plans end to end through the real binary:
//! the key from a header, a query parameter or a `~KEY` path segment, each
//! removed before the upstream sees the request, which gets `X-App-Id`;
//! 401 for a missing or unknown key, 403 for a service the app may not
//! call; plan rate limits (burst then 429 with `Retry-After` and
//! `RateLimit-*`, then refill), quotas, concurrency, and a reload that keeps
//! an app's bucket. App ACLs (methods, paths, services) and IP rules (403)
//! over HTTP/1.1 and HTTP/2 streams (h2c).

mod http_common;

use std::thread;
use std::time::{Duration, Instant};

use http_common::{assert_json_error, service, Gw};
use sluicegate_testkit::{http_get, KeepAliveClient, Proto, TestUpstream};

const KEY_A: &str = "key-aaaa-0123456789";
const KEY_B: &str = "key-bbbb-0123456789";

fn config(orders: &TestUpstream, other: &TestUpstream, plans: &str, apps_extra: &str) -> String {
    format!(
        r#"services:
{}
{}
routes:
  - name: orders
    match: {{ path_prefix: /orders }}
    service: orders
    auth: app_key
  - name: stripped
    match: {{ path_prefix: /api }}
    service: orders
    strip_prefix: true
    auth: app_key
  - name: other
    match: {{ path_prefix: /other }}
    service: other
    auth: app_key
  - name: open
    match: {{ path_prefix: /open }}
    service: orders
plans:
{plans}
apps:
  - id: shop-web
    keys: ["{KEY_A}"]
    services: [orders]
{apps_extra}
  - id: partner
    keys: ["{KEY_B}"]
"#,
        service("orders", &[orders.addr()], ""),
        service("other", &[other.addr()], ""),
    )
}

fn no_plans(orders: &TestUpstream, other: &TestUpstream) -> String {
    config(orders, other, "  free: { concurrency: 1000 }", "")
}

#[test]
fn key_in_header_query_or_path_is_removed_and_app_id_added() {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    let gw = Gw::start(&no_plans(&orders, &other));

    // Header; a client-sent X-App-Id is dropped, not trusted.
    let resp = http_get(
        gw.addr(),
        "/orders/1",
        &[("X-App-Key", KEY_A), ("X-App-Id", "spoofed")],
    );
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    let seen = orders.last_request().unwrap();
    assert_eq!(seen.target, "/orders/1");
    assert_eq!(seen.header_all("x-app-id"), vec!["shop-web"]);
    assert_eq!(seen.header("x-app-key"), None);

    // Query parameter, with other parameters kept in order.
    let resp = http_get(
        gw.addr(),
        &format!("/orders/2?a=1&app_key={KEY_A}&b=2"),
        &[],
    );
    assert_eq!(resp.status, 200);
    let seen = orders.last_request().unwrap();
    assert_eq!(seen.target, "/orders/2?a=1&b=2");
    assert_eq!(seen.header("x-app-id"), Some("shop-web"));
    let resp = http_get(gw.addr(), &format!("/orders/3?app_key={KEY_A}"), &[]);
    assert_eq!(resp.status, 200);
    assert_eq!(orders.last_request().unwrap().target, "/orders/3");

    // Path segment right after the prefix (the Hyperapi form).
    let resp = http_get(gw.addr(), &format!("/orders/~{KEY_A}/items/9?x=1"), &[]);
    assert_eq!(resp.status, 200);
    let seen = orders.last_request().unwrap();
    assert_eq!(seen.target, "/orders/items/9?x=1");
    assert!(!seen.target.contains(KEY_A));
    let resp = http_get(gw.addr(), &format!("/orders/~{KEY_A}"), &[]);
    assert_eq!(resp.status, 200);
    assert_eq!(orders.last_request().unwrap().target, "/orders");

    // With strip_prefix the key segment and the prefix both go.
    let resp = http_get(gw.addr(), &format!("/api/~{KEY_A}/v1/x"), &[]);
    assert_eq!(resp.status, 200);
    assert_eq!(orders.last_request().unwrap().target, "/v1/x");
    let resp = http_get(gw.addr(), &format!("/api/~{KEY_A}"), &[]);
    assert_eq!(resp.status, 200);
    assert_eq!(orders.last_request().unwrap().target, "/");

    // Routes without auth pass X-App-Key through untouched, but never a
    // client's X-App-Id: only the gateway asserts who called.
    let resp = http_get(
        gw.addr(),
        "/open",
        &[("X-App-Id", "mine"), ("X-App-Key", "k")],
    );
    assert_eq!(resp.status, 200);
    let seen = orders.last_request().unwrap();
    assert_eq!(seen.header("x-app-id"), None);
    assert_eq!(seen.header("x-app-key"), Some("k"));
}

#[test]
fn missing_unknown_or_misplaced_key_is_401_and_forbidden_service_403() {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    let gw = Gw::start(&no_plans(&orders, &other));
    let cases: Vec<(String, Vec<(&str, &str)>)> = vec![
        ("/orders/1".into(), vec![]),
        (
            "/orders/1".into(),
            vec![("X-App-Key", "key-wrong-0123456789")],
        ),
        ("/orders/1".into(), vec![("X-App-Key", "")]),
        (
            format!("/orders/1?app_key={}", &KEY_A[..KEY_A.len() - 1]),
            vec![],
        ),
        (format!("/orders/1?app_key={KEY_A}x"), vec![]),
        // A ~ segment anywhere but right after the prefix is not a key.
        (format!("/orders/x/~{KEY_A}"), vec![]),
        (format!("/~{KEY_A}/orders/1"), vec![]),
        // The parameter name is matched exactly.
        (format!("/orders/1?APP_KEY={KEY_A}"), vec![]),
    ];
    for (path, headers) in &cases {
        let resp = http_get(gw.addr(), path, headers);
        assert!(
            resp.status == 401 || resp.status == 404,
            "{path}: {}",
            resp.status
        );
        if resp.status == 401 {
            assert_json_error(&resp, 401);
            assert!(
                resp.header("www-authenticate")
                    .is_some_and(|v| v.starts_with("AppKey")),
                "{path}: {:?}",
                resp.header("www-authenticate")
            );
        }
    }
    assert_eq!(
        orders.requests_seen(),
        0,
        "nothing unauthenticated went upstream"
    );

    // shop-web may call orders only; partner may call everything.
    let resp = http_get(gw.addr(), "/other/x", &[("X-App-Key", KEY_A)]);
    assert_json_error(&resp, 403);
    assert_eq!(other.requests_seen(), 0);
    let resp = http_get(gw.addr(), "/other/x", &[("X-App-Key", KEY_B)]);
    assert_eq!(resp.status, 200);
    assert_eq!(
        other.last_request().unwrap().header("x-app-id"),
        Some("partner")
    );

    // The connection stays usable after a refusal.
    let mut c = KeepAliveClient::connect(gw.addr()).unwrap();
    assert_eq!(c.get("/orders/1").unwrap().status, 401);
    let ok = c
        .request("GET", "/orders/1", &[("X-App-Key", KEY_A)], b"")
        .unwrap();
    assert_eq!(ok.status, 200);
}

#[test]
fn plan_burst_then_429_then_refill() {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    // 5/s with a burst of 3: three at once, then one every 200 ms.
    let gw = Gw::start(&config(
        &orders,
        &other,
        "  small: { rate: 5/s, burst: 3 }",
        "    plan: small",
    ));
    let mut c = KeepAliveClient::connect(gw.addr()).unwrap();
    let get = |c: &mut KeepAliveClient| {
        c.request("GET", "/orders/1", &[("X-App-Key", KEY_A)], b"")
            .unwrap()
    };
    let start = Instant::now();
    let mut ok = 0;
    let mut refused = None;
    for _ in 0..6 {
        let r = get(&mut c);
        match r.status {
            200 => {
                ok += 1;
                assert_eq!(r.header("ratelimit-limit"), Some("3"));
            }
            429 => {
                refused = Some(r);
                break;
            }
            s => panic!("unexpected {s}"),
        }
    }
    // Within the first 200 ms at most one token can have come back.
    if start.elapsed() < Duration::from_millis(190) {
        assert_eq!(ok, 3, "burst of 3");
    } else {
        assert!((3..=4).contains(&ok), "{ok}");
    }
    let r = refused.expect("a 429 after the burst");
    assert_json_error(&r, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("ratelimit-limit"), Some("3"));
    assert_eq!(r.header("ratelimit-remaining"), Some("0"));
    // Another app has its own bucket.
    let other_app = c
        .request("GET", "/orders/1", &[("X-App-Key", KEY_B)], b"")
        .unwrap();
    assert_eq!(other_app.status, 200);
    // Refill: after 250 ms one more request passes.
    thread::sleep(Duration::from_millis(250));
    assert_eq!(get(&mut c).status, 200);
}

#[test]
fn quota_counts_and_a_per_service_plan_overrides_the_default() {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    // shop-web's default plan is generous; on `orders` it gets `q`.
    let gw = Gw::start(&config(
        &orders,
        &other,
        "  big: { rate: 1000/s }\n  q: { quota: 4/day }",
        "    plan: big\n    plans_by_service: { orders: q }",
    ));
    for i in 0..4 {
        let r = http_get(gw.addr(), "/orders/1", &[("X-App-Key", KEY_A)]);
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.header("ratelimit-limit"), Some("4"));
        assert_eq!(
            r.header("ratelimit-remaining"),
            Some((3 - i).to_string().as_str())
        );
    }
    let r = http_get(gw.addr(), "/orders/1", &[("X-App-Key", KEY_A)]);
    assert_json_error(&r, 429);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");
    assert_eq!(orders.requests_seen(), 4);
    // partner has no plan: no limit, no RateLimit headers.
    let r = http_get(gw.addr(), "/orders/1", &[("X-App-Key", KEY_B)]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ratelimit-limit"), None);
}

#[test]
fn concurrency_limit_refuses_the_second_request_in_flight() {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    let gw = Gw::start(&config(
        &orders,
        &other,
        "  one: { concurrency: 1 }",
        "    plan: one",
    ));
    let addr = gw.addr();
    // The test upstream answers this one after 800 ms.
    let slow =
        thread::spawn(move || http_get(addr, "/orders/slow?delay=800", &[("X-App-Key", KEY_A)]));
    // Wait until the slow request is in flight upstream.
    let deadline = Instant::now() + Duration::from_secs(5);
    while orders.requests_seen() == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let r = http_get(addr, "/orders/fast", &[("X-App-Key", KEY_A)]);
    assert_json_error(&r, 429);
    assert_eq!(slow.join().unwrap().status, 200);
    // The slot is free again once the gateway has finished the slow
    // request (its last write to the client can race our next request).
    wait_for(|| http_get(addr, "/orders/fast", &[("X-App-Key", KEY_A)]).status == 200);
}

#[test]
fn reload_keeps_the_bucket_and_removed_apps_are_refused() {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    let plans = "  slow: { rate: 1/h, burst: 2 }";
    let gw = Gw::start(&config(&orders, &other, plans, "    plan: slow"));
    let get = |key: &str| http_get(gw.addr(), "/orders/1", &[("X-App-Key", key)]).status;
    assert_eq!(get(KEY_A), 200);
    assert_eq!(get(KEY_A), 200);
    assert_eq!(get(KEY_A), 429);

    // Same apps, a new route: the bucket stays empty after the reload.
    let mut yaml = std::fs::read_to_string(gw.gw.config_path()).unwrap();
    yaml = yaml.replace(
        "  - name: open\n",
        "  - name: hello\n    match: { path: /hello }\n    respond: { body: hi }\n  - name: open\n",
    );
    gw.gw.write_config(&yaml);
    gw.gw.reload_signal();
    wait_for(|| http_get(gw.addr(), "/hello", &[]).status == 200);
    assert_eq!(get(KEY_A), 429, "the reload refilled the bucket");
    assert_eq!(get(KEY_B), 200);

    // partner removed: refused from then on.
    let cut = yaml.find("  - id: partner").unwrap();
    let end = yaml[cut..].find("\"]\n").unwrap() + cut + 3;
    yaml.replace_range(cut..end, "");
    gw.gw.write_config(&yaml);
    gw.gw.reload_signal();
    wait_for(|| get(KEY_B) == 401);
    assert_eq!(get(KEY_A), 429);
}

fn wait_for(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "condition not met in 5 s");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn metrics_by_app_and_unauthorized_by_route() {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    let admin = sluicegate_testkit::free_port();
    let yaml = format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\n{}",
        config(
            &orders,
            &other,
            "  one: { rate: 1/h, burst: 2 }",
            "    plan: one"
        )
    );
    let gw = Gw::start(&yaml);
    for _ in 0..3 {
        http_get(gw.addr(), "/orders/1", &[("X-App-Key", KEY_A)]); // 200, 200, 429
    }
    http_get(gw.addr(), "/other/1", &[("X-App-Key", KEY_A)]); // 403
    http_get(gw.addr(), "/orders/1", &[]); // 401
    http_get(
        gw.addr(),
        "/orders/1",
        &[("X-App-Key", "key-none-0123456789")],
    ); // 401
    let text = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    for line in [
        "sluicegate_app_requests_total{app=\"shop-web\"} 4",
        "sluicegate_app_forbidden_total{app=\"shop-web\"} 1",
        "sluicegate_app_limited_total{app=\"shop-web\"} 1",
        "sluicegate_unauthorized_total{route=\"orders\"} 2",
        "sluicegate_unauthorized_total{route=\"other\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    // An app that never called is not listed.
    assert!(!text.contains("app=\"partner\""), "{text}");
}

/// GET `path` from source address `src` (another loopback address), with
/// `Connection: close`; returns the status code.
fn get_from(src: std::net::Ipv4Addr, gw: std::net::SocketAddr, path: &str) -> u16 {
    get_from_over(Proto::Http1, src, gw, path)
}

/// [`get_from`] over `proto`: HTTP/1.1 by hand on a socket bound to `src`,
/// an HTTP/2 stream by curl with `--interface src`.
fn get_from_over(
    proto: Proto,
    src: std::net::Ipv4Addr,
    gw: std::net::SocketAddr,
    path: &str,
) -> u16 {
    use socket2::{Domain, Socket, Type};
    use std::io::{Read, Write};
    if proto == Proto::H2c {
        let src = src.to_string();
        let url = format!("http://{gw}{path}");
        let args = ["--http2-prior-knowledge", "--interface", src.as_str()];
        let r = sluicegate_testkit::curl_request(&args, &url, "GET", &[], b"")
            .unwrap_or_else(|e| panic!("GET {url} from {src}: {e}"));
        assert_eq!(r.version, "HTTP/2");
        return r.status;
    }
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    s.bind(&std::net::SocketAddr::from((src, 0)).into())
        .unwrap();
    s.connect_timeout(&gw.into(), Duration::from_secs(5))
        .unwrap();
    let mut s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0)
}

#[test]
fn route_limits_per_client_ip_and_per_route() {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    let mut yaml = no_plans(&orders, &other);
    yaml = yaml.replace(
        "  - name: open\n    match: { path_prefix: /open }\n    service: orders\n",
        "  - name: open\n    match: { path_prefix: /open }\n    service: orders\n    \
         limit: { rate: 1/h, burst: 2 }\n  \
         - name: shared\n    match: { path_prefix: /shared }\n    service: orders\n    \
         limit: { rate: 1/h, burst: 3, per: route }\n",
    );
    // The per-client-IP limit also runs before auth on an auth route.
    yaml = yaml.replace(
        "    service: other\n    auth: app_key\n",
        "    service: other\n    auth: app_key\n    limit: { rate: 1/h, burst: 1 }\n",
    );
    let gw = Gw::start(&yaml);
    let a = std::net::Ipv4Addr::new(127, 0, 0, 1);
    let b = std::net::Ipv4Addr::new(127, 0, 0, 2);
    // Per client IP: two each, then 429 for that address only.
    assert_eq!(get_from(a, gw.addr(), "/open"), 200);
    assert_eq!(get_from(a, gw.addr(), "/open"), 200);
    assert_eq!(get_from(a, gw.addr(), "/open"), 429);
    assert_eq!(get_from(b, gw.addr(), "/open"), 200);
    assert_eq!(get_from(b, gw.addr(), "/open"), 200);
    assert_eq!(get_from(b, gw.addr(), "/open"), 429);
    // Per route: three in all, whoever sends them.
    assert_eq!(get_from(a, gw.addr(), "/shared"), 200);
    assert_eq!(get_from(b, gw.addr(), "/shared"), 200);
    assert_eq!(get_from(a, gw.addr(), "/shared"), 200);
    assert_eq!(get_from(b, gw.addr(), "/shared"), 429);
    let r = http_get(gw.addr(), "/shared", &[]);
    assert_json_error(&r, 429);
    assert!(r.header("retry-after").is_some());
    // Key guessing on /other is bounded per address before auth runs.
    assert_eq!(
        get_from(b, gw.addr(), "/other?app_key=guess-0000000001"),
        401
    );
    assert_eq!(
        get_from(b, gw.addr(), "/other?app_key=guess-0000000002"),
        429
    );
}

/// A route limit per header value (before auth: no key needed) and one
/// per app (after auth: a request without a valid key is a 401, never a
/// 429, and counts for no app).
#[test]
fn route_limits_per_header_and_per_app() {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    let third = "  - id: third\n    keys: [\"key-cccc-0123456789\"]";
    let mut yaml = config(&orders, &other, "  free: { concurrency: 1000 }", third);
    yaml = yaml.replace(
        "  - name: open\n    match: { path_prefix: /open }\n    service: orders\n",
        "  - name: open\n    match: { path_prefix: /open }\n    service: orders\n    \
         limit: { rate: 1/h, burst: 2, per: \"header:X-Tenant\" }\n",
    );
    yaml = yaml.replace(
        "    service: other\n    auth: app_key\n",
        "    service: other\n    auth: app_key\n    limit: { rate: 1/h, burst: 1, per: app }\n",
    );
    let gw = Gw::start(&yaml);
    let get = |path: &str, headers: &[(&str, &str)]| http_get(gw.addr(), path, headers).status;
    // Two per tenant, whatever the field name's case.
    for t in ["acme", "globex"] {
        assert_eq!(get("/open", &[("x-tenant", t)]), 200);
        assert_eq!(get("/open", &[("X-TENANT", t)]), 200);
        assert_eq!(get("/open", &[("X-Tenant", t)]), 429, "tenant {t}");
    }
    // Several copies: the first counts.
    let two = [("X-Tenant", "initech"), ("X-Tenant", "acme")];
    assert_eq!(get("/open", &two), 200);
    assert_eq!(get("/open", &two), 200);
    assert_eq!(get("/open", &two), 429);
    // No header: one shared "absent" key, not any tenant's.
    assert_eq!(get("/open", &[]), 200);
    assert_eq!(get("/open", &[("X-Other", "1")]), 200);
    assert_eq!(get("/open", &[]), 429);
    // Per app, after auth.
    assert_eq!(get("/other", &[("X-App-Key", KEY_B)]), 200);
    assert_eq!(get("/other", &[("X-App-Key", KEY_B)]), 429);
    // Another app has its own counters.
    assert_eq!(get("/other", &[("X-App-Key", "key-cccc-0123456789")]), 200);
    assert_eq!(get("/other", &[("X-App-Key", "key-cccc-0123456789")]), 429);
    assert_eq!(get("/other", &[("X-App-Key", "key-zzzz-0123456789")]), 401);
    assert_eq!(get("/other", &[]), 401);
    // An app auth refuses (shop-web may not call `other`) is never
    // counted: 403 each time, not 429.
    assert_eq!(get("/other", &[("X-App-Key", KEY_A)]), 403);
    assert_eq!(get("/other", &[("X-App-Key", KEY_A)]), 403);
}

#[test]
fn ip_allow_and_deny_globally_and_per_route() {
    ip_rules(Proto::Http1);
}

#[test]
fn ip_allow_and_deny_globally_and_per_route_over_http2() {
    ip_rules(Proto::H2c);
}

fn ip_rules(proto: Proto) {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    let mut yaml = no_plans(&orders, &other);
    yaml = yaml.replace(
        "  - name: open\n    match: { path_prefix: /open }\n    service: orders\n",
        "  - name: open\n    match: { path_prefix: /open }\n    service: orders\n    \
         ip: { allow: [127.0.0.0/30], deny: [127.0.0.2] }\n",
    );
    yaml.push_str("ip: { deny: [\"127.0.0.3/32\"] }\n");
    let gw = Gw::start(&yaml);
    let ip = |d: u8| std::net::Ipv4Addr::new(127, 0, 0, d);
    assert_eq!(get_from_over(proto, ip(1), gw.addr(), "/open"), 200);
    assert_eq!(
        get_from_over(proto, ip(2), gw.addr(), "/open"),
        403,
        "route deny"
    );
    assert_eq!(
        get_from_over(proto, ip(5), gw.addr(), "/open"),
        403,
        "outside the route's allow"
    );
    assert_eq!(
        get_from_over(proto, ip(3), gw.addr(), "/open"),
        403,
        "global deny"
    );
    // The global rule covers every route and unrouted requests.
    assert_eq!(get_from_over(proto, ip(3), gw.addr(), "/nope"), 403);
    assert_eq!(get_from_over(proto, ip(5), gw.addr(), "/nope"), 404);
    assert_eq!(orders.requests_seen(), 1);
}

#[test]
fn app_acl_on_methods_and_paths() {
    app_acls(Proto::Http1);
}

#[test]
fn app_acl_on_methods_paths_and_services_over_http2() {
    app_acls(Proto::H2c);
}

/// An app's methods, paths and services, each refused with 403 (the
/// upstream never asked).
fn app_acls(proto: Proto) {
    let (orders, other) = (TestUpstream::start(), TestUpstream::start());
    let gw = Gw::start(&config(
        &orders,
        &other,
        "  free: { concurrency: 1000 }",
        "    methods: [GET]\n    paths: [/orders/public]",
    ));
    let call = |method: &str, path: &str| {
        proto
            .request(gw.addr(), method, path, &[("X-App-Key", KEY_A)], b"")
            .status
    };
    assert_eq!(call("GET", "/orders/public"), 200);
    assert_eq!(call("GET", "/orders/public/x"), 200);
    assert_eq!(call("POST", "/orders/public/x"), 403);
    assert_eq!(call("GET", "/orders/private"), 403);
    assert_eq!(
        call("GET", "/orders/publicity"),
        403,
        "prefixes are segment-wise"
    );
    assert_eq!(
        call("GET", "/orders/public/../private"),
        403,
        "on the normalised path"
    );
    // shop-web may call the orders service only.
    let r = proto.get(gw.addr(), "/other/x", &[("X-App-Key", KEY_A)]);
    assert_json_error(&r, 403);
    assert_eq!(other.requests_seen(), 0);
    assert_eq!(orders.requests_seen(), 2, "only the allowed calls");
    // partner has no such limits.
    let r = proto.request(
        gw.addr(),
        "POST",
        "/orders/private",
        &[("X-App-Key", KEY_B)],
        b"",
    );
    assert_eq!(r.status, 200);
}
