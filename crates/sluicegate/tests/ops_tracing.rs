//! Request ids and tracing on the real binary: every answer carries an
//! `x-request-id` (kept from a trusted proxy, made otherwise) that the
//! upstream, the access log and the gateway's error bodies see too; and
//! with `tracing`, sampled requests' spans reach a small OTLP/gRPC
//! collector (tests/fixtures/otlp/collector.py, from the test venv) with
//! the right parent links, over HTTP/1.1 and HTTP/2, while unsampled ones
//! make no span and pass `traceparent` on untouched; over TLS to a
//! collector whose certificate a private CA signs (`ca_file`).

mod ops_common;
mod tls_common;
mod venv_common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use ops_common::*;
use serde_json::Value;
use sluicegate_testkit::{free_port, http_get, Proto, TestUpstream};

/// The test collector on a free port of 127.0.0.1; killed on drop.
struct Collector {
    child: Child,
    port: u16,
    spans: Receiver<Value>,
}

impl Collector {
    /// `mode`: "print" (a JSON line per span) or "slow" (each export
    /// takes a second).
    fn start(mode: &str) -> Collector {
        Collector::start_with(mode, &[])
    }

    /// With `tls`: its certificate chain and key files, to speak TLS.
    fn start_with(mode: &str, tls: &[&std::path::Path]) -> Collector {
        let port = free_port();
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/collector.py");
        let mut child = Command::new(venv_common::python())
            .arg(script)
            .arg(port.to_string())
            .arg(mode)
            .args(tls)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the OTLP collector");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        assert_eq!(line.trim(), "ready", "the collector did not start");
        let (tx, spans) = channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let v: Value = serde_json::from_str(&line).expect("a JSON span line");
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Collector { child, port, spans }
    }

