//! One request's lifecycle, once its head is read: every phase in order,
//! in this one place.
//!
//! 1. **Route**: the target is split and its path normalised (400 on a bad
//!    one, 405 on CONNECT), the client is known (the connection's, or one
//!    a trusted proxy names), the router picks a route.
//! 2. **Gate**: what applies before any route's own policy: the listener's
//!    redirect to HTTPS, the global `ip` rules (403), no route (404).
//! 3. **Request filters**: the route's filters in order (auth, plans,
//!    ACLs, CORS, header ops, rewrite); the first refusal answers. A filter
//!    may wait before it decides ([`crate::filters::Filter::wait`]); a route
//!    with no such filter runs them in one plain call, no future.
//! 4. **Action**: the route's fixed answer, or forwarding upstream
//!    ([`crate::upstream::forward`]), which picks the endpoint, retries,
//!    and streams both bodies.
//! 5. **Response**: what the request filters left for the answer (header
//!    ops, CORS and rate-limit fields in [`crate::filters::Edits`]) is
//!    applied as its head is written, upstream's or the gateway's own.
//! 6. **End**: concurrency slots are given back, then one clock read for
//!    the route's metrics, the access log and the next keep-alive wait.
//!    A request that opened a tunnel ends here too, but is recorded by
//!    the tunnel's own task when the tunnel closes ([`super::tunneled`]).
//!
//! Every answer the gateway makes itself is rendered by
//! [`crate::proto::response`].

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use super::answer::{https_redirect, Local};
use super::conn::{Conn, Next};
use super::tunneled::{Handoff, LogFacts};
use crate::filters::{Answer, Filters, Refuse, ReqCx};
use crate::observe::accesslog;
use crate::observe::accesslog::Sink;
use crate::proto::fields;
use crate::proto::head::RequestHead;
use crate::proto::response::ErrorKind;
use crate::route::router::RouteRequest;
use crate::route::target::Target;
use crate::runtime::worker::{Bufs, Downstream, Worker};
use crate::snapshot::{ActionRt, RouteRt, Snapshot};
use crate::transport::forwarded::client_from_xff;
use crate::upstream::forward::{self, Outcome};
use crate::upstream::upgraded::Upgraded;

