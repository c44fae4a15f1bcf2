//! The JSON-lines access log on the real binary: one line per request in a
//! file (fields checked with serde_json), on stdout, nothing with
//! `access: off`, and switching the log on and off by reload. Requests on
//! HTTP/2 streams are logged alike, with `"proto":"HTTP/2"`. Requests
//! refused before routing (400, 408, 431) get a line each, with the
//! listener, and a flood of them writes bounded lines.

mod ops_common;

use std::path::Path;
use std::time::Duration;

use ops_common::*;
use serde_json::Value;
use sluicegate_testkit::{http_get, Proto, TestUpstream};

/// The parsed lines of the access log at `path` (none if it is missing).
fn log_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect()
}

fn config(ports: Ports, upstream: u16, access: &str) -> String {
    format!(
        "{}reload: {{ watch: false }}\nlog: {{ access: \"{access}\" }}\nservices:\n{}routes:\n{}{}",
        ports.head(),
        service("api", &[upstream]),
        proxy_route("api", "/api", "api"),
        respond_route("hello", "/hello", "hi there")
    )
}

fn find<'a>(lines: &'a [Value], path: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["path"] == path)
        .unwrap_or_else(|| panic!("no access log line for {path} in {lines:#?}"))
}

fn ms(v: &Value, field: &str) -> f64 {
    v[field]
        .as_f64()
        .unwrap_or_else(|| panic!("{field} is not a number in {v}"))
}

#[test]
fn each_request_writes_one_json_line() {
    request_lines(Proto::Http1);
}

#[test]
fn each_request_writes_one_json_line_over_http2() {
    request_lines(Proto::H2c);
}

fn request_lines(proto: Proto) {
    let up = TestUpstream::start();
    let dir = ScratchDir::new("access");
    let log = dir.path().join("access.log");
    let ports = Ports::new();
    let gw = start(ports, &config(ports, up.port(), log.to_str().unwrap()));
    let endpoint = format!("127.0.0.1:{}", up.port());

    let post = proto.request(ports.addr(), "POST", "/api/echo", &[], b"hello");
    assert_eq!(post.status, 200);
    let sized = proto.get(ports.addr(), "/api/data?size=1234", &[]);
    assert_eq!(sized.body.len(), 1234);
    let slow = proto.get(ports.addr(), "/api/slow?delay=250", &[]);
    assert_eq!(slow.status, 200);
    let failed = proto.get(ports.addr(), "/api/x?status=503", &[]);
    assert_eq!(failed.status, 503);
    let hello = proto.get(ports.addr(), "/hello", &[]);
    assert_eq!(hello.body_str(), "hi there");
    assert_eq!(proto.get(ports.addr(), "/nowhere", &[]).status, 404);

    // Workers flush at least every 200 ms.
    let flushed = wait_until(Duration::from_secs(3), || log_lines(&log).len() >= 6);
    check(&gw, flushed, &format!("log has {:?}", log_lines(&log)));
    std::thread::sleep(Duration::from_millis(400));
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 6, "one line per request: {lines:#?}");

    for l in &lines {
        for field in [
            "ts",
            "client",
            "method",
            "path",
            "status",
            "route",
            "service",
            "endpoint",
            "bytes_in",
            "bytes_out",
            "duration_ms",
            "upstream_ms",
        ] {
            assert!(l.get(field).is_some(), "no {field} in {l}");
        }
        assert_eq!(l["client"], "127.0.0.1", "{l}");
        // Streams say so; HTTP/1.1 lines have no `proto`.
        let want = (proto == Proto::H2c).then_some("HTTP/2");
        assert_eq!(l["proto"].as_str(), want, "{l}");
        assert!(l["ts"].as_str().is_some_and(|t| t.ends_with('Z')), "{l}");
    }

    let post = find(&lines, "/api/echo");
    assert_eq!(post["method"], "POST");
    assert_eq!(post["status"], 200);
    assert_eq!(post["route"], "api");
    assert_eq!(post["service"], "api");
    assert_eq!(post["endpoint"], endpoint.as_str());
    assert_eq!(post["bytes_in"], 5);
    assert!(post["bytes_out"].as_u64().is_some_and(|n| n > 0), "{post}");

    let sized = find(&lines, "/api/data?size=1234");
    assert_eq!(sized["method"], "GET");
    assert_eq!(sized["bytes_in"], 0);
    assert_eq!(sized["bytes_out"], 1234);

    let slow = find(&lines, "/api/slow?delay=250");
    let (total, upstream) = (ms(slow, "duration_ms"), ms(slow, "upstream_ms"));
    assert!(
        upstream >= 250.0,
        "upstream_ms {upstream} for a 250 ms upstream"
    );
    assert!(
        total >= upstream,
        "duration_ms {total} < upstream_ms {upstream}"
    );
    assert!(total < 5_000.0, "duration_ms {total}");

    let failed = find(&lines, "/api/x?status=503");
    assert_eq!(failed["status"], 503);
    assert_eq!(failed["endpoint"], endpoint.as_str());

    let hello = find(&lines, "/hello");
    assert_eq!(hello["status"], 200);
    assert_eq!(hello["route"], "hello");
    assert_eq!(hello["bytes_out"], "hi there".len());
    assert!(hello["upstream_ms"].is_null(), "{hello}");
    assert!(ms(hello, "duration_ms") >= 0.0);

    let missing = find(&lines, "/nowhere");
    assert_eq!(missing["status"], 404);
    assert!(missing["upstream_ms"].is_null(), "{missing}");
}

