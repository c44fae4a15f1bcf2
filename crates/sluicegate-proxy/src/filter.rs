//! Route filters: the one trait every policy implements (auth, ACL, plan
//! limits, ...), the per-request context they read and edit, and the
//! filters themselves. A route holds its filters in order; the first to
//! refuse answers the request.

use std::fmt::Debug;
use std::net::IpAddr;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use sluicegate_config::AppKeySources;

use crate::apps::{AppRt, AppTable};
use crate::codec::RequestHead;
use crate::limit::{ClientLimits, InFlight, LimitState, PlanRt};
use crate::response::ErrorKind;

/// What filters change about the request and its response, reused across
/// requests (cleared before each).
#[derive(Debug, Default)]
pub struct Edits {
    /// The path to forward instead of the received one: before any
    /// `strip_prefix` (which still applies), unless `path_final`.
    pub path: Option<Vec<u8>>,
    /// `path` is final: `strip_prefix` was applied already (by `rewrite`).
    pub path_final: bool,
    /// The query to forward instead of the received one, with its `?`
    /// (empty for none).
    pub query: Option<Vec<u8>>,
    /// Header lines (`name: value\r\n`) added to the request upstream.
    pub request_headers: Vec<u8>,
    /// Header lines added to the response to the client.
    pub response_headers: Vec<u8>,
    /// The authenticated app, and the fingerprint of the key it used.
    pub app: Option<Arc<str>>,
    pub key_fp: Option<String>,
    /// Held until the request ends (concurrency slots).
    pub guards: Vec<InFlight>,
    /// Headers to drop from the upstream's response and lines to add.
    pub response_ops: Option<Arc<HeaderOpsRt>>,
    /// The route's CORS policy answers for this request: the upstream's
    /// own `Access-Control-*` headers are dropped.
    pub cors: bool,
}

impl Edits {
    pub fn clear(&mut self) {
        self.path = None;
        self.path_final = false;
        self.query = None;
        self.request_headers.clear();
        self.response_headers.clear();
        self.app = None;
        self.key_fp = None;
        self.guards.clear();
        self.response_ops = None;
        self.cors = false;
    }
}

/// A filter's own answer, ending the request: usually a refusal, or a
/// bodiless 204 (a CORS preflight); with header lines to add to it.
#[derive(Debug)]
pub struct Refuse {
    pub answer: Answer,
    pub headers: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Error(ErrorKind),
    NoContent,
}

/// What a filter sees of a request.
pub struct ReqCx<'a> {
    pub raw: &'a [u8],
    pub head: &'a mut RequestHead,
    /// The path in normal form (see [`crate::path`]), what routing saw.
    pub path: &'a [u8],
    /// The received query (with its `?`) as a range of `raw`.
    pub query: Range<usize>,
    /// Length of the route's matched path prefix (0 for other matches).
    pub prefix_len: usize,
    /// Index of the route's service; `None` for `respond` routes.
    pub service: Option<u32>,
    pub edits: &'a mut Edits,
    /// The app authenticated by an earlier filter.
    pub app: Option<&'a AppRt>,
    pub now: Instant,
    pub client: IpAddr,
}

/// One policy on a route.
pub trait Filter: Send + Sync + Debug {
    /// Runs before the request is forwarded; an error answers it.
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse>;
}

/// `auth: app_key`: finds the app key in a header, a query parameter or a
/// `~KEY` path segment right after the route's prefix, removes it from the
/// request, checks the app may call the route's service, and tells the
/// upstream who called in `X-App-Id`.
#[derive(Debug)]
pub struct AppKeyAuth {
    pub apps: Arc<AppTable>,
    pub sources: AppKeySources,
}

/// `WWW-Authenticate` for app-key routes.
const CHALLENGE: &[u8] = b"www-authenticate: AppKey realm=\"sluicegate\"\r\n";

impl AppKeyAuth {
    fn refuse_401() -> Refuse {
        Refuse {
            answer: Answer::Error(ErrorKind::Unauthorized),
            headers: CHALLENGE.to_vec(),
        }
    }
}

