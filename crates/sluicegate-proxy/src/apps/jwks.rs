//! OpenID Connect issuers: each issuer's key set (read by requests from an
//! atomic pointer, replaced by the JWKS plane in `crate::discovery::jwks`),
//! its checks, its cache of verified tokens, and what a verified token
//! tells later filters ([`Verified`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use sluicegate_config::JwtIssuer;

use super::limit::{ParamLimits, PlanRt};

/// At most one refetch asked by an unknown `kid` per this long, per issuer.
pub const REFETCH_EVERY: Duration = Duration::from_secs(10);
/// Tokens kept per shard of an issuer's cache of verified tokens.
const CACHE_PER_SHARD: usize = 1024;
const CACHE_SHARDS: usize = 64;

/// The algorithms an issuer's tokens may use: never `none` nor HMAC.
const RSA_ALGS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];

/// One usable key of a JWKS.
pub struct IssuerKey {
    pub kid: Option<Box<str>>,
    /// The algorithms the key may verify (one when the JWK names its `alg`).
    algs: Vec<Algorithm>,
    key: DecodingKey,
}

/// An issuer's keys as last fetched.
#[derive(Default)]
pub struct KeySet {
    pub keys: Vec<IssuerKey>,
}

impl KeySet {
    /// Parses a JWKS document, keeping the signature keys it can use (an
    /// encryption key, an HMAC secret or an unknown type is skipped). An
    /// answer that is not a JWKS is an error.
    pub fn parse(body: &[u8]) -> Result<KeySet, String> {
        let doc: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
        let list = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or("no \"keys\" list")?;
        let mut keys = Vec::new();
        for k in list {
            let Ok(jwk) = serde_json::from_value::<Jwk>(k.clone()) else {
                continue;
            };
            if matches!(
                jwk.common.public_key_use,
                Some(PublicKeyUse::Encryption | PublicKeyUse::Other(_))
            ) {
                continue;
            }
            let family: Vec<Algorithm> = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => RSA_ALGS.to_vec(),
                AlgorithmParameters::EllipticCurve(p) => match p.curve {
                    EllipticCurve::P256 => vec![Algorithm::ES256],
                    EllipticCurve::P384 => vec![Algorithm::ES384],
                    _ => continue,
                },
                AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
                    vec![Algorithm::EdDSA]
                }
                _ => continue,
            };
            let algs = match jwk.common.key_algorithm {
                None => family,
                Some(a) => match key_alg(a).filter(|a| family.contains(a)) {
                    Some(a) => vec![a],
                    None => continue,
                },
            };
            let Ok(key) = DecodingKey::from_jwk(&jwk) else {
                continue;
            };
            keys.push(IssuerKey {
                kid: jwk.common.key_id.map(Into::into),
                algs,
                key,
            });
        }
        Ok(KeySet { keys })
    }

    /// The key a token with `kid` and `alg` is checked with: the one with
    /// that `kid` (without one: the only key fitting `alg`). `Err(true)`:
    /// no key has that `kid` (a refetch may find it); `Err(false)`: the
    /// key does not fit the algorithm, or no key fits.
    fn pick(&self, kid: Option<&str>, alg: Algorithm) -> Result<&IssuerKey, bool> {
        match kid {
            Some(kid) => {
                let k = self
                    .keys
                    .iter()
                    .find(|k| k.kid.as_deref() == Some(kid))
                    .ok_or(true)?;
                if k.algs.contains(&alg) {
                    Ok(k)
                } else {
                    Err(false)
                }
            }
            None => {
                let mut fits = self.keys.iter().filter(|k| k.algs.contains(&alg));
                match (fits.next(), fits.next()) {
                    (Some(k), None) => Ok(k),
                    _ => Err(false),
                }
            }
        }
    }

    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|k| k.kid.as_deref() == Some(kid))
    }
}

