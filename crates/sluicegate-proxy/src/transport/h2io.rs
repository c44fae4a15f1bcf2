//! A client connection as the `AsyncRead` + `AsyncWrite` the HTTP/2
//! framing layer (the `h2` crate) reads and writes, over the one
//! [`Stream`] type, with the bytes already read before the connection was
//! known to be HTTP/2 (the h2c preface) given back first.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::transport::stream::Stream;

/// A connection for the HTTP/2 framing layer.
pub(crate) struct H2Io {
    stream: Stream,
    /// Bytes read before the handover, served first.
    early: Vec<u8>,
    at: usize,
}

impl H2Io {
    pub(crate) fn new(stream: Stream, early: Vec<u8>) -> H2Io {
        H2Io {
            stream,
            early,
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
        let this = self.get_mut();
        if this.at < this.early.len() {
            let n = buf.remaining().min(this.early.len() - this.at);
            buf.put_slice(&this.early[this.at..this.at + n]);
            this.at += n;
            if this.at == this.early.len() {
                this.early = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        loop {
            match this.stream.try_recv(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
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
