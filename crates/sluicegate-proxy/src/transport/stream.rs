//! The one stream type every session and upstream connection reads and
//! writes: plain TCP on the raw `recv`/`send` fast path, TLS over such a
//! socket, one HTTP/2 stream of a client's connection (its request body
//! read and its answer's body written through it, its heads given as
//! fields), and an in-memory pipe for tests. All of it is readiness based,
//! like the socket it wraps: `try_*` calls never wait, and a caller that
//! got `WouldBlock` waits with [`Stream::poll_read_ready`] or
//! [`Stream::writable`] and tries again. One task reads and writes a stream
//! (its connection's), so none of this is shared between tasks.

use std::io;
use std::task::{Context, Poll};

use rustix::net::RecvFlags;
use tokio::net::TcpStream;

use super::tcp::{drained, recv, send};

#[cfg(test)]
use super::duplex::Duplex;
use super::tls::TlsStream;
use super::uring::UringTcp;
use crate::proto::http2::exchange::Exchange;
use crate::proto::http2::upstream::UpExchange;

/// A connection to a client or an upstream.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    /// Plain TCP on the worker's io_uring (`io_uring: true`).
    Uring(UringTcp),
    /// Boxed: the TLS state is large and the plain case should not pay
    /// for its size in every connection task.
    Tls(Box<TlsStream>),
    /// One stream of a client's HTTP/2 connection.
    H2(Box<Exchange>),
    /// One stream on an HTTP/2 connection to an upstream.
    H2Up(Box<UpExchange>),
    #[cfg(test)]
    Duplex(Duplex),
}

impl From<TcpStream> for Stream {
    fn from(s: TcpStream) -> Self {
        Stream::Tcp(s)
    }
}

