//! Forwarding one request upstream and streaming the response back
//! ([`forward`]), in three parts: the attempt loop (each attempt's
//! connection, head, body and response head, its failures typed by
//! [`AttemptError`], which says where each came from and whether a retry
//! is safe), the choice after each attempt ([`Attempts::again_after_head`]
//! and [`Attempts::again_after_failure`]: the same endpoint again when the
//! upstream took nothing, retries elsewhere, the circuit's verdict), and
//! the relay step ([`relay`]: response head and body, tunnel, pool). The
//! internal client's requests take the same path and stop at the head.
//!
//! Order: pick an endpoint, take an in-flight slot (503 when none frees up
//! within the connect timeout), take a pooled connection or connect (502),
//! send the rewritten head and the body (streamed, re-chunked), read the
//! response head (504 on timeout, 502 when invalid), relay 1xx, write the
//! rewritten response head and stream the body back, then pool the
//! upstream connection if it is clean. A pooled connection that the
//! upstream closed before answering is retried once on a fresh one when the
//! whole request is still at hand. The heads on the upstream side are
//! `upstream_head`'s, the bodies `body`'s.

use std::net::IpAddr;
use std::time::Instant;

use crate::balance::balancer::PickContext;
use crate::balance::endpoint::{EndpointState, Permit};
use crate::proto::codec::BodyKind;
use crate::proto::response::ErrorKind;
use crate::route::target::Target;
use crate::snapshot::{ServiceRt, Snapshot};
use crate::transport::io::write_all_by;
use crate::transport::stream::Stream;
use crate::upstream::attempt::{
    connect_failed, cost_nothing, head_came, pool_back, retry_endpoint, switch_to, take_pooled,
    time_left, Verdict,
};
use crate::upstream::body::{client_write_failed, linger, relay_body, send_body, BodyError, Fault};
use crate::upstream::failure::{AttemptError, Error, Side};
use crate::upstream::head::{
    early_response, h2_request_head, head_grpc_status, read_response_head, write_request_head,
    write_response_head, Forwarded, HeadError,
};
use crate::upstream::tunnel;
use crate::worker::{Bufs, Downstream, Worker};
use sluicegate_config::UpstreamProtocol;

use super::connect::connect;
use super::duplex;
pub use super::outcome::Outcome;
use super::outcome::{fail, fail_unsent};

/// Times a request whose HTTP/2 stream an upstream refused unprocessed
/// (its connection going away) is sent again, on another stream.
const REFUSED_RETRIES: u32 = 3;

/// What `forward` needs besides the buffers.
pub struct Request<'a, 's> {
    pub worker: &'a Worker,
    /// The client's connection; `None` for a request the gateway made
    /// itself (the internal client): no 1xx goes anywhere, no `100
    /// Continue` is owed, its body is whole at hand, never streamed, and
    /// the response head is handed back, not relayed.
    pub down: Option<&'a Downstream<'a>>,
    /// The client's address (the connection's, or one a trusted proxy
    /// named; unspecified for the gateway's own requests).
    pub client: std::net::IpAddr,
    /// For a request the gateway makes on a client's behalf, that
    /// client's facts for the `X-Forwarded-*` fields (a client's own
    /// request carries its connection's: `None`).
    pub origin: Option<Forwarded<'a>>,
    pub snap: &'s Snapshot,
    pub service: &'s ServiceRt,
    pub target: &'a Target,
    /// Bytes of the path to strip (the matched prefix), or 0.
    pub strip: usize,
    pub started: Instant,
    /// Protocols the route lets a client upgrade to.
    pub upgrade: &'s [Box<str>],
}

/// The endpoint for a request: the balancer's pick among the endpoints in
/// rotation; when none is, one only ejected after failed connects (a lone
/// endpoint that restarted is back with its first good connect); `None`
/// when every endpoint is down.
#[inline]
fn choose(service: &ServiceRt, client: IpAddr, target: &Target, bufs: &Bufs) -> Option<usize> {
    let raw = bufs.inb.filled();
    let req = &bufs.req;
    let lookup = |name: &[u8]| -> Option<&[u8]> {
        req.headers
            .iter()
            .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(name))
            .map(|h| &raw[h.value.clone()])
    };
    let pcx = PickContext {
        client_ip: client,
        path: target.path(raw),
        header: &lookup,
    };
    service.balancer.pick(&service.endpoints, &pcx).or_else(|| {
        service.balancer.pick_by(
            &service.endpoints,
            &pcx,
            EndpointState::usable_when_all_ejected,
        )
    })
}

