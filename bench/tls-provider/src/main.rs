//! Measures rustls crypto providers for Sluicegate's TLS termination.
//!
//! Everything happens in memory: a `ServerConnection` and a
//! `ClientConnection` hand each other TLS bytes through a `Vec`, no socket.
//! Only the server's calls (`ServerConnection::new`, `read_tls`,
//! `process_new_packets`, `write_tls`, drop) are timed, since the server's
//! CPU is what a gateway pays; the client's work runs outside the clock.
//!
//! Usage: `tls-provider-bench CERT_DIR [ROUNDS]` where CERT_DIR holds
//! `ca.pem`, `ec.pem`/`ec.key` and `rsa.pem`/`rsa.key` (made by `./run`).
//! Each case runs ROUNDS times (interleaved across providers so that a
//! noisy spell hits all of them); the median of the rounds is printed.

#![cfg_attr(
    not(any(feature = "aws", feature = "ring")),
    allow(dead_code, unused_imports)
)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::Resumption;
use rustls::crypto::{CryptoProvider, SupportedKxGroup};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{NoServerSessionStorage, ProducesTickets};
use rustls::{
    ClientConfig, ClientConnection, HandshakeKind, RootCertStore, ServerConfig, ServerConnection,
    SupportedCipherSuite, SupportedProtocolVersion,
};

#[cfg(not(any(feature = "aws", feature = "ring")))]
fn main() {
    // Built with no provider: only used to time the build of rustls alone.
    eprintln!("built without a crypto provider; enable feature aws and/or ring");
}

#[cfg(any(feature = "aws", feature = "ring"))]
fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .expect("usage: tls-provider-bench CERT_DIR [ROUNDS]");
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("ROUNDS"));
    // ONLY=full|resumed|bulk runs one section (for profiling).
    let only = std::env::var("ONLY").unwrap_or_default();
    let run = |section: &str| only.is_empty() || only == section;
    let dir = Path::new(&dir);
    let ca = load_certs(&dir.join("ca.pem"));
    let mut roots = RootCertStore::empty();
    for c in ca {
        roots.add(c).expect("CA");
    }
    let roots = Arc::new(roots);
    let ec = (load_certs(&dir.join("ec.pem")), dir.join("ec.key"));
    let rsa = (load_certs(&dir.join("rsa.pem")), dir.join("rsa.key"));

    let providers = providers();
    let full_n = 1000;
    let res_n = 5000;
    let bulk_n = 50_000; // 4 KiB records: 200 MiB per measurement

    // (label, provider, value) collected per round.
    let mut full: Vec<(String, Vec<f64>)> = Vec::new();
    let mut resumed: Vec<(String, Vec<f64>)> = Vec::new();
    let mut bulk: Vec<(String, Vec<f64>)> = Vec::new();
    for round in 0..rounds {
        eprintln!("round {}/{}", round + 1, rounds);
        let mut i = 0;
        let mut j = 0;
        let mut k = 0;
        for (pname, provider) in &providers {
            for (kx_name, kx) in kx_choices(pname, provider)
                .into_iter()
                .filter(|_| run("full"))
            {
                for (vname, version) in versions() {
                    if kx_name != "X25519" && vname == "TLS1.2" {
                        continue; // the hybrid groups are TLS 1.3 only
                    }
                    for (cname, (chain, key)) in [("ECDSA P-256", &ec), ("RSA-2048", &rsa)] {
                        let p = restrict(provider, Some(kx), None);
                        let sc = server_config(&p, version, chain, key, None);
                        let cc = client_config(&p, version, &roots, false);
                        let us = full_handshakes(&sc, &cc, full_n);
                        push(
                            &mut full,
                            i,
                            format!("{pname:<7} {vname} {cname:<11} {kx_name:<14}"),
                            us,
                        );
                        i += 1;
                    }
                }
            }
            for (vname, version) in versions().into_iter().filter(|_| run("resumed")) {
                let p = restrict(provider, None, None);
                let ticketer = ticketer(pname);
                let sc = server_config(&p, version, &ec.0, &ec.1, Some(ticketer));
                let cc = client_config(&p, version, &roots, true);
                let per_s = resumed_handshakes(&sc, &cc, res_n);
                push(
                    &mut resumed,
                    j,
                    format!("{pname:<7} {vname} ticket, ECDSA cert, {}", kx_label(vname)),
                    per_s,
                );
                j += 1;
            }
            for (sname, suite) in suites(pname).into_iter().filter(|_| run("bulk")) {
                let p = restrict(provider, None, Some(suite));
                let sc = server_config(&p, &rustls::version::TLS13, &ec.0, &ec.1, None);
                let cc = client_config(&p, &rustls::version::TLS13, &roots, false);
                let mbs = bulk_encrypt(&sc, &cc, bulk_n);
                push(&mut bulk, k, format!("{pname:<7} {sname}"), mbs);
                k += 1;
            }
        }
    }

    println!("rounds: {rounds}; medians of the rounds (all rounds in brackets)");
    println!();
    println!("## Full handshake, server CPU per handshake (us), {full_n} per round");
    report(&full, 0);
    println!();
    println!("## Resumed handshakes per second (server side only), {res_n} per round");
    report(&resumed, 0);
    println!();
    println!("## Bulk encrypt, 4 KiB records, server write path (MB/s), {bulk_n} per round");
    report(&bulk, 0);
}

