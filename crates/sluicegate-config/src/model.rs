//! The validated configuration: plain values the data plane compiles from.
//!
//! Everything here has already been checked by the loader (types, ranges,
//! references between services and routes, duplicate names), so consumers
//! never need to validate again. Defaults are documented in `docs/config.md`.
//!
//! This module holds the whole [`Config`] and its top-level settings
//! (admin, limits, client timeouts, log, reload); services, routes, their
//! policies, apps and TLS are in submodules, all re-exported here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod apps;
mod cache;
mod http2;
mod policy;
mod route;
mod service;
mod tls;

pub use apps::*;
pub use cache::*;
pub use http2::*;
pub use policy::*;
pub use route::*;
pub use service::*;
pub use tls::*;

/// The whole gateway configuration, as loaded from one YAML file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where the proxy accepts client connections (at least one; no two
    /// with the same address).
    pub listen: Vec<Listener>,
    /// Admin listener (metrics, health); `None` when not configured.
    pub admin: Option<AdminConfig>,
    /// Worker threads; `None` means one per available core ("auto").
    pub workers: Option<usize>,
    /// How long a worker keeps polling its sockets after its last request
    /// instead of sleeping (`busy_poll`); zero (the default) never.
    pub busy_poll: Duration,
    /// Plain TCP through one io_uring per worker instead of epoll
    /// (`io_uring`); `None`: not set (off, unless `SLUICEGATE_IO_URING`
    /// says otherwise). Read at start, like `workers`.
    pub io_uring: Option<bool>,
    pub limits: Limits,
    pub timeouts: ClientTimeouts,
    pub log: LogConfig,
    pub reload: ReloadConfig,
    pub services: Vec<Service>,
    pub routes: Vec<Route>,
    /// Named limits apps are put on.
    pub plans: Vec<Plan>,
    /// The applications (consumers) that call the routes with `auth`.
    pub apps: Vec<App>,
    /// Where `auth: app_key` routes look for the key.
    pub app_key: AppKeySources,
    /// Client addresses allowed and denied on every route.
    pub ip: IpRules,
    /// How `auth: jwt` routes check tokens.
    pub jwt: JwtSettings,
    /// Peers (proxies, load balancers) whose word on the client's address
    /// is believed; empty (the default): nobody's.
    pub trusted_proxies: Vec<Cidr>,
    /// How client HTTP/2 connections are run.
    pub http2: Http2Settings,
    /// Where the rest of the config is kept (`config_source`); `None`:
    /// this file is the whole config.
    pub config_source: Option<crate::source::ConfigSource>,
    /// State shared by a fleet of instances (`scope: global` limits).
    pub cluster: ClusterConfig,
    /// The header that carries each request's id.
    pub request_id: RequestIdConfig,
    /// Spans of sampled requests exported over OTLP; `None`: no tracing
    /// (`traceparent` is passed on untouched).
    pub tracing: Option<TracingConfig>,
    /// How host names of endpoints and `discovery` are resolved.
    pub dns: DnsSettings,
    /// The HTTP cache's store (`cache`); `None`: no route caches.
    pub cache: Option<CacheStore>,
}

impl Config {
    /// The etcd of `discovery.etcd`: `cluster.etcd`, or else the
    /// connection of `config_source.etcd`.
    pub fn discovery_etcd(&self) -> Option<&crate::source::EtcdConnection> {
        self.cluster.etcd.as_ref().or(match &self.config_source {
            Some(crate::source::ConfigSource::Etcd(e)) => Some(&e.connection),
            None => None,
        })
    }

    /// Whether some listener asks clients for a certificate (has
    /// `tls.client_ca`), which `auth: mtls` routes need.
    pub fn has_client_ca(&self) -> bool {
        self.listen
            .iter()
            .any(|l| l.tls.as_ref().is_some_and(|t| t.client_ca.is_some()))
    }
}

/// `request_id`: every request has an id, kept from a trusted proxy or made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestIdConfig {
    /// The header name, lower case (default `x-request-id`).
    pub header: String,
}

impl Default for RequestIdConfig {
    fn default() -> Self {
        RequestIdConfig {
            header: "x-request-id".to_string(),
        }
    }
}

/// `tracing`: W3C trace context and OpenTelemetry spans.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// `service.name` of the exported spans (default `sluicegate`).
    pub service_name: String,
    /// Share of requests without a parent that are sampled, 0 to 1 (a
    /// client's `traceparent` decides for its own requests).
    pub ratio: f64,
    pub otlp: OtlpConfig,
    /// Spans waiting for export at most; more are dropped and counted.
    pub queue: usize,
}

