//! The API-management parts of the model: `plans` and their limits, `apps`
//! (keys, allowed services, an app's JWT key), where app keys are looked
//! for, and the top-level `jwt` settings.

use std::time::Duration;

use super::AppMtls;

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
    /// OpenID Connect issuers whose keys come from their JWKS.
    pub issuers: Vec<JwtIssuer>,
    /// A tunnel or stream admitted with a token ends when the token
    /// expires (`exp` plus `leeway`).
    pub close_on_expiry: bool,
}

/// Where an issuer's key set is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// `discovery: true`: `jwks_uri` from `{issuer}/.well-known/openid-configuration`.
    Discovery,
    /// `jwks_uri` given directly.
    Uri(String),
}

/// One entry of `jwt.issuers`: an OpenID Connect provider whose tokens
/// name their app in a claim and are checked with its published keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtIssuer {
    pub name: String,
    /// Must equal the token's `iss`.
    pub issuer: String,
    pub jwks: JwksSource,
    /// The token's `aud` must hold one of them.
    pub audiences: Vec<String>,
    /// The claim naming the app; `None`: `client_id`, then `azp`.
    pub app_claim: Option<String>,
    /// The plan of apps this issuer names that are not under `apps`;
    /// without it such apps are refused (403).
    pub default_plan: Option<String>,
    /// (claim, header) pairs: the claim's value goes upstream in the header.
    pub claims_to_headers: Vec<(String, String)>,
    /// PEM CA bundle (read at load) trusted for the issuer's HTTPS, beside
    /// the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// RFC 7662 introspection of the tokens that are not JWTs.
    pub introspection: Option<Introspection>,
}

/// An issuer's `introspection`: how opaque tokens are checked.
#[derive(Clone, PartialEq, Eq)]
pub struct Introspection {
    /// Sent with `client_secret` as HTTP Basic credentials.
    pub client_id: String,
    /// Read from `client_secret_file` at load (trailing newline removed).
    pub client_secret: String,
    /// How long an answer is kept at most (never past the token's `exp`).
    pub cache: Duration,
    /// The endpoint; `None`: discovery's `introspection_endpoint`.
    pub endpoint: Option<String>,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspection")
            .field("client_id", &self.client_id)
            .field("cache", &self.cache)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Default for JwtSettings {
    fn default() -> Self {
        JwtSettings {
            issuer: None,
            audience: None,
            app_claim: "sub".to_string(),
            leeway: Duration::from_secs(30),
            issuers: Vec::new(),
            close_on_expiry: true,
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
    /// Requests in flight at once (always per process).
    pub concurrency: Option<u64>,
    /// Where the rate and quota are counted: this process, or the fleet.
    pub scope: Scope,
    /// What a `scope: global` plan does while Redis is unreachable.
    pub on_failure: OnFailure,
}

/// Where a limit's rate and quota are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// In this process only (each instance enforces the whole limit).
    #[default]
    Local,
    /// Across every instance sharing `cluster.redis`.
    Global,
}

/// What a global limit does while Redis cannot be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFailure {
    /// Each instance enforces its share of the limit (the limit divided by
    /// the instances last seen alive in Redis).
    #[default]
    Local,
    /// Refuse the requests the limit covers.
    Deny,
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