fn push(v: &mut Vec<(String, Vec<f64>)>, i: usize, label: String, x: f64) {
    if v.len() <= i {
        v.push((label, Vec::new()));
    }
    v[i].1.push(x);
}

fn median(xs: &[f64]) -> f64 {
    let mut s = xs.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn report(rows: &[(String, Vec<f64>)], decimals: usize) {
    for (label, xs) in rows {
        let all: Vec<String> = xs.iter().map(|x| format!("{x:.decimals$}")).collect();
        println!(
            "{label:<52} {:>10.decimals$}   [{}]",
            median(xs),
            all.join(" ")
        );
    }
}

fn load_certs(path: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn providers() -> Vec<(&'static str, CryptoProvider)> {
    #[allow(unused_mut)] // not mutated when built with one provider only
    let mut v = Vec::new();
    #[cfg(feature = "aws")]
    v.push(("aws-lc", rustls::crypto::aws_lc_rs::default_provider()));
    #[cfg(feature = "ring")]
    v.push(("ring", rustls::crypto::ring::default_provider()));
    v
}

fn ticketer(name: &str) -> Arc<dyn ProducesTickets> {
    match name {
        #[cfg(feature = "aws")]
        "aws-lc" => rustls::crypto::aws_lc_rs::Ticketer::new().unwrap(),
        #[cfg(feature = "ring")]
        "ring" => rustls::crypto::ring::Ticketer::new().unwrap(),
        _ => unreachable!(),
    }
}

/// X25519 for both providers (the fair comparison); aws-lc also with the
/// hybrid post-quantum group it offers by default (ring has none).
fn kx_choices(
    name: &str,
    p: &CryptoProvider,
) -> Vec<(&'static str, &'static dyn SupportedKxGroup)> {
    let find = |n: rustls::NamedGroup| {
        *p.kx_groups
            .iter()
            .find(|g| g.name() == n)
            .expect("kx group")
    };
    let mut v = vec![("X25519", find(rustls::NamedGroup::X25519))];
    if name == "aws-lc" {
        v.push(("X25519MLKEM768", find(rustls::NamedGroup::X25519MLKEM768)));
    }
    v
}

fn kx_label(version: &str) -> &'static str {
    if version == "TLS1.3" {
        "PSK+X25519"
    } else {
        "no kx"
    }
}

fn versions() -> [(&'static str, &'static SupportedProtocolVersion); 2] {
    [
        ("TLS1.3", &rustls::version::TLS13),
        ("TLS1.2", &rustls::version::TLS12),
    ]
}

fn suites(name: &str) -> Vec<(&'static str, SupportedCipherSuite)> {
    match name {
        #[cfg(feature = "aws")]
        "aws-lc" => {
            use rustls::crypto::aws_lc_rs::cipher_suite as cs;
            vec![
                ("TLS13_AES_128_GCM_SHA256", cs::TLS13_AES_128_GCM_SHA256),
                ("TLS13_AES_256_GCM_SHA384", cs::TLS13_AES_256_GCM_SHA384),
                (
                    "TLS13_CHACHA20_POLY1305",
                    cs::TLS13_CHACHA20_POLY1305_SHA256,
                ),
            ]
        }
        #[cfg(feature = "ring")]
        "ring" => {
            use rustls::crypto::ring::cipher_suite as cs;
            vec![
                ("TLS13_AES_128_GCM_SHA256", cs::TLS13_AES_128_GCM_SHA256),
                ("TLS13_AES_256_GCM_SHA384", cs::TLS13_AES_256_GCM_SHA384),
                (
                    "TLS13_CHACHA20_POLY1305",
                    cs::TLS13_CHACHA20_POLY1305_SHA256,
                ),
            ]
        }
        _ => unreachable!(),
    }
}

fn restrict(
    p: &CryptoProvider,
    kx: Option<&'static dyn SupportedKxGroup>,
    suite: Option<SupportedCipherSuite>,
) -> Arc<CryptoProvider> {
    let mut p = p.clone();
    if let Some(kx) = kx {
        p.kx_groups = vec![kx];
    } else {
        p.kx_groups
            .retain(|g| g.name() == rustls::NamedGroup::X25519);
    }
    if let Some(s) = suite {
        p.cipher_suites = vec![s];
    }
    Arc::new(p)
}

fn server_config(
    p: &Arc<CryptoProvider>,
    version: &'static SupportedProtocolVersion,
    chain: &[CertificateDer<'static>],
    key: &Path,
    ticketer: Option<Arc<dyn ProducesTickets>>,
) -> Arc<ServerConfig> {
    let key = PrivateKeyDer::from_pem_file(key).expect("key");
    let mut c = ServerConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain.to_vec(), key)
        .unwrap();
    match ticketer {
        Some(t) => {
            // Tickets only: no server-side cache, so resumption is stateless.
            c.ticketer = t;
            c.session_storage = Arc::new(NoServerSessionStorage {});
            c.send_tls13_tickets = 1;
        }
        None => {
            c.session_storage = Arc::new(NoServerSessionStorage {});
            c.send_tls13_tickets = 0;
        }
    }
    Arc::new(c)
}

fn client_config(
    p: &Arc<CryptoProvider>,
    version: &'static SupportedProtocolVersion,
    roots: &Arc<RootCertStore>,
    resume: bool,
) -> Arc<ClientConfig> {
    let mut c = ClientConfig::builder_with_provider(p.clone())
        .with_protocol_versions(&[version])
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    if !resume {
        c.resumption = Resumption::disabled();
    }
    Arc::new(c)
}

fn name() -> ServerName<'static> {
    ServerName::try_from("bench.test").unwrap()
}

