//! Helpers shared by the `tls_*` end-to-end tests: certificates made at
//! test time with the `openssl` CLI (a test CA and leaves signed by it),
//! external clients (`openssl s_client`, `curl`, Python's `ssl`) run with a
//! deadline, listener YAML, and raw socket exchanges.
//!
//! Needs `ops_common` declared next to it (`mod ops_common; mod tls_common;`).
//!
//! This module starts gateways and talks raw sockets and metrics;
//! certificates are in `certs`, external clients in `clients`, running a
//! command with a deadline in `run`, all re-exported here; the gateway the
//! termination tests share is in `termination`, nginx over TLS for the
//! upstream tests in `upstream`.
#![allow(dead_code)]

mod certs;
mod clients;
mod run;
pub mod termination;
pub mod upstream;

// Each test file uses a part of these (as with `dead_code` above).
#[allow(unused_imports)]
pub use certs::*;
#[allow(unused_imports)]
pub use clients::*;
#[allow(unused_imports)]
pub use run::*;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use sluicegate_testkit::{free_port, Gateway};

use crate::ops_common::{bin, check, local, wait_until, Ports};

// ---------------------------------------------------------------- gateway

/// A gateway with a plain listener, one or more TLS (or other) listeners and
/// an admin listener.
pub struct TlsGw {
    pub gw: Gateway,
    /// `listen` is the plain listener.
    pub ports: Ports,
    /// The extra listeners' ports, in the order given.
    pub extra: Vec<u16>,
}

impl TlsGw {
    pub fn plain(&self) -> SocketAddr {
        self.ports.addr()
    }

    pub fn port(&self, i: usize) -> u16 {
        self.extra[i]
    }

    pub fn check(&self, ok: bool, what: &str) {
        check(&self.gw, ok, what)
    }
}

/// Free ports for a plain listener, an admin listener and `n` more.
pub fn ports(n: usize) -> (Ports, Vec<u16>) {
    let ports = Ports::new();
    let mut extra: Vec<u16> = Vec::new();
    while extra.len() < n {
        let p = free_port();
        if p != ports.listen && p != ports.admin && !extra.contains(&p) {
            extra.push(p);
        }
    }
    (ports, extra)
}

/// The top of a config: the plain listener, `listeners` (each a YAML flow
/// item, e.g. `{ addr: "127.0.0.1:N", tls: {...} }`), the admin listener,
/// two workers, no file watch, `timeouts.tls_handshake: 1s`.
pub fn head(ports: Ports, listeners: &[String]) -> String {
    let mut s = format!("listen:\n  - \"127.0.0.1:{}\"\n", ports.listen);
    for l in listeners {
        s.push_str(&format!("  - {l}\n"));
    }
    s.push_str(&format!(
        "admin: {{ listen: \"127.0.0.1:{}\" }}\nworkers: 2\nreload: {{ watch: false }}\n\
         timeouts: {{ tls_handshake: 1s }}\n",
        ports.admin
    ));
    s
}

/// [`head`] with one TLS listener, on `port`, serving certificate `a` of
/// `certs` (for `a.test`; HTTP/2 by ALPN).
pub fn head_with_tls_a(ports: Ports, port: u16, certs: &Certs) -> String {
    head(
        ports,
        &[format!(
            "{{ addr: \"127.0.0.1:{port}\", tls: {} }}",
            certs.tls(&["a"], None, "")
        )],
    )
}

/// Starts the gateway on `yaml` and waits for every port and `/healthz`.
pub fn start(ports: Ports, extra: Vec<u16>, yaml: &str) -> TlsGw {
    let mut all = vec![ports.listen, ports.admin];
    all.extend(&extra);
    let mut gw = Gateway::spawn(bin(), yaml);
    if let Err(why) = gw.wait_ready(&all, Duration::from_secs(10)) {
        panic!(
            "gateway not ready: {why}\nconfig:\n{yaml}\n--- stderr ---\n{}",
            gw.stderr()
        );
    }
    crate::ops_common::wait_serving(&gw, ports);
    TlsGw { gw, ports, extra }
}

