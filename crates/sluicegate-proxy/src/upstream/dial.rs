//! A new connection to an endpoint: TCP, then TLS when the service speaks
//! it to its endpoints.

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::runtime::deadline::Deadlines;
use crate::snapshot::ServiceRt;
use crate::transport::stream::Stream;
use crate::transport::tls::TlsStream;
use crate::upstream::endpoint::EndpointState;

/// A new connection to `ep`, with the TLS handshake when the service
/// speaks TLS to its endpoints; both within `timeout`.
pub(crate) async fn connect_stream(
    dl: &Deadlines,
    ep: &EndpointState,
    service: &ServiceRt,
    timeout: Duration,
) -> std::io::Result<Stream> {
    let deadline = Instant::now() + timeout;
    let s = tokio::time::timeout(timeout, TcpStream::connect(ep.addr))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    s.set_nodelay(true)?;
    let Some(tls) = &service.tls else {
        return Ok(Stream::Tcp(s));
    };
    let name = tls.server_name(&ep.name).map_err(std::io::Error::other)?;
    let s = TlsStream::connect(s, tls.config.clone(), name, dl.at(deadline)).await?;
    Ok(Stream::Tls(Box::new(s)))
}
