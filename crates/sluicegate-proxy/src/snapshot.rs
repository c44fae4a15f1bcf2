//! The runtime snapshot (router, routes, services) compiled from a validated
//! config, the state that outlives snapshots, and the atomic swap between
//! them.
//!
//! A snapshot is immutable; a reload compiles a new one off the hot path
//! and publishes it with one `ArcSwap` store. Requests in flight keep the
//! snapshot they started with. Endpoint state (pool slot, in-flight limit,
//! latency average), balancer counters and metrics are looked up in the
//! [`Registry`] by stable keys, so an unchanged service keeps them.

pub mod carry;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use sluicegate_config::{
    Action, Auth, Balance, ClientTimeouts, Config, HashKey, LimitKey, Limits, Plan,
    UpstreamTimeouts,
};

use crate::apps::limit::PlanRt;
use crate::apps::{AppTable, SlotPool};
use crate::filters::{
    AppKeyAuth, CorsPolicy, Filter, Filters, HeaderOpsRt, HeaderPolicy, IpFilter, JwtAuth,
    MtlsAuth, MtlsIndex, PathRewrite, PlanLimit, RouteCounters, RouteLimiter,
};
use crate::observe::accesslog::Sink;
use crate::observe::metrics::{GlobalMetrics, RouteMetrics};
use crate::route::router::Router;
use crate::transport::listener::{ListenerRt, ListenerState};
use crate::transport::tls::client::UpstreamTlsRt;
use crate::upstream::balancer::{Balancer, BalancerState};
use crate::upstream::budget::RetryBudget;
use crate::upstream::endpoint::EndpointState;

#[derive(Debug)]
pub struct ServiceRt {
    pub name: Arc<str>,
    /// Position in the config's service list (what app ACLs refer to).
    pub index: u32,
    pub endpoints: Vec<Arc<EndpointState>>,
    pub balancer: Balancer,
    pub timeouts: UpstreamTimeouts,
    /// Active health checks of the endpoints, if configured.
    pub health: Option<sluicegate_config::HealthCheck>,
    pub retries: RetryBudget,
    /// Write X-Forwarded-For, -Proto and -Host upstream.
    pub forwarded_headers: bool,
    /// TLS to the endpoints, when the service speaks it.
    pub(crate) tls: Option<Arc<UpstreamTlsRt>>,
}

#[derive(Debug)]
pub enum ActionRt {
    Proxy {
        service: Arc<ServiceRt>,
        strip_prefix: bool,
        /// Protocols a client may upgrade to (lower-cased `Upgrade` tokens).
        upgrade: Box<[Box<str>]>,
    },
    /// A fixed response: the status line and headers (without framing or
    /// connection headers), and the body.
    Respond {
        status: u16,
        head: Vec<u8>,
        body: Vec<u8>,
    },
}

/// A route as requests use it: two cache lines, aligned, the filters and
/// counters first, so a request for a cold route waits for two misses that
/// overlap rather than for whichever lines its fields happen to straddle.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct RouteRt {
    /// Policies run in order before the action.
    pub filters: Filters,
    pub metrics: Arc<RouteMetrics>,
    pub action: ActionRt,
    pub name: Arc<str>,
}

/// Everything a request needs, immutable once published.
#[derive(Debug)]
pub struct Snapshot {
    pub router: Router,
    /// Every service, in config order (the health checker walks them).
    pub services: Vec<Arc<ServiceRt>>,
    pub routes: Vec<RouteRt>,
    pub limits: Limits,
    pub timeouts: ClientTimeouts,
    /// `busy_poll`: how long workers poll after a request; zero: off.
    pub busy_poll: std::time::Duration,
    pub access_log: Option<Arc<Sink>>,
    /// Client address rules for every request (`ip` at the top level).
    pub ip: sluicegate_config::IpRules,
    /// Increases with every published snapshot.
    pub generation: u64,
    /// The apps the auth filters know (the access log names them).
    pub apps: Arc<AppTable>,
    /// Each listener's settings, in config order.
    pub(crate) listeners: Vec<Arc<ListenerRt>>,
    /// Peers whose `X-Forwarded-For` names the client.
    pub(crate) trusted_proxies: Vec<sluicegate_config::Cidr>,
}

impl Snapshot {
    /// The settings of the listener configured at `addr`.
    pub(crate) fn listener(&self, addr: SocketAddr) -> Option<&Arc<ListenerRt>> {
        self.listeners.iter().find(|l| l.addr == addr)
    }
}

