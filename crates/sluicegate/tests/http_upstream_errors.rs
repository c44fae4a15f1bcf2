//! Upstream failures end to end: connect refused (502), response header
//! timeout (504, over HTTP/1.1 and HTTP/2 streams), an endpoint at `max_connections_per_endpoint` (wait, then
//! 503), an upstream closing before replying or mid-body, an invalid
//! status line, a head over 64 KiB, and bodies longer than their
//! `Content-Length` or sent after a `HEAD` (never pooled). Error bodies are small JSON without internal detail.

mod http_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use http_common::{assert_json_error, loopback, service, wait_until, Gw};
use sluicegate_testkit::{
    free_port, http_get, read_request_head, KeepAliveClient, Proto, RawUpstream, TestUpstream,
};

fn gateway_to(up: SocketAddr, service_extra: &str) -> Gw {
    let svc = service("up", &[up], service_extra);
    Gw::start(&format!(
        "services:\n{svc}routes:\n  - name: all\n    match: {{ path_prefix: / }}\n    service: up\n"
    ))
}

#[test]
fn connect_refused_is_502_json() {
    // A port nothing listens on.
    let gw = gateway_to(loopback(free_port()), "");
    let t0 = Instant::now();
    let resp = http_get(gw.addr(), "/x", &[]);
    assert_json_error(&resp, 502);
    assert!(t0.elapsed() < Duration::from_secs(3));
    // The client connection survives an upstream error.
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    assert_json_error(&client.get("/a").unwrap(), 502);
    assert_json_error(&client.get("/b").unwrap(), 502);
}

#[test]
fn response_header_timeout_is_504_in_bounded_time() {
    header_timeout(Proto::Http1);
}

#[test]
fn response_header_timeout_is_504_in_bounded_time_over_http2() {
    header_timeout(Proto::H2c);
}

fn header_timeout(proto: Proto) {
    let up = TestUpstream::start();
    let gw = gateway_to(
        up.addr(),
        "    timeouts: { connect: 1s, response_header: 300ms }\n",
    );
    let t0 = Instant::now();
    let resp = proto.get(gw.addr(), "/x?delay=1500", &[]);
    let took = t0.elapsed();
    assert_json_error(&resp, 504);
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
        "504 after {took:?}"
    );
    // A reply within the timeout is fine.
    let resp = proto.get(gw.addr(), "/x?delay=50", &[]);
    assert_eq!(resp.status, 200);
}

#[test]
fn response_body_timeout_cuts_a_stalled_body() {
    let up = TestUpstream::start();
    let gw = gateway_to(
        up.addr(),
        "    timeouts: { connect: 1s, response_header: 5s, response_body: 300ms }\n",
    );
    // The head comes at once, the 100-byte body after 2 s: the client gets
    // the head, then its connection is closed after about 300 ms.
    let mut s = TcpStream::connect(gw.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t0 = Instant::now();
    s.write_all(b"GET /x?size=100&body_delay=2000 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let took = t0.elapsed();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let body = &got[got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
    assert!(
        body.len() < 100,
        "the stalled body was not cut: {} bytes",
        body.len()
    );
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1500),
        "cut after {took:?}"
    );
    // A pause shorter than the timeout is fine.
    let resp = http_get(gw.addr(), "/x?size=100&body_delay=50", &[]);
    assert_eq!((resp.status, resp.body.len()), (200, 100));
}

#[test]
fn slow_request_body_does_not_count_against_response_header_timeout() {
    // The response header timeout starts once the request is sent: a client
    // taking 800 ms to upload its body still gets the upstream's answer.
    let up = TestUpstream::start();
    let gw = gateway_to(
        up.addr(),
        "    timeouts: { connect: 1s, response_header: 300ms }\n",
    );
    let mut client = TcpStream::connect(gw.addr()).unwrap();
    client
        .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n")
        .unwrap();
    for byte in b"slowbody" {
        thread::sleep(Duration::from_millis(100));
        client.write_all(&[*byte]).unwrap();
    }
    let head = http_common::read_head(&mut client, Duration::from_secs(3)).expect("a response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(up.last_request().unwrap().body, b"slowbody");
}

#[test]
fn endpoint_at_max_connections_gives_503_after_connect_timeout() {
    let up = TestUpstream::start();
    let gw = gateway_to(
        up.addr(),
        "    max_connections_per_endpoint: 1\n    timeouts: { connect: 300ms, response_header: 5s }\n",
    );
    let addr = gw.addr();
    let slow = thread::spawn(move || http_get(addr, "/x?delay=1500", &[]));
    assert!(
        wait_until(Duration::from_secs(3), || up.requests_seen() == 1),
        "slow request never reached the upstream"
    );
    let t0 = Instant::now();
    let resp = http_get(gw.addr(), "/x?second=1", &[]);
    let took = t0.elapsed();
    assert_json_error(&resp, 503);
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_millis(1200),
        "503 after {took:?}: should wait about the connect timeout"
    );
    assert_eq!(
        up.requests_seen(),
        1,
        "second request must not be forwarded"
    );
    assert_eq!(slow.join().unwrap().status, 200);
}

