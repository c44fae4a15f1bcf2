//! The rustls `ServerConfig` of a TLS listener: protocol versions, ALPN,
//! session resumption and client certificate verification.
//!
//! One `ServerConfig` (an `Arc`) is shared by every worker thread of a
//! listener. Resumption state lives in [`SessionState`], which a listener
//! creates once and passes to every config it builds, so that tickets and
//! cached sessions issued before a reload still resume after it.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::{
    ProducesTickets, ServerSessionMemoryCache, StoresServerSessions, WebPkiClientVerifier,
};
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};

use super::certs::read_certs;
use super::resolver::CertResolver;

/// Sessions kept by the server-side cache (TLS 1.2 session IDs, for
/// clients that do not take tickets). An entry is a few hundred bytes.
pub(crate) const SESSION_CACHE_ENTRIES: usize = 4096;

/// The crypto provider Sluicegate builds rustls with (aws-lc-rs: see
/// `bench/tls-provider/README.md` for the measurement behind the choice),
/// its cipher suites in the order a listener prefers them: AES-128-GCM
/// first, then AES-256-GCM, then ChaCha20-Poly1305, in each TLS version.
/// Profiled on resumed TLS 1.3 handshakes (callgrind, wrk's
/// `Connection: close`), the SHA-384 key schedule of AES-256-GCM took 44%
/// of the handshake's instructions, more than the X25519 exchange; the
/// SHA-256 one of AES-128-GCM costs about half as much.
pub(crate) fn default_provider() -> Arc<CryptoProvider> {
    use rustls::CipherSuite as C;
    let mut p = rustls::crypto::aws_lc_rs::default_provider();
    let rank = |s: &rustls::SupportedCipherSuite| match s.suite() {
        C::TLS13_AES_128_GCM_SHA256 => 0,
        C::TLS13_AES_256_GCM_SHA384 => 1,
        C::TLS13_CHACHA20_POLY1305_SHA256 => 2,
        C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 | C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => 3,
        C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 | C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => 4,
        _ => 5,
    };
    p.cipher_suites.sort_by_key(rank);
    Arc::new(p)
}

/// Resumption state of one listener, to keep across reloads.
#[derive(Clone)]
pub(crate) struct SessionState {
    /// Stateless tickets (TLS 1.3, and TLS 1.2 clients that ask for them).
    /// The provider's `Ticketer` rotates its keys itself (every 6 hours,
    /// each key accepted for 12): nothing to schedule here.
    pub(crate) ticketer: Arc<dyn ProducesTickets>,
    /// Server-side cache for TLS 1.2 session IDs.
    pub(crate) cache: Arc<dyn StoresServerSessions>,
}

impl SessionState {
    pub(crate) fn new() -> Result<Self, String> {
        let ticketer = rustls::crypto::aws_lc_rs::Ticketer::new()
            .map_err(|e| format!("cannot create the TLS session ticketer: {e}"))?;
        Ok(Self {
            ticketer,
            cache: ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES),
        })
    }
}

#[cfg(test)]
/// A `ServerConfig` with fresh resumption state: tickets and cached
/// sessions from an earlier config are not accepted by this one. For
/// reloads use [`server_config_with_sessions`] with the listener's
/// [`SessionState`].
pub(crate) fn server_config(
    store: Arc<CertResolver>,
    client_ca: Option<&Path>,
    client_auth_required: bool,
    min_tls13: bool,
    alpn: &[&[u8]],
    provider: Arc<CryptoProvider>,
) -> Result<Arc<ServerConfig>, String> {
    let sessions = SessionState::new()?;
    server_config_with_sessions(
        store,
        client_ca,
        client_auth_required,
        min_tls13,
        alpn,
        provider,
        &sessions,
    )
}

/// A `ServerConfig` sharing `sessions` (and so resumption) with every other
/// config built with the same `SessionState`.
///
/// TLS 1.2 and 1.3 (1.3 only with `min_tls13`); `alpn` in server preference
/// order; with `client_ca`, client certificates are verified against the
/// CAs of that PEM file and are required when `client_auth_required`, else
/// only requested (a client may send none).
pub(crate) fn server_config_with_sessions(
    store: Arc<CertResolver>,
    client_ca: Option<&Path>,
    client_auth_required: bool,
    min_tls13: bool,
    alpn: &[&[u8]],
    provider: Arc<CryptoProvider>,
    sessions: &SessionState,
) -> Result<Arc<ServerConfig>, String> {
    let versions: &[&'static SupportedProtocolVersion] = if min_tls13 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS13, &rustls::version::TLS12]
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let builder = match client_ca {
        None if client_auth_required => {
            return Err("client certificates are required but no client CA file is set".into())
        }
        None => builder.with_no_client_auth(),
        Some(path) => {
            let roots = read_roots(path)?;
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if !client_auth_required {
                verifier = verifier.allow_unauthenticated();
            }
            let verifier = verifier
                .build()
                .map_err(|e| format!("{}: client CA: {e}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(store);
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    // The provider's order (see `default_provider`) wins over the client's.
    config.ignore_client_order = true;
    config.ticketer = Arc::clone(&sessions.ticketer);
    config.session_storage = Arc::clone(&sessions.cache);
    Ok(Arc::new(config))
}

/// The CA certificates of a PEM file, for client certificate verification.
fn read_roots(path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots
            .add(cert)
            .map_err(|e| format!("{}: unusable CA certificate: {e}", path.display()))?;
    }
    Ok(roots)
}
