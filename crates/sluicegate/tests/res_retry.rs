//! Retries and circuit breaking end to end: a refused connect goes to
//! another endpoint (any method) without spending the retry budget and
//! takes its endpoint out of rotation for a while, statuses listed in `retries.on` are
//! tried again elsewhere for idempotent methods only, a breaker takes a
//! failing endpoint out and probes it again after `open_for`, and killing
//! one of three upstreams under steady load fails no request. Refused
//! connects, listed statuses and the breaker are tested over HTTP/1.1 and
//! HTTP/2 streams.

mod http_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use http_common::{service, Gw};
use sluicegate_testkit::{free_port, http_get, KeepAliveClient, Proto, RawUpstream, TestUpstream};

fn dead_addr() -> SocketAddr {
    // A free port nobody listens on: connects are refused.
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// An upstream that answers every request on a keep-alive connection with
/// `status` and an empty body, counting them.
fn answering(status: u16) -> (RawUpstream, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let up = RawUpstream::start(move |mut s: TcpStream| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            while let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                let body: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if got.len() < end + 4 + body {
                    break;
                }
                got.drain(..end + 4 + body);
                count.fetch_add(1, Ordering::SeqCst);
                let reply = format!("HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n");
                if s.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    });
    (up, seen)
}

fn routes() -> &'static str {
    "routes:\n  - name: all\n    service: s\n"
}

/// An upstream that reads each request's head and closes without a reply.
fn resetting() -> (RawUpstream, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    let up = RawUpstream::start(move |mut s: TcpStream| {
        if sluicegate_testkit::read_request_head(&mut s) {
            count.fetch_add(1, Ordering::SeqCst);
        }
    });
    (up, seen)
}

#[test]
fn a_refused_connect_goes_to_another_endpoint_for_any_method() {
    refused_connect_retried(Proto::Http1);
}

#[test]
fn a_refused_connect_goes_to_another_endpoint_for_any_method_over_http2() {
    refused_connect_retried(Proto::H2c);
}

fn refused_connect_retried(proto: Proto) {
    let live = TestUpstream::start();
    let dead = dead_addr();
    // Default retries, and no ejection, so that the dead endpoint keeps its
    // turns: every one is retried elsewhere, whatever the method, and the
    // budget is not what pays for it (nothing reached the endpoint).
    let gw = Gw::start(&format!(
        "services:\n{}{}",
        service(
            "s",
            &[dead, live.addr()],
            "    ejection: false\n    retries: { budget: 0% }\n"
        ),
        routes()
    ));
    for i in 0..20 {
        let r = proto.get(gw.addr(), &format!("/get/{i}"), &[]);
        assert_eq!(r.status, 200, "GET {i}");
        let r = proto.request(gw.addr(), "POST", &format!("/post/{i}"), &[], b"body");
        assert_eq!(
            r.status, 200,
            "POST {i}: nothing was sent, so it may go elsewhere"
        );
    }
    assert_eq!(live.requests_seen(), 40);
    // A body too big to come whole with the head (over 64 KiB on HTTP/2):
    // still unread when the connect is refused, so it goes elsewhere whole.
    let big = vec![b'q'; 200_000];
    for i in 0..4 {
        let r = proto.request(gw.addr(), "POST", &format!("/big/{i}"), &[], &big);
        assert_eq!(r.status, 200, "big POST {i}");
        assert_eq!(live.last_request().unwrap().body.len(), big.len());
    }

    // With one attempt only, the dead endpoint's turns fail.
    let gw1 = Gw::start(&format!(
        "services:\n{}{}",
        service(
            "s",
            &[dead, live.addr()],
            "    ejection: false\n    retries: { attempts: 1 }\n"
        ),
        routes()
    ));
    let failed = (0..10)
        .filter(|i| proto.get(gw1.addr(), &format!("/once/{i}"), &[]).status == 502)
        .count();
    assert!(failed >= 4, "{failed} of 10 failed without retries");
}

#[test]
fn a_refused_connect_takes_the_endpoint_out_of_rotation_by_default() {
    let live = TestUpstream::start();
    let dead = dead_addr();
    // One attempt only, so that a request sent to the dead endpoint fails:
    // after the first, none is (ejected for the default 1 s).
    let gw = Gw::start(&format!(
        "services:\n{}{}",
        service("s", &[dead, live.addr()], "    retries: { attempts: 1 }\n"),
        routes()
    ));
    let failed = (0..10)
        .filter(|i| http_get(gw.addr(), &format!("/once/{i}"), &[]).status == 502)
        .count();
    assert!(failed <= 1, "{failed} of 10 failed");
    // A lone endpoint is never shut out by its ejection: each request still
    // tries it, and the first good connect brings it back at once.
    let port = free_port();
    let lone = SocketAddr::from(([127, 0, 0, 1], port));
    let gw = Gw::start(&format!(
        "services:\n{}{}",
        service("s", &[lone], "    ejection: { base: 10s }\n"),
        routes()
    ));
    assert_eq!(http_get(gw.addr(), "/down", &[]).status, 502);
    let up = TestUpstream::start_on(lone, None).unwrap();
    assert_eq!(http_get(gw.addr(), "/up", &[]).status, 200);
    assert_eq!(up.requests_seen(), 1);
}

#[test]
fn the_retry_budget_bounds_retries() {
    let (bad, bad_seen) = resetting();
    let live = TestUpstream::start();
    let gw = Gw::start(&format!(
        "services:\n{}{}",
        service(
            "s",
            &[bad.addr(), live.addr()],
            "    retries: { budget: 0% }\n"
        ),
        routes()
    ));
    // Round robin sends every other request to the resetting endpoint
    // first: 20 of 40 need a retry, which did cost that endpoint a request;
    // a budget of 0% leaves only a fresh budget's 10.
    let failed = (0..40)
        .filter(|i| http_get(gw.addr(), &format!("/b/{i}"), &[]).status == 502)
        .count();
    assert_eq!(failed, 10);
    assert_eq!(bad_seen.load(Ordering::SeqCst), 20);
}

