//! Behaviour of `TestUpstream` and `RawUpstream`, driven through the kit's
//! own clients.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use sluicegate_testkit::upstream::pattern;
use sluicegate_testkit::{
    http_get, http_request, raw_exchange, try_http_get, KeepAliveClient, RawUpstream, TestUpstream,
};

#[test]
fn echo_describes_the_request() {
    let up = TestUpstream::start_with_id("a");
    let resp = http_request(
        up.addr(),
        "POST",
        "/echo/x?y=1",
        &[("X-Test", "quote\"d")],
        b"hello",
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-type"), Some("application/json"));
    assert_eq!(resp.header("x-upstream-id"), Some("a"));
    let body = resp.body_str();
    assert!(body.contains(r#""method":"POST""#), "{body}");
    assert!(body.contains(r#""target":"/echo/x?y=1""#), "{body}");
    assert!(body.contains(r#"["X-Test","quote\"d"]"#), "{body}");
    assert!(body.contains(r#""body_len":5"#), "{body}");
    assert!(body.contains(r#""body":"hello""#), "{body}");
    assert!(body.contains(r#""upstream_id":"a""#), "{body}");

    assert_eq!(up.requests_seen(), 1);
    assert_eq!(up.connections_accepted(), 1);
    let seen = up.last_request().unwrap();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path(), "/echo/x");
    assert_eq!(seen.version, "HTTP/1.1");
    assert_eq!(seen.header("x-test"), Some("quote\"d"));
    assert_eq!(seen.headers[0].0, "Host");
    assert_eq!(seen.body, b"hello");
    assert!(!seen.chunked);
}

#[test]
fn status_size_and_headers() {
    let up = TestUpstream::start();
    let resp = http_get(up.addr(), "/x?status=503", &[]);
    assert_eq!(resp.status, 503);
    assert_eq!(resp.body, b"ok\n");
    assert_eq!(resp.header("x-upstream-id"), None);

    let resp = http_get(
        up.addr(),
        "/x?size=1000&header=x-a:1&header=X-B:two%20words",
        &[],
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, pattern(1000));
    assert_eq!(resp.header("content-length"), Some("1000"));
    assert_eq!(resp.header("x-a"), Some("1"));
    assert_eq!(resp.header("x-b"), Some("two words"));

    let resp = http_get(up.addr(), "/x?status=204", &[]);
    assert_eq!(resp.status, 204);
    assert!(resp.body.is_empty());
    assert_eq!(resp.header("content-length"), None);
}

#[test]
fn head_gets_no_body() {
    let up = TestUpstream::start();
    let mut c = KeepAliveClient::connect(up.addr()).unwrap();
    let resp = c.request("HEAD", "/x?size=50", &[], b"").unwrap();
    assert_eq!(resp.header("content-length"), Some("50"));
    assert!(resp.body.is_empty());
    // The connection is still in sync for the next request.
    assert_eq!(c.get("/hello").unwrap().body, b"ok\n");
}

#[test]
fn chunked_replies() {
    let up = TestUpstream::start();
    let resp = http_get(up.addr(), "/x?chunked=1&size=100", &[]);
    assert!(resp.chunked);
    assert_eq!(resp.header("content-length"), None);
    assert_eq!(resp.body, pattern(100));
    // The wire carries four chunks of 25 bytes.
    let raw = raw_exchange(
        up.addr(),
        b"GET /x?chunked=1&size=8&close=1 HTTP/1.1\r\nHost: a\r\n\r\n",
        Duration::from_secs(5),
    );
    let raw = String::from_utf8(raw).unwrap();
    assert!(
        raw.ends_with("\r\n\r\n2\r\nab\r\n2\r\ncd\r\n2\r\nef\r\n2\r\ngh\r\n0\r\n\r\n"),
        "{raw}"
    );
}

#[test]
fn chunked_request_body_is_decoded() {
    let up = TestUpstream::start();
    let mut c = KeepAliveClient::connect(up.addr()).unwrap();
    c.send_raw(
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
          3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nTrailer: x\r\n\r\n",
    )
    .unwrap();
    let resp = c.read_response().unwrap();
    assert!(resp.body_str().contains(r#""body":"abcdefg""#));
    let seen = up.last_request().unwrap();
    assert!(seen.chunked);
    assert_eq!(seen.body, b"abcdefg");
}

#[test]
fn close_after_reply() {
    let up = TestUpstream::start();
    let mut c = KeepAliveClient::connect(up.addr()).unwrap();
    let resp = c.get("/x?close=1").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("connection"), Some("close"));
    assert!(c.wait_closed(Duration::from_secs(2)));
}

#[test]
fn close_before_reply() {
    let up = TestUpstream::start();
    let raw = raw_exchange(
        up.addr(),
        b"GET /x?close=before HTTP/1.1\r\nHost: a\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(raw.is_empty());
    assert_eq!(up.requests_seen(), 1);
    assert!(try_http_get(up.addr(), "/x?close=before", &[]).is_err());
}

#[test]
fn close_mid_body() {
    let up = TestUpstream::start();
    let raw = raw_exchange(
        up.addr(),
        b"GET /x?close=mid HTTP/1.1\r\nHost: a\r\n\r\n",
        Duration::from_secs(5),
    );
    let raw = String::from_utf8(raw).unwrap();
    assert!(raw.contains("Content-Length: 100\r\n"), "{raw}");
    assert!(raw.ends_with("\r\n\r\nabcdefghij"), "{raw}");
    let err = try_http_get(up.addr(), "/x?close=mid", &[]).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
}

#[test]
fn keep_alive_two_requests_one_connection() {
    let up = TestUpstream::start();
    let mut c = KeepAliveClient::connect(up.addr()).unwrap();
    assert_eq!(c.get("/a").unwrap().body, b"ok\n");
    assert_eq!(c.get("/b?size=3").unwrap().body, b"abc");
    assert_eq!(up.requests_seen(), 2);
    assert_eq!(up.connections_accepted(), 1);
    let seen = up.last_requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].connection, seen[1].connection);
    assert_eq!(seen[1].target, "/b?size=3");
}

#[test]
fn pipelined_requests_answered_in_order() {
    let up = TestUpstream::start();
    let mut c = KeepAliveClient::connect(up.addr()).unwrap();
    c.send_raw(
        b"GET /1?size=1 HTTP/1.1\r\nHost: a\r\n\r\n\
          POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi\
          GET /3?chunked=1&size=30 HTTP/1.1\r\nHost: a\r\n\r\n\
          HEAD /4 HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /5?status=304 HTTP/1.1\r\nHost: a\r\n\r\n\
          GET /6 HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .unwrap();
    assert_eq!(c.read_response().unwrap().body, b"a");
    assert!(c
        .read_response()
        .unwrap()
        .body_str()
        .contains("\"body\":\"hi\""));
    assert_eq!(c.read_response().unwrap().body, pattern(30));
    let head = c.read_response_for("HEAD").unwrap();
    assert_eq!(head.header("content-length"), Some("3"));
    assert!(head.body.is_empty());
    assert_eq!(c.read_response().unwrap().status, 304);
    assert_eq!(c.read_response().unwrap().body, b"ok\n");
    assert_eq!(up.requests_seen(), 6);
    assert_eq!(up.connections_accepted(), 1);
}

#[test]
fn expect_continue_is_answered_before_the_body() {
    let up = TestUpstream::start();
    let mut c = KeepAliveClient::connect(up.addr()).unwrap();
    c.send_raw(b"PUT /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    let interim = c.read_response().unwrap();
    assert_eq!(interim.status, 100);
    c.send_raw(b"data").unwrap();
    let resp = c.read_response().unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(up.last_request().unwrap().body, b"data");
}

#[test]
fn delays() {
    let up = TestUpstream::start();
    let t = Instant::now();
    assert_eq!(http_get(up.addr(), "/x?delay=150", &[]).status, 200);
    assert!(t.elapsed() >= Duration::from_millis(150));

    // body_delay: the head arrives first, the body later.
    let mut s = std::net::TcpStream::connect(up.addr()).unwrap();
    s.write_all(b"GET /x?body_delay=300&size=5 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let t = Instant::now();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).unwrap();
    assert!(t.elapsed() < Duration::from_millis(250));
    assert!(buf[..n].ends_with(b"\r\n\r\n"));
    let n = s.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"abcde");
    assert!(t.elapsed() >= Duration::from_millis(300));
}

#[test]
fn idle_close() {
    let up = TestUpstream::start();
    let mut c = KeepAliveClient::connect(up.addr()).unwrap();
    assert_eq!(c.get("/x?idle_close_ms=100").unwrap().status, 200);
    let t = Instant::now();
    assert!(c.wait_closed(Duration::from_secs(3)));
    assert!(t.elapsed() >= Duration::from_millis(80));
}

#[test]
fn idle_close_at_zero_closes_at_once() {
    let up = TestUpstream::start();
    let mut c = KeepAliveClient::connect(up.addr()).unwrap();
    assert_eq!(c.get("/x?idle_close_ms=0").unwrap().status, 200);
    let t = Instant::now();
    assert!(c.wait_closed(Duration::from_secs(3)));
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn http10_closes_by_default() {
    let up = TestUpstream::start();
    let raw = raw_exchange(
        up.addr(),
        b"GET /x HTTP/1.0\r\n\r\n",
        Duration::from_secs(5),
    );
    let raw = String::from_utf8(raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "{raw}");
    assert!(raw.contains("Connection: close\r\n"), "{raw}");
}

#[test]
fn malformed_request_gets_400() {
    let up = TestUpstream::start();
    let raw = raw_exchange(up.addr(), b"GARBAGE\r\n\r\n", Duration::from_secs(5));
    assert!(raw.starts_with(b"HTTP/1.1 400 "));
    assert_eq!(up.requests_seen(), 0);
}

#[test]
fn drop_stops_the_upstream() {
    let up = TestUpstream::start();
    let addr = up.addr();
    // An idle keep-alive connection must not block the drop.
    let mut c = KeepAliveClient::connect(addr).unwrap();
    assert_eq!(c.get("/x").unwrap().status, 200);
    let t = Instant::now();
    drop(up);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(c.wait_closed(Duration::from_secs(2)));
    assert!(std::net::TcpStream::connect(addr).is_err());
}

#[test]
fn raw_upstream_writes_what_the_test_says() {
    let up = RawUpstream::start(|mut s| {
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        let _ = s.write_all(b"HTTP/1.1 2000 Nope\r\n\r\n");
    });
    let raw = raw_exchange(up.addr(), b"GET / HTTP/1.1\r\n\r\n", Duration::from_secs(5));
    assert_eq!(raw, b"HTTP/1.1 2000 Nope\r\n\r\n");
    assert_eq!(up.connections_accepted(), 1);
}
