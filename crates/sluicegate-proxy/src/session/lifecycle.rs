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
//! 4. **Action**: the route's fixed answer, an aggregate route's parts
//!    ([`super::aggregate`]), or forwarding upstream
//!    ([`crate::upstream::forward`]), which picks the endpoint, retries,
//!    and streams both bodies; on a route with a `mirror`, a sampled
//!    request's copy is started first ([`crate::upstream::mirror`]), and
//!    its body teed as it is relayed.
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
//!
//! The phases are functions over what they read: the request's [`Link`]
//! to its connection, the snapshot, the buffers, and [`Req`], what the
//! phases after routing know of the request. What the connection must do
//! next ([`Next`]: keep alive from the answer's end, close, or hand a
//! tunnel on) is returned to its request loop, which alone changes it.

use std::net::IpAddr;
use std::time::Instant;

use super::action::{inject, pick};
use super::answer::{answer_locally, https_redirect, refuse_and_close, Local};
use super::cached::{self, Cached, Refresh};
use super::fallback::{fall_back, Again};
use super::filtering::{request_filters, request_filters_waiting, Facts};
use super::grpc::grpc_facts;
use super::ids::{end_span, request_ids, since};
use super::peer::Link;
use super::req::Req;
use super::revocable::{self, Admitted};
use super::tunneled::{Handoff, LogFacts};
use crate::filters::compress::Compressing;
use crate::filters::fault::Injected;
use crate::filters::Answer;
use crate::observe::accesslog;
use crate::proto::fields;
use crate::proto::head::RequestHead;
use crate::proto::response::{ErrorKind, Head};
use crate::route::router::RouteRequest;
use crate::route::target::Target;
use crate::snapshot::fallback::FallbackAnswerRt;
use crate::snapshot::split::SplitEntryRt;
use crate::snapshot::{ActionRt, ProxyExtras, Snapshot};
use crate::transport::forwarded::client_from_xff;
use crate::upstream::forward::{self, Ended, Outcome};
use crate::upstream::handback::{Cause, HandBack};
use crate::upstream::mirror;
use crate::worker::upgraded::Upgraded;
use crate::worker::Bufs;
use std::sync::Arc;

/// What a proxy route without extras reads (a `static`: they own boxes).
static NO_EXTRAS: ProxyExtras = ProxyExtras::NONE;

/// What the request loop does after a request.
pub(super) enum Next {
    /// The connection may serve another request; the answer was written
    /// at this time, which the keep-alive wait counts from.
    KeepAlive(Instant),
    Close,
    /// The request opened a tunnel: the serving task ends and a task of
    /// the tunnel's own takes the connection, and this.
    Tunnel(Box<Handoff>),
}

