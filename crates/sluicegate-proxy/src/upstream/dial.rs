//! A new connection to an endpoint: TCP, then TLS when the service speaks
//! it to its endpoints. In unit tests, a thread may have its connects
//! answered in memory instead (`in_memory`, a test-only seam).

use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::balance::endpoint::EndpointState;
use crate::clock::deadline::Deadlines;
use crate::snapshot::ServiceRt;
use crate::transport::stream::Stream;
use crate::transport::tls::stream::Socket;
use crate::transport::tls::TlsStream;

/// A new connection to `ep`, with the TLS handshake when the service
/// speaks TLS to its endpoints; both within `timeout`.
pub(crate) async fn connect_stream(
    dl: &Deadlines,
    ep: &EndpointState,
    service: &ServiceRt,
    timeout: Duration,
) -> std::io::Result<Stream> {
    #[cfg(test)]
    if let Some(s) = tests::dial(ep.addr) {
        return s;
    }
    let deadline = Instant::now() + timeout;
    let s = tokio::time::timeout(timeout, TcpStream::connect(ep.addr))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    s.set_nodelay(true)?;
    // On a worker with a ring, upstream connections go on it (taken off
    // epoll once, at connect), plain or TLS.
    let sock = match crate::transport::uring::current() {
        Some(ring) => {
            let fd = std::os::fd::OwnedFd::from(s.into_std()?);
            Socket::Uring(crate::transport::uring::UringTcp::new(ring, fd))
        }
        None => Socket::Tcp(s),
    };
    let Some(tls) = &service.tls else {
        return Ok(match sock {
            Socket::Tcp(s) => Stream::Tcp(s),
            Socket::Uring(u) => Stream::Uring(u),
        });
    };
    let name = tls.server_name(&ep.name).map_err(std::io::Error::other)?;
    // Boxed: the handshake's state machine is large, and a new TLS
    // connection allocates anyway.
    let s = Box::pin(TlsStream::connect(
        sock,
        tls.config.clone(),
        name,
        dl.at(deadline),
    ))
    .await?;
    Ok(Stream::Tls(Box::new(s)))
}

#[cfg(test)]
pub(crate) use tests::in_memory;

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::net::SocketAddr;

    use crate::transport::stream::Stream;

    /// How a test answers a connect to an address: a stream (one end of
    /// an in-memory pipe, say) or the connect's error.
    type Dialer = Box<dyn Fn(SocketAddr) -> std::io::Result<Stream>>;

    thread_local! {
        static DIALER: RefCell<Option<Dialer>> = const { RefCell::new(None) };
    }

    /// Answers this thread's connects with `dial` from now on, in place
    /// of sockets (a test's worker and its runtime run on its thread).
    pub(crate) fn in_memory(dial: impl Fn(SocketAddr) -> std::io::Result<Stream> + 'static) {
        DIALER.with(|d| *d.borrow_mut() = Some(Box::new(dial)));
    }

    /// The connect's result from this thread's dialer, when it has one.
    pub(super) fn dial(addr: SocketAddr) -> Option<std::io::Result<Stream>> {
        DIALER.with(|d| d.borrow().as_ref().map(|dial| dial(addr)))
    }
}
