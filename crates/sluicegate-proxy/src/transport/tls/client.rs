//! TLS to upstreams: a service's rustls `ClientConfig` (its CA bundle or
//! the system roots, verification on unless turned off, a client
//! certificate when set, resumption through rustls's session cache), and
//! the server name each endpoint is verified against.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use sluicegate_config::{UpstreamProtocol, UpstreamTls};

use super::certs::read_certs;
use super::config::default_provider;

/// A service's TLS settings, compiled.
pub(crate) struct UpstreamTlsRt {
    pub(crate) config: Arc<ClientConfig>,
    /// The configured `sni`; `None`: each endpoint's host name.
    pub(crate) sni: Option<ServerName<'static>>,
}

impl std::fmt::Debug for UpstreamTlsRt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamTlsRt")
            .field("sni", &self.sni)
            .finish_non_exhaustive()
    }
}

impl UpstreamTlsRt {
    /// Builds the client side of `service`'s TLS, reading its files; ALPN
    /// offers what `protocol` speaks. The error names the file or setting
    /// at fault.
    pub(crate) fn new(
        t: &UpstreamTls,
        protocol: UpstreamProtocol,
    ) -> Result<UpstreamTlsRt, String> {
        let provider = default_provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls: {e}"))?;
        let builder = if !t.verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
        } else {
            let mut roots = RootCertStore::empty();
            match &t.ca {
                Some(path) => {
                    for c in read_certs(path)? {
                        roots
                            .add(c)
                            .map_err(|e| format!("tls.ca: {}: {e}", path.display()))?;
                    }
                }
                None => {
                    let found = rustls_native_certs::load_native_certs();
                    for c in found.certs {
                        // A system certificate rustls cannot use is skipped,
                        // as every TLS client does.
                        let _ = roots.add(c);
                    }
                    if roots.is_empty() {
                        return Err("tls: no system root certificates found; set tls.ca".into());
                    }
                }
            }
            builder.with_root_certificates(roots)
        };
        let mut config = match (&t.client_cert, &t.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("tls.client_key: {}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("tls.client_cert: {}: {e}", cert.display()))?
            }
            _ => builder.with_no_client_auth(),
        };
        config.alpn_protocols = match protocol {
            UpstreamProtocol::Http1 | UpstreamProtocol::H2c => vec![b"http/1.1".to_vec()],
            UpstreamProtocol::H2 => vec![b"h2".to_vec()],
            UpstreamProtocol::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        };
        let sni = match &t.sni {
            Some(name) => Some(
                ServerName::try_from(name.clone())
                    .map_err(|e| format!("tls.sni: {name:?}: {e}"))?,
            ),
            None => None,
        };
        Ok(UpstreamTlsRt {
            config: Arc::new(config),
            sni,
        })
    }

    /// The name to send and verify for the endpoint named `endpoint`
    /// (`host:port`): the configured `sni`, else the host (an IP literal
    /// is verified as an address and sends no SNI).
    pub(crate) fn server_name(&self, endpoint: &str) -> Result<ServerName<'static>, String> {
        if let Some(n) = &self.sni {
            return Ok(n.clone());
        }
        let host = match endpoint.rsplit_once(':') {
            Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => endpoint,
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_string()).map_err(|e| format!("{endpoint}: {e}"))
    }
}

/// `verify: false`: any certificate is accepted (signatures are still
/// checked to be well formed, so the handshake itself stays sound).
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