/// What [`prepare`] decided about sending a request.
struct Plan {
    is_head: bool,
    client_minor: u8,
    /// Body bytes still to read from the client and send.
    remaining: u64,
    /// Body bytes already in `out` after the head.
    bytes_in: u64,
    chunked: bool,
    /// The whole request is in `out`: it can be sent again.
    replayable: bool,
    /// No `100 Continue` is owed to the client.
    sent_continue: bool,
    /// The head names no endpoint (it has a Host), so it can go to another.
    portable: bool,
    idempotent: bool,
    /// Bytes of HTTP/1.1 head at the start of `out` (none for a service
    /// that speaks only HTTP/2).
    head_len: usize,
    /// The head encoded for an HTTP/2 upstream (a service that speaks or
    /// may speak it); boxed, so that the plan moves cheaply.
    h2: Option<Box<http::Request<()>>>,
    /// The request asks for an upgrade the route allows.
    upgrading: bool,
}

/// Writes the rewritten request head into `bufs.out`, followed by the body
/// bytes that already arrived with it, and takes both out of `bufs.inb`.
#[inline]
fn prepare(
    forwarded: Option<Forwarded<'_>>,
    service: &ServiceRt,
    target: &Target,
    strip: usize,
    ep: &EndpointState,
    upgrading: bool,
    bufs: &mut Bufs,
) -> Plan {
    let framing = bufs.req_framing;
    let body = framing.body;
    let raw = bufs.inb.filled();
    let method = &raw[bufs.req.method.clone()];
    let portable = bufs.req.host.is_some() || target.authority.is_some();
    let idempotent = matches!(
        method,
        b"GET" | b"HEAD" | b"OPTIONS" | b"PUT" | b"DELETE" | b"TRACE"
    );
    let is_head = method == b"HEAD";
    let h2 = if service.protocol.http2() {
        h2_request_head(
            raw,
            &bufs.req,
            framing.len,
            target,
            strip,
            forwarded,
            ep,
            &bufs.edits,
            &bufs.ids,
            service.tls.is_some(),
            bufs.grpc,
        )
        .map(Box::new)
    } else {
        None
    };
    if matches!(
        service.protocol,
        UpstreamProtocol::H2 | UpstreamProtocol::H2c
    ) {
        bufs.out.clear();
    } else {
        write_request_head(
            &mut bufs.out,
            raw,
            &bufs.req,
            &framing,
            target,
            strip,
            forwarded,
            ep,
            &bufs.edits,
            &bufs.ids,
            upgrading
                .then(|| bufs.req.upgrade.clone())
                .flatten()
                .map(|v| &raw[v]),
        );
    }
    let head_len = bufs.out.len();
    let client_minor = bufs.req.minor;
    let expect_continue = framing.expect_continue;
    bufs.inb.consume(framing.len);
    let mut remaining = 0;
    let mut bytes_in = 0;
    if let BodyKind::Length(n) = body {
        let take = (bufs.inb.len() as u64).min(n) as usize;
        bufs.out.extend_from_slice(&bufs.inb.filled()[..take]);
        bufs.inb.consume(take);
        remaining = n - take as u64;
        bytes_in = take as u64;
    }
    // A body without a length goes upstream chunked (one from an HTTP/2
    // stream too).
    let chunked = matches!(body, BodyKind::Chunked | BodyKind::Stream);
    Plan {
        is_head,
        client_minor,
        remaining,
        bytes_in,
        chunked,
        replayable: remaining == 0 && !chunked,
        sent_continue: !expect_continue || !bufs.inb.is_empty() || bytes_in > 0,
        portable,
        idempotent,
        head_len,
        h2,
        upgrading,
    }
}

