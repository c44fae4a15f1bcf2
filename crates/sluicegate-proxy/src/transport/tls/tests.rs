//! Tests of the certificate store and server config, with certificates
//! generated at test time (rcgen) into a temporary directory.

use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{
    ClientConfig, ClientConnection, HandshakeKind, RootCertStore, ServerConfig, ServerConnection,
    SignatureScheme,
};

use super::certs::{read_certs, CertSpec, KeyKind, LoadedCert};
use super::config::{default_provider, server_config, server_config_with_sessions, SessionState};
use super::resolver::CertResolver;

#[derive(Clone, Copy)]
pub(crate) enum Alg {
    Ecdsa,
    Rsa,
}

/// PEM text of one DER section (rcgen's own PEM support would add a
/// second `pem`/`base64` to the tree).
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// A test CA that signs leaf certificates into a temporary directory.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
    ca: Issuer<'static, KeyPair>,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    n: usize,
}

impl Pki {
    pub(crate) fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "sluicegate test CA");
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self {
            dir: tempfile::tempdir().unwrap(),
            ca_pem: pem("CERTIFICATE", cert.der()),
            ca_der: cert.der().clone(),
            ca: Issuer::new(params, key),
            n: 0,
        }
    }

    fn path(&mut self, ext: &str) -> PathBuf {
        self.n += 1;
        self.dir.path().join(format!("f{}.{ext}", self.n))
    }

    fn write(&mut self, ext: &str, text: &str) -> PathBuf {
        let p = self.path(ext);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// A leaf certificate for `names` (DNS names or IP addresses; the first
    /// is also the subject CN), written with its key.
    pub(crate) fn leaf(&mut self, names: &[&str], alg: Alg, expired: bool) -> CertSpec {
        let key = match alg {
            Alg::Ecdsa => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            Alg::Rsa => KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256),
        }
        .unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let chain = format!("{}{}", pem("CERTIFICATE", cert.der()), self.ca_pem);
        CertSpec {
            cert: self.write("pem", &chain),
            key: self.write("key", &pem("PRIVATE KEY", &key.serialize_der())),
        }
    }

    pub(crate) fn roots(&self) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca_der.clone()).unwrap();
        Arc::new(roots)
    }
}

fn load_one(spec: &CertSpec) -> (Result<LoadedCert, String>, Vec<String>) {
    let mut warnings = Vec::new();
    let provider = default_provider();
    let r = LoadedCert::load(spec, &provider, super::certs::unix_now(), &mut warnings);
    (r, warnings)
}

fn load(specs: &[CertSpec], default: usize) -> Arc<CertResolver> {
    let (store, warnings) = CertResolver::load(specs, default, &default_provider()).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    Arc::new(store)
}

const ALL: &[SignatureScheme] = &[
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PKCS1_SHA256,
];

#[test]
fn exact_wildcard_and_default_choice() {
    let mut pki = Pki::new();
    let specs = vec![
        pki.leaf(&["example.com", "www.example.com"], Alg::Ecdsa, false),
        pki.leaf(&["*.example.com"], Alg::Ecdsa, false),
        pki.leaf(&["api.example.net"], Alg::Ecdsa, false),
    ];
    let store = load(&specs, 2);
    let pick = |sni: Option<&str>| store.choose(sni, ALL).path().to_owned();
    // Exact before wildcard.
    assert_eq!(pick(Some("www.example.com")), specs[0].cert);
    assert_eq!(pick(Some("example.com")), specs[0].cert);
    // Wildcard: exactly one label.
    assert_eq!(pick(Some("foo.example.com")), specs[1].cert);
    assert_eq!(pick(Some("a.b.example.com")), specs[2].cert);
    // Case and a trailing dot do not matter.
    assert_eq!(pick(Some("WWW.Example.COM")), specs[0].cert);
    assert_eq!(pick(Some("www.example.com.")), specs[0].cert);
    assert_eq!(pick(Some("Foo.EXAMPLE.com")), specs[1].cert);
    // Unmatched and no SNI: the default.
    assert_eq!(pick(Some("other.org")), specs[2].cert);
    assert_eq!(pick(None), specs[2].cert);
    assert_eq!(store.default_cert().path(), specs[2].cert);
    let names: Vec<&str> = store.certs()[0].names().collect();
    assert_eq!(names, ["example.com", "www.example.com"]);
    assert_eq!(store.expiries().count(), 4);
}

