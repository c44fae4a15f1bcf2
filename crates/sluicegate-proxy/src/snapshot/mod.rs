//! The runtime snapshot (router, routes, services) compiled from a validated
//! config, the state that outlives snapshots, and the atomic swap between
//! them.
//!
//! A snapshot is immutable; a reload compiles a new one off the hot path
//! and publishes it with one `ArcSwap` store. Requests in flight keep the
//! snapshot they started with. Endpoint state (pool slot, in-flight limit,
//! latency average), balancer counters and metrics are looked up in the
//! [`Registry`] by stable keys, so an unchanged service keeps them.
//!
//! This module holds the tables and the registry; `compile` builds a
//! snapshot from a config (a service's endpoints: `members`), `shared`
//! holds the process-wide [`Shared`] (publishing, metrics), `discovered`
//! what the discovery planes publish through it, `carry` the state an
//! upgrade hands over, and `live` a copy of the live counters for the
//! admin plane.

pub mod aggregate;
pub mod authz;
pub mod cache;
pub mod cache_admin;
pub mod carry;
mod compile;
mod discovered;
pub mod fallback;
pub mod live;
mod members;
mod shared;
pub mod split;

pub use shared::Shared;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use sluicegate_config::{ClientTimeouts, Limits, UpstreamTimeouts};

use crate::apps::{AppTable, SlotPool};
use crate::balance::balancer::{Balancer, BalancerState};
use crate::balance::budget::RetryBudget;
use crate::balance::endpoint::EndpointState;
use crate::filters::{Filters, RouteCounters};
use crate::observe::accesslog::Sink;
use crate::observe::metrics::{RouteMetrics, SplitMetrics};
use crate::route::router::Router;
use crate::transport::listener::{ListenerRt, ListenerState};
use crate::transport::tls::client::UpstreamTlsRt;

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
    /// HTTP/1.1 or HTTP/2 to the endpoints.
    pub(crate) protocol: sluicegate_config::UpstreamProtocol,
}

#[derive(Debug)]
pub enum ActionRt {
    Proxy {
        /// The service's place in [`Snapshot::services`]: a change of a
        /// service's endpoints (discovery) replaces that entry alone and
        /// shares the routes.
        service: u32,
        strip_prefix: bool,
        /// Protocols a client may upgrade to (lower-cased `Upgrade` tokens).
        upgrade: Upgrades,
        /// The route's `split`: which of its services takes a request
        /// (`service` is then the first entry's, the one app ACLs and
        /// plans are checked against); `None` for most routes.
        split: Option<Box<split::SplitRt>>,
        /// What few routes set (fault, mirror, fallback, compress, cache),
        /// in one box: `None` for most routes, which test one pointer.
        extras: Option<Box<ProxyExtras>>,
    },
    /// A fixed response: its status and header fields (without framing or
    /// connection fields), kept as HTTP/1.1 text too, and its body.
    Respond {
        head: crate::proto::response::FixedHead,
        body: Box<[u8]>,
    },
    /// Calls to services whose JSON answers make one JSON answer.
    Aggregate(Box<aggregate::AggregateRt>),
}

/// A proxy route's features that few routes set, boxed together so that a
/// route stays two cache lines whatever is added; each is `None` when the
/// route does not set it.
#[derive(Debug, Default)]
pub struct ProxyExtras {
    /// Aborts and delays injected on a share of the requests.
    pub fault: Option<Box<crate::filters::fault::FaultRt>>,
    /// The service that gets copies of a share of the requests.
    pub mirror: Option<Box<crate::filters::mirror::MirrorRt>>,
    /// What answers when the service cannot.
    pub fallback: Option<Box<fallback::FallbackRt>>,
    /// The route's response compression.
    pub compress: Option<Box<crate::filters::compress::CompressRt>>,
    /// The route's `cache`.
    pub cache: Option<Box<cache::CacheRt>>,
    /// The route's `forward_auth` and `ext_authz`.
    pub authz: Option<Box<authz::AuthzRt>>,
    /// The one-endpoint service a `forward_auth` URL with an address
    /// names.
    pub auth_service: Option<Arc<ServiceRt>>,
}

impl ProxyExtras {
    /// None of them: what a route without extras reads.
    pub(crate) const NONE: ProxyExtras = ProxyExtras {
        fault: None,
        mirror: None,
        fallback: None,
        compress: None,
        cache: None,
        authz: None,
        auth_service: None,
    };

    /// Boxed, or `None` when the route sets none of them.
    pub(crate) fn boxed(self) -> Option<Box<ProxyExtras>> {
        let any = self.fault.is_some()
            || self.mirror.is_some()
            || self.fallback.is_some()
            || self.compress.is_some()
            || self.cache.is_some()
            || self.authz.is_some();
        any.then(|| Box::new(self))
    }
}

/// The protocols a route lets clients upgrade to (lower-cased `Upgrade`
/// tokens), behind one thin pointer: a route stays two cache lines, and
/// only a request that asks for an upgrade reads the list.
#[derive(Debug, Default)]
pub struct Upgrades(Box<Box<[Box<str>]>>);

impl Upgrades {
    pub fn new(list: Box<[Box<str>]>) -> Upgrades {
        Upgrades(Box::new(list))
    }

