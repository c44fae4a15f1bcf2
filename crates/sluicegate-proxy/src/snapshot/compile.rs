//! Compiling a validated config into a [`Snapshot`]: services with their
//! endpoints, balancers and retry budgets, the router, the apps table, and
//! each route's action and filters, reusing what the [`Registry`] kept.
//! The registry changes only once everything has compiled.

use std::collections::HashMap;
use std::sync::Arc;

use sluicegate_config::{Action, Auth, Config, LimitKey, Plan};

use super::authz::{AuthzRt, DecisionCache, ExtAuthzRt, ForwardAuthRt};
use super::split::SplitRt;
use super::{ActionRt, Registry, RouteRt, ServiceRt, Snapshot};
use crate::apps::limit::PlanRt;
use crate::apps::AppTable;
use crate::balance::balancer::BalancerState;
use crate::balance::budget::RetryBudget;
use crate::balance::endpoint::EndpointState;
use crate::cluster::{GlobalRt, Globals, Holder, KeyedGlobal};
use crate::filters::{
    AppKeyAuth, CorsPolicy, Filter, Filters, HeaderOpsRt, HeaderPolicy, IpFilter, JwtAuth,
    JwtShared, KeySource, MtlsAuth, MtlsIndex, PathRewrite, PlanLimit, RouteCounters, RouteLimiter,
};
use crate::observe::accesslog::Sink;
use crate::observe::metrics::{RouteMetrics, SplitMetrics};
use crate::route::router::Router;
use crate::route::template::Expand;
use crate::transport::listener::ListenerRt;
use crate::transport::tls::client::UpstreamTlsRt;

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
        let discovered = match reg.discovered.get(&svc.name) {
            Some(d) if !svc.discovery.is_empty() => d.clone(),
            _ => Vec::new(),
        };
        let m = super::members::build(svc, &discovered, reg);
        for (key, state) in m.keys.into_iter().zip(&m.eps) {
            breakers.push((state.clone(), svc.breaker.clone(), svc.ejection.clone()));
            endpoint_order.push((name.clone(), state.clone()));
            live_endpoints.insert(key, state.clone());
        }
        live_balancers.insert(svc.name.clone(), (m.fingerprint, m.bstate));
        let (eps, balancer) = (m.eps, m.balancer);
        let tokens = reg
            .budgets
            .get(&svc.name)
            .cloned()
            .unwrap_or_else(RetryBudget::fresh_tokens);
        live_budgets.insert(svc.name.clone(), tokens.clone());
        let tls = match &svc.tls {
            None => None,
            Some(t) => Some(Arc::new(
                UpstreamTlsRt::new(t, svc.protocol)
                    .map_err(|e| format!("services[{index}].{e}"))?,
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
                protocol: svc.protocol,
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
    let mut globals = Vec::new();
    let mut keyed_globals = Vec::new();
    // A plan with a global quota may have to wait for Redis near the
    // quota's end: the routes that charge plans then run their filters
    // with awaits (the others never do).
    let plans_wait = config
        .plans
        .iter()
        .any(|p| p.scope == sluicegate_config::Scope::Global && p.quota.is_some());
    let mut route_order = Vec::new();
    let mut live_splits = HashMap::new();
    let mut split_order = Vec::new();
    let mut live_parts = HashMap::new();
    let mut part_order = Vec::new();
    let mut live_auth_caches = HashMap::new();
    let mut live_endpoints = live_endpoints;
    let app_key_sources = Arc::new(config.app_key.clone());
    let mut mtls_index: Option<Arc<MtlsIndex>> = None;
    // OpenID Connect issuers: kept (keys, token cache, counters) while
    // their settings stay the same.
    let issuers: Vec<Arc<crate::apps::jwks::IssuerState>> = config
        .jwt
        .issuers
        .iter()
        .map(|c| {
            reg.jwt_issuers
                .iter()
                .find(|s| s.is_for(c, config.jwt.leeway))
                .cloned()
                .unwrap_or_else(|| {
                    Arc::new(crate::apps::jwks::IssuerState::new(c, config.jwt.leeway))
                })
        })
        .collect();
    let mut jwt_shared: Option<Arc<JwtShared>> = None;
    if config.cache.is_none() {
        // No store configured: the kept one's objects are let go.
        reg.cache_store = None;
    }
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
                split,
            } => ActionRt::Proxy {
                service: services
                    .get(service.as_str())
                    .map(|s| s.index)
                    .ok_or_else(|| format!("route {}: unknown service {service}", r.name))?,
                strip_prefix: *strip_prefix,
                upgrade: super::Upgrades::new(
                    r.upgrade.iter().map(|u| u.as_str().into()).collect(),
                ),
                extras: {
                    let (authz, auth_service) = authz(
                        r,
                        &services,
                        reg,
                        &mut live_endpoints,
                        &mut live_auth_caches,
                    )?;
                    super::ProxyExtras {
                        fault: r
                            .fault
                            .as_ref()
                            .map(|f| Box::new(crate::filters::fault::FaultRt::new(f))),
                        mirror: match &r.mirror {
                            None => None,
                            Some(m) => {
                                let index = services
                                    .get(m.service.as_str())
                                    .map(|s| s.index)
                                    .ok_or_else(|| {
                                        format!(
                                            "route {}: mirror: unknown service {}",
                                            r.name, m.service
                                        )
                                    })?;
                                let rt = crate::filters::mirror::MirrorRt::new(m, index);
                                Some(Box::new(rt))
                            }
                        },
                        fallback: match &r.fallback {
                            None => None,
                            Some(f) => Some(Box::new(
                                super::fallback::FallbackRt::new(f, |n| {
                                    services.get(n).map(|s| s.index)
                                })
                                .map_err(|e| format!("route {}: {e}", r.name))?,
                            )),
                        },
                        compress: r
                            .compress
                            .as_ref()
                            .map(|c| Box::new(crate::filters::compress::CompressRt::new(c))),
                        cache: match (&r.cache, &config.cache) {
                            (Some(c), Some(store)) => {
                                let store = super::cache::store_for(store, &mut reg.cache_store);
                                Some(Box::new(super::cache::CacheRt::new(c, store)))
                            }
                            (Some(_), None) => {
                                return Err(format!(
                                    "route {}: cache without the top-level cache",
                                    r.name
                                ))
                            }
                            (None, _) => None,
                        },
                        authz,
                        auth_service,
                    }
                    .boxed()
                },
                split: match split {
                    None => None,
                    Some(sp) => {
                        let index = |name: &str| services.get(name).map(|s| s.index);
                        let metrics = |svc: &str| {
                            let key = (r.name.clone(), svc.to_string());
                            let m = reg
                                .splits
                                .get(&key)
                                .cloned()
                                .unwrap_or_else(|| Arc::new(SplitMetrics::new(&r.name, svc)));
                            live_splits.insert(key, m.clone());
                            split_order.push(m.clone());
                            m
                        };
                        let rt = SplitRt::new(sp, index, metrics)
                            .map_err(|e| format!("route {}: split: {e}", r.name))?;
                        Some(Box::new(rt))
                    }
                },
            },
            Action::Respond {
                status,
                body,
                headers,
            } => {
                let mut fields = crate::proto::fields::Fields::new();
                for (k, v) in headers {
                    fields.push(k.as_bytes(), v.as_bytes());
                }
                ActionRt::Respond {
                    head: crate::proto::response::FixedHead::new(*status, fields),
                    body: body.as_bytes().into(),
                }
            }
            Action::Aggregate(parts) => {
                let template = match &r.matcher.path {
                    sluicegate_config::PathMatch::Template(t) => Some(t),
                    _ => None,
                };
                let index = |name: &str| services.get(name).map(|s| s.index);
                let metrics = |part: &str| {
                    let key = (r.name.clone(), part.to_string());
                    let m = reg.parts.get(&key).cloned().unwrap_or_else(|| {
                        Arc::new(crate::observe::metrics::PartMetrics::new(&r.name, part))
                    });
                    live_parts.insert(key, m.clone());
                    part_order.push(m.clone());
                    m
                };
                let rt = super::aggregate::AggregateRt::new(parts, template, index, metrics)
                    .map_err(|e| format!("route {}: aggregate: {e}", r.name))?;
                ActionRt::Aggregate(Box::new(rt))
            }
        };
        let mut filters: Vec<Box<dyn Filter>> = Vec::new();
        if !r.ip.is_empty() {
            filters.push(Box::new(IpFilter(r.ip.clone())));
        }
        // The route's own limit first: it also bounds key guessing. A
        // limit per app (known after auth) runs after auth, before the
        // app's plan (so a request it refuses spends none of the plan).
        let mut late_limit: Option<Box<dyn Filter>> = None;
        if let Some(l) = &r.limit {
            let global = l.scope == sluicegate_config::Scope::Global;
            let counters = match (reg.route_limits.get(&r.name), &l.per) {
                (Some(c @ RouteCounters::Route(_)), LimitKey::Route) => c.clone(),
                (Some(c @ RouteCounters::ClientIp(_)), LimitKey::ClientIp) if !global => c.clone(),
                (_, LimitKey::Route) => RouteCounters::Route(Arc::default()),
                (_, LimitKey::ClientIp) if !global => RouteCounters::ClientIp(Arc::default()),
                (old, per) => keyed_counters(old, &r.matcher, per, global)
                    .ok_or_else(|| format!("route {}: limit.per names no parameter", r.name))?,
            };
            live_route_limits.insert(r.name.clone(), counters.clone());
            let plan = PlanRt::new(&Plan {
                name: r.name.clone(),
                rate: l.rate,
                burst: l.burst,
                quota: None,
                concurrency: l.concurrency,
                scope: l.scope,
                on_failure: l.on_failure,
            });
            if plan.global.is_some() {
                match &counters {
                    RouteCounters::Route(state) => globals.push(GlobalRt {
                        key: format!("sg:{{route:{}}}", r.name).into(),
                        holder: Holder::Route(state.clone()),
                        plan: plan.clone(),
                    }),
                    RouteCounters::Keyed { table, name, .. } => keyed_globals.push(KeyedGlobal {
                        prefix: format!("sg:{{rk:{}:{name}:", r.name).into(),
                        table: table.clone(),
                        plan: plan.clone(),
                    }),
                    // A global limit per client is keyed (above).
                    RouteCounters::ClientIp(_) => {}
                }
            }
            let filter = Box::new(RouteLimiter { plan, counters });
            if l.per.after_auth() {
                late_limit = Some(filter);
            } else {
                filters.push(filter);
            }
        }
        // Preflights carry no credentials: answered before auth.
        if let Some(c) = &r.cors {
            filters.push(Box::new(CorsPolicy::new(c)));
        }
        let plan_limit = || Box::new(PlanLimit { waits: plans_wait });
        if r.auth == Auth::AppKey {
            filters.push(Box::new(AppKeyAuth {
                sources: app_key_sources.clone(),
            }));
            filters.extend(late_limit.take());
            filters.push(plan_limit());
        }
        if r.auth == Auth::Jwt {
            let shared = jwt_shared
                .get_or_insert_with(|| {
                    Arc::new(JwtShared::new(&config.jwt, issuers.clone(), &config.plans))
                })
                .clone();
            filters.push(Box::new(JwtAuth::new(shared, &r.scopes)));
            filters.extend(late_limit.take());
            filters.push(plan_limit());
        }
        if r.auth == Auth::Mtls {
            let index = mtls_index
                .get_or_insert_with(|| Arc::new(MtlsIndex::new(&config.apps)))
                .clone();
            filters.push(Box::new(MtlsAuth { index }));
            filters.extend(late_limit.take());
            filters.push(plan_limit());
        }
        // Last, so a policy can also drop what an earlier filter left.
        let template = match &r.matcher.path {
            sluicegate_config::PathMatch::Template(t) => Some(t),
            _ => None,
        };
        let (request, templated) = request_ops(&r.request_headers, template);
        let response = HeaderOpsRt::new(&r.response_headers).map(Arc::new);
        if request.is_some() || response.is_some() || !templated.is_empty() {
            filters.push(Box::new(HeaderPolicy {
                request,
                response,
                templated,
            }));
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
            // A name that is a capture group of the regex means the group.
            let params = template.and_then(|t| {
                Expand::new(&rw.replacement, |name| {
                    let group = match name.parse::<usize>() {
                        Ok(i) => i < regex.captures_len(),
                        Err(_) => regex.capture_names().flatten().any(|g| g == name),
                    };
                    if group {
                        None
                    } else {
                        t.param_index(name)
                    }
                })
            });
            filters.push(Box::new(PathRewrite {
                regex,
                replacement: rw.replacement.as_bytes().to_vec(),
                strip,
                params,
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
    for old in &reg.jwt_issuers {
        if !issuers.iter().any(|i| Arc::ptr_eq(i, old)) {
            old.retired
                .store(true, std::sync::atomic::Ordering::Release);
            old.wake.notify_one();
        }
    }
    reg.jwt_issuers = issuers;
    reg.auth_caches = live_auth_caches;
    // The mirror service each route's copies are counted under now.
    for (r, rt) in config.routes.iter().zip(&routes) {
        let service = r.mirror.as_ref().map(|m| Arc::from(m.service.as_str()));
        if let Ok(mut label) = rt.metrics.mirror.service.lock() {
            *label = service;
        }
    }
    reg.route_order = route_order;
    reg.splits = live_splits;
    reg.split_order = split_order;
    reg.parts = live_parts;
    reg.part_order = part_order;
    reg.endpoint_order = endpoint_order;
    reg.service_cfg = config
        .services
        .iter()
        .map(|s| (s.name.clone(), Arc::new(s.clone())))
        .collect();
    reg.discovered.retain(|name, _| {
        reg.service_cfg
            .get(name)
            .is_some_and(|s| !s.discovery.is_empty())
    });
    reg.dns = config.dns.clone();
    reg.discovery_etcd = config.discovery_etcd().cloned();
    reg.generation += 1;
    let services_in_order = config
        .services
        .iter()
        .filter_map(|s| services.get(s.name.as_str()).cloned())
        .collect();
    for (key, slot, plan) in apps.global_slots() {
        globals.push(GlobalRt {
            key: key.into(),
            holder: Holder::App(slot),
            plan: plan.clone(),
        });
    }
    let globals = Arc::new(Globals {
        apps: (!globals.is_empty()).then(|| apps.clone()),
        list: globals,
        keyed: keyed_globals,
    });
    Ok(Snapshot {
        globals,
        router: Arc::new(router),
        services: services_in_order,
        routes: routes.into(),
        limits: config.limits.clone(),
        timeouts: config.timeouts.clone(),
        busy_poll: config.busy_poll,
        io_uring: config.io_uring,
        access_log,
        ip: config.ip.clone(),
        generation: reg.generation,
        apps,
        listeners,
        trusted_proxies: config.trusted_proxies.clone(),
        request_id_header: config.request_id.header.as_bytes().into(),
        sampler: config
            .tracing
            .as_ref()
            .map(|t| crate::observe::trace::Sampler::new(t.ratio)),
    })
}

/// A route's checks, and its own forward-auth service if it has one.
type RouteAuthz = (Option<Box<AuthzRt>>, Option<Arc<ServiceRt>>);

/// The route's `forward_auth` and `ext_authz`, compiled: a URL with an
/// address gets a one-endpoint service of the route's own (its endpoint
/// kept in the registry like a service's, under `forward_auth:ROUTE`),
/// whose timeouts are the check's; the decision cache is kept while the
/// route's `forward_auth` stays the same.
fn authz(
    r: &sluicegate_config::Route,
    services: &HashMap<&str, Arc<ServiceRt>>,
    reg: &mut Registry,
    live_endpoints: &mut HashMap<(String, String, usize), Arc<EndpointState>>,
    live_caches: &mut HashMap<String, (sluicegate_config::ForwardAuth, Arc<DecisionCache>)>,
) -> Result<RouteAuthz, String> {
    use sluicegate_config::{AuthTarget, UpstreamProtocol};
    let index = |name: &str, what: &str| {
        services
            .get(name)
            .map(|s| s.index)
            .ok_or_else(|| format!("route {}: {what}: unknown service {name}", r.name))
    };
    let header = |name: &String| {
        http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("route {}: bad header name {name}", r.name))
    };
    let mut own = None;
    let forward = match r.forward_auth.as_deref() {
        None => None,
        Some(f) => {
            let service = match &f.target {
                AuthTarget::Service(name) => Some(index(name, "forward_auth")?),
                AuthTarget::Address { addr, https } => {
                    let name = format!("forward_auth:{}", r.name);
                    let svc = sluicegate_config::Service {
                        name: name.clone(),
                        endpoints: vec![sluicegate_config::Endpoint {
                            name: addr.to_string(),
                            addr: *addr,
                            weight: 1,
                        }],
                        discovery: Default::default(),
                        balance: sluicegate_config::Balance::RoundRobin,
                        hash_key: sluicegate_config::HashKey::ClientIp,
                        max_connections_per_endpoint: 1024,
                        timeouts: sluicegate_config::UpstreamTimeouts {
                            connect: f.timeout,
                            response_header: f.timeout,
                            response_body: f.timeout,
                            request: f.timeout,
                            ..Default::default()
                        },
                        health: None,
                        retries: sluicegate_config::Retries {
                            attempts: 1,
                            ..Default::default()
                        },
                        breaker: None,
                        ejection: None,
                        forwarded_headers: true,
                        tls: https.then(sluicegate_config::UpstreamTls::default),
                        protocol: UpstreamProtocol::Http1,
                    };
                    let m = super::members::build(&svc, &[], reg);
                    for (key, state) in m.keys.into_iter().zip(&m.eps) {
                        live_endpoints.insert(key, state.clone());
                    }
                    let tls = match &svc.tls {
                        None => None,
                        Some(t) => Some(Arc::new(
                            UpstreamTlsRt::new(t, svc.protocol)
                                .map_err(|e| format!("route {}: forward_auth.url: {e}", r.name))?,
                        )),
                    };
                    own = Some(Arc::new(ServiceRt {
                        name: name.into(),
                        index: u32::MAX,
                        endpoints: m.eps,
                        balancer: m.balancer,
                        timeouts: svc.timeouts.clone(),
                        health: None,
                        retries: RetryBudget::with_tokens(
                            svc.retries.clone(),
                            RetryBudget::fresh_tokens(),
                        ),
                        forwarded_headers: true,
                        tls,
                        protocol: svc.protocol,
                    }));
                    None
                }
            };
            let cache = if f.cache.is_zero() {
                None
            } else {
                let kept = match reg.auth_caches.get(&r.name) {
                    Some((cfg, c)) if cfg == f => c.clone(),
                    _ => Arc::new(DecisionCache::new(f.cache)),
                };
                live_caches.insert(r.name.clone(), (f.clone(), kept.clone()));
                Some(kept)
            };
            Some(ForwardAuthRt {
                service,
                path: http::uri::PathAndQuery::try_from(f.path.as_str())
                    .map_err(|_| format!("route {}: forward_auth.url: bad path", r.name))?,
                request_headers: f
                    .request_headers
                    .iter()
                    .map(header)
                    .collect::<Result<_, _>>()?,
                response_headers: f
                    .response_headers
                    .iter()
                    .map(header)
                    .collect::<Result<_, _>>()?,
                timeout: f.timeout,
                on_error: f.on_error,
                cache,
            })
        }
    };
    let ext = match &r.ext_authz {
        None => None,
        Some(e) => {
            let i = index(&e.service, "ext_authz")?;
            if !services[e.service.as_str()].protocol.http2() {
                return Err(format!(
                    "route {}: ext_authz: service {} must speak HTTP/2 (protocol: h2c or h2) for gRPC",
                    r.name, e.service
                ));
            }
            Some(ExtAuthzRt {
                service: i,
                timeout: e.timeout,
                on_error: e.on_error,
            })
        }
    };
    let rt = (forward.is_some() || ext.is_some()).then(|| Box::new(AuthzRt { forward, ext }));
    Ok((rt, own))
}

/// A keyed route limit's counters (per parameter, header, app, or client
/// address with `scope: global`): the
/// table of the route's last snapshot when it counted by the same key with
/// the same scope (a global table's keys are the fleet's), else a new one.
/// `None` when `per` names no parameter of the route's template.
fn keyed_counters(
    old: Option<&RouteCounters>,
    m: &sluicegate_config::Match,
    per: &LimitKey,
    global: bool,
) -> Option<RouteCounters> {
    let (source, name): (KeySource, Arc<str>) = match per {
        LimitKey::Param(index) => {
            let sluicegate_config::PathMatch::Template(t) = &m.path else {
                return None;
            };
            let name = t.params().nth(*index)?;
            (KeySource::Param(*index), format!("param:{name}").into())
        }
        LimitKey::Header(h) => (
            KeySource::Header(h.as_bytes().into()),
            format!("header:{h}").into(),
        ),
        LimitKey::App => (KeySource::App, "app".into()),
        LimitKey::Claim(c) => (
            KeySource::Claim(c.as_str().into()),
            format!("claim:{c}").into(),
        ),
        LimitKey::ClientIp => (KeySource::ClientIp, "client_ip".into()),
        LimitKey::Route => return None,
    };
    let table = match old {
        Some(RouteCounters::Keyed { table, name: n, .. })
            if *n == name && table.is_fleet() == global =>
        {
            table.clone()
        }
        _ if global => Arc::new(crate::apps::limit::ParamLimits::for_fleet()),
        _ => Arc::default(),
    };
    Some(RouteCounters::Keyed {
        table,
        source,
        name,
    })
}

/// A route's `request_headers` compiled; on a template route, the `set`
/// and `add` values that name its parameters apart (a `set` one's name
/// still dropped from the request), to be written per request.
fn request_ops(
    ops: &sluicegate_config::HeaderOps,
    template: Option<&sluicegate_config::PathTemplate>,
) -> (Option<HeaderOpsRt>, crate::filters::Templated) {
    let Some(t) = template else {
        return (HeaderOpsRt::new(ops), Box::default());
    };
    let mut plain = ops.clone();
    let mut templated = Vec::new();
    let mut split = |list: &mut Vec<(String, String)>, set: bool| {
        list.retain(
            |(name, value)| match Expand::new(value, |n| t.param_index(n)) {
                None => true,
                Some(e) => {
                    templated.push((name.as_bytes().into(), e));
                    if set {
                        plain.remove.push(name.to_ascii_lowercase());
                    }
                    false
                }
            },
        )
    };
    let (mut set, mut add) = (
        std::mem::take(&mut plain.set),
        std::mem::take(&mut plain.add),
    );
    split(&mut set, true);
    split(&mut add, false);
    plain.set = set;
    plain.add = add;
    (HeaderOpsRt::new(&plain), templated.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(path: &str, per: &str) -> Config {
        sluicegate_config::parse(&format!(
            "listen: [\"127.0.0.1:9\"]\nroutes:\n  - name: b\n    match: {{ path: \"{path}\" }}\n    limit: {{ rate: 1/h, per: \"{per}\" }}\n    respond: {{}}\n"
        ))
        .unwrap()
    }

    fn table(reg: &Registry) -> (Arc<crate::apps::limit::ParamLimits>, usize) {
        match reg.route_limits.get("b") {
            Some(RouteCounters::Keyed {
                table,
                source: KeySource::Param(index),
                ..
            }) => (table.clone(), *index),
            other => panic!("{other:?}"),
        }
    }

    /// A reload keeps a parameter's counters while the route counts by a
    /// parameter of the same name, wherever it moved in the template.
    #[test]
    fn parameter_counters_survive_reloads_by_name() {
        let mut reg = Registry::default();
        compile(&config("/b/{id}", "param:id"), &mut reg).unwrap();
        let (first, _) = table(&reg);
        compile(&config("/x/{v:int}/{id}", "param:id"), &mut reg).unwrap();
        let (kept, index) = table(&reg);
        assert!(Arc::ptr_eq(&first, &kept));
        assert_eq!(index, 1);
        compile(&config("/x/{v:int}/{id}", "param:v"), &mut reg).unwrap();
        assert!(!Arc::ptr_eq(&first, &table(&reg).0));
    }
}
