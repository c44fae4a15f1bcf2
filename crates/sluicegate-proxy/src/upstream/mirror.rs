//! Mirroring: a copy of a sampled request sent to the route's mirror
//! service through the internal client ([`super::client`]), in a task of
//! its own on the worker, its answer read to its end and dropped. The
//! request itself never waits for its copy and never fails because of it.
//!
//! [`start`] runs before forwarding, on routes with a `mirror` only. It
//! draws the share, bounds the copies in flight per route
//! ([`MAX_IN_FLIGHT`]), and builds the copy's head from the request as it
//! goes upstream: its method, the path and query forwarded (the route's
//! edits applied), its fields but the hop-by-hop, framing and
//! `X-Forwarded-*` ones (which the internal client writes from the
//! client's facts), the fields the route's policy adds, the request's id,
//! and `X-Mirrored-By: sluicegate`. A body whole at hand is copied at
//! once; one that streams is teed as forwarding relays it
//! ([`crate::worker::tee`]: a bounded queue the relay pushes to without
//! waiting), and the copy sent from that feed with the same length, or
//! chunked. The copy is counted in the route's [`MirrorMetrics`]: answered
//! by status class, failed (connect, timeout, other) or abandoned (behind,
//! in-flight limit, incomplete body, unsupported: an upgrade or a gRPC call
//! whose body streams).

use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use crate::filters::mirror::MirrorRt;
use crate::observe::metrics::{Abandoned, MirrorFailure, RouteMetrics};
use crate::proto::codec::BodyKind;
use crate::route::target::Target;
use crate::snapshot::Snapshot;
use crate::upstream::client::{self, Event, Options, Origin};
use crate::upstream::failure::{AttemptError, Error};
use crate::upstream::head::{upstream_path, HeadError};
use crate::worker::tee::{tee, Cut, Feed};
use crate::worker::{Bufs, Downstream, Worker};

/// Most copies of one route in flight at once, in the whole process.
pub(crate) const MAX_IN_FLIGHT: usize = 128;

/// Fields never copied as the client sent them: the connection's own,
/// framing (the copy has its own), and those the internal client or this
/// module writes.
const NOT_COPIED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-mirrored-by",
];

/// What the copy's body is.
enum Copy {
    Whole(Bytes),
    Fed(Feed),
}

