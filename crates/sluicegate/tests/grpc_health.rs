//! Active health checks with the gRPC health protocol (`health: { type:
//! grpc }`) against grpcio's own health service (`fixtures/grpc/server.py`,
//! `test.Echo` SERVING, or NOT_SERVING when started `unavailable`) behind
//! a service with `protocol: h2c`: the NOT_SERVING endpoint leaves rotation
//! and every call goes to the serving one; a service name the server does
//! not know (NOT_FOUND) is unhealthy, the server's overall health (no
//! `service`) healthy; an endpoint that is killed leaves rotation within a
//! few intervals. Over TLS (`protocol: h2` and `auto`), the checks go
//! through nginx (HTTP/2 over TLS, `grpc_pass` to the same servers).

mod grpc_common;
mod http_common;
mod ops_common;
mod tls_common;
mod venv_common;

use std::net::SocketAddr;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use grpc_common::{fixture, Server};
use http_common::{service, Gw};
use sluicegate_testkit::{free_port, http_get};
use tls_common::upstream::{quoted, NginxTls, Pki};
use venv_common::python;

/// The status codes of `n` unary calls through the gateway on `port`.
fn calls(port: u16, n: usize) -> Vec<String> {
    let out = Command::new(python())
        .arg(fixture("client.py"))
        .arg(port.to_string())
        .args(["repeat", &n.to_string()])
        .output()
        .expect("run the gRPC client");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("bad client line {l:?}: {e}"));
            v["code"].as_str().unwrap_or("").to_string()
        })
        .collect()
}

/// The gateway with an admin listener, service `g` on `endpoints` with
/// `health`, all routed to it.
fn start(endpoints: &[SocketAddr], health: &str) -> (Gw, u16) {
    let admin = free_port();
    let gw = Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\nservices:\n{}routes:\n  - name: echo\n    service: g\n",
        service(
            "g",
            endpoints,
            &format!("    protocol: h2c\n    health: {health}\n")
        )
    ));
    (gw, admin)
}

/// The endpoint's `sluicegate_upstream_healthy` gauge, if shown.
fn healthy(admin: u16, ep: SocketAddr) -> Option<u8> {
    let start = format!("sluicegate_upstream_healthy{{service=\"g\",endpoint=\"{ep}\"}} ");
    let text = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    text.lines()
        .find_map(|l| l.strip_prefix(&start))
        .and_then(|v| v.trim().parse().ok())
}

/// Waits up to `limit` for the gauge of `ep` to read `want`; how long it
/// took.
fn wait_health(admin: u16, ep: SocketAddr, want: u8, limit: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let now = healthy(admin, ep);
        if now == Some(want) {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < limit,
            "{ep} not {want} within {limit:?} (gauge: {now:?})"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

const CHECK: &str = "interval: 100ms, timeout: 500ms, unhealthy_after: 2, healthy_after: 1";

#[test]
fn a_not_serving_endpoint_leaves_rotation_and_a_killed_one_follows() {
    let good = Server::start();
    let bad = Server::start_with(&["unavailable"]);
    let (gw, admin) = start(
        &[good.addr(), bad.addr()],
        &format!("{{ type: grpc, service: test.Echo, {CHECK} }}"),
    );
    let limit = Duration::from_secs(5);
    wait_health(admin, bad.addr(), 0, limit);
    wait_health(admin, good.addr(), 1, limit);
    // Every call goes to the serving endpoint (the other would end them
    // UNAVAILABLE).
    let codes = calls(gw.port, 20);
    assert_eq!(codes.len(), 20, "{codes:?}");
    assert!(codes.iter().all(|c| c == "OK"), "{codes:?}");
    // It stays so: NOT_SERVING is never taken as healthy.
    thread::sleep(Duration::from_millis(300));
    assert_eq!(healthy(admin, bad.addr()), Some(0));

    // The serving one is killed: out within a few intervals (two failed
    // checks of 100 ms; a refused connect fails at once).
    let good_addr = good.addr();
    drop(good);
    let took = wait_health(admin, good_addr, 0, Duration::from_secs(2));
    println!("killed endpoint marked down after {took:?}");
}

#[test]
fn an_unknown_service_is_unhealthy_and_the_server_as_a_whole_healthy() {
    let server = Server::start();
    let (_gw, admin) = start(
        &[server.addr()],
        &format!("{{ type: grpc, service: no.Such, {CHECK} }}"),
    );
    wait_health(admin, server.addr(), 0, Duration::from_secs(5));
    thread::sleep(Duration::from_millis(300));
    assert_eq!(healthy(admin, server.addr()), Some(0));

    // No service: the server's overall health, SERVING.
    let (gw, admin) = start(&[server.addr()], &format!("{{ type: grpc, {CHECK} }}"));
    thread::sleep(Duration::from_millis(500));
    assert_eq!(healthy(admin, server.addr()), Some(1));
    assert_eq!(calls(gw.port, 3), ["OK", "OK", "OK"]);
}

#[test]
fn checks_go_over_tls_as_http2() {
    let pki = Pki::new();
    let good = Server::start();
    let bad = Server::start_with(&["unavailable"]);
    // nginx: HTTP/2 over TLS, passing the health calls on as gRPC.
    let front = |s: &Server| {
        NginxTls::start_listen(
            "ssl http2",
            &pki.file("up.pem"),
            &pki.file("up.key"),
            &format!(
                "        location /grpc.health.v1.Health/ {{ grpc_pass grpc://{}; }}\n",
                s.addr()
            ),
        )
    };
    let (ng, nb) = (front(&good), front(&bad));
    let (good_ep, bad_ep) = (ng.addr(), nb.addr());
    for protocol in ["h2", "auto"] {
        let (p, extra) = tls_common::ports(0);
        let yaml = format!(
            "{}services:\n{}routes:\n  - name: all\n    service: g\n",
            tls_common::head(p, &[]),
            service(
                "g",
                &[good_ep, bad_ep],
                &format!(
                    "    tls: {{ ca: {}, sni: up.test }}\n    protocol: {protocol}\n\
                     \x20   health: {{ type: grpc, service: test.Echo, {CHECK} }}\n",
                    quoted(&pki.ca())
                )
            )
        );
        let g = tls_common::start(p, extra, &yaml);
        let admin = g.ports.admin;
        wait_health(admin, bad_ep, 0, Duration::from_secs(5));
        // The serving one passes its checks over 5 more intervals.
        thread::sleep(Duration::from_millis(500));
        assert_eq!(
            healthy(admin, good_ep),
            Some(1),
            "{protocol}: {}",
            ng.logs()
        );
        assert_eq!(healthy(admin, bad_ep), Some(0), "{protocol}");
    }
    // nginx saw the checks as HTTP/2 calls over TLS, with the SNI.
    let checks: Vec<_> = ng
        .access()
        .into_iter()
        .filter(|l| l.uri == "/grpc.health.v1.Health/Check")
        .collect();
    assert!(checks.len() >= 5, "{}", ng.logs());
    assert!(
        checks
            .iter()
            .all(|l| l.status == 200 && l.sni == "up.test" && l.proto.starts_with("TLSv1.")),
        "{checks:#?}"
    );
}
