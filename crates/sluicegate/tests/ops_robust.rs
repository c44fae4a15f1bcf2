//! Bad input never kills the real binary: garbage bytes, half-sent
//! requests, connections closed early or mid-response, oversized heads and
//! bad framing. After each, the gateway still answers.

mod ops_common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::thread;
use std::time::Duration;

use ops_common::*;
use sluicegate_testkit::{http_get, raw_exchange, Gateway, KeepAliveClient, TestUpstream};

fn config(ports: Ports, upstream: u16) -> String {
    format!(
        "{}reload: {{ watch: false }}\ntimeouts: {{ client_header: 1s }}\nservices:\n{}routes:\n{}{}",
        ports.head(),
        service("api", &[upstream]),
        proxy_route("api", "/api", "api"),
        respond_route("hello", "/hello", "hi")
    )
}

/// The gateway is alive and answers both a local and a proxied route.
fn still_answers(gw: &mut Gateway, ports: Ports, after: &str) {
    let running = gw.is_running();
    check(gw, running, &format!("the gateway died after {after}"));
    let hello = http_get(ports.addr(), "/hello", &[]);
    assert_eq!(hello.status, 200, "after {after}");
    assert_eq!(hello.body_str(), "hi");
    let api = http_get(ports.addr(), "/api/check", &[]);
    assert_eq!(api.status, 200, "after {after}: {}", api.body_str());
}

/// The status code of the first response line in `bytes`, if any.
fn status_of(bytes: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().next()?;
    line.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

#[test]
fn garbage_bytes_get_400_or_close() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let mut gw = start(ports, &config(ports, up.port()));
    let wait = Duration::from_secs(3);

    let mut noise: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    noise.extend_from_slice(b"\r\n\r\n");
    let cases: [(&str, &[u8]); 6] = [
        ("binary noise", &noise),
        ("a TLS client hello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"),
        ("a request line without a version", b"GET /hello\r\n\r\n"),
        ("a bad header line", b"GET /hello HTTP/1.1\r\nHost x\r\n\r\n"),
        (
            "a bad content-length",
            b"POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        ),
        (
            "both content-length and chunked",
            b"POST /api/x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ),
    ];
    for (what, bytes) in cases {
        let reply = raw_exchange(ports.addr(), bytes, wait);
        if let Some(status) = status_of(&reply) {
            assert_eq!(status, 400, "{what}: {}", String::from_utf8_lossy(&reply));
        }
        still_answers(&mut gw, ports, what);
    }

    let huge = format!(
        "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let reply = raw_exchange(ports.addr(), huge.as_bytes(), wait);
    if let Some(status) = status_of(&reply) {
        assert_eq!(status, 431, "{}", String::from_utf8_lossy(&reply));
    }
    still_answers(&mut gw, ports, "an oversized head");
    let forwarded: Vec<String> = up.last_requests().into_iter().map(|r| r.target).collect();
    assert!(
        forwarded.iter().all(|t| t == "/api/check"),
        "a bad request was forwarded: {forwarded:?}"
    );
}

#[test]
fn half_sent_and_closed_connections_do_no_harm() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let mut gw = start(ports, &config(ports, up.port()));

    // Connect and close without a byte.
    drop(TcpStream::connect(ports.addr()).unwrap());
    still_answers(&mut gw, ports, "an empty connection");

    // Half a request head, then close.
    let mut s = TcpStream::connect(ports.addr()).unwrap();
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Half")
        .unwrap();
    drop(s);
    still_answers(&mut gw, ports, "half a head then close");

    // Half a request head held open while others are served; the header
    // timeout (1s) ends it.
    let mut held = TcpStream::connect(ports.addr()).unwrap();
    held.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    still_answers(&mut gw, ports, "a stalled head");
    held.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reply = Vec::new();
    let _ = held.read_to_end(&mut reply);
    if let Some(status) = status_of(&reply) {
        assert_eq!(status, 408, "{}", String::from_utf8_lossy(&reply));
    }

    // A body promised and not sent, then close.
    let mut s = TcpStream::connect(ports.addr()).unwrap();
    s.write_all(b"POST /api/body HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nonly part")
        .unwrap();
    thread::sleep(Duration::from_millis(100));
    drop(s);
    still_answers(&mut gw, ports, "a half-sent body then close");

    // The client goes away while the upstream is still working.
    let mut s = TcpStream::connect(ports.addr()).unwrap();
    s.write_all(b"GET /api/slow?delay=300 HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    thread::sleep(Duration::from_millis(50));
    drop(s);
    thread::sleep(Duration::from_millis(400));
    still_answers(&mut gw, ports, "a client that left before its response");

    // The client half-closes its side after the request (still answered).
    let mut s = TcpStream::connect(ports.addr()).unwrap();
    s.write_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert_eq!(
        status_of(&reply),
        Some(200),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    still_answers(&mut gw, ports, "a half-closed client");

    // The client closes in the middle of a large response body.
    let mut c = KeepAliveClient::connect(ports.addr()).unwrap();
    c.send("GET", "/api/big?size=4000000", &[], b"").unwrap();
    let mut first = [0u8; 1024];
    let mut raw = c.stream().try_clone().unwrap();
    let _ = raw.read(&mut first);
    drop(raw);
    drop(c);
    thread::sleep(Duration::from_millis(200));
    still_answers(&mut gw, ports, "a client that closed mid-body");
}

#[test]
fn many_broken_connections_at_once() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let mut gw = start(ports, &config(ports, up.port()));
    let addr = ports.addr();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            thread::spawn(move || {
                for i in 0..25 {
                    let Ok(mut s) = TcpStream::connect(addr) else {
                        continue;
                    };
                    let bytes: &[u8] = match (t + i) % 4 {
                        0 => b"\x00\x01\x02\x03\r\n\r\n",
                        1 => b"GET /api/x HTTP/1.1\r\nHo",
                        2 => b"GET /api/x?delay=50 HTTP/1.1\r\nHost: x\r\n\r\n",
                        _ => b"",
                    };
                    let _ = s.write_all(bytes);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    thread::sleep(Duration::from_millis(200));
    still_answers(&mut gw, ports, "a burst of broken connections");
}
