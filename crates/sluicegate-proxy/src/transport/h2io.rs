//! A client connection as the `AsyncRead` + `AsyncWrite` the HTTP/2
//! framing layer (the `h2` crate) reads and writes, over the one
//! [`Stream`] type, with the bytes already read before the connection was
//! known to be HTTP/2 (the h2c preface) given back first.
//!
//! It also watches the frames going in (their 9-byte headers only) for
//! what the framing layer answers without limit: PING and SETTINGS
//! frames, each of which it must acknowledge. A client sending more than
//! [`MAX_CONTROL_PER_SECOND`] of them is flooding: reading stops, and
//! [`Flood`] tells the connection's task to end it with GOAWAY
//! `ENHANCE_YOUR_CALM`. (The framing layer itself bounds CONTINUATION
//! frames, streams reset before they were served, and streams it had to
//! reset for the client's errors.)
//!
//! The stream is shared with the connection's task ([`H2Io::socket`]):
//! once the framing layer has written its GOAWAY and ended its side, the
//! task still reads (and drops) what the client sends for a while before
//! the close, which the framing layer, done with the connection, no
//! longer does.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::transport::stream::Stream;

/// Bytes read from the stream at a time.
const READ_SIZE: usize = 16 * 1024;

/// PING and SETTINGS frames (not acknowledgements) a client may send in
/// a second. Clients send a few (SETTINGS at the start and on changes,
/// PINGs to measure or keep alive); a flood sends them by the thousand.
pub(crate) const MAX_CONTROL_PER_SECOND: u32 = 200;

/// The connection preface a client sends before its first frame.
const PREFACE_LEN: usize = 24;

/// Set once a client floods the connection with control frames.
#[derive(Clone, Default)]
pub(crate) struct Flood(Rc<Cell<bool>>);

impl Flood {
    pub(crate) fn detected(&self) -> bool {
        self.0.get()
    }
}

/// Follows the frame headers in the bytes read.
pub(crate) struct Frames {
    /// Bytes of the preface or of a frame's payload still to pass.
    skip: usize,
    head: [u8; 9],
    have: usize,
    /// Control frames counted since `since`.
    count: u32,
    since: Option<Instant>,
}

impl Frames {
    /// Following a connection from its first byte (the preface) on.
    pub(crate) fn new() -> Frames {
        Frames {
            skip: PREFACE_LEN,
            head: [0; 9],
            have: 0,
            count: 0,
            since: None,
        }
    }

    /// Follows `bytes`; true when they take the client past its control
    /// frames per second.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.head[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have < 9 {
                break;
            }
            self.have = 0;
            let h = &self.head;
            self.skip = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
            // PING (6) or SETTINGS (4) without the ACK flag.
            if (h[3] == 6 || h[3] == 4) && h[4] & 1 == 0 && self.control() {
                return true;
            }
        }
        false
    }

    /// Counts one control frame; true past the limit.
    #[cold]
    fn control(&mut self) -> bool {
        let now = Instant::now();
        match self.since {
            Some(t) if now.saturating_duration_since(t) < Duration::from_secs(1) => {
                self.count += 1;
            }
            _ => {
                self.since = Some(now);
                self.count = 1;
            }
        }
        self.count > MAX_CONTROL_PER_SECOND
    }
}

/// A connection for the HTTP/2 framing layer.
pub(crate) struct H2Io {
    stream: Rc<Stream>,
    /// Bytes read before the handover, served first; then the buffer
    /// reads go through: `buf[at..end]` is unread.
    buf: Vec<u8>,
    at: usize,
    end: usize,
    frames: Frames,
    flood: Flood,
}

impl H2Io {
    /// A connection to an upstream: the server sends no preface.
    pub(crate) fn client(stream: Stream, flood: Flood) -> H2Io {
        H2Io::with(stream, Vec::new(), flood, 0)
    }

    /// A client's connection. `early` holds what was read of it already,
    /// from its first byte (the preface) on.
    pub(crate) fn new(stream: Stream, early: Vec<u8>, flood: Flood) -> H2Io {
        H2Io::with(stream, early, flood, PREFACE_LEN)
    }

    fn with(stream: Stream, early: Vec<u8>, flood: Flood, preface: usize) -> H2Io {
        let mut frames = Frames::new();
        frames.skip = preface;
        if frames.feed(&early) {
            flood.0.set(true);
        }
        H2Io {
            stream: Rc::new(stream),
            end: early.len(),
            buf: early,
            at: 0,
            frames,
            flood,
        }
    }

    /// The stream under the connection, for what follows the framing
    /// layer's end of it.
    pub(crate) fn socket(&self) -> Rc<Stream> {
        self.stream.clone()
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
            if this.flood.detected() {
                // Nothing more is read; the connection's task ends it.
                return Poll::Pending;
            }
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
                    if this.frames.feed(&this.buf[..n]) {
                        this.flood.0.set(true);
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, len: usize) -> Vec<u8> {
        let mut f = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            kind,
            flags,
            0,
            0,
            0,
            0,
        ];
        f.resize(9 + len, 0xAA);
        f
    }

    fn frames() -> Frames {
        Frames::new()
    }

    #[test]
    fn control_frames_past_the_limit_are_a_flood_however_the_bytes_are_cut() {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(frame(4, 0, 12)); // SETTINGS
        bytes.extend(frame(1, 4, 30)); // HEADERS
        bytes.extend(frame(0, 1, 16_384)); // DATA whose payload looks like frames
        for _ in 0..MAX_CONTROL_PER_SECOND - 1 {
            bytes.extend(frame(6, 0, 8)); // PING
            bytes.extend(frame(6, 1, 8)); // its ACK form is not counted
        }
        // Exactly at the limit, in pieces of every size: no flood.
        for cut in [1, 5, 9, 100, 4096] {
            let mut f = frames();
            assert!(!bytes.chunks(cut).any(|c| f.feed(c)), "cut {cut}");
            assert_eq!(f.count, MAX_CONTROL_PER_SECOND);
            // One more is.
            assert!(f.feed(&frame(6, 0, 8)));
        }
        // Data frames never count, however many.
        let mut f = frames();
        f.feed(&bytes[..PREFACE_LEN]);
        let data: Vec<u8> = (0..10_000).flat_map(|_| frame(0, 0, 10)).collect();
        assert!(!f.feed(&data));
        assert_eq!(f.count, 0);
    }
}
