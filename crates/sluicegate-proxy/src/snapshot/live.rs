//! A copy of the live counters (routes, apps, endpoints) as plain values,
//! for the admin plane to sample: it reads the atomics the data plane
//! keeps, off the request path, and never writes them.

use std::sync::atomic::Ordering;
use std::time::Instant;

pub use crate::observe::metrics::BUCKETS_US;
use crate::snapshot::{ActionRt, Snapshot};

/// Apps copied at most, the busiest first (a table may hold millions).
pub const MAX_APPS: usize = 500;

/// One route's cumulative counters.
#[derive(Debug, Clone, Default)]
pub struct RouteCounts {
    pub name: String,
    /// The service it proxies to; `None` for a fixed answer.
    pub service: Option<String>,
    /// Responses by class, 1xx to 5xx.
    pub status: [u64; 5],
    /// Latency histogram: each bucket's count (see [`BUCKETS_US`]).
    pub buckets: [u64; BUCKETS_US.len() + 1],
    /// Microseconds from request head to response end, summed.
    pub total_us: u64,
    /// Microseconds waiting for upstreams, summed.
    pub upstream_us: u64,
    /// On a split route, each entry in config order; empty otherwise.
    pub split: Vec<SplitEntryCounts>,
    /// On a caching route, its lookups answered from memory and not
    /// (`hits`, `misses`); `None` otherwise.
    pub cache: Option<[u64; 2]>,
}

/// One service of a split route: its weight now and the cumulative
/// counters of the requests it answered. The counters are kept by (route,
/// service) across reloads, so two readings' difference is a window's
/// traffic even when the weights changed between them (a counter lower
/// than before means the entry was removed and added again: count from 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SplitEntryCounts {
    pub service: String,
    /// The weight in the running config.
    pub weight: u32,
    /// Responses by class, 1xx to 5xx ([`Self::requests`] is their sum,
    /// [`Self::server_errors`] the last).
    pub status: [u64; 5],
    /// Latency histogram: each bucket's count, not cumulative (bounds:
    /// [`BUCKETS_US`]; the last: over every bound).
    pub buckets: [u64; BUCKETS_US.len() + 1],
    /// Microseconds from request head to response end, summed.
    pub total_us: u64,
    /// Microseconds waiting for the upstream, summed.
    pub upstream_us: u64,
}

impl SplitEntryCounts {
    pub fn requests(&self) -> u64 {
        self.status.iter().sum()
    }

    /// Responses 500 to 599 (and gateway errors such as 502 and 504).
    pub fn server_errors(&self) -> u64 {
        self.status[4]
    }

    /// The histogram as cumulative counts: how many took at most each of
    /// [`BUCKETS_US`] (the last: all), as Prometheus's `le` buckets.
    pub fn cumulative(&self) -> [u64; BUCKETS_US.len() + 1] {
        let mut sum = 0;
        self.buckets.map(|b| {
            sum += b;
            sum
        })
    }
}

/// One app's cumulative counters.
#[derive(Debug, Clone, Default)]
pub struct AppCounts {
    pub id: String,
    pub requests: u64,
    pub forbidden: u64,
    pub limited: u64,
    pub client_errors: u64,
    pub server_errors: u64,
    pub latency_us: u64,
}

/// One endpoint of a service, now.
#[derive(Debug, Clone, Default)]
pub struct EndpointNow {
    pub service: String,
    pub name: String,
    pub addr: String,
    /// Whether the service runs active health checks.
    pub checked: bool,
    pub healthy: bool,
    /// `off`, `closed`, `open` or `half-open`.
    pub breaker: &'static str,
    pub ejected: bool,
    pub in_flight: u64,
    pub requests: u64,
    pub connect_errors: u64,
}

/// Everything at one moment.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub revision: u64,
    pub routes: Vec<RouteCounts>,
    /// Apps with requests, at most [`MAX_APPS`], the busiest first.
    pub apps: Vec<AppCounts>,
    /// Apps with requests, in all.
    pub apps_called: usize,
    pub endpoints: Vec<EndpointNow>,
    /// Requests answered before a route was chosen, by class.
    pub unrouted: [u64; 5],
}

