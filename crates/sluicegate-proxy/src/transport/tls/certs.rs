//! Loading server certificates and private keys from PEM files, and what the
//! gateway needs to know about each one: its names, key type and expiry.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{InconsistentKeys, SignatureAlgorithm, SignatureScheme};

/// One configured certificate: a PEM chain (end-entity first) and its key.
/// Both may name the same file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CertSpec {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// The kind of a certificate's key, in the order of preference when two
/// certificates cover the same name (ECDSA is cheaper to sign with).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum KeyKind {
    Ecdsa,
    Ed25519,
    Rsa,
    Other,
}

/// The schemes a key is asked about at load time; the ones it can sign
/// with are kept so that the per-handshake choice needs no allocation.
const KNOWN_SCHEMES: &[SignatureScheme] = &[
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::ECDSA_NISTP384_SHA384,
    SignatureScheme::ECDSA_NISTP521_SHA512,
    SignatureScheme::ED25519,
    SignatureScheme::ED448,
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA512,
    SignatureScheme::RSA_PKCS1_SHA256,
    SignatureScheme::RSA_PKCS1_SHA384,
    SignatureScheme::RSA_PKCS1_SHA512,
];

/// A loaded certificate with its signing key.
pub(crate) struct LoadedCert {
    cert_path: PathBuf,
    key: Arc<CertifiedKey>,
    /// DNS names from the SAN extension (the subject CN when there is no
    /// SAN), ASCII-lowercased, without a trailing dot; wildcards as written
    /// (`*.example.com`).
    names: Vec<Box<str>>,
    #[cfg_attr(not(test), allow(dead_code))] // checked at load; tests read it
    not_before_unix: i64,
    not_after_unix: i64,
    kind: KeyKind,
    schemes: Vec<SignatureScheme>,
}

impl LoadedCert {
    /// Reads and checks one certificate and key. `now_unix` is the time the
    /// validity period is compared with; a certificate outside it loads, with
    /// a line pushed to `warnings` for the caller to log.
    pub(crate) fn load(
        spec: &CertSpec,
        provider: &CryptoProvider,
        now_unix: i64,
        warnings: &mut Vec<String>,
    ) -> Result<Self, String> {
        let cert_file = spec.cert.display();
        let key_file = spec.key.display();
        let chain = read_certs(&spec.cert)?;
        let leaf = CertInfo::parse(&spec.cert, &chain)?;

        let key = PrivateKeyDer::from_pem_file(&spec.key).map_err(|e| match e {
            pem::Error::NoItemsFound => format!(
                "{key_file}: no private key in file (expected an unencrypted PKCS#8, \
                 PKCS#1 RSA or SEC1 EC key in PEM)"
            ),
            e => pem_error(&spec.key, "key", e),
        })?;
        let signing_key = provider
            .key_provider
            .load_private_key(key)
            .map_err(|e| format!("{key_file}: unsupported private key: {e}"))?;
        let kind = match signing_key.algorithm() {
            SignatureAlgorithm::ECDSA => KeyKind::Ecdsa,
            SignatureAlgorithm::ED25519 => KeyKind::Ed25519,
            SignatureAlgorithm::RSA => KeyKind::Rsa,
            _ => KeyKind::Other,
        };
        let schemes: Vec<SignatureScheme> = KNOWN_SCHEMES
            .iter()
            .copied()
            .filter(|s| signing_key.choose_scheme(&[*s]).is_some())
            .collect();

        let key = CertifiedKey::new(chain, signing_key);
        match key.keys_match() {
            // Unknown: the provider cannot tell the key's public half; the
            // handshake would fail on a mismatch, so load it.
            Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
                return Err(format!(
                    "{key_file}: private key does not match the certificate in {cert_file}"
                ))
            }
            Err(e) => return Err(format!("{cert_file}: certificate does not parse: {e}")),
        }

        if now_unix > leaf.not_after_unix {
            warnings.push(format!(
                "{cert_file}: certificate expired at {} (notAfter); loaded anyway",
                leaf.not_after
            ));
        } else if now_unix < leaf.not_before_unix {
            warnings.push(format!(
                "{cert_file}: certificate is not valid before {} (notBefore); loaded anyway",
                leaf.not_before
            ));
        }
        if leaf.names.is_empty() {
            warnings.push(format!(
                "{cert_file}: certificate has no DNS name (no SAN DNS entry, no subject CN); \
                 it is served only as the default"
            ));
        }

