//! Fault injection on routes (`fault`) on the real binary: an abort at
//! 100% answers its status itself and the upstream sees nothing (over
//! HTTP/1.1 and HTTP/2); an abort at 50% lands near half over 400
//! requests; a 100% delay of 200 ms adds at least that and the request
//! succeeds, and never goes past the request's deadline; a request
//! refused by auth is not delayed; aborts and delays are counted per
//! route and marked in the access log. A gRPC call gets the abort as a
//! gRPC status.

mod http_common;

use std::time::{Duration, Instant};

use http_common::{assert_json_error, bin, service, wait_until};
use serde_json::Value;
use sluicegate_testkit::{free_port, http_get, Gateway, KeepAliveClient, Proto, TestUpstream};

const KEY: &str = "key-fault-0123456789";

/// A gateway on free loopback ports (its listener and its admin
/// listener), access log on stdout, with these routes to one upstream.
struct Gw {
    gw: Gateway,
    port: u16,
    admin: u16,
}

impl Gw {
    fn start(up: &TestUpstream) -> Gw {
        let routes = r#"routes:
  - name: abort
    match: { path_prefix: /abort }
    service: s
    fault: { abort: { percent: 100, status: 503 } }
  - name: half
    match: { path_prefix: /half }
    service: s
    fault: { abort: { percent: 50, status: 429 } }
  - name: slow
    match: { path_prefix: /slow }
    service: s
    fault: { delay: { percent: 100, duration: 200ms } }
  - name: guarded
    match: { path_prefix: /guarded }
    service: s
    auth: app_key
    fault: { delay: { percent: 100, duration: 5s } }
  - name: plain
    match: { path_prefix: /plain }
    service: s
  - name: capped
    match: { path_prefix: /capped }
    service: c
    fault: { delay: { percent: 100, duration: 5s } }
apps:
  - id: tester
    keys: ["KEY"]
"#
        .replace("KEY", KEY);
        let mut last = String::new();
        for _ in 0..3 {
            let (port, admin) = (free_port(), free_port());
            let yaml = format!(
                "listen: [\"127.0.0.1:{port}\"]\nworkers: 2\nadmin: {{ listen: \"127.0.0.1:{admin}\" }}\n\
                 log: {{ level: warn, access: stdout }}\nreload: {{ watch: false }}\nservices:\n{}{}{routes}",
                service("s", &[up.addr()], ""),
                service("c", &[up.addr()], "    timeouts: { request: 300ms }\n")
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

#[test]
fn a_full_abort_answers_itself_and_the_upstream_sees_nothing() {
    let up = TestUpstream::start();
    let gw = Gw::start(&up);
    for proto in [Proto::Http1, Proto::H2c] {
        for _ in 0..10 {
            let r = proto.request(gw.addr(), "GET", "/abort/x", &[], b"");
            assert_json_error(&r, 503);
            assert!(
                r.body_str().contains("\"fault injected\""),
                "{}",
                r.body_str()
            );
        }
        // A body is dropped with the request, not forwarded.
        let r = proto.request(gw.addr(), "POST", "/abort/x", &[], b"hello");
        assert_eq!(r.status, 503);
    }
    assert_eq!(up.requests_seen(), 0);
    // The same upstream on a route without fault answers.
    assert_eq!(http_get(gw.addr(), "/plain/x", &[]).status, 200);
    assert_eq!(up.requests_seen(), 1);

    let text = gw.metrics();
    for line in [
        "sluicegate_fault_aborts_total{route=\"abort\"} 22",
        "sluicegate_fault_delays_total{route=\"abort\"} 0",
        "sluicegate_fault_aborts_total{route=\"plain\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
    // Marked in the access log; the plain request is not.
    let mut lines = Vec::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            lines = gw.log_lines();
            lines.len() >= 23
        }),
        "{lines:#?}"
    );
    let aborted: Vec<_> = lines.iter().filter(|l| l["route"] == "abort").collect();
    assert_eq!(aborted.len(), 22);
    assert!(
        aborted
            .iter()
            .all(|l| l["fault"] == "abort" && l["status"] == 503 && l["endpoint"] == ""),
        "{aborted:#?}"
    );
    assert_eq!(
        aborted.iter().filter(|l| l["proto"] == "HTTP/2").count(),
        11
    );
    let plain = lines.iter().find(|l| l["route"] == "plain").unwrap();
    assert!(plain.get("fault").is_none(), "{plain}");
}

#[test]
fn half_the_requests_are_aborted_at_fifty_percent() {
    let up = TestUpstream::start();
    let gw = Gw::start(&up);
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (mut aborted, mut passed) = (0usize, 0usize);
    for _ in 0..400 {
        let r = client.get("/half/x").unwrap();
        match r.status {
            429 => aborted += 1,
            200 => passed += 1,
            s => panic!("status {s}: {}", r.body_str()),
        }
    }
    // 200 expected; a binomial's standard deviation here is 10.
    assert!((140..=260).contains(&aborted), "{aborted} of 400 aborted");
    assert_eq!(up.requests_seen(), passed);
    let line = format!("sluicegate_fault_aborts_total{{route=\"half\"}} {aborted}");
    let text = gw.metrics();
    assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
}

#[test]
fn a_full_delay_adds_its_duration_and_the_request_succeeds() {
    let up = TestUpstream::start();
    let gw = Gw::start(&up);
    for proto in [Proto::Http1, Proto::H2c] {
        for _ in 0..3 {
            let t = Instant::now();
            let r = proto.request(gw.addr(), "GET", "/slow/x", &[], b"");
            let took = t.elapsed();
            assert_eq!(r.status, 200, "{}", r.body_str());
            assert!(took >= Duration::from_millis(200), "{took:?}");
            assert!(took < Duration::from_secs(3), "{took:?}");
        }
    }
    assert_eq!(up.requests_seen(), 6);
    // A request refused by auth is answered at once, not delayed.
    let t = Instant::now();
    let r = http_get(gw.addr(), "/guarded/x", &[]);
    assert_eq!(r.status, 401);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // A delay never goes past the request's deadline (the service's
    // `timeouts.request`, 300 ms): then it is the deadline's 504, and
    // the upstream never sees the request.
    let t = Instant::now();
    let r = http_get(gw.addr(), "/capped/x", &[]);
    let took = t.elapsed();
    assert_json_error(&r, 504);
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(up.requests_seen(), 6);
    let text = gw.metrics();
    for line in [
        "sluicegate_fault_delays_total{route=\"slow\"} 6",
        "sluicegate_fault_aborts_total{route=\"slow\"} 0",
        "sluicegate_fault_delays_total{route=\"guarded\"} 0",
        "sluicegate_fault_delays_total{route=\"capped\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
    }
    let mut lines = Vec::new();
    assert!(
        wait_until(Duration::from_secs(5), || {
            lines = gw.log_lines();
            lines.len() >= 8
        }),
        "{lines:#?}"
    );
    let slow: Vec<_> = lines.iter().filter(|l| l["route"] == "slow").collect();
    assert_eq!(slow.len(), 6);
    assert!(
        slow.iter().all(|l| l["fault"] == "delay"
            && l["status"] == 200
            && l["duration_ms"].as_f64().unwrap() >= 200.0),
        "{slow:#?}"
    );
}

#[test]
fn a_grpc_call_gets_the_abort_as_a_grpc_status() {
    let up = TestUpstream::start();
    let gw = Gw::start(&up);
    // curl over h2c as a gRPC client: one message, "hi".
    let out = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-D", "-", "--max-time", "10"])
        .args(["--http2-prior-knowledge"])
        .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
        .args(["--data-binary", "@-"])
        .arg(format!(
            "http://127.0.0.1:{}/abort/test.Echo/Unary",
            gw.port
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"\0\0\0\0\x02hi")?;
            c.wait_with_output()
        })
        .expect("curl");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    // 503 is UNAVAILABLE, as for the gateway's own 503s.
    assert!(head.starts_with("http/2 200"), "{head}");
    assert!(head.contains("grpc-status: 14"), "{head}");
    assert!(head.contains("grpc-message: fault injected"), "{head}");
    assert_eq!(up.requests_seen(), 0);
}