/// The split entries of the route named `route` in `snap`, with their
/// cumulative counters; `None` when it has no such route or the route has
/// no split. What the rollout controller reads, twice per window.
pub fn split(snap: &Snapshot, route: &str) -> Option<Vec<SplitEntryCounts>> {
    let r = snap.routes.iter().find(|r| &*r.name == route)?;
    let ActionRt::Proxy { split: Some(_), .. } = &r.action else {
        return None;
    };
    Some(split_counts(r))
}

fn split_counts(r: &crate::snapshot::RouteRt) -> Vec<SplitEntryCounts> {
    let ActionRt::Proxy { split: Some(s), .. } = &r.action else {
        return Vec::new();
    };
    s.entries
        .iter()
        .map(|e| {
            let (buckets, total_us) = e.metrics.latency.read();
            SplitEntryCounts {
                service: e.metrics.service.clone(),
                weight: e.weight,
                status: e.metrics.status.classes(),
                buckets,
                total_us,
                upstream_us: e.metrics.upstream_us.load(Ordering::Relaxed),
            }
        })
        .collect()
}

/// Reads the counters of `snap`'s routes, apps and endpoints.
pub fn read(snap: &Snapshot, unrouted: [u64; 5]) -> Counts {
    let routes = snap
        .routes
        .iter()
        .map(|r| {
            let m = &r.metrics;
            let (buckets, total_us) = m.latency.read();
            RouteCounts {
                name: r.name.to_string(),
                service: match &r.action {
                    ActionRt::Proxy { service, .. } => {
                        Some(snap.service(*service).name.to_string())
                    }
                    ActionRt::Respond { .. } | ActionRt::Aggregate(_) => None,
                },
                status: m.status.classes(),
                buckets,
                total_us,
                upstream_us: m.upstream_us.load(Ordering::Relaxed),
                split: split_counts(r),
                cache: match &r.action {
                    ActionRt::Proxy {
                        extras: Some(x), ..
                    } if x.cache.is_some() => Some([
                        m.cache.hits.load(Ordering::Relaxed),
                        m.cache.misses.load(Ordering::Relaxed),
                    ]),
                    _ => None,
                },
            }
        })
        .collect();
    let mut apps: Vec<AppCounts> = snap
        .apps
        .iter()
        .filter(|(_, s)| s.requests.load(Ordering::Relaxed) > 0)
        .map(|(id, s)| AppCounts {
            id: id.to_string(),
            requests: s.requests.load(Ordering::Relaxed),
            forbidden: s.forbidden.load(Ordering::Relaxed),
            limited: s.limited.load(Ordering::Relaxed),
            client_errors: s.client_errors.load(Ordering::Relaxed),
            server_errors: s.server_errors.load(Ordering::Relaxed),
            latency_us: s.latency_us.load(Ordering::Relaxed),
        })
        .collect();
    let apps_called = apps.len();
    apps.sort_unstable_by(|a, b| b.requests.cmp(&a.requests).then(a.id.cmp(&b.id)));
    apps.truncate(MAX_APPS);
    let now = crate::clock::mono_ns(Instant::now());
    let mut endpoints = Vec::new();
    for svc in snap.services.iter() {
        for e in &svc.endpoints {
            endpoints.push(EndpointNow {
                service: svc.name.to_string(),
                name: e.name.clone(),
                addr: e.addr.to_string(),
                checked: svc.health.is_some(),
                healthy: e.is_healthy(),
                breaker: e.breaker.state(now),
                ejected: e.eject.is_ejected(now),
                in_flight: e.in_flight() as u64,
                requests: e.requests.load(Ordering::Relaxed),
                connect_errors: e.connect_errors.load(Ordering::Relaxed),
            });
        }
    }
    Counts {
        revision: snap.generation,
        routes,
        apps,
        apps_called,
        endpoints,
        unrouted,
    }
}
