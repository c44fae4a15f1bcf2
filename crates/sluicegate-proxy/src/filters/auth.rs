//! Authentication filters: app keys (header, query, `~KEY` segment), JWTs
//! (per-app keys and OpenID Connect issuers) and client certificates, all ending in the app's ACL check and
//! `X-App-Id`.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluicegate_config::AppKeySources;

use super::grant::{app_of, Credential, Readmit, Revoked};
use super::{Answer, Filter, InFlight, Refuse, ReqCx, Wait};
use crate::apps::introspect::Known;
use crate::apps::jwks::{IssuerState, TokenError, Verified};
use crate::apps::limit::PlanRt;
use crate::apps::AppRef;
use crate::proto::fields::Fields;
use crate::proto::response::ErrorKind;
use crate::transport::tls::identity::ClientIdentity;

/// `auth: app_key`: finds the app key in a header, a query parameter or a
/// `~KEY` path segment right after the route's prefix, removes it from the
/// request, checks the app may call the route's service, and tells the
/// upstream who called in `X-App-Id`.
#[derive(Debug)]
pub struct AppKeyAuth {
    /// Shared by every app-key route of a snapshot: one copy stays in
    /// cache, where a copy per route would be one more miss per request.
    pub sources: Arc<AppKeySources>,
}

impl AppKeyAuth {
    fn refuse_401() -> Refuse {
        let mut headers = Fields::new();
        headers.push(b"www-authenticate", b"AppKey realm=\"sluicegate\"");
        Refuse {
            answer: Answer::Error(ErrorKind::Unauthorized),
            headers,
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
                        key = Some(crate::proto::bytes::trim(&raw[h.value.clone()]));
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
                let end = crate::proto::bytes::find_byte(b'/', seg).unwrap_or(seg.len());
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
        let Some(app) = cx.apps.by_key(key) else {
            return Err(Self::refuse_401());
        };
        let fp = crate::apps::fingerprint(key);
        admit_app(app, cx, Some(fp), Credential::Key(fp))
    }

    fn readmit(&self, r: &Readmit<'_>) -> Option<Result<u32, Revoked>> {
        let Credential::Key(fp) = r.cred else {
            return Some(Err(Revoked::AuthChanged));
        };
        Some(app_of(r).and_then(|a| {
            if r.apps.has_key_fp(a, fp) {
                Ok(a)
            } else {
                Err(Revoked::KeyRemoved)
            }
        }))
    }
}

/// Which app a client certificate names, built once per snapshot from the
/// apps' `mtls` settings: by fingerprint, by a listed name, or (for apps
/// without `mtls`) by a subject CN equal to the app's id.
#[derive(Debug, Default)]
pub struct MtlsIndex {
    by_sha256: HashMap<[u8; 32], Box<str>>,
    by_name: HashMap<Box<str>, Box<str>>,
    /// Apps that list their certificates: their id alone names none.
    listed: HashSet<Box<str>>,
}

impl MtlsIndex {
    pub fn new(apps: &[sluicegate_config::App]) -> MtlsIndex {
        let mut ix = MtlsIndex::default();
        for a in apps {
            let Some(m) = &a.mtls else { continue };
            let id: Box<str> = a.id.as_str().into();
            ix.listed.insert(id.clone());
            for fp in &m.sha256 {
                ix.by_sha256.insert(*fp, id.clone());
            }
            for n in &m.names {
                ix.by_name.insert(n.to_ascii_lowercase().into(), id.clone());
            }
        }
        ix
    }

    /// The id of the app `who` names, if any.
    fn app_id<'a>(&'a self, who: &'a ClientIdentity) -> Option<&'a str> {
        if let Some(id) = self.by_sha256.get(&who.sha256) {
            return Some(id);
        }
        let names = who.cn.iter().chain(who.sans.iter());
        for n in names.clone() {
            if let Some(id) = self.by_name.get(n) {
                return Some(id);
            }
        }
        who.cn.as_deref().filter(|cn| !self.listed.contains(*cn))
    }
}

/// `auth: mtls`: the app is the one the connection's client certificate
/// names (the listener verified the certificate against its `client_ca`).
/// No certificate, or one that names no app: 401.
#[derive(Debug)]
pub struct MtlsAuth {
    pub index: Arc<MtlsIndex>,
}

impl Filter for MtlsAuth {
    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        // A client-sent X-App-Id never reaches the upstream.
        let raw = cx.raw;
        for h in cx.head.headers.iter_mut() {
            if raw[h.name.clone()].eq_ignore_ascii_case(b"x-app-id") {
                h.skip = true;
            }
        }
        let refuse = || Refuse {
            answer: Answer::Error(ErrorKind::Unauthorized),
            headers: Fields::default(),
        };
        let who = cx.identity.ok_or_else(refuse)?;
        let id = self.index.app_id(who).ok_or_else(refuse)?;
        let app = cx.apps.by_id(id).ok_or_else(refuse)?;
        admit_app(app, cx, None, Credential::Mtls)
    }

