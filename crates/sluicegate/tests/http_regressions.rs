//! Regression tests for gateway bugs found by the end-to-end suite: each
//! comment says what was wrong, the test proves it stays fixed.

mod http_common;

use std::time::Duration;

use http_common::{exchange, loopback, service, Gw};
use sluicegate_testkit::{free_port, TestUpstream};

/// Sends HEAD `path` followed by a pipelined `GET /hello` and returns the raw bytes.
fn head_then_get(gw: &Gw, path: &str) -> String {
    let req = format!(
        "HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\nGET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    exchange(gw.port, req.as_bytes(), Duration::from_secs(3)).text()
}

// Was a bug: error responses the gateway generates for upstream failures
// (502 connect refused / upstream closed, 504 response header timeout) carry
// their JSON body even when the request was HEAD. A HEAD response must not
// have content (RFC 9110 9.3.2); a keep-alive client then reads the JSON as
// the start of the next response and the connection is desynchronised.
// The 404 "no route" answer to HEAD is correct (no body).
// Repro: config `services: [{name: dead, endpoints: ["127.0.0.1:1"]}]`,
// route `{name: dead, match: {path: /dead}, service: dead}`; send
// `HEAD /dead HTTP/1.1\r\nHost: x\r\n\r\n`; expected `502` head with no body;
// got `...content-length: 37\r\n\r\n{"error":"bad gateway","status":502}\n`.
#[test]
fn head_request_upstream_error_responses_have_no_body() {
    let up = TestUpstream::start();
    let dead = service("dead", &[loopback(free_port())], "");
    let slow = service(
        "slow",
        &[up.addr()],
        "    timeouts: { response_header: 300ms }\n",
    );
    let gw = Gw::start(&format!(
        r#"services:
{dead}{slow}routes:
  - name: hello
    match: {{ path: /hello }}
    respond: {{ status: 200, body: "hello" }}
  - name: dead
    match: {{ path: /dead }}
    service: dead
  - name: slow
    match: {{ path_prefix: /slow }}
    service: slow
    strip_prefix: true
"#
    ));
    for (path, status) in [("/dead", "502"), ("/slow/x?delay=1000", "504")] {
        let text = head_then_get(&gw, path);
        let want_prefix = format!("HTTP/1.1 {status} ");
        assert!(text.starts_with(&want_prefix), "{path}: {text:?}");
        let (_, after_head) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            after_head.starts_with("HTTP/1.1 200 "),
            "HEAD {path}: bytes between the {status} head and the next response: {text:?}"
        );
    }
}

// Was a bug: a `respond` route with status 204 sends `content-length: 0`.
// RFC 9110 8.6: a server MUST NOT send Content-Length in a 204 response.
// Repro: route `{name: nc, match: {path: /nc}, respond: {status: 204, body: ""}}`;
// send `GET /nc HTTP/1.1\r\nHost: x\r\n\r\n`; expected `HTTP/1.1 204 No Content`
// without Content-Length; got `HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n`.
#[test]
fn respond_204_has_no_content_length() {
    let gw = Gw::start(
        "routes:\n  - name: nc\n    match: { path: /nc }\n    respond: { status: 204, body: \"\" }\n",
    );
    let got = exchange(
        gw.port,
        b"GET /nc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(3),
    );
    let text = got.text();
    assert!(text.starts_with("HTTP/1.1 204 "), "{text:?}");
    assert!(
        !text.to_ascii_lowercase().contains("content-length"),
        "204 with Content-Length: {text:?}"
    );
}

// Was a bug: while streaming a request body upstream the gateway does not
// watch for an early upstream response. An upstream that answers before
// reading the whole body (e.g. `413` + `Connection: close`, as nginx does
// for client_max_body_size) and stops reading leaves the client waiting
// until the upstream closes, and then the client gets the gateway's own 502
// instead of the upstream's 413. RFC 9112: "a client sending a message body
// SHOULD monitor the network connection for an error response while it is
// transmitting the request".
// Repro: an upstream that reads the head, writes
// `HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbig\n`,
// then stops reading and closes 1.5 s later; client sends
// `POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n` + 32 MiB.
// Expected: the client gets the 413 promptly; got: nothing until the
// upstream closes, then `502 {"error":"bad gateway","status":502}`.
#[test]
fn early_upstream_response_is_forwarded_while_body_is_still_sent() {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::thread;
    use std::time::Instant;

    use sluicegate_testkit::RawUpstream;

    const TOTAL: usize = 32 * 1024 * 1024;
    let raw = RawUpstream::start(|mut s: TcpStream| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = s.write_all(
            b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbig\n",
        );
        thread::sleep(Duration::from_millis(1500));
    });
    let svc = service("up", &[raw.addr()], "");
    let gw = Gw::start(&format!(
        "limits: {{ max_body_bytes: 64MiB }}\nservices:\n{svc}routes:\n  - name: all\n    match: {{ path_prefix: / }}\n    service: up\n"
    ));
    let mut client = TcpStream::connect(gw.addr()).unwrap();
    let mut writer = client.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let _ = writer.set_write_timeout(Some(Duration::from_secs(3)));
        let head = format!("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: {TOTAL}\r\n\r\n");
        if writer.write_all(head.as_bytes()).is_err() {
            return;
        }
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..TOTAL / chunk.len() {
            if writer.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let t0 = Instant::now();
    let head = http_common::read_head(&mut client, Duration::from_secs(3));
    let took = t0.elapsed();
    let _ = client.shutdown(std::net::Shutdown::Both);
    let _ = sender.join();
    let head = head.expect("a response head");
    assert!(head.starts_with("HTTP/1.1 413"), "after {took:?}: {head}");
    assert!(
        took < Duration::from_millis(1000),
        "413 only after {took:?}"
    );
}
