//! The apps table compiled from `apps` and `plans`: key lookup in constant
//! time per key, each app's plan per service, and the limit state that the
//! registry carries across reloads.
//!
//! Keys are found through a map from a keyed 64-bit hash of the key (the
//! secret is random per process) to candidate apps, and the candidate's
//! stored key is then compared in constant time, so the time a lookup
//! takes says nothing about how much of a guess was right.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use rustc_hash::FxBuildHasher;
use sluicegate_config::{App, Config};
use subtle::ConstantTimeEq;

use crate::limit::{LimitState, PlanRt};
use crate::metrics::AppMetrics;

/// A plan and the counters it charges.
#[derive(Debug, Clone)]
pub struct Charge {
    pub plan: Arc<PlanRt>,
    pub state: Arc<LimitState>,
}

#[derive(Debug)]
pub struct AppRt {
    pub id: Arc<str>,
    pub metrics: Arc<AppMetrics>,
    keys: Box<[Box<[u8]>]>,
    /// Allowed service indices (sorted); `None` means every service.
    services: Option<Box<[u32]>>,
    /// Allowed methods and path prefixes; empty means any.
    methods: Box<[Box<[u8]>]>,
    paths: Box<[Box<[u8]>]>,
    /// The plan for services without their own.
    default: Option<Charge>,
    /// (service index, plan), sorted by service.
    by_service: Box<[(u32, Charge)]>,
    /// How the app's JWTs are verified (boxed: most apps have none).
    pub jwt: Option<Box<JwtKeyRt>>,
}

/// An app's JWT algorithm and verification key.
pub struct JwtKeyRt {
    pub alg: jsonwebtoken::Algorithm,
    pub key: jsonwebtoken::DecodingKey,
}

impl std::fmt::Debug for JwtKeyRt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JwtKeyRt({:?})", self.alg) // never the key
    }
}

impl AppRt {
    pub fn may_call(&self, service: u32) -> bool {
        self.services
            .as_ref()
            .is_none_or(|s| s.binary_search(&service).is_ok())
    }

    /// Whether the app may use `method` on `path` (normalised).
    pub fn may_request(&self, method: &[u8], path: &[u8]) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| **m == *method))
            && (self.paths.is_empty()
                || self.paths.iter().any(|p| {
                    p.as_ref() == b"/"
                        || (path.starts_with(p) && matches!(path.get(p.len()), None | Some(b'/')))
                }))
    }

    /// The plan that applies to a call of `service`, if any.
    pub fn charge_for(&self, service: u32) -> Option<&Charge> {
        match self.by_service.binary_search_by_key(&service, |(s, _)| *s) {
            Ok(i) => Some(&self.by_service[i].1),
            Err(_) => self.default.as_ref(),
        }
    }
}

/// Limit state kept across reloads: (app id, service or "" for the app's
/// default plan) -> counters.
pub type LimitStates = HashMap<(Arc<str>, Arc<str>), Arc<LimitState>>;

/// Per-app state that outlives a snapshot: plan counters and metrics.
#[derive(Debug, Default)]
pub struct AppStates {
    pub limits: LimitStates,
    pub metrics: HashMap<Arc<str>, Arc<AppMetrics>>,
}

#[derive(Debug)]
pub struct AppTable {
    apps: Vec<AppRt>,
    /// Keyed hash of a key -> (app index, key index); collisions keep all.
    by_key: HashMap<u64, Vec<(u32, u32)>, FxBuildHasher>,
    /// App id -> index, for JWTs (which name their app in a claim).
    by_id: HashMap<Arc<str>, u32, FxBuildHasher>,
    secret: RandomState,
}

