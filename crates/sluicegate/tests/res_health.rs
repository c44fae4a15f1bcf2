//! Active health checks end to end: an upstream that stops answering is
//! taken out of rotation after `unhealthy_after` failed checks and clients
//! see no error from then on; when it comes back it returns after
//! `healthy_after` passed checks; with every endpoint down the gateway
//! answers 503 at once with Retry-After.

mod http_common;

use std::thread;
use std::time::{Duration, Instant};

use http_common::{assert_json_error, service, Gw};
use sluicegate_testkit::{free_port, http_get, TestUpstream};

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

fn metric(admin: u16, line_start: &str) -> Option<String> {
    let text = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    text.lines()
        .find(|l| l.starts_with(line_start))
        .map(str::to_string)
}

#[test]
fn a_dead_endpoint_leaves_rotation_and_comes_back() {
    let a = TestUpstream::start_with_id("a");
    let b_addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let b = TestUpstream::start_on(b_addr, Some("b")).unwrap();
    let admin = free_port();
    let gw = Gw::start(&format!(
        r#"admin: {{ listen: "127.0.0.1:{admin}" }}
services:
{}
routes:
  - name: all
    service: s
"#,
        service(
            "s",
            &[a.addr(), b_addr],
            "    health: { path: /healthz, interval: 100ms, timeout: 200ms, unhealthy_after: 2, healthy_after: 2 }\n",
        )
    ));
    // Both serve.
    let ids = |n: usize| -> Vec<String> {
        (0..n)
            .map(|_| {
                let r = http_get(gw.addr(), "/x", &[]);
                assert_eq!(r.status, 200);
                r.header("x-upstream-id").unwrap_or("").to_string()
            })
            .collect()
    };
    let seen = ids(10);
    assert!(
        seen.iter().any(|i| i == "a") && seen.iter().any(|i| i == "b"),
        "{seen:?}"
    );
    let healthy_b = format!("sluicegate_upstream_healthy{{service=\"s\",endpoint=\"{b_addr}\"}}");

    // b goes away: out of rotation within 2 failed checks (about 200 ms
    // plus a timeout), and then every request succeeds on a.
    drop(b);
    let took = wait_for("b marked down", Duration::from_secs(3), || {
        metric(admin, &healthy_b).is_some_and(|l| l.ends_with(" 0"))
    });
    println!("endpoint marked down after {took:?}");
    let seen = ids(50);
    assert!(seen.iter().all(|i| i == "a"), "{seen:?}");

    // b comes back on the same address: in rotation again.
    let b = TestUpstream::start_on(b_addr, Some("b")).unwrap();
    let took = wait_for("b back", Duration::from_secs(3), || {
        metric(admin, &healthy_b).is_some_and(|l| l.ends_with(" 1"))
    });
    println!("endpoint back after {took:?}");
    let seen = ids(10);
    assert!(seen.iter().any(|i| i == "b"), "{seen:?}");
    assert!(b.requests_seen() > 0);
}

#[test]
fn every_endpoint_down_is_503_at_once() {
    let dead = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
    let gw = Gw::start(&format!(
        "services:\n{}routes:\n  - name: all\n    service: s\n",
        service(
            "s",
            &[dead],
            "    health: { type: tcp, interval: 50ms, timeout: 100ms, unhealthy_after: 1 }\n",
        )
    ));
    wait_for("503 from shedding", Duration::from_secs(3), || {
        http_get(gw.addr(), "/x", &[])
            .header("retry-after")
            .is_some()
    });
    let start = Instant::now();
    let r = http_get(gw.addr(), "/x", &[]);
    assert_json_error(&r, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    // On a keep-alive connection each request gets its one 503, and the
    // connection serves the next request (the shed request's head is not
    // read again as a new request).
    let mut c = sluicegate_testkit::KeepAliveClient::connect(gw.addr()).unwrap();
    for i in 0..3 {
        let r = c.get(&format!("/ka/{i}")).unwrap();
        assert_eq!(r.status, 503, "request {i}");
    }
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        c.read_response().is_err(),
        "no answer the client did not ask for"
    );
}
