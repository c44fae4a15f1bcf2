//! Connection handling end to end: keep-alive on both sides, pipelining,
//! HTTP/1.0 and `Connection: close`, a pooled upstream connection closed
//! between requests, and `limits.max_connections` at accept.

mod http_common;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use http_common::{body_of, exchange, loopback, read_until_close, service, wait_until, Gw};
use sluicegate_testkit::{http_get, KeepAliveClient, TestUpstream};

fn gateway_to(up: std::net::SocketAddr, top: &str) -> Gw {
    let svc = service("up", &[up], "");
    Gw::start(&format!(
        r#"{top}services:
{svc}routes:
  - name: hello
    match: {{ path: /hello }}
    respond: {{ status: 200, body: "hello\n" }}
  - name: all
    match: {{ path_prefix: / }}
    service: up
"#
    ))
}

#[test]
fn many_requests_on_one_client_connection_reuse_one_upstream_connection() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    for i in 0..30 {
        let resp = client.get(&format!("/echo?i={i}")).unwrap();
        assert_eq!(resp.status, 200);
        assert!(!resp
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close")));
    }
    let seen = up.last_requests();
    assert_eq!(seen.len(), 30);
    let first = seen[0].connection;
    assert!(
        seen.iter().all(|r| r.connection == first),
        "upstream connections used: {:?}",
        seen.iter().map(|r| r.connection).collect::<Vec<_>>()
    );
    assert_eq!(up.connections_accepted(), 1);
    // The client connection was one connection too: still open.
    assert!(!client.wait_closed(Duration::from_millis(100)));
}

#[test]
fn pipelined_requests_answered_in_order() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    // The first is slow, the third is answered by the gateway itself, the
    // fourth carries a body: order must still hold.
    let host = format!("Host: {}\r\n", gw.addr());
    let mut batch = Vec::new();
    batch.extend_from_slice(
        format!("GET /x?delay=150&header=x-n:1 HTTP/1.1\r\n{host}\r\n").as_bytes(),
    );
    batch
        .extend_from_slice(format!("GET /x?header=x-n:2&size=2 HTTP/1.1\r\n{host}\r\n").as_bytes());
    batch.extend_from_slice(format!("GET /hello HTTP/1.1\r\n{host}\r\n").as_bytes());
    batch.extend_from_slice(
        format!("POST /echo?header=x-n:4 HTTP/1.1\r\n{host}Content-Length: 4\r\n\r\nbody")
            .as_bytes(),
    );
    batch.extend_from_slice(
        format!("HEAD /x?header=x-n:5&size=9 HTTP/1.1\r\n{host}\r\n").as_bytes(),
    );
    batch.extend_from_slice(
        format!("GET /x?header=x-n:6&chunked=1&size=30 HTTP/1.1\r\n{host}\r\n").as_bytes(),
    );
    client.send_raw(&batch).unwrap();

    let r1 = client.read_response().unwrap();
    assert_eq!(r1.header("x-n"), Some("1"));
    assert_eq!(r1.body, b"ok\n");
    let r2 = client.read_response().unwrap();
    assert_eq!(r2.header("x-n"), Some("2"));
    assert_eq!(r2.body, b"ab");
    let r3 = client.read_response().unwrap();
    assert_eq!(r3.body_str(), "hello\n");
    let r4 = client.read_response().unwrap();
    assert_eq!(r4.header("x-n"), Some("4"));
    assert!(
        r4.body_str().contains("\"body\":\"body\""),
        "{}",
        r4.body_str()
    );
    let r5 = client.read_response_for("HEAD").unwrap();
    assert_eq!(r5.header("x-n"), Some("5"));
    assert_eq!(r5.header("content-length"), Some("9"));
    let r6 = client.read_response().unwrap();
    assert_eq!(r6.header("x-n"), Some("6"));
    assert_eq!(r6.body, sluicegate_testkit::upstream::pattern(30));
    assert_eq!(up.requests_seen(), 5);
}

#[test]
fn hundreds_of_pipelined_requests_in_one_write() {
    // About 20 KiB of requests at once: more than one read buffer's worth.
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let host = format!("Host: {}\r\n", gw.addr());
    let mut batch = Vec::new();
    for i in 0..300 {
        let path = if i % 3 == 0 {
            "/hello".to_string()
        } else {
            format!("/x?header=x-n:{i}")
        };
        batch.extend_from_slice(format!("GET {path} HTTP/1.1\r\n{host}\r\n").as_bytes());
    }
    client.send_raw(&batch).unwrap();
    for i in 0..300 {
        let resp = client.read_response().unwrap();
        assert_eq!(resp.status, 200, "response {i}");
        if i % 3 == 0 {
            assert_eq!(resp.body_str(), "hello\n", "response {i}");
        } else {
            assert_eq!(resp.header("x-n"), Some(i.to_string().as_str()));
        }
    }
    assert_eq!(up.requests_seen(), 200);
    assert_eq!(up.connections_accepted(), 1);
}

