//! The validated configuration: plain values the data plane compiles from.
//!
//! Everything here has already been checked by the loader (types, ranges,
//! references between services and routes, duplicate names), so consumers
//! never need to validate again. Defaults are documented in `docs/config.md`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod http2;
mod tls;

pub use http2::*;
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
}

/// Token checks shared by all `auth: jwt` routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSettings {
    /// Required `iss`, when set.
    pub issuer: Option<String>,
    /// Required `aud` (one of the token's), when set.
    pub audience: Option<String>,
    /// The claim naming the app (its `id`).
    pub app_claim: String,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
}

impl Default for JwtSettings {
    fn default() -> Self {
        JwtSettings {
            issuer: None,
            audience: None,
            app_claim: "sub".to_string(),
            leeway: Duration::from_secs(30),
        }
    }
}

/// Signature algorithms an app's tokens may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtAlg {
    HS256,
    RS256,
    ES256,
}

/// Where an app's verification key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtKey {
    /// HS256 shared secret, inline or in a file (read at load).
    Secret(Vec<u8>),
    /// RS256/ES256 public key, PEM, inline or from a file (read at load).
    PublicKeyPem(Vec<u8>),
}

/// An app's token verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppJwt {
    pub alg: JwtAlg,
    pub key: JwtKey,
}

/// Client address rules: denied when in `deny`, or when `allow` is not
/// empty and the address is not in it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpRules {
    pub allow: Vec<Cidr>,
    pub deny: Vec<Cidr>,
}

/// An address block such as `10.0.0.0/8` or `2001:db8::/32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: std::net::IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// Parses `ADDR/LEN` or a bare address (a block of one).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (a, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let addr: std::net::IpAddr = a.trim().parse().map_err(|_| {
            format!("expected an address block like 10.0.0.0/8 or 2001:db8::/32, found {text:?}")
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match len {
            None => max,
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("prefix length must be 0 to {max}, found {l:?}"))?,
        };
        let c = Cidr { addr, prefix };
        if c.network() != addr {
            return Err(format!(
                "{text:?} has bits set after the prefix; the block is {}/{prefix}",
                c.network()
            ));
        }
        Ok(c)
    }

    fn network(&self) -> std::net::IpAddr {
        use std::net::IpAddr;
        match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((u32::from(a) & mask).into())
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((u128::from(a) & mask).into())
            }
        }
    }

    /// Whether `ip` is in the block (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(a) & mask == u32::from(n)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(a) & mask == u128::from(n)
            }
            _ => false,
        }
    }
}

impl IpRules {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// Whether `ip` may pass.
    pub fn admits(&self, ip: std::net::IpAddr) -> bool {
        !self.deny.iter().any(|c| c.contains(ip))
            && (self.allow.is_empty() || self.allow.iter().any(|c| c.contains(ip)))
    }
}

/// A rate limit: `count` requests per `per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u64,
    pub per: Duration,
}

/// A calendar window (UTC) for quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaWindow {
    Minute,
    Hour,
    Day,
    Month,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    pub limit: u64,
    pub window: QuotaWindow,
}

/// A named set of limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub name: String,
    pub rate: Option<Rate>,
    /// Requests allowed at once above the steady rate; defaults to the
    /// rate's count. Only with `rate`.
    pub burst: Option<u64>,
    pub quota: Option<Quota>,
    /// Requests in flight at once.
    pub concurrency: Option<u64>,
}

/// An application allowed to call authenticated routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    pub id: String,
    pub keys: Vec<String>,
    /// The plan for services without an entry in `plans_by_service`.
    pub plan: Option<String>,
    /// (service, plan) pairs.
    pub plans_by_service: Vec<(String, String)>,
    /// Services the app may call; `None` means all.
    pub services: Option<Vec<String>>,
    /// Methods the app may use (upper-case); empty means all.
    pub methods: Vec<String>,
    /// Path prefixes (segment-wise, on the normalised path) the app may
    /// call; empty means all.
    pub paths: Vec<String>,
    /// How the app's JWTs are verified, for `auth: jwt` routes.
    pub jwt: Option<AppJwt>,
    /// Which client certificates are the app's, for `auth: mtls` routes;
    /// `None`: a certificate whose subject CN equals `id`.
    pub mtls: Option<AppMtls>,
}

/// Where app keys are looked for, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppKeySources {
    /// Lower-cased header name.
    pub header: Option<String>,
    pub query: Option<String>,
    /// `/prefix/~KEY/rest`: a segment starting with `~` right after the
    /// route's path prefix.
    pub path_segment: bool,
}