/// Runs one request whose head is in `bufs`, from routing to the log.
pub(super) async fn exchange(
    link: Link<'_>,
    snap: &Arc<Snapshot>,
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
            refuse_and_close(link, snap, bufs, kind, true).await;
            return Next::Close;
        }
    };
    if method == b"CONNECT" {
        refuse_and_close(link, snap, bufs, ErrorKind::MethodNotAllowed, true).await;
        return Next::Close;
    }
    let lookup = |name: &[u8]| -> Option<&[u8]> {
        req.headers
            .iter()
            .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(name))
            .map(|h| &raw[h.value.clone()])
    };
    let each_value = |name: &[u8], visit: &mut dyn FnMut(&[u8]) -> bool| {
        let _ = req
            .headers
            .iter()
            .filter(|h| raw[h.name.clone()].eq_ignore_ascii_case(name))
            .any(|h| visit(&raw[h.value.clone()]));
    };
    // Routed, filtered and forwarded: the normal form of the path.
    let norm = match crate::route::path::normalize(&raw[target.path.clone()]) {
        Ok(n) => n,
        Err(crate::route::path::BadPath(why)) => {
            tracing::debug!(peer = %link.peer.addr, why, "bad request path");
            refuse_and_close(link, snap, bufs, ErrorKind::BadRequest, true).await;
            return Next::Close;
        }
    };
    let host = target.host(raw).map(crate::route::target::strip_port);
    let found = snap.router.find(
        &RouteRequest {
            host,
            method,
            path: norm.as_deref().unwrap_or(&raw[target.path.clone()]),
            query: raw[target.query.clone()].get(1..).unwrap_or_default(),
            header: &lookup,
            header_values: &each_value,
        },
        &mut bufs.params,
    );
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
    let (client, named) = if snap.trusted_proxies.is_empty() {
        (link.peer.addr.ip(), None)
    } else {
        trusted_client(link.peer.addr.ip(), snap, raw, req)
    };
    // Its id and trace context (session/ids.rs).
    request_ids(
        link.worker,
        link.peer.addr.ip(),
        snap,
        bufs,
        target.path.clone(),
    );
    let rq = Req {
        link: &link,
        snap,
        who: named.as_deref().unwrap_or(&link.peer.ip),
        method_len,
    };

    // 2. Gate: answers before any route's policy.
    let found = match found {
        Some(found)
            if !link.peer.redirect_https && (snap.ip.is_empty() || snap.ip.admits(client)) =>
        {
            found
        }
        _ => {
            let outcome = gate(link, snap, bufs, &target, is_head, client).await;
            link.worker.shared.global.unrouted.record(outcome.status);
            let (end, total_us) = finish(started);
            log(&rq, bufs, ("", ""), (None, None), &outcome, total_us);
            if bufs.ids.sampled.is_some() {
                end_span(link, bufs, ("", ""), &outcome, total_us);
            }
            return outcome.next(end);
        }
    };
    let route = &snap.routes[found.index];
    // `split_by: param:NAME` hashes its parameter now, while the routed
    // path is at hand (a filter may replace it).
    let param_key = match &route.action {
        ActionRt::Proxy { split: Some(s), .. } => {
            let raw = bufs.inb.filled();
            let routed = norm.as_deref().unwrap_or(&raw[target.path.clone()]);
            s.param_key(&bufs.params, routed)
        }
        _ => None,
    };

    // 3. Request filters: in one pass, unless one of them may wait.
    let facts = Facts {
        norm: norm.as_deref(),
        target: &target,
        prefix_len: found.prefix_len,
        now: started,
        client,
        identity: link.peer.identity.as_deref(),
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
    // The split's entry that took the request, on a split route.
    let mut entry: Option<(usize, &SplitEntryRt)> = None;
    let mut injected = Injected::None;
    let mut fell = None;
    // A fallback's answer: the status the route's own service would have
    // got the client.
    let mut primary = None;
    let outcome = match refused {
        Some(refuse) => {
            if refuse.answer == Answer::Error(ErrorKind::Unauthorized) {
                route
                    .metrics
                    .unauthorized
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            answer_locally(link, snap, bufs, refuse.local(), is_head).await
        }
        None => match &route.action {
            ActionRt::Respond { head, body } => {
                let fixed = Local::Fixed(Head::Fixed(head), body);
                answer_locally(link, snap, bufs, fixed, is_head).await
            }
            ActionRt::Aggregate(agg) => {
                // Boxed: the other routes' request futures stay as small.
                let run = super::aggregate::aggregate(&rq, agg, bufs, client, &target, started);
                Box::pin(run).await
            }
            ActionRt::Proxy {
                service,
                strip_prefix,
                upgrade,
                split,
                extras,
            } => 'proxy: {
                let ProxyExtras {
                    fault,
                    mirror,
                    fallback,
                    compress,
                    cache,
                    authz,
                    auth_service,
                } = extras.as_deref().unwrap_or(&NO_EXTRAS);
                // External authorization: after the filters, before all
                // else the action does.
                if let Some(a) = authz {
                    let own = auth_service.as_ref();
                    let m = &route.metrics.authz;
                    let run = super::authz::authorize(&rq, a, m, own, bufs, client, &target);
                    if let Some(answered) = Box::pin(run).await {
                        break 'proxy answered;
                    }
                }
                let strip = if *strip_prefix { found.prefix_len } else { 0 };
                let service_index = match split {
                    None => *service,
                    Some(split) => {
                        let i = pick(&rq, split, bufs, client, param_key);
                        let e = &split.entries[i];
                        entry = Some((i, e));
                        e.service
                    }
                };
                let service = snap.service(service_index);
                svc = &service.name;
                if let Some(fault) = fault {
                    let timed_out;
                    (injected, timed_out) = inject(&rq, fault, route, service, bufs, started).await;
                    let kind = match injected {
                        Injected::Abort(status) => Some(ErrorKind::Fault(status)),
                        // The delay took the request's whole time.
                        _ if timed_out => Some(ErrorKind::UpstreamTimeout),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        let local = Local::Error(kind, &fields::NONE);
                        break 'proxy answer_locally(link, snap, bufs, local, is_head).await;
                    }
                }
                // The cache: after the filters (and the fault
                // injection), before the mirror and the forward; a miss
                // leaves its fill in `bufs`, taken back below.
                let mut stale = None;
                if let Some(c) = cache {
                    let refresh = Refresh {
                        service: service_index,
                        client,
                        strip,
                    };
                    let compress = compress.as_deref();
                    let looked = cached::lookup(
                        link, snap, bufs, route, c, compress, &target, is_head, refresh,
                    );
                    match looked.await {
                        Cached::Served(outcome) => break 'proxy outcome,
                        Cached::Forward(s) => stale = s,
                    }
                }
                let down = link.downstream();
                if let Some(m) = mirror {
                    let metrics = &route.metrics;
                    mirror::start(&down, snap, m, metrics, client, &target, strip, bufs);
                }
                let hand_back = match fallback {
                    Some(f) => HandBack {
                        failures: true,
                        statuses: f.statuses,
                        whole_only: matches!(f.answer, FallbackAnswerRt::Service(_)),
                        not_modified: false,
                    },
                    None => HandBack::NONE,
                };
                // The coding the answer may be compressed in, from the
                // request's head (read before its body moves it out).
                let compress = compress.as_deref().and_then(|c| {
                    let raw = bufs.inb.filled();
                    let coding = c.choose(raw, &bufs.req, is_head, bufs.grpc)?;
                    Some(Compressing {
                        rt: c,
                        coding,
                        metrics: &route.metrics.compress,
                    })
                });
                // A stale object to answer with: every failure and 5xx
                // is handed back for it.
                let mut hand_back = match stale {
                    Some(_) => HandBack::STALE,
                    None => hand_back,
                };
                // A revalidation's 304 comes back for the cache.
                hand_back.not_modified =
                    bufs.fill.as_ref().is_some_and(|f| f.revalidation.is_some());
                let mark = bufs.inb.mark();
                let cx = forward::Request {
                    worker: down.worker,
                    down: Some(&down),
                    client,
                    origin: None,
                    snap,
                    service,
                    target: &target,
                    strip,
                    started,
                    upgrade: Some(upgrade),
                    feed: None,
                    hand_back,
                    compress,
                };
                // An authenticated request that runs on is revocable.
                let admitted = Admitted::of(snap, bufs, route, &target);
                // Pinned where it is made: the revocable path polls it
                // there instead of moving it into a future of its own; it
                // is dropped (its upstream side closed) at the block's end.
                let forwarded = {
                    let fwd = std::pin::pin!(forward::forward(cx, bufs));
                    match &admitted {
                        None => Ok(fwd.await),
                        Some(a) => revocable::forward(link, a, started, fwd).await,
                    }
                };
                let forwarded = forwarded.unwrap_or_else(|_| {
                    revocable::cancel(link);
                    Ended::Done(Outcome::local(403, 0, true))
                });
                // Filled by the relay, if anything: no fallback's answer
                // is stored in its place.
                let mut fill = if cache.is_some() {
                    bufs.fill.take()
                } else {
                    None
                };
                let outcome = match (forwarded, fallback, stale) {
                    (Ended::Unanswered(un), ..)
                        if hand_back.not_modified
                            && un.cause == Cause::UpstreamStatus
                            && bufs.res.status == 304 =>
                    {
                        if un.at_hand {
                            bufs.inb.rewind(mark);
                        }
                        let coder = cache
                            .as_deref()
                            .and_then(|c| cached::coder(route, c, compress.map(|k| k.rt)));
                        match fill.as_deref_mut() {
                            Some(f) => {
                                route
                                    .metrics
                                    .cache
                                    .revalidated
                                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                let served = cached::revalidated(link, snap, bufs, f, &un, coder);
                                Box::pin(served).await
                            }
                            None => Outcome::local(502, 0, true),
                        }
                    }
                    (Ended::Unanswered(un), _, Some(o)) => {
                        primary = Some(un.kind.status());
                        if un.at_hand {
                            bufs.inb.rewind(mark);
                        }
                        let upstream =
                            (un.cause == Cause::UpstreamStatus).then_some(bufs.res.status);
                        let coder = cache
                            .as_deref()
                            .and_then(|c| cached::coder(route, c, compress.map(|k| k.rt)));
                        let served = cached::stale_if_error(
                            link, snap, bufs, route, o, &un, upstream, coder,
                        );
                        Box::pin(served).await
                    }
                    (Ended::Unanswered(un), Some(fb), None) => {
                        if let Some(r) = fill.as_ref().and_then(|f| f.revalidation.as_deref()) {
                            cached::unconditional(bufs, r);
                        }
                        // The split's entry failed, whatever answers
                        // instead: its counters (the rollout's input)
                        // take the error it would have answered.
                        primary = Some(un.kind.status());
                        let again = Again {
                            client,
                            target: &target,
                            strip,
                            mark,
                            compress,
                        };
                        let fell_back = fall_back(&rq, bufs, route, fb, un, again);
                        let (outcome, why, other) = Box::pin(fell_back).await;
                        fell = Some(why);
                        if let Some(other) = other {
                            svc = &other.name;
                        }
                        outcome
                    }
                    (ended, ..) => ended.outcome(),
                };
                if cache.is_some() {
                    cached::ended(route, fill);
                }
                if mirror.is_some() {
                    // The copy's body ends with the request's (cut, if
                    // it did not arrive whole).
                    bufs.mirror = None;
                }
                if outcome.status == 101 {
                    if let Some(t) = bufs.upgraded.take() {
                        // An open tunnel: its own task runs it, then
                        // records this request (6).
                        if bufs.ids.sampled.is_some() {
                            let names = (&*route.name, svc);
                            end_span(link, bufs, names, &outcome, since(started));
                        }
                        let mut h = hand_off(&rq, t, bufs, found.index, &outcome, started);
                        h.split_entry = entry.map(|(i, _)| i);
                        if let Some(a) = &admitted {
                            let who = link.peer.identity.as_deref();
                            h.grant = Some(Box::new(a.grant(who)));
                            h.websocket = a.websocket;
                        }
                        return Next::Tunnel(h);
                    }
                }
                outcome
            }
        },
    };

    // 6. End: slots taken by filters end with the request, not with
    // the connection.
    bufs.edits.guards.clear();
    let (end, total_us) = finish(started);
    route
        .metrics
        .record(outcome.status, total_us, outcome.upstream_us);
    if let Some((_, e)) = entry {
        let status = primary.unwrap_or(outcome.status);
        e.metrics.record(status, total_us, outcome.upstream_us);
    }
    if let Some(app) = bufs.edits.app {
        snap.apps.record(app, outcome.status, total_us);
    }
    if bufs.grpc {
        route.metrics.record_grpc(bufs.grpc_status);
    }
    log(
        &rq,
        bufs,
        (&route.name, svc),
        (injected.mark(), fell),
        &outcome,
        total_us,
    );
    if bufs.ids.sampled.is_some() {
        end_span(link, bufs, (&route.name, svc), &outcome, total_us);
    }
    outcome.next(end)
}