    fn readmit(&self, r: &Readmit<'_>) -> Option<Result<u32, Revoked>> {
        if r.cred != Credential::Mtls {
            return Some(Err(Revoked::AuthChanged));
        }
        Some(app_of(r).and_then(
            |a| match r.identity.and_then(|who| self.index.app_id(who)) {
                Some(id) if id == r.app => Ok(a),
                _ => Err(Revoked::KeyRemoved),
            },
        ))
    }
}

/// After authentication: counts the request for the app, checks its
/// service, method and path rules (403), and records it for the upstream
/// (`X-App-Id`), the later filters and the log.
fn admit_app<'a>(
    app: AppRef<'a>,
    cx: &mut ReqCx<'a>,
    key_fp: Option<u32>,
    cred: Credential,
) -> Result<(), Refuse> {
    app.slot().requests.fetch_add(1, Ordering::Relaxed);
    cx.edits.app = Some(app.index);
    let method = &cx.raw[cx.head.method.clone()];
    if !cx.service.is_none_or(|svc| app.may_call(svc)) || !app.may_request(method, cx.path) {
        app.slot().forbidden.fetch_add(1, Ordering::Relaxed);
        return Err(Refuse {
            answer: Answer::Error(ErrorKind::Forbidden),
            headers: Fields::default(),
        });
    }
    cx.edits.key_fp = key_fp;
    cx.edits.cred = cred;
    cx.edits
        .request_headers
        .push(b"x-app-id", app.id().as_bytes());
    cx.app = Some(app);
    Ok(())
}

/// What every `auth: jwt` route of a snapshot shares: the checks of
/// per-app keys, the OpenID Connect issuers (kept across reloads in the
/// registry) with their default plans, and the header names no client
/// may send upstream.
pub struct JwtShared {
    pub app_claim: String,
    /// Added to a token's `exp` for the end of a stream it admitted;
    /// `None`: `jwt.close_on_expiry: false`, streams outlive their token.
    close_after: Option<u64>,
    /// Checks per algorithm of per-app keys: HS256, RS256, ES256.
    validations: [jsonwebtoken::Validation; 3],
    pub issuers: Box<[Arc<IssuerState>]>,
    /// Each issuer's `default_plan`, compiled (same order).
    default_plans: Box<[Option<PlanRt>]>,
    /// `x-app-id` and every issuer's `claims_to_headers` names, lower case.
    strip: Box<[Box<[u8]>]>,
    /// The one issuer with `introspection` (its index): opaque tokens are
    /// its.
    introspect: Option<usize>,
}

/// What [`JwtShared::identify`] says when the introspection endpoint did
/// not answer: a 503, not a bad token.
const INTROSPECTION_DOWN: &str = "the authorization server did not answer";

impl Debug for JwtShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtShared")
            .field("app_claim", &self.app_claim)
            .field("issuers", &self.issuers)
            .finish_non_exhaustive()
    }
}

impl JwtShared {
    pub fn new(
        s: &sluicegate_config::JwtSettings,
        issuers: Vec<Arc<IssuerState>>,
        plans: &[sluicegate_config::Plan],
    ) -> JwtShared {
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
        let mut strip: Vec<Box<[u8]>> = vec![b"x-app-id".as_slice().into()];
        for i in &issuers {
            for (_, h) in &i.cfg.claims_to_headers {
                let h: Box<[u8]> = h.to_ascii_lowercase().into_bytes().into();
                if !strip.contains(&h) {
                    strip.push(h);
                }
            }
        }
        let default_plans = issuers
            .iter()
            .map(|i| {
                let name = i.cfg.default_plan.as_deref()?;
                plans
                    .iter()
                    .find(|p| p.name == name)
                    .map(crate::apps::jwks::default_plan)
            })
            .collect();
        JwtShared {
            introspect: issuers.iter().position(|i| i.introspect.is_some()),
            app_claim: s.app_claim.clone(),
            close_after: s.close_on_expiry.then_some(s.leeway.as_secs()),
            validations: [
                make(Algorithm::HS256),
                make(Algorithm::RS256),
                make(Algorithm::ES256),
            ],
            issuers: issuers.into(),
            default_plans,
            strip: strip.into(),
        }
    }

