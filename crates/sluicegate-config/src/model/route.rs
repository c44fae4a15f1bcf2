//! A route in the model: its `match` conditions, its action (proxy or
//! respond), how it authenticates apps, its own limit and its rewrite.

use std::time::Duration;

use super::{Cors, HeaderOps, IpRules, OnFailure, Rate, Scope};

/// A route's own limit, for every caller (with or without an app).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteLimit {
    pub rate: Option<Rate>,
    /// Defaults to the rate's count; only with `rate`.
    pub burst: Option<u64>,
    pub concurrency: Option<u64>,
    pub per: LimitKey,
    /// `global`: counted across the fleet in Redis (needs a rate), with
    /// any `per`.
    pub scope: Scope,
    pub on_failure: OnFailure,
}

/// Whose requests a route limit counts together. The keyed ones
/// (`Param`, `Header`, `App`) count each value apart, and requests without
/// the value together under one "absent" key.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LimitKey {
    /// Each client IP address has its own counters.
    #[default]
    ClientIp,
    /// All requests on the route share one set of counters.
    Route,
    /// `param:NAME`: each value of the route's path parameter NAME (its
    /// index in the template here) has its own counters.
    Param(usize),
    /// `header:NAME` (lower-cased here): each value of the request's first
    /// field named NAME has its own counters.
    Header(String),
    /// `app`: each authenticated app has its own counters (the limit then
    /// runs after `auth`).
    App,
    /// `claim:NAME`: each value of the verified token's claim NAME has its
    /// own counters (the route has `auth: jwt`; the limit runs after it).
    Claim(String),
}

impl LimitKey {
    /// Whether the key is known only once the caller is authenticated:
    /// such a limit runs after `auth` (and before the app's plan), the
    /// others before it (so they also bound key guessing).
    pub fn after_auth(&self) -> bool {
        matches!(self, LimitKey::App | LimitKey::Claim(_))
    }
}

/// How a route authenticates the calling app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Auth {
    #[default]
    None,
    AppKey,
    Jwt,
    /// A client certificate (verified against a listener's `client_ca`)
    /// names the app; see [`AppMtls`](super::AppMtls).
    Mtls,
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
    /// Aborts and delays injected on a share of the requests.
    pub fault: Option<Fault>,
    /// A copy of a share of the requests sent to another service.
    pub mirror: Option<Mirror>,
    /// What answers when the route's service cannot (`fallback` and
    /// `fallback_on`).
    pub fallback: Option<Fallback>,
    /// Answers stored and served from the cache (`cache`).
    pub cache: Option<super::RouteCache>,
    /// A canary rollout of the split's last entry, moved by the gateway.
    pub rollout: Option<Rollout>,
    /// Response compression (`compress`); `None` when off.
    pub compress: Option<Compress>,
    /// Scopes the route's JWT must hold, all of them (`scopes`).
    pub scopes: Vec<String>,
    /// An HTTP authorization service asked before forwarding.
    pub forward_auth: Option<Box<ForwardAuth>>,
    /// An Envoy ext_authz gRPC service asked before forwarding.
    pub ext_authz: Option<ExtAuthz>,
}

/// `compress: true` or `{ algorithms, min_size, types, level }`: answers
/// compressed in the coding the client prefers among `algorithms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compress {
    /// The codings offered, in order of preference (ties of the client's
    /// quality values go to the first); `[zstd, br, gzip]` by default.
    pub algorithms: Vec<CompressAlgorithm>,
    /// Bodies with a smaller `Content-Length` are left alone (1 KiB by
    /// default); a body without one is compressed.
    pub min_size: u64,
    /// Media types compressed (`type/subtype`, `type/*`, `type/*+suffix`),
    /// lower case; [`Compress::DEFAULT_TYPES`] by default.
    pub types: Vec<String>,
    pub level: CompressLevel,
}

impl Compress {
    pub const DEFAULT_TYPES: &'static [&'static str] = &[
        "text/*",
        "application/json",
        "application/*+json",
        "application/javascript",
        "application/xml",
        "image/svg+xml",
    ];
}

impl Default for Compress {
    fn default() -> Compress {
        Compress {
            algorithms: vec![
                CompressAlgorithm::Zstd,
                CompressAlgorithm::Br,
                CompressAlgorithm::Gzip,
            ],
            min_size: 1024,
            types: Compress::DEFAULT_TYPES
                .iter()
                .map(|t| t.to_string())
                .collect(),
            level: CompressLevel::Fast,
        }
    }
}

/// A content coding a route may answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompressAlgorithm {
    Zstd,
    Br,
    Gzip,
}

impl CompressAlgorithm {
    pub const ALL: [CompressAlgorithm; 3] = [
        CompressAlgorithm::Zstd,
        CompressAlgorithm::Br,
        CompressAlgorithm::Gzip,
    ];

