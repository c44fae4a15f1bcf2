//! Plain TCP reads and writes as raw system calls under tokio's readiness
//! tracking: what [`super::stream::Stream`] does for a TCP socket and what
//! the TLS stream feeds rustls with, kept apart from both so that neither
//! stream type has to import the other's file for them.

use std::io;

use rustix::net::{RecvFlags, SendFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// `recv` on `s` under the runtime's readiness tracking, like
/// `TcpStream::try_read`, but made as a raw system call (rustix): glibc's
/// `recv` and `send` also enter and leave a thread cancellation point and
/// set `errno`, about 50 instructions a call, four calls a request.
#[inline]
pub(crate) fn recv(s: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    s.try_io(Interest::READABLE, || {
        rustix::net::recv(s, buf, RecvFlags::empty())
            .map(|(n, _)| n)
            .map_err(io::Error::from)
    })
}

/// `send` like [`recv`]; `MSG_NOSIGNAL` as the standard library sends, so
/// a peer's reset is an error here, never a SIGPIPE.
#[inline]
pub(crate) fn send(s: &TcpStream, bytes: &[u8]) -> io::Result<usize> {
    s.try_io(Interest::WRITABLE, || {
        rustix::net::send(s, bytes, SendFlags::NOSIGNAL).map_err(io::Error::from)
    })
}

/// After a short read the kernel had nothing more: forget the socket's read
/// readiness now, so the next read waits for a new edge instead of making a
/// syscall that returns EAGAIN. Safe with edge-triggered epoll: data that
/// arrives after the read raises a new event, and tokio only clears the
/// readiness it saw before this point.
#[inline]
pub(crate) fn drained(s: &TcpStream, n: usize, room: usize) {
    if n > 0 && n < room {
        let _ = s.try_io(Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }
}
