//! Fault tests: an upstream that closes idle keep-alive connections at
//! random costs the clients nothing, and an upstream that hangs gets 504
//! within the deadline while other routes keep their latency, and the
//! request deadline bounds all attempts of a request together (over
//! HTTP/1.1 and HTTP/2 streams).

mod http_common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use http_common::{service, Gw};
use sluicegate_testkit::{http_get, KeepAliveClient, Proto, TestUpstream};

/// A small xorshift generator: the tests need spread, not quality.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn an_upstream_closing_idle_connections_at_random_costs_clients_nothing() {
    let a = TestUpstream::start();
    let b = TestUpstream::start();
    let gw = Gw::start(&format!(
        "services:\n{}routes:\n  - name: all\n    service: s\n",
        service("s", &[a.addr(), b.addr()], "")
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
            let addr = gw.addr();
            thread::spawn(move || {
                let mut rng = 0x9e37_79b9_7f4a_7c15 ^ (t + 1);
                let mut cl = KeepAliveClient::connect(addr).unwrap();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    // The upstream drops the connection after 0-3 ms idle;
                    // the next request comes after 0-3 ms.
                    let idle = next(&mut rng) % 4;
                    match cl.get(&format!("/r/{i}?idle_close_ms={idle}")) {
                        Ok(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
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
                    thread::sleep(Duration::from_micros(next(&mut rng) % 3500));
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(2000));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let n = ok.load(Ordering::Relaxed);
    let closed = a.connections_accepted() + b.connections_accepted();
    let failures = failures.lock().unwrap();
    println!(
        "{n} requests ok over {closed} upstream connections (most closed by the upstream), {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:?}");
    assert!(
        n > 200 && closed > 50,
        "the scenario ran: {n} requests, {closed} connections"
    );
}

#[test]
fn a_hanging_upstream_gets_504_in_time_and_other_routes_keep_their_latency() {
    let hanging = TestUpstream::start();
    let fine = TestUpstream::start();
    let gw = Gw::start(&format!(
        "services:\n{}{}routes:\n  - name: hang\n    match: {{ path_prefix: /hang }}\n    service: h\n  - name: ok\n    service: o\n",
        service("h", &[hanging.addr()], "    timeouts: { response_header: 400ms }\n    retries: { attempts: 1 }\n"),
        service("o", &[fine.addr()], "")
    ));
    let baseline = latencies(&gw, 30);
    // 40 requests hang upstream at once while the other route is measured.
    let hung: Vec<_> = (0..40)
        .map(|i| {
            let addr = gw.addr();
            thread::spawn(move || {
                let t0 = Instant::now();
                let r = http_get(addr, &format!("/hang/{i}?delay=1500"), &[]);
                (r.status, t0.elapsed())
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(50));
    let during = latencies(&gw, 30);
    for h in hung {
        let (status, took) = h.join().unwrap();
        assert_eq!(status, 504);
        assert!(
            took >= Duration::from_millis(350) && took < Duration::from_millis(2000),
            "504 after {took:?}"
        );
    }
    let p = |v: &[Duration], q: f64| v[((v.len() - 1) as f64 * q) as usize];
    println!(
        "other route p50/max: {:?}/{:?} unloaded, {:?}/{:?} while 40 requests hang",
        p(&baseline, 0.5),
        p(&baseline, 1.0),
        p(&during, 0.5),
        p(&during, 1.0)
    );
    assert!(p(&during, 0.5) < Duration::from_millis(50), "{during:?}");
}

/// `n` sequential requests to the `ok` route, latencies sorted.
fn latencies(gw: &Gw, n: usize) -> Vec<Duration> {
    let mut v: Vec<Duration> = (0..n)
        .map(|i| {
            let t0 = Instant::now();
            assert_eq!(http_get(gw.addr(), &format!("/ok/{i}"), &[]).status, 200);
            t0.elapsed()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn the_request_deadline_bounds_every_attempt_together() {
    request_deadline(Proto::Http1);
}

#[test]
fn the_request_deadline_bounds_every_attempt_together_over_http2() {
    request_deadline(Proto::H2c);
}

fn request_deadline(proto: Proto) {
    // Two slow endpoints, retried on timeout: without a total deadline
    // this would take up to three response-header timeouts (3 s).
    let a = TestUpstream::start();
    let b = TestUpstream::start();
    let gw = Gw::start(&format!(
        "services:\n{}routes:\n  - name: all\n    service: s\n",
        service(
            "s",
            &[a.addr(), b.addr()],
            "    timeouts: { response_header: 1s, request: 700ms }\n    retries: { attempts: 3, on: [connect, timeout], budget: 100% }\n"
        )
    ));
    let t0 = Instant::now();
    let r = proto.get(gw.addr(), "/slow?delay=1500", &[]);
    let took = t0.elapsed();
    println!("504 after {took:?} (request deadline 700ms)");
    assert_eq!(r.status, 504);
    assert!(
        took >= Duration::from_millis(650) && took < Duration::from_millis(1000),
        "{took:?}"
    );
}