    /// The one place that decides who a bearer token's caller is: an
    /// issuer's token (from the cache, else checked with the issuer's
    /// key set), or a token signed with its app's own key. `Ok` holds the
    /// issuer's index (`None`: a per-app key) and what the token says.
    fn identify(
        &self,
        token: &str,
        apps: &Arc<crate::apps::AppTable>,
    ) -> Result<(Option<usize>, Arc<Verified>), &'static str> {
        // A token that is not a JWT: the introspecting issuer's answer,
        // which the filter's wait has asked for.
        if let Some(i) = self.introspect {
            if !token.contains('.') {
                let intro = self.issuers[i].introspect.as_ref().expect("introspects");
                return match intro.cached(token.as_bytes()) {
                    Some(Known::Active(v)) => Ok((Some(i), v)),
                    Some(Known::Inactive) => Err("inactive token"),
                    None => Err(INTROSPECTION_DOWN),
                };
            }
        }
        for (i, iss) in self.issuers.iter().enumerate() {
            if let Some(v) = iss.cached(token.as_bytes()) {
                return Ok((Some(i), v));
            }
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| "malformed token")?;
        let claims = payload(token).ok_or("malformed token")?;
        if !self.issuers.is_empty() {
            if let Some(iss) = claims.get("iss").and_then(serde_json::Value::as_str) {
                if let Some(i) = self.issuers.iter().position(|s| s.cfg.issuer == iss) {
                    let v = self.issuers[i]
                        .verify(token, &header)
                        .map_err(TokenError::description)?;
                    return Ok((Some(i), v));
                }
            }
        }
        // A per-app key: the claim names the app; the signature (with that
        // app's key and algorithm) must then vouch for all of it.
        let id = claims
            .get(&self.app_claim)
            .and_then(serde_json::Value::as_str)
            .ok_or("unknown issuer or app")?;
        let app = apps.by_id(id).ok_or("unknown issuer or app")?;
        let key = app.jwt().ok_or("unknown issuer or app")?;
        let validation = match key.alg {
            jsonwebtoken::Algorithm::HS256 => &self.validations[0],
            jsonwebtoken::Algorithm::RS256 => &self.validations[1],
            _ => &self.validations[2],
        };
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token, &key.key, validation,
        )
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => "token expired",
            _ => "invalid token",
        })?;
        let v = Verified::new(data.claims, Some(&self.app_claim), None, &[])
            .ok_or("the token names no app")?;
        Ok((None, Arc::new(v)))
    }
}

/// The claims of a token, read before its signature is checked (only to
/// choose the key; nothing else is trusted until verified).
fn payload(token: &str) -> Option<serde_json::Map<String, serde_json::Value>> {
    use base64::Engine;
    let payload = token.split('.').nth(1)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&json).ok()
}

/// `auth: jwt`: a `Bearer` token in `Authorization`, either from one of
/// the `jwt.issuers` (checked with the issuer's published keys, whose
/// algorithm must fit the key, never `none` nor HMAC) or signed with the
/// key of the app its `app_claim` names (that app's algorithm only); not
/// expired and already valid (with the configured leeway), with the
/// right `iss` and `aud`. Any failure: 401 with RFC 6750's
/// `error="invalid_token"`; a token without the route's `scopes`: 403
/// `error="insufficient_scope"`. The token's claims go upstream as the
/// issuer's `claims_to_headers`, and stay readable by later filters
/// (`Edits::token`).
pub struct JwtAuth {
    pub shared: Arc<JwtShared>,
    scopes: Box<[Box<str>]>,
    /// The 403's `WWW-Authenticate`, made once.
    insufficient: Box<[u8]>,
}

