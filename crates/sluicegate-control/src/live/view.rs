//! The bodies of the live-state API, built from samples: what `/live` and
//! `/live/endpoints` answer, with their OpenAPI schemas.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;
use sluicegate_proxy::live::{AppCounts, Counts};
use utoipa::ToSchema;

use super::sample::Sample;
use super::window::{round, Classes, Sum, Traffic};

/// `GET /live`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Live {
    /// The running config revision (the `ETag`).
    pub revision: u64,
    /// Seconds the window figures cover (shorter just after start).
    pub window_seconds: f64,
    /// The whole gateway, requests that matched no route included.
    pub total: Traffic,
    pub routes: Vec<RouteLive>,
    pub services: Vec<ServiceLive>,
    /// Apps that made requests, the busiest first (at most 500).
    pub apps: Vec<AppLive>,
    /// Apps that made requests, in all.
    pub apps_called: usize,
    pub endpoints: Vec<EndpointLive>,
    /// The last minute, one point a second, oldest first.
    pub series: Vec<Point>,
}

/// One route's traffic.
#[derive(Serialize, ToSchema)]
pub(crate) struct RouteLive {
    pub name: String,
    /// The service it proxies to (none: a fixed answer); on a split
    /// route, its first entry's.
    pub service: Option<String>,
    /// On a split route, its services and their weights now.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub split: Vec<SplitShare>,
    /// On a caching route, its cache's lookups since it was configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheLive>,
    #[serde(flatten)]
    pub traffic: Traffic,
}

/// A caching route's lookups, since it was configured.
#[derive(Serialize, ToSchema)]
pub(crate) struct CacheLive {
    /// Answered from memory.
    pub hits: u64,
    /// Gone upstream.
    pub misses: u64,
    /// `hits / (hits + misses)`; `null` before any lookup.
    pub hit_ratio: Option<f64>,
}

/// One service of a split route and its weight.
#[derive(Serialize, ToSchema)]
pub(crate) struct SplitShare {
    pub service: String,
    pub weight: u32,
}

/// One service's traffic (over the routes that proxy to it) and endpoints.
#[derive(Serialize, ToSchema)]
pub(crate) struct ServiceLive {
    pub name: String,
    #[serde(flatten)]
    pub traffic: Traffic,
    pub endpoints: usize,
    /// Endpoints a balancer may pick now (healthy, not ejected, circuit
    /// not open).
    pub endpoints_up: usize,
}

/// One app's traffic.
#[derive(Serialize, ToSchema)]
pub(crate) struct AppLive {
    pub id: String,
    /// Requests authenticated as the app since start.
    pub requests: u64,
    /// Refused 403 and 429 since start.
    pub forbidden: u64,
    pub limited: u64,
    /// Answered 4xx and 5xx since start.
    pub client_errors: u64,
    pub server_errors: u64,
    /// Requests per second over the window.
    pub rate: f64,
    /// Mean latency over the window, in milliseconds.
    pub mean_ms: Option<f64>,
}

/// One endpoint now.
#[derive(Serialize, ToSchema)]
pub(crate) struct EndpointLive {
    pub service: String,
    pub name: String,
    pub addr: String,
    /// `up` or `down` by the active health checks; `unchecked` when the
    /// service runs none.
    pub health: &'static str,
    /// `off` (no breaker), `closed`, `open` or `half-open`.
    pub breaker: &'static str,
    /// Out of rotation for a while after a failed connect.
    pub ejected: bool,
    /// `up`, or why a balancer skips it: `down`, `open`, `ejected`.
    pub state: &'static str,
    pub in_flight: u64,
    pub requests: u64,
    pub connect_errors: u64,
}

/// `GET /live/endpoints`.
#[derive(Serialize, ToSchema)]
pub(crate) struct Endpoints {
    pub revision: u64,
    pub endpoints: Vec<EndpointLive>,
}