/// Sends the request head and the body bytes at hand (`out`, after the
/// HTTP/1.1 head `prepare` wrote). On an HTTP/1.1 connection: all of
/// `out` when the body does not stream (else [`send_body`] writes it
/// first). On an HTTP/2 stream: the stream opened with the HTTP/2 head,
/// ended with the body when the whole body is at hand, and the HTTP/1.1
/// head dropped from `out` when the body streams. Nothing is consumed
/// when it fails, so a request at hand can be sent again.
async fn send_head(
    up: &Stream,
    plan: &Plan,
    streams: bool,
    out: &mut Vec<u8>,
    wait: crate::clock::deadline::Wait<'_>,
) -> std::io::Result<()> {
    let Stream::H2Up(x) = up else {
        if plan.chunked {
            return Ok(());
        }
        return write_all_by(up, out, wait).await;
    };
    let Some(req) = plan.h2.as_deref().cloned() else {
        return Err(std::io::ErrorKind::InvalidData.into());
    };
    if !streams {
        return x.open(req, Some(&out[plan.head_len..]));
    }
    x.open(req, None)?;
    out.drain(..plan.head_len);
    if !plan.chunked && !out.is_empty() {
        write_all_by(up, out, wait).await?;
        out.clear();
    }
    Ok(())
}

/// The attempt loop's state: the endpoint tried now, its in-flight slot
/// and circuit verdict, what was tried, and the request's deadline for a
/// response head.
pub(crate) struct Attempts<'s> {
    service: &'s ServiceRt,
    index: usize,
    ep: &'s EndpointState,
    permit: Permit<'s>,
    admit: Verdict<'s>,
    tried: u64,
    tries: u32,
    /// Sends on this endpoint after a `NotTaken` (0 for the first).
    again: u32,
    total: Instant,
}

impl<'s> Attempts<'s> {
    /// Moves to another endpoint for a failed attempt when the service's
    /// retries allow one (`free`: the failure cost the endpoint nothing,
    /// so the retry is not paid from the budget).
    fn elsewhere(&mut self, free: bool) -> bool {
        let next = retry_endpoint(
            self.service,
            self.index,
            &mut self.tried,
            &mut self.tries,
            self.total,
            free,
        );
        let Some((i, permit)) = next else {
            return false;
        };
        (self.index, self.permit, self.again) = (i, permit, 0);
        (self.ep, self.admit) = switch_to(self.service, i);
        true
    }

    /// The endpoint that answered (its place in the service) and its
    /// in-flight slot, held until the response is read.
    pub(super) fn answered(self) -> (usize, &'s EndpointState, Permit<'s>) {
        (self.index, self.ep, self.permit)
    }
}

/// The first attempt's endpoint for a request started at `started` from
/// `client` (the balancer's pick, [`choose`]), before its in-flight slot
/// is taken; `None` when every endpoint is down (shed at once, never
/// queued).
struct Picked<'s> {
    index: usize,
    ep: &'s EndpointState,
    /// The request's deadline for a response head.
    total: Instant,
    /// How long to wait for a free in-flight slot.
    wait: std::time::Duration,
}

fn pick<'s>(
    service: &'s ServiceRt,
    client: IpAddr,
    target: &Target,
    bufs: &Bufs,
    started: Instant,
) -> Option<Picked<'s>> {
    let index = choose(service, client, target, bufs)?;
    // Every attempt must have the response head by then (sooner when a
    // gRPC client's own deadline says so).
    let limit = match bufs.grpc_timeout {
        Some(t) => t.min(service.timeouts.request),
        None => service.timeouts.request,
    };
    Some(Picked {
        index,
        ep: &service.endpoints[index],
        total: started + limit,
        wait: service.timeouts.connect.min(service.timeouts.request),
    })
}

impl<'s> Attempts<'s> {
    /// The first attempt, on the endpoint picked, with its slot. (Taking
    /// the slot is left to the caller: at once when one is free, without
    /// a future of its own on that path, else by waiting up to
    /// `picked.wait`.)
    #[inline]
    fn first(service: &'s ServiceRt, picked: Picked<'s>, permit: Permit<'s>) -> Self {
        let ep = picked.ep;
        ep.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        service.retries.deposit();
        Attempts {
            service,
            index: picked.index,
            ep,
            permit,
            admit: Verdict::admit(ep),
            tried: 1 << picked.index.min(63),
            tries: 1,
            again: 0,
            total: picked.total,
        }
    }
}