/// The answer of the gate, before any route's policy: the redirect to
/// HTTPS on a listener that asks for it, 403 by the global `ip` rules
/// (for `client`), else 404: no route matched.
#[cold]
async fn gate(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    target: &Target,
    is_head: bool,
    client: IpAddr,
) -> Outcome<'static> {
    let kind = if link.peer.redirect_https {
        let raw = bufs.inb.filled();
        let method = &raw[bufs.req.method.clone()];
        if let Some((status, location)) = https_redirect(raw, target, method) {
            let fixed = Local::Fixed(Head::Fields(status, &location), &[]);
            return answer_locally(link, snap, bufs, fixed, is_head).await;
        }
        ErrorKind::BadRequest
    } else if !snap.ip.is_empty() && !snap.ip.admits(client) {
        ErrorKind::Forbidden
    } else {
        ErrorKind::NoRoute
    };
    let error = Local::Error(kind, &fields::NONE);
    answer_locally(link, snap, bufs, error, is_head).await
}

/// The client a trusted proxy names in `X-Forwarded-For`, or the
/// connection's (`peer`); and it as text for the log when it differs.
#[cold]
fn trusted_client(
    peer: IpAddr,
    snap: &Snapshot,
    raw: &[u8],
    req: &RequestHead,
) -> (IpAddr, Option<String>) {
    let xff = req.xff.iter().map(|r| &raw[r.clone()]);
    let client = client_from_xff(peer, &snap.trusted_proxies, xff);
    (client, (client != peer).then(|| client.to_string()))
}