#[test]
fn access_stdout_writes_lines_to_stdout() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let gw = start(ports, &config(ports, up.port(), "stdout"));
    assert_eq!(http_get(ports.addr(), "/api/to-stdout", &[]).status, 200);
    let logged = wait_until(Duration::from_secs(3), || {
        gw.stdout().contains("\"path\":\"/api/to-stdout\"")
    });
    check(&gw, logged, "no access line on stdout");
    let line = gw
        .stdout()
        .lines()
        .find(|l| l.contains("/api/to-stdout"))
        .map(str::to_string)
        .unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["route"], "api");
    assert_eq!(v["status"], 200);
}

#[test]
fn access_off_writes_nothing_and_reload_switches_it() {
    let up = TestUpstream::start();
    let dir = ScratchDir::new("access-off");
    let log = dir.path().join("access.log");
    let ports = Ports::new();
    let gw = start(ports, &config(ports, up.port(), "off"));

    assert_eq!(http_get(ports.addr(), "/api/a", &[]).status, 200);
    assert_eq!(http_get(ports.addr(), "/hello", &[]).status, 200);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !gw.stdout().contains("\"path\""),
        "access: off wrote to stdout: {}",
        gw.stdout()
    );
    assert!(!log.exists());

    // Reloading to a file starts logging there...
    gw.write_config(&config(ports, up.port(), log.to_str().unwrap()));
    gw.reload_signal();
    let on = wait_until(Duration::from_secs(3), || {
        assert_eq!(http_get(ports.addr(), "/api/b", &[]).status, 200);
        std::thread::sleep(Duration::from_millis(50));
        !log_lines(&log).is_empty()
    });
    check(&gw, on, "reload to a log file wrote nothing");
    std::thread::sleep(Duration::from_millis(400));
    let before = log_lines(&log).len();

    // ...and reloading to off stops it.
    let generation_before = generation(ports);
    gw.write_config(&config(ports, up.port(), "off"));
    gw.reload_signal();
    let off = wait_generation_above(ports, generation_before, Duration::from_secs(3));
    check(&gw, off, "reload to off not applied");
    assert_eq!(http_get(ports.addr(), "/api/c", &[]).status, 200);
    std::thread::sleep(Duration::from_millis(500));
    let after = log_lines(&log);
    assert_eq!(after.len(), before, "access: off still logged: {after:#?}");
    assert!(!gw.stdout().contains("\"path\""));
}

