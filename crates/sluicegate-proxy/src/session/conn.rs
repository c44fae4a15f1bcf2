//! One HTTP/1.1 client connection and all that changes its state: the
//! keep-alive loop that waits for and reads request heads, hands each to
//! its lifecycle ([`super::lifecycle`]: route, filters, respond or
//! forward, log) over a [`Link`] to the connection, and applies what the
//! lifecycle returns (keep alive, close, hand a tunnel on). Requests on a
//! connection (pipelined or not) are answered strictly in order, one at a
//! time. This is the one `impl Conn`.
//!
//! Per request: `wait for bytes (keep-alive or header timeout) -> parse
//! head (400/431/501 and a graceful close on bad framing) -> the request's
//! lifecycle -> next request, or close (client asked, error, shutdown)`.
//! An idle connection holds no buffers: they go back to the worker's free
//! list while it waits for the next request; past a short while it parks
//! (see [`super::start`] and [`super::park`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::deadline::{OwnSlot, Stop};
use crate::proto::codec::{self, Parsed};
use crate::proto::response::ErrorKind;
use crate::snapshot::Snapshot;
use crate::transport::io::ReadError;
use crate::transport::stream::Stream;
use crate::worker::{Bufs, Worker, BUF_SIZE};

use super::answer::{fail_early, refuse_head};
use super::lifecycle::{exchange, Next};
use super::peer::{Link, Peer};
use super::tunneled::Handoff;

/// How long a new connection may still take to send its first request once
/// the worker is draining: enough for a request already on its way, short
/// enough that a silent connection does not hold up the exit.
const FIRST_REQUEST_GRACE: Duration = Duration::from_millis(100);

/// One HTTP/1.1 client connection: its stream and who is on it, its
/// buffers while a request is under way, when its last answer ended, and
/// its deadline slot. Built and taken apart by [`super::start`]; while it
/// serves, only its request loop below reads or changes them.
pub struct Conn<'w> {
    pub worker: &'w Worker,
    pub client: Stream,
    /// Who the client is and where it came in.
    pub(super) peer: Peer,
    /// A plain listener's client may speak HTTP/2 with prior knowledge.
    pub(super) h2c: bool,
    pub(super) bufs: Option<Box<Bufs>>,
    /// When the last request's answer was written: the keep-alive timeout
    /// counts from there, so waiting for the next request reads no clock.
    pub(super) last_end: Option<Instant>,
    /// The deadline slot for this connection's waits for a request head
    /// and for a response head (one at a time).
    pub slot: OwnSlot<'w>,
    /// The slot of its authenticated requests' waits before they register
    /// as revocable ([`super::revocable`]): re-armed per request, never
    /// re-registered.
    pub revoke_slot: OwnSlot<'w>,
}

/// How long a keep-alive connection waits for its next request in its
/// serving task before it parks. The serving task is large (its future
/// holds the whole request's state machine, about 2 KiB); a parked
/// connection is an entry in the worker's park set ([`super::park`]; a
/// TLS one a small task) that only waits for bytes, the keep-alive timeout
/// or shutdown, and starts a serving task again when bytes come.
/// A client that keeps sending (every benchmark, any busy client) never
/// parks; one that pauses longer than this pays one task start per pause.
pub(crate) const PARK_AFTER: Duration = Duration::from_millis(50);

/// How a connection comes to its serving task.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Begin {
    /// Just accepted (and prepared). Its first request head is due by the
    /// given time when a PROXY header already counted against it;
    /// otherwise `timeouts.client_header` from now, the accept.
    New(Option<Instant>),
    /// Back from being parked: when the last answer on it was written.
    Resumed(Instant),
}

/// How the wait before a request ended.
enum Wake {
    /// Bytes arrived; for a connection's first request, when its head is
    /// due if that is known already.
    Request(Option<Instant>),
    Close,
    /// Idle past [`PARK_AFTER`]: park, with the time the last answer was
    /// written.
    Park(Instant),
}

/// The HTTP/2 connection preface (RFC 9113 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The bytes `b` begin the HTTP/2 preface, as far as they go; four are
/// enough to tell it from any HTTP/1.1 method (`PRI ` is none).
fn h2_preface(b: &[u8]) -> bool {
    let n = b.len().min(H2_PREFACE.len());
    n >= 4 && b[..n] == H2_PREFACE[..n]
}