impl Filter for AppKeyAuth {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let raw = cx.raw;
        let mut key: Option<&[u8]> = None;
        // Header: every copy is removed; a client-sent X-App-Id too, so an
        // upstream can trust the one the gateway adds.
        for h in cx.head.headers.iter_mut() {
            let name = &raw[h.name.clone()];
            if let Some(hn) = &self.sources.header {
                if name.eq_ignore_ascii_case(hn.as_bytes()) {
                    h.skip = true;
                    if key.is_none() {
                        key = Some(crate::codec::trim(&raw[h.value.clone()]));
                    }
                    continue;
                }
            }
            if name.eq_ignore_ascii_case(b"x-app-id") {
                h.skip = true;
            }
        }
        // Query parameter: removed from the query sent upstream.
        if let Some(param) = &self.sources.query {
            let q = &raw[cx.query.clone()];
            if q.len() > 1 {
                let (found, rest) = take_query_param(&q[1..], param.as_bytes());
                if let Some(v) = found {
                    key = key.or(Some(v));
                    cx.edits.query = Some(rest);
                }
            }
        }
        // Path segment: /prefix/~KEY/rest -> /prefix/rest.
        if self.sources.path_segment {
            let path = cx.path;
            let after = &path[cx.prefix_len.min(path.len())..];
            if let Some(seg) = after.strip_prefix(b"/~") {
                let end = memchr::memchr(b'/', seg).unwrap_or(seg.len());
                key = key.or(Some(&seg[..end]));
                let mut p = Vec::with_capacity(path.len());
                p.extend_from_slice(&path[..cx.prefix_len]);
                p.extend_from_slice(&seg[end..]);
                if p.is_empty() {
                    p.push(b'/');
                }
                cx.edits.path = Some(p);
            }
        }
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            return Err(Self::refuse_401());
        };
        let Some(app) = self.apps.by_key(key) else {
            return Err(Self::refuse_401());
        };
        admit_app(app, cx, Some(crate::apps::fingerprint(key)))
    }
}

/// After authentication: counts the request for the app, checks its
/// service, method and path rules (403), and records it for the upstream
/// (`X-App-Id`), the later filters and the log.
fn admit_app<'a>(app: &'a AppRt, cx: &mut ReqCx<'a>, key_fp: Option<String>) -> Result<(), Refuse> {
    app.metrics.requests.fetch_add(1, Ordering::Relaxed);
    cx.edits.app = Some(app.id.clone());
    let method = &cx.raw[cx.head.method.clone()];
    if !cx.service.is_none_or(|svc| app.may_call(svc)) || !app.may_request(method, cx.path) {
        app.metrics.forbidden.fetch_add(1, Ordering::Relaxed);
        return Err(Refuse {
            answer: Answer::Error(ErrorKind::Forbidden),
            headers: Vec::new(),
        });
    }
    cx.edits.key_fp = key_fp;
    cx.edits.request_headers.extend_from_slice(b"x-app-id: ");
    cx.edits
        .request_headers
        .extend_from_slice(app.id.as_bytes());
    cx.edits.request_headers.extend_from_slice(b"\r\n");
    cx.app = Some(app);
    Ok(())
}

/// `auth: jwt`: a `Bearer` token in `Authorization`, signed with the key of
/// the app its `app_claim` names, with that app's algorithm only (so never
/// `none`), not expired and already valid (with the configured leeway),
/// and with the configured `iss` and `aud`. Any failure: 401.
pub struct JwtAuth {
    pub apps: Arc<AppTable>,
    pub app_claim: String,
    /// Checks per algorithm: HS256, RS256, ES256.
    validations: [jsonwebtoken::Validation; 3],
}

impl Debug for JwtAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuth")
            .field("app_claim", &self.app_claim)
            .finish_non_exhaustive()
    }
}