/// Leaves an open tunnel, and what recording its request at the close
/// needs, for the tunnel's own task ([`super::tunneled`]).
#[cold]
fn hand_off(
    rq: &Req,
    tunnel: Box<Upgraded>,
    bufs: &mut Bufs,
    route: usize,
    outcome: &Outcome,
    started: Instant,
) -> Box<Handoff> {
    let log = rq.snap.access_log.is_some().then(|| {
        Box::new(LogFacts {
            line: bufs.log_line.as_slice().into(),
            method_len: rq.method_len,
            client: rq.who.into(),
            endpoint: tunnel.endpoint().clone(),
            app: bufs.edits.app,
            key_fp: bufs.edits.key_fp,
            tls: rq.link.peer.tls,
            request_id: bufs.ids.rid.value().into(),
        })
    });
    let guards = std::mem::take(&mut bufs.edits.guards);
    Box::new(Handoff {
        tunnel,
        route,
        started,
        upstream_us: outcome.upstream_us,
        guards,
        log,
        split_entry: None,
        grant: None,
        websocket: false,
    })
}

/// Marks the end of a request: one clock read, shared by the metrics,
/// the access log and the next keep-alive wait; it, and the request's
/// time in µs.
fn finish(started: Instant) -> (Instant, u64) {
    let end = Instant::now();
    (
        end,
        end.saturating_duration_since(started).as_micros() as u64,
    )
}