/// What a request's sends share: its plan, the facts of the call, and
/// what changes as it goes.
struct Call<'a, 's> {
    worker: &'a Worker,
    /// The client's connection; `None` for a request the gateway made
    /// itself (the internal client): no 1xx goes anywhere, no `100
    /// Continue` is owed, and its body is whole at hand, never streamed.
    down: Option<&'a Downstream<'a>>,
    snap: &'s Snapshot,
    service: &'s ServiceRt,
    started: Instant,
    plan: Plan,
    close_req: bool,
    body: BodyKind,
    /// Body bytes sent so far.
    bytes_in: u64,
    /// The upstream answered before the whole body was sent.
    body_cut: bool,
}

/// How forwarding a request ended.
pub enum Ended<'s> {
    /// With the client: answered, relayed, or gone; how.
    Done(Outcome<'s>),
    /// A request the gateway made itself got a response head (in `bufs`)
    /// on the stream given, sent at the instant given; the endpoint's
    /// slot is held in the attempts' state until its body is read.
    Head(Attempts<'s>, Stream, Instant),
    /// A request the gateway made itself got no response head: why.
    Failed(Error),
}

impl<'s> Ended<'s> {
    /// How a client's request ended. (Only the gateway's own requests end
    /// otherwise; such an end is counted a failure, never relayed.)
    pub fn outcome(self) -> Outcome<'s> {
        match self {
            Ended::Done(o) => o,
            Ended::Head(..) | Ended::Failed(_) => {
                debug_assert!(false, "a client's request ends with an outcome");
                Outcome::local(502, 0, true)
            }
        }
    }
}

