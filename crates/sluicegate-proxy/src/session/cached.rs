//! The route's cache on the request path, after its filters (a refused
//! request never reaches it) and before the split, mirror and forward:
//! a `GET` or `HEAD` looked up by the route's key and answered from
//! memory when fresh (a `304` to a matching conditional request), or
//! else forwarded with a fill ([`crate::cache::fill`]) that the relay
//! judges and feeds, committed here when the answer ended whole; a
//! `POST`, `PUT`, `DELETE` or `PATCH` answered without error removes
//! the key's objects; a `GET` whose stale object is within its
//! `stale_if_error` window keeps it, for the lifecycle to answer with
//! when the forward hands its failure or 5xx back; a stale object within
//! its `stale_while_revalidate` window answers at once while one refresh
//! ([`crate::upstream::refresh`]) fetches it anew. A request that goes
//! upstream past a stored object with validators revalidates it: its
//! validators replace the client's, and the `304` the forward hands back
//! refreshes it and answers from it. A miss that waits for another's
//! fetch of its key is answered from that fetch as it arrives (its head,
//! then its body from the flight's shared buffer). On a route that also
//! compresses, a hit is answered in the coding the client takes, from a
//! coded copy kept with the object (made by the first hit that needs it,
//! [`Coder`]); a waiter streamed from a fetch gets the answer uncoded.
//! Only routes with a `cache` come here.

use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::answer::{answer_consumed, answer_locally, Local};
use super::peer::Link;
use crate::cache::fill::{Field, Fill, Fwd, Key, Policy, Revalidation};
use crate::cache::flight::{Head, Join, Read, Waiter};
use crate::cache::rules::{self, RequestDirectives};
use crate::cache::store::{Object, Store};
use crate::filters::compress::CompressRt;
use crate::observe::metrics::CompressMetrics;
use crate::proto;
use crate::proto::codec::BodyKind;
use crate::proto::compress::{merge_vary, weak_etag, Encoding, Flush, Recode};
use crate::proto::fields::Fields;
use crate::proto::response::{self, bodiless, Answer, What};
use crate::route::target::{strip_port, Target};
use crate::snapshot::cache::{CacheRt, KeyPart};
use crate::snapshot::{RouteRt, Snapshot};
use crate::transport::io::write_all_by;
use crate::upstream::body::client_write_failed;
use crate::upstream::forward::Outcome;
use crate::upstream::handback::Unanswered;
use crate::upstream::refresh;
use crate::worker::{Bufs, Worker};

/// A hit's `Cache-Status`, and that of a request answered from the
/// fetch it waited for.
const HIT: &[u8] = b"sluicegate; hit";
const COALESCED: &[u8] = b"sluicegate; hit; detail=coalesced";
/// A stale object's, answered while one refresh fetches it anew
/// (`stale_while_revalidate`): a hit, as RFC 9211 counts the answers
/// the cache gave without going forward for them.
const STALE: &[u8] = b"sluicegate; hit; detail=stale";
/// How long a request waits for another's fetch of its key at most
/// (that fetch is bounded by its service's timeouts; this only guards
/// against a lead never let go), before going upstream itself.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// What the cache made of a request.
pub(super) enum Cached {
    /// Answered from memory.
    Served(Outcome<'static>),
    /// To go upstream; a miss's fill (or an unsafe method's, which
    /// removes the key's objects) in `bufs.fill`; with the stale object
    /// that answers instead when the forward fails or answers 5xx
    /// (within its `stale_if_error` window when the request came).
    Forward(Option<Arc<Object>>),
}

/// Where the route's background refresh (`stale_while_revalidate`)
/// goes: the service (its index) the request would be forwarded to, the
/// client it is made for, the route's prefix to strip.
pub(super) struct Refresh {
    pub(super) service: u32,
    pub(super) client: IpAddr,
    pub(super) strip: usize,
}

/// The first value of the request's field `name`.
fn field<'a>(bufs: &'a Bufs, name: &[u8]) -> Option<&'a [u8]> {
    let raw = bufs.inb.filled();
    bufs.req
        .headers
        .iter()
        .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(name))
        .map(|h| raw[h.value.clone()].trim_ascii())
}

