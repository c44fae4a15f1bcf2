//! Strict request framing on raw sockets: every malformed or ambiguous
//! request is refused with the stated status, the connection is closed, and
//! the upstream never receives a request (nor a smuggled second one).

mod http_common;

use std::thread;
use std::time::Duration;

use http_common::{assert_json_error_body, body_of, exchange, service, Exchange, Gw};
use sluicegate_testkit::{http_get, TestUpstream};

const WAIT: Duration = Duration::from_secs(2);

/// A gateway proxying everything to a fresh test upstream.
fn setup(limits: &str) -> (TestUpstream, Gw) {
    let up = TestUpstream::start();
    let svc = service("up", &[up.addr()], "");
    let gw = Gw::start(&format!(
        "{limits}services:\n{svc}routes:\n  - name: all\n    match: {{ path_prefix: / }}\n    service: up\n"
    ));
    (up, gw)
}

/// Asserts `got` is exactly one `status` response with a JSON error body,
/// followed by the gateway closing the connection.
fn assert_refused(got: &Exchange, status: u16, what: &str) {
    let text = got.text();
    assert_eq!(got.status(), Some(status), "{what}: got {text:?}");
    assert_eq!(
        got.statuses(),
        vec![status],
        "{what}: more than one response: {text:?}"
    );
    assert!(got.closed, "{what}: connection left open after {status}");
    assert_json_error_body(body_of(&text), status);
}

/// Gives a wrongly forwarded request time to arrive, then checks none did.
fn assert_upstream_untouched(up: &TestUpstream, what: &str) {
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        up.requests_seen(),
        0,
        "{what}: upstream got {:?}",
        up.last_requests()
    );
}

/// Sends `req` to a fresh gateway and expects `status`, a close and an untouched upstream.
fn refused(req: &[u8], status: u16, what: &str) {
    let (up, gw) = setup("");
    let got = exchange(gw.port, req, WAIT);
    assert_refused(&got, status, what);
    assert_upstream_untouched(&up, what);
    // The gateway still serves well-formed requests afterwards.
    assert_eq!(http_get(gw.addr(), "/ok", &[]).status, 200, "{what}");
}

#[test]
fn content_length_with_transfer_encoding() {
    refused(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
        "CL + TE",
    );
}

#[test]
fn differing_content_lengths() {
    refused(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        400,
        "two Content-Length",
    );
}

#[test]
fn differing_content_lengths_in_one_field() {
    refused(
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!",
        400,
        "Content-Length: 5, 6",
    );
}

#[test]
fn obsolete_line_folding() {
    refused(
        b"GET / HTTP/1.1\r\nHost: x\r\nX-Folded: first\r\n  second\r\n\r\n",
        400,
        "obs-fold",
    );
}

#[test]
fn bare_lf_line_endings() {
    refused(b"GET / HTTP/1.1\nHost: x\n\n", 400, "bare LF everywhere");
}

#[test]
fn bare_lf_in_one_header_line() {
    refused(
        b"GET / HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n",
        400,
        "bare LF after one header",
    );
}

#[test]
fn chunked_not_final_transfer_coding() {
    refused(
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        400,
        "TE: chunked, identity",
    );
}