impl JwtAuth {
    pub fn new(apps: Arc<AppTable>, s: &sluicegate_config::JwtSettings) -> JwtAuth {
        use jsonwebtoken::{Algorithm, Validation};
        let make = |alg| {
            let mut v = Validation::new(alg);
            v.leeway = s.leeway.as_secs();
            v.validate_nbf = true;
            // A configured iss or aud must be present, not just right when
            // present.
            let mut required = vec!["exp"];
            if s.issuer.is_some() {
                required.push("iss");
            }
            if s.audience.is_some() {
                required.push("aud");
            }
            v.set_required_spec_claims(&required);
            match &s.issuer {
                Some(iss) => v.set_issuer(&[iss]),
                None => v.iss = None,
            }
            match &s.audience {
                Some(aud) => v.set_audience(&[aud]),
                None => v.validate_aud = false,
            }
            v
        };
        JwtAuth {
            apps,
            app_claim: s.app_claim.clone(),
            validations: [
                make(Algorithm::HS256),
                make(Algorithm::RS256),
                make(Algorithm::ES256),
            ],
        }
    }

    fn refuse(token_given: bool) -> Refuse {
        let headers = if token_given {
            b"www-authenticate: Bearer realm=\"sluicegate\", error=\"invalid_token\"\r\n".to_vec()
        } else {
            b"www-authenticate: Bearer realm=\"sluicegate\"\r\n".to_vec()
        };
        Refuse {
            answer: Answer::Error(ErrorKind::Unauthorized),
            headers,
        }
    }

    /// The app id a token names, read before its signature is checked
    /// (only to choose the key; nothing else is trusted until verified).
    fn claimed_app(&self, token: &str) -> Option<String> {
        use base64::Engine;
        let payload = token.split('.').nth(1)?;
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&json).ok()?;
        v.get(&self.app_claim)?.as_str().map(str::to_string)
    }
}

impl Filter for JwtAuth {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let raw = cx.raw;
        let auth = cx
            .head
            .headers
            .iter()
            .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(b"authorization"))
            .map(|h| crate::codec::trim(&raw[h.value.clone()]));
        let token = match auth {
            Some(v) if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") => {
                crate::codec::trim(&v[7..])
            }
            _ => return Err(Self::refuse(false)),
        };
        let Ok(token) = std::str::from_utf8(token) else {
            return Err(Self::refuse(true));
        };
        let app = self
            .claimed_app(token)
            .and_then(|id| self.apps.by_id(&id))
            .filter(|a| a.jwt.is_some())
            .ok_or_else(|| Self::refuse(true))?;
        let Some(key) = app.jwt.as_deref() else {
            return Err(Self::refuse(true));
        };
        let validation = match key.alg {
            jsonwebtoken::Algorithm::HS256 => &self.validations[0],
            jsonwebtoken::Algorithm::RS256 => &self.validations[1],
            _ => &self.validations[2],
        };
        // The claim named the app; the signature (with that app's key and
        // algorithm) must now vouch for all of it.
        if jsonwebtoken::decode::<serde_json::Value>(token, &key.key, validation).is_err() {
            return Err(Self::refuse(true));
        }
        admit_app(app, cx, None)
    }
}

/// Splits `name=value` out of a query (without its `?`): the first value
/// of `name`, and the query without every `name` parameter (with its `?`,
/// or empty when nothing is left).
fn take_query_param<'q>(q: &'q [u8], name: &[u8]) -> (Option<&'q [u8]>, Vec<u8>) {
    let mut found = None;
    let mut rest = Vec::with_capacity(q.len() + 1);
    for part in q.split(|&b| b == b'&') {
        let (k, v) = match memchr::memchr(b'=', part) {
            Some(i) => (&part[..i], &part[i + 1..]),
            None => (part, &part[part.len()..]),
        };
        if k == name {
            found = found.or(Some(v));
            continue;
        }
        if part.is_empty() {
            continue;
        }
        rest.push(if rest.is_empty() { b'?' } else { b'&' });
        rest.extend_from_slice(part);
    }
    (found, rest)
}

/// The authenticated app's plan for the route's service: rate, quota and
/// concurrency. Over a limit: 429 with `Retry-After` and `RateLimit-*`;
/// under it, `RateLimit-*` go on the response.
#[derive(Debug)]
pub struct PlanLimit;

impl Filter for PlanLimit {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let Some(app) = cx.app else { return Ok(()) };
        let Some(charge) = app.charge_for(cx.service.unwrap_or(u32::MAX)) else {
            return Ok(());
        };
        charge_or_refuse(&charge.state, &charge.plan, cx, || {
            app.metrics.limited.fetch_add(1, Ordering::Relaxed);
        })
    }
}

