//! Graceful shutdown on the real binary: SIGTERM lets an in-flight request
//! finish, refuses new connections at once, closes idle keep-alive
//! connections and exits 0, while a connection accepted before the signal
//! may still send its first request; `timeouts.drain` bounds the wait;
//! SIGINT stops the same way.

mod ops_common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ops_common::*;
use sluicegate_testkit::{try_http_get, KeepAliveClient, RawUpstream, TestUpstream};

/// A config proxying /api to `upstream` with `extra` top-level lines.
fn config(ports: Ports, upstream: u16, extra: &str) -> String {
    format!(
        "{}reload: {{ watch: false }}\n{extra}services:\n{}routes:\n{}{}",
        ports.head(),
        service("api", &[upstream]),
        proxy_route("api", "/api", "api"),
        respond_route("hello", "/hello", "hi")
    )
}

#[test]
fn sigterm_finishes_in_flight_requests_and_exits_zero() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let mut gw = start(ports, &config(ports, up.port(), ""));

    // An idle keep-alive connection, which shutdown must not wait for.
    let mut idle = KeepAliveClient::connect(ports.addr()).unwrap();
    assert_eq!(idle.get("/hello").unwrap().status, 200);

    let addr = ports.addr();
    let slow = thread::spawn(move || try_http_get(addr, "/api/slow?delay=800", &[]));
    let arrived = wait_until(Duration::from_secs(3), || up.requests_seen() == 1);
    check(&gw, arrived, "the slow request never reached the upstream");

    let signalled = Instant::now();
    gw.terminate();

    // New connections are refused while the slow request is still running.
    let refused = wait_until(Duration::from_millis(500), || {
        try_http_get(addr, "/hello", &[]).is_err()
    });
    check(&gw, refused, "new connections still served after SIGTERM");
    assert!(
        !slow.is_finished(),
        "the slow request ended before shutdown was observed"
    );
    assert!(
        idle.wait_closed(Duration::from_secs(1)),
        "an idle keep-alive connection stayed open during the drain"
    );

    let resp = slow
        .join()
        .unwrap()
        .expect("the in-flight request got its response");
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    assert_eq!(resp.body_str(), "ok\n");

    let status = gw
        .wait_exit(Duration::from_secs(5))
        .expect("the gateway exits after draining");
    assert!(status.success(), "exit status {status}");
    // It exits once the request is done, not at the end of the 10 s drain.
    assert!(
        signalled.elapsed() < Duration::from_secs(4),
        "exit took {:?}",
        signalled.elapsed()
    );
}

/// An upstream that answers 200 five seconds after a request head arrives,
/// or gives up as soon as the gateway closes the connection. Returns it and
/// the number of request heads it has received.
fn five_second_upstream() -> (RawUpstream, Arc<AtomicUsize>) {
    let heads = Arc::new(AtomicUsize::new(0));
    let seen = heads.clone();
    let up = RawUpstream::start(move |mut s: TcpStream| {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut chunk) {
                Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
                _ => return,
            }
        }
        seen.fetch_add(1, Ordering::SeqCst);
        let answer_at = Instant::now() + Duration::from_secs(5);
        loop {
            let left = answer_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n");
                return;
            }
            let _ = s.set_read_timeout(Some(left));
            match s.read(&mut chunk) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return,
            }
        }
    });
    (up, heads)
}

#[test]
fn drain_timeout_bounds_the_exit() {
    let (up, heads) = five_second_upstream();
    let ports = Ports::new();
    let mut gw = start(
        ports,
        &config(ports, up.port(), "timeouts: { drain: 500ms }\n"),
    );

    let addr = ports.addr();
    let stuck = thread::spawn(move || try_http_get(addr, "/api/stuck", &[]));
    let arrived = wait_until(Duration::from_secs(3), || heads.load(Ordering::SeqCst) == 1);
    check(&gw, arrived, "the 5 s request never reached the upstream");

    let signalled = Instant::now();
    gw.terminate();
    let status = gw.wait_exit(Duration::from_secs(4));
    let took = signalled.elapsed();
    let Some(status) = status else {
        check(
            &gw,
            false,
            "still running 4 s after SIGTERM with drain: 500ms",
        );
        unreachable!()
    };
    assert!(
        took < Duration::from_millis(2500),
        "exit took {took:?} with drain: 500ms"
    );
    assert!(status.success(), "exit status {status}");
    // The cut request fails rather than waiting for its full 5 s.
    let outcome = stuck.join().unwrap();
    assert!(
        outcome.as_ref().map_or(true, |r| r.status != 200),
        "the request outlived the drain: {outcome:?}"
    );
}

#[test]
fn a_keep_alive_request_in_flight_gets_its_answer_and_connection_close() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let mut gw = start(ports, &config(ports, up.port(), ""));
    let addr = ports.addr();
    let client = thread::spawn(move || {
        let mut c = KeepAliveClient::connect(addr).unwrap();
        assert_eq!(c.get("/api/first").unwrap().status, 200);
        let r = c.get("/api/slow?delay=600").unwrap();
        let closed = c.wait_closed(Duration::from_secs(2));
        (r, closed)
    });
    let arrived = wait_until(Duration::from_secs(3), || up.requests_seen() == 2);
    check(&gw, arrived, "the slow request never reached the upstream");
    gw.terminate();
    let (resp, closed) = client.join().unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body_str(), "ok\n");
    assert_eq!(
        resp.header("connection")
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("close"),
        "{:?}",
        resp.headers
    );
    assert!(
        closed,
        "the connection stayed open after the drained response"
    );
    let status = gw.wait_exit(Duration::from_secs(5)).expect("exits");
    assert!(status.success(), "exit status {status}");
}

#[test]
fn sigint_stops_like_sigterm() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let mut gw = start(ports, &config(ports, up.port(), ""));
    assert_eq!(
        try_http_get(ports.addr(), "/api/x", &[]).unwrap().status,
        200
    );
    gw.signal("INT");
    let status = gw
        .wait_exit(Duration::from_secs(3))
        .expect("the gateway exits on SIGINT");
    assert!(status.success(), "exit status {status}");
    assert!(try_http_get(ports.addr(), "/hello", &[]).is_err());
}

#[test]
fn a_connection_accepted_before_sigterm_may_still_send_its_first_request() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let mut gw = start(ports, &config(ports, up.port(), ""));
    // Connected (and accepted) before the signal, request not sent yet.
    let mut fresh = TcpStream::connect(ports.addr()).unwrap();
    thread::sleep(Duration::from_millis(200));
    gw.terminate();
    // Sent after the drain began (it closes idle connections within a few
    // ms), well within the grace of a connection's first request.
    thread::sleep(Duration::from_millis(20));
    fresh
        .write_all(b"GET /hello HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    fresh
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut got = Vec::new();
    let _ = fresh.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "the first request of a connection accepted before the drain got: {text:?}"
    );
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{text}"
    );
    let status = gw
        .wait_exit(Duration::from_secs(5))
        .expect("the gateway exits after draining");
    assert!(status.success(), "exit status {status}");
}