impl Conn<'_> {
    /// Runs one request whose head is in `bufs`, from routing to the log.
    pub(super) async fn exchange(
        &mut self,
        snap: &Snapshot,
        bufs: &mut Bufs,
        started: Instant,
    ) -> Next {
        // 1. Route.
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
        bufs.grpc = false;
        if method == b"POST" {
            (bufs.grpc, bufs.grpc_timeout) = grpc_facts(raw, req);
            bufs.grpc_status = None;
        }
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

        // 2. Gate: answers before any route's policy.
        let found = match found {
            Some(found)
                if !self.redirect_https && (snap.ip.is_empty() || snap.ip.admits(client)) =>
            {
                found
            }
            _ => {
                let outcome = self.gate(snap, bufs, &target, is_head, client).await;
                self.worker.shared.global.unrouted.record(outcome.status);
                let total_us = self.finish(started);
                self.log(snap, bufs, method_len, "", "", &outcome, total_us);
                return outcome.next();
            }
        };
        let route = &snap.routes[found.index];

        // 3. Request filters: in one pass, unless one of them may wait.
        let facts = Facts {
            norm: norm.as_deref(),
            target: &target,
            prefix_len: found.prefix_len,
            now: started,
            client,
            identity: self.identity.as_deref(),
        };
        let refused = if route.filters.waits() {
            request_filters_waiting(route, bufs, &facts).await
        } else {
            request_filters(route, bufs, &facts)
        };
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

        // 4. Action (5, the response's own edits, apply as its head is
        // written).
        let mut svc = "";
        let outcome = match refused {
            Some(refuse) => {
                let mut head = Vec::new();
                if refuse.answer == Answer::Error(ErrorKind::Unauthorized) {
                    route
                        .metrics
                        .unauthorized
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                self.answer_locally(snap, bufs, refuse.local(&mut head), is_head)
                    .await
            }
            None => match &route.action {
                ActionRt::Respond { status, head, body } => {
                    self.answer_locally(snap, bufs, Local::Fixed(*status, head, body), is_head)
                        .await
                }
                ActionRt::Proxy {
                    service,
                    strip_prefix,
                    upgrade,
                } => {
                    let strip = if *strip_prefix { found.prefix_len } else { 0 };
                    svc = &service.name;
                    let down = self.downstream();
                    let cx = forward::Request {
                        down: &down,
                        client,
                        snap,
                        service,
                        target: &target,
                        strip,
                        started,
                        upgrade,
                    };
                    let outcome = forward::forward(cx, bufs).await;
                    if outcome.status == 101 {
                        if let Some(t) = bufs.upgraded.take() {
                            // An open tunnel: its own task runs it, then
                            // records this request (6).
                            let log = logging.then_some(method_len);
                            self.hand_off(t, bufs, found.index, log, &outcome, started);
                            return Next::Tunnel;
                        }
                    }
                    outcome
                }
            },
        };

        // 6. End: slots taken by filters end with the request, not with
        // the connection.
        bufs.edits.guards.clear();
        let total_us = self.finish(started);
        route.metrics.record(outcome.status, total_us);
        if bufs.grpc {
            route.metrics.record_grpc(bufs.grpc_status);
        }
        self.log(snap, bufs, method_len, &route.name, svc, &outcome, total_us);
        outcome.next()
    }

    /// The answer of the gate, before any route's policy: the redirect to
    /// HTTPS on a listener that asks for it, 403 by the global `ip` rules
    /// (for `client`), else 404: no route matched.
    #[cold]
    async fn gate(
        &self,
        snap: &Snapshot,
        bufs: &mut Bufs,
        target: &Target,
        is_head: bool,
        client: IpAddr,
    ) -> Outcome<'static> {
        let kind = if self.redirect_https {
            let raw = bufs.inb.filled();
            let method = &raw[bufs.req.method.clone()];
            let mut head = Vec::new();
            if let Some(status) = https_redirect(&mut head, raw, target, method) {
                let fixed = Local::Fixed(status, &head, &[]);
                return self.answer_locally(snap, bufs, fixed, is_head).await;
            }
            ErrorKind::BadRequest
        } else if !snap.ip.is_empty() && !snap.ip.admits(client) {
            ErrorKind::Forbidden
        } else {
            ErrorKind::NoRoute
        };
        let error = Local::Error(kind, &fields::NONE);
        self.answer_locally(snap, bufs, error, is_head).await
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

    /// Leaves an open tunnel, and what recording its request at the close
    /// needs, for the tunnel's own task ([`super::tunneled`]); `log`: the
    /// method's length in `bufs.log_line`, when the snapshot logs.
    #[cold]
    fn hand_off(
        &mut self,
        tunnel: Box<Upgraded>,
        bufs: &mut Bufs,
        route: usize,
        log: Option<usize>,
        outcome: &Outcome,
        started: Instant,
    ) {
        let log = log.map(|method_len| {
            Box::new(LogFacts {
                line: bufs.log_line.as_slice().into(),
                method_len,
                client: self.req_client.as_deref().unwrap_or(&self.peer_ip).into(),
                endpoint: tunnel.endpoint().clone(),
                app: bufs.edits.app,
                key_fp: bufs.edits.key_fp,
                tls: self.tls,
            })
        });
        let guards = std::mem::take(&mut bufs.edits.guards);
        self.tunnel = Some(Box::new(Handoff {
            tunnel,
            route,
            started,
            upstream_us: outcome.upstream_us,
            guards,
            log,
        }));
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
        append_log(
            self.worker,
            sink,
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
                http2: matches!(self.client, crate::transport::stream::Stream::H2(_)),
            },
        );
    }
}