/// Charges one request to `state` under `plan`: the concurrency guard and
/// the `RateLimit-*` response headers go into the edits, or the refusal
/// (429, `Retry-After`, `RateLimit-*`) is returned after `on_refuse` ran.
fn charge_or_refuse(
    state: &Arc<LimitState>,
    plan: &PlanRt,
    cx: &mut ReqCx<'_>,
    on_refuse: impl FnOnce(),
) -> Result<(), Refuse> {
    match state.admit(plan, cx.now, SystemTime::now()) {
        Ok((guard, c)) => {
            cx.edits.guards.extend(guard);
            if c.limit > 0 {
                ratelimit_headers(
                    &mut cx.edits.response_headers,
                    c.limit,
                    c.remaining,
                    c.reset,
                );
            }
            Ok(())
        }
        Err(r) => {
            on_refuse();
            let mut headers = Vec::with_capacity(128);
            headers.extend_from_slice(b"retry-after: ");
            let secs = r.retry_after.as_secs() + u64::from(r.retry_after.subsec_nanos() > 0);
            headers.extend_from_slice(itoa::Buffer::new().format(secs.max(1)).as_bytes());
            headers.extend_from_slice(b"\r\n");
            ratelimit_headers(&mut headers, r.limit, 0, r.reset);
            Err(Refuse {
                answer: Answer::Error(ErrorKind::TooManyRequests),
                headers,
            })
        }
    }
}

/// Whose counters a route limit charges.
#[derive(Debug, Clone)]
pub enum RouteCounters {
    /// One set for the whole route.
    Route(Arc<LimitState>),
    /// A set per client IP address.
    ClientIp(Arc<ClientLimits>),
}

/// A route's own `limit`, for every caller: 429 like a plan.
#[derive(Debug)]
pub struct RouteLimiter {
    pub plan: PlanRt,
    pub counters: RouteCounters,
}

impl Filter for RouteLimiter {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let state = match &self.counters {
            RouteCounters::Route(s) => s.clone(),
            RouteCounters::ClientIp(t) => t.state(cx.client, cx.now),
        };
        charge_or_refuse(&state, &self.plan, cx, || {})
    }
}

/// `set`/`add`/`remove` compiled: names to drop (removed and set ones,
/// lower-cased) and the lines to add (set ones, then added ones).
#[derive(Debug, Default)]
pub struct HeaderOpsRt {
    drop: Vec<Box<[u8]>>,
    pub lines: Vec<u8>,
}

impl HeaderOpsRt {
    pub fn new(ops: &sluicegate_config::HeaderOps) -> Option<HeaderOpsRt> {
        if ops.set.is_empty() && ops.add.is_empty() && ops.remove.is_empty() {
            return None;
        }
        let mut rt = HeaderOpsRt::default();
        for name in &ops.remove {
            rt.drop.push(name.as_bytes().into());
        }
        for (name, value) in ops.set.iter().chain(&ops.add) {
            rt.lines.extend_from_slice(name.as_bytes());
            rt.lines.extend_from_slice(b": ");
            rt.lines.extend_from_slice(value.as_bytes());
            rt.lines.extend_from_slice(b"\r\n");
        }
        for (name, _) in &ops.set {
            rt.drop.push(name.to_ascii_lowercase().into_bytes().into());
        }
        Some(rt)
    }

    /// Whether a received header named `name` is dropped.
    pub fn drops(&self, name: &[u8]) -> bool {
        self.drop.iter().any(|d| name.eq_ignore_ascii_case(d))
    }
}

/// `request_headers` and `response_headers` of a route.
#[derive(Debug)]
pub struct HeaderPolicy {
    pub request: Option<HeaderOpsRt>,
    pub response: Option<Arc<HeaderOpsRt>>,
}

impl Filter for HeaderPolicy {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        if let Some(ops) = &self.request {
            for h in cx.head.headers.iter_mut() {
                if !h.skip && ops.drops(&cx.raw[h.name.clone()]) {
                    h.skip = true;
                }
            }
            cx.edits.request_headers.extend_from_slice(&ops.lines);
        }
        cx.edits.response_ops.clone_from(&self.response);
        Ok(())
    }
}

