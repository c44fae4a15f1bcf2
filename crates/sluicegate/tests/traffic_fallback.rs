//! Route fallback (`fallback`, `fallback_on`) on the real binary, with real
//! upstreams on loopback: a fixed fallback answers, with
//! `Sluicegate-Fallback: 1`, for each reason a service cannot (no endpoint
//! up by its health checks, its circuit open, a refused connect, retries
//! used up, no response head in time, a close before answering); a 5xx is
//! relayed unless `fallback_on` names it; `fallback: { service }` sends a
//! POST with its body to a second upstream once, and that service's own
//! failure is its error with the field; a chunked body cannot go again;
//! over HTTP/2 too; each counted by cause and marked in the access log.

mod http_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use http_common::{bin, service, wait_until};
use serde_json::Value;
use sluicegate_testkit::{free_port, http_get, http_request, Gateway, Proto, TestUpstream};

const ITEMS: &str = "{\"items\":[]}";

/// One gateway for every case: its routes, one per cause, to services of
/// a live upstream (`up`), of ports nothing listens on, and of a second
/// upstream (`backup`) that a service fallback reaches.
struct Gw {
    gw: Gateway,
    port: u16,
    admin: u16,
}

impl Gw {
    fn start(up: &TestUpstream, backup: &TestUpstream) -> Gw {
        let dead = || ([127, 0, 0, 1], free_port()).into();
        let fixed = "fallback: { status: 200, body: '{\"items\":[]}', headers: { content-type: application/json } }";
        let routes = format!(
            r#"routes:
  - name: live
    match: {{ path_prefix: /live }}
    service: s
    {fixed}
  - name: live5
    match: {{ path_prefix: /live5 }}
    service: s
    {fixed}
    fallback_on: [5xx]
  - name: dead
    match: {{ path_prefix: /dead }}
    service: dead
    {fixed}
  - name: retried
    match: {{ path_prefix: /retried }}
    service: dead2
    {fixed}
  - name: down
    match: {{ path_prefix: /down }}
    service: down
    {fixed}
  - name: breaker
    match: {{ path_prefix: /breaker }}
    service: breaker
    {fixed}
  - name: other
    match: {{ path_prefix: /other }}
    service: dead
    fallback: {{ service: backup }}
  - name: other5
    match: {{ path_prefix: /other5 }}
    service: s
    fallback: {{ service: backup }}
    fallback_on: [503]
  - name: both_dead
    match: {{ path_prefix: /both_dead }}
    service: dead
    fallback: {{ service: dead2 }}
"#
        );
        let services = [
            service("s", &[up.addr()], "    timeouts: { response_header: 300ms }\n"),
            service("dead", &[dead()], "    retries: { attempts: 1 }\n"),
            service(
                "dead2",
                &[dead(), dead()],
                "    retries: { attempts: 2, on: [connect], budget: 100% }\n",
            ),
            service(
                "down",
                &[up.addr()],
                "    health: { path: /healthz, interval: 50ms, timeout: 500ms, unhealthy_after: 1, expect_status: [299] }\n",
            ),
            service(
                "breaker",
                &[dead()],
                "    retries: { attempts: 1 }\n    breaker: { errors: 1, window: 30s, open_for: 30s }\n",
            ),
            service("backup", &[backup.addr()], ""),
        ]
        .concat();
        let mut last = String::new();
        for _ in 0..3 {
            let (port, admin) = (free_port(), free_port());
            let yaml = format!(
                "listen: [\"127.0.0.1:{port}\"]\nworkers: 2\nadmin: {{ listen: \"127.0.0.1:{admin}\" }}\n\
                 log: {{ level: warn, access: stdout }}\nreload: {{ watch: false }}\nservices:\n{services}{routes}"
            );
            let mut gw = Gateway::spawn(bin(), &yaml);
            match gw.wait_ready(&[port, admin], Duration::from_secs(10)) {
                Ok(()) => return Gw { gw, port, admin },
                Err(why) => last = format!("{why}\n{}\n{}", gw.stdout(), gw.stderr()),
            }
        }
        panic!("gateway did not start: {last}");
    }

    fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn metrics(&self) -> String {
        http_get(("127.0.0.1", self.admin), "/metrics", &[]).body_str()
    }