/// Appends an access log line to the worker's buffer for `sink`, and
/// writes the buffer out once it is full enough.
#[inline]
pub(super) fn append_log(worker: &Worker, sink: &Arc<Sink>, entry: &accesslog::Entry<'_>) {
    let mut buf = worker.log_buf_for(sink);
    accesslog::format(&mut buf, entry);
    if buf.len() >= accesslog::FLUSH_AT {
        sink.write(&buf);
        buf.clear();
    }
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

/// Whether the POST in `bufs` is gRPC (`content-type: application/grpc`,
/// `+proto` or other suffixes, not gRPC-Web), and its `grpc-timeout`.
fn grpc_facts(raw: &[u8], req: &RequestHead) -> (bool, Option<std::time::Duration>) {
    let mut grpc = false;
    let mut timeout = None;
    for h in &req.headers {
        let name = &raw[h.name.clone()];
        let value = &raw[h.value.clone()];
        if name.eq_ignore_ascii_case(b"content-type") {
            grpc = value.len() >= 16
                && value[..16].eq_ignore_ascii_case(b"application/grpc")
                && !matches!(value.get(16), Some(b'-'));
        } else if name.eq_ignore_ascii_case(b"grpc-timeout") {
            timeout = grpc_timeout(value);
        }
    }
    (grpc, if grpc { timeout } else { None })
}

/// A `grpc-timeout` value: up to 8 digits and a unit (`H`, `M`, `S`, `m`,
/// `u`, `n`).
fn grpc_timeout(v: &[u8]) -> Option<std::time::Duration> {
    use std::time::Duration;
    let (&unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// What the request filters are told besides the request in the buffers.
struct Facts<'a> {
    /// The normal form of the path, when it differs from the received one.
    norm: Option<&'a [u8]>,
    target: &'a Target,
    prefix_len: usize,
    now: Instant,
    client: IpAddr,
    identity: Option<&'a crate::transport::tls::identity::ClientIdentity>,
}

/// The filters' view of the request in `bufs`.
fn filter_cx<'a>(route: &RouteRt, bufs: &'a mut Bufs, f: &Facts<'a>) -> ReqCx<'a> {
    let service = match &route.action {
        ActionRt::Proxy { service, .. } => Some(service.index),
        ActionRt::Respond { .. } => None,
    };
    let Bufs {
        inb, req, edits, ..
    } = bufs;
    let raw = inb.filled();
    ReqCx {
        raw,
        head: req,
        path: f.norm.unwrap_or(&raw[f.target.path.clone()]),
        query: f.target.query.clone(),
        prefix_len: f.prefix_len,
        service,
        edits,
        app: None,
        now: f.now,
        client: f.client,
        identity: f.identity,
    }
}

/// Runs the route's filters, none of which waits, on the request in
/// `bufs`; the first refusal is returned. Their edits are left in
/// `bufs.edits`.
fn request_filters<'a>(route: &'a RouteRt, bufs: &'a mut Bufs, f: &Facts<'a>) -> Option<Refuse> {
    if route.filters.is_empty() {
        return None;
    }
    let mut cx = filter_cx(route, bufs, f);
    route
        .filters
        .iter()
        .find_map(|f| f.on_request(&mut cx).err())
}

/// [`request_filters`] for a route with a filter that may wait.
#[cold]
async fn request_filters_waiting<'a>(
    route: &'a RouteRt,
    bufs: &'a mut Bufs,
    f: &Facts<'a>,
) -> Option<Refuse> {
    let mut cx = filter_cx(route, bufs, f);
    run_filters(&route.filters, &mut cx).await
}