/// How a connection leaves its serving task.
pub(super) enum End {
    Close,
    /// Idle: park, with the time the last answer was written.
    Park(Instant),
    /// Upgraded: its tunnel runs on in a task of its own, under the
    /// request's snapshot.
    Tunnel(Arc<Snapshot>, Box<Handoff>),
    /// It opened with the HTTP/2 preface (h2c with prior knowledge): its
    /// bytes so far are in the buffers, for the HTTP/2 session.
    Http2,
}

impl Conn<'_> {
    /// Serves requests until the connection closes, parks, becomes a
    /// tunnel or turns out to speak HTTP/2.
    pub(super) async fn run(&mut self, begin: Begin) -> End {
        let mut cache = arc_swap::Cache::new(&self.worker.shared.snapshot);
        // No request has come on it yet; when its first head is due.
        let (mut first, mut header_by) = match begin {
            Begin::New(by) => (true, by),
            Begin::Resumed(_) => (false, None),
        };
        // Back from the park set, woken by its bytes: tokio has not seen
        // the socket's readiness yet, so the first wait may not end early
        // to park again (its park time passed long ago).
        let mut may_park = !matches!(begin, Begin::Resumed(_));
        loop {
            // A new connection gets the header timeout, from the accept, to
            // send its whole first head; between requests the keep-alive
            // timeout applies, then the header timeout from the first byte.
            let t = &cache.load().timeouts;
            let wait = if first { t.client_header } else { t.keepalive };
            let due = match self
                .await_next_request(wait, first, header_by, may_park)
                .await
            {
                Wake::Request(due) => due,
                Wake::Close => return End::Close,
                Wake::Park(end) => return End::Park(end),
            };
            if first && self.h2c && self.opens_http2() {
                return End::Http2;
            }
            first = false;
            header_by = None;
            may_park = true;
            let snap = cache.load();
            let mut bufs = match self.bufs.take() {
                Some(b) => b,
                None => self.worker.take_bufs(),
            };
            self.worker.busy.touch();
            let next = self.request(snap, &mut bufs, due).await;
            self.worker.busy.touch();
            self.bufs = Some(bufs);
            match next {
                Next::KeepAlive(end) if !self.worker.shutting_down() => {
                    self.last_end = Some(end);
                }
                Next::Tunnel(h) => return End::Tunnel(snap.clone(), h),
                Next::KeepAlive(_) | Next::Close => return End::Close,
            }
        }
    }

    /// A new connection on an h2c listener starts with the HTTP/2
    /// preface. Woken by readiness, its first bytes are read here.
    #[cold]
    fn opens_http2(&mut self) -> bool {
        let worker = self.worker;
        let bufs = self.bufs.get_or_insert_with(|| worker.take_bufs());
        if bufs.inb.is_empty() {
            let _ = bufs.inb.try_fill(&self.client, BUF_SIZE);
        }
        h2_preface(bufs.inb.filled())
    }

    /// Before a request: returns once its first bytes are there
    /// (true) or the connection should close (false). While nothing has
    /// arrived the buffers go back to the worker. When the worker starts
    /// draining, an idle keep-alive connection closes at once; a connection
    /// that has not sent its first request yet (accepted just before the
    /// drain, its request likely on the way) gets [`FIRST_REQUEST_GRACE`].
    /// A first request's head is due by `header_by` when given, otherwise
    /// `wait` from now (the accept). Past [`PARK_AFTER`] an idle connection
    /// parks, when `may_park`.
    async fn await_next_request(
        &mut self,
        wait: Duration,
        first: bool,
        header_by: Option<Instant>,
        may_park: bool,
    ) -> Wake {
        let worker = self.worker;
        let bufs = self.bufs.get_or_insert_with(|| worker.take_bufs());
        if !bufs.inb.is_empty() {
            return Wake::Request(header_by); // pipelined request already received
        }
        // One read attempt before giving the buffers back: a client that
        // sends its next request at once costs no extra wake-up.
        match bufs.inb.try_fill(&self.client, BUF_SIZE) {
            Ok(Some(0)) => return Wake::Close,
            Ok(Some(_)) => return Wake::Request(header_by),
            Ok(None) => {}
            Err(_) => return Wake::Close,
        }
        if let Some(b) = self.bufs.take() {
            self.worker.give_bufs(b);
        }
        // Between requests, the wait ends early to park the connection.
        let end = self.last_end.take();
        let park = end.filter(|_| may_park && !first && wait > PARK_AFTER);
        // A first request's head is due `wait` after the accept, however
        // long its first byte takes: the same deadline bounds both waits.
        // (The clock read here is the one a wait that sleeps makes anyway.)
        let due = first.then(|| header_by.unwrap_or_else(|| Instant::now() + wait));
        let idle = match (end, due) {
            (_, Some(due)) => worker.deadlines.at(due),
            (Some(end), None) if park.is_some() => worker.deadlines.at(end + PARK_AFTER),
            (Some(end), None) => worker.deadlines.at(end + wait),
            (None, None) => worker.deadlines.after(wait),
        }
        .or_shutdown()
        .in_slot(&self.slot);
        match idle
            .bound(crate::transport::io::read_ready(&self.client))
            .await
        {
            Ok(Ok(())) => Wake::Request(due),
            Err(Stop::Timeout) => match park {
                Some(end) => Wake::Park(end),
                None => Wake::Close,
            },
            Err(Stop::Shutdown) if first => {
                let grace = worker
                    .deadlines
                    .after(wait.min(FIRST_REQUEST_GRACE))
                    .in_slot(&self.slot);
                match grace
                    .bound(crate::transport::io::read_ready(&self.client))
                    .await
                {
                    Ok(Ok(())) => Wake::Request(due),
                    _ => Wake::Close,
                }
            }
            _ => Wake::Close,
        }
    }

    /// Reads, routes and answers one request. Its head is due by `due`
    /// when given (a connection's first request: from the accept),
    /// otherwise `client_header` after its first byte.
    async fn request(&self, snap: &Arc<Snapshot>, bufs: &mut Bufs, due: Option<Instant>) -> Next {
        // A request's time starts with its first byte (the wait before that
        // has its own timeout), and so does its header deadline unless due.
        let mut started = (!bufs.inb.is_empty()).then(Instant::now);
        let max_head = snap.limits.max_header_bytes;
        let header_time = snap.timeouts.client_header;
        loop {
            // Nothing received yet (woken by readiness): read before
            // parsing.
            let parsed = if bufs.inb.is_empty() {
                Ok(Parsed::Partial)
            } else {
                codec::parse_request(bufs.inb.filled(), max_head, &mut bufs.req)
            };
            match parsed {
                Ok(Parsed::Complete(framing)) => {
                    bufs.req_framing = framing;
                    break;
                }
                Ok(Parsed::Partial) => {
                    let wait = match (due, started) {
                        (Some(due), Some(_)) => self.worker.until(due),
                        (None, Some(t)) => self.worker.until(t + header_time),
                        // Nothing received yet: shutdown closes it at once.
                        (Some(due), None) => self.worker.until(due).or_shutdown(),
                        (None, None) => self.worker.deadlines.after(header_time).or_shutdown(),
                    }
                    .in_slot(&self.slot);
                    let read = bufs.inb.fill(&self.client, max_head, wait).await;
                    if started.is_none() {
                        started = Some(Instant::now());
                    }
                    match read {
                        Ok(0) => return Next::Close,
                        Ok(_) => {}
                        Err(ReadError::Timeout) => {
                            if !bufs.inb.is_empty() {
                                // A slow client gets no extra time: no linger.
                                let timeout = ErrorKind::RequestTimeout;
                                fail_early(self.link(), snap, bufs, timeout, false).await;
                            }
                            return Next::Close;
                        }
                        Err(ReadError::Io(_) | ReadError::Shutdown) => return Next::Close,
                    }
                }
                Err(e) => {
                    refuse_head(self.link(), snap, bufs, e).await;
                    return Next::Close;
                }
            }
        }
        let started = started.unwrap_or_else(Instant::now);
        exchange(self.link(), snap, bufs, started).await
    }

    /// The request's view of this connection.
    fn link(&self) -> Link<'_> {
        Link {
            worker: self.worker,
            client: &self.client,
            slot: &self.slot,
            revoke_slot: &self.revoke_slot,
            peer: &self.peer,
        }
    }
}
