//! What the test upstream records: each request as it arrived
//! ([`SeenRequest`]) and the log of them that the connection threads
//! write and [`super::TestUpstream`] reads.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

/// How many requests `last_requests` keeps (oldest dropped first).
pub const LOG_CAP: usize = 4096;

/// One complete request as the upstream received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRequest {
    pub method: String,
    /// The request target exactly as sent (path and query).
    pub target: String,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub version: String,
    /// Header fields in arrival order, names with their original case.
    pub headers: Vec<(String, String)>,
    /// The decoded body.
    pub body: Vec<u8>,
    /// Whether the body arrived with `Transfer-Encoding: chunked`.
    pub chunked: bool,
    /// Number of the connection it arrived on (0, 1, ... in accept order).
    pub connection: u64,
    /// The peer address of that connection.
    pub peer: Option<SocketAddr>,
}

impl SeenRequest {
    /// First value of header `name`, case-insensitive.
    pub fn header(&self, name: &str) -> Option<&str> {
        crate::wire::header(&self.headers, name)
    }

    /// Every value of header `name`, case-insensitive, in order.
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        crate::wire::header_all(&self.headers, name)
    }

    /// The target without its query string.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// What one upstream has seen: its id, the count of requests and the
/// last [`LOG_CAP`] of them.
pub(crate) struct State {
    pub(super) id: Option<String>,
    pub(super) requests: AtomicUsize,
    pub(super) log: Mutex<VecDeque<SeenRequest>>,
}