impl Default for AppKeySources {
    fn default() -> Self {
        AppKeySources {
            header: Some("x-app-key".to_string()),
            query: Some("app_key".to_string()),
            path_segment: true,
        }
    }
}

/// Header changes on the way upstream or back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderOps {
    /// Replace every received value with this one (names as written).
    pub set: Vec<(String, String)>,
    /// Add this line, keeping received ones.
    pub add: Vec<(String, String)>,
    /// Drop every received value (names lower-cased).
    pub remove: Vec<String>,
}

/// Cross-origin resource sharing for a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cors {
    /// Allowed origins.
    pub origins: Vec<OriginMatch>,
    /// Allowed methods (upper-case).
    pub methods: Vec<String>,
    /// Allowed request headers (lower-case).
    pub headers: Vec<String>,
    /// Response headers the browser may read (as written).
    pub expose_headers: Vec<String>,
    pub credentials: bool,
    /// How long a browser may cache a preflight answer.
    pub max_age: Option<Duration>,
}

/// An allowed origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginMatch {
    /// `*`: every origin.
    Any,
    /// `https://shop.example.com` (lower-case, no trailing slash).
    Exact(String),
    /// `https://*.example.com`: scheme `https://`, host ending `.example.com`
    /// with at least one more label (stored as scheme and suffix).
    Suffix { scheme: String, suffix: String },
}

/// A route's own limit, for every caller (with or without an app).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteLimit {
    pub rate: Option<Rate>,
    /// Defaults to the rate's count; only with `rate`.
    pub burst: Option<u64>,
    pub concurrency: Option<u64>,
    pub per: LimitKey,
}

/// Whose requests a route limit counts together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LimitKey {
    /// Each client IP address has its own counters.
    #[default]
    ClientIp,
    /// All requests on the route share one set of counters.
    Route,
}

/// How a route authenticates the calling app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Auth {
    #[default]
    None,
    AppKey,
    Jwt,
    /// A client certificate (verified against a listener's `client_ca`)
    /// names the app; see [`AppMtls`].
    Mtls,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    pub listen: SocketAddr,
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
    pub access: AccessLog,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".to_string(),
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

/// A backend service: a named set of instances and how to reach them.
#[derive(Debug, Clone, PartialEq)]
pub struct Service {
    pub name: String,
    pub endpoints: Vec<Endpoint>,
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
    /// `Some(path)`: `GET path` over HTTP/1.1; `None`: a TCP connect.
    pub path: Option<String>,
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive successes that bring an endpoint back.
    pub healthy_after: u32,
    /// Consecutive failures that take an endpoint out.
    pub unhealthy_after: u32,
    /// Statuses counted as healthy (inclusive ranges).
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Smooth weighted round robin.
    RoundRobin,
    LeastConn,
    /// Power of two choices on an EWMA of latency times load.
    P2cEwma,
    /// Consistent hashing on `hash_key`.
    Hash,
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

/// A route: which requests it takes and what it does with them.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub name: String,
    pub matcher: Match,
    pub action: Action,
    pub auth: Auth,
    pub limit: Option<RouteLimit>,
    pub request_headers: HeaderOps,
    pub response_headers: HeaderOps,
    pub cors: Option<Cors>,
    pub ip: IpRules,
    /// Path rewrite applied after `strip_prefix`, before forwarding.
    pub rewrite: Option<Rewrite>,
    /// Protocols a client may upgrade to through this route (lower-cased
    /// `Upgrade` tokens); `websocket` by default.
    pub upgrade: Vec<String>,
}

/// `rewrite: { regex, replacement }`: the first match of `regex` in the
/// path is replaced (`$1`, `${name}` refer to capture groups).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    pub regex: String,
    pub replacement: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Match {
    pub host: Option<HostMatch>,
    pub path: PathMatch,
    /// Upper-case method names; empty means any method.
    pub methods: Vec<String>,
    /// Header name (lower-cased) and the exact value it must have.
    pub headers: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMatch {
    /// Lower-cased host without port.
    Exact(String),
    /// `*.example.com` stored as `.example.com` (lower-cased): any host
    /// ending with it, with at least one more label in front.
    Suffix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathMatch {
    /// No path condition: matches every path (least specific).
    Any,
    Exact(String),
    /// Segment-aware prefix, without a trailing slash unless it is "/".
    Prefix(String),
    /// Anchored or not as the user wrote it; already known to compile.
    Regex(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Proxy {
        service: String,
        /// Remove the matched `path_prefix` before forwarding.
        strip_prefix: bool,
    },
    Respond {
        status: u16,
        body: String,
        /// Header names as written; values as written.
        headers: Vec<(String, String)>,
    },
}
