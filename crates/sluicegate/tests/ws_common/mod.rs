//! Shared helpers for the WebSocket end-to-end tests (`ws_*`): the PyPI
//! tools' Python (from `venv_common`), the fixtures in
//! `tests/fixtures/ws`, the `websockets` echo server, many echo sessions
//! at once (`sessions.py`), and waiting for a client process with a bound.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
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

/// `sessions.py`: `n` WebSocket echo sessions to one URL, each sending a
/// message and checking its echo every 100 to 500 ms until stopped; the
/// client is killed on drop.
pub struct Sessions {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    n: usize,
}

impl Sessions {
    /// Starts the client and waits (60 s at most) until all `n` are open.
    pub fn open(url: &str, n: usize) -> Sessions {
        let mut child = Command::new(python())
            .arg(fixture("sessions.py"))
            .args([url, &n.to_string(), "120"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run sessions.py");
        let (tx, lines) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let sessions = Sessions {
            child: Some(child),
            lines,
            n,
        };
        let first = sessions.lines.recv_timeout(Duration::from_secs(60));
        assert_eq!(
            first.as_deref(),
            Ok(format!("open {n}").as_str()),
            "the sessions did not all open"
        );
        sessions
    }

    /// Stops and closes every session, then checks the summary: all were
    /// open to the end (none cut), every echo matched, every close was
    /// clean (1000), and each session exchanged `min_messages` at least.
    /// Returns the summary.
    pub fn stop_and_check(mut self, min_messages: u64) -> serde_json::Value {
        let mut child = self.child.take().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"stop\n")
            .expect("tell the sessions to stop");
        let status = wait_bounded(child, Duration::from_secs(60)).status;
        let summary = self
            .lines
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default();
        let stats: serde_json::Value = serde_json::from_str(&summary)
            .unwrap_or_else(|e| panic!("no summary from sessions.py ({e}): {summary:?}"));
        assert_eq!(stats["opened"], self.n, "{stats}");
        assert_eq!(stats["cut"], 0, "{stats}");
        assert_eq!(stats["mismatched"], 0, "{stats}");
        assert_eq!(stats["closed_clean"], self.n, "{stats}");
        assert!(
            stats["fewest"].as_u64().unwrap_or(0) >= min_messages,
            "{stats}"
        );
        assert!(status.success(), "{stats}");
        stats
    }
}

impl Drop for Sessions {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