/// The filters in order, each waiting filter's wait (if it has one now)
/// awaited before it decides; the first refusal is returned.
async fn run_filters<'a>(filters: &'a Filters, cx: &mut ReqCx<'a>) -> Option<Refuse> {
    for f in filters.iter() {
        if let Some(wait) = f.wait(cx) {
            wait.await;
        }
        if let Err(refuse) = f.on_request(cx) {
            return Some(refuse);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::filters::{Edits, Filter, Wait};
    use crate::proto::fields::Fields;

    /// Records the order things happen in.
    #[derive(Debug, Default)]
    struct Trace(Mutex<Vec<&'static str>>);

    impl Trace {
        fn push(&self, what: &'static str) {
            self.0.lock().unwrap().push(what);
        }
    }

    /// Waits (one yield to the runtime, then a timer) before it decides,
    /// then admits and adds a field.
    #[derive(Debug)]
    struct Waiting(std::sync::Arc<Trace>);

    impl Filter for Waiting {
        fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
            self.0.push("waiting decides");
            cx.edits.request_headers.push(b"x-waited", b"yes");
            Ok(())
        }
        fn waits(&self) -> bool {
            true
        }
        fn wait<'a>(&'a self, _cx: &ReqCx<'a>) -> Option<Wait<'a>> {
            Some(Box::pin(async move {
                self.0.push("wait starts");
                tokio::task::yield_now().await;
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                self.0.push("wait ends");
            }))
        }
    }

    /// Refuses every request.
    #[derive(Debug)]
    struct Refusing(std::sync::Arc<Trace>);

    impl Filter for Refusing {
        fn on_request<'a>(&'a self, _cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
            self.0.push("refusing decides");
            Err(Refuse {
                answer: Answer::Error(ErrorKind::Forbidden),
                headers: Fields::new(),
            })
        }
    }

    fn run(filters: &Filters) -> (Option<Refuse>, Edits) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut head = RequestHead::default();
        let mut edits = Edits::default();
        let refused = rt.block_on(async {
            let mut cx = ReqCx {
                raw: b"GET / HTTP/1.1\r\n\r\n",
                head: &mut head,
                path: b"/",
                query: 0..0,
                prefix_len: 0,
                service: None,
                edits: &mut edits,
                app: None,
                now: Instant::now(),
                client: IpAddr::from([127, 0, 0, 1]),
                identity: None,
            };
            run_filters(filters, &mut cx).await
        });
        (refused, edits)
    }

    #[test]
    fn a_filter_that_waits_decides_after_its_wait_and_before_the_next() {
        let trace = std::sync::Arc::new(Trace::default());
        let filters = Filters::new(vec![
            Box::new(Waiting(trace.clone())),
            Box::new(Refusing(trace.clone())),
        ]);
        assert!(filters.waits());
        let (refused, edits) = run(&filters);
        assert_eq!(
            refused.map(|r| r.answer),
            Some(Answer::Error(ErrorKind::Forbidden))
        );
        assert_eq!(edits.request_headers.get(b"x-waited"), Some(&b"yes"[..]));
        assert_eq!(
            *trace.0.lock().unwrap(),
            [
                "wait starts",
                "wait ends",
                "waiting decides",
                "refusing decides"
            ]
        );
    }

    #[test]
    fn grpc_timeouts_parse_in_every_unit_and_bad_ones_are_ignored() {
        use std::time::Duration;
        assert_eq!(grpc_timeout(b"2H"), Some(Duration::from_secs(7200)));
        assert_eq!(grpc_timeout(b"3M"), Some(Duration::from_secs(180)));
        assert_eq!(grpc_timeout(b"10S"), Some(Duration::from_secs(10)));
        assert_eq!(grpc_timeout(b"250m"), Some(Duration::from_millis(250)));
        assert_eq!(
            grpc_timeout(b"99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(grpc_timeout(b"5n"), Some(Duration::from_nanos(5)));
        for bad in [&b""[..], b"S", b"123456789S", b"10s", b"-1S", b"1.5S"] {
            assert_eq!(
                grpc_timeout(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn filters_that_never_wait_run_in_one_pass() {
        let trace = std::sync::Arc::new(Trace::default());
        let filters = Filters::new(vec![Box::new(Refusing(trace.clone()))]);
        assert!(!filters.waits());
        let (refused, _) = run(&filters);
        assert!(refused.is_some());
        assert_eq!(*trace.0.lock().unwrap(), ["refusing decides"]);
    }
}
