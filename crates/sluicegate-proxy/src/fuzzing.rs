//! The parsers the fuzz targets and the seed-replay test drive, and the
//! drivers of the HTTP/2 session ([`h2_session`]) and the upgrade path
//! ([`upgrade`]) with their checks, exported for them alone: not an API
//! to build on.

mod h2_session;
mod upgrade;

pub use crate::proto::chunked::ChunkedDecoder;
pub use crate::proto::codec::{
    parse_request, parse_response, Parsed, RequestFraming, ResponseFraming,
};
pub use crate::proto::head::{RequestHead, ResponseHead};
pub use crate::route::path::normalize;
pub use crate::route::target::{strip_port, Target};
pub use h2_session::{h2_session, H2Session, MAX_ROUNDS as H2_MAX_ROUNDS};
pub use upgrade::{upgrade, Upgrade};

use std::net::SocketAddr;

/// A whole PROXY protocol header: its length, source and destination.
pub type ProxyHeader = (usize, Option<SocketAddr>, Option<SocketAddr>);

/// [`crate::transport::proxy_protocol::parse`]: `Ok(None)` for a valid
/// prefix (read more), the error's text if the bytes cannot be a header.
pub fn proxy_protocol(buf: &[u8]) -> Result<Option<ProxyHeader>, String> {
    use crate::transport::proxy_protocol::{parse, Parsed};
    match parse(buf) {
        Ok(Parsed::Complete {
            len,
            source,
            destination,
        }) => Ok(Some((len, source, destination))),
        Ok(Parsed::Partial) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The TLS accept path as a listener runs it (its `ServerConfig`: the
/// certificate store choosing by SNI, ALPN, resumption, versions), fed
/// arbitrary bytes in chunks. Sync, no sockets: a fuzz target's loop.
pub struct TlsAccept {
    config: std::sync::Arc<rustls::ServerConfig>,
}

impl TlsAccept {
    /// A listener config with the certificate and key at these paths.
    pub fn new(cert: &std::path::Path, key: &std::path::Path) -> Result<TlsAccept, String> {
        use crate::transport::tls::certs::CertSpec;
        use crate::transport::tls::config::{
            default_provider, server_config_with_sessions, SessionState,
        };
        use crate::transport::tls::resolver::CertResolver;
        let provider = default_provider();
        let specs = [CertSpec {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        }];
        let (resolver, _) = CertResolver::load(&specs, 0, &provider)?;
        let config = server_config_with_sessions(
            std::sync::Arc::new(resolver),
            None,
            false,
            false,
            &[b"http/1.1"],
            provider,
            &SessionState::new()?,
        )?;
        Ok(TlsAccept { config })
    }

    /// Feeds `chunks` to a new server connection in turn, answering as a
    /// server would; stops at the first error (the connection would close).
    /// Returns whether the handshake completed.
    pub fn feed<'a>(&self, chunks: impl Iterator<Item = &'a [u8]>) -> bool {
        use std::io::Read;
        let Ok(mut conn) = rustls::ServerConnection::new(self.config.clone()) else {
            return false;
        };
        let mut sink = Vec::new();
        let mut plain = [0u8; 4096];
        for mut chunk in chunks {
            while !chunk.is_empty() {
                match conn.read_tls(&mut chunk) {
                    Ok(0) | Err(_) => return false,
                    Ok(_) => {}
                }
                if conn.process_new_packets().is_err() {
                    let _ = conn.write_tls(&mut sink);
                    return false;
                }
                while conn.wants_write() {
                    sink.clear();
                    if conn.write_tls(&mut sink).is_err() {
                        return false;
                    }
                }
                while let Ok(n) = conn.reader().read(&mut plain) {
                    if n == 0 {
                        break;
                    }
                }
            }
        }
        !conn.is_handshaking()
    }
}