/// Sends `bytes` on a fresh connection (then, with `stall`, keeps it open
/// without sending more) and returns the status of the answer.
fn raw_status(port: u16, bytes: &[u8], stall: bool) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(local(port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(bytes).unwrap();
    if !stall {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

fn refused_config(ports: Ports, access: &str) -> String {
    format!(
        "{}reload: {{ watch: false }}\nlog: {{ access: \"{access}\" }}\n\
         limits: {{ max_header_bytes: 2048 }}\ntimeouts: {{ client_header: 300ms }}\n\
         routes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "hi there")
    )
}

/// Requests refused before routing (bad framing 400, a bad path 400,
/// CONNECT's authority target 400, a slow head 408, a head too large 431, and a bad path on
/// an HTTP/2 stream) each get one line with their status, the client and
/// the listener, and the method and path when the head was parsed.
#[test]
fn refused_requests_each_write_one_line() {
    let dir = ScratchDir::new("access-refused");
    let log = dir.path().join("access.log");
    let ports = Ports::new();
    let gw = start(ports, &refused_config(ports, log.to_str().unwrap()));
    let port = ports.listen;

    let framing = b"POST /f HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
    assert_eq!(raw_status(port, framing, false), Some(400));
    let bad_path = b"GET /a%2fb HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(raw_status(port, bad_path, false), Some(400));
    let connect = b"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n";
    // An authority-form target is refused as a bad target.
    assert_eq!(raw_status(port, connect, false), Some(400));
    assert_eq!(
        raw_status(port, b"GET /slow HTTP/1.1\r\nHost:", true),
        Some(408)
    );
    let big = format!(
        "GET /big HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "x".repeat(4096)
    );
    assert_eq!(raw_status(port, big.as_bytes(), false), Some(431));
    let h2 = Proto::H2c.get(ports.addr(), "/h2%2fbad", &[]);
    assert_eq!(h2.status, 400);
    // A good request between them is logged as before.
    assert_eq!(http_get(ports.addr(), "/hello", &[]).status, 200);

    let flushed = wait_until(Duration::from_secs(3), || log_lines(&log).len() >= 7);
    check(&gw, flushed, &format!("log has {:?}", log_lines(&log)));
    std::thread::sleep(Duration::from_millis(400));
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 7, "one line per request: {lines:#?}");
    let listener = format!("127.0.0.1:{port}");
    let refused: Vec<&Value> = lines.iter().filter(|l| l["path"] != "/hello").collect();
    for l in &refused {
        assert_eq!(l["client"], "127.0.0.1", "{l}");
        assert_eq!(l["listener"], listener.as_str(), "{l}");
        assert_eq!(l["route"], "", "{l}");
        assert!(l["upstream_ms"].is_null(), "{l}");
        assert!(l["bytes_out"].as_u64().is_some_and(|n| n > 0), "{l}");
    }
    let status_of = |method: &str, path: &str| -> Vec<u64> {
        refused
            .iter()
            .filter(|l| l["method"] == method && l["path"] == path)
            .map(|l| l["status"].as_u64().unwrap())
            .collect()
    };
    // Heads that could not be parsed: no method, no path.
    let mut unparsed = status_of("", "");
    unparsed.sort_unstable();
    assert_eq!(unparsed, [400, 408, 431], "{refused:#?}");
    assert_eq!(status_of("GET", "/a%2fb"), [400], "{refused:#?}");
    assert_eq!(
        status_of("CONNECT", "example.test:443"),
        [400],
        "{refused:#?}"
    );
    let h2_line = refused
        .iter()
        .find(|l| l["path"] == "/h2%2fbad")
        .unwrap_or_else(|| panic!("no line for the HTTP/2 stream: {refused:#?}"));
    assert_eq!(h2_line["status"], 400);
    assert_eq!(h2_line["proto"], "HTTP/2");
    // The good request's line has no listener field: only refusals do.
    let hello = find(&lines, "/hello");
    assert!(hello.get("listener").is_none(), "{hello}");
    assert_eq!(
        metric(ports, "sluicegate_unrouted_responses_total{code=\"431\"}"),
        1.0
    );
}

/// A flood of malformed requests writes one bounded line each: a bad
/// target as long as the head limit allows is cut in the log, so no
/// request makes a line much longer than a normal one.
#[test]
fn a_flood_of_refused_requests_writes_bounded_lines() {
    let dir = ScratchDir::new("access-flood");
    let log = dir.path().join("access.log");
    let ports = Ports::new();
    let gw = start(ports, &refused_config(ports, log.to_str().unwrap()));
    const N: usize = 200;
    // Control bytes escape to six each: the worst case for the log.
    let target = format!("/{}", "%01".repeat(600));
    let req = format!("GET {target}\x01 HTTP/1.1\r\nHost: a\r\n\r\n");
    let bad = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "%2f".repeat(500));
    for i in 0..N {
        let bytes = if i % 2 == 0 {
            req.as_bytes()
        } else {
            bad.as_bytes()
        };
        assert_eq!(
            raw_status(ports.listen, bytes, false),
            Some(400),
            "request {i}"
        );
    }
    let flushed = wait_until(Duration::from_secs(5), || log_lines(&log).len() >= N);
    check(&gw, flushed, &format!("{} lines", log_lines(&log).len()));
    std::thread::sleep(Duration::from_millis(400));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), N);
    let longest = text.lines().map(str::len).max().unwrap();
    // 1024 target bytes (plain here) plus the other fields.
    assert!(longest < 1024 + 400, "a line of {longest} bytes");
    for l in log_lines(&log) {
        assert_eq!(l["status"], 400, "{l}");
    }
}
