//! Aggregate routes on the real binary, with small JSON upstreams on
//! loopback: parts without dependencies run at once, a dependent one
//! after; `${part.field}` reaches the right path; an optional part that
//! fails is null and named in `Sluicegate-Partial`; a required one gives
//! 502 naming it (not JSON, a timeout, a dead service); over HTTP/2 too;
//! a part on a service the app may not call is never called (403 naming
//! a required one, null an optional one), a part's body over
//! `limits.max_body_bytes` fails it, `HEAD` gets the `GET`'s head, and
//! the route's and parts' metric lines count them.

mod http_common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_common::{service, Gw};
use serde_json::Value;
use sluicegate_testkit::{free_port, Proto};

/// A JSON upstream: `/slow/N` answers `{"n":N}` after 100 ms,
/// `/order/ID` `{"customer_id":"c/ID","items":[{"id":7}]}` after 100 ms,
/// `/customer/X` `{"customer":"X"}`, `/text` a non-JSON body, `/stall`
/// after 2 s, anything else 500. The paths it saw, in order.
fn json_upstream() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { continue };
            let s = s.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                let path = line.split(' ').nth(1).unwrap_or("").to_string();
                s.lock().unwrap().push(path.clone());
                let (status, body, wait) = if let Some(n) = path.strip_prefix("/slow/") {
                    (200, format!("{{\"n\":{n}}}"), 300)
                } else if let Some(id) = path.strip_prefix("/order/") {
                    (
                        200,
                        format!("{{\"customer_id\":\"c/{id}\",\"items\":[{{\"id\":7}}]}}"),
                        100,
                    )
                } else if let Some(x) = path.strip_prefix("/customer/") {
                    (200, format!("{{\"customer\":\"{x}\"}}"), 0)
                } else if path == "/text" {
                    (200, "not json".to_string(), 0)
                } else if path == "/stall" {
                    (200, "{}".to_string(), 2000)
                } else {
                    (500, "{}".to_string(), 0)
                };
                std::thread::sleep(Duration::from_millis(wait));
                let _ = write!(
                    c,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    (addr, seen)
}