/// State kept across snapshots, keyed by names from the config.
#[derive(Debug, Default)]
pub struct Registry {
    /// (service, endpoint name, max in flight) -> state.
    endpoints: HashMap<(String, String, usize), Arc<EndpointState>>,
    next_endpoint_id: usize,
    /// service -> (balance kind and endpoint list it was built for, state).
    balancers: HashMap<String, (String, Arc<BalancerState>)>,
    /// service -> its retry budget's tokens.
    budgets: HashMap<String, Arc<std::sync::atomic::AtomicI64>>,
    routes: HashMap<String, Arc<RouteMetrics>>,
    /// Current route metrics in config order, for rendering.
    route_order: Vec<Arc<RouteMetrics>>,
    /// Current endpoints with their service, for rendering.
    endpoint_order: Vec<(Arc<str>, Arc<EndpointState>)>,
    generation: u64,
    access_log: Option<(sluicegate_config::AccessLog, Arc<Sink>)>,
    /// Every app's counters (plan state and metrics), kept while the app
    /// exists, and the apps table in force.
    slots: SlotPool,
    apps: Option<Arc<AppTable>>,
    /// Counters of route `limit`s by route name.
    route_limits: HashMap<String, RouteCounters>,
    /// The key-hashing secret of the apps table, random per process.
    key_secret: std::collections::hash_map::RandomState,
    /// Listeners' resumption state and counters.
    listeners: ListenerState,
}

#[cfg(test)]
impl Registry {
    /// App slots in use or waiting to be reused.
    pub(crate) fn live_slots(&self) -> usize {
        self.slots.live()
    }
}

/// Process-wide state: the current snapshot, the registry, global counters.
#[derive(Debug)]
pub struct Shared {
    pub snapshot: ArcSwap<Snapshot>,
    pub registry: Mutex<Registry>,
    pub global: GlobalMetrics,
}

impl Shared {
    /// Compiles the first snapshot.
    pub fn new(config: &Config) -> Result<Arc<Shared>, String> {
        let mut registry = Registry::default();
        let snap = compile(config, &mut registry)?;
        Ok(Arc::new(Shared {
            snapshot: ArcSwap::from_pointee(snap),
            registry: Mutex::new(registry),
            global: GlobalMetrics::default(),
        }))
    }

    /// Compiles `config` and publishes it; on error the running snapshot stays.
    pub fn reload(&self, config: &Config) -> Result<u64, String> {
        let mut reg = self.registry.lock().map_err(|_| "registry poisoned")?;
        match compile(config, &mut reg) {
            Ok(snap) => {
                let generation = snap.generation;
                self.snapshot.store(Arc::new(snap));
                self.global.reloads_ok.fetch_add(1, Ordering::Relaxed);
                Ok(generation)
            }
            Err(e) => {
                self.global.reloads_failed.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Prometheus text for everything this crate counts.
    pub fn render_metrics(&self) -> String {
        let mut out = String::with_capacity(8192);
        crate::observe::metrics::render_global(&mut out, &self.global);
        let Ok(reg) = self.registry.lock() else {
            return out;
        };
        crate::observe::metrics::render_routes(&mut out, reg.route_order.iter().map(|r| &**r));
        render_endpoints(&mut out, &reg.endpoint_order);
        crate::observe::metrics::render_listeners(
            &mut out,
            &reg.listeners.counters(),
            &self.snapshot.load().listeners,
        );
        if let Some(apps) = &reg.apps {
            let mut called: Vec<_> = apps
                .iter()
                .filter(|(_, s)| s.requests.load(Ordering::Relaxed) > 0)
                .collect();
            called.sort_unstable_by(|a, b| a.0.cmp(b.0));
            crate::observe::metrics::render_apps(&mut out, called.into_iter());
        }
        out
    }
}

/// Metric name, type, help text, and how to read it from an endpoint.
type EndpointFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&EndpointState) -> u64,
);

fn render_endpoints(out: &mut String, eps: &[(Arc<str>, Arc<EndpointState>)]) {
    use crate::observe::metrics::label;
    use std::fmt::Write as _;
    let families: [EndpointFamily; 10] = [
        (
            "sluicegate_upstream_requests_total",
            "counter",
            "Requests sent to an endpoint.",
            |e| e.requests.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_connect_errors_total",
            "counter",
            "Failed connection attempts to an endpoint.",
            |e| e.connect_errors.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_retries_total",
            "counter",
            "Attempts sent to an endpoint as a retry after another failed.",
            |e| e.retries.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_healthy",
            "gauge",
            "1 while an endpoint is in rotation, 0 while its health checks fail.",
            |e| u64::from(e.is_healthy()),
        ),
        (
            "sluicegate_upstream_circuit_open",
            "gauge",
            "1 while an endpoint's circuit breaker is open (not half-open).",
            |e| {
                u64::from(
                    e.breaker
                        .is_open(crate::apps::limit::mono_ns(std::time::Instant::now())),
                )
            },
        ),
        (
            "sluicegate_upstream_circuit_opened_total",
            "counter",
            "Times an endpoint's circuit breaker opened.",
            |e| e.breaker.opened.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_ejected",
            "gauge",
            "1 while an endpoint is out of rotation after a failed connect.",
            |e| {
                u64::from(
                    e.eject
                        .is_ejected(crate::apps::limit::mono_ns(std::time::Instant::now())),
                )
            },
        ),
        (
            "sluicegate_upstream_ejections_total",
            "counter",
            "Times an endpoint left rotation after a failed connect.",
            |e| e.eject.ejections.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_upstream_in_flight",
            "gauge",
            "Requests in flight to an endpoint.",
            |e| e.in_flight() as u64,
        ),
        (
            "sluicegate_upstream_pool_idle_connections",
            "gauge",
            "Idle keep-alive connections pooled for an endpoint, all workers.",
            |e| e.idle.load(Ordering::Relaxed).max(0) as u64,
        ),
    ];
    for (name, kind, help, get) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (svc, e) in eps {
            let _ = writeln!(
                out,
                "{name}{{service=\"{}\",endpoint=\"{}\"}} {}",
                label(svc),
                label(&e.name),
                get(e)
            );
        }
    }
}