impl Debug for JwtAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtAuth")
            .field("shared", &self.shared)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl JwtAuth {
    pub fn new(shared: Arc<JwtShared>, scopes: &[String]) -> JwtAuth {
        let insufficient = format!(
            "Bearer realm=\"sluicegate\", error=\"insufficient_scope\", error_description=\"the token lacks a scope the route needs\", scope=\"{}\"",
            scopes.join(" ")
        );
        JwtAuth {
            shared,
            scopes: scopes.iter().map(|s| s.as_str().into()).collect(),
            insufficient: insufficient.into_bytes().into(),
        }
    }

    fn refuse(description: Option<&str>) -> Refuse {
        let mut headers = Fields::new();
        match description {
            Some(d) => headers.push(
                b"www-authenticate",
                format!(
                    "Bearer realm=\"sluicegate\", error=\"invalid_token\", error_description=\"{d}\""
                )
                .as_bytes(),
            ),
            None => headers.push(b"www-authenticate", b"Bearer realm=\"sluicegate\""),
        }
        Refuse {
            answer: Answer::Error(ErrorKind::Unauthorized),
            headers,
        }
    }

    /// The bearer token of `Authorization` (the first such header).
    fn bearer<'r>(raw: &'r [u8], head: &crate::proto::head::RequestHead) -> Option<&'r [u8]> {
        let h = head
            .headers
            .iter()
            .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(b"authorization"))?;
        let v = crate::proto::bytes::trim(&raw[h.value.clone()]);
        (v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer "))
            .then(|| crate::proto::bytes::trim(&v[7..]))
    }

    fn forbidden(www: Option<&[u8]>) -> Refuse {
        let mut headers = Fields::new();
        if let Some(w) = www {
            headers.push(b"www-authenticate", w);
        }
        Refuse {
            answer: Answer::Error(ErrorKind::Forbidden),
            headers,
        }
    }
}

impl Filter for JwtAuth {
    /// Only when an issuer introspects opaque tokens.
    fn waits(&self) -> bool {
        self.shared.introspect.is_some()
    }

