//! One client connection: the keep-alive loop that reads request heads,
//! routes them, answers fixed and error responses itself, and hands proxied
//! requests to [`crate::upstream::forward`]. Requests on a connection (pipelined or
//! not) are answered strictly in order, one at a time.
//!
//! Lifecycle of a connection, per request:
//! `wait for bytes (keep-alive or header timeout) -> parse head (400/431/501
//! and close on bad framing) -> route (404) -> respond | forward -> log ->
//! next request, or close (client asked, error, shutdown)`.
//! An idle connection holds no buffers: they go back to the worker's free
//! list while it waits for the next request; past a short while it parks
//! (see [`super::start`]).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::transport::forwarded::client_from_xff;
use crate::transport::stream::Stream;
use crate::transport::tls::identity::ClientIdentity;

use super::answer::{https_redirect, Local};
use super::start::{Begin, PARK_AFTER};
use crate::filters::{Answer, Refuse, ReqCx};
use crate::observe::accesslog;
use crate::proto::codec::{self, HeadError, Parsed, RequestHead};
use crate::proto::fields;
use crate::proto::response::ErrorKind;
use crate::route::router::RouteRequest;
use crate::route::target::Target;
use crate::runtime::deadline::{OwnSlot, Stop};
use crate::runtime::worker::{Bufs, Downstream, Worker, BUF_SIZE};
use crate::snapshot::{ActionRt, Snapshot};
use crate::transport::io::ReadError;
use crate::upstream::forward::{self, Outcome};

/// How long a new connection may still take to send its first request once
/// the worker is draining: enough for a request already on its way, short
/// enough that a silent connection does not hold up the exit.
const FIRST_REQUEST_GRACE: Duration = Duration::from_millis(100);

pub struct Conn<'w> {
    pub worker: &'w Worker,
    pub client: Stream,
    pub peer: SocketAddr,
    /// The client's address as text, formatted once for X-Forwarded-For.
    pub peer_ip: String,
    /// TLS version and cipher, on a TLS connection.
    pub tls: Option<(&'static str, &'static str)>,
    /// Every request is answered with a redirect to HTTPS.
    pub(super) redirect_https: bool,
    /// Who the client certificate names (`auth: mtls`).
    pub(super) identity: Option<Box<ClientIdentity>>,
    /// The current request's client as text when a trusted proxy named
    /// another than the connection's.
    pub(super) req_client: Option<String>,
    pub(super) bufs: Option<Box<Bufs>>,
    /// When the last request's answer was written: the keep-alive timeout
    /// counts from there, so waiting for the next request reads no clock.
    pub(super) last_end: Option<Instant>,
    /// The deadline slot for this connection's waits for a request head
    /// and for a response head (one at a time).
    pub slot: OwnSlot<'w>,
}

/// How the wait before a request ended.
enum Wake {
    /// Bytes arrived; for a connection's first request, when its head is
    /// due if that is known already.
    Request(Option<Instant>),
    Close,
    /// Idle past [`PARK_AFTER`](super::start::PARK_AFTER): park, with the time the last answer was
    /// written.
    Park(Instant),
}

/// What the request loop does after a request.
#[derive(PartialEq, Eq)]
enum Next {
    KeepAlive,
    Close,
}

