//! Route mirroring (`mirror`) on the real binary: the mirror gets a copy
//! of each sampled request (same method, path and body, marked
//! `X-Mirrored-By: sluicegate`), bodies of every framing intact (empty,
//! 1 MiB with a length, chunked, from an HTTP/2 client) while the
//! request's own service gets them intact too; 50% copies about half of
//! 2,000 requests; and a mirror that is down, slow (answers after 5 s) or
//! refusing (503, or a close without an answer) changes neither the
//! answers nor their p99 against a route without mirror, while its
//! failed and abandoned counters move.

mod http_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_common::{bin, service, wait_until};
use sluicegate_testkit::{
    free_port, http_get, http_request, read_request_head, Gateway, KeepAliveClient, Proto,
    RawUpstream, SeenRequest, TestUpstream,
};

/// A gateway on free loopback ports (its listener and its admin
/// listener) with `services` and `routes` (YAML list items).
struct Gw {
    _gw: Gateway,
    port: u16,
    admin: u16,
}

impl Gw {
    fn start(services: &str, routes: &str) -> Gw {
        let mut last = String::new();
        for _ in 0..3 {
            let (port, admin) = (free_port(), free_port());
            let yaml = format!(
                "listen: [\"127.0.0.1:{port}\"]\nworkers: 2\nadmin: {{ listen: \"127.0.0.1:{admin}\" }}\n\
                 log: {{ level: error, access: off }}\nreload: {{ watch: false }}\n\
                 services:\n{services}routes:\n{routes}"
            );
            let mut gw = Gateway::spawn(bin(), &yaml);
            match gw.wait_ready(&[port, admin], Duration::from_secs(10)) {
                Ok(()) => {
                    return Gw {
                        _gw: gw,
                        port,
                        admin,
                    }
                }
                Err(why) => last = format!("{why}\n{}\n{}", gw.stdout(), gw.stderr()),
            }
        }
        panic!("gateway did not start: {last}");
    }

    fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn metrics(&self) -> String {
        http_get(("127.0.0.1", self.admin), "/metrics", &[]).body_str()
    }

    /// The value of the metric line `series` (name and labels), 0 if absent.
    fn metric(&self, series: &str) -> u64 {
        let text = self.metrics();
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0)
    }
}

fn route(name: &str, service: &str, mirror: Option<(&str, &str)>) -> String {
    let mut r = format!(
        "  - name: {name}\n    match: {{ path_prefix: /{name} }}\n    service: {service}\n"
    );
    if let Some((to, percent)) = mirror {
        r.push_str(&format!(
            "    mirror: {{ service: {to}, percent: {percent} }}\n"
        ));
    }
    r
}

/// The request `up` saw for `target`, once it came (the copy comes on
/// its own time).
fn seen(up: &TestUpstream, target: &str) -> SeenRequest {
    let mut found = None;
    let came = wait_until(Duration::from_secs(10), || {
        found = up.last_requests().into_iter().find(|r| r.target == target);
        found.is_some()
    });
    assert!(came, "{target} never reached the upstream");
    found.unwrap()
}

#[test]
fn the_mirror_gets_a_marked_copy_with_every_body_intact() {
    let (primary, shadow) = (TestUpstream::start(), TestUpstream::start());
    let services = service("p", &[primary.addr()], "") + &service("shadow", &[shadow.addr()], "");
    let gw = Gw::start(&services, &route("m", "p", Some(("shadow", "100"))));
    let big: Vec<u8> = (0..1024 * 1024).map(|i| (i * 7 % 251) as u8).collect();

    // 0 B, and 1 MiB with a length, over HTTP/1.1.
    let r = http_request(gw.addr(), "POST", "/m/empty?q=1", &[], b"");
    assert_eq!(r.status, 200);
    let r = http_request(gw.addr(), "PUT", "/m/big", &[("x-test", "yes")], &big);
    assert_eq!(r.status, 200, "{}", r.body_str());
    // Chunked, in several chunks written apart.
    let mut c = KeepAliveClient::connect(gw.addr()).unwrap();
    c.send_raw(b"POST /m/chunked HTTP/1.1\r\nHost: mirror.test\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    c.send_raw(b"6\r\n world\r\n").unwrap();
    c.send_raw(b"0\r\n\r\n").unwrap();
    assert_eq!(c.read_response().unwrap().status, 200);
    // From an HTTP/2 client.
    let r = Proto::H2c.request(gw.addr(), "POST", "/m/h2", &[], b"from an h2 client");
    assert_eq!(r.status, 200);

    for (target, method, body) in [
        ("/m/empty?q=1", "POST", &b""[..]),
        ("/m/big", "PUT", &big[..]),
        ("/m/chunked", "POST", b"hello world"),
        ("/m/h2", "POST", b"from an h2 client"),
    ] {
        let own = seen(&primary, target);
        let copy = seen(&shadow, target);
        assert_eq!(own.body.len(), body.len(), "{target}");
        assert!(own.body == body, "{target}: the request's own body differs");
        assert_eq!(copy.method, method, "{target}");
        assert_eq!(copy.body.len(), body.len(), "{target}");
        assert!(copy.body == body, "{target}: the copy's body differs");
        assert_eq!(copy.header("x-mirrored-by"), Some("sluicegate"), "{target}");
        assert_eq!(own.header("x-mirrored-by"), None, "{target}");
        // Matched by the request's id.
        assert_eq!(copy.header("x-request-id"), own.header("x-request-id"));
    }
    assert_eq!(seen(&shadow, "/m/big").header("x-test"), Some("yes"));
    assert_eq!(
        seen(&shadow, "/m/chunked").header("host"),
        Some("mirror.test")
    );
    assert!(seen(&shadow, "/m/chunked").chunked);
    let series = "sluicegate_mirror_requests_total{route=\"m\",service=\"shadow\",class=\"2xx\"}";
    assert!(
        wait_until(Duration::from_secs(5), || gw.metric(series) == 4),
        "{}",
        gw.metrics()
    );
    assert_eq!(primary.requests_seen(), 4);
    assert_eq!(shadow.requests_seen(), 4);
}

#[test]
fn half_the_requests_are_copied_at_fifty_percent() {
    let (primary, shadow) = (TestUpstream::start(), TestUpstream::start());
    let services = service("p", &[primary.addr()], "") + &service("shadow", &[shadow.addr()], "");
    let gw = Gw::start(&services, &route("half", "p", Some(("shadow", "50"))));
    let mut c = KeepAliveClient::connect(gw.addr()).unwrap();
    for i in 0..2000 {
        let r = c.get(&format!("/half/{i}")).unwrap();
        assert_eq!(r.status, 200);
    }
    let series =
        "sluicegate_mirror_requests_total{route=\"half\",service=\"shadow\",class=\"2xx\"}";
    // Every copy started is answered: the count stops where the upstream's is.
    assert!(wait_until(Duration::from_secs(10), || {
        let n = gw.metric(series);
        n > 0 && n as usize == shadow.requests_seen()
    }));
    let copied = shadow.requests_seen();
    // 1,000 expected; a binomial's standard deviation here is about 22.
    assert!((900..=1100).contains(&copied), "{copied} of 2000 copied");
    assert_eq!(primary.requests_seen(), 2000);
}

/// An upstream that reads a request head, then answers 200 only after
/// 5 s (or when the gateway closes the connection first).
fn slow_upstream() -> RawUpstream {
    RawUpstream::start(|mut s: TcpStream| {
        if !read_request_head(&mut s) {
            return;
        }
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut buf = [0u8; 1024];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return,
                Ok(_) => continue,
                Err(_) => break,
            }
        }
        let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    })
}

