//! Shared helpers for the WebSocket end-to-end tests (`ws_*`): the PyPI
//! tools' Python (from `venv_common`), the fixtures in
//! `tests/fixtures/ws`, the `websockets` echo server, and waiting for a
//! client process with a bound.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sluicegate_testkit::free_port;

pub use crate::venv_common::python;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ws")
        .join(name)
}

/// The echo server on a free port; killed on drop.
pub struct Echo {
    child: Child,
    pub port: u16,
}

impl Echo {
    pub fn start() -> Echo {
        Echo::start_with(Stdio::inherit())
    }

    /// With its log discarded: a peer breaking the protocol on purpose
    /// makes it log a traceback each time.
    pub fn quiet() -> Echo {
        Echo::start_with(Stdio::null())
    }

    fn start_with(stderr: Stdio) -> Echo {
        let port = free_port();
        let mut child = Command::new(python())
            .arg(fixture("echo_server.py"))
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start the echo server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "echo server did not start");
        Echo { child, port }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `child` to exit, for `limit` at most (then kills it and fails
/// the test); its output.
pub fn wait_bounded(mut child: Child, limit: Duration) -> std::process::Output {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().unwrap();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("the WebSocket client did not finish within {limit:?}")
}
