//! A connection after its upgrade: the task that runs its tunnel
//! ([`crate::upstream::tunnel::relay`]), then gives the route's
//! concurrency slots back and records the request (route metrics, the
//! access log line) as the serving task would have. It takes the client's
//! stream and the connection's [`Active`] count from the serving task,
//! which then ends and gives its buffers back: an idle tunnel holds this
//! small task, not the whole request state machine.

use std::sync::Arc;
use std::time::Instant;

use super::active::Active;
use crate::balance::endpoint::EndpointState;
use crate::filters::InFlight;
use crate::observe::accesslog;
use crate::snapshot::{ActionRt, Snapshot};
use crate::transport::stream::Stream;
use crate::upstream::tunnel;
use crate::worker::revoke::Grant;
use crate::worker::upgraded::Upgraded;
use crate::worker::Worker;

/// What the serving task hands its tunnel's task, besides the client's
/// stream, the connection's count and the request's snapshot.
pub(super) struct Handoff {
    pub tunnel: Box<Upgraded>,
    /// The request's route, in its snapshot.
    pub route: usize,
    pub started: Instant,
    pub upstream_us: Option<u64>,
    /// Concurrency slots the route's filters took: held until the tunnel
    /// ends, as the request would hold them.
    pub guards: Vec<InFlight>,
    /// What the access log line needs, when the snapshot logs.
    pub log: Option<Box<LogFacts>>,
    /// On a split route, the entry that took the request.
    pub split_entry: Option<usize>,
    /// What the app authenticated with, on a route with `auth`: the
    /// tunnel is registered for revocation.
    pub grant: Option<Box<Grant>>,
    /// The tunnel is a WebSocket (a revocation sends a close frame).
    pub websocket: bool,
}

/// The request's facts for its access log line.
pub(super) struct LogFacts {
    /// The method, a space, and the target (as logged).
    pub line: Box<[u8]>,
    pub method_len: usize,
    pub client: Box<str>,
    pub endpoint: Arc<EndpointState>,
    pub app: Option<u32>,
    pub key_fp: Option<u32>,
    pub tls: Option<(&'static str, &'static str)>,
    pub request_id: Box<[u8]>,
}

/// Runs a tunnel to its end, then records its request: route metrics and
/// the access log line, with the bytes carried and the time from the
/// request's first byte to the tunnel's close. The client's connection
/// closes last, then it is uncounted.
pub(super) async fn run(client: Stream, active: Active, snap: Arc<Snapshot>, h: Box<Handoff>) {
    relay_and_record(active.worker(), &client, &snap, h).await;
}

/// [`run`]'s tunnel and record, for a tunnel on `client` (a connection, or
/// an HTTP/2 stream whose own task runs it: extended CONNECT).
pub(super) async fn relay_and_record(
    worker: &Worker,
    client: &Stream,
    snap: &Snapshot,
    h: Box<Handoff>,
) {
    let Handoff {
        tunnel,
        route,
        started,
        upstream_us,
        guards,
        log,
        split_entry,
        grant,
        websocket,
    } = *h;
    // The registration lives in the wait, and ends with the tunnel.
    let wait = grant.map(|g| tunnel::revoke_wait(worker.revocations.register(&worker.shared, *g)));
    let carried = tunnel::relay(tunnel, worker, client, snap, wait, websocket).await;
    drop(guards);
    let total_us = Instant::now()
        .saturating_duration_since(started)
        .as_micros() as u64;
    let route = &snap.routes[route];
    // A tunnel's time is spent waiting on its two ends: none of it is
    // the gateway's own.
    route.metrics.record(101, total_us, Some(total_us));
    let entry = match (&route.action, split_entry) {
        (ActionRt::Proxy { split: Some(s), .. }, Some(i)) => s.entries.get(i),
        _ => None,
    };
    if let Some(e) = entry {
        e.metrics.record(101, total_us, Some(total_us));
    }
    let (Some(sink), Some(log)) = (&snap.access_log, log) else {
        return;
    };
    let service = match (&route.action, entry) {
        (_, Some(e)) => &*snap.service(e.service).name,
        (ActionRt::Proxy { service, .. }, None) => &*snap.service(*service).name,
        (ActionRt::Respond { .. } | ActionRt::Aggregate(_), None) => "",
    };
    let (method, target) = (&log.line[..log.method_len], &log.line[log.method_len + 1..]);
    let entry = accesslog::Entry {
        client: &log.client,
        method,
        target,
        status: 101,
        route: &route.name,
        service,
        endpoint: &log.endpoint.name,
        bytes_in: carried.up,
        bytes_out: carried.down,
        total_us,
        upstream_us,
        app: log.app.map(|a| snap.apps.app_id(a)),
        key_fp: log.key_fp,
        tls: log.tls,
        http2: matches!(client, Stream::H2(_)),
        request_id: &log.request_id,
        trace_id: None,
        fault: None,
        fallback: None,
    };
    worker.append_log(sink, &entry);
}
