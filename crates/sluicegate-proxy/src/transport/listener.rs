//! Listeners and their own settings: TLS (certificates chosen by SNI,
//! client certificates, resumption), the PROXY protocol, the redirect to
//! HTTPS. Compiled into every snapshot (so a reload re-reads certificates)
//! from state that outlives snapshots: each listener's resumption keys and
//! session cache, and its counters.
//!
//! Before its first request a connection goes through [`prepare`]: the
//! PROXY header when the listener wants one, then the TLS handshake; both
//! are bounded by `timeouts.tls_handshake` (the header alone by the
//! header timeout on a plain listener). A connection a worker's io_uring
//! accepted stays on the ring for both (its PROXY header is read through
//! epoll, then the socket moves to the ring for the handshake).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use sluicegate_config::{ClientAuth, Config, Http2Settings, TlsVersion};
use tokio::net::TcpStream;

use crate::clock::deadline::{Deadlines, Stop};
use crate::transport::proxy_protocol::{self, Parsed};
use crate::transport::stream::Stream;
use crate::transport::tls::certs::CertSpec;
use crate::transport::tls::config::{default_provider, server_config_with_sessions, SessionState};
use crate::transport::tls::identity::ClientIdentity;
use crate::transport::tls::resolver::CertResolver;
use crate::transport::tls::stream::HandshakeError;
use crate::transport::tls::stream::Socket;
use crate::transport::tls::TlsStream;
use crate::transport::uring::{Ring, UringTcp};

/// ALPN protocols a TLS listener offers, in preference order: with
/// HTTP/2 on, and without.
const ALPN_H2: &[&[u8]] = &[b"h2", b"http/1.1"];
const ALPN: &[&[u8]] = &[b"http/1.1"];

/// One listener's settings in a snapshot.
#[derive(Debug)]
pub(crate) struct ListenerRt {
    /// The address as configured (port 0 stays 0): the listener's key.
    pub(crate) addr: SocketAddr,
    pub(crate) tls: Option<TlsListener>,
    pub(crate) proxy_protocol: bool,
    pub(crate) redirect_https: bool,
    /// How HTTP/2 connections run, when clients may speak it here.
    pub(crate) http2: Option<Http2Settings>,
    pub(crate) counters: Arc<ListenerCounters>,
}

/// A TLS listener's rustls configuration and certificates.
pub(crate) struct TlsListener {
    pub(crate) config: Arc<ServerConfig>,
    pub(crate) certs: Arc<CertResolver>,
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener").finish_non_exhaustive()
    }
}

/// A listener's counters, kept across reloads.
#[derive(Debug, Default)]
pub(crate) struct ListenerCounters {
    pub(crate) handshakes_ok: AtomicU64,
    /// Failed handshakes by [`HandshakeError`] (in `FAILURES` order).
    pub(crate) handshakes_failed: [AtomicU64; 5],
    /// Connections closed for a missing or malformed PROXY header.
    pub(crate) proxy_header_errors: AtomicU64,
}

/// The failure reasons in the order of `handshakes_failed`.
pub(crate) const FAILURES: [HandshakeError; 5] = [
    HandshakeError::NotTls,
    HandshakeError::Refused,
    HandshakeError::Timeout,
    HandshakeError::Closed,
    HandshakeError::Shutdown,
];

