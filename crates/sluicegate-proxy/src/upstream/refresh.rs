//! A cache's background refresh (`stale_while_revalidate`): while a
//! client is answered from a stale object, one `GET` for its key goes to
//! the route's service through the internal client ([`super::client`]),
//! in a task on the worker as a mirror's copy does ([`super::mirror`]),
//! and its answer fills the store as a miss's would
//! ([`crate::cache::fill`]). The fill holds the key's flight
//! ([`crate::cache::flight`]): at most one refresh per key at a time,
//! and a miss meanwhile waits for it. A stale object with validators is
//! revalidated: the refresh is conditional (`If-None-Match` from its
//! `ETag`, `If-Modified-Since` from its `Last-Modified`), and a `304`
//! stores it again with the `304`'s fields over its own (RFC 9111
//! section 4.3.4), its body kept without a transfer.

use std::net::IpAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;

use crate::cache::fill::Fill;
use crate::cache::store::Object;
use crate::observe::metrics::RouteMetrics;
use crate::route::target::Target;
use crate::snapshot::Snapshot;
use crate::upstream::client::{self, Event, Options, Origin};
use crate::upstream::head::upstream_path;
use crate::worker::{Bufs, Downstream, Worker};

/// The client's fields a refresh does not carry: the connection's own,
/// framing, the conditional ones and `Range` (it fetches the whole
/// object), `Cache-Control`, and those the internal client writes.
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
    "if-none-match",
    "if-modified-since",
    "if-match",
    "if-unmodified-since",
    "if-range",
    "range",
    "cache-control",
    "pragma",
];

/// Starts the refresh of the request's key (in `bufs`, to `service` of
/// `snap`) that `fill` (leading the key's flight) stores; conditional
/// on the `stale` object's validators. `false` when it cannot start (no
/// worker to run it, a target that makes no request).
#[allow(clippy::too_many_arguments)]
#[cold]
pub(crate) fn start(
    down: &Downstream<'_>,
    snap: &Arc<Snapshot>,
    service: u32,
    client: IpAddr,
    t: &Target,
    strip: usize,
    bufs: &Bufs,
    fill: Box<Fill>,
    stale: Arc<Object>,
    metrics: &Arc<RouteMetrics>,
) -> bool {
    let Some(worker) = down.worker.rc() else {
        return false;
    };
    let Some(mut parts) = head(t, strip, bufs) else {
        return false;
    };
    let validators = [
        (http::header::IF_NONE_MATCH, &stale.etag),
        (http::header::IF_MODIFIED_SINCE, &stale.last_modified),
    ];
    for (name, value) in validators {
        let value = value.as_deref().map(http::HeaderValue::from_bytes);
        if let Some(Ok(v)) = value {
            parts.headers.insert(name, v);
        }
    }
    let raw = bufs.inb.filled();
    let opts = Options {
        origin: Some(Origin::of(down, client, raw, &bufs.req, t)),
        ..Options::default()
    };
    let req = http::Request::from_parts(parts, Bytes::new());
    let task = run(
        worker,
        snap.clone(),
        service,
        req,
        opts,
        fill,
        stale,
        metrics.clone(),
    );
    tokio::task::spawn_local(task);
    true
}

/// The refresh's head: `GET`, the path and query as they go upstream,
/// the client's fields but [`NOT_COPIED`], the filters' added ones.
fn head(t: &Target, strip: usize, bufs: &Bufs) -> Option<http::request::Parts> {
    let raw = bufs.inb.filled();
    let mut target = upstream_path(raw, t, strip, &bufs.edits).to_vec();
    match &bufs.edits.query {
        Some(q) => target.extend_from_slice(q),
        None => target.extend_from_slice(&raw[t.query.clone()]),
    }
    let mut b = http::Request::builder()
        .method(http::Method::GET)
        .uri(http::Uri::try_from(target).ok()?);
    let headers = b.headers_mut()?;
    let fields = bufs.req.headers.iter().filter(|h| !h.skip);
    for h in fields.take_while(|h| h.name.end <= bufs.req_framing.len) {
        let name = &raw[h.name.clone()];
        if NOT_COPIED
            .iter()
            .any(|n| name.eq_ignore_ascii_case(n.as_bytes()))
        {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            http::HeaderName::from_bytes(name),
            http::HeaderValue::from_bytes(&raw[h.value.clone()]),
        ) {
            headers.append(name, value);
        }
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
    Some(b.body(()).ok()?.into_parts().0)
}

/// Sends the refresh, judges its answer's head for the fill, feeds it
/// the body and stores it when whole (a `304`: the stale object with
/// its fields); counted in the route's stores.
#[allow(clippy::too_many_arguments)]
async fn run(
    worker: Rc<Worker>,
    snap: Arc<Snapshot>,
    service: u32,
    req: http::Request<Bytes>,
    opts: Options,
    mut fill: Box<Fill>,
    stale: Arc<Object>,
    metrics: Arc<RouteMetrics>,
) {
    let service = snap.service(service).clone();
    let Ok(mut res) = client::send_with(&worker, &snap, &service, req, &opts).await else {
        return;
    };
    if res.status() == 304 {
        let fresh: Vec<(&[u8], &[u8])> = res
            .fields()
            .iter()
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()))
            .collect();
        if fill.refreshed(&stale, &fresh).is_some() {
            metrics.cache.stores.fetch_add(1, Relaxed);
            metrics.cache.revalidated.fetch_add(1, Relaxed);
        }
        return;
    }
    let fields: Vec<(&[u8], &[u8], bool)> = res
        .fields()
        .iter()
        .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes(), true))
        .collect();
    fill.judge(res.status(), &fields, None);
    drop(fields);
    while fill.keeping() {
        match res.next().await {
            Ok(Event::Data(d)) => fill.push(&d),
            Ok(Event::Trailers(_)) => {}
            Ok(Event::End) => {
                fill.whole = true;
                break;
            }
            Err(_) => return,
        }
    }
    if fill.commit() {
        metrics.cache.stores.fetch_add(1, Relaxed);
    }
}
