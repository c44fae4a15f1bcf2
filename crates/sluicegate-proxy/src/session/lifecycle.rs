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
//!    with no such filter runs them in one plain call, no future
//!    ([`super::filtering`]).
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
use std::time::Instant;

use super::answer::{https_redirect, Local};
use super::conn::{Conn, Next};
use super::filtering::{request_filters, request_filters_waiting, Facts};
use super::grpc::grpc_facts;
use super::tunneled::{Handoff, LogFacts};
use crate::filters::Answer;
use crate::observe::accesslog;
use crate::proto::fields;
use crate::proto::head::RequestHead;
use crate::proto::response::{ErrorKind, Head};
use crate::route::router::RouteRequest;
use crate::route::target::Target;
use crate::runtime::worker::{Bufs, Downstream};
use crate::snapshot::{ActionRt, Snapshot};
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
                self.refuse_and_close(snap, bufs, kind, true).await;
                return Next::Close;
            }
        };
        if method == b"CONNECT" {
            self.refuse_and_close(snap, bufs, ErrorKind::MethodNotAllowed, true)
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
                self.refuse_and_close(snap, bufs, ErrorKind::BadRequest, true)
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
        // Its id and trace context (session/ids.rs).
        self.request_ids(snap, bufs, target.path.clone());

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
                if bufs.ids.sampled.is_some() {
                    self.end_span(bufs, ("", ""), &outcome, total_us);
                }
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
            apps: &snap.apps,
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
                if refuse.answer == Answer::Error(ErrorKind::Unauthorized) {
                    route
                        .metrics
                        .unauthorized
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                self.answer_locally(snap, bufs, refuse.local(), is_head)
                    .await
            }
            None => match &route.action {
                ActionRt::Respond { head, body } => {
                    let fixed = Local::Fixed(Head::Fixed(head), body);
                    self.answer_locally(snap, bufs, fixed, is_head).await
                }
                ActionRt::Proxy {
                    service,
                    strip_prefix,
                    upgrade,
                } => {
                    let strip = if *strip_prefix { found.prefix_len } else { 0 };
                    let service = snap.service(*service);
                    svc = &service.name;
                    let down = self.downstream();
                    let cx = forward::Request {
                        worker: down.worker,
                        down: Some(&down),
                        client,
                        snap,
                        service,
                        target: &target,
                        strip,
                        started,
                        upgrade,
                    };
                    let outcome = forward::forward(cx, bufs).await.outcome();
                    if outcome.status == 101 {
                        if let Some(t) = bufs.upgraded.take() {
                            // An open tunnel: its own task runs it, then
                            // records this request (6).
                            let log = logging.then_some(method_len);
                            if bufs.ids.sampled.is_some() {
                                let names = (&*route.name, svc);
                                self.end_span(bufs, names, &outcome, super::ids::since(started));
                            }
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
        route
            .metrics
            .record(outcome.status, total_us, outcome.upstream_us);
        if let Some(app) = bufs.edits.app {
            snap.apps.record(app, outcome.status, total_us);
        }
        if bufs.grpc {
            route.metrics.record_grpc(bufs.grpc_status);
        }
        self.log(snap, bufs, method_len, &route.name, svc, &outcome, total_us);
        if bufs.ids.sampled.is_some() {
            self.end_span(bufs, (&route.name, svc), &outcome, total_us);
        }
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
            if let Some((status, location)) = https_redirect(raw, target, method) {
                let fixed = Local::Fixed(Head::Fields(status, &location), &[]);
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
                request_id: bufs.ids.rid.value().into(),
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
        self.worker.append_log(
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
                request_id: bufs.ids.rid.value(),
                trace_id: bufs.ids.sampled.as_ref().map(|s| &s.trace_id),
            },
        );
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
