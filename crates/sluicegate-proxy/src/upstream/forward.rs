//! Forwarding one request upstream and streaming the response back.
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
use std::sync::OnceLock;
use std::time::Instant;

use crate::proto::codec::BodyKind;
use crate::proto::response::ErrorKind;
use crate::route::target::Target;
use crate::runtime::worker::{Bufs, Downstream};
use crate::snapshot::{ServiceRt, Snapshot};
use crate::transport::io::write_all_by;
use crate::transport::stream::Stream;
use crate::upstream::attempt::{
    connect_failed, cost_nothing, retry_endpoint, switch_to, take_pooled, time_left, Verdict,
};
use crate::upstream::balancer::PickContext;
use crate::upstream::body::{client_write_failed, linger, relay_body, send_body, BodyError, Fault};
use crate::upstream::endpoint::EndpointState;
use crate::upstream::head::{
    early_response, h2_request_head, head_grpc_status, read_response_head, write_request_head,
    write_response_head, Forwarded, HeadError,
};
use crate::upstream::tunnel;
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
    /// The client's connection.
    pub down: &'a Downstream<'a>,
    /// The client's address (the connection's, or one a trusted proxy
    /// named).
    pub client: std::net::IpAddr,
    pub snap: &'s Snapshot,
    pub service: &'s ServiceRt,
    pub target: &'a Target,
    /// Bytes of the path to strip (the matched prefix), or 0.
    pub strip: usize,
    pub started: Instant,
    /// Protocols the route lets a client upgrade to.
    pub upgrade: &'s [Box<str>],
}

/// Microseconds from a process-wide origin to `now`.
fn epoch_us(now: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    now.saturating_duration_since(*EPOCH.get_or_init(Instant::now))
        .as_micros() as u64
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
    /// may speak it).
    h2: Option<http::Request<()>>,
}

