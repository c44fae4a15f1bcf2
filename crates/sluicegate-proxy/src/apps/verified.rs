//! What a checked bearer token says (a JWT verified with its key, or an
//! issuer's introspection answer): the app, scopes, the headers of
//! `claims_to_headers` and every claim, shared by the requests that
//! present the token and read by the filters after auth.

use serde_json::{Map, Value};

/// A header field sent upstream: name and value.
pub type HeaderLine = (Box<[u8]>, Box<[u8]>);

/// What a verified token says, shared by the requests that present it
/// (through the cache) and read by the filters after auth: the app, the
/// scopes, the values of `claims_to_headers`, and every claim
/// ([`Verified::claim`], for limits keyed by a claim).
#[derive(Debug)]
pub struct Verified {
    /// The app the token names.
    pub app: Box<str>,
    /// Seconds since the epoch: the cache drops the token then.
    pub exp: u64,
    /// The key it was checked with: a cached token stops passing when its
    /// key leaves the issuer's set.
    pub kid: Option<Box<str>>,
    /// `scope` (space-separated) or `scp` (a string or a list).
    pub scopes: Box<[Box<str>]>,
    /// The upstream header names and values of `claims_to_headers`.
    pub headers: Box<[HeaderLine]>,
    pub claims: Map<String, Value>,
}

impl Verified {
    /// Reads the checked claims: `None` when the app claim is missing.
    pub fn new(
        claims: Map<String, Value>,
        app_claim: Option<&str>,
        kid: Option<Box<str>>,
        to_headers: &[(String, String)],
    ) -> Option<Verified> {
        let app = match app_claim {
            Some(c) => claims.get(c)?.as_str()?,
            None => claims
                .get("client_id")
                .and_then(Value::as_str)
                .or_else(|| claims.get("azp").and_then(Value::as_str))?,
        };
        let mut scopes: Vec<Box<str>> = Vec::new();
        match claims.get("scope").or_else(|| claims.get("scp")) {
            Some(Value::String(s)) => {
                scopes.extend(s.split(' ').filter(|s| !s.is_empty()).map(Into::into))
            }
            Some(Value::Array(a)) => {
                scopes.extend(a.iter().filter_map(Value::as_str).map(Into::into))
            }
            _ => {}
        }
        let mut headers = Vec::new();
        for (claim, header) in to_headers {
            let value = match claims.get(claim) {
                None | Some(Value::Null) => continue,
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            // A value that cannot be a header field's is not sent.
            if value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
                continue;
            }
            headers.push((header.as_bytes().into(), value.into_bytes().into()));
        }
        Some(Verified {
            app: app.into(),
            exp: claims.get("exp").and_then(Value::as_u64).unwrap_or(0),
            kid,
            scopes: scopes.into(),
            headers: headers.into(),
            claims,
        })
    }

    /// A claim of the token by name (top-level), for later filters.
    pub fn claim(&self, name: &str) -> Option<&Value> {
        self.claims.get(name)
    }

    pub fn has_scopes(&self, wanted: &[Box<str>]) -> bool {
        wanted.iter().all(|w| self.scopes.contains(w))
    }
}