fn balancer_fingerprint(balance: Balance, key: &HashKey, eps: &[Arc<EndpointState>]) -> String {
    let mut s = format!("{balance:?}/{key:?}");
    for e in eps {
        s.push_str(&format!("/{}*{}", e.name, e.weight));
    }
    s
}

/// Builds a snapshot from a validated config, reusing registry state.
pub fn compile(config: &Config, reg: &mut Registry) -> Result<Snapshot, String> {
    // Certificates first: a file that does not load refuses the config
    // before anything else is touched.
    let listeners = crate::transport::listener::compile(config, &mut reg.listeners)?;
    let mut services: HashMap<&str, Arc<ServiceRt>> = HashMap::new();
    let mut live_endpoints = HashMap::new();
    let mut endpoint_order = Vec::new();
    let mut live_balancers = HashMap::new();
    let mut live_budgets = HashMap::new();
    let mut breakers = Vec::new();
    for (index, svc) in config.services.iter().enumerate() {
        let name: Arc<str> = svc.name.as_str().into();
        let mut eps = Vec::with_capacity(svc.endpoints.len());
        for ep in &svc.endpoints {
            let key = (
                svc.name.clone(),
                ep.name.clone(),
                svc.max_connections_per_endpoint,
            );
            let state = match reg.endpoints.get(&key) {
                Some(s) if s.addr == ep.addr && s.weight == ep.weight.max(1) => s.clone(),
                _ => {
                    let id = reg.next_endpoint_id;
                    reg.next_endpoint_id += 1;
                    Arc::new(EndpointState::new(
                        id,
                        ep.name.clone(),
                        ep.addr,
                        ep.weight,
                        svc.max_connections_per_endpoint,
                    ))
                }
            };
            breakers.push((state.clone(), svc.breaker.clone(), svc.ejection.clone()));
            endpoint_order.push((name.clone(), state.clone()));
            live_endpoints.insert(key, state.clone());
            eps.push(state);
        }
        let fp = balancer_fingerprint(svc.balance, &svc.hash_key, &eps);
        let bstate = match reg.balancers.get(&svc.name) {
            Some((old_fp, st)) if *old_fp == fp => st.clone(),
            _ => Arc::new(BalancerState::default()),
        };
        live_balancers.insert(svc.name.clone(), (fp, bstate.clone()));
        let balancer = Balancer::new(svc.balance, &svc.hash_key, &eps, bstate);
        let tokens = reg
            .budgets
            .get(&svc.name)
            .cloned()
            .unwrap_or_else(RetryBudget::fresh_tokens);
        live_budgets.insert(svc.name.clone(), tokens.clone());
        let tls = match &svc.tls {
            None => None,
            Some(t) => Some(Arc::new(
                UpstreamTlsRt::new(t).map_err(|e| format!("services[{index}].{e}"))?,
            )),
        };
        services.insert(
            &svc.name,
            Arc::new(ServiceRt {
                name,
                index: index as u32,
                endpoints: eps,
                balancer,
                timeouts: svc.timeouts.clone(),
                health: svc.health.clone(),
                retries: RetryBudget::with_tokens(svc.retries.clone(), tokens),
                forwarded_headers: svc.forwarded_headers,
                tls,
            }),
        );
    }
    let router = Router::new(config.routes.iter().map(|r| &r.matcher))?;
    let names: Vec<&str> = config.services.iter().map(|s| s.name.as_str()).collect();
    let apps = Arc::new(AppTable::new(
        config,
        &names,
        reg.apps.as_deref(),
        &mut reg.slots,
        &reg.key_secret,
        reg.generation + 1,
    )?);
    let parts = Parts {
        services,
        live_endpoints,
        endpoint_order,
        live_balancers,
        live_budgets,
        router,
        breakers,
        listeners,
    };
    match compile_routes(config, reg, apps.clone(), parts) {
        Ok(snap) => {
            reg.slots.published(&apps, reg.apps.as_deref());
            reg.apps = Some(apps);
            Ok(snap)
        }
        Err(e) => {
            reg.slots.abandoned(&apps, reg.apps.as_deref());
            Err(e)
        }
    }
}