#[test]
fn endpoint_at_max_connections_waits_for_a_free_connection() {
    let up = TestUpstream::start();
    let gw = gateway_to(
        up.addr(),
        "    max_connections_per_endpoint: 1\n    timeouts: { connect: 2s, response_header: 5s }\n",
    );
    let addr = gw.addr();
    let slow = thread::spawn(move || {
        let resp = http_get(addr, "/x?delay=400", &[]);
        (resp, Instant::now())
    });
    assert!(wait_until(Duration::from_secs(3), || up.requests_seen() == 1));
    let t0 = Instant::now();
    let resp = http_get(gw.addr(), "/x?second=1", &[]);
    let second_done = Instant::now();
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    let (first, first_done) = slow.join().unwrap();
    assert_eq!(first.status, 200);
    // The second request waited for the first to finish (it was queued,
    // not sent on a second connection).
    assert!(
        second_done + Duration::from_millis(50) >= first_done,
        "second request finished {:?} before the first",
        first_done.saturating_duration_since(second_done)
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(up.requests_seen(), 2);
}

#[test]
fn upstream_closing_before_reply_is_502() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let resp = http_get(gw.addr(), "/x?close=before", &[]);
    assert_json_error(&resp, 502);
    // Retried at most once, on a fresh connection.
    assert!(
        (1..=2).contains(&up.requests_seen()),
        "{}",
        up.requests_seen()
    );
    assert_eq!(http_get(gw.addr(), "/x", &[]).status, 200);
}

#[test]
fn upstream_closing_mid_body_closes_the_client_connection() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let t0 = Instant::now();
    let got = client.get("/x?close=mid");
    // The head (Content-Length: 100) was already sent: the client must see
    // a short body followed by a close, never a complete response.
    assert!(got.is_err(), "truncated response looked complete: {got:?}");
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[test]
fn invalid_status_line_from_upstream_is_502() {
    let raw = RawUpstream::start(|mut s: TcpStream| {
        if read_request_head(&mut s) {
            let _ = s.write_all(b"HTTP/1.1 2xx Whatever\r\nContent-Length: 2\r\n\r\nhi");
        }
    });
    let gw = gateway_to(raw.addr(), "");
    let resp = http_get(gw.addr(), "/x", &[]);
    assert_json_error(&resp, 502);

    let junk = RawUpstream::start(|mut s: TcpStream| {
        if read_request_head(&mut s) {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n\r\n");
        }
    });
    let gw = gateway_to(junk.addr(), "");
    let resp = http_get(gw.addr(), "/x", &[]);
    assert_json_error(&resp, 502);
}

/// An upstream that answers every request on a connection with `reply`
/// (after the head), counting connections; it keeps the connection open.
fn replying(reply: &'static [u8]) -> (RawUpstream, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let count = conns.clone();
    let up = RawUpstream::start(move |mut s: TcpStream| {
        count.fetch_add(1, Ordering::SeqCst);
        while read_request_head(&mut s) {
            if s.write_all(reply).is_err() {
                return;
            }
        }
    });
    (up, conns)
}

#[test]
fn a_body_longer_than_its_content_length_is_cut_and_the_connection_dropped() {
    use std::sync::atomic::Ordering;
    // Five bytes promised, ten sent: the extra five must never be read as
    // the next response.
    let (up, conns) = replying(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/");
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    for i in 0..3 {
        let r = client.get(&format!("/x/{i}")).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
    }
    assert_eq!(
        conns.load(Ordering::SeqCst),
        3,
        "never pooled with bytes left over"
    );
}

#[test]
fn a_body_on_a_response_to_head_is_not_relayed_and_the_connection_dropped() {
    use std::sync::atomic::Ordering;
    let (up, conns) = replying(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    for i in 0..3 {
        client.send("HEAD", &format!("/h/{i}"), &[], b"").unwrap();
        let r = client.read_response_for("HEAD").unwrap();
        assert_eq!(r.status, 200);
        assert!(r.body.is_empty());
    }
    // The client connection is still in sync: a GET after the HEADs.
    let r = client.get("/after").unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello"[..]));
    assert!(
        conns.load(Ordering::SeqCst) >= 3,
        "HEAD bodies never pooled"
    );
}

#[test]
fn a_response_head_over_64_kib_is_502() {
    static HUGE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let huge = HUGE.get_or_init(|| {
        let mut v = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..2000 {
            v.extend_from_slice(format!("x-filler-{i}: {}\r\n", "y".repeat(40)).as_bytes());
        }
        v.extend_from_slice(b"Content-Length: 2\r\n\r\nhi");
        v
    });
    let (up, _) = replying(huge);
    let gw = gateway_to(up.addr(), "    retries: { attempts: 1 }\n");
    assert_json_error(&http_get(gw.addr(), "/big", &[]), 502);
}

#[test]
fn bytes_sent_after_a_complete_response_retire_the_pooled_connection() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Each connection answers its first request properly, then 50 ms later
    // sends a whole extra response nobody asked for. Reused, the connection
    // would hand that stray response to the next client request.
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let count = conns.clone();
    let up = RawUpstream::start(move |mut s: TcpStream| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        while read_request_head(&mut s) {
            let body = format!("conn{n}");
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            if s.write_all(reply.as_bytes()).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY");
        }
    });
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    for i in 0..3 {
        let resp = client.get("/x").unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(
            resp.body_str(),
            format!("conn{i}"),
            "request {i} got another's answer"
        );
        // Let the stray response arrive before the next request.
        thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(conns.load(Ordering::SeqCst), 3);
}
