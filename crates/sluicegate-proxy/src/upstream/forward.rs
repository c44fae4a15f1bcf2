//! Forwarding one request upstream and streaming the response back
//! ([`forward`]), as one state machine on purpose (each async function
//! nested on this path costs every request its future's set-up, moves and
//! polls): the endpoint and the head to send ([`super::plan`]), the
//! attempt loop (each attempt's connection, head, body and response head,
//! its failures typed by [`AttemptError`], which says where each came from
//! and whether a retry is safe; the choice after each attempt, the same
//! endpoint again, another, or none, is [`super::attempt`]'s), and the
//! relay step ([`relay_head`], the body's relay, [`relay_end`]; a `101`'s
//! tunnel, [`upgraded`]). The internal client's requests take the same
//! function and stop at the response head ([`Ended::Head`]).
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

use std::time::Instant;

use crate::balance::endpoint::EndpointState;
use crate::filters::compress::Compressing;
use crate::proto::codec::BodyKind;
use crate::proto::compress::Recode;
use crate::proto::response::ErrorKind;
use crate::route::target::Target;
use crate::snapshot::{ServiceRt, Snapshot, Upgrades};
use crate::transport::stream::Stream;
use crate::upstream::attempt::{
    connect_failed, head_came, pool_back, send_continue, take_pooled, time_left, Attempts, Call,
};
use crate::upstream::body::{linger, relay_body, send_body, send_fed, BodyError, Fault};
use crate::upstream::compress::relay_compressed;
use crate::upstream::failure::{AttemptError, Error};
use crate::upstream::handback::{Cause, HandBack, Unanswered};
use crate::upstream::head::{
    early_response, read_response_head, write_response_head, Forwarded, HeadError,
};
use crate::upstream::plan::{pick, prepare, send_head, unsent};
use crate::upstream::tunnel;
use crate::worker::{Bufs, Downstream, Worker};

use super::connect::connect;
use super::duplex;
pub use super::outcome::Outcome;
use super::outcome::{fail, fail_unsent};

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
    /// Protocols the route lets a client upgrade to (read only when the
    /// request asks for an upgrade); none for the gateway's own requests.
    pub upgrade: Option<&'s Upgrades>,
    /// For a mirror's copy (made by the gateway) whose body streams: where
    /// its body comes from ([`send_fed`]).
    pub feed: Option<&'a crate::worker::tee::Feed>,
    /// What a client's request is handed back for, unanswered, instead of
    /// answered (a route's fallback; [`HandBack::NONE`] otherwise).
    pub hand_back: HandBack,
    /// What the answer may become on a route with `compress` (compressed
    /// in the client's coding if it qualifies); `None` otherwise.
    pub(crate) compress: Option<Compressing<'a>>,
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
    /// A client's request that `hand_back` asked for: nothing was
    /// answered; why, and what is left of the request.
    Unanswered(Unanswered<'s>),
}

