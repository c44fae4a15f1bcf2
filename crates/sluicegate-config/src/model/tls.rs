//! The TLS, PROXY protocol and client-certificate parts of the model:
//! listeners, upstream TLS and how a client certificate names an app.
//!
//! Paths to certificates and keys are kept as written in the config; the
//! loader does not read the files (the data plane does, when it builds a
//! snapshot).

use std::net::SocketAddr;
use std::path::PathBuf;

/// One `listen` entry: a socket and what is spoken on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub addr: SocketAddr,
    /// `Some`: clients speak TLS; `None`: plain HTTP.
    pub tls: Option<ListenerTls>,
    /// Every connection starts with a PROXY protocol header (v1 or v2)
    /// carrying the client's address.
    pub proxy_protocol: bool,
    /// Answer every request with a redirect to `https://` (plain listeners
    /// only).
    pub redirect_https: bool,
    /// Clients may speak HTTP/2: offered by ALPN on a TLS listener, taken
    /// with prior knowledge (h2c, known by its connection preface) on a
    /// plain one.
    pub http2: bool,
}

impl Listener {
    /// A plain HTTP listener on `addr` (the string form of `listen`).
    pub fn plain(addr: SocketAddr) -> Listener {
        Listener {
            addr,
            tls: None,
            proxy_protocol: false,
            redirect_https: false,
            http2: true,
        }
    }
}

/// A listener's `tls`. Paths are as written in the config; the files are
/// not read by the loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    /// Certificate chains with their keys, picked by SNI (at least one;
    /// no two with the same `cert` path).
    pub certificates: Vec<CertKeyPaths>,
    /// Index into `certificates` of the one served when the client sends
    /// no SNI or a name no certificate covers.
    pub default: usize,
    /// CA bundle (PEM) client certificates must chain to; `None`: clients
    /// are not asked for a certificate.
    pub client_ca: Option<PathBuf>,
    /// Whether a client certificate is required (only meaningful with
    /// `client_ca`).
    pub client_auth: ClientAuth,
    pub min_version: TlsVersion,
}

impl ListenerTls {
    /// The certificate served without a matching SNI.
    pub fn default_certificate(&self) -> &CertKeyPaths {
        &self.certificates[self.default]
    }
}

/// A certificate chain file and its private key file (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertKeyPaths {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Whether a TLS listener with `client_ca` insists on a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// The handshake fails without a valid client certificate.
    #[default]
    Require,
    /// A client certificate is asked for; one that is sent must be valid,
    /// but a client may send none (then `auth: mtls` routes answer 401).
    Request,
}

/// Lowest TLS version a listener accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVersion {
    #[default]
    V1_2,
    V1_3,
}

/// A service's `tls`: the gateway speaks TLS to the service's endpoints.
/// Paths are as written in the config; the files are not read by the loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// Server name sent and verified (lower-cased); `None`: the endpoint's
    /// host name when it was given by name, no SNI for an IP literal.
    pub sni: Option<String>,
    /// Verify the upstream's certificate chain and name.
    pub verify: bool,
    /// CA bundle (PEM) to verify against; `None`: the system roots.
    pub ca: Option<PathBuf>,
    /// Client certificate chain presented to the upstream (with `client_key`).
    pub client_cert: Option<PathBuf>,
    /// Private key of `client_cert` (both or neither are set).
    pub client_key: Option<PathBuf>,
}

impl Default for UpstreamTls {
    fn default() -> Self {
        UpstreamTls {
            sni: None,
            verify: true,
            ca: None,
            client_cert: None,
            client_key: None,
        }
    }
}

/// Which client certificates identify an app on `auth: mtls` routes: one
/// whose subject CN or a DNS SAN is in `names`, or whose SHA-256
/// fingerprint is in `sha256`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppMtls {
    /// Lower-cased; compared ASCII case-insensitively.
    pub names: Vec<String>,
    /// SHA-256 of the certificate (DER).
    pub sha256: Vec<[u8; 32]>,
}