    pub fn list(&self) -> &[Box<str>] {
        &self.0
    }
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
    /// The router and routes are shared with the snapshots made from this
    /// one by a change of apps alone (see [`Shared::apply_apps`]).
    pub router: Arc<Router>,
    /// Every service, in config order (the health checker walks them);
    /// routes name them by place.
    pub services: Arc<[Arc<ServiceRt>]>,
    pub routes: Arc<[RouteRt]>,
    pub limits: Limits,
    pub timeouts: ClientTimeouts,
    /// `busy_poll`: how long workers poll after a request; zero: off.
    pub busy_poll: std::time::Duration,
    /// `io_uring` as configured; workers read it when they start.
    pub io_uring: Option<bool>,
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
    /// The header that carries request ids (`request_id.header`), lower case.
    pub(crate) request_id_header: Box<[u8]>,
    /// How requests are sampled for tracing; `None` without `tracing`.
    pub(crate) sampler: Option<crate::observe::trace::Sampler>,
    /// The `scope: global` limits, for the Redis plane.
    pub(crate) globals: Arc<crate::cluster::Globals>,
}

impl Snapshot {
    /// The service at `index` (an [`ActionRt::Proxy`]'s).
    #[inline]
    pub fn service(&self, index: u32) -> &Arc<ServiceRt> {
        &self.services[index as usize]
    }

    /// This snapshot again under `generation`, every part shared: what a
    /// change made in place (an apps table, a service's endpoints)
    /// starts from, replacing the part it changes.
    pub(crate) fn next(&self, generation: u64) -> Snapshot {
        Snapshot {
            router: self.router.clone(),
            services: self.services.clone(),
            routes: self.routes.clone(),
            limits: self.limits.clone(),
            timeouts: self.timeouts.clone(),
            busy_poll: self.busy_poll,
            io_uring: self.io_uring,
            access_log: self.access_log.clone(),
            ip: self.ip.clone(),
            generation,
            apps: self.apps.clone(),
            listeners: self.listeners.clone(),
            trusted_proxies: self.trusted_proxies.clone(),
            request_id_header: self.request_id_header.clone(),
            sampler: self.sampler,
            globals: self.globals.clone(),
        }
    }

    /// The settings of the listener configured at `addr`.
    pub(crate) fn listener(&self, addr: SocketAddr) -> Option<&Arc<ListenerRt>> {
        self.listeners.iter().find(|l| l.addr == addr)
    }
}

/// Registry key of an endpoint's state: (service, endpoint name, max in flight).
type EndpointKey = (String, String, usize);

/// State kept across snapshots, keyed by names from the config.
#[derive(Debug, Default)]
pub struct Registry {
    /// (service, endpoint name, max in flight) -> state.
    endpoints: HashMap<EndpointKey, Arc<EndpointState>>,
    /// Each service's config as last compiled (a discovered endpoint set
    /// is built from it), and the `dns` settings.
    service_cfg: HashMap<String, Arc<sluicegate_config::Service>>,
    dns: sluicegate_config::DnsSettings,
    /// The etcd that `discovery.etcd` prefixes are read from.
    discovery_etcd: Option<sluicegate_config::EtcdConnection>,
    /// service -> the endpoints the discovery plane last published for it
    /// (a reload keeps them).
    discovered: HashMap<String, Vec<sluicegate_config::Endpoint>>,
    next_endpoint_id: usize,
    /// service -> (balance kind and endpoint list it was built for, state).
    balancers: HashMap<String, (String, Arc<BalancerState>)>,
    /// service -> its retry budget's tokens.
    budgets: HashMap<String, Arc<std::sync::atomic::AtomicI64>>,
    routes: HashMap<String, Arc<RouteMetrics>>,
    /// Counters of split routes' entries by (route, service).
    splits: HashMap<(String, String), Arc<SplitMetrics>>,
    /// Current split entries' counters in config order, for rendering.
    split_order: Vec<Arc<SplitMetrics>>,
    /// (route, part) -> an aggregate route's part's counters, and them
    /// in config order (the metrics text).
    parts: HashMap<(String, String), Arc<crate::observe::metrics::PartMetrics>>,
    part_order: Vec<Arc<crate::observe::metrics::PartMetrics>>,
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
    /// The cache's store and the settings it was made for: kept while
    /// they stay the same, objects and all.
    cache_store: Option<(
        sluicegate_config::CacheStore,
        Arc<crate::cache::store::Store>,
    )>,
    /// The `jwt.issuers` in force (their keys, token caches and counters
    /// outlive a snapshot; the JWKS plane follows them).
    jwt_issuers: Vec<Arc<crate::apps::jwks::IssuerState>>,
    /// Each route's forward-auth decisions, and the settings they were
    /// made under: kept while those stay the same.
    auth_caches: HashMap<String, (sluicegate_config::ForwardAuth, Arc<authz::DecisionCache>)>,
}

#[cfg(test)]
impl Registry {
    /// App slots in use or waiting to be reused.
    pub(crate) fn live_slots(&self) -> usize {
        self.slots.live()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_route_is_two_cache_lines() {
        assert_eq!(std::mem::size_of::<super::RouteRt>(), 128);
        assert_eq!(std::mem::align_of::<super::RouteRt>(), 64);
    }
}