/// The request's access log line, when the snapshot logs: its route and
/// service, and the marks of a fault injected and of a fallback.
fn log(
    rq: &Req,
    bufs: &Bufs,
    (route, service): (&str, &str),
    (fault, fallback): (Option<&'static str>, Option<&'static str>),
    outcome: &Outcome,
    total_us: u64,
) {
    let Some(sink) = &rq.snap.access_log else {
        return;
    };
    let line = &bufs.log_line;
    let method_len = rq.method_len;
    let (method, target) = (&line[..method_len], &line[method_len + 1..]);
    rq.link.worker.append_log(
        sink,
        &accesslog::Entry {
            client: rq.who,
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
            app: bufs.edits.app.map(|a| rq.snap.apps.app_id(a)),
            key_fp: bufs.edits.key_fp,
            tls: rq.link.peer.tls,
            http2: rq.link.http2(),
            request_id: bufs.ids.rid.value(),
            trace_id: bufs.ids.sampled.as_ref().map(|s| &s.trace_id),
            fault,
            fallback,
        },
    );
}

impl Outcome<'_> {
    /// What the connection does next, its answer written at `end`.
    fn next(&self, end: Instant) -> Next {
        if self.close {
            Next::Close
        } else {
            Next::KeepAlive(end)
        }
    }
}
