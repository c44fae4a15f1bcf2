//! Choosing the server certificate for a handshake: by SNI (exact name,
//! then a one-label wildcard, else the default) and, among certificates
//! covering the same name, by the signature schemes the client offers.

use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;

use super::certs::{unix_now, CertSpec, LoadedCert};

/// The server certificate store. Immutable once built: a reload builds a
/// new one (and a new `ServerConfig` around it).
pub(crate) struct CertResolver {
    certs: Vec<LoadedCert>,
    default: usize,
    /// The default certificate and those with the same names, best key
    /// kind first: what a client without SNI (or unmatched) is offered.
    default_group: Vec<usize>,
    /// Exact name -> certificates covering it, best key kind first.
    exact: FxHashMap<Box<str>, Vec<usize>>,
    /// `example.com` for `*.example.com` -> certificates, best kind first.
    wildcard: FxHashMap<Box<str>, Vec<usize>>,
}

impl CertResolver {
    /// Loads every certificate of `specs`; `default` indexes `specs`.
    /// Returns the store and warnings to log (expired certificates, ...).
    /// The error names the file at fault.
    pub(crate) fn load(
        specs: &[CertSpec],
        default: usize,
        provider: &CryptoProvider,
    ) -> Result<(Self, Vec<String>), String> {
        let mut warnings = Vec::new();
        let now = unix_now();
        let certs = specs
            .iter()
            .map(|s| LoadedCert::load(s, provider, now, &mut warnings))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((Self::new(certs, default)?, warnings))
    }

    /// Builds the store from loaded certificates; `default` indexes `certs`.
    pub(crate) fn new(certs: Vec<LoadedCert>, default: usize) -> Result<Self, String> {
        if certs.is_empty() {
            return Err("no TLS certificate configured".to_owned());
        }
        if default >= certs.len() {
            return Err(format!(
                "default certificate index {default} is out of range ({} certificates)",
                certs.len()
            ));
        }
        let mut exact: FxHashMap<Box<str>, Vec<usize>> = FxHashMap::default();
        let mut wildcard: FxHashMap<Box<str>, Vec<usize>> = FxHashMap::default();
        for (i, c) in certs.iter().enumerate() {
            for name in c.names() {
                if let Some(parent) = name.strip_prefix("*.") {
                    if !parent.is_empty() && !parent.contains('*') {
                        wildcard.entry(parent.into()).or_default().push(i);
                    }
                } else if !name.contains('*') {
                    exact.entry(name.into()).or_default().push(i);
                }
            }
        }
        // Stable sort: among the same key kind, configuration order wins.
        let by_kind = |v: &mut Vec<usize>| v.sort_by_key(|&i| certs[i].kind());
        exact.values_mut().for_each(by_kind);
        wildcard.values_mut().for_each(by_kind);
        let d = &certs[default];
        let mut default_group: Vec<usize> = (0..certs.len())
            .filter(|&i| i == default || (certs[i].kind() != d.kind() && same_names(&certs[i], d)))
            .collect();
        by_kind(&mut default_group);
        Ok(Self {
            certs,
            default,
            default_group,
            exact,
            wildcard,
        })
    }

    pub(crate) fn certs(&self) -> &[LoadedCert] {
        &self.certs
    }

    #[cfg(test)]
    pub(crate) fn default_cert(&self) -> &LoadedCert {
        &self.certs[self.default]
    }

    #[cfg(test)]
    /// `(name, notAfter)` for `sluicegate_tls_certificate_expiry_seconds{name}`:
    /// one pair per name of each certificate.
    pub(crate) fn expiries(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        self.certs
            .iter()
            .flat_map(|c| c.names().map(move |n| (n, c.not_after_unix())))
    }

    /// The certificate for a client sending `sni` (as rustls gives it:
    /// already lowercase) and offering `schemes`.
    pub(crate) fn choose(&self, sni: Option<&str>, schemes: &[SignatureScheme]) -> &LoadedCert {
        let group = sni
            .and_then(|n| self.lookup(n))
            .unwrap_or(&self.default_group);
        // Best kind the client can verify; if none, the best kind anyway
        // (rustls then fails the handshake with a clear alert).
        let i = group
            .iter()
            .copied()
            .find(|&i| self.certs[i].accepts(schemes))
            .unwrap_or(group[0]);
        &self.certs[i]
    }

    fn lookup(&self, name: &str) -> Option<&Vec<usize>> {
        let name = name.strip_suffix('.').unwrap_or(name);
        // rustls lowercases the SNI before the resolver sees it (and it is
        // ASCII: a DnsName). Anything else takes this rare, allocating path.
        if name.bytes().any(|b| b.is_ascii_uppercase()) {
            return self.lookup_lower(&name.to_ascii_lowercase());
        }
        self.lookup_lower(name)
    }

    fn lookup_lower(&self, name: &str) -> Option<&Vec<usize>> {
        if let Some(v) = self.exact.get(name) {
            return Some(v);
        }
        // `*.example.com` matches exactly one label before `example.com`.
        let (label, parent) = name.split_once('.')?;
        if label.is_empty() {
            return None;
        }
        self.wildcard.get(parent)
    }
}

fn same_names(a: &LoadedCert, b: &LoadedCert) -> bool {
    a.names().len() == b.names().len() && a.names().all(|n| b.names().any(|m| m == n))
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let c = self.choose(client_hello.server_name(), client_hello.signature_schemes());
        Some(Arc::clone(c.certified_key()))
    }
}

impl fmt::Debug for CertResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertResolver")
            .field("certs", &self.certs)
            .field("default", &self.default)
            .finish()
    }
}
