//! A client connection as the `AsyncRead` + `AsyncWrite` the HTTP/2
//! framing layer (the `h2` crate) reads and writes, over the one
//! [`Stream`] type, with the bytes already read before the connection was
//! known to be HTTP/2 (the h2c preface) given back first.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::transport::stream::Stream;

/// Bytes read from the stream at a time.
const READ_SIZE: usize = 16 * 1024;

/// A connection for the HTTP/2 framing layer.
pub(crate) struct H2Io {
    stream: Stream,
    /// Bytes read before the handover, served first; then the buffer
    /// reads go through: `buf[at..end]` is unread.
    buf: Vec<u8>,
    at: usize,
    end: usize,
}

impl H2Io {
    pub(crate) fn new(stream: Stream, early: Vec<u8>) -> H2Io {
        H2Io {
            stream,
            end: early.len(),
            buf: early,
            at: 0,
        }
    }
}

impl AsyncRead for H2Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        // The framing layer hands over fresh, uninitialised room on every
        // read, which would have to be zeroed before a `&mut [u8]` could
        // be made of it (16 KiB and more per read); reads go through a
        // buffer of the connection's own instead, zeroed once, and only
        // what was read is copied.
        let this = self.get_mut();
        loop {
            if this.at < this.end {
                let n = buf.remaining().min(this.end - this.at);
                buf.put_slice(&this.buf[this.at..this.at + n]);
                this.at += n;
                return Poll::Ready(Ok(()));
            }
            if this.buf.len() < READ_SIZE {
                this.buf.resize(READ_SIZE, 0);
            }
            match this.stream.try_recv(&mut this.buf) {
                Ok(0) => return Poll::Ready(Ok(())),
                Ok(n) => {
                    this.at = 0;
                    this.end = n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(this.stream.poll_read_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for H2Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let s = &self.get_mut().stream;
        loop {
            match s.try_send(bytes) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(s.poll_write_ready(cx))?;
                }
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let s = &self.get_mut().stream;
        loop {
            match s.try_flush() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(s.poll_write_ready(cx))?;
                }
                r => return Poll::Ready(r),
            }
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        self.get_mut().stream.shutdown_write();
        Poll::Ready(Ok(()))
    }
}
