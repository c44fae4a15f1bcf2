//! A route's counters ([`RouteMetrics`]): responses by status and latency,
//! auth refusals, external checks, fault injection, fallback answers and gRPC endings; and
//! the route families (the mirror's among them).

use super::authz::{render_authz, AuthzMetrics};
use super::compress::{render_compress, CompressMetrics};
use super::mirror::render_mirrors;
use super::{by_class, family, header, label, Histogram, MirrorMetrics, StatusCounts};
use sluicegate_config::GRPC_STATUS_NAMES;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a route's fallback answered: the `cause` label of
/// `sluicegate_fallbacks_total`, in the order of
/// [`RouteMetrics::fallbacks`].
pub const FALLBACK_CAUSES: [&str; 8] = [
    "no_endpoint",
    "breaker_open",
    "busy",
    "connect_failed",
    "retries_exhausted",
    "timeout",
    "upstream_failed",
    "upstream_5xx",
];

/// Per-route counters: responses by status and total latency.
#[derive(Debug)]
pub struct RouteMetrics {
    pub name: String,
    pub status: StatusCounts,
    pub latency: Histogram,
    /// Microseconds spent waiting for upstreams (request sent to response
    /// head), summed over the requests that went upstream.
    pub upstream_us: AtomicU64,
    /// Requests refused 401 by the route's auth (no or unknown credentials).
    pub unauthorized: AtomicU64,
    /// Requests the route's `fault` aborted, and delayed.
    pub fault_aborts: AtomicU64,
    pub fault_delays: AtomicU64,
    /// Requests the route's `fallback` answered, by cause (the order of
    /// [`FALLBACK_CAUSES`]); and those whose fallback service could not
    /// take them (their body had gone upstream), answered the error.
    pub fallbacks: [AtomicU64; FALLBACK_CAUSES.len()],
    pub fallbacks_unsent: AtomicU64,
    /// gRPC calls by the status they ended with (codes 0 to 16); index 17:
    /// calls that ended without one (cut, or a non-gRPC answer).
    pub grpc: [AtomicU64; 18],
    /// The route's `mirror` copies: kept with the route's other counters,
    /// so a reload keeps them too.
    pub mirror: MirrorMetrics,
    /// The route's compressed answers, kept like its other counters.
    pub compress: CompressMetrics,
    /// The route's `cache`: lookups answered from memory, lookups that
    /// went upstream, answers stored.
    pub cache: CacheMetrics,
    /// The route's `forward_auth` and `ext_authz` checks.
    pub authz: AuthzMetrics,
}

/// A caching route's counters.
#[derive(Debug, Default)]
pub struct CacheMetrics {
    pub hits: AtomicU64,
    /// Hits that waited for another request's fetch of their key.
    pub coalesced: AtomicU64,
    pub misses: AtomicU64,
    pub stores: AtomicU64,
    /// Requests answered with a stale object (`stale_if_error`,
    /// `stale_while_revalidate`).
    pub stale: AtomicU64,
    /// Stale objects revalidated: a conditional request answered `304`
    /// (the body kept).
    pub revalidated: AtomicU64,
}

impl RouteMetrics {
    pub fn new(name: &str) -> Self {
        RouteMetrics {
            name: name.to_string(),
            status: Default::default(),
            latency: Histogram::default(),
            upstream_us: AtomicU64::new(0),
            unauthorized: AtomicU64::new(0),
            fault_aborts: AtomicU64::new(0),
            fault_delays: AtomicU64::new(0),
            fallbacks: Default::default(),
            fallbacks_unsent: AtomicU64::new(0),
            grpc: Default::default(),
            mirror: MirrorMetrics::default(),
            compress: CompressMetrics::default(),
            cache: CacheMetrics::default(),
            authz: AuthzMetrics::default(),
        }
    }

    pub fn record(&self, status: u16, us: u64, upstream_us: Option<u64>) {
        self.status.record(status);
        self.latency.observe(us);
        if let Some(up) = upstream_us {
            self.upstream_us.fetch_add(up, Ordering::Relaxed);
        }
    }