/// `tracing.otlp`: the collector spans are exported to, over OTLP/gRPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// `http://host:port` (plain gRPC) or `https://host:port` (TLS).
    pub endpoint: String,
    /// Each export call's deadline (default 10s).
    pub timeout: Duration,
    /// PEM certificates of the CAs that sign the collector's certificate,
    /// trusted instead of the system's roots (with `https://`).
    pub ca_file: Option<std::path::PathBuf>,
}

/// `cluster`: what the instances of a fleet share.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterConfig {
    /// Where global limits and quotas are kept; `None`: nowhere (every
    /// limit is then `scope: local`).
    pub redis: Option<RedisConfig>,
    /// The etcd that services with `discovery.etcd` read their endpoints
    /// from; `None`: that of `config_source.etcd`, if any.
    pub etcd: Option<crate::source::EtcdConnection>,
}

/// `cluster.redis`: a Redis server, or a Redis Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://host:port[/db]` (or `rediss://` for TLS): a seed node for
    /// a Redis Cluster.
    pub url: String,
    /// Speak TLS to Redis (a `redis://` URL is then used as `rediss://`).
    pub tls: bool,
    /// A file holding the password (read when connecting, never logged).
    pub password_file: Option<PathBuf>,
    /// PEM certificates of the CAs to trust for Redis's TLS certificate
    /// instead of the system's roots (read when connecting).
    pub ca_file: Option<PathBuf>,
    /// The server is a Redis Cluster.
    pub cluster: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// Bearer tokens for the admin API; empty: no token is asked for, and
    /// `listen` must then be a loopback address.
    pub tokens: Vec<AdminToken>,
    /// The API may read the config but never change it (`405`).
    pub read_only: bool,
    /// Clients speak HTTPS to the admin listener (a listener's `tls`).
    pub tls: Option<ListenerTls>,
}

/// One admin API token: the file holding it and what it may do.
#[derive(Debug, Clone, PartialEq)]
pub struct AdminToken {
    pub token_file: PathBuf,
    pub role: AdminRole,
}

/// What an admin token may do: `read` (GET) or `write` (everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminRole {
    Read,
    Write,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Client connections open at once, per process; more are closed at accept.
    pub max_connections: usize,
    /// Largest request head (request line + headers) in bytes; over it: 431.
    pub max_header_bytes: usize,
    /// Largest request body in bytes; over it: 413.
    pub max_body_bytes: u64,
    /// Upgraded connections (WebSocket tunnels) open at once, per process;
    /// an upgrade request over it is answered 503.
    pub max_tunnels: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            max_header_bytes: 16_384,
            max_body_bytes: 10 * 1024 * 1024,
            max_tunnels: 10_000,
        }
    }
}

/// Client-side timeouts (the listener side).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTimeouts {
    /// Time allowed to receive a whole request head: from the accept (or
    /// the end of the TLS handshake) for a connection's first request, from
    /// its first byte for later ones.
    pub client_header: Duration,
    /// Longest pause while receiving a request body.
    pub client_body: Duration,
    /// How long an idle keep-alive client connection is kept.
    pub keepalive: Duration,
    /// On shutdown, how long in-flight requests may take to finish.
    pub drain: Duration,
    /// Longest a write to a client may wait for it to read; past it the
    /// connection closes.
    pub client_write: Duration,
    /// Time allowed for a TLS handshake, from the accept (after the PROXY
    /// protocol header, if any).
    pub tls_handshake: Duration,
    /// Longest an upgraded connection (a tunnel) may carry no byte either
    /// way before it is closed.
    pub tunnel_idle: Duration,
}

impl Default for ClientTimeouts {
    fn default() -> Self {
        ClientTimeouts {
            client_header: Duration::from_secs(10),
            client_body: Duration::from_secs(30),
            keepalive: Duration::from_secs(60),
            drain: Duration::from_secs(10),
            client_write: Duration::from_secs(30),
            tls_handshake: Duration::from_secs(10),
            tunnel_idle: Duration::from_secs(3600),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// tracing level filter: error, warn, info, debug, trace.
    pub level: String,
    /// How the gateway's own log lines are written (not the access log,
    /// always JSON lines).
    pub format: LogFormat,
    pub access: AccessLog,
}

/// `log.format`: plain text lines (the default) or one JSON object a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_string(),
            format: LogFormat::Text,
            access: AccessLog::Off,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum AccessLog {
    Off,
    Stdout,
    File(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ReloadConfig {
    /// Watch the config file and reload when it changes.
    pub watch: bool,
    /// How often the file is checked for changes.
    pub poll_interval: Duration,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        ReloadConfig {
            watch: true,
            poll_interval: Duration::from_secs(1),
        }
    }
}