impl Conn<'_> {
    /// Serves requests until the connection closes (`None`) or parks
    /// (`Some`: when its last answer was written).
    pub(super) async fn run(&mut self, begin: Begin) -> Option<Instant> {
        let mut cache = arc_swap::Cache::new(&self.worker.shared.snapshot);
        // No request has come on it yet; when its first head is due.
        let (mut first, mut header_by) = match begin {
            Begin::New(by) => (true, by),
            Begin::Resumed(_) => (false, None),
        };
        loop {
            // A new connection gets the header timeout, from the accept, to
            // send its whole first head; between requests the keep-alive
            // timeout applies, then the header timeout from the first byte.
            let t = &cache.load().timeouts;
            let wait = if first { t.client_header } else { t.keepalive };
            let due = match self.await_next_request(wait, first, header_by).await {
                Wake::Request(due) => due,
                Wake::Close => return None,
                Wake::Park(end) => return Some(end),
            };
            first = false;
            header_by = None;
            let snap = cache.load();
            let mut bufs = match self.bufs.take() {
                Some(b) => b,
                None => self.worker.take_bufs(),
            };
            self.worker.busy.touch();
            let next = self.request(snap, &mut bufs, due).await;
            self.worker.busy.touch();
            self.bufs = Some(bufs);
            if next == Next::Close || self.worker.shutting_down() {
                return None;
            }
        }
    }

    /// Before a request: returns once its first bytes are there
    /// (true) or the connection should close (false). While nothing has
    /// arrived the buffers go back to the worker. When the worker starts
    /// draining, an idle keep-alive connection closes at once; a connection
    /// that has not sent its first request yet (accepted just before the
    /// drain, its request likely on the way) gets [`FIRST_REQUEST_GRACE`].
    /// A first request's head is due by `header_by` when given, otherwise
    /// `wait` from now (the accept).
    async fn await_next_request(
        &mut self,
        wait: Duration,
        first: bool,
        header_by: Option<Instant>,
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
        let park = end.filter(|_| !first && wait > PARK_AFTER);
        // A first request's head is due `wait` after the accept, however
        // long its first byte takes: the same deadline bounds both waits.
        // (The clock read here is the one a wait that sleeps makes anyway.)
        let due = first.then(|| header_by.unwrap_or_else(|| Instant::now() + wait));
        let idle = match (end, due) {
            (_, Some(due)) => worker.deadlines.at(due),
            (Some(end), None) => worker.deadlines.at(end + wait.min(PARK_AFTER)),
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
    async fn request(&mut self, snap: &Snapshot, bufs: &mut Bufs, due: Option<Instant>) -> Next {
        // A request's time starts with its first byte (the wait before that
        // has its own timeout), and so does its header deadline unless due.
        let mut started = (!bufs.inb.is_empty()).then(Instant::now);
        let max_head = snap.limits.max_header_bytes;
        let header_time = snap.timeouts.client_header;
        loop {
            // Nothing received yet (woken by readiness): read before parsing.
            let parsed = if bufs.inb.is_empty() {
                Ok(Parsed::Partial)
            } else {
                codec::parse_request(bufs.inb.filled(), max_head, &mut bufs.req)
            };
            match parsed {
                Ok(Parsed::Complete(())) => break,
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
                                self.fail_early(snap, bufs, ErrorKind::RequestTimeout).await;
                            }
                            return Next::Close;
                        }
                        Err(ReadError::Io(_) | ReadError::Shutdown) => return Next::Close,
                    }
                }
                Err(e) => {
                    let kind = match e {
                        HeadError::Bad(why) => {
                            tracing::debug!(peer = %self.peer, why, "bad request");
                            ErrorKind::BadRequest
                        }
                        HeadError::TooLarge => ErrorKind::HeadersTooLarge,
                        HeadError::NotImplemented(_) => ErrorKind::NotImplemented,
                        HeadError::ExpectationFailed => ErrorKind::ExpectationFailed,
                    };
                    self.refuse_and_close(snap, bufs, kind).await;
                    return Next::Close;
                }
            }
        }
        let started = started.unwrap_or_else(Instant::now);
        self.dispatch(snap, bufs, started).await
    }

    /// The client a trusted proxy names in `X-Forwarded-For`, or the
    /// connection's; kept as text for the log when it differs.
    #[cold]
    fn trusted_client(&mut self, snap: &Snapshot, raw: &[u8], req: &RequestHead) -> IpAddr {
        let xff = req.xff.iter().map(|r| &raw[r.clone()]);
        let client = client_from_xff(self.peer.ip(), &snap.trusted_proxies, xff);
        self.req_client = (client != self.peer.ip()).then(|| client.to_string());
        client
    }

    async fn dispatch(&mut self, snap: &Snapshot, bufs: &mut Bufs, started: Instant) -> Next {
        let raw = bufs.inb.filled();
        let req = &bufs.req;
        let method = &raw[req.method.clone()];
        let target = match Target::parse(raw, req) {
            Ok(t) => t,
            Err(kind) => {
                self.refuse_and_close(snap, bufs, kind).await;
                return Next::Close;
            }
        };
        if method == b"CONNECT" {
            self.refuse_and_close(snap, bufs, ErrorKind::MethodNotAllowed)
                .await;
            return Next::Close;
        }
        let lookup = |name: &[u8]| -> Option<&[u8]> {
            req.headers
                .iter()
                .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(name))
                .map(|h| &raw[h.value.clone()])
        };
        // Routed, filtered and forwarded: the normal form of the path.
        let norm = match crate::route::path::normalize(&raw[target.path.clone()]) {
            Ok(n) => n,
            Err(crate::route::path::BadPath(why)) => {
                tracing::debug!(peer = %self.peer, why, "bad request path");
                self.refuse_and_close(snap, bufs, ErrorKind::BadRequest)
                    .await;
                return Next::Close;
            }
        };
        let host = target.host(raw).map(crate::route::target::strip_port);
        let found = snap.router.find(&RouteRequest {
            host,
            method,
            path: norm.as_deref().unwrap_or(&raw[target.path.clone()]),
            header: &lookup,
        });
        // The access log's request line; not built when nothing logs it.
        let logging = snap.access_log.is_some();
        if logging {
            bufs.log_line.clear();
            bufs.log_line.extend_from_slice(method);
            bufs.log_line.push(b' ');
            bufs.log_line.extend_from_slice(&raw[req.target.clone()]);
        }
        let method_len = method.len();
        let is_head = method == b"HEAD";
        bufs.is_head = is_head;
        bufs.edits.clear();
        // The client: the connection's, or the one a trusted proxy names.
        let client = if snap.trusted_proxies.is_empty() {
            if self.req_client.is_some() {
                self.req_client = None; // trusted_proxies reloaded away
            }
            self.peer.ip()
        } else {
            self.trusted_client(snap, raw, req)
        };
        if self.redirect_https {
            let mut head = Vec::new();
            let outcome = match https_redirect(&mut head, raw, &target, method) {
                Some(status) => {
                    self.answer_locally(snap, bufs, Local::Fixed(status, &head, &[]), is_head)
                        .await
                }
                None => {
                    self.answer_locally(
                        snap,
                        bufs,
                        Local::Error(ErrorKind::BadRequest, &fields::NONE),
                        is_head,
                    )
                    .await
                }
            };
            self.worker.shared.global.unrouted.record(outcome.status);
            let total_us = self.finish(started);
            self.log(snap, bufs, method_len, "", "", &outcome, total_us);
            return outcome.next();
        }
        if !snap.ip.is_empty() && !snap.ip.admits(client) {
            let outcome = self
                .answer_locally(
                    snap,
                    bufs,
                    Local::Error(ErrorKind::Forbidden, &fields::NONE),
                    is_head,
                )
                .await;
            self.worker.shared.global.unrouted.record(outcome.status);
            let total_us = self.finish(started);
            self.log(snap, bufs, method_len, "", "", &outcome, total_us);
            return outcome.next();
        }
        let Some(found) = found else {
            let outcome = self
                .answer_locally(
                    snap,
                    bufs,
                    Local::Error(ErrorKind::NoRoute, &fields::NONE),
                    is_head,
                )
                .await;
            self.worker.shared.global.unrouted.record(outcome.status);
            let total_us = self.finish(started);
            self.log(snap, bufs, method_len, "", "", &outcome, total_us);
            return outcome.next();
        };
        let route = &snap.routes[found.index];
        let refused = run_filters(
            route,
            bufs,
            (norm.as_deref(), &target),
            found.prefix_len,
            started,
            (client, self.identity.as_deref()),
        );
        if bufs.edits.path.is_none() {
            bufs.edits.path = norm;
        }
        if logging && (bufs.edits.path.is_some() || bufs.edits.query.is_some()) {
            // A key was taken out of the path or query (or the path was
            // normalised): log what was forwarded.
            let raw = bufs.inb.filled();
            bufs.log_line.truncate(method_len + 1);
            let path = bufs
                .edits
                .path
                .as_deref()
                .unwrap_or(&raw[target.path.clone()]);
            bufs.log_line.extend_from_slice(path);
            let query = bufs
                .edits
                .query
                .as_deref()
                .unwrap_or(&raw[target.query.clone()]);
            bufs.log_line.extend_from_slice(query);
        }
        if let Some(refuse) = refused {
            let mut head = Vec::new();
            if refuse.answer == Answer::Error(ErrorKind::Unauthorized) {
                route
                    .metrics
                    .unauthorized
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let outcome = self
                .answer_locally(snap, bufs, refuse.local(&mut head), is_head)
                .await;
            // A slot taken by an earlier filter ends with the refusal.
            bufs.edits.guards.clear();
            let total_us = self.finish(started);
            route.metrics.record(outcome.status, total_us);
            self.log(snap, bufs, method_len, &route.name, "", &outcome, total_us);
            return outcome.next();
        }
        let outcome = match &route.action {
            ActionRt::Respond { status, head, body } => {
                self.answer_locally(snap, bufs, Local::Fixed(*status, head, body), is_head)
                    .await
            }
            ActionRt::Proxy {
                service,
                strip_prefix,
            } => {
                let strip = if *strip_prefix { found.prefix_len } else { 0 };
                let cx = forward::Request {
                    down: self.downstream(),
                    client,
                    snap,
                    service,
                    target: &target,
                    strip,
                    started,
                };
                forward::forward(cx, bufs).await
            }
        };
        let total_us = self.finish(started);
        route.metrics.record(outcome.status, total_us);
        let svc = match &route.action {
            ActionRt::Proxy { service, .. } => &*service.name,
            ActionRt::Respond { .. } => "",
        };
        // Concurrency slots end with the request, not with the connection.
        bufs.edits.guards.clear();
        self.log(snap, bufs, method_len, &route.name, svc, &outcome, total_us);
        outcome.next()
    }
    /// What forwarding uses of this connection.
    fn downstream(&self) -> Downstream<'_> {
        Downstream {
            worker: self.worker,
            client: &self.client,
            slot: &self.slot,
            peer_ip: &self.peer_ip,
            https: self.tls.is_some(),
        }
    }

    /// Marks the end of a request (one clock read, shared by the metrics,
    /// the access log and the next keep-alive wait); its time in µs.
    fn finish(&mut self, started: Instant) -> u64 {
        let end = Instant::now();
        self.last_end = Some(end);
        end.saturating_duration_since(started).as_micros() as u64
    }

    #[allow(clippy::too_many_arguments)]
    fn log(
        &self,
        snap: &Snapshot,
        bufs: &Bufs,
        method_len: usize,
        route: &str,
        service: &str,
        outcome: &Outcome,
        total_us: u64,
    ) {
        let Some(sink) = &snap.access_log else { return };
        let line = &bufs.log_line;
        let (method, target) = (&line[..method_len], &line[method_len + 1..]);
        let mut buf = self.worker.log_buf_for(sink);
        accesslog::format(
            &mut buf,
            &accesslog::Entry {
                client: self.req_client.as_deref().unwrap_or(&self.peer_ip),
                method,
                target,
                status: outcome.status,
                route,
                service,
                endpoint: outcome.endpoint.as_ref().map_or("", |e| e.name.as_str()),
                bytes_in: outcome.bytes_in,
                bytes_out: outcome.bytes_out,
                total_us,
                upstream_us: outcome.upstream_us,
                app: bufs.edits.app.map(|a| snap.apps.app_id(a)),
                key_fp: bufs.edits.key_fp,
                tls: self.tls,
            },
        );
        if buf.len() >= accesslog::FLUSH_AT {
            sink.write(&buf);
            buf.clear();
        }
    }
}

/// Runs the route's filters on the request in `bufs`; the first refusal
/// is returned. Their edits are left in `bufs.edits`.
fn run_filters(
    route: &crate::snapshot::RouteRt,
    bufs: &mut Bufs,
    (norm, target): (Option<&[u8]>, &Target),
    prefix_len: usize,
    now: Instant,
    (client, identity): (std::net::IpAddr, Option<&ClientIdentity>),
) -> Option<Refuse> {
    if route.filters.is_empty() {
        return None;
    }
    let service = match &route.action {
        ActionRt::Proxy { service, .. } => Some(service.index),
        ActionRt::Respond { .. } => None,
    };
    let Bufs {
        inb, req, edits, ..
    } = bufs;
    let mut cx = ReqCx {
        raw: inb.filled(),
        head: req,
        path: norm.unwrap_or(&inb.filled()[target.path.clone()]),
        query: target.query.clone(),
        prefix_len,
        service,
        edits,
        app: None,
        now,
        client,
        identity,
    };
    route
        .filters
        .iter()
        .find_map(|f| f.on_request(&mut cx).err())
}

impl Outcome<'_> {
    fn next(&self) -> Next {
        if self.close {
            Next::Close
        } else {
            Next::KeepAlive
        }
    }
}