/// A route's `cors`: preflights (OPTIONS with
/// `Access-Control-Request-Method`) are answered here, before auth, with
/// 204 or 403; other requests from an allowed origin get the
/// `Access-Control-Allow-*` headers on their response, from the gateway
/// only.
#[derive(Debug)]
pub struct CorsPolicy {
    origins: Vec<sluicegate_config::OriginMatch>,
    methods: Vec<String>,
    headers: Vec<String>,
    /// Prebuilt `access-control-allow-methods` / `-headers` / `-max-age`
    /// lines for preflights, and `-expose-headers` for the others.
    preflight_lines: Vec<u8>,
    expose_line: Vec<u8>,
    credentials: bool,
}

impl CorsPolicy {
    pub fn new(c: &sluicegate_config::Cors) -> CorsPolicy {
        let mut preflight_lines = Vec::new();
        preflight_lines.extend_from_slice(b"access-control-allow-methods: ");
        preflight_lines.extend_from_slice(c.methods.join(", ").as_bytes());
        preflight_lines.extend_from_slice(b"\r\n");
        if !c.headers.is_empty() {
            preflight_lines.extend_from_slice(b"access-control-allow-headers: ");
            preflight_lines.extend_from_slice(c.headers.join(", ").as_bytes());
            preflight_lines.extend_from_slice(b"\r\n");
        }
        if let Some(age) = c.max_age {
            preflight_lines.extend_from_slice(b"access-control-max-age: ");
            preflight_lines.extend_from_slice(itoa::Buffer::new().format(age.as_secs()).as_bytes());
            preflight_lines.extend_from_slice(b"\r\n");
        }
        let mut expose_line = Vec::new();
        if !c.expose_headers.is_empty() {
            expose_line.extend_from_slice(b"access-control-expose-headers: ");
            expose_line.extend_from_slice(c.expose_headers.join(", ").as_bytes());
            expose_line.extend_from_slice(b"\r\n");
        }
        CorsPolicy {
            origins: c.origins.clone(),
            methods: c.methods.clone(),
            headers: c.headers.clone(),
            preflight_lines,
            expose_line,
            credentials: c.credentials,
        }
    }

    fn allows(&self, origin: &[u8]) -> bool {
        use sluicegate_config::OriginMatch;
        self.origins.iter().any(|o| match o {
            OriginMatch::Any => true,
            OriginMatch::Exact(e) => origin.eq_ignore_ascii_case(e.as_bytes()),
            OriginMatch::Suffix { scheme, suffix } => {
                origin.len() > scheme.len() + suffix.len()
                    && origin[..scheme.len()].eq_ignore_ascii_case(scheme.as_bytes())
                    && host_ends_with(&origin[scheme.len()..], suffix.as_bytes())
            }
        })
    }

    /// `Access-Control-Allow-Origin` (and credentials, Vary) for `origin`.
    fn origin_lines(&self, out: &mut Vec<u8>, origin: &[u8]) {
        let any = self.origins.contains(&sluicegate_config::OriginMatch::Any);
        out.extend_from_slice(b"access-control-allow-origin: ");
        if any && !self.credentials {
            out.extend_from_slice(b"*\r\n");
        } else {
            out.extend_from_slice(origin);
            out.extend_from_slice(b"\r\nvary: Origin\r\n");
        }
        if self.credentials {
            out.extend_from_slice(b"access-control-allow-credentials: true\r\n");
        }
    }
}

/// `host[:port]` ends with `suffix` (".example.com"), port aside.
fn host_ends_with(host_port: &[u8], suffix: &[u8]) -> bool {
    let host = match memchr::memrchr(b':', host_port) {
        Some(i) if !host_port.ends_with(b"]") => &host_port[..i],
        _ => host_port,
    };
    host.len() > suffix.len() && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
}

