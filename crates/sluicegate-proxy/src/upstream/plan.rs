//! What a request is sent as, and where: the endpoint the balancer picks
//! for it ([`pick`]), its head rewritten for the upstream with the body
//! bytes that came with it ([`prepare`], which decides the [`Plan`]: what
//! is at hand, what streams, whether it may be sent again or elsewhere),
//! and the head's send on a connection or an HTTP/2 stream
//! ([`send_head`]; why it failed, [`unsent`]).

use std::net::IpAddr;
use std::time::Instant;

use crate::balance::balancer::PickContext;
use crate::balance::endpoint::EndpointState;
use crate::proto::codec::BodyKind;
use crate::route::target::Target;
use crate::snapshot::ServiceRt;
use crate::transport::io::write_all_by;
use crate::transport::stream::Stream;
use crate::upstream::failure::AttemptError;
use crate::upstream::head::{h2_request_head, write_request_head, Forwarded};
use crate::worker::Bufs;
use sluicegate_config::UpstreamProtocol;

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
pub(super) struct Plan {
    pub(super) is_head: bool,
    pub(super) client_minor: u8,
    /// Body bytes still to read from the client and send.
    pub(super) remaining: u64,
    /// Body bytes already in `out` after the head.
    pub(super) bytes_in: u64,
    pub(super) chunked: bool,
    /// The whole request is in `out`: it can be sent again.
    pub(super) replayable: bool,
    /// No `100 Continue` is owed to the client.
    pub(super) sent_continue: bool,
    /// The head names no endpoint (it has a Host), so it can go to another.
    pub(super) portable: bool,
    pub(super) idempotent: bool,
    /// Bytes of HTTP/1.1 head at the start of `out` (none for a service
    /// that speaks only HTTP/2).
    pub(super) head_len: usize,
    /// The head encoded for an HTTP/2 upstream (a service that speaks or
    /// may speak it); boxed, so that the plan moves cheaply.
    pub(super) h2: Option<Box<http::Request<()>>>,
    /// The request asks for an upgrade the route allows.
    pub(super) upgrading: bool,
}

/// Writes the rewritten request head into `bufs.out`, followed by the body
/// bytes that already arrived with it, and takes both out of `bufs.inb`.
#[inline]
pub(super) fn prepare(
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
pub(super) async fn send_head(
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

/// The first attempt's endpoint for a request started at `started` from
/// `client` (the balancer's pick, [`choose`]), before its in-flight slot
/// is taken; `None` when every endpoint is down (shed at once, never
/// queued).
pub(super) struct Picked<'s> {
    pub(super) index: usize,
    pub(super) ep: &'s EndpointState,
    /// The request's deadline for a response head.
    pub(super) total: Instant,
    /// How long to wait for a free in-flight slot.
    pub(super) wait: std::time::Duration,
}

pub(super) fn pick<'s>(
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

/// Why a request head could not be sent on `up`: nothing beyond `out` was
/// consumed, so a send again is safe when the upstream took none of it
/// (`reused_first`: the first send on a pooled connection).
pub(super) fn unsent(plan: &Plan, up: &Stream, reused_first: bool) -> AttemptError {
    if plan.h2.is_none() && matches!(up, Stream::H2Up(_)) {
        AttemptError::Encode
    } else if reused_first || up.refused() {
        AttemptError::NotTaken
    } else {
        AttemptError::Write
    }
}
