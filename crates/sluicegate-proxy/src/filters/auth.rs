//! Authentication filters: app keys (header, query, `~KEY` segment), JWTs
//! and client certificates, all ending in the app's ACL check and
//! `X-App-Id`.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use sluicegate_config::AppKeySources;

use super::grant::{app_of, Credential, Readmit, Revoked};
use super::{Answer, Filter, Refuse, ReqCx};
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

/// `auth: jwt`: a `Bearer` token in `Authorization`, signed with the key of
/// the app its `app_claim` names, with that app's algorithm only (so never
/// `none`), not expired and already valid (with the configured leeway),
/// and with the configured `iss` and `aud`. Any failure: 401.
pub struct JwtAuth {
    pub app_claim: String,
    /// Added to a token's `exp` for the end of a stream it admitted;
    /// `None`: `jwt.close_on_expiry: false`, streams outlive their token.
    close_after: Option<u64>,
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
    pub fn new(s: &sluicegate_config::JwtSettings) -> JwtAuth {
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
            app_claim: s.app_claim.clone(),
            close_after: s.close_on_expiry.then_some(s.leeway.as_secs()),
            validations: [
                make(Algorithm::HS256),
                make(Algorithm::RS256),
                make(Algorithm::ES256),
            ],
        }
    }

    fn refuse(token_given: bool) -> Refuse {
        let mut headers = Fields::new();
        headers.push(
            b"www-authenticate",
            if token_given {
                b"Bearer realm=\"sluicegate\", error=\"invalid_token\""
            } else {
                b"Bearer realm=\"sluicegate\""
            },
        );
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
            .map(|h| crate::proto::bytes::trim(&raw[h.value.clone()]));
        let token = match auth {
            Some(v) if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") => {
                crate::proto::bytes::trim(&v[7..])
            }
            _ => return Err(Self::refuse(false)),
        };
        let Ok(token) = std::str::from_utf8(token) else {
            return Err(Self::refuse(true));
        };
        let app = self
            .claimed_app(token)
            .and_then(|id| cx.apps.by_id(&id))
            .ok_or_else(|| Self::refuse(true))?;
        let Some(key) = app.jwt() else {
            return Err(Self::refuse(true));
        };
        let validation = match key.alg {
            jsonwebtoken::Algorithm::HS256 => &self.validations[0],
            jsonwebtoken::Algorithm::RS256 => &self.validations[1],
            _ => &self.validations[2],
        };
        // The claim named the app; the signature (with that app's key and
        // algorithm) must now vouch for all of it.
        let Ok(data) = jsonwebtoken::decode::<serde_json::Value>(token, &key.key, validation)
        else {
            return Err(Self::refuse(true));
        };
        // `exp` is required by the validation: a number.
        let exp = data.claims.get("exp").and_then(|e| e.as_u64());
        let until = match (self.close_after, exp) {
            (Some(leeway), Some(exp)) => exp.saturating_add(leeway).max(1),
            _ => 0,
        };
        let cred = Credential::Jwt { key: key.fp, until };
        admit_app(app, cx, None, cred)
    }

    fn readmit(&self, r: &Readmit<'_>) -> Option<Result<u32, Revoked>> {
        let Credential::Jwt { key, .. } = r.cred else {
            return Some(Err(Revoked::AuthChanged));
        };
        Some(
            app_of(r).and_then(|a| match r.apps.by_id(r.app).and_then(|app| app.jwt()) {
                Some(k) if k.fp == key => Ok(a),
                _ => Err(Revoked::KeyRemoved),
            }),
        )
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