    /// The next `n` spans, within 10 s.
    fn take(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        while got.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.spans.recv_timeout(left) {
                Ok(v) => got.push(v),
                Err(_) => panic!("{} of {n} spans came: {got:#?}", got.len()),
            }
        }
        got
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config(ports: Ports, upstream: u16, tracing: &str, extra: &str) -> String {
    format!(
        "{}reload: {{ watch: false }}\n{tracing}{extra}services:\n{}routes:\n{}{}",
        ports.head(),
        service("api", &[upstream]),
        proxy_route("api", "/api", "api"),
        respond_route("hello", "/hello", "hi")
    )
}

fn tracing(collector: &Collector, ratio: &str) -> String {
    format!(
        "tracing:\n  service_name: gw-test\n  sampling: {{ ratio: {ratio} }}\n  otlp: {{ endpoint: \"http://127.0.0.1:{}\", timeout: 5s }}\n",
        collector.port
    )
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// `00-<trace>-<span>-<flags>` split.
fn traceparent(v: &str) -> (String, String, String) {
    let parts: Vec<&str> = v.split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent {v:?}");
    assert_eq!(parts[0], "00", "{v:?}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

fn sampled_parent_is_linked(proto: Proto) {
    let collector = Collector::start("print");
    let up = TestUpstream::start();
    let ports = Ports::new();
    let gw = start(
        ports,
        &config(ports, up.port(), &tracing(&collector, "0"), ""),
    );
    let parent = format!("00-{TRACE}-{CLIENT_SPAN}-01");
    let r = proto.get(
        ports.addr(),
        "/api/items?x=1",
        &[("traceparent", &parent), ("tracestate", "vendor=abc")],
    );
    assert_eq!(r.status, 200);
    let rid = r
        .header("x-request-id")
        .expect("an x-request-id")
        .to_string();
    assert_eq!(rid.len(), 32, "{rid}");

    let seen = up.last_request().unwrap();
    assert_eq!(seen.header("x-request-id"), Some(rid.as_str()), "{seen:?}");
    assert_eq!(seen.header_all("traceparent").len(), 1, "{seen:?}");
    let (trace, up_parent, flags) = traceparent(seen.header("traceparent").unwrap());
    assert_eq!((trace.as_str(), flags.as_str()), (TRACE, "01"));
    assert_ne!(
        up_parent, CLIENT_SPAN,
        "the upstream's parent is the gateway's span"
    );
    assert_eq!(seen.header("tracestate"), Some("vendor=abc"));

    let span = collector.take(1).remove(0);
    check(&gw, span["trace_id"] == TRACE, &format!("{span}"));
    assert_eq!(span["parent_span_id"], CLIENT_SPAN, "{span}");
    assert_eq!(span["span_id"], up_parent.as_str(), "{span}");
    assert_eq!(span["service"], "gw-test");
    assert_eq!(span["scope"], "sluicegate");
    assert_eq!(span["kind"], 2, "a server span: {span}");
    assert_eq!(span["name"], "GET api");
    let a = &span["attributes"];
    assert_eq!(a["http.request.method"], "GET");
    assert_eq!(a["http.route"], "api");
    assert_eq!(a["sluicegate.service"], "api");
    assert_eq!(a["server.address"], format!("127.0.0.1:{}", up.port()));
    assert_eq!(a["http.response.status_code"], 200);
    assert_eq!(a["url.path"], "/api/items");
    assert_eq!(a["sluicegate.request_id"], rid.as_str());
    let version = if proto == Proto::H2c { "2" } else { "1.1" };
    assert_eq!(a["network.protocol.version"], version);
    assert!(a["sluicegate.upstream_us"].as_i64().is_some(), "{span}");
    assert!(a["sluicegate.gateway_us"].as_i64().is_some(), "{span}");
    let (start_ns, end_ns) = (
        span["start"].as_u64().unwrap(),
        span["end"].as_u64().unwrap(),
    );
    assert!(start_ns > 0 && end_ns >= start_ns, "{span}");
    // Counted once the collector's answer is back.
    let counted = wait_until(Duration::from_secs(5), || {
        metric(ports, "sluicegate_trace_spans_exported_total") == 1.0
    });
    check(&gw, counted, &metrics(ports));
}

#[test]
fn a_sampled_client_span_is_the_parent_of_the_gateway_span() {
    sampled_parent_is_linked(Proto::Http1);
}

#[test]
fn a_sampled_client_span_is_the_parent_over_http2() {
    sampled_parent_is_linked(Proto::H2c);
}

#[test]
fn ratio_zero_without_a_sampled_parent_makes_no_span() {
    let collector = Collector::start("print");
    let up = TestUpstream::start();
    let ports = Ports::new();
    let gw = start(
        ports,
        &config(ports, up.port(), &tracing(&collector, "0"), ""),
    );
    for _ in 0..20 {
        assert_eq!(http_get(ports.addr(), "/api/x", &[]).status, 200);
        let seen = up.last_request().unwrap();
        assert_eq!(seen.header("traceparent"), None, "{seen:?}");
    }
    // A parent that is not sampled: passed on as it came, no span.
    let unsampled = format!("00-{TRACE}-{CLIENT_SPAN}-00");
    assert_eq!(
        http_get(ports.addr(), "/api/x", &[("traceparent", &unsampled)]).status,
        200
    );
    let seen = up.last_request().unwrap();
    assert_eq!(seen.header("traceparent"), Some(unsampled.as_str()));
    // A sampled one last: the only span the collector gets is its.
    let marker = "11111111111111111111111111111111";
    let sampled = format!("00-{marker}-{CLIENT_SPAN}-01");
    assert_eq!(
        http_get(ports.addr(), "/hello", &[("traceparent", &sampled)]).status,
        200
    );
    let span = collector.take(1).remove(0);
    check(&gw, span["trace_id"] == marker, &format!("{span}"));
    assert_eq!(span["name"], "GET hello");
    std::thread::sleep(Duration::from_millis(300));
    assert!(collector.spans.try_recv().is_err(), "more spans than one");
}

#[test]
fn ratio_one_samples_every_request_in_a_new_trace() {
    let collector = Collector::start("print");
    let up = TestUpstream::start();
    let ports = Ports::new();
    let gw = start(
        ports,
        &config(ports, up.port(), &tracing(&collector, "1"), ""),
    );
    let mut sent = Vec::new();
    for path in ["/api/a", "/api/b", "/nowhere"] {
        let r = http_get(ports.addr(), path, &[]);
        sent.push((
            path,
            r.status,
            r.header("x-request-id").unwrap().to_string(),
        ));
        if path.starts_with("/api") {
            let seen = up.last_request().unwrap();
            let (trace, span, flags) = traceparent(seen.header("traceparent").unwrap());
            assert_eq!(flags, "01");
            sent.last_mut().unwrap().2 += &format!(" {trace} {span}");
        }
    }
    let spans = collector.take(3);
    check(&gw, spans.len() == 3, "three spans");
    for ((path, status, ids), span) in sent.iter().zip(&spans) {
        let a = &span["attributes"];
        assert_eq!(a["url.path"], *path, "{span}");
        assert_eq!(a["http.response.status_code"], *status, "{span}");
        assert_eq!(span["parent_span_id"], "", "a root span: {span}");
        let mut ids = ids.split(' ');
        assert_eq!(a["sluicegate.request_id"], ids.next().unwrap());
        if let (Some(trace), Some(up_parent)) = (ids.next(), ids.next()) {
            assert_eq!(span["trace_id"], trace, "{span}");
            assert_eq!(span["span_id"], up_parent, "{span}");
        }
    }
    assert_eq!(spans[2]["name"], "GET", "no route: {}", spans[2]);
    assert_ne!(spans[0]["trace_id"], spans[1]["trace_id"]);
}

#[test]
fn a_full_queue_drops_spans_and_counts_them() {
    let collector = Collector::start("slow");
    let up = TestUpstream::start();
    let ports = Ports::new();
    let queue = format!("{}  queue: 1\n", tracing(&collector, "1"));
    let gw = start(ports, &config(ports, up.port(), &queue, ""));
    for _ in 0..10 {
        assert_eq!(http_get(ports.addr(), "/hello", &[]).status, 200);
    }
    let dropped = metric(ports, "sluicegate_trace_spans_dropped_total");
    check(&gw, dropped >= 1.0, &format!("dropped {dropped}"));
    let all_counted = wait_until(Duration::from_secs(10), || {
        let m = metrics(ports);
        let v = |s| sample(&m, s).unwrap_or(0.0);
        v("sluicegate_trace_spans_dropped_total") + v("sluicegate_trace_spans_exported_total")
            == 10.0
    });
    check(&gw, all_counted, &metrics(ports));
}

#[test]
fn spans_go_over_tls_to_a_collector_a_private_ca_signs() {
    let dir = tempfile::tempdir().unwrap();
    tls_common::make_ca(dir.path(), "ca", "OTLP Test CA");
    let san = Some("IP:127.0.0.1");
    tls_common::make_leaf(dir.path(), "ca", "otlp", "otlp", san, "serverAuth");
    let (cert, key) = (dir.path().join("otlp.pem"), dir.path().join("otlp.key"));
    let collector = Collector::start_with("print", &[&cert, &key]);
    let up = TestUpstream::start();
    let ports = Ports::new();
    let endpoint = format!("https://127.0.0.1:{}", collector.port);
    let with_ca = format!(
        "tracing:\n  sampling: {{ ratio: 1 }}\n  otlp: {{ endpoint: \"{endpoint}\", ca_file: \"{}\" }}\n",
        dir.path().join("ca.pem").display()
    );
    let gw = start(ports, &config(ports, up.port(), &with_ca, ""));
    assert_eq!(http_get(ports.addr(), "/api/tls", &[]).status, 200);
    let spans = collector.take(1);
    assert_eq!(spans[0]["attributes"]["url.path"], "/api/tls");
    drop(gw);
    // Without ca_file the system's roots do not know the test CA: the
    // export fails, is counted, and said once in the log.
    let ports = Ports::new();
    let system = format!(
        "tracing:\n  sampling: {{ ratio: 1 }}\n  otlp: {{ endpoint: \"{endpoint}\", timeout: 2s }}\n"
    );
    let gw = start(ports, &config(ports, up.port(), &system, ""));
    assert_eq!(http_get(ports.addr(), "/api/tls", &[]).status, 200);
    let failed = wait_until(Duration::from_secs(10), || {
        metric(ports, "sluicegate_trace_spans_export_failed_total") == 1.0
    });
    check(&gw, failed, &metrics(ports));
    assert!(gw.stderr().contains("export failed"), "{}", gw.stderr());
}

#[test]
fn request_ids_are_made_for_untrusted_clients() {
    let up = TestUpstream::start();
    let dir = ScratchDir::new("rid");
    let log = dir.path().join("access.log");
    let ports = Ports::new();
    let extra = format!("log: {{ access: \"{}\" }}\n", log.display());
    let gw = start(ports, &config(ports, up.port(), "", &extra));

    // Not from a trusted proxy: the client's id is replaced.
    let r = http_get(ports.addr(), "/api/x", &[("X-Request-Id", "client-chosen")]);
    let made = r.header("x-request-id").unwrap().to_string();
    assert_eq!(made.len(), 32, "{made}");
    assert_eq!(r.header_all("x-request-id").len(), 1);
    let seen = up.last_request().unwrap();
    assert_eq!(
        seen.header_all("x-request-id"),
        vec![made.as_str()],
        "{seen:?}"
    );

    // Error answers carry it in the head and the body; ids differ.
    let r = http_get(ports.addr(), "/nowhere", &[]);
    assert_eq!(r.status, 404);
    let id = r.header("x-request-id").unwrap().to_string();
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["request_id"], id.as_str(), "{body}");
    assert_ne!(id, made);
    // A 502 made while forwarding too.
    let dead = free_port();
    let cfg = config(ports, dead, "", &extra);
    gw.write_config(&cfg);
    let before = generation(ports);
    gw.reload_signal();
    check(
        &gw,
        wait_generation_above(ports, before, Duration::from_secs(5)),
        "reload",
    );
    let r = http_get(ports.addr(), "/api/x", &[]);
    assert_eq!(r.status, 502);
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        body["request_id"],
        r.header("x-request-id").unwrap(),
        "{body}"
    );
    // Over HTTP/2 too.
    let r = Proto::H2c.get(ports.addr(), "/hello", &[]);
    assert_eq!(r.header("x-request-id").map(str::len), Some(32));

    // The access log has each request's id.
    let logged = wait_until(Duration::from_secs(3), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() >= 4)
    });
    check(&gw, logged, "the access log has fewer than 4 lines");
    let text = std::fs::read_to_string(&log).unwrap();
    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["request_id"], made.as_str(), "{text}");
    assert!(first.get("trace_id").is_none(), "{text}");
}