/// The request's key by the route's parts (the path and query as
/// forwarded: after rewrites and normalisation).
fn key(cache: &CacheRt, snap: &Snapshot, bufs: &Bufs, target: &Target) -> Key {
    let raw = bufs.inb.filled();
    let mut key = Key::default();
    for part in cache.key.iter() {
        match part {
            KeyPart::Host => key.push(
                &target
                    .host(raw)
                    .map(strip_port)
                    .unwrap_or_default()
                    .to_ascii_lowercase(),
            ),
            KeyPart::Path => key.push(
                bufs.edits
                    .path
                    .as_deref()
                    .unwrap_or(&raw[target.path.clone()]),
            ),
            KeyPart::Query => key.push(
                bufs.edits
                    .query
                    .as_deref()
                    .unwrap_or(&raw[target.query.clone()]),
            ),
            KeyPart::App => key.push(
                bufs.edits
                    .app
                    .map_or("", |a| snap.apps.app_id(a))
                    .as_bytes(),
            ),
            KeyPart::Header(name) => key.push(field(bufs, name).unwrap_or_default()),
        }
    }
    key
}

/// Looks the request up: a fresh object answers it; otherwise a `GET`
/// goes upstream with a fill in `bufs.fill`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn lookup(
    link: Link<'_>,
    snap: &Arc<Snapshot>,
    bufs: &mut Bufs,
    route: &RouteRt,
    cache: &CacheRt,
    compress: Option<&CompressRt>,
    target: &Target,
    is_head: bool,
    refresh: Refresh,
) -> Cached {
    let coder = coder(route, cache, compress);
    let raw = bufs.inb.filled();
    let key = key(cache, snap, bufs, target);
    let (get, invalidates) = match &raw[bufs.req.method.clone()] {
        b"GET" => (true, false),
        b"HEAD" => (false, false),
        b"POST" | b"PUT" | b"DELETE" | b"PATCH" => (false, true),
        _ => return Cached::Forward(None),
    };
    if invalidates {
        bufs.fill = Some(Box::new(Fill::invalidating(policy(route, cache), key)));
        return Cached::Forward(None);
    }
    let mut dirs = RequestDirectives::default();
    let mut request_fields = Vec::new();
    for h in &bufs.req.headers {
        let (name, value) = (&raw[h.name.clone()], raw[h.value.clone()].trim_ascii());
        if name.eq_ignore_ascii_case(b"cache-control") {
            dirs.add(value);
        }
        request_fields.push((name.to_ascii_lowercase().into(), value.into()));
    }
    let authorization = field(bufs, b"authorization").is_some();
    let metrics = &route.metrics.cache;
    let mut stale = None;
    // The stored object the request goes upstream past (stale, or one
    // the request would not take as it is): revalidated when it can be.
    let stored;
    let fwd = if dirs.no_cache || dirs.max_age == Some(0) {
        stored = lookup_any(cache, &key, &request_fields);
        Fwd::Request
    } else {
        match fresh(cache, &key, &request_fields, &dirs) {
            Ok((o, now)) => {
                metrics.hits.fetch_add(1, Relaxed);
                // Stale, when the request's `max-stale` took it so.
                let status = match o.fresh(now) {
                    Ok(_) => HIT,
                    Err(_) => {
                        metrics.stale.fetch_add(1, Relaxed);
                        STALE
                    }
                };
                return Cached::Served(
                    serve(link, snap, bufs, o, now, is_head, status, coder).await,
                );
            }
            Err((Fwd::Stale, Some(o))) if within(&o, o.stale_while_revalidate) => {
                // Answered stale at once; one refresh (the key's flight
                // lead) fetches it anew unless one is under way.
                let hash = cache.store.hash(&key.parts());
                if let Join::Lead(lead) = cache.store.flights.join(hash, &key) {
                    let mut fill = Box::new(Fill::new(
                        policy(route, cache),
                        key,
                        request_fields,
                        authorization,
                        Fwd::Stale,
                    ));
                    fill.lead = Some(lead);
                    let down = link.downstream();
                    let Refresh {
                        service,
                        client,
                        strip,
                    } = refresh;
                    let m = &route.metrics;
                    let stale = o.clone();
                    refresh::start(
                        &down, snap, service, client, target, strip, bufs, fill, stale, m,
                    );
                }
                metrics.stale.fetch_add(1, Relaxed);
                let now = Instant::now();
                return Cached::Served(
                    serve(link, snap, bufs, o, now, is_head, STALE, coder).await,
                );
            }
            Err((fwd, o)) => {
                let kept = o
                    .as_ref()
                    .filter(|o| fwd == Fwd::Stale && within(o, o.stale_if_error));
                stale = kept.cloned();
                stored = o;
                fwd
            }
        }
    };
    if dirs.only_if_cached {
        // Nothing stored that it takes, and it may not go upstream (RFC
        // 9111 section 5.2.1.7).
        metrics.misses.fetch_add(1, Relaxed);
        return Cached::Served(only_if_cached(link, snap, bufs, is_head).await);
    }
    // Coalescing: the first miss for a key fetches it, the others wait
    // for that fetch, then look up again.
    let mut lead = None;
    if get && !dirs.no_store && fwd != Fwd::Request {
        let hash = cache.store.hash(&key.parts());
        match cache.store.flights.join(hash, &key) {
            Join::Lead(l) => lead = Some(l),
            Join::Wait(mut waiter) => {
                // Answered from the fetch as it arrives, once its head
                // was judged storable (and varies as this request does).
                let wait = link.worker.deadlines.after(WAIT_MAX).or_shutdown();
                let head = wait.bound(waiter.head()).await.ok().flatten();
                let header = |name: &[u8]| {
                    request_fields
                        .iter()
                        .find(|(n, _)| **n == *name)
                        .map(|(_, v)| &v[..])
                };
                if let Some(head) = head.filter(|h| h.varies_as(&header)) {
                    metrics.hits.fetch_add(1, Relaxed);
                    metrics.coalesced.fetch_add(1, Relaxed);
                    let streamed = streamed(link, snap, bufs, waiter, head);
                    return Cached::Served(Box::pin(streamed).await);
                }
                if let Ok((o, now)) = fresh(cache, &key, &request_fields, &dirs) {
                    metrics.hits.fetch_add(1, Relaxed);
                    metrics.coalesced.fetch_add(1, Relaxed);
                    let served = serve(link, snap, bufs, o, now, is_head, COALESCED, coder);
                    return Cached::Served(served.await);
                }
            }
            Join::Apart => {}
        }
    }
    metrics.misses.fetch_add(1, Relaxed);
    if get && !dirs.no_store {
        bufs.fill = Some(Box::new(Fill::new(
            policy(route, cache),
            key,
            request_fields,
            authorization,
            fwd,
        )));
        let revalidation = stored
            .filter(|o| o.etag.is_some() || o.last_modified.is_some())
            .filter(|_| field(bufs, b"range").is_none())
            .map(|o| conditional(bufs, o));
        if let Some(f) = bufs.fill.as_deref_mut() {
            f.lead = lead;
            f.revalidation = revalidation;
        }
        return Cached::Forward(stale);
    } else {
        let status = match fwd {
            Fwd::Miss => "sluicegate; fwd=miss",
            Fwd::Stale => "sluicegate; fwd=stale",
            Fwd::Request => "sluicegate; fwd=request",
        };
        bufs.edits
            .response_headers
            .push(b"cache-status", status.as_bytes());
    }
    Cached::Forward(None)
}