/// Writes the rewritten request head into `bufs.out`, followed by the body
/// bytes that already arrived with it, and takes both out of `bufs.inb`.
#[inline]
fn prepare(
    down: &Downstream<'_>,
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
    let forwarded = || {
        service.forwarded_headers.then_some(Forwarded {
            client: down.peer_ip,
            https: down.https,
        })
    };
    let h2 = if service.protocol.http2() {
        h2_request_head(
            raw,
            &bufs.req,
            framing.len,
            target,
            strip,
            forwarded(),
            ep,
            &bufs.edits,
            &bufs.ids,
            service.tls.is_some(),
            bufs.grpc,
        )
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
            forwarded(),
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
    wait: crate::runtime::deadline::Wait<'_>,
) -> std::io::Result<()> {
    let Stream::H2Up(x) = up else {
        if plan.chunked {
            return Ok(());
        }
        return write_all_by(up, out, wait).await;
    };
    let Some(req) = plan.h2.clone() else {
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

pub async fn forward<'s>(cx: Request<'_, 's>, bufs: &mut Bufs) -> Outcome<'s> {
    let Request {
        down,
        client,
        snap,
        service,
        target,
        strip,
        started,
        upgrade,
    } = cx;
    let worker = down.worker;
    let body = bufs.req_framing.body;
    let close_req = bufs.req_framing.close || worker.shutting_down();
    // An upgrade the route allows is forwarded (a request without a body);
    // any other `Upgrade` is dropped, and the request goes as a plain one.
    let upgrading = match &bufs.req.upgrade {
        Some(v) if body == BodyKind::None => {
            tunnel::allowed(&bufs.inb.filled()[v.clone()], upgrade)
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
            return fail_unsent((down, snap), bufs, ErrorKind::TooManyTunnels, close_req).await;
        }
    }
    // Until the body is read, an error answer must close the connection.
    let body_pending = body != BodyKind::None;
    if let BodyKind::Length(n) = body {
        if n > snap.limits.max_body_bytes {
            return fail_unsent((down, snap), bufs, ErrorKind::BodyTooLarge, true).await;
        }
    }
    let ep_arc = choose(service, client, target, bufs);
    let Some(mut ep_index) = ep_arc else {
        // Every endpoint is down: shed at once, never queue.
        let close = close_req || body_pending;
        return fail_unsent((down, snap), bufs, ErrorKind::NoHealthyEndpoint, close).await;
    };
    let mut ep: &'s EndpointState = &service.endpoints[ep_index];
    // Every attempt must have the response head by then (sooner when a
    // gRPC client's own deadline says so).
    let limit = match bufs.grpc_timeout {
        Some(t) => t.min(service.timeouts.request),
        None => service.timeouts.request,
    };
    let total = started + limit;
    let wait = service.timeouts.connect.min(service.timeouts.request);
    let Some(mut _permit) = ep.acquire(wait).await else {
        let mut o = fail_unsent(
            (down, snap),
            bufs,
            ErrorKind::UpstreamBusy,
            close_req || body_pending,
        )
        .await;
        o.endpoint = Some(ep);
        return o;
    };
    ep.requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    service.retries.deposit();
    let mut admit = Verdict::admit(ep);
    let mut tried: u64 = 1 << ep_index.min(63);
    let mut tries = 1;
    let plan = prepare(down, service, target, strip, ep, upgrading, bufs);
    let Plan {
        is_head,
        client_minor,
        remaining,
        mut bytes_in,
        chunked,
        replayable,
        mut sent_continue,
        portable,
        idempotent,
        ..
    } = plan;
    let mut attempt = 0;
    // The upstream answered before the whole body was sent.
    let mut body_cut = false;
    let (up, sent_at) = loop {
        bufs.upb.clear();
        // A retry after a pooled connection failed takes a fresh one: the
        // next pooled one may have been closed by the upstream just the same.
        let pooled = if attempt == 0 {
            take_pooled(down.worker, ep, started)
        } else {
            None
        };
        let (up, reused) = match pooled {
            Some(s) => (s, true),
            None => match connect(
                worker,
                ep,
                service,
                service.timeouts.connect.min(time_left(total)),
            )
            .await
            {
                Ok(s) => {
                    ep.eject.connect_ok();
                    s
                }
                Err(e) => {
                    connect_failed(service, ep, &e);
                    admit.failed(ep);
                    // Nothing was sent: any request may go elsewhere. A
                    // refused connect cost the endpoint nothing, so its
                    // retry is not taken from the budget.
                    let free = cost_nothing(&e);
                    if service.retries.settings.on_connect && portable {
                        if let Some((i, permit)) =
                            retry_endpoint(service, ep_index, &mut tried, &mut tries, total, free)
                        {
                            (ep_index, _permit, attempt) = (i, permit, 0);
                            (ep, admit) = switch_to(service, i);
                            continue;
                        }
                    }
                    let mut o = fail(
                        (down, snap),
                        bufs,
                        ErrorKind::UpstreamFailed,
                        close_req || remaining > 0 || chunked,
                    )
                    .await;
                    o.endpoint = Some(ep);
                    return o;
                }
            },
        };
        if !sent_continue && body_pending {
            sent_continue = true;
            let deadline = Instant::now() + snap.timeouts.client_write;
            if let Err(e) = write_all_by(
                down.client,
                b"HTTP/1.1 100 Continue\r\n\r\n",
                worker.until(deadline),
            )
            .await
            {
                client_write_failed(worker, &e);
                return Outcome::local(400, 0, true);
            }
        }
        let deadline = service.timeouts.response_header;
        let streams = chunked || remaining > 0;
        let wait = worker.deadlines.after(deadline);
        if send_head(&up, &plan, streams, &mut bufs.out, wait)
            .await
            .is_err()
        {
            // Nothing beyond `out` was consumed: a retry is safe.
            if (reused && attempt == 0) || (up.refused() && attempt < REFUSED_RETRIES) {
                attempt += 1;
                continue;
            }
            admit.failed(ep);
            let mut o = fail(
                (down, snap),
                bufs,
                ErrorKind::UpstreamFailed,
                close_req || remaining > 0,
            )
            .await;
            o.endpoint = Some(ep);
            return o;
        }
        if !replayable && bufs.grpc {
            // A gRPC call whose request streams: both ways at once.
            let call = duplex::Call {
                down,
                snap,
                ep,
                body,
                remaining,
                bytes_in,
                client_minor,
                is_head,
                deadline: (Instant::now() + service.timeouts.response_header).min(total),
                close: close_req,
            };
            return duplex::run(call, up, &mut admit, bufs).await;
        }
        if !replayable {
            // Stream the body while watching the upstream: one that answers
            // early (say 413) gets its answer relayed at once, and the rest
            // of the body is not sent.
            let Bufs { inb, out, upb, .. } = &mut *bufs;
            let sent = tokio::select! {
                r = send_body(
                    &worker.deadlines, down.client, &up, inb, out, body, remaining,
                    snap.limits.max_body_bytes, snap.timeouts.client_body,
                ) => r,
                early = early_response(&up, upb) => {
                    if early {
                        body_cut = true;
                        Ok(0)
                    } else {
                        Err(BodyError::Upstream)
                    }
                }
            };
            match sent {
                Ok(n) => bytes_in += n,
                Err(e) => {
                    let kind = match e {
                        BodyError::Client => return Outcome::local(400, 0, true),
                        BodyError::Upstream => {
                            admit.failed(ep);
                            ErrorKind::UpstreamFailed
                        }
                        BodyError::BadChunk => ErrorKind::BadRequest,
                        BodyError::TooLarge => ErrorKind::BodyTooLarge,
                    };
                    let mut o = fail((down, snap), bufs, kind, true).await;
                    o.endpoint = Some(ep);
                    return o;
                }
            }
        }
        let sent_at = Instant::now();
        let deadline = (sent_at + service.timeouts.response_header).min(total);
        let head =
            read_response_head(&up, down, bufs, is_head, client_minor, deadline, upgrading).await;
        // What this attempt's outcome allows: another endpoint for an
        // idempotent request still at hand, when the service retries it.
        let r = &service.retries.settings;
        let elsewhere = idempotent && replayable && portable && !body_cut;
        match head {
            Ok(()) => {
                let status = bufs.res.status;
                if ep.breaker.counts_status(status) {
                    admit.failed(ep);
                } else {
                    admit.succeeded(ep);
                }
                // A gRPC call's trailers-only status may send it again
                // (`grpc:` in retries.on), whatever its method.
                let grpc_again = bufs.grpc && {
                    bufs.grpc_status = head_grpc_status(bufs);
                    replayable
                        && portable
                        && !body_cut
                        && bufs.grpc_status.is_some_and(|c| r.on_grpc.contains(&c))
                };
                if (elsewhere && r.on_status.contains(&status)) || grpc_again {
                    if let Some((i, permit)) =
                        retry_endpoint(service, ep_index, &mut tried, &mut tries, total, false)
                    {
                        tracing::debug!(endpoint = %ep.name, status, "retrying elsewhere");
                        (ep_index, _permit, attempt) = (i, permit, 0);
                        (ep, admit) = switch_to(service, i);
                        continue;
                    }
                }
                break (up, sent_at);
            }
            Err(HeadError::ClosedEarly)
                if replayable
                    && ((reused && attempt == 0)
                        || (up.refused() && attempt < REFUSED_RETRIES)) =>
            {
                attempt += 1;
                continue;
            }
            Err(e) => {
                admit.failed(ep);
                let again = match e {
                    HeadError::ClosedEarly => r.on_reset,
                    HeadError::Timeout => r.on_timeout,
                    HeadError::Invalid => false,
                };
                if again && elsewhere {
                    if let Some((i, permit)) =
                        retry_endpoint(service, ep_index, &mut tried, &mut tries, total, false)
                    {
                        (ep_index, _permit, attempt) = (i, permit, 0);
                        (ep, admit) = switch_to(service, i);
                        continue;
                    }
                }
                let kind = match e {
                    HeadError::Timeout => ErrorKind::UpstreamTimeout,
                    _ => ErrorKind::UpstreamFailed,
                };
                tracing::debug!(endpoint = %ep.name, status = kind.status(), "upstream response failed");
                let mut o = fail((down, snap), bufs, kind, close_req).await;
                o.endpoint = Some(ep);
                return o;
            }
        }
    };
    let head_at = Instant::now();
    let upstream_us = head_at.duration_since(sent_at).as_micros() as u64;
    ep.response_time.observe(upstream_us);
    if service.balancer.reads_latency() {
        ep.ewma.observe(epoch_us(head_at), upstream_us as f64);
    }
    let status = bufs.res.status;
    if status == 101 {
        // The upstream switched: a tunnel until either side is done, run by
        // a task of its own once started (the session takes it from
        // `bufs.upgraded`; its endpoint slot goes with it).
        let permit = _permit.into_owned(&service.endpoints[ep_index]);
        debug_assert_eq!(bytes_in, 0, "an upgrade request has no body");
        let carried = match tunnel::start(down, up, permit, bufs, snap).await {
            Ok(t) => {
                let carried = t.carried();
                bufs.upgraded = Some(t);
                carried
            }
            Err(carried) => carried,
        };
        return Outcome {
            status,
            bytes_in: bytes_in + carried.up,
            bytes_out: carried.down,
            close: true,
            upstream_us: Some(upstream_us),
            endpoint: Some(ep),
        };
    }
    let res_body = bufs.res_framing.body;
    let close = close_req
        || body_cut
        || worker.shutting_down()
        || res_body == BodyKind::UntilClose
        || (matches!(res_body, BodyKind::Chunked | BodyKind::Stream) && client_minor == 0);
    write_response_head(bufs, close, client_minor, down.client);
    let relay = relay_body(
        down,
        &up,
        bufs,
        res_body,
        client_minor == 1,
        service.timeouts.response_body,
        snap.timeouts.client_write,
    )
    .await;
    let mut outcome = Outcome {
        status,
        bytes_in,
        bytes_out: 0,
        close,
        upstream_us: Some(upstream_us),
        endpoint: Some(ep),
    };
    match relay {
        Ok(n) => {
            outcome.bytes_out = n;
            if !bufs.res_framing.close && !body_cut && bufs.upb.is_empty() && up.poolable() {
                let expires = head_at + service.timeouts.idle;
                let ep_arc = &service.endpoints[ep_index];
                // No body (204, 304, HEAD, a zero length): recheck at reuse.
                worker
                    .pool
                    .borrow_mut()
                    .put(ep_arc, up, expires, ep.max, n == 0);
            }
        }
        Err((_, Fault::Unsent)) => {
            // A malformed first chunk line came with the head, so nothing
            // reached the client: it gets a 502 instead of the head (which
            // `fail` drops). The upstream connection is not pooled, and its
            // circuit counts the failure.
            if !ep.breaker.counts_status(status) {
                admit.failed_after_success(ep);
            }
            tracing::debug!(endpoint = %ep.name, "malformed chunked body from upstream");
            let closes = close || body_cut;
            outcome = fail((down, snap), bufs, ErrorKind::UpstreamFailed, closes).await;
            outcome.bytes_in = bytes_in;
            outcome.upstream_us = Some(upstream_us);
            outcome.endpoint = Some(ep);
        }
        Err((n, _)) => {
            outcome.bytes_out = n;
            outcome.close = true;
        }
    }
    if body_cut {
        linger(
            &worker.deadlines,
            down.client,
            &mut bufs.inb,
            snap.limits.max_body_bytes,
        )
        .await;
    }
    outcome
}