/// Runs one handshake; returns the server's time and the connections.
fn handshake(
    sc: &Arc<ServerConfig>,
    cc: &Arc<ClientConfig>,
    buf: &mut Vec<u8>,
) -> (Duration, ClientConnection, ServerConnection) {
    let mut client = ClientConnection::new(cc.clone(), name()).unwrap();
    let t = Instant::now();
    let mut server = ServerConnection::new(sc.clone()).unwrap();
    let mut st = t.elapsed();
    loop {
        buf.clear();
        while client.wants_write() {
            client.write_tls(buf).unwrap();
        }
        let from_client = !buf.is_empty();
        let t = Instant::now();
        let mut rd = &buf[..];
        while !rd.is_empty() {
            server.read_tls(&mut rd).unwrap();
            server.process_new_packets().unwrap();
        }
        buf.clear();
        while server.wants_write() {
            server.write_tls(buf).unwrap();
        }
        st += t.elapsed();
        let from_server = !buf.is_empty();
        let mut rd = &buf[..];
        while !rd.is_empty() {
            client.read_tls(&mut rd).unwrap();
            client.process_new_packets().unwrap();
        }
        if !from_client && !from_server {
            break;
        }
    }
    assert!(!client.is_handshaking() && !server.is_handshaking());
    (st, client, server)
}

/// Mean server microseconds per full handshake.
fn full_handshakes(sc: &Arc<ServerConfig>, cc: &Arc<ClientConfig>, n: usize) -> f64 {
    let mut buf = Vec::with_capacity(16 * 1024);
    let mut total = Duration::ZERO;
    for _ in 0..n {
        let (st, client, server) = handshake(sc, cc, &mut buf);
        assert_eq!(client.handshake_kind(), Some(HandshakeKind::Full));
        drop(client);
        let t = Instant::now();
        drop(server);
        total += st + t.elapsed();
    }
    total.as_secs_f64() * 1e6 / n as f64
}

/// Resumed handshakes per second of server time.
fn resumed_handshakes(sc: &Arc<ServerConfig>, cc: &Arc<ClientConfig>, n: usize) -> f64 {
    let mut buf = Vec::with_capacity(16 * 1024);
    // Prime the client's session store with one full handshake.
    let (_, c, _) = handshake(sc, cc, &mut buf);
    assert_eq!(c.handshake_kind(), Some(HandshakeKind::Full));
    let mut total = Duration::ZERO;
    for _ in 0..n {
        let (st, client, server) = handshake(sc, cc, &mut buf);
        assert_eq!(client.handshake_kind(), Some(HandshakeKind::Resumed));
        let t = Instant::now();
        drop(server);
        total += st + t.elapsed();
    }
    n as f64 / total.as_secs_f64()
}

/// MB/s (10^6 bytes) of plaintext the server encrypts into TLS records.
fn bulk_encrypt(sc: &Arc<ServerConfig>, cc: &Arc<ClientConfig>, n: usize) -> f64 {
    use std::io::Write;
    let mut buf = Vec::with_capacity(16 * 1024);
    let (_, _client, mut server) = handshake(sc, cc, &mut buf);
    let record = [0x5au8; 4096];
    let t = Instant::now();
    for _ in 0..n {
        buf.clear();
        server.writer().write_all(&record).unwrap();
        while server.wants_write() {
            server.write_tls(&mut buf).unwrap();
        }
    }
    let el = t.elapsed();
    assert!(buf.len() > 4096);
    (n * record.len()) as f64 / el.as_secs_f64() / 1e6
}