/// Whether a stale object may still be served, `window` past its
/// freshness (RFC 5861), now: never one with `must-revalidate`.
fn within(o: &Object, window: Duration) -> bool {
    let stale_by = o.fresh(Instant::now()).err().unwrap_or_default();
    !o.must_revalidate && !window.is_zero() && stale_by <= window
}

/// Why a request goes upstream, with the stale object when one is
/// stored.
type Why = (Fwd, Option<Arc<Object>>);

/// A fresh object for the request (its key, its fields for `Vary`, its
/// directives), and the time it was judged at; or why it goes upstream,
/// with the stale object when there is one.
fn fresh(
    cache: &CacheRt,
    key: &Key,
    request_fields: &[Field],
    dirs: &RequestDirectives,
) -> Result<(Arc<Object>, Instant), Why> {
    let parts = key.parts();
    let hash = cache.store.hash(&parts);
    let header = |name: &[u8]| {
        request_fields
            .iter()
            .find(|(n, _)| **n == *name)
            .map(|(_, v)| &v[..])
    };
    let o = cache
        .store
        .get(hash, &parts, &header)
        .ok_or((Fwd::Miss, None))?;
    let now = Instant::now();
    let young = dirs.max_age.is_none_or(|m| o.age(now).as_secs() <= m);
    match o.fresh(now) {
        Ok(left) if !o.no_cache => {
            // Fresh, but maybe not as fresh as the request asks.
            let enough = dirs.min_fresh.is_none_or(|m| left.as_secs() >= m);
            match young && enough {
                true => Ok((o, now)),
                false => Err((Fwd::Request, Some(o))),
            }
        }
        Ok(_) => Err((Fwd::Stale, Some(o))),
        Err(stale_by) => {
            // The request takes it stale (`max-stale`), unless it must
            // be revalidated (RFC 9111 section 4.2.4).
            let taken = dirs.max_stale.is_some_and(|m| stale_by.as_secs() <= m);
            match taken && young && !o.must_revalidate && !o.no_cache {
                true => Ok((o, now)),
                false => Err((Fwd::Stale, Some(o))),
            }
        }
    }
}