#[test]
fn request_ids_from_trusted_proxies_are_kept() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let extra = "trusted_proxies: [\"127.0.0.1/32\"]\nrequest_id: { header: X-Correlation-Id }\n";
    let _gw = start(ports, &config(ports, up.port(), "", extra));
    let r = http_get(ports.addr(), "/api/x", &[("X-Correlation-Id", "edge-42")]);
    assert_eq!(r.header_all("x-correlation-id"), vec!["edge-42"]);
    assert_eq!(r.header("x-request-id"), None);
    let seen = up.last_request().unwrap();
    assert_eq!(
        seen.header_all("x-correlation-id"),
        vec!["edge-42"],
        "{seen:?}"
    );
    let r = http_get(ports.addr(), "/nowhere", &[("X-Correlation-Id", "edge-43")]);
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["request_id"], "edge-43");
    // One that cannot be passed on as it is: replaced.
    let r = http_get(
        ports.addr(),
        "/api/x",
        &[("X-Correlation-Id", "has\"quote")],
    );
    let id = r.header("x-correlation-id").unwrap();
    assert_eq!(id.len(), 32, "{id}");
    let seen = up.last_request().unwrap();
    assert_eq!(seen.header_all("x-correlation-id"), vec![id], "{seen:?}");
    // An upstream's own id never doubles the gateway's.
    let r = http_get(ports.addr(), "/api/x?header=x-correlation-id:theirs", &[]);
    assert_eq!(r.header_all("x-correlation-id").len(), 1, "{:?}", r.headers);
}

#[test]
fn the_sampling_ratio_follows_a_reload() {
    let collector = Collector::start("print");
    let up = TestUpstream::start();
    let ports = Ports::new();
    let gw = start(
        ports,
        &config(ports, up.port(), &tracing(&collector, "0"), ""),
    );
    assert_eq!(http_get(ports.addr(), "/api/x", &[]).status, 200);
    assert_eq!(up.last_request().unwrap().header("traceparent"), None);
    let before = generation(ports);
    gw.write_config(&config(ports, up.port(), &tracing(&collector, "1"), ""));
    gw.reload_signal();
    check(
        &gw,
        wait_generation_above(ports, before, Duration::from_secs(5)),
        "reload",
    );
    assert_eq!(http_get(ports.addr(), "/api/y", &[]).status, 200);
    let seen = up.last_request().unwrap();
    let (trace, span_id, _) = traceparent(seen.header("traceparent").expect("a traceparent"));
    let span = collector.take(1).remove(0);
    assert_eq!(
        (span["trace_id"].as_str(), span["span_id"].as_str()),
        (Some(&*trace), Some(&*span_id))
    );
    assert_eq!(span["attributes"]["url.path"], "/api/y");
}