/// An upstream that answers every other request 503, and closes the
/// others without an answer.
fn refusing_upstream() -> RawUpstream {
    let n = AtomicUsize::new(0);
    RawUpstream::start(move |mut s: TcpStream| {
        if !read_request_head(&mut s) {
            return;
        }
        if n.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
            let _ = s.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            );
        }
    })
}

/// The 99th percentile of `times`.
fn p99(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() * 99 / 100]
}

#[test]
fn a_dead_slow_or_refusing_mirror_changes_neither_answers_nor_p99() {
    let primary = TestUpstream::start();
    let (slow, refusing) = (slow_upstream(), refusing_upstream());
    let dead: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let services = service("p", &[primary.addr()], "")
        + &service("dead", &[dead], "")
        + &service("slow", &[slow.addr()], "")
        + &service("refusing", &[refusing.addr()], "");
    let routes = route("plain", "p", None)
        + &route("dead", "p", Some(("dead", "100")))
        + &route("slow", "p", Some(("slow", "100")))
        + &route("refuse", "p", Some(("refusing", "100")));
    let gw = Gw::start(&services, &routes);
    let names = ["plain", "dead", "slow", "refuse"];
    let mut clients: Vec<_> = names
        .iter()
        .map(|_| KeepAliveClient::connect(gw.addr()).unwrap())
        .collect();
    let mut times = vec![Vec::new(); names.len()];
    let started = Instant::now();
    // Interleaved, so that the machine's noise falls on every route alike;
    // with a body, which every copy carries too.
    for i in 0..300 {
        for (k, name) in names.iter().enumerate() {
            let t = Instant::now();
            let r = clients[k]
                .request("POST", &format!("/{name}/{i}"), &[], b"a small body")
                .unwrap();
            times[k].push(t.elapsed());
            assert_eq!(r.status, 200, "/{name}/{i}: {}", r.body_str());
            assert_eq!(r.body_str(), "ok\n");
        }
    }
    // Not a request waited for the slow mirror's 5 s.
    assert!(started.elapsed() < Duration::from_secs(30));
    let base = p99(times[0].clone());
    for (k, name) in names.iter().enumerate().skip(1) {
        let p = p99(times[k].clone());
        assert!(
            p < base + Duration::from_millis(20),
            "{name}: p99 {p:?} against {base:?} without mirror"
        );
    }
    assert_eq!(primary.requests_seen(), 1200);
    // The dead mirror's copies failed to connect; the slow one's beyond
    // the in-flight bound were abandoned; the refusing one's were
    // answered 503 or failed.
    let failed = |route: &str, why: &str| {
        gw.metric(&format!(
            "sluicegate_mirror_failures_total{{route=\"{route}\",reason=\"{why}\"}}"
        ))
    };
    assert!(
        wait_until(Duration::from_secs(10), || failed("dead", "connect") == 300),
        "{}",
        gw.metrics()
    );
    let abandoned =
        gw.metric("sluicegate_mirror_abandoned_total{route=\"slow\",reason=\"in_flight_limit\"}");
    assert_eq!(abandoned, 300 - 128, "{}", gw.metrics());
    assert_eq!(
        gw.metric("sluicegate_mirror_in_flight{route=\"slow\"}"),
        128
    );
    let answered_503 =
        "sluicegate_mirror_requests_total{route=\"refuse\",service=\"refusing\",class=\"5xx\"}";
    assert!(
        wait_until(Duration::from_secs(10), || {
            gw.metric(answered_503) + failed("refuse", "other") == 300
        }),
        "{}",
        gw.metrics()
    );
    assert!(gw.metric(answered_503) > 0 && failed("refuse", "other") > 0);
    drop(gw);
}