/// Forwards a request (its head and framing in `bufs`): a client's, to
/// its end, its answer relayed; or one the gateway made itself (the
/// internal client, [`super::client`]), laid out in `bufs` with its whole
/// body as a client's would be, to a response head. Both go through the
/// same steps: the balancer's pick and an in-flight slot, [`prepare`],
/// then the attempt loop (each attempt's connection, pooled for a first
/// send, else new; the `100 Continue` the client waits for; the head and
/// the body, both ways at once for a gRPC call whose request streams; the
/// response head, 1xx relayed), the choice after each attempt
/// ([`Attempts::again_after_head`], [`Attempts::again_after_failure`]),
/// and the relay step ([`relay`]). The gateway's own requests carry no
/// `X-Forwarded-*`, and one without an authority (its `Host` the
/// endpoint's name) is not sent to another endpoint. One state machine on
/// purpose: each async function nested on this path costs every request
/// its future's set-up, moves and polls.
pub async fn forward<'s>(cx: Request<'_, 's>, bufs: &mut Bufs) -> Ended<'s> {
    let (worker, down, snap, service) = (cx.worker, cx.down, cx.snap, cx.service);
    let body = bufs.req_framing.body;
    let close_req = bufs.req_framing.close || worker.shutting_down();
    // An upgrade the route allows is forwarded (a request without a body);
    // any other `Upgrade` is dropped, and the request goes as a plain one.
    let upgrading = match &bufs.req.upgrade {
        Some(v) if body == BodyKind::None => {
            tunnel::allowed(&bufs.inb.filled()[v.clone()], cx.upgrade)
        }
        _ => false,
    };
    if upgrading {
        let g = &worker.shared.global;
        if g.tunnels_open.load(std::sync::atomic::Ordering::Relaxed)
            >= snap.limits.max_tunnels as u64
        {
            g.tunnels_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let kind = ErrorKind::TooManyTunnels;
            return refuse(down, snap, bufs, kind, close_req, None).await;
        }
    }
    // Until the body is read, an error answer must close the connection.
    let body_pending = body != BodyKind::None;
    if let BodyKind::Length(n) = body {
        if n > snap.limits.max_body_bytes {
            return refuse(down, snap, bufs, ErrorKind::BodyTooLarge, true, None).await;
        }
    }
    let close = close_req || body_pending;
    let Some(picked) = pick(service, cx.client, cx.target, bufs, cx.started) else {
        return refuse(down, snap, bufs, ErrorKind::NoHealthyEndpoint, close, None).await;
    };
    let ep = picked.ep;
    let permit = match ep.try_acquire() {
        Some(p) => Some(p),
        None => ep.acquire(picked.wait).await,
    };
    let Some(permit) = permit else {
        return refuse(down, snap, bufs, ErrorKind::UpstreamBusy, close, Some(ep)).await;
    };
    let mut at = Attempts::first(service, picked, permit);
    // The X-Forwarded-* facts, where the service takes them: the
    // client's connection's, or those of the client a request the gateway
    // makes is made for.
    let forwarded = match (cx.origin, down) {
        (Some(f), _) => Some(f),
        (None, Some(d)) => Some(Forwarded {
            client: d.peer_ip,
            https: d.https,
            host: None,
        }),
        (None, None) => None,
    }
    .filter(|_| service.forwarded_headers);
    let plan = prepare(
        forwarded, service, cx.target, cx.strip, at.ep, upgrading, bufs,
    );
    let mut call = Call {
        worker,
        down,
        snap,
        service,
        started: cx.started,
        bytes_in: plan.bytes_in,
        plan,
        close_req,
        body,
        body_cut: false,
    };
    // The attempt loop: one attempt after another until a response head
    // came or the request fails.
    let (up, sent_at) = 'attempts: loop {
        let ep = at.ep;
        let failed: AttemptError = 'attempt: {
            bufs.upb.clear();
            // A send after a pooled connection failed takes a fresh one:
            // the next pooled one may have been closed by the upstream
            // just the same.
            let pooled = if at.again == 0 {
                take_pooled(worker, ep, call.started)
            } else {
                None
            };
            let (up, reused) = match pooled {
                Some(s) => (s, true),
                None => {
                    let timeout = service.timeouts.connect.min(time_left(at.total));
                    match connect(worker, ep, service, timeout).await {
                        Ok(s) => {
                            ep.eject.connect_ok();
                            s
                        }
                        Err(e) => {
                            connect_failed(service, ep, &e);
                            break 'attempt AttemptError::Connect(e);
                        }
                    }
                }
            };
            if call.owes_continue() {
                if let Err(e) = send_continue(&mut call).await {
                    break 'attempt e;
                }
            }
            let plan = &call.plan;
            let streams = plan.chunked || plan.remaining > 0;
            let wait = worker.deadlines.after(service.timeouts.response_header);
            if send_head(&up, plan, streams, &mut bufs.out, wait)
                .await
                .is_err()
            {
                break 'attempt unsent(plan, &up, reused && at.again == 0);
            }
            if down.is_none() && !plan.replayable {
                // Only a client's body streams: one made in the gateway is
                // at hand.
                break 'attempt AttemptError::Downstream;
            }
            if let (false, true, Some(down)) = (plan.replayable, bufs.grpc, down) {
                // A gRPC call whose request streams: both ways at once.
                // Boxed: that state machine is large, and only such calls
                // pay for it.
                let duplex = duplex::Call {
                    down,
                    snap,
                    ep,
                    body: call.body,
                    remaining: plan.remaining,
                    bytes_in: call.bytes_in,
                    client_minor: plan.client_minor,
                    is_head: plan.is_head,
                    deadline: (Instant::now() + service.timeouts.response_header).min(at.total),
                    close: call.close_req,
                };
                let o = Box::pin(duplex::run(duplex, up, &mut at.admit, bufs)).await;
                return Ended::Done(o);
            }
            if let (false, Some(down)) = (plan.replayable, down) {
                // Stream the body while watching the upstream: one that
                // answers early (say 413) gets its answer relayed at once,
                // and the rest of the body is not sent.
                let Bufs { inb, out, upb, .. } = &mut *bufs;
                let sent = tokio::select! {
                    r = send_body(
                        &worker.deadlines, down.client, &up, inb, out, call.body, plan.remaining,
                        snap.limits.max_body_bytes, snap.timeouts.client_body,
                    ) => r,
                    early = early_response(&up, upb) => {
                        if early {
                            call.body_cut = true;
                            Ok(0)
                        } else {
                            Err(BodyError::Upstream)
                        }
                    }
                };
                match sent {
                    Ok(n) => call.bytes_in += n,
                    Err(e) => break 'attempt AttemptError::from(e),
                }
            }
            let plan = &call.plan;
            let sent_at = Instant::now();
            let deadline = (sent_at + service.timeouts.response_header).min(at.total);
            let (is_head, minor, upgrading) = (plan.is_head, plan.client_minor, plan.upgrading);
            let read =
                read_response_head(&up, worker, down, bufs, is_head, minor, deadline, upgrading);
            if let Err(e) = read.await {
                // Closed before any answer on a connection that served
                // before, or a stream refused unprocessed: it did not take
                // the request. On a fresh connection it may have.
                let untaken = matches!(e, HeadError::ClosedEarly)
                    && ((reused && at.again == 0) || up.refused());
                break 'attempt AttemptError::Head { e, untaken };
            }
            if at.again_after_head(&call, bufs) {
                continue 'attempts;
            }
            break 'attempts (up, sent_at);
        };
        if !at.again_after_failure(&call, &failed) {
            return match down {
                Some(down) => Ended::Done(answer_failed(&call, down, at.ep, failed, bufs).await),
                None => Ended::Failed(Error::Attempt(failed)),
            };
        }
    };
    // The relay step: the response head (rewritten) and body to the
    // client, or the tunnel a `101` opens; the upstream connection back to
    // the pool when it is clean.
    let Some(down) = down else {
        return Ended::Head(at, up, sent_at);
    };
    let (head_at, upstream_us) = head_came(service, at.ep, sent_at);
    if bufs.res.status == 101 {
        return Ended::Done(upgraded(&call, down, at, up, upstream_us, bufs).await);
    }
    let close = relay_head(&call, down, bufs);
    let relayed = relay_body(
        down,
        &up,
        bufs,
        bufs.res_framing.body,
        call.plan.client_minor == 1,
        service.timeouts.response_body,
        snap.timeouts.client_write,
    )
    .await;
    let ended = relay_end(&call, at, up, bufs, head_at, upstream_us, close, relayed);
    let outcome = match ended {
        Ok(o) => o,
        Err(o) => unrelayed(down, snap, bufs, o).await,
    };
    if call.body_cut {
        linger(
            &worker.deadlines,
            down.client,
            &mut bufs.inb,
            snap.limits.max_body_bytes,
        )
        .await;
    }
    Ended::Done(outcome)
}