/// What [`compile`] built before the apps table.
struct Parts<'c> {
    services: HashMap<&'c str, Arc<ServiceRt>>,
    live_endpoints: HashMap<(String, String, usize), Arc<EndpointState>>,
    endpoint_order: Vec<(Arc<str>, Arc<EndpointState>)>,
    live_balancers: HashMap<String, (String, Arc<BalancerState>)>,
    live_budgets: HashMap<String, Arc<std::sync::atomic::AtomicI64>>,
    router: Router,
    /// Breaker and ejection settings to apply once the snapshot is sure to
    /// be published.
    breakers: Vec<(
        Arc<EndpointState>,
        Option<sluicegate_config::Breaker>,
        Option<sluicegate_config::Ejection>,
    )>,
    listeners: Vec<Arc<ListenerRt>>,
}

/// The routes and their filters, then the registry's commit.
fn compile_routes(
    config: &Config,
    reg: &mut Registry,
    apps: Arc<AppTable>,
    parts: Parts<'_>,
) -> Result<Snapshot, String> {
    let Parts {
        services,
        live_endpoints,
        endpoint_order,
        live_balancers,
        live_budgets,
        router,
        breakers,
        listeners,
    } = parts;
    let mut routes = Vec::with_capacity(config.routes.len());
    let mut live_routes = HashMap::new();
    let mut live_route_limits = HashMap::new();
    let mut route_order = Vec::new();
    let app_key_sources = Arc::new(config.app_key.clone());
    let mut mtls_index: Option<Arc<MtlsIndex>> = None;
    for r in &config.routes {
        let metrics = reg
            .routes
            .get(&r.name)
            .cloned()
            .unwrap_or_else(|| Arc::new(RouteMetrics::new(&r.name)));
        live_routes.insert(r.name.clone(), metrics.clone());
        route_order.push(metrics.clone());
        let action = match &r.action {
            Action::Proxy {
                service,
                strip_prefix,
            } => ActionRt::Proxy {
                service: services
                    .get(service.as_str())
                    .cloned()
                    .ok_or_else(|| format!("route {}: unknown service {service}", r.name))?,
                strip_prefix: *strip_prefix,
                upgrade: r.upgrade.iter().map(|u| u.as_str().into()).collect(),
            },
            Action::Respond {
                status,
                body,
                headers,
            } => {
                let mut head = Vec::new();
                crate::proto::response::status_line(&mut head, *status);
                for (k, v) in headers {
                    head.extend_from_slice(k.as_bytes());
                    head.extend_from_slice(b": ");
                    head.extend_from_slice(v.as_bytes());
                    head.extend_from_slice(b"\r\n");
                }
                ActionRt::Respond {
                    status: *status,
                    head,
                    body: body.as_bytes().to_vec(),
                }
            }
        };
        let mut filters: Vec<Box<dyn Filter>> = Vec::new();
        if !r.ip.is_empty() {
            filters.push(Box::new(IpFilter(r.ip.clone())));
        }
        // The route's own limit first: it also bounds key guessing.
        if let Some(l) = &r.limit {
            let counters = match (reg.route_limits.get(&r.name), l.per) {
                (Some(c @ RouteCounters::Route(_)), LimitKey::Route) => c.clone(),
                (Some(c @ RouteCounters::ClientIp(_)), LimitKey::ClientIp) => c.clone(),
                (_, LimitKey::Route) => RouteCounters::Route(Arc::default()),
                (_, LimitKey::ClientIp) => RouteCounters::ClientIp(Arc::default()),
            };
            live_route_limits.insert(r.name.clone(), counters.clone());
            let plan = PlanRt::new(&Plan {
                name: r.name.clone(),
                rate: l.rate,
                burst: l.burst,
                quota: None,
                concurrency: l.concurrency,
            });
            filters.push(Box::new(RouteLimiter { plan, counters }));
        }
        // Preflights carry no credentials: answered before auth.
        if let Some(c) = &r.cors {
            filters.push(Box::new(CorsPolicy::new(c)));
        }
        if r.auth == Auth::AppKey {
            filters.push(Box::new(AppKeyAuth {
                apps: apps.clone(),
                sources: app_key_sources.clone(),
            }));
            filters.push(Box::new(PlanLimit));
        }
        if r.auth == Auth::Jwt {
            filters.push(Box::new(JwtAuth::new(apps.clone(), &config.jwt)));
            filters.push(Box::new(PlanLimit));
        }
        if r.auth == Auth::Mtls {
            let index = mtls_index
                .get_or_insert_with(|| Arc::new(MtlsIndex::new(&config.apps)))
                .clone();
            filters.push(Box::new(MtlsAuth {
                apps: apps.clone(),
                index,
            }));
            filters.push(Box::new(PlanLimit));
        }
        // Last, so a policy can also drop what an earlier filter left.
        let request = HeaderOpsRt::new(&r.request_headers);
        let response = HeaderOpsRt::new(&r.response_headers).map(Arc::new);
        if request.is_some() || response.is_some() {
            filters.push(Box::new(HeaderPolicy { request, response }));
        }
        if let Some(rw) = &r.rewrite {
            let regex = regex::bytes::Regex::new(&rw.regex)
                .map_err(|e| format!("route {}: rewrite.regex: {e}", r.name))?;
            let strip = matches!(
                r.action,
                Action::Proxy {
                    strip_prefix: true,
                    ..
                }
            );
            filters.push(Box::new(PathRewrite {
                regex,
                replacement: rw.replacement.as_bytes().to_vec(),
                strip,
            }));
        }
        routes.push(RouteRt {
            name: r.name.as_str().into(),
            action,
            metrics,
            filters: Filters::new(filters),
        });
    }
    let access_log = match &reg.access_log {
        Some((cfg, sink)) if *cfg == config.log.access => Some(sink.clone()),
        _ => Sink::open(&config.log.access)
            .map_err(|e| format!("log.access: cannot open: {e}"))?
            .map(Arc::new),
    };
    // Everything compiled: commit the registry changes.
    for (ep, breaker, ejection) in &breakers {
        ep.breaker.configure(breaker.as_ref());
        ep.eject.configure(ejection.as_ref());
    }
    reg.access_log = access_log.clone().map(|s| (config.log.access.clone(), s));
    reg.endpoints = live_endpoints;
    reg.balancers = live_balancers;
    reg.budgets = live_budgets;
    reg.routes = live_routes;
    reg.route_limits = live_route_limits;
    reg.route_order = route_order;
    reg.endpoint_order = endpoint_order;
    reg.generation += 1;
    let services_in_order = config
        .services
        .iter()
        .filter_map(|s| services.get(s.name.as_str()).cloned())
        .collect();
    Ok(Snapshot {
        router,
        services: services_in_order,
        routes,
        limits: config.limits.clone(),
        timeouts: config.timeouts.clone(),
        busy_poll: config.busy_poll,
        access_log,
        ip: config.ip.clone(),
        generation: reg.generation,
        apps,
        listeners,
        trusted_proxies: config.trusted_proxies.clone(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_route_is_two_cache_lines() {
        assert_eq!(std::mem::size_of::<super::RouteRt>(), 128);
        assert_eq!(std::mem::align_of::<super::RouteRt>(), 64);
    }
}
