//! The JSON-lines access log on the real binary: one line per request in a
//! file (fields checked with serde_json), on stdout, nothing with
//! `access: off`, and switching the log on and off by reload. Requests on
//! HTTP/2 streams are logged alike, with `"proto":"HTTP/2"`.

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
