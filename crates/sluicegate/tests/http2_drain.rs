//! Long-lived HTTP/2 streams across a reload and a graceful upgrade (`run
//! --upgrade`): a gRPC call in flight (the grpcio test server holds its
//! answer for a while, `x-sleep-ms`) on an HTTP/2 connection to the
//! gateway ends OK with its answer, not cut, whether the config is
//! reloaded under it or the process hands its sockets over and drains.
//! Calls made after the change are served too (by the new config, and by
//! the new process).

mod grpc_common;
mod ops_common;
mod venv_common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use grpc_common::{fixture, Server};
use ops_common::*;
use sluicegate_testkit::Gateway;
use venv_common::python;

/// How long the upstream holds each slow call's answer.
const HOLD_MS: u64 = 2500;

/// The gateway's config: the gRPC test server behind `/test.Echo/`, and
/// `extra` more routes.
fn config(ports: &Ports, grpc: SocketAddr, extra: &str) -> String {
    format!(
        "{}reload: {{ watch: false }}\ntimeouts: {{ drain: 15s }}\nservices:\n  - name: g\n    \
         endpoints: [\"{grpc}\"]\n    protocol: h2c\nroutes:\n  - name: echo\n    match: {{ \
         path_prefix: /test.Echo/ }}\n    service: g\n{extra}",
        ports.head()
    )
}

/// A unary call through the gateway, held `hold_ms` by the upstream,
/// running in the background.
fn slow_call(port: u16, hold_ms: u64) -> Child {
    Command::new(python())
        .arg(fixture("client.py"))
        .arg(port.to_string())
        .arg("unary")
        .arg(format!("x-sleep-ms={hold_ms}"))
        .arg("--timeout")
        .arg("20")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the gRPC client")
}

/// Waits (at most 30 s) for a call's one result line: its status name
/// and its answer.
fn outcome(mut child: Child) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the gRPC client did not finish in 30 s");
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("client output");
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| {
        panic!(
            "bad client line {line:?}: {e}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        v["code"].as_str().unwrap_or("").to_string(),
        v["result"].to_string(),
    )
}

/// Waits until the `n` slow calls' connections are open (each client has
/// its own), and a little more, so that a change comes while their
/// streams are in flight (each is held for [`HOLD_MS`]).
fn wait_in_flight(ports: Ports, n: usize) {
    let ok = wait_until(Duration::from_secs(10), || {
        metric(ports, "sluicegate_client_connections") >= n as f64
    });
    assert!(ok, "the slow calls never reached the gateway");
    thread::sleep(Duration::from_millis(300));
}

#[test]
fn a_reload_does_not_cut_calls_in_flight_and_the_new_config_serves() {
    let server = Server::start();
    let ports = Ports::new();
    let gw = start(ports, &config(&ports, server.addr(), ""));
    let calls: Vec<Child> = (0..3).map(|_| slow_call(ports.listen, HOLD_MS)).collect();
    wait_in_flight(ports, 3);
    let generation_before = generation(ports);
    // The reload adds a route; the calls under way keep going.
    std::fs::write(
        gw.config_path(),
        config(
            &ports,
            server.addr(),
            &respond_route("added", "/added", "new"),
        ),
    )
    .unwrap();
    gw.reload_signal();
    assert!(
        wait_generation_above(ports, generation_before, Duration::from_secs(10)),
        "the reload was not applied\n{}",
        gw.stderr()
    );
    let started = Instant::now();
    for c in calls {
        let (code, result) = outcome(c);
        assert_eq!(
            code,
            "OK",
            "a call in flight across the reload\n{}",
            gw.stderr()
        );
        assert_eq!(result, "\"echo:hi\"");
    }
    assert!(
        started.elapsed() < Duration::from_millis(HOLD_MS + 5000),
        "the calls took {:?}",
        started.elapsed()
    );
    let added = sluicegate_testkit::http_get(ports.addr(), "/added", &[]);
    assert_eq!((added.status, added.body.as_slice()), (200, &b"new"[..]));
}

#[test]
fn an_upgrade_lets_calls_in_flight_finish_on_the_old_process() {
    let server = Server::start();
    let ports = Ports::new();
    let yaml = config(&ports, server.addr(), "");
    let dir = ScratchDir::new("h2-drain");
    let sock = dir.path().join("handover.sock");
    let sock_arg = sock.to_str().unwrap().to_string();
    let mut old = Gateway::spawn_args(bin(), &yaml, &["--handover-socket", &sock_arg]);
    wait_serving(&old, ports);
    let calls: Vec<Child> = (0..3).map(|_| slow_call(ports.listen, HOLD_MS)).collect();
    wait_in_flight(ports, 3);
    let mut new = Gateway::spawn_args(bin(), &yaml, &["--handover-socket", &sock_arg, "--upgrade"]);
    // The new process takes the sockets; a call made now reaches it.
    let after = wait_until(Duration::from_secs(10), || {
        let (code, _) = outcome(slow_call(ports.listen, 0));
        code == "OK"
    });
    assert!(after, "no call served after the upgrade\n{}", new.stderr());
    for c in calls {
        let (code, result) = outcome(c);
        assert_eq!(
            code,
            "OK",
            "a call in flight across the upgrade\n{}",
            old.stderr()
        );
        assert_eq!(result, "\"echo:hi\"");
    }
    // With its streams done the old process ends well before the drain
    // deadline.
    let exited = old.wait_exit(Duration::from_secs(14));
    assert!(
        exited.is_some_and(|s| s.success()),
        "the old process drains and exits 0: {exited:?}\n{}",
        old.stderr()
    );
    assert!(new.is_running(), "{}", new.stderr());
    new.terminate();
    assert!(new.wait_exit(Duration::from_secs(10)).is_some());
}
