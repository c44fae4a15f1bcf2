//! HTTP/2 streams mapped to and from the protocol-neutral message model,
//! with no HTTP/1.1 text between: a client stream's HEADERS laid out as
//! the request head the lifecycle reads ([`request`]), the stream itself
//! as the one it reads the body's DATA from and answers on ([`exchange`]);
//! a stream to an upstream opened with the head forwarding encodes, its
//! body sent and received as DATA and trailers ([`upstream`]), and its
//! response HEADERS laid out as the response head ([`response`]). The
//! HTTP/2 framing is the `h2` crate's.

pub(crate) mod exchange;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod upstream;

use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::SendStream;

/// Send capacity asked of the connection for a stream's body at a time,
/// while it has bytes to send and no room for them.
pub(crate) const WANT: usize = 64 * 1024;

/// Bytes received on a stream, not read yet.
#[derive(Debug, Default)]
pub(crate) struct Staged {
    buf: Vec<u8>,
    pos: usize,
}

impl Staged {
    pub(crate) fn from_vec(buf: Vec<u8>) -> Staged {
        Staged { buf, pos: 0 }
    }

    pub(crate) fn pending(&self) -> bool {
        self.pos < self.buf.len()
    }

    /// Copies what fits of the staged bytes into `out`: how many.
    pub(crate) fn read_into(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        n
    }

    /// Stages a DATA frame's bytes.
    pub(crate) fn data(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// A socket-like read of the body: what is staged, else its end
    /// (`Ok(0)`) once `ended`, a reset once `failed`, or `WouldBlock`.
    pub(crate) fn recv(&mut self, out: &mut [u8], ended: bool, failed: bool) -> io::Result<usize> {
        if self.pending() {
            Ok(self.read_into(out))
        } else if failed {
            Err(io::ErrorKind::ConnectionReset.into())
        } else if ended {
            Ok(0)
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }
}

/// Sends `data` on `send` (with END_STREAM when `end`), then gives back
/// to the connection the send capacity the stream holds beyond the bytes
/// it still has queued.
///
/// A stream's capacity is a share of the connection's window, which all
/// its streams draw from: one that asked for [`WANT`] and kept what it
/// did not use would hold that share while it sits idle (a bidi gRPC
/// call between messages, a stream waiting for its upstream), and with
/// the 64 KiB window most peers start with, one such stream starves every
/// other stream of the connection (they get their heads, never their
/// DATA). So capacity is asked for only while there are bytes to send
/// ([`has_room`], [`poll_room`]), and what a write did not use goes back
/// at once.
pub(crate) fn send_bytes(
    send: &mut SendStream<Bytes>,
    data: Bytes,
    end: bool,
) -> Result<(), h2::Error> {
    send.send_data(data, end)?;
    if !end {
        // The reservation becomes what is still queued: the rest goes
        // back to the connection (the framing layer does so itself at
        // END_STREAM).
        send.reserve_capacity(0);
    }
    Ok(())
}

/// Whether `send` has room for body bytes now; asks for more when not.
pub(crate) fn has_room(send: &mut SendStream<Bytes>) -> bool {
    if send.capacity() > 0 {
        return true;
    }
    send.reserve_capacity(WANT);
    send.capacity() > 0
}

/// Ready when `send` has room; an error (`BrokenPipe`) when the stream
/// is gone.
pub(crate) fn poll_room(
    send: &mut SendStream<Bytes>,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    if send.capacity() > 0 {
        return Poll::Ready(Ok(()));
    }
    send.reserve_capacity(WANT);
    match send.poll_capacity(cx) {
        Poll::Pending => Poll::Pending,
        Poll::Ready(Some(Ok(_))) => Poll::Ready(Ok(())),
        Poll::Ready(Some(Err(_)) | None) => Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
    }
}
