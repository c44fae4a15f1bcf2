//! What a request authenticated with ([`Credential`], set by the auth
//! filters), and the check a long-lived stream's credential gets again
//! when the config changes ([`Readmit`], [`Revoked`]): the one place a new
//! kind of credential (a JWKS issuer, say) is added.

use std::sync::Arc;

use crate::apps::AppTable;
use crate::transport::tls::identity::ClientIdentity;

/// What an auth filter admitted a request with. Plain data, set for every
/// authenticated request (no allocation); a stream that stays open keeps
/// a copy so that a config change can be checked against it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Credential {
    #[default]
    None,
    /// An app key, by its fingerprint ([`crate::apps::fingerprint`]).
    Key(u32),
    /// A token verified with the app's JWT key (its fingerprint). `until`:
    /// the Unix second after which the stream ends (the token's `exp`
    /// plus the leeway), 0 when `jwt.close_on_expiry` is off.
    Jwt { key: u32, until: u64 },
    /// A token of an OpenID Connect issuer (`jwt.issuers`), by the
    /// issuer's fingerprint (its name, `issuer` and key source); `until`
    /// as for [`Credential::Jwt`].
    Issuer { issuer: u32, until: u64 },
    /// The connection's client certificate.
    Mtls,
}

/// Why a stream's credential no longer admits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// The app is gone.
    AppRemoved,
    /// The key (app key, JWT key, certificate mapping) it used is gone.
    KeyRemoved,
    /// The app may no longer call the route (`services`, `paths`,
    /// `methods`).
    Denied,
    /// The route is gone or authenticates another way.
    AuthChanged,
    /// The token expired.
    Expired,
}

impl Revoked {
    /// The metric's `reason` label and the log's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Revoked::AppRemoved => "app_removed",
            Revoked::KeyRemoved => "key_removed",
            Revoked::Denied => "denied",
            Revoked::AuthChanged => "auth_changed",
            Revoked::Expired => "token_expired",
        }
    }
}

/// What an auth filter is asked of a stream it admitted under an earlier
/// snapshot: does its credential still name this app in `apps`?
pub struct Readmit<'a> {
    pub app: &'a str,
    pub cred: Credential,
    /// The connection's client certificate, for `auth: mtls`.
    pub(crate) identity: Option<&'a ClientIdentity>,
    pub apps: &'a Arc<AppTable>,
}

/// The app's index in `r.apps` if it still exists.
pub(super) fn app_of(r: &Readmit<'_>) -> Result<u32, Revoked> {
    r.apps
        .by_id(r.app)
        .map(|a| a.index)
        .ok_or(Revoked::AppRemoved)
}
