//! Path confusion must not get around auth or ACLs: the gateway normalises
//! the path once (dot segments, repeated slashes, escapes of unreserved
//! characters), routes on that, and forwards exactly that; escaped slashes,
//! backslashes and malformed escapes are refused with 400. The same over
//! HTTP/1.1 and HTTP/2 streams (h2c, the `:path` sent as it is).

mod http_common;

use http_common::{assert_json_error, service, Gw};
use sluicegate_testkit::{Proto, TestUpstream};

const KEY: &str = "key-paths-0123456789";

fn gateway(up: &TestUpstream) -> Gw {
    Gw::start(&format!(
        r#"services:
{}
routes:
  - name: public
    match: {{ path_prefix: /public }}
    service: s
  - name: orders
    match: {{ path_prefix: /orders }}
    service: s
    auth: app_key
plans:
  p: {{ concurrency: 100 }}
apps:
  - id: app
    keys: ["{KEY}"]
"#,
        service("s", &[up.addr()], "")
    ))
}

#[test]
fn spellings_of_a_protected_path_still_need_the_key() {
    protected_spellings(Proto::Http1);
}

#[test]
fn spellings_of_a_protected_path_still_need_the_key_over_http2() {
    protected_spellings(Proto::H2c);
}

fn protected_spellings(proto: Proto) {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    for path in [
        "/public/../orders/1",
        "/public/%2e%2e/orders/1",
        "/public/%2E%2E/orders/1",
        "/public/.%2e/orders/1",
        "//orders/1",
        "/./orders/1",
        "/public/./../orders/1",
        "/%6Frders/1",
        "/%6frders/1",
        "/orders//1",
        "/public/x/../../orders/1",
    ] {
        let r = proto.get(gw.addr(), path, &[]);
        assert_eq!(r.status, 401, "{path}: {}", r.body_str());
    }
    assert_eq!(up.requests_seen(), 0, "nothing reached the upstream");
}

#[test]
fn ambiguous_paths_are_refused() {
    ambiguous_refused(Proto::Http1);
}

#[test]
fn ambiguous_paths_are_refused_over_http2() {
    ambiguous_refused(Proto::H2c);
}

fn ambiguous_refused(proto: Proto) {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    for path in [
        "/public/..%2forders/1",
        "/public/..%2Forders/1",
        "/public%2f..%2forders",
        "/public/..%5corders/1",
        "/public/..\\orders/1",
        "/public/%00",
        "/public/%zz",
        "/public/%2",
    ] {
        let r = proto.get(gw.addr(), path, &[]);
        assert_eq!(r.status, 400, "{path}: {}", r.body_str());
    }
    assert_eq!(up.requests_seen(), 0);
}

#[test]
fn the_upstream_gets_the_path_that_was_matched() {
    matched_path_forwarded(Proto::Http1);
}

#[test]
fn the_upstream_gets_the_path_that_was_matched_over_http2() {
    matched_path_forwarded(Proto::H2c);
}

fn matched_path_forwarded(proto: Proto) {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    let cases = [
        ("/public/a/../b?q=%2e%2e", "/public/b?q=%2e%2e"),
        ("/public//a///b/", "/public/a/b/"),
        ("/public/%7Euser/%41", "/public/~user/A"),
        ("/public/a%20b", "/public/a%20b"),
        ("/public/a/%2e", "/public/a/"),
    ];
    for (sent, seen) in cases {
        let r = proto.get(gw.addr(), sent, &[]);
        assert_eq!(r.status, 200, "{sent}");
        assert_eq!(up.last_request().unwrap().target, seen, "{sent}");
    }
    // The key segment is found after normalising, and removed.
    let r = proto.get(gw.addr(), &format!("/orders/./~{KEY}/x/../1"), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(up.last_request().unwrap().target, "/orders/1");
    let r = proto.get(gw.addr(), &format!("/orders/%7E{KEY}/1"), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(up.last_request().unwrap().target, "/orders/1");
}

#[test]
fn paths_are_case_sensitive() {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    // /ORDERS is not /orders: it matches no route here (no catch-all).
    let r = Proto::Http1.get(gw.addr(), "/ORDERS/1", &[("X-App-Key", KEY)]);
    assert_json_error(&r, 404);
    assert_eq!(up.requests_seen(), 0);
}