impl AppTable {
    /// Compiles the apps of `config`. `service_index` gives each service's
    /// index; `old` holds the limit state of the previous snapshot, and the
    /// state now in use is left in `live`.
    pub fn new(
        config: &Config,
        service_index: &HashMap<&str, u32>,
        old: &AppStates,
        live: &mut AppStates,
        secret: &RandomState,
    ) -> Result<AppTable, String> {
        let plans: HashMap<&str, Arc<PlanRt>> = config
            .plans
            .iter()
            .map(|p| (p.name.as_str(), Arc::new(PlanRt::new(p))))
            .collect();
        let mut by_key: HashMap<u64, Vec<(u32, u32)>, FxBuildHasher> =
            HashMap::with_capacity_and_hasher(config.apps.len(), FxBuildHasher);
        let mut apps = Vec::with_capacity(config.apps.len());
        let mut by_id = HashMap::with_capacity_and_hasher(config.apps.len(), FxBuildHasher);
        for (i, app) in config.apps.iter().enumerate() {
            for (k, key) in app.keys.iter().enumerate() {
                by_key
                    .entry(secret.hash_one(key.as_bytes()))
                    .or_default()
                    .push((i as u32, k as u32));
            }
            let rt = compile_app(app, service_index, &plans, old, live)?;
            by_id.insert(rt.id.clone(), i as u32);
            apps.push(rt);
        }
        Ok(AppTable {
            apps,
            by_key,
            by_id,
            secret: secret.clone(),
        })
    }

    /// The app with this id.
    pub fn by_id(&self, id: &str) -> Option<&AppRt> {
        self.by_id.get(id).map(|&i| &self.apps[i as usize])
    }

    /// The app holding `key`.
    pub fn by_key(&self, key: &[u8]) -> Option<&AppRt> {
        let candidates = self.by_key.get(&self.secret.hash_one(key))?;
        let mut found = None;
        for &(a, k) in candidates {
            let app = &self.apps[a as usize];
            if bool::from(app.keys[k as usize].as_ref().ct_eq(key)) {
                found = Some(app);
            }
        }
        found
    }

    pub fn len(&self) -> usize {
        self.apps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &AppRt> {
        self.apps.iter()
    }
}

fn compile_app(
    app: &App,
    service_index: &HashMap<&str, u32>,
    plans: &HashMap<&str, Arc<PlanRt>>,
    old: &AppStates,
    live: &mut AppStates,
) -> Result<AppRt, String> {
    let id: Arc<str> = app.id.as_str().into();
    let metrics = old
        .metrics
        .get(&id)
        .cloned()
        .unwrap_or_else(|| Arc::new(AppMetrics::new(id.clone())));
    live.metrics.insert(id.clone(), metrics.clone());
    let mut charge = |scope: &str, plan: &str| -> Option<Charge> {
        let plan = plans.get(plan)?.clone();
        let key = (id.clone(), Arc::<str>::from(scope));
        let state = old
            .limits
            .get(&key)
            .cloned()
            .unwrap_or_else(|| Arc::new(LimitState::default()));
        live.limits.insert(key, state.clone());
        Some(Charge { plan, state })
    };
    let default = app.plan.as_deref().and_then(|p| charge("", p));
    let mut by_service: Vec<(u32, Charge)> = app
        .plans_by_service
        .iter()
        .filter_map(|(svc, plan)| Some((*service_index.get(svc.as_str())?, charge(svc, plan)?)))
        .collect();
    by_service.sort_by_key(|(s, _)| *s);
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
    let jwt = match &app.jwt {
        None => None,
        Some(j) => Some(Box::new(
            jwt_key(j).map_err(|e| format!("apps {}: jwt: {e}", app.id))?,
        )),
    };
    Ok(AppRt {
        id,
        metrics,
        jwt,
        methods: bytes(&app.methods),
        paths: bytes(&app.paths),
        keys: app
            .keys
            .iter()
            .map(|k| k.as_bytes().to_vec().into_boxed_slice())
            .collect(),
        services,
        default,
        by_service: by_service.into_boxed_slice(),
    })
}

fn jwt_key(j: &sluicegate_config::AppJwt) -> Result<JwtKeyRt, String> {
    use jsonwebtoken::{Algorithm, DecodingKey};
    use sluicegate_config::{JwtAlg, JwtKey};
    let err = |e: jsonwebtoken::errors::Error| format!("bad public key: {e}");
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
    Ok(JwtKeyRt { alg, key })
}

/// A short, stable fingerprint of a key for logs (written as 8 hex
/// digits): never the key itself.
pub fn fingerprint(key: &[u8]) -> u32 {
    (xxhash_rust::xxh3::xxh3_64_with_seed(key, 0x5167_6174_6557_6179) >> 32) as u32
}
