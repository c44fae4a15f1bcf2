//! [`RawUpstream`]: an upstream that hands each accepted connection to test
//! code, for misbehaviour tests (bad status lines, wrong lengths, stalls).

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use super::server::Server;

/// Runs `handler(stream)` on its own thread for every accepted connection.
/// Drop stops accepting, shuts open connections down and joins the handlers,
/// so a handler must return once its socket errors or closes.
pub struct RawUpstream {
    server: Server,
}

impl RawUpstream {
    /// Starts on a free port of 127.0.0.1.
    pub fn start<F>(handler: F) -> RawUpstream
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        Self::start_on(super::loopback_any(), handler).expect("start RawUpstream on 127.0.0.1:0")
    }

    /// Starts on `addr` (port 0 picks a free one).
    pub fn start_on<F>(addr: SocketAddr, handler: F) -> io::Result<RawUpstream>
    where
        F: Fn(TcpStream) + Send + Sync + 'static,
    {
        let handler = Arc::new(move |stream, _id| handler(stream));
        Ok(RawUpstream {
            server: Server::start(addr, "raw-upstream", handler)?,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    pub fn port(&self) -> u16 {
        self.server.addr().port()
    }

    /// TCP connections accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.server.connections_accepted()
    }
}

/// Reads one request head from an upstream-side socket (up to its blank
/// line, waiting at most 5 s for each read); false if it never completes.
/// What follows the head in the same reads is dropped.
pub fn read_request_head(s: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    true
}
