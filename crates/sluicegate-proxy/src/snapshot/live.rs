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
                    ActionRt::Respond { .. } => None,
                },
                status: m.status.classes(),
                buckets,
                total_us,
                upstream_us: m.upstream_us.load(Ordering::Relaxed),
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