/// A `504` for a request with `only-if-cached` that nothing stored
/// answers: `Cache-Status: sluicegate; detail=only-if-cached`.
#[cold]
async fn only_if_cached(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    is_head: bool,
) -> Outcome<'static> {
    let mut fields = Fields::new();
    fields.push(b"cache-status", b"sluicegate; detail=only-if-cached");
    let fixed = Local::Fixed(proto::response::Head::Fields(504, &fields), &[]);
    answer_locally(link, snap, bufs, fixed, is_head).await
}

/// The stored object for the request (its key, its fields for
/// `Vary`), fresh or not.
fn lookup_any(cache: &CacheRt, key: &Key, request_fields: &[Field]) -> Option<Arc<Object>> {
    let parts = key.parts();
    let header = |name: &[u8]| {
        request_fields
            .iter()
            .find(|(n, _)| **n == *name)
            .map(|(_, v)| &v[..])
    };
    cache.store.get(cache.store.hash(&parts), &parts, &header)
}

/// The conditional fields a revalidation of `o` sends.
const CONDITIONAL: [&[u8]; 2] = [b"if-none-match", b"if-modified-since"];

/// Makes the request conditional on the stored object's validators
/// (RFC 9111 section 4.3.1): `If-None-Match` from its `ETag`,
/// `If-Modified-Since` from its `Last-Modified`, in place of the
/// client's own (set aside: a `304` then says that the stored object is
/// still good, whatever the client holds; the client's conditional is
/// judged against that object, as for a hit).
fn conditional(bufs: &mut Bufs, o: Arc<Object>) -> Box<Revalidation> {
    let raw = bufs.inb.filled();
    let mut set_aside = Vec::new();
    for (i, h) in bufs.req.headers.iter_mut().enumerate() {
        let name = &raw[h.name.clone()];
        if !h.skip && CONDITIONAL.iter().any(|c| name.eq_ignore_ascii_case(c)) {
            h.skip = true;
            set_aside.push(i);
        }
    }
    let added = &mut bufs.edits.request_headers;
    let added_from = added.len();
    if let Some(etag) = &o.etag {
        added.push(CONDITIONAL[0], etag);
    }
    if let Some(lm) = &o.last_modified {
        added.push(CONDITIONAL[1], lm);
    }
    Box::new(Revalidation {
        object: o,
        set_aside,
        added_from,
    })
}

/// Gives the request its own conditional fields back, the stored
/// object's validators taken off: before it is sent elsewhere (a
/// fallback), whose `304` would not be the cache's to use.
pub(super) fn unconditional(bufs: &mut Bufs, r: &Revalidation) {
    for &i in &r.set_aside {
        if let Some(h) = bufs.req.headers.get_mut(i) {
            h.skip = false;
        }
    }
    bufs.edits.request_headers.truncate(r.added_from);
}

