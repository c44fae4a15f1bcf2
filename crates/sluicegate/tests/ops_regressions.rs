//! Regression tests for operational bugs the end-to-end suite found: each
//! comment says what was wrong, the test proves it stays fixed.

mod ops_common;

use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use ops_common::*;
use sluicegate_testkit::{http_get, Gateway, KeepAliveClient, TestUpstream};

// Was a bug: a client connection that has not sent a request yet is counted
// as busy by the drain: SIGTERM waits the whole `timeouts.drain` for it
// instead of closing it at once (conn.rs reads the first request head
// without watching the shutdown channel; only `await_next_request` does).
#[test]
fn sigterm_does_not_wait_for_a_connection_without_a_request() {
    let ports = Ports::new();
    let yaml = format!(
        "{}reload: {{ watch: false }}\ntimeouts: {{ drain: 3s }}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "hi")
    );
    let mut gw = start(ports, &yaml);
    let settled = wait_until(Duration::from_secs(3), || {
        metric(ports, "sluicegate_client_connections") == 0.0
    });
    check(&gw, settled, "probe connections still counted");
    // Connected, nothing sent: no request is in flight.
    let _silent = TcpStream::connect(ports.addr()).unwrap();
    let counted = wait_until(Duration::from_secs(2), || {
        metric(ports, "sluicegate_client_connections") == 1.0
    });
    check(&gw, counted, "silent connection not counted");

    let signalled = Instant::now();
    gw.terminate();
    let status = gw.wait_exit(Duration::from_secs(6));
    let took = signalled.elapsed();
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(
        took < Duration::from_secs(1),
        "exit took {took:?}: the drain waited for a connection with no request"
    );
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .count()
}

fn access_config(ports: Ports, upstream: u16, access: &str) -> String {
    format!(
        "{}reload: {{ watch: false }}\nlog: {{ access: \"{access}\" }}\nservices:\n{}routes:\n{}",
        ports.head(),
        service("api", &[upstream]),
        proxy_route("api", "/api", "api"),
    )
}

// Was a bug: access log lines buffered by a worker (flushed every 200 ms)
// are written to the sink of the snapshot current at flush time, not of the
// request: a request answered just before a reload that changes `log.access`
// is logged into the new file (Worker::flush_log loads the new snapshot).
#[test]
fn access_lines_stay_in_the_file_of_their_request_across_a_reload() {
    let up = TestUpstream::start();
    let dir = ScratchDir::new("access-switch");
    let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let ports = Ports::new();
    let gw = start(ports, &access_config(ports, up.port(), a.to_str().unwrap()));

    assert_eq!(http_get(ports.addr(), "/api/x", &[]).status, 200);
    gw.write_config(&access_config(ports, up.port(), b.to_str().unwrap()));
    gw.reload_signal();
    let applied = wait_generation_above(ports, 1, Duration::from_secs(3));
    check(&gw, applied, "reload not applied");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        (lines(&a), lines(&b)),
        (1, 0),
        "the request answered under a.log was logged in b.log"
    );
}

// Was a bug: same cause as above; when the reload sets `access: off`, the
// lines of requests answered just before it are dropped.
#[test]
fn access_lines_are_not_lost_when_a_reload_turns_the_log_off() {
    let up = TestUpstream::start();
    let dir = ScratchDir::new("access-lost");
    let a = dir.path().join("a.log");
    let ports = Ports::new();
    let gw = start(ports, &access_config(ports, up.port(), a.to_str().unwrap()));

    assert_eq!(http_get(ports.addr(), "/api/x", &[]).status, 200);
    gw.write_config(&access_config(ports, up.port(), "off"));
    gw.reload_signal();
    let applied = wait_generation_above(ports, 1, Duration::from_secs(3));
    check(&gw, applied, "reload not applied");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        lines(&a),
        1,
        "the line of a request answered before the reload was lost"
    );
}

// Was a bug: the first request on a connection is timed from the accept,
// not from its first byte: `duration_ms` in the access log and
// sluicegate_request_duration_seconds include the time the client waited
// before sending (conn.rs `request()` takes `started` before reading).
#[test]
fn duration_of_a_first_request_excludes_idle_time_before_it() {
    let dir = ScratchDir::new("access-duration");
    let log = dir.path().join("access.log");
    let ports = Ports::new();
    let yaml = format!(
        "{}reload: {{ watch: false }}\nlog: {{ access: \"{}\" }}\nroutes:\n{}",
        ports.head(),
        log.display(),
        respond_route("hello", "/hello", "hi")
    );
    let gw = start(ports, &yaml);
    let mut client = KeepAliveClient::connect(ports.addr()).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(client.get("/hello").unwrap().status, 200);
    let logged = wait_until(Duration::from_secs(2), || lines(&log) == 1);
    check(&gw, logged, "no access line");
    let text = std::fs::read_to_string(&log).unwrap();
    let line: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let ms = line["duration_ms"].as_f64().unwrap();
    let sum = metric(
        ports,
        "sluicegate_request_duration_seconds_sum{route=\"hello\"}",
    );
    assert!(
        ms < 100.0 && sum < 0.1,
        "a fixed response took duration_ms {ms} (histogram sum {sum} s): the 500 ms \
         the client waited before sending were counted"
    );
}

// Was a bug: the listen (and admin) ports accept before the SIGHUP/SIGTERM
// handlers are installed (main.rs starts the workers, then registers the
// signals inside `rt.block_on`), so a SIGHUP sent as soon as the port
// accepts kills the process with the default disposition.
#[test]
fn sighup_right_after_the_port_accepts_does_not_kill_the_gateway() {
    let mut killed = Vec::new();
    for _ in 0..30 {
        let ports = Ports::new();
        let yaml = format!(
            "{}reload: {{ watch: false }}\nroutes:\n{}",
            ports.head(),
            respond_route("hello", "/hello", "hi")
        );
        let mut gw = Gateway::spawn(bin(), &yaml);
        let t0 = Instant::now();
        while TcpStream::connect(ports.addr()).is_err() && t0.elapsed() < Duration::from_secs(5) {}
        gw.reload_signal();
        if let Some(status) = gw.wait_exit(Duration::from_millis(100)) {
            killed.push(status.to_string());
        }
    }
    assert!(
        killed.is_empty(),
        "{} of 30 gateways died from a SIGHUP sent right after their port accepted: {killed:?}",
        killed.len()
    );
}

// Was a bug: the file watcher takes its first stamp of the config file
// (Reloader::new in main.rs) some time after the file was read at startup and
// after the ports accept; a change written in between is never applied,
// although `reload.watch` is on, until the file changes again.
#[test]
fn a_file_change_right_after_startup_is_applied() {
    let mut missed = 0;
    for _ in 0..40 {
        let ports = Ports::new();
        let yaml = |body: &str| {
            format!(
                "{}reload: {{ poll_interval: 50ms }}\nroutes:\n{}",
                ports.head(),
                respond_route("hello", "/hello", body)
            )
        };
        let mut gw = Gateway::spawn(bin(), &yaml("old"));
        let t0 = Instant::now();
        while TcpStream::connect(ports.addr()).is_err() && t0.elapsed() < Duration::from_secs(5) {}
        gw.write_config(&yaml("new"));
        assert!(gw.wait_ready(&ports.both(), Duration::from_secs(5)).is_ok());
        let applied = wait_until(Duration::from_secs(1), || {
            http_get(ports.addr(), "/hello", &[]).body_str() == "new"
        });
        if !applied {
            missed += 1;
        }
    }
    assert_eq!(
        missed, 0,
        "{missed} of 40 gateways never applied a change written at startup"
    );
}