#[test]
fn subject_cn_is_the_name_without_san() {
    let mut pki = Pki::new();
    let spec = pki.leaf(&[], Alg::Ecdsa, false);
    let (cert, _) = load_one(&spec);
    // Pki::leaf sets CN "leaf" when it has no names.
    assert_eq!(cert.unwrap().names().collect::<Vec<_>>(), ["leaf"]);
}

#[test]
fn ecdsa_or_rsa_by_client_schemes() {
    let mut pki = Pki::new();
    let specs = vec![
        pki.leaf(&["api.example.net"], Alg::Rsa, false),
        pki.leaf(&["api.example.net"], Alg::Ecdsa, false),
        pki.leaf(&["other.example.net"], Alg::Rsa, false),
    ];
    let store = load(&specs, 0);
    assert_eq!(store.certs()[0].kind(), KeyKind::Rsa);
    assert_eq!(store.certs()[1].kind(), KeyKind::Ecdsa);
    let pick = |sni: Option<&str>, s: &[SignatureScheme]| store.choose(sni, s).path().to_owned();
    // ECDSA preferred when the client can verify it.
    assert_eq!(pick(Some("api.example.net"), ALL), specs[1].cert);
    let rsa_only = [
        SignatureScheme::RSA_PSS_SHA256,
        SignatureScheme::RSA_PKCS1_SHA256,
    ];
    assert_eq!(pick(Some("api.example.net"), &rsa_only), specs[0].cert);
    // P-384 only does not match a P-256 key.
    let p384_rsa = [
        SignatureScheme::ECDSA_NISTP384_SHA384,
        SignatureScheme::RSA_PKCS1_SHA256,
    ];
    assert_eq!(pick(Some("api.example.net"), &p384_rsa), specs[0].cert);
    // The default (RSA) has an ECDSA twin with the same names: no-SNI
    // clients get the ECDSA one when they can verify it.
    assert_eq!(pick(None, ALL), specs[1].cert);
    assert_eq!(pick(None, &rsa_only), specs[0].cert);
    // No twin: the only certificate, whatever the client offers.
    let ecdsa_only = [SignatureScheme::ECDSA_NISTP256_SHA256];
    assert_eq!(pick(Some("other.example.net"), &ecdsa_only), specs[2].cert);
}

#[test]
fn key_mismatch_names_the_files() {
    let mut pki = Pki::new();
    let a = pki.leaf(&["a.test"], Alg::Ecdsa, false);
    let b = pki.leaf(&["b.test"], Alg::Ecdsa, false);
    let spec = CertSpec {
        cert: a.cert.clone(),
        key: b.key.clone(),
    };
    let err = load_one(&spec).0.unwrap_err();
    assert!(err.contains(&*b.key.to_string_lossy()), "{err}");
    assert!(err.contains(&*a.cert.to_string_lossy()), "{err}");
    assert!(err.contains("does not match"), "{err}");
}