    /// Counts a gRPC call's ending status.
    #[cold]
    pub fn record_grpc(&self, status: Option<u8>) {
        let i = status.map_or(17, |s| usize::from(s).min(17));
        self.grpc[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// The `route` label of `r`.
fn route_label(r: &RouteMetrics) -> String {
    format!("route=\"{}\"", label(&r.name))
}

/// Writes the route metric families.
pub fn render_routes<'a>(out: &mut String, routes: impl Iterator<Item = &'a RouteMetrics> + Clone) {
    family(
        out,
        "sluicegate_requests_total",
        "counter",
        "Requests answered, by route and status class.",
        routes
            .clone()
            .flat_map(|r| by_class(format!("{},", route_label(r)), r.status.classes())),
    );
    header(
        out,
        "sluicegate_responses_total",
        "counter",
        "Requests answered, by route and exact status code (codes seen so far).",
    );
    for r in routes.clone() {
        r.status
            .render(out, "sluicegate_responses_total", &route_label(r));
    }
    type Family = (&'static str, &'static str, fn(&RouteMetrics) -> u64);
    let counters: [Family; 3] = [
        (
            "sluicegate_unauthorized_total",
            "Requests refused 401 by a route's auth, by route.",
            |r| r.unauthorized.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_fault_aborts_total",
            "Requests answered by the route's fault injection (abort), by route.",
            |r| r.fault_aborts.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_fault_delays_total",
            "Requests delayed by the route's fault injection, by route.",
            |r| r.fault_delays.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, get) in counters {
        let rows = routes.clone().map(|r| (route_label(r), get(r)));
        family(out, name, "counter", help, rows);
    }
    render_mirrors(out, routes.clone().map(|r| (&*r.name, &r.mirror)));
    render_compress(out, routes.clone().map(|r| (&*r.name, &r.compress)));
    render_authz(out, routes.clone().map(|r| (&*r.name, &r.authz)));
    // Only the routes whose cache saw a request: the others have none.
    let cache: [Family; 6] = [
        (
            "sluicegate_cache_hits_total",
            "Requests answered from the cache, by route.",
            |r| r.cache.hits.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_cache_coalesced_total",
            "Requests answered from the cache after waiting for another's fetch of their key, by route.",
            |r| r.cache.coalesced.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_cache_misses_total",
            "Cacheable requests that went upstream (nothing fresh stored, or the request asked to), by route.",
            |r| r.cache.misses.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_cache_stores_total",
            "Answers stored in the cache, by route.",
            |r| r.cache.stores.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_cache_stale_total",
            "Requests answered with a stale object (stale_if_error: the upstream failed or answered 5xx; stale_while_revalidate: while one refresh fetches it), by route.",
            |r| r.cache.stale.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_cache_revalidated_total",
            "Stale objects revalidated by a conditional request the upstream answered 304 (body kept), by route.",
            |r| r.cache.revalidated.load(Ordering::Relaxed),
        ),
    ];
    let caching = |r: &&RouteMetrics| {
        r.cache.hits.load(Ordering::Relaxed) + r.cache.misses.load(Ordering::Relaxed) > 0
    };
    if routes.clone().any(|r| caching(&r)) {
        for (name, help, get) in cache {
            let rows = routes
                .clone()
                .filter(caching)
                .map(|r| (route_label(r), get(r)));
            family(out, name, "counter", help, rows);
        }
    }
    family(
        out,
        "sluicegate_fallbacks_total",
        "counter",
        "Requests the route's fallback answered, by route and why its service could not.",
        routes.clone().flat_map(|r| {
            let route = label(&r.name);
            FALLBACK_CAUSES
                .iter()
                .zip(&r.fallbacks)
                .map(|(cause, c)| (cause, c.load(Ordering::Relaxed)))
                .filter(|&(_, n)| n > 0)
                .map(move |(cause, n)| (format!("route=\"{route}\",cause=\"{cause}\""), n))
        }),
    );
    family(
        out,
        "sluicegate_fallbacks_unsent_total",
        "counter",
        "Requests answered the error because their body had gone (partly) upstream, so that the fallback service could not take them, by route.",
        routes
            .clone()
            .map(|r| (r, r.fallbacks_unsent.load(Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .map(|(r, n)| (route_label(r), n)),
    );
    family(
        out,
        "sluicegate_grpc_requests_total",
        "counter",
        "gRPC calls by route and the gRPC status they ended with (none: cut, or no gRPC answer).",
        routes.clone().flat_map(|r| {
            let route = label(&r.name);
            r.grpc
                .iter()
                .enumerate()
                .map(|(i, c)| (i, c.load(Ordering::Relaxed)))
                .filter(|&(_, n)| n > 0)
                .map(move |(i, n)| {
                    let status = GRPC_STATUS_NAMES.get(i).copied().unwrap_or("none");
                    (format!("route=\"{route}\",grpc_status=\"{status}\""), n)
                })
        }),
    );
    header(
        out,
        "sluicegate_request_duration_seconds",
        "histogram",
        "Time from request head to response end, by route.",
    );
    for r in routes {
        r.latency
            .render(out, "sluicegate_request_duration_seconds", &route_label(r));
    }
}