/// Answers a request whose revalidation (the stored object's
/// validators sent upstream in place of the client's) got a `304`: the
/// object is stored again with the `304`'s fields and its age counted
/// anew (RFC 9111 section 4.3.4), and answers the client, `Cache-Status:
/// sluicegate; fwd=stale; fwd-status=304` (`fwd=request` for a
/// request's `no-cache`), a `304` when the client's own conditional
/// matches it. Its waiters, if it led the key's fetch, are answered from
/// the refreshed object.
#[cold]
pub(super) async fn revalidated<'s>(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    fill: &mut Fill,
    un: &Unanswered<'s>,
    coder: Option<Coder<'_>>,
) -> Outcome<'s> {
    let Some(r) = fill.revalidation.take() else {
        return Outcome::local(502, 0, true);
    };
    let raw = bufs.upb.filled();
    let rid = bufs.ids.rid.name();
    let fresh: Vec<(&[u8], &[u8])> = bufs
        .res
        .headers
        .iter()
        .filter(|h| !h.skip)
        .map(|h| (&raw[h.name.clone()], &raw[h.value.clone()]))
        .filter(|(n, _)| !n.eq_ignore_ascii_case(rid) && !n.eq_ignore_ascii_case(b"cache-status"))
        .collect();
    let o = fill.refreshed(&r.object, &fresh).unwrap_or(r.object);
    let mut cache_status = b"sluicegate; fwd=".to_vec();
    cache_status.extend_from_slice(fill.fwd().as_str().as_bytes());
    cache_status.extend_from_slice(b"; fwd-status=304");
    let close = (!un.at_hand).then_some(un.close);
    let now = Instant::now();
    let mut outcome: Outcome<'s> =
        serve_as(link, snap, bufs, o, now, false, &cache_status, close, coder).await;
    outcome.bytes_in = un.bytes_in;
    outcome.upstream_us = un.upstream_us;
    outcome.endpoint = un.endpoint;
    outcome
}

/// The route's cache settings a fill takes.
fn policy(route: &RouteRt, cache: &CacheRt) -> Policy {
    Policy {
        store: cache.store.clone(),
        default_ttl: cache.default_ttl,
        stale_while_revalidate: cache.stale_while_revalidate,
        stale_if_error: cache.stale_if_error,
        tags_header: cache.tags_header.clone(),
        route: route.name.clone(),
    }
}

/// How a caching route that compresses answers from memory: its
/// `compress`, the store (which keeps the coded copies) and the route's
/// compression counters.
#[derive(Clone, Copy)]
pub(super) struct Coder<'a> {
    rt: &'a CompressRt,
    store: &'a Store,
    metrics: &'a CompressMetrics,
}

/// The route's [`Coder`], when it compresses.
pub(super) fn coder<'a>(
    route: &'a RouteRt,
    cache: &'a CacheRt,
    compress: Option<&'a CompressRt>,
) -> Option<Coder<'a>> {
    Some(Coder {
        rt: compress?,
        store: &cache.store,
        metrics: &route.metrics.compress,
    })
}

/// A stored object's fields as (name, value) pairs.
fn lines(fields: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    fields.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], line[colon + 1..].trim_ascii()))
    })
}

impl Coder<'_> {
    /// How the object is sent to this request: chosen as for a forwarded
    /// `GET` (a `HEAD` too, whose head then says what the `GET` gets),
    /// from the request's `Accept-Encoding`, when the stored answer
    /// qualifies (type, size, no `Content-Encoding`, no `no-transform`).
    fn recode(&self, o: &Object, bufs: &Bufs) -> Recode {
        let raw = bufs.inb.filled();
        let Some(coding) = self.rt.choose(raw, &bufs.req, false, bufs.grpc) else {
            return Recode::Keep;
        };
        let body = BodyKind::Length(o.body.len() as u64);
        if !self.rt.applies_to(o.status, body, lines(&o.fields)) {
            return Recode::Keep;
        }
        coding.map_or(Recode::Vary, Recode::Coded)
    }

    /// The object's body coded in `coding`, made now with the worker's
    /// coder (counted as coding work) and kept with the object when it
    /// is still stored: `Ok` when kept (read it from the object), `Err`
    /// with the bytes when not, `None` when coding failed.
    fn make(
        &self,
        worker: &Worker,
        o: &Arc<Object>,
        coding: Encoding,
    ) -> Option<Result<(), Box<[u8]>>> {
        let (mut enc, mut z) = worker.take_encoder(coding, self.rt.level(coding))?;
        z.clear();
        let done = enc.encode(&o.body, &mut z, Flush::Finish);
        let coded: Box<[u8]> = z[..].into();
        worker.put_encoder((enc, z));
        if let Err(e) = done {
            tracing::debug!(error = %e, "coding a cached body failed");
            return None;
        }
        self.metrics
            .bytes_in
            .fetch_add(o.body.len() as u64, Relaxed);
        self.metrics
            .bytes_out
            .fetch_add(coded.len() as u64, Relaxed);
        Some(self.store.add_coded(o, coding.index(), coded))
    }
}