#[test]
fn listed_statuses_are_retried_elsewhere_for_idempotent_methods_only() {
    listed_statuses_retried(Proto::Http1);
}

#[test]
fn listed_statuses_are_retried_elsewhere_for_idempotent_methods_only_over_http2() {
    listed_statuses_retried(Proto::H2c);
}

fn listed_statuses_retried(proto: Proto) {
    let (busy, busy_seen) = answering(503);
    let fine = TestUpstream::start();
    let gw = Gw::start(&format!(
        "services:\n{}{}",
        service(
            "s",
            &[busy.addr(), fine.addr()],
            "    retries: { attempts: 2, on: [connect, 503], budget: 100% }\n"
        ),
        routes()
    ));
    for i in 0..20 {
        assert_eq!(proto.get(gw.addr(), &format!("/g/{i}"), &[]).status, 200);
    }
    assert!(
        busy_seen.load(Ordering::SeqCst) >= 8,
        "the busy one was tried"
    );
    let statuses: Vec<u16> = (0..10)
        .map(|i| {
            proto
                .request(gw.addr(), "POST", &format!("/p/{i}"), &[], b"x")
                .status
        })
        .collect();
    assert!(
        statuses.contains(&503) && statuses.contains(&200),
        "POST is never retried: {statuses:?}"
    );
}

#[test]
fn a_breaker_takes_a_failing_endpoint_out_and_probes_it_later() {
    breaker(Proto::Http1);
}

#[test]
fn a_breaker_takes_a_failing_endpoint_out_and_probes_it_later_over_http2() {
    breaker(Proto::H2c);
}

fn breaker(proto: Proto) {
    let (bad, bad_seen) = answering(500);
    let good = TestUpstream::start();
    let admin = free_port();
    let gw = Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\nservices:\n{}{}",
        service(
            "s",
            &[bad.addr(), good.addr()],
            "    retries: { attempts: 1 }\n    breaker: { errors: 3, window: 10s, open_for: 2s, on_5xx: true }\n"
        ),
        routes()
    ));
    let run = |n: usize| -> usize {
        (0..n)
            .filter(|i| proto.get(gw.addr(), &format!("/b/{i}"), &[]).status == 500)
            .count()
    };
    assert_eq!(run(30), 3, "open after 3 errors");
    assert_eq!(bad_seen.load(Ordering::SeqCst), 3);
    let metrics = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    let open_line = format!(
        "sluicegate_upstream_circuit_open{{service=\"s\",endpoint=\"{}\"}} 1",
        bad.addr()
    );
    assert!(metrics.contains(&open_line), "{metrics}");
    // Half-open after open_for: one probe, which fails: open again.
    // (`open_for` is 2 s: longer than 30 requests by curl take.)
    thread::sleep(Duration::from_millis(2100));
    assert_eq!(run(10), 1, "one probe");
    assert_eq!(bad_seen.load(Ordering::SeqCst), 4);
}

#[test]
fn killing_one_of_three_upstreams_under_load_fails_no_request() {
    let a = TestUpstream::start_with_id("a");
    let c = TestUpstream::start_with_id("c");
    let b_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let b = TestUpstream::start_on(b_addr, Some("b")).unwrap();
    let gw = Gw::start(&format!(
        "services:\n{}{}",
        service(
            "s",
            &[a.addr(), b_addr, c.addr()],
            "    health: { path: /healthz, interval: 100ms, timeout: 200ms, unhealthy_after: 2, healthy_after: 2 }\n\
             \x20   breaker: { errors: 3, window: 1s, open_for: 300ms }\n",
        ),
        routes()
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let seen_b = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, ok, failures, seen_b) =
                (stop.clone(), ok.clone(), failures.clone(), seen_b.clone());
            let addr = gw.addr();
            thread::spawn(move || {
                let mut cl = KeepAliveClient::connect(addr).unwrap();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    match cl.get(&format!("/load/{i}")) {
                        Ok(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                            if r.header("x-upstream-id") == Some("b") {
                                seen_b.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Ok(r) => failures
                            .lock()
                            .unwrap()
                            .push(format!("status {}", r.status)),
                        Err(e) => {
                            failures.lock().unwrap().push(format!("error {e}"));
                            cl = KeepAliveClient::connect(addr).unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(700));
    let before = ok.load(Ordering::Relaxed);
    drop(b); // killed: listener gone, open connections shut down
    let killed_at = Instant::now();
    thread::sleep(Duration::from_millis(1000));
    let b = TestUpstream::start_on(b_addr, Some("b")).unwrap();
    let back_at = Instant::now();
    let b_before = seen_b.load(Ordering::Relaxed);
    let mut back = None;
    while back_at.elapsed() < Duration::from_secs(3) {
        if seen_b.load(Ordering::Relaxed) > b_before {
            back = Some(back_at.elapsed());
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    for t in clients {
        t.join().unwrap();
    }
    let total = ok.load(Ordering::Relaxed);
    let failures = failures.lock().unwrap();
    println!(
        "{total} requests ok ({before} before the kill, {:?} of outage), {} failed; b back in rotation after {back:?}",
        back_at - killed_at,
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:?}");
    assert!(total > before + 100, "load kept flowing");
    assert!(back.is_some(), "b returned to rotation");
    assert!(b.requests_seen() > 0);
}