#[test]
fn missing_or_empty_files_are_named() {
    let mut pki = Pki::new();
    let good = pki.leaf(&["a.test"], Alg::Ecdsa, false);
    let missing = pki.dir.path().join("nope.pem");
    let err = load_one(&CertSpec {
        cert: missing.clone(),
        key: good.key.clone(),
    })
    .0
    .unwrap_err();
    assert_eq!(
        err,
        format!("{}: certificate file not found", missing.display())
    );

    let err = load_one(&CertSpec {
        cert: good.cert.clone(),
        key: missing.clone(),
    })
    .0
    .unwrap_err();
    assert_eq!(err, format!("{}: key file not found", missing.display()));

    // A key file given as the certificate: no certificate in it.
    let err = load_one(&CertSpec {
        cert: good.key.clone(),
        key: good.key.clone(),
    })
    .0
    .unwrap_err();
    assert_eq!(
        err,
        format!("{}: no certificate in file", good.key.display())
    );

    // A certificate file given as the key: no key in it.
    let err = load_one(&CertSpec {
        cert: good.cert.clone(),
        key: good.cert.clone(),
    })
    .0
    .unwrap_err();
    assert!(
        err.starts_with(&format!("{}: no private key in file", good.cert.display())),
        "{err}"
    );

    // A CERTIFICATE section that is not X.509.
    let junk = pki.write(
        "pem",
        "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n",
    );
    let err = load_one(&CertSpec {
        cert: junk.clone(),
        key: good.key.clone(),
    })
    .0
    .unwrap_err();
    assert!(
        err.starts_with(&format!("{}: certificate does not parse", junk.display())),
        "{err}"
    );

    let err = CertResolver::load(&[good], 1, &default_provider()).unwrap_err();
    assert!(err.contains("out of range"), "{err}");
}

#[test]
fn expired_certificate_loads_with_a_warning() {
    let mut pki = Pki::new();
    let spec = pki.leaf(&["old.test"], Alg::Ecdsa, true);
    let (store, warnings) =
        CertResolver::load(std::slice::from_ref(&spec), 0, &default_provider()).unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with(&*spec.cert.to_string_lossy()));
    assert!(warnings[0].contains("expired"), "{warnings:?}");
    // 2020-01-01T00:00:00Z
    assert_eq!(store.certs()[0].not_after_unix(), 1_577_836_800);
    assert_eq!(store.certs()[0].not_before_unix(), 1_546_300_800);
}

/// Runs a handshake in memory; returns both ends once it is done.
fn connect(
    server: &Arc<ServerConfig>,
    client: &Arc<ClientConfig>,
    name: &str,
) -> Result<(ClientConnection, ServerConnection), rustls::Error> {
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let mut c = ClientConnection::new(Arc::clone(client), name)?;
    let mut s = ServerConnection::new(Arc::clone(server))?;
    let mut buf = Vec::new();
    for _ in 0..10 {
        buf.clear();
        while c.wants_write() {
            c.write_tls(&mut buf).unwrap();
        }
        let from_client = !buf.is_empty();
        let mut rd = &buf[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).unwrap();
            s.process_new_packets()?;
        }
        buf.clear();
        while s.wants_write() {
            s.write_tls(&mut buf).unwrap();
        }
        let from_server = !buf.is_empty();
        let mut rd = &buf[..];
        while !rd.is_empty() {
            c.read_tls(&mut rd).unwrap();
            c.process_new_packets()?;
        }
        if !from_client && !from_server {
            break;
        }
    }
    assert!(!c.is_handshaking() && !s.is_handshaking());
    Ok((c, s))
}

fn client(pki: &Pki, tls12_only: bool, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let b = ClientConfig::builder_with_provider(default_provider());
    let b = if tls12_only {
        b.with_protocol_versions(&[&rustls::version::TLS12])
    } else {
        b.with_safe_default_protocol_versions()
    };
    let mut c = b
        .unwrap()
        .with_root_certificates(pki.roots())
        .with_no_client_auth();
    c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(c)
}

fn leaf_der(spec: &CertSpec) -> CertificateDer<'static> {
    read_certs(&spec.cert).unwrap().remove(0)
}