    /// An opaque token with no cached answer: the introspection call (one
    /// per token, however many requests wait for it).
    fn wait<'a>(&'a self, cx: &ReqCx<'a>) -> Option<Wait<'a>> {
        let i = self.shared.introspect?;
        let token = Self::bearer(cx.raw, cx.head)?;
        if token.is_empty() || token.contains(&b'.') {
            return None;
        }
        let intro = self.shared.issuers[i].introspect.as_ref()?;
        if intro.cached(token).is_some() {
            intro.cache_hits.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(Box::pin(intro.clone().settle(token.into())))
    }

    fn on_request<'a>(&'a self, cx: &mut ReqCx<'a>) -> Result<(), Refuse> {
        let raw = cx.raw;
        let shared = &*self.shared;
        let mut auth = None;
        // Clients' copies of the headers the gateway sets never go upstream.
        for h in cx.head.headers.iter_mut() {
            let name = &raw[h.name.clone()];
            if name.eq_ignore_ascii_case(b"authorization") {
                auth = auth.or(Some(crate::proto::bytes::trim(&raw[h.value.clone()])));
            } else if shared.strip.iter().any(|s| name.eq_ignore_ascii_case(s)) {
                h.skip = true;
            }
        }
        let token = match auth {
            Some(v) if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") => {
                crate::proto::bytes::trim(&v[7..])
            }
            _ => return Err(Self::refuse(None)),
        };
        let Ok(token) = std::str::from_utf8(token) else {
            return Err(Self::refuse(Some("malformed token")));
        };
        let (issuer, v) = shared.identify(token, cx.apps).map_err(|d| {
            if d == INTROSPECTION_DOWN {
                Refuse {
                    answer: Answer::Error(ErrorKind::AuthUnavailable),
                    headers: Fields::new(),
                }
            } else {
                Self::refuse(Some(d))
            }
        })?;
        if !v.has_scopes(&self.scopes) {
            return Err(Self::forbidden(Some(&self.insufficient)));
        }
        for (name, value) in v.headers.iter() {
            cx.edits.request_headers.push(name, value);
        }
        let apps: &'a Arc<crate::apps::AppTable> = cx.apps;
        let app = apps.by_id(&v.app);
        let id = v.clone();
        // When a stream it admits ends (its `exp` plus the leeway).
        let until = shared
            .close_after
            .map_or(0, |leeway| v.exp.saturating_add(leeway).max(1));
        cx.edits.token = Some(v);
        if let Some(app) = app {
            let cred = match issuer {
                Some(i) => Credential::Issuer {
                    issuer: shared.issuers[i].fp,
                    until,
                },
                None => Credential::Jwt {
                    key: app.jwt().map_or(0, |k| k.fp),
                    until,
                },
            };
            return admit_app(app, cx, None, cred);
        }
        // An app the issuer names that is not under `apps`: its default
        // plan, counted per app id, or refused.
        let Some(i) = issuer else {
            return Err(Self::refuse(Some("unknown issuer or app")));
        };
        let Some(plan) = shared.default_plans[i].as_ref() else {
            return Err(Self::forbidden(None));
        };
        let limits = &shared.issuers[i].default_limits;
        let state = limits.state(limits.key_of(Some(id.app.as_bytes())), cx.now);
        cx.edits
            .request_headers
            .push(b"x-app-id", id.app.as_bytes());
        super::limits::charge_or_refuse(&state, || InFlight::State(state.clone()), plan, cx, || {})
    }

    fn readmit(&self, r: &Readmit<'_>) -> Option<Result<u32, Revoked>> {
        match r.cred {
            Credential::Jwt { key, .. } => {
                Some(
                    app_of(r).and_then(|a| match r.apps.by_id(r.app).and_then(|app| app.jwt()) {
                        Some(k) if k.fp == key => Ok(a),
                        _ => Err(Revoked::KeyRemoved),
                    }),
                )
            }
            // A token of an OpenID Connect issuer: admitted while that
            // issuer (same name and settings) is still configured.
            Credential::Issuer { issuer, .. } => {
                Some(app_of(r).and_then(
                    |a| match self.shared.issuers.iter().any(|i| i.fp == issuer) {
                        true => Ok(a),
                        false => Err(Revoked::KeyRemoved),
                    },
                ))
            }
            _ => Some(Err(Revoked::AuthChanged)),
        }
    }
}
/// Splits `name=value` out of a query (without its `?`): the first value
/// of `name`, and the query without every `name` parameter (with its `?`,
/// or empty when nothing is left). Without `name` nothing is copied and
/// the second part is empty (the query is forwarded as received).
fn take_query_param<'q>(q: &'q [u8], name: &[u8]) -> (Option<&'q [u8]>, Vec<u8>) {
    let key_of = |part: &'q [u8]| match memchr::memchr(b'=', part) {
        Some(i) => &part[..i],
        None => part,
    };
    // Most queries on these routes carry no key: no copy for them.
    if !q.split(|&b| b == b'&').any(|part| key_of(part) == name) {
        return (None, Vec::new());
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_names_its_app() {
        let cfg = sluicegate_config::parse(
            "listen: [{ addr: \"127.0.0.1:9\", tls: { certificates: [{ cert: c, key: k }], client_ca: ca } }]\n\
             apps:\n\
             - { id: plain }\n\
             - { id: listed, mtls: { names: [svc.internal], sha256: [\"0101010101010101010101010101010101010101010101010101010101010101\"] } }\n",
        )
        .unwrap();
        let ix = MtlsIndex::new(&cfg.apps);
        let who = |cn: &str, sans: &[&str], fp: u8| ClientIdentity {
            sha256: [fp; 32],
            cn: Some(cn.into()),
            sans: sans.iter().map(|s| (*s).into()).collect(),
        };
        // An app without mtls: its id as the subject CN.
        assert_eq!(ix.app_id(&who("plain", &[], 0)), Some("plain"));
        // An app that lists its certificates: by SAN, CN or fingerprint...
        assert_eq!(ix.app_id(&who("x", &["svc.internal"], 0)), Some("listed"));
        assert_eq!(ix.app_id(&who("svc.internal", &[], 0)), Some("listed"));
        assert_eq!(ix.app_id(&who("x", &[], 1)), Some("listed"));
        // ...but never by its id alone.
        assert_eq!(ix.app_id(&who("listed", &[], 0)), None);
    }

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
        assert_eq!(t("xapp_key=K&a="), (None, "".into()));
        assert_eq!(t("&&a=1&"), (None, "".into()));
        assert_eq!(t("&&app_key=K&a=1&"), (Some("K".into()), "?a=1".into()));
    }
}