/// Answers from a fresh object: its fields (less those the route's
/// header ops drop), its `Age` and `Cache-Status`; a `304` without the
/// body when the request's validators match it. With a `coder`, in the
/// coding the client takes.
#[allow(clippy::too_many_arguments)]
async fn serve(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    o: Arc<Object>,
    now: Instant,
    is_head: bool,
    cache_status: &[u8],
    coder: Option<Coder<'_>>,
) -> Outcome<'static> {
    serve_as(link, snap, bufs, o, now, is_head, cache_status, None, coder).await
}

/// [`serve`], the request's body consumed already when `close` is given
/// (the connection closing after the answer when it is true).
#[allow(clippy::too_many_arguments)]
async fn serve_as(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    o: Arc<Object>,
    now: Instant,
    is_head: bool,
    cache_status: &[u8],
    close: Option<bool>,
    coder: Option<Coder<'_>>,
) -> Outcome<'static> {
    let not_modified = not_modified(bufs, &o.etag, &o.last_modified) && o.status == 200;
    // The representation: as stored, or coded (from the copy kept with
    // the object, made now if there is none; not for a 304).
    let mut recode = coder.map_or(Recode::Keep, |c| c.recode(&o, bufs));
    let mut own: Option<Box<[u8]>> = None;
    let mut kept = false;
    if let (Recode::Coded(e), Some(c)) = (recode, coder) {
        if o.coded(e.index()).is_some() {
            kept = true;
        } else if !not_modified {
            match c.make(link.worker, &o, e) {
                Some(Ok(())) => {}
                Some(Err(coded)) => own = Some(coded),
                None => recode = Recode::Vary,
            }
        }
    }
    let mut fields = Fields::new();
    let ops = bufs.edits.response_ops.as_deref();
    for (name, value) in lines(&o.fields) {
        if !ops.is_some_and(|o| o.drops(name)) && !rewritten(name, recode) {
            fields.push(name, value);
        }
    }
    if recode != Recode::Keep {
        if let Recode::Coded(e) = recode {
            fields.push(b"content-encoding", e.token().as_bytes());
        }
        let named = |n: &'static [u8]| {
            lines(&o.fields)
                .filter(move |(name, _)| name.eq_ignore_ascii_case(n))
                .map(|(_, v)| v)
        };
        let mut v = Vec::with_capacity(64);
        merge_vary(named(b"vary"), &mut v);
        fields.push(b"vary", &v);
        if let (Recode::Coded(_), Some(etag)) = (recode, named(b"etag").next()) {
            v.clear();
            weak_etag(etag, &mut v);
            fields.push(b"etag", &v);
        }
    }
    let age = o.age(now).as_secs();
    fields.push(b"age", itoa::Buffer::new().format(age).as_bytes());
    fields.push(b"cache-status", cache_status);
    let body: &[u8] = match recode {
        Recode::Coded(e) => match (o.coded(e.index()), own.as_deref()) {
            (_, Some(coded)) | (Some(coded), None) => coded,
            (None, None) => &[],
        },
        _ => &o.body,
    };
    if let (Recode::Coded(e), Some(c), false, false) = (recode, coder, not_modified, is_head) {
        c.metrics.responses[e.index()].fetch_add(1, Relaxed);
        if kept {
            c.metrics.cached[e.index()].fetch_add(1, Relaxed);
        }
    }
    let (status, body): (u16, &[u8]) = match not_modified {
        true => (304, &[]),
        false => (o.status, body),
    };
    let fixed = Local::Fixed(proto::response::Head::Fields(status, &fields), body);
    match close {
        None => answer_locally(link, snap, bufs, fixed, is_head).await,
        Some(close) => answer_consumed(link, snap, bufs, fixed, is_head, close).await,
    }
}

