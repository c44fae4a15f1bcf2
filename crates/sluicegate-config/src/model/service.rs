//! A backend service in the model: its endpoints, balancing, upstream
//! timeouts, health checks, retries, ejection and breaker (its `tls` is in
//! the TLS part).

use std::net::SocketAddr;
use std::time::Duration;

use super::UpstreamTls;

/// A backend service: a named set of instances and how to reach them.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub name: String,
    /// Endpoints given as IP addresses (host names are in `discovery`).
    pub endpoints: Vec<Endpoint>,
    /// Names resolved while serving: every address found is an endpoint.
    pub discovery: Discovery,
    pub balance: Balance,
    /// Only for `Balance::Hash`; defaults to `HashKey::ClientIp`.
    pub hash_key: HashKey,
    /// In-flight requests to one endpoint at once, across all workers.
    pub max_connections_per_endpoint: usize,
    pub timeouts: UpstreamTimeouts,
    /// Active health checks; `None`: every endpoint counts as healthy.
    pub health: Option<HealthCheck>,
    /// When a failed attempt is tried again on another endpoint.
    pub retries: Retries,
    /// Passive outlier detection per endpoint; `None`: off.
    pub breaker: Option<Breaker>,
    /// An endpoint whose connect fails leaves rotation for a while (on by
    /// default); `None`: `ejection: false`.
    pub ejection: Option<Ejection>,
    /// The gateway writes X-Forwarded-For, -Proto and -Host on requests to
    /// this service (default). Off: it writes none of them, and those the
    /// client sent are still not passed on.
    pub forwarded_headers: bool,
    /// `Some`: connections to the endpoints use TLS; `None`: plain TCP.
    pub tls: Option<UpstreamTls>,
    /// The HTTP version spoken to the endpoints.
    pub protocol: UpstreamProtocol,
}

/// A service's `protocol`: how requests go to its endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamProtocol {
    /// HTTP/1.1, a connection per request in flight (pooled).
    #[default]
    Http1,
    /// HTTP/2 over TLS (ALPN `h2`), requests multiplexed as streams.
    H2,
    /// HTTP/2 over plain TCP with prior knowledge.
    H2c,
    /// Over TLS: HTTP/2 when the endpoint chooses `h2` by ALPN, else
    /// HTTP/1.1.
    Auto,
}

impl UpstreamProtocol {
    /// Requests go as HTTP/2 streams (or may, for `auto`).
    pub fn http2(self) -> bool {
        self != UpstreamProtocol::Http1
    }
}

/// A service's `retries`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retries {
    /// Tries in all, the first included (1: never retry).
    pub attempts: u32,
    /// The connect to the endpoint failed (nothing was sent: always safe).
    pub on_connect: bool,
    /// The upstream closed or reset before any response byte
    /// (idempotent methods with the whole request at hand only).
    pub on_reset: bool,
    /// No response head within `response_header` (idempotent only).
    pub on_timeout: bool,
    /// Statuses answered again elsewhere (idempotent only).
    pub on_status: Vec<u16>,
    /// gRPC statuses (codes 1 to 16) of a trailers-only answer that send a
    /// gRPC call again elsewhere (`grpc:unavailable`), whatever its method.
    pub on_grpc: Vec<u8>,
    /// Retries allowed, as a share of requests, in percent.
    pub budget_percent: u32,
}

impl Default for Retries {
    fn default() -> Self {
        Retries {
            attempts: 2,
            on_connect: true,
            on_reset: true,
            on_timeout: false,
            on_status: Vec::new(),
            on_grpc: Vec::new(),
            budget_percent: 20,
        }
    }
}

/// A service's `ejection`: an endpoint whose connect is refused or times
/// out leaves rotation for `base`, doubled at each further failed connect
/// in a row up to `max`; a connect that succeeds ends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ejection {
    pub base: Duration,
    pub max: Duration,
}

impl Default for Ejection {
    fn default() -> Self {
        Ejection {
            base: Duration::from_secs(1),
            max: Duration::from_secs(30),
        }
    }
}