/// A copy counted in flight for its route until dropped.
struct InFlight(Arc<RouteMetrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.mirror.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Starts a copy of the request in `bufs` (its target `t`, the matched
/// prefix `strip` bytes, from `client` on `down`) when `mirror`'s draw
/// takes it; for a body that streams, leaves the tee forwarding feeds in
/// `bufs.mirror`. Counted in `metrics` (the route's).
#[allow(clippy::too_many_arguments)]
#[cold]
pub(crate) fn start(
    down: &Downstream<'_>,
    snap: &Arc<Snapshot>,
    mirror: &MirrorRt,
    metrics: &Arc<RouteMetrics>,
    client: IpAddr,
    t: &Target,
    strip: usize,
    bufs: &mut Bufs,
) {
    let worker = down.worker;
    if !mirror.draw(&worker.rng) {
        return;
    }
    let m = &metrics.mirror;
    let body = bufs.req_framing.body;
    let streams = match body {
        BodyKind::Length(n) => {
            let at_hand = bufs.inb.len().saturating_sub(bufs.req_framing.len) as u64;
            at_hand < n
        }
        BodyKind::Chunked | BodyKind::Stream => true,
        BodyKind::None | BodyKind::UntilClose => false,
    };
    let Some(rc) = worker.rc() else {
        m.abandoned(Abandoned::Unsupported);
        return;
    };
    if bufs.req.upgrade.is_some() && body == BodyKind::None || bufs.grpc && streams {
        m.abandoned(Abandoned::Unsupported);
        return;
    }
    if m.in_flight.fetch_add(1, Ordering::Relaxed) >= MAX_IN_FLIGHT {
        m.in_flight.fetch_sub(1, Ordering::Relaxed);
        m.abandoned(Abandoned::InFlightLimit);
        return;
    }
    let guard = InFlight(metrics.clone());
    let Some(mut parts) = head(snap, t, strip, bufs) else {
        m.failed(MirrorFailure::Other);
        return;
    };
    let raw = bufs.inb.filled();
    let origin = Origin::of(down, client, raw, &bufs.req, t);
    let after_head = &raw[bufs.req_framing.len..];
    let copy = match body {
        BodyKind::Length(n) if !streams => {
            Copy::Whole(Bytes::copy_from_slice(&after_head[..n as usize]))
        }
        BodyKind::None | BodyKind::UntilClose => Copy::Whole(Bytes::new()),
        _ => {
            let (tee, feed) = tee();
            if let BodyKind::Length(n) = body {
                parts
                    .headers
                    .insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(n));
                // Forwarding sends these before it relays the rest.
                tee.push(after_head);
            }
            bufs.mirror = Some(tee);
            Copy::Fed(feed)
        }
    };
    let opts = Options {
        origin: Some(origin),
        ..Options::default()
    };
    let task = run(rc, snap.clone(), mirror.service, parts, copy, opts, guard);
    tokio::task::spawn_local(task);
}

/// The copy's head: the request's method, the path and query as they go
/// upstream, its fields as [`NOT_COPIED`] and the route's policy say, its
/// id, and the mark. `None` when a part does not make a valid request.
fn head(snap: &Snapshot, t: &Target, strip: usize, bufs: &Bufs) -> Option<http::request::Parts> {
    let raw = bufs.inb.filled();
    let req = &bufs.req;
    let mut target = upstream_path(raw, t, strip, &bufs.edits).to_vec();
    match &bufs.edits.query {
        Some(q) => target.extend_from_slice(q),
        None => target.extend_from_slice(&raw[t.query.clone()]),
    }
    let mut b = http::Request::builder()
        .method(http::Method::from_bytes(&raw[req.method.clone()]).ok()?)
        .uri(http::Uri::try_from(target).ok()?);
    let headers = b.headers_mut()?;
    let fields = req.headers.iter().filter(|h| !h.skip);
    for h in fields.take_while(|h| h.name.end <= bufs.req_framing.len) {
        let name = &raw[h.name.clone()];
        if NOT_COPIED
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
        {
            continue;
        }
        let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(&raw[h.value.clone()]),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    if let Some(host) = t.host(raw) {
        headers.insert(
            http::header::HOST,
            http::HeaderValue::from_bytes(host).ok()?,
        );
    }
    for (name, value) in bufs.edits.request_headers.iter() {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(value),
        ) {
            headers.append(name, value);
        }
    }
    // The request's own id, so that both can be matched in the logs.
    let id = bufs.ids.rid.value();
    if !id.is_empty() {
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(&snap.request_id_header),
            http::HeaderValue::from_bytes(id),
        ) {
            headers.insert(name, value);
        }
    }
    headers.insert(
        "x-mirrored-by",
        http::HeaderValue::from_static("sluicegate"),
    );
    Some(b.body(()).ok()?.into_parts().0)
}

/// Sends the copy to the service at `service` in `snap` and reads its
/// answer to the end, counting how it went.
async fn run(
    worker: Rc<Worker>,
    snap: Arc<Snapshot>,
    service: u32,
    parts: http::request::Parts,
    copy: Copy,
    opts: Options,
    guard: InFlight,
) {
    let m = &guard.0.mirror;
    let service = snap.service(service).clone();
    let sent = match &copy {
        Copy::Whole(body) => {
            let req = http::Request::from_parts(parts, body.clone());
            client::send_with(&worker, &snap, &service, req, &opts).await
        }
        Copy::Fed(feed) => client::send_fed(&worker, &snap, &service, parts, feed, &opts).await,
    };
    let mut res = match sent {
        Ok(res) => res,
        Err(e) => {
            let cut = match &copy {
                Copy::Fed(feed) => feed.cut(),
                Copy::Whole(_) => None,
            };
            match cut {
                Some(Cut::Behind) => m.abandoned(Abandoned::Behind),
                Some(Cut::Incomplete) => m.abandoned(Abandoned::Incomplete),
                None => m.failed(failure(&e)),
            }
            return;
        }
    };
    loop {
        match res.next().await {
            Ok(Event::End) => break,
            Ok(_) => {}
            Err(e) => {
                m.failed(failure(&e));
                return;
            }
        }
    }
    m.answered(res.status());
}

/// How a copy's failure is counted.
fn failure(e: &Error) -> MirrorFailure {
    match e {
        Error::Unavailable(_) | Error::Attempt(AttemptError::Connect(_)) => MirrorFailure::Connect,
        Error::Deadline(_)
        | Error::Attempt(AttemptError::Head {
            e: HeadError::Timeout,
            ..
        }) => MirrorFailure::Timeout,
        _ => MirrorFailure::Other,
    }
}