/// The stored fields that `recode` writes in a form of its own or not
/// at all: `Vary`, and for a coded answer `ETag` and `Accept-Ranges`
/// (as the relay does, [`crate::upstream::head`]).
fn rewritten(name: &[u8], recode: Recode) -> bool {
    match recode {
        Recode::Keep => false,
        Recode::Vary => name.eq_ignore_ascii_case(b"vary"),
        Recode::Coded(_) => {
            name.eq_ignore_ascii_case(b"etag")
                || name.eq_ignore_ascii_case(b"vary")
                || name.eq_ignore_ascii_case(b"accept-ranges")
        }
    }
}

/// The fields of an answer from memory: the stored ones (`stored`, as
/// HTTP/1.1 lines) less those the route's header ops drop, its `Age`
/// and `Cache-Status`.
fn answer_fields(bufs: &Bufs, stored: &[u8], age: Duration, cache_status: &[u8]) -> Fields {
    let mut fields = Fields::new();
    let ops = bufs.edits.response_ops.as_deref();
    for line in stored.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if !ops.is_some_and(|o| o.drops(name)) {
            fields.push(name, value);
        }
    }
    let age = age.as_secs();
    fields.push(b"age", itoa::Buffer::new().format(age).as_bytes());
    fields.push(b"cache-status", cache_status);
    fields
}

/// Whether the request's validators match an answer's (`If-None-Match`
/// by weak comparison, else `If-Modified-Since`).
fn not_modified(bufs: &Bufs, etag: &Option<Box<[u8]>>, lm: &Option<Box<[u8]>>) -> bool {
    match (field(bufs, b"if-none-match"), etag) {
        (Some(inm), Some(etag)) => rules::none_match(inm, etag),
        (Some(_), None) => false,
        (None, _) => match (field(bufs, b"if-modified-since"), lm) {
            (Some(ims), Some(lm)) => {
                matches!((rules::http_date(ims), rules::http_date(lm)), (Some(i), Some(l)) if l <= i)
            }
            _ => false,
        },
    }
}

/// A chunk's size line (`1a2b\r\n`).
fn chunk_line(out: &mut Vec<u8>, n: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = (usize::BITS - n.leading_zeros()).div_ceil(4).max(1);
    for i in (0..digits).rev() {
        out.push(HEX[(n >> (i * 4)) & 15]);
    }
    out.extend_from_slice(b"\r\n");
}

/// How much of the body a waiter copies at a time.
const PIECE: usize = 64 * 1024;

