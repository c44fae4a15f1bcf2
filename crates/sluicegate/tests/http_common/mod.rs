//! Shared helpers for the `http_*` end-to-end tests: start the real
//! `sluicegate` binary on a free loopback port with a YAML fragment, talk to
//! it over raw sockets with bounded timeouts, and check error bodies.
#![allow(dead_code)]

pub mod load;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use sluicegate_testkit::{free_port, Gateway, Response};

/// The gateway binary under test.
pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sluicegate"))
}

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// A gateway process listening on its own free port; killed on drop.
pub struct Gw {
    pub gw: Gateway,
    pub port: u16,
}

impl Gw {
    /// Starts the gateway with `listen` on a free port, `workers: 2`, quiet
    /// logs and no file watching, followed by `rest` (top-level YAML keys
    /// such as `limits:`, `services:` and `routes:`).
    pub fn start(rest: &str) -> Gw {
        Gw::start_with_workers(rest, 2)
    }

    pub fn start_with_workers(rest: &str, workers: usize) -> Gw {
        let mut last = String::new();
        // A free port can be taken between probing and the gateway's bind.
        for _ in 0..3 {
            let port = free_port();
            let yaml = format!(
                "listen: [\"127.0.0.1:{port}\"]\nworkers: {workers}\n\
                 log: {{ level: warn, access: off }}\nreload: {{ watch: false }}\n{rest}"
            );
            let mut gw = Gateway::spawn(bin(), &yaml);
            match gw.wait_ready(&[port], Duration::from_secs(10)) {
                Ok(()) => return Gw { gw, port },
                Err(why) => {
                    last = format!(
                        "{why}\nconfig:\n{yaml}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                        gw.stdout(),
                        gw.stderr()
                    )
                }
            }
        }
        panic!("gateway did not start: {last}");
    }

    pub fn addr(&self) -> SocketAddr {
        loopback(self.port)
    }
}

/// A service block for `endpoints` (plain `host:port` strings) with extra
/// service keys (already indented YAML lines, may be empty).
pub fn service(name: &str, endpoints: &[SocketAddr], extra: &str) -> String {
    let list: Vec<String> = endpoints.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "  - name: {name}\n    endpoints: [{}]\n{extra}",
        list.join(", ")
    )
}

/// What a raw exchange got back.
#[derive(Debug)]
pub struct Exchange {
    pub data: Vec<u8>,
    /// The peer closed (EOF or reset) before the wait ran out.
    pub closed: bool,
}

impl Exchange {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }

    /// Status code of the first response in the data.
    pub fn status(&self) -> Option<u16> {
        status_of(&self.data)
    }

    /// Status codes of every response head found in the data, in order.
    pub fn statuses(&self) -> Vec<u16> {
        let text = self.text();
        text.match_indices("HTTP/1.")
            .filter_map(|(i, _)| status_of(&text.as_bytes()[i..]))
            .collect()
    }
}

/// Parses `HTTP/1.x NNN` at the start of `data`.
pub fn status_of(data: &[u8]) -> Option<u16> {
    let line = data.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.trim().parse().ok()
}

/// Connects, writes `bytes` (write errors ignored: the gateway may close
/// early) and reads until the peer closes or nothing arrives for `wait`.
pub fn exchange(port: u16, bytes: &[u8], wait: Duration) -> Exchange {
    let mut stream = TcpStream::connect_timeout(&loopback(port), Duration::from_secs(5))
        .expect("connect to gateway");
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let _ = stream.write_all(bytes);
    read_until_close(&mut stream, wait)
}

/// Reads until EOF/reset (closed) or no byte for `wait` (still open).
/// Bounded overall by 4 x `wait` + 5 s.
pub fn read_until_close(stream: &mut TcpStream, wait: Duration) -> Exchange {
    let deadline = Instant::now() + wait * 4 + Duration::from_secs(5);
    let _ = stream.set_read_timeout(Some(wait));
    let mut data = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        if Instant::now() >= deadline {
            return Exchange {
                data,
                closed: false,
            };
        }
        match stream.read(&mut buf) {
            Ok(0) => return Exchange { data, closed: true },
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Exchange {
                    data,
                    closed: false,
                }
            }
            Err(_) => return Exchange { data, closed: true },
        }
    }
}

/// Reads one response head (through the blank line) within `wait`.
pub fn read_head(stream: &mut TcpStream, wait: Duration) -> Option<String> {
    let deadline = Instant::now() + wait;
    let mut data = Vec::new();
    let mut byte = [0u8; 1];
    while !data.ends_with(b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut byte) {
            Ok(1) => data.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&data).into_owned())
}

/// Polls `f` every 10 ms until it is true or `timeout` passes.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Checks an error response made by the gateway itself: `status`, a JSON
/// body `{"error":"...","status":N}` and no internal detail in it.
pub fn assert_json_error(resp: &Response, status: u16) {
    let body = resp.body_str();
    assert_eq!(resp.status, status, "status; body: {body}");
    let ctype = resp.header("content-type").unwrap_or_default();
    assert!(
        ctype.starts_with("application/json"),
        "content-type {ctype:?}"
    );
    assert_json_error_body(&body, status);
}

/// Checks a body is `{"error":"...","status":N,"request_id":"..."}`
/// without internal detail.
pub fn assert_json_error_body(body: &str, status: u16) {
    let trimmed = body.trim();
    assert!(
        trimmed.starts_with("{\"error\":\""),
        "body is not the JSON error shape: {body:?}"
    );
    let doc: serde_json::Value = serde_json::from_str(trimmed)
        .unwrap_or_else(|e| panic!("body is not JSON ({e}): {body:?}"));
    let mut keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["error", "request_id", "status"], "{body:?}");
    assert_eq!(
        doc["status"], status,
        "body does not say status {status}: {body:?}"
    );
    assert!(
        doc["request_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{body:?}"
    );
    let lower = trimmed.to_ascii_lowercase();
    for leak in [
        "127.0.0.1",
        "os error",
        "refused",
        "errno",
        "panicked",
        "::",
    ] {
        assert!(
            !lower.contains(leak),
            "error body leaks internal detail ({leak}): {body:?}"
        );
    }
}

/// The body of a raw response text (after the first blank line).
pub fn body_of(text: &str) -> &str {
    text.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// The value of the `/metrics` line `series` (name and labels, as
/// written) on the admin listener at `admin`, 0 when absent; waits (at
/// most 10 s) for the admin listener to answer.
pub fn admin_metric(admin: u16, series: &str) -> u64 {
    let mut text = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            match sluicegate_testkit::try_http_get(loopback(admin), "/metrics", &[]) {
                Ok(r) if r.status == 200 => {
                    text = r.body_str();
                    true
                }
                _ => false,
            }
        }),
        "no /metrics on 127.0.0.1:{admin}"
    );
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}