#[test]
fn concurrent_clients_never_get_each_others_responses() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let addr = gw.addr();
    let threads: Vec<_> = (0..16)
        .map(|t| {
            thread::spawn(move || {
                let mut client = KeepAliveClient::connect(addr).unwrap();
                for i in 0..25 {
                    let path = format!("/echo?t={t}&i={i}&delay={}", (t + i) % 3);
                    let resp = client.get(&path).unwrap();
                    assert_eq!(resp.status, 200);
                    let want = format!("\"target\":\"{path}\"");
                    assert!(
                        resp.body_str().contains(&want),
                        "{path}: {}",
                        resp.body_str()
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    assert_eq!(up.requests_seen(), 16 * 25);
    // Pooled: far fewer upstream connections than requests.
    assert!(
        up.connections_accepted() <= 16,
        "{}",
        up.connections_accepted()
    );
}

#[test]
fn sequential_client_connections_share_pooled_upstream_connections() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    for i in 0..20 {
        let resp = http_get(gw.addr(), &format!("/x?i={i}"), &[]);
        assert_eq!(resp.status, 200);
    }
    // One pooled connection per worker at most (workers: 2).
    assert!(
        up.connections_accepted() <= 2,
        "{} upstream connections for 20 sequential requests",
        up.connections_accepted()
    );
}

#[test]
fn http10_closes_by_default_and_keeps_alive_on_request() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");

    // Default for HTTP/1.0: one response, then the gateway closes.
    let got = exchange(
        gw.port,
        b"GET /x?size=4 HTTP/1.0\r\n\r\n",
        Duration::from_secs(3),
    );
    assert!(got.closed, "HTTP/1.0 connection left open: {}", got.text());
    assert_eq!(got.status(), Some(200));
    assert_eq!(body_of(&got.text()), "abcd");

    // With Connection: keep-alive the connection serves a second request.
    let mut s = TcpStream::connect(loopback(gw.port)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /x?size=3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let first = read_until_close(&mut s, Duration::from_millis(500));
    assert!(!first.closed, "keep-alive HTTP/1.0 connection closed");
    let text = first.text();
    assert!(text.starts_with("HTTP/1."), "{text}");
    let head = text.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert!(head.contains("content-length: 3"), "{head}");
    assert!(head.contains("connection: keep-alive"), "{head}");
    assert_eq!(body_of(&text), "abc");
    s.write_all(b"GET /hello HTTP/1.0\r\n\r\n").unwrap();
    let second = read_until_close(&mut s, Duration::from_secs(3));
    assert_eq!(second.status(), Some(200), "{}", second.text());
    assert_eq!(body_of(&second.text()), "hello\n");
    assert!(
        second.closed,
        "second request had no keep-alive: must close"
    );
}

#[test]
fn connection_close_closes_after_the_response() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    for path in ["/x?size=10", "/hello"] {
        let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
        let resp = client
            .request("GET", path, &[("Connection", "close")], b"")
            .unwrap();
        assert_eq!(resp.status, 200);
        assert!(
            resp.header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close")),
            "{path}: {:?}",
            resp.headers
        );
        assert!(
            client.wait_closed(Duration::from_secs(2)),
            "{path}: connection stayed open after Connection: close"
        );
    }
    // A close from the client side does not close the upstream connection.
    assert_eq!(up.connections_accepted(), 1);
}

#[test]
fn pooled_connection_closed_by_upstream_is_retried_on_a_fresh_one() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let resp = client.get("/echo?idle_close_ms=50").unwrap();
    assert_eq!(resp.status, 200);
    // The upstream closes the idle pooled connection meanwhile.
    thread::sleep(Duration::from_millis(200));
    assert!(wait_until(Duration::from_secs(2), || up.connections_open() == 0));
    let resp = client.get("/echo?again=1").unwrap();
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    assert_eq!(up.connections_accepted(), 2);
    assert_eq!(up.last_request().unwrap().target, "/echo?again=1");
    assert_eq!(up.requests_seen(), 2);

    // Same with a POST body: the body must arrive intact on the fresh connection.
    let resp = client.get("/echo?idle_close_ms=50").unwrap();
    assert_eq!(resp.status, 200);
    thread::sleep(Duration::from_millis(200));
    let resp = client.request("POST", "/echo", &[], b"payload").unwrap();
    assert!(resp.status == 200 || resp.status == 502, "{}", resp.status);
    if resp.status == 200 {
        assert_eq!(up.last_request().unwrap().body, b"payload");
    }
}

#[test]
fn max_connections_refuses_at_accept_and_recovers() {
    let mut gw = gateway_to(loopback(1), "limits: { max_connections: 5 }\n");
    // Let the readiness probe's connection be released.
    thread::sleep(Duration::from_millis(200));
    let mut held = Vec::new();
    for _ in 0..5 {
        let mut c = KeepAliveClient::connect(gw.addr()).unwrap();
        assert_eq!(c.get("/hello").unwrap().status, 200);
        held.push(c);
    }
    let t0 = Instant::now();
    let mut sixth = TcpStream::connect(loopback(gw.port)).unwrap();
    let _ = sixth.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    let got = read_until_close(&mut sixth, Duration::from_secs(2));
    assert!(
        got.closed && got.status().is_none(),
        "sixth connection was served: {}",
        got.text()
    );
    assert!(t0.elapsed() < Duration::from_secs(2));
    // The five held connections still work.
    for c in held.iter_mut() {
        assert_eq!(c.get("/hello").unwrap().status, 200);
    }
    assert!(gw.gw.is_running(), "gateway process died");
    drop(held);
    // Once they are gone, new connections are served again.
    let ok = wait_until(Duration::from_secs(3), || {
        sluicegate_testkit::try_http_get(gw.addr(), "/hello", &[]).is_ok_and(|r| r.status == 200)
    });
    assert!(ok, "gateway did not serve again after connections closed");
    for _ in 0..5 {
        assert_eq!(http_get(gw.addr(), "/hello", &[]).status, 200);
    }
}