fn key_alg(a: KeyAlgorithm) -> Option<Algorithm> {
    Some(match a {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

pub use super::verified::Verified;

/// One shard of a [`TokenCache`]: the token (compared on a hit) and what
/// it says, by hash.
type CacheShard = Mutex<hashbrown::HashMap<u64, (Box<[u8]>, Arc<Verified>)>>;

/// Tokens an issuer verified, until their `exp`: keyed by a hash of the
/// token, each entry holding the token itself (compared on a hit, so a
/// hash collision never passes another token). Sharded: a request locks
/// one shard briefly; the size is bounded.
pub struct TokenCache {
    shards: Box<[CacheShard]>,
    seed: u64,
}

impl Default for TokenCache {
    fn default() -> Self {
        TokenCache {
            shards: (0..CACHE_SHARDS).map(|_| Mutex::default()).collect(),
            seed: fastrand::u64(..),
        }
    }
}

impl TokenCache {
    fn shard(&self, token: &[u8]) -> (u64, &CacheShard) {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(token, self.seed);
        (h, &self.shards[(h >> 58) as usize % CACHE_SHARDS])
    }

    /// The verified token, unless absent or expired at `now` (seconds).
    pub fn get(&self, token: &[u8], now: u64) -> Option<Arc<Verified>> {
        let (h, shard) = self.shard(token);
        let map = shard.lock().unwrap_or_else(|e| e.into_inner());
        let (t, v) = map.get(&h)?;
        (**t == *token && v.exp > now).then(|| v.clone())
    }

    pub fn insert(&self, token: &[u8], v: Arc<Verified>, now: u64) {
        let (h, shard) = self.shard(token);
        let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= CACHE_PER_SHARD && !map.contains_key(&h) {
            map.retain(|_, (_, v)| v.exp > now);
            if map.len() >= CACHE_PER_SHARD {
                // Still full of live tokens: one makes room (its next use
                // pays one signature check again).
                if let Some(k) = map.keys().next().copied() {
                    map.remove(&k);
                }
            }
        }
        map.insert(h, (token.into(), v));
    }

    /// Tokens held (tests).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why an issuer's token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// No key has the token's `kid` (a refetch was asked, rate limited).
    UnknownKey,
    /// The algorithm is not one an issuer may use, or does not fit the key.
    BadAlgorithm,
    /// Signature, `exp`, `nbf`, `iat`, `iss` or `aud` failed.
    Invalid,
    Expired,
    /// The app claim is missing.
    NoApp,
}

impl TokenError {
    pub fn description(self) -> &'static str {
        match self {
            TokenError::UnknownKey => "unknown signing key",
            TokenError::BadAlgorithm => "algorithm not allowed for the key",
            TokenError::Invalid => "invalid token",
            TokenError::Expired => "token expired",
            TokenError::NoApp => "the token names no app",
        }
    }
}

/// One issuer as the gateway runs it; kept across reloads while its
/// settings stay the same (keys, cache and all).
pub struct IssuerState {
    pub cfg: JwtIssuer,
    /// Names the issuer (its name, `issuer` and key source) in what a
    /// long-lived stream authenticated with
    /// ([`crate::filters::grant::Credential::Issuer`]): a stream is
    /// revoked once no issuer of this fingerprint is configured.
    pub fp: u32,
    leeway: Duration,
    pub keys: ArcSwap<KeySet>,
    /// Whether a key set was ever fetched.
    pub loaded: AtomicBool,
    pub cache: TokenCache,
    validations: Vec<(Algorithm, Validation)>,
    /// When (ms since the epoch) a refetch was last asked for an unknown
    /// `kid`: at most one per [`REFETCH_EVERY`].
    asked_at: AtomicU64,
    /// Wakes the issuer's fetch task: a refetch asked, or the issuer retired.
    pub wake: tokio::sync::Notify,
    /// Refetches asked (and let through the rate limit).
    pub asks: AtomicU64,
    /// Key set fetches that succeeded, and that failed (the JWKS plane
    /// counts them).
    pub fetches_ok: AtomicU64,
    pub fetches_failed: AtomicU64,
    /// Set when a reload drops or changes the issuer: its task ends.
    pub retired: AtomicBool,
    /// Counters of unknown apps under `default_plan`, by app id.
    pub default_limits: ParamLimits,
    /// With `introspection`: how the issuer's opaque tokens are checked.
    pub introspect: Option<Arc<super::introspect::Introspector>>,
}

impl std::fmt::Debug for IssuerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerState")
            .field("name", &self.cfg.name)
            .finish_non_exhaustive()
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl IssuerState {
    pub fn new(cfg: &JwtIssuer, leeway: Duration) -> IssuerState {
        let all =
            RSA_ALGS
                .iter()
                .copied()
                .chain([Algorithm::ES256, Algorithm::ES384, Algorithm::EdDSA]);
        let validations = all
            .map(|alg| {
                let mut v = Validation::new(alg);
                v.leeway = leeway.as_secs();
                v.validate_nbf = true;
                v.set_required_spec_claims(&["exp", "iss", "aud"]);
                v.set_issuer(&[&cfg.issuer]);
                v.set_audience(&cfg.audiences);
                (alg, v)
            })
            .collect();
        let jwks = match &cfg.jwks {
            sluicegate_config::JwksSource::Discovery => "discovery",
            sluicegate_config::JwksSource::Uri(u) => u.as_str(),
        };
        let named = format!("{}\n{}\n{jwks}", cfg.name, cfg.issuer);
        IssuerState {
            fp: crate::apps::fingerprint(named.as_bytes()),
            cfg: cfg.clone(),
            leeway,
            keys: ArcSwap::from_pointee(KeySet::default()),
            loaded: AtomicBool::new(false),
            cache: TokenCache::default(),
            validations,
            asked_at: AtomicU64::new(0),
            wake: tokio::sync::Notify::new(),
            asks: AtomicU64::new(0),
            fetches_ok: AtomicU64::new(0),
            fetches_failed: AtomicU64::new(0),
            retired: AtomicBool::new(false),
            default_limits: ParamLimits::default(),
            introspect: super::introspect::Introspector::new(cfg).map(Arc::new),
        }
    }

    /// Whether this state was made for these settings.
    pub fn is_for(&self, cfg: &JwtIssuer, leeway: Duration) -> bool {
        self.cfg == *cfg && self.leeway == leeway
    }

    /// Asks the fetch task for the key set again, unless asked less than
    /// [`REFETCH_EVERY`] ago (a flood of unknown `kid`s makes one fetch).
    pub fn ask_refetch(&self) {
        // Before the first key set, the first fetch is under way anyway.
        if !self.loaded.load(Ordering::Acquire) {
            return;
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let last = self.asked_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) < REFETCH_EVERY.as_millis() as u64 {
            return;
        }
        if self
            .asked_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.asks.fetch_add(1, Ordering::Relaxed);
            // A permit: the task's next wait ends at once, one fetch.
            self.wake.notify_one();
        }
    }

    /// The token if this issuer verified it before, it has not expired,
    /// and the key that checked it is still in the issuer's set.
    pub fn cached(&self, token: &[u8]) -> Option<Arc<Verified>> {
        let v = self.cache.get(token, unix_now())?;
        match &v.kid {
            Some(k) if !self.keys.load().has_kid(k) => None,
            _ => Some(v),
        }
    }

    /// Checks a token of this issuer (its header already read) by its
    /// signature and claims, and caches it.
    pub fn verify(
        &self,
        token: &str,
        header: &jsonwebtoken::Header,
    ) -> Result<Arc<Verified>, TokenError> {
        let now = unix_now();
        let keys = self.keys.load();
        let key = match keys.pick(header.kid.as_deref(), header.alg) {
            Ok(k) => k,
            Err(true) => {
                self.ask_refetch();
                return Err(TokenError::UnknownKey);
            }
            Err(false) => return Err(TokenError::BadAlgorithm),
        };
        let validation = &self
            .validations
            .iter()
            .find(|(a, _)| *a == header.alg)
            .ok_or(TokenError::BadAlgorithm)?
            .1;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, validation)
            .map_err(|e| match e.kind() {
                jsonwebtoken::errors::ErrorKind::ExpiredSignature => TokenError::Expired,
                jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => TokenError::BadAlgorithm,
                _ => TokenError::Invalid,
            })?;
        // Issued in the future (beyond the leeway): refused too.
        if let Some(iat) = data.claims.get("iat") {
            match iat.as_f64() {
                Some(t) if t <= (now + self.leeway.as_secs()) as f64 => {}
                _ => return Err(TokenError::Invalid),
            }
        }
        let v = Verified::new(
            data.claims,
            self.cfg.app_claim.as_deref(),
            key.kid.clone(),
            &self.cfg.claims_to_headers,
        )
        .ok_or(TokenError::NoApp)?;
        let v = Arc::new(v);
        self.cache.insert(token.as_bytes(), v.clone(), now);
        Ok(v)
    }
}

/// An issuer's plan for apps it names that are not under `apps`: local
/// to each gateway (a `scope: global` plan counts per gateway here).
pub fn default_plan(p: &sluicegate_config::Plan) -> PlanRt {
    let mut rt = PlanRt::new(p);
    rt.global = None;
    rt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> IssuerState {
        let cfg = sluicegate_config::parse(
            "listen: 127.0.0.1:9\njwt: { issuers: [{ name: a, issuer: \"http://127.0.0.1:9\", jwks_uri: \"http://127.0.0.1:9/k\", audiences: [x] }] }\n",
        )
        .unwrap();
        IssuerState::new(&cfg.jwt.issuers[0], Duration::from_secs(30))
    }

    #[test]
    fn refetches_asked_by_unknown_kids_are_one_per_interval() {
        let i = issuer();
        // None before the first key set (its fetch is under way).
        i.ask_refetch();
        assert_eq!(i.asks.load(Ordering::Relaxed), 0);
        i.loaded.store(true, Ordering::Release);
        for _ in 0..1000 {
            i.ask_refetch();
        }
        assert_eq!(i.asks.load(Ordering::Relaxed), 1);
    }
}