#[test]
fn missing_host_in_http11() {
    refused(b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n", 400, "no Host");
}

#[test]
fn two_host_headers() {
    refused(
        b"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
        400,
        "two Host fields",
    );
}

#[test]
fn header_section_over_max_header_bytes_is_431() {
    let (up, gw) = setup("limits: { max_header_bytes: 2048 }\n");
    let big = "a".repeat(4000);
    let req = format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
    let got = exchange(gw.port, req.as_bytes(), WAIT);
    assert_refused(&got, 431, "header over 2048 bytes");
    assert_upstream_untouched(&up, "431");
    // Just under the limit is fine.
    let small = "a".repeat(1500);
    let resp = http_get(gw.addr(), "/ok", &[("X-Small", &small)]);
    assert_eq!(resp.status, 200);
    assert_eq!(up.requests_seen(), 1);
}

#[test]
fn content_length_over_max_body_bytes_is_413() {
    let (up, gw) = setup("limits: { max_body_bytes: 1024 }\n");
    // Only the head is sent: the gateway must decide from Content-Length.
    let got = exchange(
        gw.port,
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2048\r\n\r\n",
        WAIT,
    );
    assert_refused(&got, 413, "Content-Length 2048 over 1024");
    assert_upstream_untouched(&up, "413");
    // With Expect: 100-continue the client is told 413 instead of 100.
    let got = exchange(
        gw.port,
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n",
        WAIT,
    );
    assert_refused(&got, 413, "Expect with Content-Length over the limit");
    assert_upstream_untouched(&up, "413 with Expect");
    // A body at the limit passes.
    let resp = sluicegate_testkit::http_request(gw.addr(), "POST", "/echo", &[], &[b'x'; 1024]);
    assert_eq!(resp.status, 200);
    assert_eq!(up.last_request().unwrap().body.len(), 1024);
}

#[test]
fn chunked_body_growing_past_max_body_bytes() {
    let (up, gw) = setup("limits: { max_body_bytes: 1024 }\n");
    let mut req = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..4 {
        req.extend_from_slice(b"200\r\n");
        req.extend_from_slice(&[b'y'; 512]);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let got = exchange(gw.port, &req, WAIT);
    assert!(got.closed, "connection left open: {}", got.text());
    let statuses = got.statuses();
    assert!(
        statuses.is_empty() || statuses == vec![413],
        "expected 413 or a bare close, got {:?}",
        got.text()
    );
    // The head may have been forwarded, but never a complete (truncated) request.
    assert_upstream_untouched(&up, "chunked body over the limit");
}

#[test]
fn invalid_chunk_size_does_not_desynchronise() {
    let (up, gw) = setup("");
    let req = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
5\r\nhello\r\nzz\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n0\r\n\r\n\
GET /smuggled2 HTTP/1.1\r\nHost: x\r\n\r\n";
    let got = exchange(gw.port, req, WAIT);
    assert!(got.closed, "connection left open: {}", got.text());
    let statuses = got.statuses();
    assert!(
        statuses.is_empty() || statuses == vec![400],
        "expected one 400 or a bare close, got {:?}",
        got.text()
    );
    thread::sleep(Duration::from_millis(100));
    let seen = up.last_requests();
    assert!(
        seen.iter().all(|r| !r.target.contains("smuggled")),
        "smuggled request reached the upstream: {seen:?}"
    );
    assert!(
        seen.iter().all(|r| r.body != b"hello"),
        "a truncated body was delivered as complete: {seen:?}"
    );
    // The next request upstream is exactly what the next client sent,
    // not leftovers of the broken body on a reused connection.
    let before = up.requests_seen();
    let resp = http_get(gw.addr(), "/echo?next=1", &[]);
    assert_eq!(resp.status, 200);
    assert_eq!(up.requests_seen(), before + 1);
    assert_eq!(up.last_request().unwrap().target, "/echo?next=1");
}

#[test]
fn smuggling_with_cl_and_te_never_reaches_upstream_as_two_requests() {
    let variants: [&[u8]; 4] = [
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n\
0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n\
5c\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n0\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\nTransfer-Encoding : chunked\r\n\r\n\
0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\nTransfer-Encoding: xchunked\r\n\r\n\
0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    ];
    let (up, gw) = setup("");
    for (i, req) in variants.iter().enumerate() {
        let got = exchange(gw.port, req, WAIT);
        assert_refused(&got, 400, &format!("smuggling variant {i}"));
    }
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        up.requests_seen(),
        0,
        "upstream got {:?}",
        up.last_requests()
    );
}

#[test]
fn body_of_a_request_answered_by_the_gateway_is_not_parsed_as_a_request() {
    // A 404 (no route) for a POST whose body looks like a request: the body
    // must be consumed as a body, so only the real second request is answered.
    let gw = Gw::start(
        "routes:\n  - name: hello\n    match: { path: /hello }\n    respond: { status: 200, body: \"hello\" }\n",
    );
    let inner = b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut req = format!(
        "POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        inner.len()
    )
    .into_bytes();
    req.extend_from_slice(inner);
    req.extend_from_slice(b"GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let got = exchange(gw.port, &req, WAIT);
    assert_eq!(got.statuses(), vec![404, 200], "{}", got.text());
    assert_eq!(got.text().matches("hello").count(), 1, "{}", got.text());
}

/// The request-smuggling and framing cases of the resilience issue, in one
/// list on one gateway: each must be refused with one of the statuses
/// given, the connection closed, and nothing reach the upstream.
#[test]
fn the_smuggling_and_framing_list() {
    let long_line = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
    let many_headers = format!(
        "GET / HTTP/1.1\r\nHost: x\r\n{}\r\n",
        "X-Filler: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n".repeat(2000)
    );
    let cases: Vec<(&str, Vec<u8>, &[u16])> = vec![
        ("CL and TE", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), &[400]),
        ("TE then CL", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n".to_vec(), &[400]),
        ("TE chunked, identity", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n".to_vec(), &[400, 501]),
        ("TE identity", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n".to_vec(), &[400, 501]),
        ("TE xchunked", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n".to_vec(), &[400, 501]),
        ("two TE headers, chunked first", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n".to_vec(), &[400, 501]),
        ("TE in HTTP/1.0", b"POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), &[400]),
        ("negative CL", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n".to_vec(), &[400]),
        ("CL with a sign", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello".to_vec(), &[400]),
        ("huge CL", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n".to_vec(), &[400, 413]),
        ("CL not a number", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5x\r\n\r\nhello".to_vec(), &[400]),
        ("differing CLs", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_vec(), &[400]),
        ("bad chunk size", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n".to_vec(), &[400]),
        ("NUL in a chunk extension", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\x00\r\nhello\r\n0\r\n\r\n".to_vec(), &[400]),
        ("header name with a space", b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: y\r\n\r\n".to_vec(), &[400]),
        ("space before the colon", b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nhello".to_vec(), &[400]),
        ("NUL in a header value", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n".to_vec(), &[400]),
        ("NUL in the target", b"GET /a\x00b HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), &[400]),
        ("bare CR", b"GET / HTTP/1.1\r\nHost: x\rX-A: b\r\n\r\n".to_vec(), &[400]),
        ("obsolete line folding", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n".to_vec(), &[400]),
        ("no Host in HTTP/1.1", b"GET / HTTP/1.1\r\n\r\n".to_vec(), &[400]),
        ("two Hosts", b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec(), &[400]),
        ("over-long request line", long_line.into_bytes(), &[414, 431, 400]),
        ("over-long header section", many_headers.into_bytes(), &[431]),
        ("unknown HTTP version", b"GET / HTTP/2.7\r\nHost: x\r\n\r\n".to_vec(), &[400, 505]),
    ];
    for (what, req, statuses) in &cases {
        let (up, gw) = setup("");
        let got = exchange(gw.port, req, WAIT);
        let status = got.status();
        assert!(
            status.is_some_and(|s| statuses.contains(&s)),
            "{what}: expected one of {statuses:?}, got {:?}",
            got.text()
        );
        assert_eq!(got.statuses().len(), 1, "{what}: {:?}", got.text());
        assert!(got.closed, "{what}: connection left open");
        assert_upstream_untouched(&up, what);
    }
}

/// A valid request written one byte at a time, and a `Transfer-Encoding`
/// value with leading whitespace (`\tchunked`, which is `chunked` once the
/// optional whitespace is trimmed): each reaches the upstream exactly once,
/// whole.
#[test]
fn tiny_writes_and_whitespace_before_chunked_are_one_request_each() {
    use std::io::{Read, Write};
    let (up, gw) = setup("");
    let mut s = std::net::TcpStream::connect(gw.addr()).unwrap();
    s.set_nodelay(true).unwrap();
    let req = b"POST /echo/tiny HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
    for b in req.iter() {
        s.write_all(&[*b]).unwrap();
        thread::sleep(Duration::from_millis(1));
    }
    let mut out = Vec::new();
    s.set_read_timeout(Some(WAIT)).unwrap();
    let _ = s.read_to_end(&mut out);
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    let got = exchange(
        gw.port,
        b"POST /echo/tab HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\tchunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        WAIT,
    );
    assert_eq!(got.status(), Some(200), "{:?}", got.text());
    thread::sleep(Duration::from_millis(100));
    let seen = up.last_requests();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|r| r.body == b"hello"), "{seen:?}");
}
