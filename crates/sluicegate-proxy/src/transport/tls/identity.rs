//! Who a client certificate names: its SHA-256 fingerprint and its names
//! (subject CN and DNS SANs, lower-cased), worked out once per connection
//! at the end of the handshake, for `auth: mtls` routes.

/// A verified client certificate's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientIdentity {
    pub(crate) sha256: [u8; 32],
    /// The subject's common name, lower-cased, when it has one.
    pub(crate) cn: Option<Box<str>>,
    /// DNS names of the subject alternative names, lower-cased.
    pub(crate) sans: Vec<Box<str>>,
}

impl ClientIdentity {
    /// The identity of the end-entity certificate `der`. A certificate the
    /// verifier accepted always parses; `None` if it somehow does not.
    pub(crate) fn of(der: &[u8]) -> Option<ClientIdentity> {
        use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
        let digest = ring::digest::digest(&ring::digest::SHA256, der);
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(digest.as_ref());
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let cn = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|a| a.as_str().ok())
            .map(|s| s.to_ascii_lowercase().into_boxed_str());
        let mut sans = Vec::new();
        if let Ok(Some(ext)) = cert.subject_alternative_name() {
            for n in &ext.value.general_names {
                if let GeneralName::DNSName(d) = n {
                    sans.push(d.to_ascii_lowercase().into_boxed_str());
                }
            }
        }
        Some(ClientIdentity { sha256, cn, sans })
    }
}
