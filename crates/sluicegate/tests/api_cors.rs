//! CORS end to end: preflights answered by the gateway before auth (204
//! with the allowed methods and headers, 403 for an origin, method or
//! header not allowed), and actual requests from an allowed origin getting
//! `Access-Control-Allow-*` from the gateway only. The same over HTTP/1.1
//! and HTTP/2 streams (h2c).

mod http_common;

use http_common::{assert_json_error, service, Gw};
use sluicegate_testkit::{Proto, TestUpstream};

const KEY: &str = "key-cors-0123456789";

fn gateway(up: &TestUpstream) -> Gw {
    Gw::start(&format!(
        r#"services:
{}
routes:
  - name: api
    match: {{ path_prefix: /api }}
    service: s
    auth: app_key
    cors:
      origins: ["https://shop.example.com", "https://*.partner.test"]
      methods: [GET, POST]
      headers: [content-type, x-app-key]
      expose_headers: [x-request-id]
      credentials: true
      max_age: 10m
  - name: open
    match: {{ path_prefix: /open }}
    service: s
    cors: {{ origins: ["*"] }}
apps:
  - id: web
    keys: ["{KEY}"]
"#,
        service("s", &[up.addr()], "")
    ))
}

fn preflight(
    proto: Proto,
    gw: &Gw,
    origin: &str,
    method: &str,
    headers: &str,
) -> sluicegate_testkit::Response {
    let mut h = vec![
        ("Origin", origin),
        ("Access-Control-Request-Method", method),
    ];
    if !headers.is_empty() {
        h.push(("Access-Control-Request-Headers", headers));
    }
    proto.request(gw.addr(), "OPTIONS", "/api/orders", &h, b"")
}

#[test]
fn preflight_is_answered_before_auth() {
    preflights(Proto::Http1);
}

#[test]
fn preflight_is_answered_before_auth_over_http2() {
    preflights(Proto::H2c);
}

fn preflights(proto: Proto) {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    let r = preflight(
        proto,
        &gw,
        "https://shop.example.com",
        "POST",
        "Content-Type, X-App-Key",
    );
    assert_eq!(r.status, 204, "{}", r.body_str());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://shop.example.com")
    );
    assert_eq!(r.header("access-control-allow-methods"), Some("GET, POST"));
    assert_eq!(
        r.header("access-control-allow-headers"),
        Some("content-type, x-app-key")
    );
    assert_eq!(r.header("access-control-max-age"), Some("600"));
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    assert_eq!(r.header("vary"), Some("Origin"));
    // A wildcard origin, with a port.
    let r = preflight(proto, &gw, "https://eu.partner.test:8443", "GET", "");
    assert_eq!(r.status, 204);
    for (origin, method, headers) in [
        ("https://evil.example.org", "GET", ""),
        ("http://shop.example.com", "GET", ""),
        ("https://partner.test", "GET", ""),
        ("https://shop.example.com", "DELETE", ""),
        ("https://shop.example.com", "POST", "x-secret"),
    ] {
        let r = preflight(proto, &gw, origin, method, headers);
        assert_json_error(&r, 403);
        assert_eq!(r.header("access-control-allow-origin"), None, "{origin}");
    }
    assert_eq!(up.requests_seen(), 0, "preflights never reach the upstream");
}

#[test]
fn actual_requests_get_the_gateways_cors_headers() {
    actual_requests(Proto::Http1);
}

#[test]
fn actual_requests_get_the_gateways_cors_headers_over_http2() {
    actual_requests(Proto::H2c);
}

fn actual_requests(proto: Proto) {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    // The upstream tries its own (too broad) CORS header: it is dropped.
    let path = "/api/x?header=access-control-allow-origin:*&header=x-request-id:7";
    let r = proto.get(
        gw.addr(),
        path,
        &[("Origin", "https://shop.example.com"), ("X-App-Key", KEY)],
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header_all("access-control-allow-origin"),
        vec!["https://shop.example.com"]
    );
    assert_eq!(
        r.header("access-control-expose-headers"),
        Some("x-request-id")
    );
    assert_eq!(r.header("access-control-allow-credentials"), Some("true"));
    // A 401 also carries them, so the page can read why.
    let r = proto.get(
        gw.addr(),
        "/api/x",
        &[("Origin", "https://shop.example.com")],
    );
    assert_json_error(&r, 401);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://shop.example.com")
    );
    // Another origin: no CORS headers from the gateway; the upstream's
    // pass through untouched (the gateway does not own this answer).
    let r = proto.get(
        gw.addr(),
        "/api/x",
        &[("Origin", "https://evil.example.org"), ("X-App-Key", KEY)],
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("access-control-allow-origin"), None);
    // Origin "*" without credentials answers "*".
    let r = proto.get(gw.addr(), "/open", &[("Origin", "https://any.test")]);
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    // No Origin: not a CORS request, nothing added.
    let r = proto.get(gw.addr(), "/open", &[]);
    assert_eq!(r.header("access-control-allow-origin"), None);
}