/// A service's `breaker`: each endpoint's circuit opens after `errors`
/// failures within `window`, stays open `open_for`, then lets
/// `half_open_requests` probes through; one success closes it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breaker {
    pub errors: u32,
    pub window: Duration,
    pub open_for: Duration,
    pub half_open_requests: u32,
    /// Count 5xx answers as failures (connect errors, resets, invalid
    /// responses and timeouts always count).
    pub on_5xx: bool,
}

/// Active health checks of a service's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// `Some(path)`: `GET path` over HTTP/1.1; `None`: a TCP connect, or
    /// the gRPC check when `grpc_service` is set.
    pub path: Option<String>,
    /// `Some(name)`: the gRPC health protocol's `Check` for the service
    /// `name` ("": the server as a whole), over HTTP/2 (`type: grpc`).
    pub grpc_service: Option<String>,
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes that bring an endpoint back.
    pub healthy_after: u32,
    /// Consecutive failures that take an endpoint out.
    pub unhealthy_after: u32,
    /// Statuses counted as healthy (inclusive ranges); HTTP checks only.
    pub expect_status: Vec<(u16, u16)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// As written in the config (`host:port`); used in logs and metrics.
    pub name: String,
    /// Resolved address.
    pub addr: SocketAddr,
    /// Relative weight, >= 1.
    pub weight: u32,
}

/// What a service resolves while serving (never when the config loads).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Discovery {
    /// `endpoints` given as `host:port`: each A and AAAA address of the
    /// host is an endpoint on that port, with the entry's weight.
    pub names: Vec<DnsName>,
    /// `discovery.dns_srv`: an SRV name whose records give the targets,
    /// ports and weights.
    pub dns_srv: Option<String>,
    /// `discovery.etcd.prefix`: every key under it is an endpoint that
    /// registered itself (see `cluster.etcd`).
    pub etcd: Option<String>,
}

impl Discovery {
    /// Nothing to discover: the endpoints are all IP addresses.
    pub fn is_empty(&self) -> bool {
        !self.uses_dns() && self.etcd.is_none()
    }

    /// Names for the DNS plane to resolve.
    pub fn uses_dns(&self) -> bool {
        !self.names.is_empty() || self.dns_srv.is_some()
    }
}

/// An endpoint given by host name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsName {
    pub host: String,
    pub port: u16,
    /// Relative weight of each of its addresses, >= 1.
    pub weight: u32,
}

/// `dns`: how the discovery plane resolves names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsSettings {
    /// Name servers asked; empty: those of /etc/resolv.conf.
    pub servers: Vec<SocketAddr>,
    /// Shortest time an answer is kept before it is asked again (a
    /// smaller TTL is raised to it); also the wait after a failed lookup.
    pub min_ttl: Duration,
    /// Longest time an answer is kept (a larger TTL is lowered to it).
    pub max_ttl: Duration,
}

impl Default for DnsSettings {
    fn default() -> Self {
        DnsSettings {
            servers: Vec::new(),
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(300),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Smooth weighted round robin.
    RoundRobin,
    LeastConn,
    /// Power of two choices on an EWMA of latency times load.
    P2cEwma,
    /// Consistent hashing on `hash_key`.
    Hash,
    /// A weighted random pick.
    Random,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// A request header's value, name lower-cased.
    Header(String),
    ClientIp,
    Path,
}

#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamTimeouts {
    pub connect: Duration,
    pub response_header: Duration,
    /// Longest pause while receiving the response body.
    pub response_body: Duration,
    /// How long an idle pooled upstream connection is kept.
    pub idle: Duration,
    /// From the request's arrival to the upstream's response head, every
    /// attempt and retry included.
    pub request: Duration,
}

impl Default for UpstreamTimeouts {
    fn default() -> Self {
        UpstreamTimeouts {
            connect: Duration::from_secs(1),
            response_header: Duration::from_secs(15),
            response_body: Duration::from_secs(15),
            idle: Duration::from_secs(60),
            request: Duration::from_secs(30),
        }
    }
}

/// gRPC status names as `retries.on` spells them (`grpc:NAME`), by code.
pub const GRPC_STATUS_NAMES: [&str; 17] = [
    "ok",
    "cancelled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
];