    /// The name in the config and in `Content-Encoding`.
    pub fn name(self) -> &'static str {
        match self {
            CompressAlgorithm::Zstd => "zstd",
            CompressAlgorithm::Br => "br",
            CompressAlgorithm::Gzip => "gzip",
        }
    }

    /// The levels an integer `level` may take: gzip 1 to 9, brotli's
    /// quality 0 to 11, zstd 1 to 19.
    pub fn range(self) -> std::ops::RangeInclusive<i32> {
        match self {
            CompressAlgorithm::Zstd => 1..=19,
            CompressAlgorithm::Br => 0..=11,
            CompressAlgorithm::Gzip => 1..=9,
        }
    }

    /// The coder's own level for `level`: `fast` is gzip 1 (nginx's
    /// `gzip_comp_level` default), brotli 1, zstd 1; `default` gzip 6,
    /// brotli 4, zstd 3; `best` gzip 9, brotli 11, zstd 19.
    pub fn level(self, level: CompressLevel) -> i32 {
        use CompressAlgorithm::*;
        match (level, self) {
            (CompressLevel::Level(n), _) => n,
            (CompressLevel::Fast, _) => 1,
            (CompressLevel::Default, Gzip) => 6,
            (CompressLevel::Default, Br) => 4,
            (CompressLevel::Default, Zstd) => 3,
            (CompressLevel::Best, Gzip) => 9,
            (CompressLevel::Best, Br) => 11,
            (CompressLevel::Best, Zstd) => 19,
        }
    }
}

/// `level`: a name mapped per algorithm, or one integer for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressLevel {
    Fast,
    Default,
    Best,
    Level(i32),
}

/// `mirror: { service, percent }`: with probability `percent` / 100, a
/// copy of the request (body included) also goes to `service`, and its
/// answer is dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct Mirror {
    /// A defined service's name.
    pub service: String,
    /// 0 to 100, fractions allowed; 100 by default.
    pub percent: f64,
}

/// `fallback`: the answer when the route's service cannot give one, and
/// the upstream statuses (`fallback_on`) replaced by it too.
#[derive(Debug, Clone, PartialEq)]
pub struct Fallback {
    pub answer: FallbackAnswer,
    /// Upstream statuses (500 to 599) replaced by the fallback; empty:
    /// every upstream answer is relayed.
    pub on: Vec<FallbackOn>,
}

/// What a fallback answers with.
#[derive(Debug, Clone, PartialEq)]
pub enum FallbackAnswer {
    /// A fixed answer, as a `respond` route's (status 200 to 599).
    Respond {
        status: u16,
        body: String,
        /// Header names as written; values as written.
        headers: Vec<(String, String)>,
    },
    /// The request goes to this other service, once.
    Service(String),
}

/// One entry of `fallback_on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackOn {
    /// `5xx`: any status from 500 to 599.
    ServerError,
    /// One status from 500 to 599.
    Status(u16),
}

/// `rollout: { step, every, max_error_ratio, max_p99_ratio, min_requests }`:
/// the gateway raises the last split entry's share by `step` percentage
/// points after each window of `every` in which the canary kept within
/// the ratios of the other entries, and sets it back to 0 when it did not.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    /// 1 to 100 percentage points.
    pub step: u32,
    /// At least 100 ms.
    pub every: Duration,
    /// At least 1.0: the canary's 5xx rate over the baseline's.
    pub max_error_ratio: f64,
    /// At least 1.0: the canary's p99 latency over the baseline's.
    pub max_p99_ratio: f64,
    /// At least 1: requests each side needs in a window to judge it.
    pub min_requests: u64,
}

/// `fault: { abort, delay }`: either part may be absent.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub abort: Option<FaultAbort>,
    pub delay: Option<FaultDelay>,
}

/// With probability `percent` / 100, the gateway answers `status` itself.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultAbort {
    /// 0 to 100, fractions allowed.
    pub percent: f64,
    /// 200 to 599.
    pub status: u16,
}

/// With probability `percent` / 100, the request waits `duration` before
/// it is forwarded.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultDelay {
    /// 0 to 100, fractions allowed.
    pub percent: f64,
    pub duration: Duration,
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
    /// Header name (lower-cased) and the value its first field must have.
    pub headers: Vec<(String, ValueMatch)>,
    /// Query parameter name and the value its first occurrence must have,
    /// both as decoded (`%XX` and `+`).
    pub query: Vec<(String, String)>,
    /// Cookie name and the exact value the first cookie of that name in
    /// the `Cookie` field(s) must have.
    pub cookies: Vec<(String, String)>,
}

/// A header value a `match` requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueMatch {
    /// Exactly this value.
    Exact(String),
    /// `~REGEX`: the whole value must match REGEX (given without its `~`);
    /// already known to compile into a [`crate::ValueRegex`].
    Regex(String),
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
    /// A `path` with `{name}` segments.
    Template(PathTemplate),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Proxy {
        /// The service; with `split`, its first entry's.
        service: String,
        /// Remove the matched `path_prefix` before forwarding.
        strip_prefix: bool,
        /// `split` (with `split_by`), given instead of `service`.
        split: Option<Split>,
    },
    Respond {
        status: u16,
        body: String,
        /// Header names as written; values as written.
        headers: Vec<(String, String)>,
    },
    /// `aggregate`: calls to services whose JSON answers make one JSON
    /// object, one member per part in this order.
    Aggregate(Vec<AggregatePart>),
}