impl ListenerCounters {
    fn failed(&self, e: HandshakeError) {
        let i = FAILURES.iter().position(|f| *f == e).unwrap_or(0);
        self.handshakes_failed[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// What outlives snapshots, per configured listener address.
#[derive(Default)]
pub(crate) struct ListenerState {
    entries: HashMap<SocketAddr, (Option<SessionState>, Arc<ListenerCounters>)>,
}

impl std::fmt::Debug for ListenerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerState")
            .field("listeners", &self.entries.len())
            .finish()
    }
}

impl ListenerState {
    /// Counters of every listener, by address, for the metrics.
    pub(crate) fn counters(&self) -> Vec<(SocketAddr, Arc<ListenerCounters>)> {
        let mut v: Vec<_> = self
            .entries
            .iter()
            .map(|(a, (_, c))| (*a, c.clone()))
            .collect();
        v.sort_unstable_by_key(|(a, _)| *a);
        v
    }
}

/// Compiles the listeners of `config`, reading every certificate and key
/// (a reload reads them again). The error names the listener and file.
/// Warnings (an expired certificate) are logged here.
pub(crate) fn compile(
    config: &Config,
    state: &mut ListenerState,
) -> Result<Vec<Arc<ListenerRt>>, String> {
    let mut out = Vec::with_capacity(config.listen.len());
    for (i, l) in config.listen.iter().enumerate() {
        let entry = state.entries.entry(l.addr).or_default();
        let tls = match &l.tls {
            None => None,
            Some(t) => {
                let specs: Vec<CertSpec> = t
                    .certificates
                    .iter()
                    .map(|c| CertSpec {
                        cert: c.cert.clone(),
                        key: c.key.clone(),
                    })
                    .collect();
                let provider = default_provider();
                let (resolver, warnings) = CertResolver::load(&specs, t.default, &provider)
                    .map_err(|e| format!("listen[{i}].tls: {e}"))?;
                for w in warnings {
                    tracing::warn!(listener = %l.addr, "{w}");
                }
                if entry.0.is_none() {
                    entry.0 = Some(SessionState::new()?);
                }
                let sessions = entry.0.as_ref().expect("set above");
                let certs = Arc::new(resolver);
                let config = server_config_with_sessions(
                    certs.clone(),
                    t.client_ca.as_deref(),
                    t.client_ca.is_some() && t.client_auth == ClientAuth::Require,
                    t.min_version == TlsVersion::V1_3,
                    if l.http2 { ALPN_H2 } else { ALPN },
                    provider,
                    sessions,
                )
                .map_err(|e| format!("listen[{i}].tls: {e}"))?;
                Some(TlsListener { config, certs })
            }
        };
        out.push(Arc::new(ListenerRt {
            addr: l.addr,
            tls,
            proxy_protocol: l.proxy_protocol,
            redirect_https: l.redirect_https,
            http2: l.http2.then(|| config.http2.clone()),
            counters: entry.1.clone(),
        }));
    }
    Ok(out)
}

/// A plain listener with no settings: for a socket whose address is no
/// longer in the config (listen changes apply on restart).
pub(crate) fn plain(addr: SocketAddr) -> Arc<ListenerRt> {
    Arc::new(ListenerRt {
        addr,
        tls: None,
        proxy_protocol: false,
        redirect_https: false,
        http2: None,
        counters: Arc::default(),
    })
}

/// A connection ready for its first request, and the client's address
/// (the PROXY header's source when there is one).
pub(crate) struct Prepared {
    pub(crate) stream: Stream,
    pub(crate) client: SocketAddr,
    /// TLS version and cipher, for the log; empty on plain connections.
    pub(crate) tls: (&'static str, &'static str),
    /// Who the client certificate names, when the client sent one.
    pub(crate) identity: Option<Box<ClientIdentity>>,
    /// The client chose HTTP/2 by ALPN.
    pub(crate) h2: bool,
}

/// An accepted connection before its PROXY header and handshake: a socket
/// on the worker's epoll, or one its io_uring accepted (not yet on the
/// ring: the PROXY header is read first, by peeking, which the ring's
/// buffered receive cannot do).
#[derive(Debug)]
pub(crate) enum Accepted {
    Tcp(TcpStream),
    Ring(Rc<Ring>, OwnedFd),
}

/// How many TLS handshakes finished on a worker's io_uring (test builds
/// only: what proves a TLS connection is served there).
#[cfg(test)]
pub(crate) static TLS_ON_RING: AtomicU64 = AtomicU64::new(0);

/// Reads the PROXY header and runs the TLS handshake that `listener`
/// asks for, by `deadline`. `None`: the connection is to be closed.
pub(crate) async fn prepare(
    dl: &Deadlines,
    listener: &ListenerRt,
    accepted: Accepted,
    peer: SocketAddr,
    deadline: std::time::Instant,
) -> Option<Prepared> {
    let mut client = peer;
    let mut accepted = accepted;
    if listener.proxy_protocol {
        // On the ring's socket, through epoll for the header's few reads
        // (registered, then taken off again).
        let (tcp, ring) = match accepted {
            Accepted::Tcp(tcp) => (tcp, None),
            Accepted::Ring(ring, fd) => match TcpStream::from_std(fd.into()) {
                Ok(tcp) => (tcp, Some(ring)),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot register connection");
                    return None;
                }
            },
        };
        match read_proxy_header(dl, &tcp, deadline).await {
            Ok(Some(source)) => client = source,
            Ok(None) => {}
            Err(why) => {
                tracing::debug!(%peer, why, "PROXY header refused");
                listener
                    .counters
                    .proxy_header_errors
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        accepted = match ring {
            None => Accepted::Tcp(tcp),
            Some(ring) => Accepted::Ring(ring, tcp.into_std().ok()?.into()),
        };
    }
    let sock = match accepted {
        Accepted::Tcp(tcp) => Socket::Tcp(tcp),
        Accepted::Ring(ring, fd) => Socket::Uring(UringTcp::new(ring, fd)),
    };
    let Some(tls) = &listener.tls else {
        let stream = match sock {
            Socket::Tcp(tcp) => Stream::Tcp(tcp),
            Socket::Uring(u) => Stream::Uring(u),
        };
        return Some(Prepared {
            stream,
            client,
            tls: ("", ""),
            identity: None,
            h2: false,
        });
    };
    match TlsStream::accept(sock, tls.config.clone(), dl.at(deadline).or_shutdown()).await {
        Ok(s) => {
            #[cfg(test)]
            if s.socket().on_ring() {
                TLS_ON_RING.fetch_add(1, Ordering::Relaxed);
            }
            listener
                .counters
                .handshakes_ok
                .fetch_add(1, Ordering::Relaxed);
            let tls = s.version_and_cipher();
            let identity = s.client_identity().map(Box::new);
            let h2 = s.alpn_h2();
            Some(Prepared {
                stream: Stream::Tls(Box::new(s)),
                client,
                tls,
                identity,
                h2,
            })
        }
        Err(e) => {
            tracing::debug!(%peer, reason = e.label(), "TLS handshake failed");
            listener.counters.failed(e);
            None
        }
    }
}

/// Reads exactly the PROXY header off `tcp`, peeking first so that no byte
/// after it (a TLS ClientHello, a request) is taken. `Ok(None)`: a header
/// without an address (LOCAL, UNKNOWN): the peer's address stands.
async fn read_proxy_header(
    dl: &Deadlines,
    tcp: &TcpStream,
    deadline: std::time::Instant,
) -> Result<Option<SocketAddr>, &'static str> {
    let mut buf = vec![0u8; proxy_protocol::V2_MAX_LEN];
    let mut wait = dl.at(deadline).or_shutdown();
    loop {
        let peeked = tcp.try_io(tokio::io::Interest::READABLE, || {
            rustix::net::recv(tcp, &mut buf[..], rustix::net::RecvFlags::PEEK)
                .map(|(n, _)| n)
                .map_err(std::io::Error::from)
        });
        match peeked {
            Ok(0) => return Err("closed before the header"),
            Ok(n) => match proxy_protocol::parse(&buf[..n]) {
                Ok(Parsed::Complete { len, source, .. }) => {
                    // Take the header's bytes, and only those.
                    let mut taken = 0;
                    while taken < len {
                        match crate::transport::tcp::recv(tcp, &mut buf[taken..len]) {
                            Ok(0) | Err(_) => return Err("closed in the header"),
                            Ok(k) => taken += k,
                        }
                    }
                    return Ok(source);
                }
                Ok(Parsed::Partial) if n >= buf.len() => return Err("header too long"),
                Ok(Parsed::Partial) => {}
                Err(_) => return Err("malformed or missing header"),
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return Err("read failed"),
        }
        // Bytes that peeked as a prefix stay readable: wait for more by
        // readiness, which a peek leaves set, so sleep briefly instead.
        wait = wait.fix();
        let more = async {
            tcp.readable().await?;
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok::<(), std::io::Error>(())
        };
        match wait.bound(more).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err("read failed"),
            Err(Stop::Timeout) => return Err("timed out"),
            Err(Stop::Shutdown) => return Err("shutting down"),
        }
    }
}