    fn fallbacks(&self, route: &str, cause: &str) -> u64 {
        let name = format!("sluicegate_fallbacks_total{{route=\"{route}\",cause=\"{cause}\"}} ");
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(&name))
            .map_or(0, |n| n.parse().unwrap())
    }

    /// The access log's lines so far (flushed at least every 200 ms).
    fn log_lines(&self) -> Vec<Value> {
        self.gw
            .stdout()
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// The fixed fallback, as configured, with the field.
fn assert_fixed(r: &sluicegate_testkit::Response, what: &str) {
    assert_eq!(r.status, 200, "{what}: {}", r.body_str());
    assert_eq!(r.body_str(), ITEMS, "{what}");
    assert_eq!(r.header("content-type"), Some("application/json"), "{what}");
    assert_eq!(r.header("sluicegate-fallback"), Some("1"), "{what}");
}

#[test]
fn a_fixed_fallback_answers_for_every_cause_and_is_counted() {
    let (up, backup) = (TestUpstream::start(), TestUpstream::start());
    let gw = Gw::start(&up, &backup);

    // The service answers: relayed, no field.
    let r = http_get(gw.addr(), "/live/x", &[]);
    assert_eq!((r.status, r.header("sluicegate-fallback")), (200, None));

    // A refused connect (the one attempt), over HTTP/1.1 and HTTP/2.
    for proto in [Proto::Http1, Proto::H2c] {
        assert_fixed(&proto.get(gw.addr(), "/dead/x", &[]), "refused");
    }
    // Retries used up: two endpoints, both refusing.
    assert_fixed(&http_get(gw.addr(), "/retried/x", &[]), "retried");
    // No response head in time (300 ms), and a close before answering.
    assert_fixed(&http_get(gw.addr(), "/live/x?delay=1000", &[]), "timeout");
    assert_fixed(&http_get(gw.addr(), "/live/x?close=before", &[]), "closed");
    // A POST's small body is dropped with it; the connection stays usable.
    let r = http_request(gw.addr(), "POST", "/dead/x", &[], b"hello");
    assert_fixed(&r, "refused POST");

    // The circuit: its one failure (a refused connect) opens it; the next
    // request finds no endpoint to try.
    assert_fixed(&http_get(gw.addr(), "/breaker/x", &[]), "first");
    assert_fixed(&http_get(gw.addr(), "/breaker/x", &[]), "open");

    // Health checks take `down`'s endpoint out (its check expects 299;
    // until the first check, it is in).
    assert!(
        wait_until(Duration::from_secs(5), || {
            let r = http_get(gw.addr(), "/down/x", &[]);
            r.header("sluicegate-fallback").is_some() && {
                assert_fixed(&r, "down");
                true
            }
        }),
        "{}",
        gw.metrics()
    );
    assert!(gw.fallbacks("down", "no_endpoint") > 0);

    // A 5xx is relayed without fallback_on; with it, replaced.
    let r = http_get(gw.addr(), "/live/x?status=503", &[]);
    assert_eq!((r.status, r.header("sluicegate-fallback")), (503, None));
    for proto in [Proto::Http1, Proto::H2c] {
        let r = proto.get(gw.addr(), "/live5/x?status=500&size=5000", &[]);
        assert_fixed(&r, "5xx");
    }
    // The replaced answer's connection was not pooled with its body
    // unread: the next answer from the service is its own, whole.
    let r = http_get(gw.addr(), "/live5/x?size=300", &[]);
    assert_eq!((r.status, r.body.len()), (200, 300));
    assert!(up.last_requests().iter().any(|q| q.path() == "/live5/x"));

    for (route, cause, n) in [
        ("dead", "connect_failed", 3),
        ("retried", "retries_exhausted", 1),
        ("live", "timeout", 1),
        ("live", "upstream_failed", 1),
        ("breaker", "connect_failed", 1),
        ("breaker", "breaker_open", 1),
        ("live5", "upstream_5xx", 2),
    ] {
        assert_eq!(gw.fallbacks(route, cause), n, "{route} {cause}");
    }
    assert!(!gw
        .metrics()
        .contains("sluicegate_fallbacks_total{route=\"live\",cause=\"upstream_5xx\"}"));

    // Marked in the access log with the cause; the plain answer is not.
    let mut lines = Vec::new();
    assert!(wait_until(Duration::from_secs(5), || {
        lines = gw.log_lines();
        lines.iter().filter(|l| l["route"] == "live5").count() == 3
            && lines.iter().filter(|l| l["route"] == "breaker").count() == 2
    }));
    // (Each worker writes its own lines: sorted.)
    let marks = |route: &str| -> Vec<String> {
        let mut m: Vec<String> = lines
            .iter()
            .filter(|l| l["route"] == route)
            .map(|l| l["fallback"].as_str().unwrap_or("-").to_string())
            .collect();
        m.sort();
        m
    };
    assert_eq!(marks("retried"), ["retries_exhausted"]);
    assert_eq!(marks("breaker"), ["breaker_open", "connect_failed"]);
    assert_eq!(marks("live5"), ["-", "upstream_5xx", "upstream_5xx"]);
    assert!(lines.iter().any(|l| l["route"] == "dead"
        && l["proto"] == "HTTP/2"
        && l["fallback"] == "connect_failed"));
}

#[test]
fn a_service_fallback_sends_the_request_once_to_the_other_service() {
    let (up, backup) = (
        TestUpstream::start_with_id("primary"),
        TestUpstream::start_with_id("backup"),
    );
    let gw = Gw::start(&up, &backup);

    // The primary refuses: the POST and its body go to the backup, whose
    // answer is relayed with the field; over HTTP/2 too.
    for (i, proto) in [Proto::Http1, Proto::H2c].into_iter().enumerate() {
        let body = format!("order-{i}");
        let r = proto.request(gw.addr(), "POST", "/other/orders?x=1", &[], body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.body_str());
        assert_eq!(r.header("x-upstream-id"), Some("backup"));
        assert_eq!(r.header("sluicegate-fallback"), Some("1"));
        let seen = backup.last_request().unwrap();
        assert_eq!(
            (seen.method.as_str(), seen.target.as_str()),
            ("POST", "/other/orders?x=1")
        );
        assert_eq!(seen.body, body.as_bytes());
    }
    assert_eq!(backup.requests_seen(), 2);

    // The primary answers 503, which fallback_on names: the backup gets
    // the request instead (the primary saw it once: no second try there).
    // The backup is asked for a 503 too (the same target): its answer is
    // relayed as it is, never replaced again.
    let r = http_request(gw.addr(), "POST", "/other5/x?status=503", &[], b"again");
    assert_eq!(r.status, 503, "{}", r.body_str());
    assert_eq!(r.header("x-upstream-id"), Some("backup"));
    assert_eq!(r.header("sluicegate-fallback"), Some("1"));
    assert_eq!(backup.last_request().unwrap().body, b"again");
    let primary = |path: &str| {
        let seen = up.last_requests();
        seen.iter().filter(|q| q.path() == path).count()
    };
    assert_eq!(primary("/other5/x"), 1);
    // A 502 it does not name is relayed.
    let r = http_get(gw.addr(), "/other5/x?status=502", &[]);
    assert_eq!(
        (r.status, r.header("x-upstream-id")),
        (502, Some("primary"))
    );

    // A chunked body streams: it cannot go again, so the primary's own
    // 503 is relayed, and a refused connect answers the error, unmarked.
    let chunked = |path: &str| {
        let mut s = TcpStream::connect(gw.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut got = String::new();
        let _ = s.read_to_string(&mut got);
        got
    };
    let got = chunked("/other5/x?status=503");
    assert!(got.starts_with("HTTP/1.1 503 "), "{got}");
    assert!(
        got.contains("x-upstream-id: primary")
            && !got.to_ascii_lowercase().contains("sluicegate-fallback"),
        "{got}"
    );
    // A refused connect took nothing of a streaming body: it goes to the
    // fallback service whole.
    let got = chunked("/other/x");
    assert!(got.starts_with("HTTP/1.1 200 "), "{got}");
    assert!(
        got.contains("x-upstream-id: backup")
            && got.to_ascii_lowercase().contains("sluicegate-fallback: 1"),
        "{got}"
    );
    assert_eq!(backup.last_request().unwrap().body, b"hello");
    assert_eq!(backup.requests_seen(), 4);
    // One that the primary read, then closed without answering, cannot go
    // again: the error, unmarked, counted unsent.
    let got = chunked("/other5/x?close=before");
    assert!(got.starts_with("HTTP/1.1 502 "), "{got}");
    assert!(
        !got.to_ascii_lowercase().contains("sluicegate-fallback"),
        "{got}"
    );
    assert_eq!(backup.requests_seen(), 4);

    // The fallback service fails too: its error, with the field.
    let r = http_get(gw.addr(), "/both_dead/x", &[]);
    assert_eq!(r.status, 502, "{}", r.body_str());
    assert_eq!(r.header("sluicegate-fallback"), Some("1"));

    assert_eq!(gw.fallbacks("other", "connect_failed"), 3);
    assert_eq!(gw.fallbacks("other5", "upstream_5xx"), 1);
    assert_eq!(gw.fallbacks("both_dead", "connect_failed"), 1);
    let text = gw.metrics();
    assert!(
        text.lines()
            .any(|l| l == "sluicegate_fallbacks_unsent_total{route=\"other5\"} 1"),
        "{text}"
    );
    // The log names the service that answered.
    let mut other = Vec::new();
    assert!(wait_until(Duration::from_secs(5), || {
        let lines = gw.log_lines();
        other = lines
            .into_iter()
            .filter(|l| l["route"] == "other")
            .collect();
        other.len() == 3
    }));
    let answered = |l: &&Value| {
        l["service"] == "backup" && l["fallback"] == "connect_failed" && l["status"] == 200
    };
    assert_eq!(other.iter().filter(answered).count(), 3, "{other:#?}");
    assert!(wait_until(Duration::from_secs(5), || gw
        .log_lines()
        .iter()
        .any(|l| l["route"] == "other5"
            && l["fallback"] == "unsent"
            && l["status"] == 502)));
}