/// One second of the whole gateway.
#[derive(Serialize, ToSchema)]
pub(crate) struct Point {
    /// Milliseconds since the Unix epoch.
    pub t: u64,
    pub rate: f64,
    /// 4xx and 5xx per second.
    pub errors: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

fn total(c: &Counts) -> Sum {
    let mut s = Sum::default();
    for r in &c.routes {
        s.add(r);
    }
    for (a, b) in s.status.iter_mut().zip(c.unrouted) {
        *a += b;
    }
    s
}

fn by_route(c: &Counts) -> HashMap<&str, Sum> {
    let mut m = HashMap::new();
    for r in &c.routes {
        let mut s = Sum::default();
        s.add(r);
        m.insert(r.name.as_str(), s);
    }
    m
}

fn by_service(c: &Counts) -> BTreeMap<&str, Sum> {
    let mut m: BTreeMap<&str, Sum> = BTreeMap::new();
    for e in &c.endpoints {
        m.entry(e.service.as_str()).or_default();
    }
    for r in &c.routes {
        // A split route's requests count for the service that took them.
        for e in &r.split {
            m.entry(e.service.as_str()).or_default().add_split(e);
        }
        match &r.service {
            Some(svc) if r.split.is_empty() => m.entry(svc.as_str()).or_default().add(r),
            _ => {}
        }
    }
    m
}

fn endpoint_list(c: &Counts) -> Vec<EndpointLive> {
    c.endpoints
        .iter()
        .map(|e| {
            let health = match (e.checked, e.healthy) {
                (false, _) => "unchecked",
                (true, true) => "up",
                (true, false) => "down",
            };
            let state = match () {
                _ if health == "down" => "down",
                _ if e.breaker == "open" => "open",
                _ if e.ejected => "ejected",
                _ => "up",
            };
            EndpointLive {
                service: e.service.clone(),
                name: e.name.clone(),
                addr: e.addr.clone(),
                health,
                breaker: e.breaker,
                ejected: e.ejected,
                state,
                in_flight: e.in_flight,
                requests: e.requests,
                connect_errors: e.connect_errors,
            }
        })
        .collect()
}

pub(crate) fn endpoints(c: &Counts) -> Endpoints {
    Endpoints {
        revision: c.revision,
        endpoints: endpoint_list(c),
    }
}

fn app(now: &AppCounts, old: Option<&AppCounts>, secs: f64) -> AppLive {
    let (req0, lat0) = old.map_or((0, 0), |o| (o.requests, o.latency_us));
    let n = now.requests.saturating_sub(req0);
    let us = now.latency_us.saturating_sub(lat0);
    AppLive {
        id: now.id.clone(),
        requests: now.requests,
        forbidden: now.forbidden,
        limited: now.limited,
        client_errors: now.client_errors,
        server_errors: now.server_errors,
        rate: if secs > 0.0 {
            round(n as f64 / secs, 2)
        } else {
            0.0
        },
        mean_ms: (n > 0).then(|| round(us as f64 / n as f64 / 1000.0, 3)),
    }
}

/// The body of `GET /live`: `now` against `old` (none, as on the first
/// call after a while: an empty window).
pub(crate) fn live(now: &Sample, old: Option<&Sample>, history: &[Arc<Sample>]) -> Live {
    let c = &now.counts;
    let (base, span) = match old {
        Some(o) => (&o.counts, now.at.duration_since(o.at).as_secs_f64()),
        None => (c, 0.0),
    };
    let old_routes = by_route(base);
    let zero = Sum::default();
    let routes = c
        .routes
        .iter()
        .map(|r| {
            let mut s = Sum::default();
            s.add(r);
            let o = old_routes.get(r.name.as_str()).unwrap_or(&zero);
            RouteLive {
                name: r.name.clone(),
                service: r.service.clone(),
                split: r
                    .split
                    .iter()
                    .map(|e| SplitShare {
                        service: e.service.clone(),
                        weight: e.weight,
                    })
                    .collect(),
                cache: r.cache.map(|[hits, misses]| CacheLive {
                    hits,
                    misses,
                    hit_ratio: (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64),
                }),
                traffic: Traffic::of(&s, o, span),
            }
        })
        .collect();
    let old_services = by_service(base);
    let list = endpoint_list(c);
    let services = by_service(c)
        .into_iter()
        .map(|(name, s)| {
            let eps = list.iter().filter(|e| e.service == name);
            ServiceLive {
                name: name.to_string(),
                traffic: Traffic::of(&s, old_services.get(name).unwrap_or(&zero), span),
                endpoints: eps.clone().count(),
                endpoints_up: eps.filter(|e| e.state == "up").count(),
            }
        })
        .collect();
    let old_apps: HashMap<&str, &AppCounts> =
        base.apps.iter().map(|a| (a.id.as_str(), a)).collect();
    let apps = c
        .apps
        .iter()
        .map(|a| app(a, old_apps.get(a.id.as_str()).copied(), span))
        .collect();
    Live {
        revision: c.revision,
        window_seconds: round(span, 3),
        total: Traffic::of(&total(c), &total(base), span),
        routes,
        services,
        apps,
        apps_called: c.apps_called,
        endpoints: list,
        series: series(history),
    }
}

/// One point per pair of consecutive samples.
fn series(history: &[Arc<Sample>]) -> Vec<Point> {
    history
        .windows(2)
        .map(|w| {
            let (a, b) = (total(&w[0].counts), total(&w[1].counts));
            let secs = w[1].at.duration_since(w[0].at).as_secs_f64().max(0.001);
            let t = Traffic::of(&b, &a, secs);
            let Classes { c4, c5, .. } = t.window;
            Point {
                t: w[1].unix_ms,
                rate: t.rate,
                errors: round((c4 + c5) as f64 / secs, 2),
                p50_ms: t.p50_ms,
                p99_ms: t.p99_ms,
            }
        })
        .collect()
}