impl Filter for CorsPolicy {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let raw = cx.raw;
        let header = |name: &[u8]| {
            cx.head
                .headers
                .iter()
                .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(name))
                .map(|h| crate::codec::trim(&raw[h.value.clone()]))
        };
        let Some(origin) = header(b"origin") else {
            return Ok(()); // not a cross-origin request
        };
        let allowed = self.allows(origin);
        let preflight_method = header(b"access-control-request-method");
        if &raw[cx.head.method.clone()] == b"OPTIONS" {
            if let Some(method) = preflight_method {
                let forbidden = || Refuse {
                    answer: Answer::Error(ErrorKind::Forbidden),
                    headers: Vec::new(),
                };
                if !allowed || !self.methods.iter().any(|m| m.as_bytes() == method) {
                    return Err(forbidden());
                }
                if let Some(asked) = header(b"access-control-request-headers") {
                    let all_allowed = asked
                        .split(|&b| b == b',')
                        .map(crate::codec::trim)
                        .filter(|h| !h.is_empty())
                        .all(|h| {
                            self.headers
                                .iter()
                                .any(|a| h.eq_ignore_ascii_case(a.as_bytes()))
                        });
                    if !all_allowed {
                        return Err(forbidden());
                    }
                }
                let mut headers = Vec::with_capacity(256);
                self.origin_lines(&mut headers, origin);
                headers.extend_from_slice(&self.preflight_lines);
                return Err(Refuse {
                    answer: Answer::NoContent,
                    headers,
                });
            }
        }
        if allowed {
            cx.edits.cors = true;
            self.origin_lines(&mut cx.edits.response_headers, origin);
            cx.edits
                .response_headers
                .extend_from_slice(&self.expose_line);
        }
        Ok(())
    }
}

/// A route's `rewrite`: after `strip_prefix`, the first match of the
/// regex in the path is replaced; the result is what goes upstream.
#[derive(Debug)]
pub struct PathRewrite {
    pub regex: regex::bytes::Regex,
    pub replacement: Vec<u8>,
    /// The route strips its matched prefix first.
    pub strip: bool,
}

impl Filter for PathRewrite {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let base = cx.edits.path.as_deref().unwrap_or(cx.path);
        let base = if self.strip && cx.prefix_len > 0 && cx.prefix_len <= base.len() {
            match &base[cx.prefix_len..] {
                b"" => &b"/"[..],
                rest => rest,
            }
        } else {
            base
        };
        let mut out = self.regex.replace(base, &self.replacement[..]).into_owned();
        if out.first() != Some(&b'/') {
            out.insert(0, b'/');
        }
        cx.edits.path = Some(out);
        cx.edits.path_final = true;
        Ok(())
    }
}

/// A route's `ip` rules: 403 for a client address they do not admit.
#[derive(Debug)]
pub struct IpFilter(pub sluicegate_config::IpRules);

impl Filter for IpFilter {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        if self.0.admits(cx.client) {
            Ok(())
        } else {
            Err(Refuse {
                answer: Answer::Error(ErrorKind::Forbidden),
                headers: Vec::new(),
            })
        }
    }
}

fn ratelimit_headers(out: &mut Vec<u8>, limit: u64, remaining: u64, reset: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b"ratelimit-limit: ");
    out.extend_from_slice(b.format(limit).as_bytes());
    out.extend_from_slice(b"\r\nratelimit-remaining: ");
    out.extend_from_slice(b.format(remaining).as_bytes());
    out.extend_from_slice(b"\r\nratelimit-reset: ");
    out.extend_from_slice(b.format(reset).as_bytes());
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_param_is_taken_out() {
        let t = |q: &str| {
            let (v, rest) = take_query_param(q.as_bytes(), b"app_key");
            (
                v.map(|v| String::from_utf8(v.to_vec()).unwrap()),
                String::from_utf8(rest).unwrap(),
            )
        };
        assert_eq!(t("app_key=K1"), (Some("K1".into()), "".into()));
        assert_eq!(
            t("a=1&app_key=K1&b=2"),
            (Some("K1".into()), "?a=1&b=2".into())
        );
        assert_eq!(
            t("app_key=K1&app_key=K2&c"),
            (Some("K1".into()), "?c".into())
        );
        assert_eq!(t("xapp_key=K&a="), (None, "?xapp_key=K&a=".into()));
        assert_eq!(t("&&a=1&"), (None, "?a=1".into()));
    }
}