/// Answers a `GET` that waited for another request's fetch of its key
/// from that fetch as it arrives (`Cache-Status: sluicegate; hit;
/// detail=coalesced`): its head (`head`, judged storable), then its body
/// copied from the fetch's shared buffer as it grows, `waiter` woken
/// each time (a `304` instead when the request's validators match). A
/// fetch cut after the head went (past `max_object`, its upstream gone)
/// ends the answer cut: the connection closes, an HTTP/2 stream is
/// reset.
async fn streamed(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    mut waiter: Waiter,
    head: Arc<Head>,
) -> Outcome<'static> {
    let age = head.initial_age + head.arrived.elapsed();
    let fields = answer_fields(bufs, &head.fields, age, COALESCED);
    if head.status == 200 && not_modified(bufs, &head.etag, &head.last_modified) {
        let fixed = Local::Fixed(proto::response::Head::Fields(304, &fields), &[]);
        return answer_locally(link, snap, bufs, fixed, false).await;
    }
    let framing = bufs.req_framing;
    let http10 = bufs.req.minor == 0;
    let h2 = link.client.h2();
    let length = head.length.filter(|_| !bodiless(head.status));
    let no_body = bodiless(head.status) || length == Some(0);
    // A request with a body of its own (unusual for a `GET`): not read,
    // the connection closes after the answer.
    let mut close = framing.close
        || framing.body != BodyKind::None
        || link.worker.shutting_down()
        || (length.is_none() && http10 && h2.is_none() && !no_body);
    let chunked = length.is_none() && !http10 && h2.is_none() && !no_body;
    let ops = bufs
        .edits
        .response_ops
        .as_ref()
        .map_or(&proto::fields::NONE, |o| &o.fields);
    let answer = Answer {
        what: What::Streamed {
            head: proto::response::Head::Fields(head.status, &fields),
            edits: &bufs.edits.response_headers,
            ops,
            length: if no_body { Some(0) } else { length },
        },
        rid: &bufs.ids.rid,
        close,
        head_only: false,
        http10,
    };
    let rendered = response::render(&answer, h2, &mut bufs.out);
    bufs.inb.consume(framing.len);
    let mut outcome = Outcome::local(head.status, 0, close);
    if rendered.is_err() {
        outcome.close = true;
        return outcome;
    }
    let client_write = snap.timeouts.client_write;
    let mut sent = 0usize;
    let ended_whole = loop {
        if no_body {
            break true;
        }
        let out = &mut bufs.out;
        let read = waiter.read(sent, PIECE, |data| {
            if chunked {
                chunk_line(out, data.len());
            }
            out.extend_from_slice(data);
            if chunked {
                out.extend_from_slice(b"\r\n");
            }
        });
        match read {
            Read::Data(n) => sent += n,
            Read::Whole => {
                if chunked {
                    bufs.out.extend_from_slice(b"0\r\n\r\n");
                }
                break true;
            }
            Read::Cut => break false,
            Read::Pending => {}
        }
        if !bufs.out.is_empty() {
            let wait = link.worker.deadlines.after(client_write);
            if let Err(e) = write_all_by(link.client, &bufs.out, wait).await {
                client_write_failed(link.worker, &e);
                outcome.close = true;
                return outcome;
            }
            bufs.out.clear();
        }
        if read == Read::Pending {
            let wait = link.worker.deadlines.after(WAIT_MAX).or_shutdown();
            if wait.bound(waiter.changed()).await.is_err() {
                break false;
            }
        }
    };
    outcome.bytes_out = sent as u64;
    if !ended_whole {
        // Cut: the client must not take it for the whole answer.
        if let Some(x) = h2 {
            x.cancel();
        }
        outcome.close = true;
        return outcome;
    }
    if !bufs.out.is_empty() {
        let wait = link.worker.deadlines.after(client_write);
        if let Err(e) = write_all_by(link.client, &bufs.out, wait).await {
            client_write_failed(link.worker, &e);
            outcome.close = true;
            return outcome;
        }
        bufs.out.clear();
    }
    if let (Some(x), None) = (h2, length) {
        x.finish();
    }
    close |= outcome.close;
    outcome.close = close;
    outcome
}

/// Answers a `GET` whose forward failed or answered 5xx (`un`; its
/// status `upstream`, when one came) from the stale object its lookup
/// kept: `Cache-Status: sluicegate; fwd=stale; fwd-status=S` (the
/// upstream's status, or that of the error the client would have got)
/// and its `Age`. Counted.
#[cold]
#[allow(clippy::too_many_arguments)]
pub(super) async fn stale_if_error<'s>(
    link: Link<'_>,
    snap: &Snapshot,
    bufs: &mut Bufs,
    route: &RouteRt,
    o: Arc<Object>,
    un: &Unanswered<'s>,
    upstream: Option<u16>,
    coder: Option<Coder<'_>>,
) -> Outcome<'s> {
    route.metrics.cache.stale.fetch_add(1, Relaxed);
    let status = upstream.unwrap_or_else(|| un.kind.status());
    let mut cache_status = b"sluicegate; fwd=stale; fwd-status=".to_vec();
    cache_status.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    let close = (!un.at_hand).then_some(un.close);
    let now = Instant::now();
    let mut outcome: Outcome<'s> =
        serve_as(link, snap, bufs, o, now, false, &cache_status, close, coder).await;
    outcome.bytes_in = un.bytes_in;
    outcome.upstream_us = un.upstream_us;
    outcome.endpoint = un.endpoint;
    outcome
}

/// After the answer: a miss's fill stored when it came whole (if it was
/// not as its last byte was copied), and counted.
pub(super) fn ended(route: &RouteRt, fill: Option<Box<Fill>>) {
    if let Some(mut f) = fill {
        if f.commit() {
            route.metrics.cache.stores.fetch_add(1, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunk_lines_are_hex() {
        let line = |n| {
            let mut out = Vec::new();
            super::chunk_line(&mut out, n);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(line(0), "0\r\n");
        assert_eq!(line(10), "a\r\n");
        assert_eq!(line(0x1a2b), "1a2b\r\n");
        assert_eq!(line(65536), "10000\r\n");
    }
}