/// One part of an `aggregate` route: a GET to `service` at `path`.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregatePart {
    /// `[A-Za-z_][A-Za-z0-9_]*`, unique in the route.
    pub name: String,
    /// A defined service's name.
    pub service: String,
    /// Starts with `/`; `${param}` names a parameter of the route's path
    /// template, `${part.field...}` a value in another part's answer.
    pub path: String,
    /// A failed optional part is `null` in the answer instead of a 502.
    pub optional: bool,
    /// Longest the part may take; `None`: its service's
    /// `timeouts.request`.
    pub timeout: Option<Duration>,
}

/// Most parameters one template may have (the router captures them in a
/// fixed array, without allocating).
pub const MAX_PARAMS: usize = 32;

/// A parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    /// As written.
    pub text: String,
    /// The segments after the leading `/`, in order.
    pub segments: Vec<TemplateSegment>,
}

/// One segment of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateSegment {
    /// Must equal the request's segment (as normalised).
    Literal(String),
    /// `{name}` or `{name:TYPE}`: one non-empty segment of that type.
    Param { name: String, ty: ParamType },
    /// `{name:*}`, last: the rest of the path, zero or more segments.
    Rest { name: String },
}

/// What a parameter's segment must be, checked on its percent-decoded
/// bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ParamType {
    /// Any non-empty segment.
    Any,
    /// `-`? ASCII digits, within i64.
    Int,
    /// ASCII digits, within u64.
    Uint,
    /// 8-4-4-4-12 hex digits, either case.
    Uuid,
    /// One or more hex digits.
    Hex,
    /// Letters (Unicode, of the UTF-8 text).
    Alpha,
    /// Letters and digits (Unicode, of the UTF-8 text).
    Alnum,
    /// The regex (as written) matches the whole segment; already known to
    /// compile into a [`crate::ValueRegex`].
    Regex(String),
}

impl PathTemplate {
    /// The parameters' names, in order: a parameter's index is its place
    /// here.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            TemplateSegment::Literal(_) => None,
            TemplateSegment::Param { name, .. } | TemplateSegment::Rest { name } => {
                Some(name.as_str())
            }
        })
    }

    /// The index of the parameter called `name`.
    pub fn param_index(&self, name: &str) -> Option<usize> {
        self.params().position(|p| p == name)
    }
}

/// `split: [{ service, weight, apps }]` with `split_by`: the requests of
/// a route shared among services by weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// At least one; services all different; some weight above zero.
    pub entries: Vec<SplitEntry>,
    pub by: SplitBy,
}

/// One service of a split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitEntry {
    pub service: String,
    /// 0 to [`MAX_SPLIT_WEIGHT`]; 0 takes only the pinned apps.
    pub weight: u32,
    /// App ids always sent to this entry, whatever the weights.
    pub apps: Vec<String>,
}

/// The largest weight of a split entry.
pub const MAX_SPLIT_WEIGHT: u32 = 1_000_000;

/// What keeps a client on one entry of a split (`split_by`). Without a
/// key (no app, no such header or cookie), a request is placed at random.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SplitBy {
    /// Each request drawn on its own.
    #[default]
    Random,
    /// The client address as the gateway trusts it.
    ClientIp,
    /// The app the route's auth identified.
    App,
    /// The first field of this header (name lower-cased).
    Header(String),
    /// The first cookie of this name.
    Cookie(String),
    /// A parameter of the route's path template, by its place in the
    /// template, as routed (escapes kept).
    Param(usize),
}

/// What an external authorization check does when its service cannot
/// answer (a timeout, a refused connection, an answer it cannot read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnAuthError {
    /// The request is answered 503 (gRPC: UNAVAILABLE).
    #[default]
    Deny,
    /// The request goes on, without what a check would have added.
    Allow,
}

/// Where a `forward_auth` check is sent: the URL's host is an IP address
/// (a one-endpoint service of the route's own) or a service's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthTarget {
    Address {
        addr: std::net::SocketAddr,
        https: bool,
    },
    Service(String),
}

/// A route's `forward_auth`: every request is first asked about at `url`
/// (as nginx's `auth_request` and Traefik's `forwardAuth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuth {
    /// As written.
    pub url: String,
    pub target: AuthTarget,
    /// The check's path and query (from the URL), `/` at least.
    pub path: String,
    /// Request headers sent along (lower case, each once).
    pub request_headers: Vec<String>,
    /// Headers of a 2xx answer copied onto the request upstream (lower
    /// case, each once); clients' own copies are removed.
    pub response_headers: Vec<String>,
    /// How long a decision is reused; zero: never.
    pub cache: Duration,
    pub timeout: Duration,
    pub on_error: OnAuthError,
}

/// A route's `ext_authz`: Envoy's `Authorization/Check` (v3) over gRPC to
/// a service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtAuthz {
    pub service: String,
    pub timeout: Duration,
    pub on_error: OnAuthError,
}