impl<'s> Ended<'s> {
    /// How a client's request ended. (Only the gateway's own requests end
    /// otherwise; such an end is counted a failure, never relayed.)
    pub fn outcome(self) -> Outcome<'s> {
        match self {
            Ended::Done(o) => o,
            Ended::Head(..) | Ended::Failed(_) | Ended::Unanswered(_) => {
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
/// same steps: the balancer's pick and an in-flight slot, [`prepare`](super::plan::prepare),
/// then the attempt loop (each attempt's connection, pooled for a first
/// send, else new; the `100 Continue` the client waits for; the head and
/// the body, both ways at once for a gRPC call whose request streams; the
/// response head, 1xx relayed), the choice after each attempt
/// ([`Attempts::again_after_head`], [`Attempts::again_after_failure`]),
/// and the relay step. The gateway's own requests carry no
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
            let allowed = cx.upgrade.map_or(&[][..], Upgrades::list);
            tunnel::allowed(&bufs.inb.filled()[v.clone()], allowed)
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
        let kind = ErrorKind::NoHealthyEndpoint;
        if cx.hand_back.failures && down.is_some() {
            return unavailable(service, kind, close, None);
        }
        return refuse(down, snap, bufs, kind, close, None).await;
    };
    let ep = picked.ep;
    let permit = match ep.try_acquire() {
        Some(p) => Some(p),
        None => ep.acquire(picked.wait).await,
    };
    let Some(permit) = permit else {
        let kind = ErrorKind::UpstreamBusy;
        if cx.hand_back.failures && down.is_some() {
            return unavailable(service, kind, close, Some(ep));
        }
        return refuse(down, snap, bufs, kind, close, Some(ep)).await;
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
            if let (None, false) = (down, plan.replayable) {
                // A body made in the gateway is at hand, but a mirror's
                // copy, which streams from its feed.
                let Some(feed) = cx.feed else {
                    break 'attempt AttemptError::Downstream;
                };
                let idle = service.timeouts.response_body;
                let (chunked, remaining) = (plan.chunked, plan.remaining);
                let fed = send_fed(
                    &worker.deadlines,
                    &up,
                    &mut bufs.out,
                    feed,
                    chunked,
                    remaining,
                    idle,
                    snap.timeouts.client_body,
                );
                match fed.await {
                    Ok(n) => call.bytes_in += n,
                    Err(e) => break 'attempt AttemptError::from(e),
                }
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
                let Bufs {
                    inb,
                    out,
                    upb,
                    mirror,
                    ..
                } = &mut *bufs;
                let sent = tokio::select! {
                    r = send_body(
                        &worker.deadlines, down.client, &up, inb, out, call.body, plan.remaining,
                        snap.limits.max_body_bytes, snap.timeouts.client_body, mirror.as_ref(),
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
            let cause = match cx.hand_back.failures {
                true => Cause::of_attempt(&failed, at.tries),
                false => None,
            };
            return match (down, cause) {
                (Some(_), Some(cause)) => {
                    Ended::Unanswered(failed_back(&call, &at, failed, cause, bufs))
                }
                (Some(down), None) => {
                    Ended::Done(answer_failed(&call, down, at.ep, failed, bufs).await)
                }
                (None, _) => Ended::Failed(Error::Attempt(failed)),
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
    if bufs.res.status >= 500
        && cx.hand_back.takes(bufs.res.status)
        && (!cx.hand_back.whole_only || (call.plan.replayable && !call.body_cut))
    {
        return Ended::Unanswered(status_back(&call, at, up, upstream_us, bufs));
    }
    if bufs.res.status == 304 && cx.hand_back.not_modified {
        // The cache's own conditional request: its caller answers.
        return Ended::Unanswered(status_back(&call, at, up, upstream_us, bufs));
    }
    if bufs.res.status == 101 {
        return Ended::Done(upgraded(&call, down, at, up, upstream_us, bufs).await);
    }
    // On a compressing route, an answer that qualifies is compressed when
    // the client takes a coding (its own relay, boxed: only such answers
    // pay for its state), else marked as varying with Accept-Encoding. A
    // cache fill takes the upstream's body either way, before coding.
    let (recode, coder) = match cx.compress {
        Some(c) if compressed(&c, bufs) => {
            let coder = c
                .coding
                .and_then(|e| Some((e, worker.take_encoder(e, c.rt.level(e))?)));
            match coder {
                Some((e, k)) => (Recode::Coded(e), Some((e, c.metrics, k))),
                None => (Recode::Vary, None),
            }
        }
        _ => (Recode::Keep, None),
    };
    let close = relay_head(&call, down, bufs, recode);
    let (body, idle, client_write) = (
        bufs.res_framing.body,
        service.timeouts.response_body,
        snap.timeouts.client_write,
    );
    let relayed = match coder {
        None => {
            let rechunk = call.plan.client_minor == 1;
            relay_body(down, &up, bufs, body, rechunk, idle, client_write).await
        }
        Some((coding, metrics, coder)) => {
            let how = (coding, metrics, coder);
            Box::pin(relay_compressed(
                down,
                &up,
                bufs,
                body,
                how,
                idle,
                client_write,
            ))
            .await
        }
    };
    if let Some(f) = bufs.fill.as_deref_mut() {
        f.whole = relayed.is_ok();
    }
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

/// A client's request that found no endpoint (`kind`: none in rotation,
/// or no slot free on `ep`), handed back unanswered: nothing of it was
/// consumed.
#[cold]
fn unavailable<'s>(
    service: &ServiceRt,
    kind: ErrorKind,
    close: bool,
    ep: Option<&'s EndpointState>,
) -> Ended<'s> {
    Ended::Unanswered(Unanswered {
        cause: Cause::unavailable(service, kind),
        kind,
        close,
        at_hand: true,
        endpoint: ep,
        bytes_in: 0,
        upstream_us: None,
    })
}

/// A client's request whose last attempt failed (`cause`: why, one a
/// fallback answers), handed back unanswered.
#[cold]
fn failed_back<'s>(
    call: &Call<'_, 's>,
    at: &Attempts<'s>,
    failed: AttemptError,
    cause: Cause,
    bufs: &mut Bufs,
) -> Unanswered<'s> {
    let plan = &call.plan;
    bufs.grpc_status = None;
    // A streaming body is still whole with the client when no attempt got
    // as far as sending (a connect that failed, a pooled connection that
    // took nothing): an earlier attempt that had sent some would not have
    // been followed by another.
    let untouched = matches!(failed, AttemptError::Connect(_) | AttemptError::NotTaken);
    Unanswered {
        cause,
        kind: failed.kind(),
        close: failed_close(call, &failed),
        at_hand: (plan.replayable || untouched) && !call.body_cut,
        endpoint: Some(at.ep),
        bytes_in: call.bytes_in,
        upstream_us: None,
    }
}

/// A client's request whose upstream answered a status handed back (its
/// head in `bufs`): the connection is dropped with its body unread (never
/// pooled), the endpoint's slot given back, and nothing relayed.
#[cold]
fn status_back<'s>(
    call: &Call<'_, 's>,
    at: Attempts<'s>,
    up: Stream,
    upstream_us: u64,
    bufs: &mut Bufs,
) -> Unanswered<'s> {
    drop(up);
    tracing::debug!(endpoint = %at.ep.name, status = bufs.res.status, "upstream status handed to the fallback");
    bufs.grpc_status = None;
    Unanswered {
        cause: Cause::UpstreamStatus,
        kind: ErrorKind::UpstreamFailed,
        close: call.close_req || call.body_cut,
        at_hand: call.plan.replayable && !call.body_cut,
        endpoint: Some(at.ep),
        bytes_in: call.bytes_in,
        upstream_us: Some(upstream_us),
    }
}

/// Whether the client's connection closes after the answer to a request
/// whose last attempt failed so: when its body may still be coming.
fn failed_close(call: &Call<'_, '_>, failed: &AttemptError) -> bool {
    let plan = &call.plan;
    match failed {
        AttemptError::Connect(_)
        | AttemptError::NotTaken
        | AttemptError::Write
        | AttemptError::Encode => call.close_req || plan.remaining > 0 || plan.chunked,
        AttemptError::Head { .. } => call.close_req,
        _ => true,
    }
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
    let close = failed_close(call, &failed);
    let mut o = fail((down, call.snap), bufs, failed.kind(), close).await;
    o.endpoint = Some(ep);
    o
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

/// Whether the answer whose head is in `bufs` is compressed as `c` says.
#[inline]
fn compressed(c: &Compressing<'_>, bufs: &Bufs) -> bool {
    let (res, body) = (&bufs.res, bufs.res_framing.body);
    c.rt.applies(res.status, body, bufs.upb.filled(), &res.headers)
}

/// Writes the response head (rewritten, in `bufs`) for the client, and
/// says whether the client's connection closes after this response.
/// `recode`: how the answer changes (compressed, or marked as varying).
#[inline]
fn relay_head(call: &Call<'_, '_>, down: &Downstream<'_>, bufs: &mut Bufs, recode: Recode) -> bool {
    let res_body = bufs.res_framing.body;
    let client_minor = call.plan.client_minor;
    let close = call.close_req
        || call.body_cut
        || call.worker.shutting_down()
        || res_body == BodyKind::UntilClose
        || (matches!(res_body, BodyKind::Chunked | BodyKind::Stream) && client_minor == 0);
    if bufs.fill.is_some() {
        super::fill::judge(bufs);
    }
    write_response_head(bufs, close, client_minor, down.client, recode);
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