/// A request refused before any attempt: the client gets the answer of
/// `kind` (closing the connection when `close`; `ep` the endpoint picked,
/// if one was), the gateway's own request the error.
#[cold]
async fn refuse<'s>(
    down: Option<&Downstream<'_>>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    kind: ErrorKind,
    close: bool,
    ep: Option<&'s EndpointState>,
) -> Ended<'s> {
    let Some(down) = down else {
        return Ended::Failed(match kind {
            ErrorKind::NoHealthyEndpoint | ErrorKind::UpstreamBusy => Error::Unavailable(kind),
            _ => Error::Attempt(AttemptError::Request(kind)),
        });
    };
    let mut o = fail_unsent((down, snap), bufs, kind, close).await;
    o.endpoint = ep;
    Ended::Done(o)
}

/// Answers the client for a request whose last attempt failed (nothing,
/// when the client itself failed), closing the connection when the
/// request's body may still be coming.
async fn answer_failed<'s>(
    call: &Call<'_, 's>,
    down: &Downstream<'_>,
    ep: &'s EndpointState,
    failed: AttemptError,
    bufs: &mut Bufs,
) -> Outcome<'s> {
    if let AttemptError::Downstream = failed {
        // The client is gone or stalled: nothing to answer.
        return Outcome::local(400, 0, true);
    }
    let plan = &call.plan;
    let close = match failed {
        AttemptError::Connect(_)
        | AttemptError::NotTaken
        | AttemptError::Write
        | AttemptError::Encode => call.close_req || plan.remaining > 0 || plan.chunked,
        AttemptError::Head { .. } => call.close_req,
        _ => true,
    };
    let mut o = fail((down, call.snap), bufs, failed.kind(), close).await;
    o.endpoint = Some(ep);
    o
}

impl Call<'_, '_> {
    /// A `100 Continue` is still owed for this request's body (to a
    /// client whose request asked for it; never to the gateway itself).
    #[inline]
    fn owes_continue(&self) -> bool {
        !self.plan.sent_continue && self.body != BodyKind::None
    }
}