impl Stream {
    /// Reads what is there without waiting; `Ok(0)` is the end of the
    /// stream, `WouldBlock` that nothing is there yet.
    #[inline(always)]
    pub(crate) fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => {
                let room = buf.len();
                let n = recv(s, buf)?;
                drained(s, n, room);
                Ok(n)
            }
            Stream::Uring(u) => u.try_recv(buf),
            Stream::Tls(t) => t.try_recv(buf),
            Stream::H2(x) => x.try_recv(buf),
            Stream::H2Up(x) => x.try_recv(buf),
            #[cfg(test)]
            Stream::Duplex(d) => d.try_recv(buf),
        }
    }

    /// Writes what the stream takes now without waiting: the count taken,
    /// or `WouldBlock`. A TLS stream takes bytes into its record layer and
    /// may hold some of them encrypted until [`Stream::try_flush`] gets
    /// them out.
    #[inline(always)]
    pub(crate) fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => send(s, bytes),
            Stream::Uring(u) => u.try_send(bytes),
            Stream::Tls(t) => t.try_send(bytes),
            Stream::H2(x) => x.try_send(bytes),
            Stream::H2Up(x) => x.try_send(bytes),
            #[cfg(test)]
            Stream::Duplex(d) => d.try_send(bytes),
        }
    }

    /// Gets out what an earlier [`Stream::try_send`] left buffered:
    /// `WouldBlock` while some is still held. Plain streams hold nothing.
    #[inline(always)]
    pub(crate) fn try_flush(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(_) | Stream::Uring(_) | Stream::H2(_) | Stream::H2Up(_) => Ok(()),
            Stream::Tls(t) => t.try_flush(),
            #[cfg(test)]
            Stream::Duplex(_) => Ok(()),
        }
    }

    /// Ready when a read would not block: bytes, an end or an error to
    /// report. Waits in the socket's single reader slot, which costs less
    /// than `TcpStream::readable` (a list of waiters behind a lock); one
    /// task per stream waits to read at a time, which is how every stream
    /// here is used.
    #[inline(always)]
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_read_ready(cx),
            Stream::Uring(u) => u.poll_read_ready(cx),
            Stream::Tls(t) => t.poll_read_ready(cx),
            Stream::H2(x) => x.poll_read_ready(cx),
            Stream::H2Up(x) => x.poll_read_ready(cx),
            #[cfg(test)]
            Stream::Duplex(d) => d.poll_read_ready(cx),
        }
    }

    /// Ready when a write could take bytes.
    pub(crate) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Tcp(s) => s.poll_write_ready(cx),
            Stream::Uring(u) => u.poll_write_ready(cx),
            Stream::Tls(t) => t.socket().poll_write_ready(cx),
            Stream::H2(x) => x.poll_write_ready(cx),
            Stream::H2Up(x) => x.poll_write_ready(cx),
            #[cfg(test)]
            Stream::Duplex(_) => Poll::Ready(Ok(())),
        }
    }

    /// Waits until a write can make progress.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.writable().await,
            Stream::Tls(t) => t.socket().writable().await,
            Stream::Uring(_) | Stream::H2(_) | Stream::H2Up(_) => {
                std::future::poll_fn(|cx| self.poll_write_ready(cx)).await
            }
            #[cfg(test)]
            Stream::Duplex(_) => Ok(()),
        }
    }

    /// Ends our side of the connection (a TLS close_notify, then a TCP
    /// FIN), keeping it open for reading: what was written still arrives,
    /// and the peer sees its end. Best effort: errors are ignored.
    pub(crate) fn shutdown_write(&self) {
        match self {
            Stream::Tcp(s) => {
                let _ = rustix::net::shutdown(s, rustix::net::Shutdown::Write);
            }
            Stream::Uring(u) => u.shutdown_write(),
            Stream::Tls(t) => t.shutdown_write(),
            Stream::H2(x) => x.finish(),
            Stream::H2Up(x) => x.finish(),
            #[cfg(test)]
            Stream::Duplex(d) => d.shutdown_write(),
        }
    }

    /// An HTTP/2 stream the upstream refused before processing it (its
    /// connection was going away): the request can be sent again.
    #[cold]
    pub(crate) fn refused(&self) -> bool {
        match self {
            Stream::H2Up(x) => x.refused(),
            _ => false,
        }
    }

    /// Ends a request body written to an HTTP/2 upstream's stream
    /// (END_STREAM); other streams are framed by what was written.
    pub(crate) fn end_body(&self) -> io::Result<()> {
        self.end_body_with(None)
    }

    /// Ends a request body written to an HTTP/2 upstream's stream with
    /// `trailers` (a trailing HEADERS) when given, else as
    /// [`Stream::end_body`] does.
    pub(crate) fn end_body_with(&self, trailers: Option<http::HeaderMap>) -> io::Result<()> {
        match self {
            Stream::H2Up(x) => x.end_body(trailers),
            _ => Ok(()),
        }
    }

    /// The trailers that ended what was read from an HTTP/2 stream (an
    /// upstream's response, a client's request), once it ended (taken:
    /// asked once).
    pub(crate) fn take_trailers(&self) -> Option<http::HeaderMap> {
        match self {
            Stream::H2Up(x) => x.take_trailers(),
            Stream::H2(x) => x.take_trailers(),
            _ => None,
        }
    }

    /// The client's HTTP/2 stream this is, if it is one: answers to it go
    /// as fields, never as HTTP/1.1 text.
    #[inline]
    pub(crate) fn h2(&self) -> Option<&Exchange> {
        match self {
            Stream::H2(x) => Some(x),
            _ => None,
        }
    }

    /// Whether the stream can wait in the keep-alive pool for another
    /// request: not an HTTP/2 stream, which ends with its exchange.
    pub(crate) fn poolable(&self) -> bool {
        !matches!(self, Stream::H2(_) | Stream::H2Up(_))
    }

    /// Whether an idle pooled connection is still quiet: nothing arrived on
    /// it since its last response. Bytes sent after a complete response (a
    /// stray or extra response) would be read as the next request's
    /// answer, and a close means the request would fail; either way the
    /// connection must go.
    ///
    /// No syscall in the common case on TCP: the runtime's read readiness
    /// is cleared after the last short read (see [`drained`]), so it is set
    /// only if epoll reported something since, and [`recv`] makes the
    /// one-byte read only then, to tell data (or EOF) from a readiness left
    /// over by a read that filled the buffer. Nothing is registered: the
    /// task is not woken later by this socket. On TLS, records that carry
    /// no data (session tickets) are taken in and the stream stays quiet.
    pub(crate) fn quiet(&self) -> bool {
        let mut probe = [0u8; 1];
        let r = match self {
            Stream::Tcp(s) => recv(s, &mut probe),
            Stream::Uring(u) => return u.quiet(),
            other => other.try_recv(&mut probe),
        };
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// [`Stream::quiet`], asking the socket itself: one `recv` that
    /// returns `EAGAIN` when nothing came, whatever the runtime's readiness
    /// says, so it also sees bytes (or a close) that arrived since the
    /// worker's last `epoll_wait`. Costs a syscall: used only before
    /// reusing a connection whose last response had a zero-length body.
    /// On TLS, any bytes on the socket count (a record carrying no data,
    /// which [`Stream::quiet`] would take in, retires the connection too).
    #[cold]
    pub(crate) fn quiet_now(&self) -> bool {
        let tcp = match self {
            Stream::Tcp(s) => s,
            Stream::Uring(u) => return u.quiet_now(),
            Stream::Tls(t) => return self.quiet() && t.socket().quiet_now(),
            Stream::H2(_) | Stream::H2Up(_) => return false,
            #[cfg(test)]
            Stream::Duplex(_) => return self.quiet(),
        };
        let mut probe = [0u8; 1];
        let r = rustix::net::recv(tcp, &mut probe, RecvFlags::PEEK | RecvFlags::DONTWAIT);
        matches!(r, Err(rustix::io::Errno::AGAIN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn run(f: impl std::future::Future<Output = ()>) {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f);
    }

    async fn read_ready(s: &Stream) {
        std::future::poll_fn(|cx| s.poll_read_ready(cx))
            .await
            .unwrap();
    }

    async fn pair(l: &tokio::net::TcpListener) -> (Stream, TcpStream) {
        let ours = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (theirs, _) = l.accept().await.unwrap();
        (Stream::Tcp(ours), theirs)
    }

    #[test]
    fn quiet_until_the_peer_sends_or_closes() {
        run(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            // Bytes after the last response.
            let (ours, mut theirs) = pair(&l).await;
            assert!(ours.quiet());
            theirs.write_all(b"x").await.unwrap();
            read_ready(&ours).await;
            assert!(!ours.quiet());
            // A close.
            let (ours, theirs) = pair(&l).await;
            assert!(ours.quiet());
            drop(theirs);
            read_ready(&ours).await;
            assert!(!ours.quiet());
            // Readiness left by a read that filled its buffer: the probe
            // finds nothing, clears it, and the connection is quiet.
            let (ours, mut theirs) = pair(&l).await;
            theirs.write_all(b"yy").await.unwrap();
            read_ready(&ours).await;
            let mut buf = [0u8; 2];
            assert_eq!(ours.try_recv(&mut buf).unwrap(), 2);
            assert!(ours.quiet());
            assert!(ours.quiet());
        });
    }

    #[test]
    fn quiet_now_sees_bytes_the_runtime_has_not_reported_yet() {
        run(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let (ours, mut theirs) = pair(&l).await;
            assert!(ours.quiet_now());
            // Sent, and on our socket at once (loopback), but this task
            // has not yielded since: epoll has not reported it.
            theirs.write_all(b"x").await.unwrap();
            assert!(ours.quiet(), "the readiness check cannot see it yet");
            assert!(!ours.quiet_now());
            // A close, likewise.
            let (ours, theirs) = pair(&l).await;
            drop(theirs);
            assert!(!ours.quiet_now());
        });
    }
}