fn start(up: SocketAddr) -> Gw {
    let dead: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let services = [
        service("a", &[up], ""),
        service("b", &[up], ""),
        service("dead", &[dead], "    retries: { attempts: 1 }\n"),
    ]
    .concat();
    Gw::start(&format!(
        r#"services:
{services}routes:
  - name: par
    match: {{ path: "/par/{{id:int}}" }}
    aggregate:
      - {{ name: one, service: a, path: "/slow/${{id}}" }}
      - {{ name: two, service: b, path: "/slow/2" }}
  - name: chain
    match: {{ path: "/chain/{{id}}" }}
    aggregate:
      - {{ name: customer, service: b, path: "/customer/${{order.customer_id}}?item=${{order.items.0.id}}" }}
      - {{ name: order, service: a, path: "/order/${{id}}" }}
  - name: opt
    match: {{ path: "/opt" }}
    aggregate:
      - {{ name: main, service: a, path: "/slow/1" }}
      - {{ name: recs, service: a, path: "/missing", optional: true }}
      - {{ name: after, service: b, path: "/customer/${{recs.x}}", optional: true }}
  - name: text
    match: {{ path: "/text" }}
    aggregate:
      - {{ name: main, service: a, path: "/slow/1" }}
      - {{ name: words, service: a, path: "/text" }}
  - name: slow
    match: {{ path: "/slow" }}
    aggregate:
      - {{ name: main, service: a, path: "/slow/1" }}
      - {{ name: stall, service: a, path: "/stall", timeout: 300ms }}
  - name: dead
    match: {{ path: "/dead" }}
    aggregate:
      - {{ name: gone, service: dead, path: "/x" }}
"#
    ))
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn parallel_and_dependent_parts_and_their_failures() {
    let (up, seen) = json_upstream();
    let gw = start(up);
    for proto in [Proto::Http1, Proto::H2c] {
        // Two parts of 300 ms each, at once: in turn they would take 600
        // ms (the margin is for a loaded machine).
        let t = Instant::now();
        let r = proto.get(gw.addr(), "/par/5", &[]);
        let took = t.elapsed();
        assert_eq!(r.status, 200, "{proto:?} {}", r.body_str());
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.body_str().trim(), r#"{"one":{"n":5},"two":{"n":2}}"#);
        assert!(took < Duration::from_millis(550), "{proto:?}: {took:?}");

        // A chain: the customer waits for the order (100 ms), whose
        // string is one encoded segment and number written as is.
        seen.lock().unwrap().clear();
        let t = Instant::now();
        let r = proto.get(gw.addr(), "/chain/42", &[]);
        assert_eq!(r.status, 200, "{}", r.body_str());
        assert!(t.elapsed() >= Duration::from_millis(100));
        let v = json(&r.body_str());
        assert_eq!(v["customer"]["customer"], "c%2F42?item=7");
        assert_eq!(v["order"]["customer_id"], "c/42");
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["customer", "order"], "config order");
        assert!(seen
            .lock()
            .unwrap()
            .contains(&"/customer/c%2F42?item=7".to_string()));

        // An optional part fails (500): null, and so is the one reading it.
        let r = proto.get(gw.addr(), "/opt", &[]);
        assert_eq!(r.status, 200, "{}", r.body_str());
        assert_eq!(r.header("sluicegate-partial"), Some("recs,after"));
        assert_eq!(
            json(&r.body_str()),
            json(r#"{"main":{"n":1},"recs":null,"after":null}"#)
        );

        // Required parts failing: not JSON, past its timeout, a dead service.
        for (path, part) in [("/text", "words"), ("/slow", "stall"), ("/dead", "gone")] {
            let t = Instant::now();
            let r = proto.get(gw.addr(), path, &[]);
            assert_eq!(r.status, 502, "{path}: {}", r.body_str());
            let v = json(&r.body_str());
            assert_eq!(v["part"], part, "{path}");
            assert!(t.elapsed() < Duration::from_millis(1500), "{path}");
        }

        // Other methods: 405.
        let r = proto.request(gw.addr(), "POST", "/par/5", &[], b"x");
        assert_eq!(r.status, 405);
    }
}

#[test]
fn a_chain_of_two_takes_both_parts_times() {
    let (up, _) = json_upstream();
    let gw = Gw::start(&format!(
        r#"services:
{}routes:
  - name: two
    match: {{ path: "/two" }}
    aggregate:
      - {{ name: first, service: a, path: "/slow/1" }}
      - {{ name: second, service: a, path: "/slow/${{first.n}}" }}
"#,
        service("a", &[up], "")
    ));
    let t = Instant::now();
    let r = Proto::Http1.get(gw.addr(), "/two", &[]);
    assert_eq!(r.status, 200, "{}", r.body_str());
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(r.body_str().trim(), r#"{"first":{"n":1},"second":{"n":1}}"#);
}

/// The sample `series` (with its labels) of the gateway's `/metrics`.
fn metric(admin: u16, series: &str) -> Option<u64> {
    let text = sluicegate_testkit::http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn acl_body_bound_head_and_metrics_of_parts() {
    let (up, seen) = json_upstream();
    let admin = free_port();
    const KEY: &str = "aggregate-app-key-0123456789";
    // A body of 200 digits: valid JSON, over the 128-byte bound.
    let big = "9".repeat(200);
    let gw = Gw::start(&format!(
        r#"admin: {{ listen: "127.0.0.1:{admin}" }}
limits: {{ max_body_bytes: 128 }}
services:
{}{}routes:
  - name: page
    match: {{ path: "/page" }}
    auth: app_key
    aggregate:
      - {{ name: main, service: a, path: "/slow/1" }}
      - {{ name: secret, service: b, path: "/customer/secret" }}
  - name: soft
    match: {{ path: "/soft" }}
    auth: app_key
    aggregate:
      - {{ name: main, service: a, path: "/slow/1" }}
      - {{ name: secret, service: b, path: "/customer/secret", optional: true }}
  - name: big
    match: {{ path: "/big" }}
    aggregate:
      - {{ name: main, service: a, path: "/slow/1" }}
      - {{ name: large, service: a, path: "/slow/{big}" }}
      - {{ name: maybe, service: a, path: "/slow/{big}", optional: true }}
apps:
  - id: shop
    keys: ["{KEY}"]
    services: [a]
"#,
        service("a", &[up], ""),
        service("b", &[up], ""),
    ));
    let key = [("X-App-Key", KEY)];

    // The app may call `a` but not `b`: a required part on `b` is 403
    // naming it, an optional one null; `b` is never called, and nothing
    // of it reaches the client.
    let r = Proto::Http1.get(gw.addr(), "/page", &key);
    assert_eq!(r.status, 403, "{}", r.body_str());
    let v = json(&r.body_str());
    assert_eq!(v["part"], "secret");
    assert!(!r.body_str().contains("\"customer\""), "{}", r.body_str());
    let r = Proto::Http1.get(gw.addr(), "/soft", &key);
    assert_eq!(r.status, 200, "{}", r.body_str());
    assert_eq!(r.header("sluicegate-partial"), Some("secret"));
    assert_eq!(
        json(&r.body_str()),
        json(r#"{"main":{"n":1},"secret":null}"#)
    );
    assert!(!seen.lock().unwrap().iter().any(|p| p.contains("secret")));
    // Without a key: the route's auth refuses it first.
    assert_eq!(Proto::Http1.get(gw.addr(), "/page", &[]).status, 401);

    // A part's body over limits.max_body_bytes is a failed part.
    let r = Proto::Http1.get(gw.addr(), "/big", &[]);
    assert_eq!(r.status, 502, "{}", r.body_str());
    assert_eq!(json(&r.body_str())["part"], "large");

    // HEAD: the GET's head (its length), no body.
    let get = Proto::Http1.get(gw.addr(), "/soft", &key);
    let mut c = sluicegate_testkit::KeepAliveClient::connect(gw.addr()).unwrap();
    c.send("HEAD", "/soft", &[("X-App-Key", KEY)], b"").unwrap();
    let head = c.read_response_for("HEAD").unwrap();
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-type"), Some("application/json"));
    assert_eq!(
        head.header("content-length"),
        Some(get.body.len().to_string().as_str())
    );

    // The route's lines and each part's.
    let counted = http_common::wait_until(Duration::from_secs(5), || {
        metric(
            admin,
            r#"sluicegate_requests_total{route="soft",class="2xx"}"#,
        ) == Some(3)
    });
    assert!(counted, "the route's requests");
    let part = |route: &str, part: &str, result: &str| {
        metric(
            admin,
            &format!(
                r#"sluicegate_aggregate_parts_total{{route="{route}",part="{part}",result="{result}"}}"#
            ),
        )
    };
    assert_eq!(part("soft", "main", "ok"), Some(3));
    assert_eq!(part("soft", "secret", "failed"), Some(3));
    assert_eq!(part("soft", "secret", "ok"), Some(0));
    assert_eq!(part("page", "secret", "failed"), Some(1));
    assert_eq!(part("big", "large", "failed"), Some(1));
    assert_eq!(part("big", "maybe", "failed"), Some(1));
    assert_eq!(
        metric(
            admin,
            r#"sluicegate_requests_total{route="page",class="4xx"}"#
        ),
        Some(2)
    );
    assert_eq!(
        metric(
            admin,
            r#"sluicegate_aggregate_part_duration_seconds_count{route="soft",part="main"}"#
        ),
        Some(3)
    );
}

/// One admin API request with a JSON body.
fn admin_call(admin: u16, method: &str, path: &str, body: &str) -> sluicegate_testkit::Response {
    let mut c = sluicegate_testkit::KeepAliveClient::connect(("127.0.0.1", admin)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let headers = [
        ("Content-Type", "application/json"),
        ("Connection", "close"),
    ];
    c.send(method, path, &headers, body.as_bytes()).unwrap();
    c.read_response_for(method).unwrap()
}

#[test]
fn an_aggregate_route_through_the_admin_api() {
    let (up, _seen) = json_upstream();
    let admin = free_port();
    let gw = Gw::start(&format!(
        r#"admin: {{ listen: "127.0.0.1:{admin}" }}
services:
{}routes:
  - name: hello
    match: {{ path: "/hello" }}
    respond: {{ status: 200, body: "hi" }}
"#,
        service("a", &[up], ""),
    ));
    // Created through the API, it serves at once.
    let route = serde_json::json!({
        "match": { "path": "/api/orders/{id:int}" },
        "aggregate": [
            { "name": "order", "service": "a", "path": "/order/${id}" },
            { "name": "customer", "service": "a", "path": "/customer/${order.customer_id}" },
            { "name": "recs", "service": "a", "path": "/missing", "optional": true, "timeout": "300ms" }
        ]
    });
    let r = admin_call(admin, "PUT", "/routes/orders", &route.to_string());
    assert_eq!(r.status, 201, "{}", r.body_str());
    let got = Proto::Http1.get(gw.addr(), "/api/orders/5", &[]);
    assert_eq!(got.status, 200, "{}", got.body_str());
    assert_eq!(got.header("sluicegate-partial"), Some("recs"));
    assert_eq!(
        json(&got.body_str()),
        json(
            r#"{"order":{"customer_id":"c/5","items":[{"id":7}]},"customer":{"customer":"c%2F5"},"recs":null}"#
        )
    );
    // The API reads it back as it was written.
    let back = admin_call(admin, "GET", "/routes/orders", "");
    let back = json(&back.body_str());
    assert_eq!(
        back["aggregate"][1]["path"],
        "/customer/${order.customer_id}"
    );
    assert_eq!(back["aggregate"][2]["optional"], true);

    // Refused with the field named, and the running route stays: a part
    // on an unknown service, one naming a part that does not exist, and
    // a parameter the template does not have.
    for (bad, field) in [
        (
            serde_json::json!([{ "name": "x", "service": "nope", "path": "/x" }]),
            "aggregate[0].service",
        ),
        (
            serde_json::json!([{ "name": "x", "service": "a", "path": "/x/${ghost.id}" }]),
            "aggregate[0].path",
        ),
        (
            serde_json::json!([{ "name": "x", "service": "a", "path": "/x/${nope}" }]),
            "aggregate[0].path",
        ),
    ] {
        let body = serde_json::json!({
            "match": { "path": "/api/orders/{id:int}" },
            "aggregate": bad,
        });
        let r = admin_call(admin, "PUT", "/routes/orders", &body.to_string());
        assert_eq!(r.status, 400, "{}", r.body_str());
        let problems = json(&r.body_str());
        let path = problems["problems"][0]["path"].as_str().unwrap_or("");
        assert!(path.ends_with(field), "{path} for {bad}: {}", r.body_str());
        let still = Proto::Http1.get(gw.addr(), "/api/orders/6", &[]);
        assert_eq!(still.status, 200, "{}", still.body_str());
    }
}