/// Writes the `100 Continue` the client waits for before it sends its
/// body, once per request.
#[cold]
async fn send_continue(call: &mut Call<'_, '_>) -> Result<(), AttemptError> {
    call.plan.sent_continue = true;
    let Some(down) = call.down else {
        return Ok(());
    };
    let deadline = Instant::now() + call.snap.timeouts.client_write;
    let wrote = write_all_by(
        down.client,
        b"HTTP/1.1 100 Continue\r\n\r\n",
        call.worker.until(deadline),
    )
    .await;
    wrote.map_err(|e| {
        client_write_failed(call.worker, &e);
        AttemptError::Downstream
    })
}

/// Why a request head could not be sent on `up`: nothing beyond `out` was
/// consumed, so a send again is safe when the upstream took none of it
/// (`reused_first`: the first send on a pooled connection).
fn unsent(plan: &Plan, up: &Stream, reused_first: bool) -> AttemptError {
    if plan.h2.is_none() && matches!(up, Stream::H2Up(_)) {
        AttemptError::Encode
    } else if reused_first || up.refused() {
        AttemptError::NotTaken
    } else {
        AttemptError::Write
    }
}

impl<'s> Attempts<'s> {
    /// After a response head came (in `bufs.res`): records the circuit's
    /// verdict and the call's gRPC status, and says whether the request
    /// goes to another endpoint (an idempotent request still at hand whose
    /// status the service retries; a gRPC call's trailers-only status
    /// named in `retries.on`, whatever its method).
    fn again_after_head(&mut self, call: &Call<'_, 's>, bufs: &mut Bufs) -> bool {
        let status = bufs.res.status;
        if self.ep.breaker.counts_status(status) {
            self.admit.failed(self.ep);
        } else {
            self.admit.succeeded(self.ep);
        }
        if bufs.grpc {
            bufs.grpc_status = head_grpc_status(bufs);
        }
        let r = &call.service.retries.settings;
        let plan = &call.plan;
        let at_hand = plan.replayable && plan.portable && !call.body_cut;
        let again = (plan.idempotent && at_hand && r.on_status.contains(&status))
            || (bufs.grpc && at_hand && bufs.grpc_status.is_some_and(|c| r.on_grpc.contains(&c)));
        if again && self.elsewhere(false) {
            tracing::debug!(endpoint = %self.ep.name, status, "retrying elsewhere");
            return true;
        }
        false
    }

    /// After an attempt failed: whether the request is sent again, on the
    /// same endpoint when nothing was processed (a failed connect goes
    /// elsewhere or nowhere), or on another one when the service's retries
    /// allow it for this failure and the request may go (anything after a
    /// failed connect, since nothing was sent; otherwise only an
    /// idempotent request still at hand). Counts the failure against the
    /// endpoint's circuit when the upstream's side caused it.
    #[cold]
    fn again_after_failure(&mut self, call: &Call<'_, 's>, failed: &AttemptError) -> bool {
        let plan = &call.plan;
        let resend = !matches!(failed, AttemptError::Connect(_))
            && failed.unprocessed(plan.replayable)
            && self.again < REFUSED_RETRIES;
        if resend {
            self.again += 1;
            return true;
        }
        if failed.side() == Side::Upstream {
            self.admit.failed(self.ep);
        }
        let r = &call.service.retries.settings;
        let (allowed, free) = match failed {
            AttemptError::Connect(e) => (r.on_connect, cost_nothing(e)),
            AttemptError::Head { e, .. } => match e {
                HeadError::ClosedEarly => (r.on_reset, false),
                HeadError::Timeout => (r.on_timeout, false),
                HeadError::Invalid => (false, false),
            },
            _ => (false, false),
        };
        let may = match failed {
            AttemptError::Connect(_) => plan.portable,
            _ => plan.idempotent && plan.replayable && plan.portable && !call.body_cut,
        };
        if allowed && may && self.elsewhere(free) {
            return true;
        }
        if !matches!(failed, AttemptError::Downstream) {
            let status = failed.kind().status();
            tracing::debug!(endpoint = %self.ep.name, status, side = ?failed.side(), "attempt failed");
        }
        false
    }
}