#[test]
fn handshake_serves_chosen_cert_alpn_and_resumes() {
    let mut pki = Pki::new();
    let specs = vec![
        pki.leaf(&["default.test", "127.0.0.1"], Alg::Ecdsa, false),
        pki.leaf(&["*.example.com"], Alg::Rsa, false),
    ];
    let store = load(&specs, 0);
    let alpn: &[&[u8]] = &[b"h2", b"http/1.1"];
    let sessions = SessionState::new().unwrap();
    let server = server_config_with_sessions(
        Arc::clone(&store),
        None,
        false,
        false,
        alpn,
        default_provider(),
        &sessions,
    )
    .unwrap();

    for tls12 in [false, true] {
        let cc = client(&pki, tls12, &[b"http/1.1"]);
        let (c, s) = connect(&server, &cc, "foo.example.com").unwrap();
        assert_eq!(c.peer_certificates().unwrap()[0], leaf_der(&specs[1]));
        assert_eq!(c.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_eq!(s.server_name(), Some("foo.example.com"));
        assert_eq!(c.handshake_kind(), Some(HandshakeKind::Full));
        let want = if tls12 {
            rustls::ProtocolVersion::TLSv1_2
        } else {
            rustls::ProtocolVersion::TLSv1_3
        };
        assert_eq!(c.protocol_version(), Some(want));

        // Same client again: resumed (ticket).
        let (c, _) = connect(&server, &cc, "foo.example.com").unwrap();
        assert_eq!(
            c.handshake_kind(),
            Some(HandshakeKind::Resumed),
            "tls12={tls12}"
        );

        // A reload keeping the listener's SessionState still resumes...
        let reloaded = server_config_with_sessions(
            Arc::clone(&store),
            None,
            false,
            false,
            alpn,
            default_provider(),
            &sessions,
        )
        .unwrap();
        let (c, _) = connect(&reloaded, &cc, "foo.example.com").unwrap();
        assert_eq!(
            c.handshake_kind(),
            Some(HandshakeKind::Resumed),
            "tls12={tls12}"
        );
        // ...a config with fresh state does not.
        let fresh = server_config(
            Arc::clone(&store),
            None,
            false,
            false,
            alpn,
            default_provider(),
        )
        .unwrap();
        let (c, _) = connect(&fresh, &cc, "foo.example.com").unwrap();
        assert_eq!(
            c.handshake_kind(),
            Some(HandshakeKind::Full),
            "tls12={tls12}"
        );
    }

    // No SNI (an IP address as the name): the default certificate.
    let cc = client(&pki, false, &[b"h2"]);
    let (c, s) = connect(&server, &cc, "127.0.0.1").unwrap();
    assert_eq!(s.server_name(), None);
    assert_eq!(c.peer_certificates().unwrap()[0], leaf_der(&specs[0]));
    assert_eq!(c.alpn_protocol(), Some(&b"h2"[..]));
}

#[test]
fn tls13_only_and_client_auth() {
    let mut pki = Pki::new();
    let specs = vec![pki.leaf(&["default.test"], Alg::Ecdsa, false)];
    let store = load(&specs, 0);
    let p = default_provider();
    let tls13 = server_config(Arc::clone(&store), None, false, true, &[], p.clone()).unwrap();
    assert!(connect(&tls13, &client(&pki, true, &[]), "default.test").is_err());
    assert!(connect(&tls13, &client(&pki, false, &[]), "default.test").is_ok());

    let ca = pki.write("pem", &pki.ca_pem.clone());
    let required =
        server_config(Arc::clone(&store), Some(&ca), true, false, &[], p.clone()).unwrap();
    let err = connect(&required, &client(&pki, false, &[]), "default.test").unwrap_err();
    assert!(
        matches!(err, rustls::Error::NoCertificatesPresented),
        "{err:?}"
    );
    let optional = server_config(Arc::clone(&store), Some(&ca), false, false, &[], p.clone());
    assert!(connect(
        &optional.unwrap(),
        &client(&pki, false, &[]),
        "default.test"
    )
    .is_ok());

    let err = server_config(Arc::clone(&store), None, true, false, &[], p.clone()).unwrap_err();
    assert!(err.contains("no client CA"), "{err}");
    let missing = pki.dir.path().join("ca-missing.pem");
    let err = server_config(store, Some(&missing), true, false, &[], p).unwrap_err();
    assert!(err.starts_with(&*missing.to_string_lossy()), "{err}");
}
