//! The socket under a TLS stream: a tokio `TcpStream` on an epoll worker,
//! or a [`UringTcp`] on a worker with a ring. Both are readiness based with
//! the same calls, so rustls is fed and drained the same way on either.

use std::io;
use std::task::{Context, Poll};

use tokio::net::TcpStream;

use crate::transport::tcp::{drained, recv, send};
use crate::transport::uring::UringTcp;

/// A TLS stream's socket.
#[derive(Debug)]
pub(crate) enum Socket {
    Tcp(TcpStream),
    Uring(UringTcp),
}

impl From<TcpStream> for Socket {
    fn from(s: TcpStream) -> Self {
        Socket::Tcp(s)
    }
}

impl From<UringTcp> for Socket {
    fn from(s: UringTcp) -> Self {
        Socket::Uring(s)
    }
}

impl Socket {
    /// Reads what is there: `Ok(0)` at the end, `WouldBlock` when nothing
    /// is. On TCP a short read clears the read readiness, as plain reads do.
    pub(crate) fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => {
                let room = buf.len();
                let n = recv(s, buf)?;
                drained(s, n, room);
                Ok(n)
            }
            Socket::Uring(u) => u.try_recv(buf),
        }
    }

    /// Writes what the socket takes now, or `WouldBlock`.
    pub(crate) fn send(&self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => send(s, bytes),
            Socket::Uring(u) => u.try_send(bytes),
        }
    }

    /// Ready when a read would not block.
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Socket::Tcp(s) => s.poll_read_ready(cx),
            Socket::Uring(u) => u.poll_read_ready(cx),
        }
    }

    /// Ready when a write could take bytes.
    pub(crate) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Socket::Tcp(s) => s.poll_write_ready(cx),
            Socket::Uring(u) => u.poll_write_ready(cx),
        }
    }

    /// Waits until a write can make progress.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.writable().await,
            Socket::Uring(u) => std::future::poll_fn(|cx| u.poll_write_ready(cx)).await,
        }
    }

    /// Our side's FIN (on the ring, after the bytes already taken).
    pub(crate) fn shutdown_write(&self) {
        match self {
            Socket::Tcp(s) => {
                let _ = rustix::net::shutdown(s, rustix::net::Shutdown::Write);
            }
            Socket::Uring(u) => u.shutdown_write(),
        }
    }

    /// Nothing waits on the socket, asking the kernel (a syscall): see
    /// [`crate::transport::stream::Stream::quiet_now`].
    pub(crate) fn quiet_now(&self) -> bool {
        match self {
            Socket::Tcp(s) => {
                let mut probe = [0u8; 1];
                let r = rustix::net::recv(
                    s,
                    &mut probe,
                    rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
                );
                matches!(r, Err(rustix::io::Errno::AGAIN))
            }
            Socket::Uring(u) => u.quiet_now(),
        }
    }

    /// Whether this socket is on the worker's io_uring.
    #[cfg(test)]
    pub(crate) fn on_ring(&self) -> bool {
        matches!(self, Socket::Uring(_))
    }
}
