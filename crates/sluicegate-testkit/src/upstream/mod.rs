//! Test upstreams: [`TestUpstream`], an HTTP/1.1 server whose every reply is
//! chosen by the request's path and query (no setup calls), and
//! [`RawUpstream`], which hands each connection to test code that writes
//! arbitrary bytes.
//!
//! `TestUpstream` reply controls (query parameters, combinable):
//!
//! | parameter | effect |
//! | --- | --- |
//! | path `/echo...` | 200 with a JSON document describing the request |
//! | `status=N` | reply with status N (no body for 1xx/204/304 and HEAD) |
//! | `delay=MS` | sleep before sending the response head |
//! | `body_delay=MS` | send the head, sleep, then send the body |
//! | `first=N` | with `body_delay`, send the body's first N bytes with the head |
//! | `close=1` | reply with `Connection: close`, then close |
//! | `close=before` | read the request, close without replying |
//! | `close=mid` | head with `Content-Length: 100`, 10 body bytes, close |
//! | `chunked=1` | send the body chunked, in up to four chunks |
//! | `size=N` | body of N bytes `abc..xyzabc..` (default body `ok\n`) |
//! | `header=NAME:VALUE` | add a response header (repeatable, %-decoded) |
//! | `idle_close_ms=N` | after replying, close if no request arrives in N ms (0: at once, unless the next request has begun to arrive) |
//!
//! Any request with `Expect: 100-continue` gets `HTTP/1.1 100 Continue`
//! before its body is read. An upstream started with an id sends it in
//! `x-upstream-id` on every response.

mod conn;
mod raw;
mod reply;
mod seen;
mod server;

use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub use raw::{read_request_head, RawUpstream};
pub use reply::pattern;
use seen::State;
pub use seen::{SeenRequest, LOG_CAP};
pub(crate) use server::lock;
use server::Server;

/// A controllable HTTP/1.1 upstream on its own threads; stopped on drop.
pub struct TestUpstream {
    state: Arc<State>,
    server: Server,
}

impl TestUpstream {
    /// Starts on a free port of 127.0.0.1 without an id.
    pub fn start() -> TestUpstream {
        Self::start_on(loopback_any(), None).expect("start TestUpstream on 127.0.0.1:0")
    }

    /// Starts on a free port of 127.0.0.1, sending `x-upstream-id: ID`.
    pub fn start_with_id(id: &str) -> TestUpstream {
        Self::start_on(loopback_any(), Some(id)).expect("start TestUpstream on 127.0.0.1:0")
    }

    /// Starts on `addr` (port 0 picks a free one) with an optional id.
    pub fn start_on(addr: SocketAddr, id: Option<&str>) -> io::Result<TestUpstream> {
        let state = Arc::new(State {
            id: id.map(str::to_string),
            requests: AtomicUsize::new(0),
            log: Mutex::new(VecDeque::new()),
        });
        let conn_state = Arc::clone(&state);
        let handler = Arc::new(move |stream, id| conn::serve(stream, id, &conn_state));
        let server = Server::start(addr, "upstream", handler)?;
        Ok(TestUpstream { state, server })
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    pub fn port(&self) -> u16 {
        self.server.addr().port()
    }

    /// The id given at start, if any.
    pub fn id(&self) -> Option<&str> {
        self.state.id.as_deref()
    }

    /// Complete requests received so far (counted before the reply is sent).
    pub fn requests_seen(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// The recorded requests, oldest first (at most [`LOG_CAP`]).
    pub fn last_requests(&self) -> Vec<SeenRequest> {
        lock(&self.state.log).iter().cloned().collect()
    }

    /// The most recent request, if any.
    pub fn last_request(&self) -> Option<SeenRequest> {
        lock(&self.state.log).back().cloned()
    }

    /// Forgets recorded requests; `requests_seen` keeps counting.
    pub fn clear_requests(&self) {
        lock(&self.state.log).clear();
    }

    /// TCP connections accepted so far.
    pub fn connections_accepted(&self) -> usize {
        self.server.connections_accepted()
    }

    /// Connections currently open (accepted and not yet closed by either side).
    pub fn connections_open(&self) -> usize {
        self.server.connections_open()
    }
}

impl std::fmt::Debug for TestUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestUpstream")
            .field("addr", &self.addr())
            .field("id", &self.state.id)
            .finish()
    }
}

pub(crate) fn loopback_any() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}
