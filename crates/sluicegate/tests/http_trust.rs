//! What the upstream receives can be trusted: a `Connection` token never
//! drops `Host`, a client-sent `X-App-Id` never reaches an upstream on any
//! route (and `remove: [x-app-id]` is a valid policy), an invalid `Host`
//! is a 400, a fragment in the target is refused, and an `Expect` the
//! gateway cannot meet is a 417.

mod http_common;

use std::time::Duration;

use http_common::{exchange, service, status_of, Gw};
use sluicegate_testkit::TestUpstream;

const WAIT: Duration = Duration::from_millis(500);

fn gw(up: &TestUpstream) -> Gw {
    Gw::start(&format!(
        r#"services:
{}
routes:
  - name: api
    match: {{ path_prefix: /api }}
    service: s
  - name: cleaned
    match: {{ path_prefix: /cleaned }}
    service: s
    request_headers: {{ remove: [x-app-id] }}
"#,
        service("s", &[up.addr()], "")
    ))
}

fn send(gw: &Gw, raw: &str) -> (Option<u16>, bool) {
    let ex = exchange(gw.addr().port(), raw.as_bytes(), WAIT);
    (status_of(&ex.data), ex.closed)
}

#[test]
fn a_connection_token_never_drops_host() {
    let up = TestUpstream::start();
    let gw = gw(&up);
    let (status, _) = send(
        &gw,
        "GET /api/x HTTP/1.1\r\nHost: svc.example\r\nConnection: Host, close\r\n\r\n",
    );
    assert_eq!(status, Some(200));
    let seen = up.last_request().unwrap();
    assert_eq!(seen.header("host"), Some("svc.example"), "{seen:?}");
}

#[test]
fn a_client_sent_x_app_id_never_reaches_the_upstream() {
    let up = TestUpstream::start();
    let gw = gw(&up);
    for path in ["/api/x", "/cleaned/x"] {
        let (status, _) = send(
            &gw,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: a\r\nX-App-Id: admin\r\nConnection: close\r\n\r\n"
            ),
        );
        assert_eq!(status, Some(200), "{path}");
        let seen = up.last_request().unwrap();
        assert_eq!(seen.header("x-app-id"), None, "{path}: {seen:?}");
    }
}

#[test]
fn an_invalid_host_is_refused() {
    let up = TestUpstream::start();
    let gw = gw(&up);
    for host in ["a b", "t/orders", "user@a", "a:port", "[zz]"] {
        let (status, closed) = send(&gw, &format!("GET /api/x HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(status, Some(400), "Host: {host}");
        assert!(closed, "Host: {host}: the connection stays open");
    }
    // Valid ones still pass: a name with a port, IPv4, IPv6.
    for host in [
        "api.example:8080",
        "127.0.0.1",
        "[::1]:80",
        "xn--bcher-kva.example",
    ] {
        let (status, _) = send(
            &gw,
            &format!("GET /api/x HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        );
        assert_eq!(status, Some(200), "Host: {host}");
    }
    assert_eq!(up.requests_seen(), 4);
}

#[test]
fn a_fragment_in_the_target_is_refused() {
    let up = TestUpstream::start();
    let gw = gw(&up);
    for target in ["/api/x#frag", "/api/x?a=1#frag"] {
        let (status, _) = send(&gw, &format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert_eq!(status, Some(400), "{target}");
    }
    assert_eq!(up.requests_seen(), 0);
}

#[test]
fn an_expectation_the_gateway_cannot_meet_is_417() {
    let up = TestUpstream::start();
    let gw = gw(&up);
    let (status, closed) = send(
        &gw,
        "POST /api/x HTTP/1.1\r\nHost: a\r\nExpect: something-else\r\nContent-Length: 2\r\n\r\nhi",
    );
    assert_eq!(status, Some(417));
    assert!(closed);
    assert_eq!(up.requests_seen(), 0);
    // 100-continue is still met.
    let (status, _) = send(
        &gw,
        "POST /api/x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi",
    );
    // (The body came with the head, so no interim 100 is needed.)
    assert_eq!(status, Some(200));
    assert_eq!(up.requests_seen(), 1);
}