/// The upstream switched protocols (its `101` in `bufs`): a tunnel until
/// either side is done, run by a task of its own once started (the
/// session takes it from `bufs.upgraded`; the endpoint's slot goes with
/// it).
#[cold]
async fn upgraded<'s>(
    call: &Call<'_, 's>,
    down: &Downstream<'_>,
    at: Attempts<'s>,
    up: Stream,
    upstream_us: u64,
    bufs: &mut Bufs,
) -> Outcome<'s> {
    let (ep, permit) = (
        at.ep,
        at.permit.into_owned(&call.service.endpoints[at.index]),
    );
    debug_assert_eq!(call.bytes_in, 0, "an upgrade request has no body");
    let carried = match tunnel::start(down, up, permit, bufs, call.snap).await {
        Ok(t) => {
            let carried = t.carried();
            bufs.upgraded = Some(t);
            carried
        }
        Err(carried) => carried,
    };
    Outcome {
        status: 101,
        bytes_in: call.bytes_in + carried.up,
        bytes_out: carried.down,
        close: true,
        upstream_us: Some(upstream_us),
        endpoint: Some(ep),
    }
}

/// Writes the response head (rewritten, in `bufs`) for the client, and
/// says whether the client's connection closes after this response.
#[inline]
fn relay_head(call: &Call<'_, '_>, down: &Downstream<'_>, bufs: &mut Bufs) -> bool {
    let res_body = bufs.res_framing.body;
    let client_minor = call.plan.client_minor;
    let close = call.close_req
        || call.body_cut
        || call.worker.shutting_down()
        || res_body == BodyKind::UntilClose
        || (matches!(res_body, BodyKind::Chunked | BodyKind::Stream) && client_minor == 0);
    write_response_head(bufs, close, client_minor, down.client);
    close
}

/// The end of the relay step, once the body was relayed (`relayed`: its
/// bytes, or how far it got and how it failed): the outcome, the upstream
/// connection back to the pool when the whole response was read and
/// nothing was cut short, and the endpoint's slot given back. `Err` when
/// a malformed first chunk line came with the head, so that nothing
/// reached the client: the outcome so far, for [`unrelayed`] to answer.
#[allow(clippy::too_many_arguments)]
#[inline]
fn relay_end<'s>(
    call: &Call<'_, 's>,
    at: Attempts<'s>,
    up: Stream,
    bufs: &Bufs,
    head_at: Instant,
    upstream_us: u64,
    close: bool,
    relayed: Result<u64, (u64, Fault)>,
) -> Result<Outcome<'s>, Outcome<'s>> {
    let (ep, status) = (at.ep, bufs.res.status);
    let mut outcome = Outcome {
        status,
        bytes_in: call.bytes_in,
        bytes_out: 0,
        close,
        upstream_us: Some(upstream_us),
        endpoint: Some(ep),
    };
    match relayed {
        Ok(n) => {
            outcome.bytes_out = n;
            if !call.body_cut {
                pool_back(call.worker, call.service, at.index, up, bufs, head_at, n);
            }
            Ok(outcome)
        }
        Err((_, Fault::Unsent)) => {
            // Not pooled, and the endpoint's circuit counts the failure
            // (the head counted a success).
            let mut admit = at.admit;
            if !ep.breaker.counts_status(status) {
                admit.failed_after_success(ep);
            }
            tracing::debug!(endpoint = %ep.name, "malformed chunked body from upstream");
            outcome.close = close || call.body_cut;
            Err(outcome)
        }
        Err((n, _)) => {
            outcome.bytes_out = n;
            outcome.close = true;
            Ok(outcome)
        }
    }
}

/// Answers a 502 for a response whose body was malformed before anything
/// reached the client (`so_far` from [`relay_end`]: its head, which
/// `fail` drops, is replaced).
#[cold]
async fn unrelayed<'s>(
    down: &Downstream<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    so_far: Outcome<'s>,
) -> Outcome<'s> {
    let mut o = fail((down, snap), bufs, ErrorKind::UpstreamFailed, so_far.close).await;
    o.bytes_in = so_far.bytes_in;
    o.upstream_us = so_far.upstream_us;
    o.endpoint = so_far.endpoint;
    o
}
