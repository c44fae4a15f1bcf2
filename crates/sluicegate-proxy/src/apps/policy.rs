//! What an app may do and which plans it runs under (a [`Policy`], shared
//! by apps with the same rules), compiled from its config, and its JWT
//! verification key.

use std::collections::HashMap;
use std::sync::Arc;

use sluicegate_config::App;

/// No index: an app without a plan, or without a JWT key.
pub(super) const NONE: u32 = u32::MAX;

/// What one app may do and which plans it runs under; apps with the same
/// rules share one.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Policy {
    /// Allowed service indices (sorted); `None` means every service.
    pub(super) services: Option<Box<[u32]>>,
    /// Allowed methods and path prefixes; empty means any.
    pub(super) methods: Box<[Box<[u8]>]>,
    pub(super) paths: Box<[Box<[u8]>]>,
    /// Index into the table's plans, for services without their own.
    pub(super) default_plan: u32,
    /// (service index, service name, plan index), sorted by service; the
    /// app's slot for entry `i` is `extra_slots[app.extra + i]`.
    pub(super) by_service: Box<[(u32, Arc<str>, u32)]>,
}

/// Borrowed view of the parts of an app that decide its [`Policy`].
pub(super) type PolicyKey<'c> = (
    &'c Option<Vec<String>>,
    &'c [String],
    &'c [String],
    &'c Option<String>,
    &'c [(String, String)],
);

/// An app's JWT algorithm and verification key.
#[derive(Clone)]
pub struct JwtKeyRt {
    pub alg: jsonwebtoken::Algorithm,
    pub key: jsonwebtoken::DecodingKey,
    /// A fingerprint of the key material (see [`super::fingerprint`]): a
    /// stream admitted with a token remembers it, so that a change of the
    /// app's key ends the stream.
    pub fp: u32,
}

impl std::fmt::Debug for JwtKeyRt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JwtKeyRt({:?})", self.alg) // never the key
    }
}

pub(super) fn policy(
    app: &App,
    service_index: &HashMap<&str, u32>,
    plan_index: &HashMap<&str, u32>,
) -> Policy {
    let mut by_service: Vec<(u32, Arc<str>, u32)> = app
        .plans_by_service
        .iter()
        .filter_map(|(svc, plan)| {
            Some((
                *service_index.get(svc.as_str())?,
                Arc::from(svc.as_str()),
                *plan_index.get(plan.as_str())?,
            ))
        })
        .collect();
    by_service.sort_by_key(|e| e.0);
    let services = app.services.as_ref().map(|list| {
        let mut ids: Vec<u32> = list
            .iter()
            .filter_map(|s| service_index.get(s.as_str()).copied())
            .collect();
        ids.sort_unstable();
        ids.into_boxed_slice()
    });
    let bytes = |list: &[String]| -> Box<[Box<[u8]>]> {
        list.iter().map(|s| s.as_bytes().into()).collect()
    };
    Policy {
        services,
        methods: bytes(&app.methods),
        paths: bytes(&app.paths),
        default_plan: app
            .plan
            .as_deref()
            .and_then(|p| plan_index.get(p).copied())
            .unwrap_or(NONE),
        by_service: by_service.into_boxed_slice(),
    }
}

pub(super) fn jwt_key(j: &sluicegate_config::AppJwt) -> Result<JwtKeyRt, String> {
    use jsonwebtoken::{Algorithm, DecodingKey};
    use sluicegate_config::{JwtAlg, JwtKey};
    let err = |e: jsonwebtoken::errors::Error| format!("bad public key: {e}");
    let fp = match &j.key {
        JwtKey::Secret(s) => super::fingerprint(s),
        JwtKey::PublicKeyPem(p) => super::fingerprint(p),
    };
    let (alg, key) = match (j.alg, &j.key) {
        (JwtAlg::HS256, JwtKey::Secret(s)) => (Algorithm::HS256, DecodingKey::from_secret(s)),
        (JwtAlg::RS256, JwtKey::PublicKeyPem(p)) => {
            (Algorithm::RS256, DecodingKey::from_rsa_pem(p).map_err(err)?)
        }
        (JwtAlg::ES256, JwtKey::PublicKeyPem(p)) => {
            (Algorithm::ES256, DecodingKey::from_ec_pem(p).map_err(err)?)
        }
        _ => return Err("key does not match the algorithm".to_string()),
    };
    Ok(JwtKeyRt { alg, key, fp })
}