        Ok(Self {
            cert_path: spec.cert.clone(),
            key: Arc::new(key),
            names: leaf.names,
            not_before_unix: leaf.not_before_unix,
            not_after_unix: leaf.not_after_unix,
            kind,
            schemes,
        })
    }

    /// The certificate file it was loaded from.
    pub(crate) fn path(&self) -> &Path {
        &self.cert_path
    }

    /// The DNS names it covers (lowercase; wildcards as `*.example.com`):
    /// the `name` label of `sluicegate_tls_certificate_expiry_seconds`.
    pub(crate) fn names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.names.iter().map(|n| &**n)
    }

    /// notAfter of the end-entity certificate, seconds since the epoch: the
    /// value of `sluicegate_tls_certificate_expiry_seconds`.
    pub(crate) fn not_after_unix(&self) -> i64 {
        self.not_after_unix
    }

    #[cfg(test)]
    /// notBefore of the end-entity certificate, seconds since the epoch.
    pub(crate) fn not_before_unix(&self) -> i64 {
        self.not_before_unix
    }

    pub(crate) fn kind(&self) -> KeyKind {
        self.kind
    }

    pub(crate) fn certified_key(&self) -> &Arc<CertifiedKey> {
        &self.key
    }

    /// Whether a client offering `offered` can verify this key's signatures.
    pub(crate) fn accepts(&self, offered: &[SignatureScheme]) -> bool {
        offered.iter().any(|s| self.schemes.contains(s))
    }
}

impl fmt::Debug for LoadedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedCert")
            .field("path", &self.cert_path)
            .field("names", &self.names)
            .field("kind", &self.kind)
            .field("not_after_unix", &self.not_after_unix)
            .finish()
    }
}

/// Seconds since the epoch now (0 if the clock is before it).
pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Reads every CERTIFICATE section of a PEM file (other sections, such as
/// a key kept in the same file, are skipped).
pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(path, "certificate", e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(path, "certificate", e))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate in file", path.display()));
    }
    Ok(chain)
}

fn pem_error(path: &Path, what: &str, e: pem::Error) -> String {
    match e {
        pem::Error::Io(e) if e.kind() == io::ErrorKind::NotFound => {
            format!("{}: {what} file not found", path.display())
        }
        pem::Error::Io(e) => format!("{}: cannot read {what} file: {e}", path.display()),
        e => format!("{}: bad PEM in {what} file: {e}", path.display()),
    }
}

/// What is read from the end-entity certificate with x509-parser.
struct CertInfo {
    names: Vec<Box<str>>,
    not_before: String,
    not_after: String,
    not_before_unix: i64,
    not_after_unix: i64,
}

impl CertInfo {
    fn parse(path: &Path, chain: &[CertificateDer<'_>]) -> Result<Self, String> {
        let bad = |i: usize, e: &dyn fmt::Display| {
            if i == 0 {
                format!("{}: certificate does not parse: {e}", path.display())
            } else {
                format!(
                    "{}: certificate #{} of the chain does not parse: {e}",
                    path.display(),
                    i + 1
                )
            }
        };
        // The rest of the chain is only checked to be X.509.
        for (i, der) in chain.iter().enumerate().skip(1) {
            x509_parser::parse_x509_certificate(der).map_err(|e| bad(i, &e))?;
        }
        let (_, cert) = x509_parser::parse_x509_certificate(&chain[0]).map_err(|e| bad(0, &e))?;

        let mut names = Vec::new();
        let san = cert.subject_alternative_name().map_err(|e| bad(0, &e))?;
        if let Some(san) = san {
            for gn in &san.value.general_names {
                if let x509_parser::extensions::GeneralName::DNSName(n) = gn {
                    push_name(&mut names, n);
                }
            }
        } else {
            for cn in cert.subject().iter_common_name() {
                if let Ok(n) = cn.as_str() {
                    push_name(&mut names, n);
                }
            }
        }
        let validity = cert.validity();
        Ok(Self {
            names,
            not_before: validity.not_before.to_string(),
            not_after: validity.not_after.to_string(),
            not_before_unix: validity.not_before.timestamp(),
            not_after_unix: validity.not_after.timestamp(),
        })
    }
}

fn push_name(names: &mut Vec<Box<str>>, name: &str) {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() || !name.is_ascii() {
        return;
    }
    let name: Box<str> = name.to_ascii_lowercase().into();
    if !names.contains(&name) {
        names.push(name);
    }
}