// ---------------------------------------------------------------- raw sockets

/// What a raw exchange got back.
#[derive(Debug)]
pub struct Exchange {
    pub data: Vec<u8>,
    /// The peer closed (EOF or reset) before the wait ran out.
    pub closed: bool,
    /// How long until the close (or the wait ran out).
    pub elapsed: Duration,
}

impl Exchange {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }
}

/// Connects to 127.0.0.1:`port`, writes `bytes` and reads until the peer
/// closes or `wait` passes (overall).
pub fn exchange(port: u16, bytes: &[u8], wait: Duration) -> Exchange {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect to gateway");
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let began = Instant::now();
    if !bytes.is_empty() {
        let _ = stream.write_all(bytes);
    }
    read_until_close(&mut stream, began, wait)
}

pub fn read_until_close(stream: &mut TcpStream, began: Instant, wait: Duration) -> Exchange {
    let deadline = began + wait;
    let mut data = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Exchange {
                data,
                closed: false,
                elapsed: began.elapsed(),
            };
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut buf) {
            Ok(0) => {
                return Exchange {
                    data,
                    closed: true,
                    elapsed: began.elapsed(),
                }
            }
            Ok(n) => data.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => {
                return Exchange {
                    data,
                    closed: true,
                    elapsed: began.elapsed(),
                }
            }
        }
    }
}

/// The value of a header in the TestUpstream `/echo` JSON document
/// (case-insensitive name), every copy joined by `, `.
pub fn echoed_header(body: &str, name: &str) -> Option<String> {
    let doc: serde_json::Value = serde_json::from_str(body.trim())
        .unwrap_or_else(|e| panic!("not an echo document ({e}): {body:?}"));
    let values: Vec<String> = doc["headers"]
        .as_array()?
        .iter()
        .filter(|h| h[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
        .filter_map(|h| h[1].as_str().map(str::to_string))
        .collect();
    (!values.is_empty()).then(|| values.join(", "))
}

/// Polls a metric sample until `cond` holds on it (absent counts as 0).
pub fn wait_metric(
    ports: Ports,
    series: &str,
    timeout: Duration,
    cond: impl Fn(f64) -> bool,
) -> bool {
    wait_until(timeout, || {
        let text = crate::ops_common::metrics(ports);
        cond(crate::ops_common::sample(&text, series).unwrap_or(0.0))
    })
}

/// The current value of a sample (0 if absent).
pub fn metric_or_zero(ports: Ports, series: &str) -> f64 {
    let text = crate::ops_common::metrics(ports);
    crate::ops_common::sample(&text, series).unwrap_or(0.0)
}

/// The listener label of 127.0.0.1:`port`.
pub fn listener(port: u16) -> String {
    local(port).to_string()
}

/// The soft and hard `Max open files` of this process (from /proc).
pub fn nofile_limits() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let mut nums = line["Max open files".len()..].split_whitespace();
    let parse = |s: Option<&str>| match s? {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    };
    Some((parse(nums.next())?, parse(nums.next())?))
}

/// Makes sure this process (and the gateways it starts afterwards) may open
/// `want` files, raising the soft limit with `prlimit` if needed.
pub fn ensure_nofile(want: u64) {
    let Some((soft, hard)) = nofile_limits() else {
        return;
    };
    if soft >= want {
        return;
    }
    assert!(hard >= want, "RLIMIT_NOFILE hard limit {hard} < {want}");
    let run = run_cmd(
        Command::new("prlimit")
            .arg("--pid")
            .arg(std::process::id().to_string())
            .arg(format!("--nofile={want}:{hard}")),
        b"",
        CLIENT_DEADLINE,
    );
    let now = nofile_limits().map_or(0, |l| l.0);
    assert!(
        now >= want,
        "could not raise RLIMIT_NOFILE from {soft} to {want}: {}",
        run.all()
    );
}
