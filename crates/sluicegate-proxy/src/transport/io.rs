//! Stream I/O helpers: a reusable receive buffer, reads with deadlines
//! and whole writes, over any [`Stream`].

use std::io;

use crate::clock::deadline::{Stop, Wait};
use crate::transport::stream::Stream;

/// A receive buffer: bytes `start..end` are received and not yet used.
#[derive(Debug)]
pub struct RecvBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

/// A place in a [`RecvBuf`] ([`RecvBuf::mark`]).
#[derive(Debug, Clone, Copy)]
pub struct Mark(usize, usize);

/// Why a read did not return bytes.
#[derive(Debug)]
pub enum ReadError {
    Timeout,
    /// The wait was made with [`Wait::or_shutdown`] and the worker is
    /// shutting down.
    Shutdown,
    /// The socket failed (kept for `Debug` output).
    Io(#[allow(dead_code)] io::Error),
}

impl crate::proto::head::Arena for RecvBuf {
    fn filled_len(&self) -> usize {
        self.len()
    }
    fn append(&mut self, bytes: &[u8]) {
        self.put(bytes);
    }
}

impl RecvBuf {
    pub fn new(capacity: usize) -> Self {
        RecvBuf {
            data: vec![0; capacity],
            start: 0,
            end: 0,
        }
    }

    #[inline]
    pub fn filled(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.start += n.min(self.len());
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    pub fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
    }

    /// Where the received bytes are now, for [`RecvBuf::rewind`].
    #[inline]
    pub fn mark(&self) -> Mark {
        Mark(self.start, self.end)
    }

    /// Takes back what was consumed since `mark`: its bytes are still in
    /// place as long as nothing was read or put since (a consume only
    /// moves the start). The caller must know that nothing was.
    pub fn rewind(&mut self, mark: Mark) {
        debug_assert!(mark.1 <= self.data.len() && mark.0 <= mark.1);
        debug_assert!(
            self.end == 0 || self.end == mark.1,
            "bytes came in since the mark"
        );
        (self.start, self.end) = (mark.0, mark.1);
    }

    /// Room to read into, compacting first and growing up to `limit` bytes
    /// of capacity when the buffer is full.
    #[inline]
    fn spare(&mut self, limit: usize) -> &mut [u8] {
        if self.end == self.data.len() {
            self.make_room(limit);
        }
        &mut self.data[self.end..]
    }

    /// [`RecvBuf::spare`] when the buffer is full to its end.
    #[cold]
    fn make_room(&mut self, limit: usize) {
        if self.start > 0 {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.data.len() && self.data.len() < limit {
            let new = (self.data.len() * 2).clamp(4096, limit.max(4096));
            self.data.resize(new, 0);
        }
    }

    /// Appends `bytes` after what is there, growing the buffer as needed.
    pub fn put(&mut self, bytes: &[u8]) {
        if self.data.len() - self.end < bytes.len() {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.data.len() - self.end < bytes.len() {
                self.data.resize(self.end + bytes.len(), 0);
            }
        }
        self.data[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    pub fn capacity(&self) -> usize {
        self.data.len()
    }

    /// Reads what is there without waiting: `Ok(None)` when nothing is.
    #[inline]
    pub fn try_fill(&mut self, s: &Stream, limit: usize) -> io::Result<Option<usize>> {
        let spare = self.spare(limit);
        if spare.is_empty() {
            return Ok(Some(0));
        }
        match s.try_recv(spare) {
            Ok(n) => {
                self.end += n;
                Ok(Some(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads once from `s`, waiting at most until `wait`'s deadline. Ok(0)
    /// is EOF; a full buffer (at `limit`) also returns Ok(0) without
    /// reading, so callers check `len()` against their limit first.
    pub async fn fill(
        &mut self,
        s: &Stream,
        limit: usize,
        mut wait: Wait<'_>,
    ) -> Result<usize, ReadError> {
        if self.spare(limit).is_empty() {
            return Ok(0);
        }
        loop {
            let spare = self.spare(limit);
            match s.try_recv(spare) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
            // A wake-up without data must not push the deadline out.
            wait = wait.fix();
            match wait.bound(read_ready(s)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(ReadError::Io(e)),
                Err(Stop::Timeout) => return Err(ReadError::Timeout),
                Err(Stop::Shutdown) => return Err(ReadError::Shutdown),
            }
        }
    }
}

/// Waits until `s` has bytes to read, or an error or EOF to report
/// ([`Stream::poll_read_ready`]).
#[inline]
pub fn read_ready(s: &Stream) -> impl std::future::Future<Output = io::Result<()>> + '_ {
    std::future::poll_fn(move |cx| s.poll_read_ready(cx))
}

/// Writes all of `bytes`, and gets out whatever the stream held back.
pub async fn write_all(s: &Stream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match s.try_send(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.writable().await?,
            Err(e) => return Err(e),
        }
    }
    loop {
        match s.try_flush() {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.writable().await?,
            Err(e) => return Err(e),
        }
    }
}

/// Writes all of `bytes`, giving up at `wait`'s deadline.
pub async fn write_all_by(s: &Stream, bytes: &[u8], wait: Wait<'_>) -> io::Result<()> {
    // Most writes go out whole at once: no wait, so nothing to register.
    let bytes = match s.try_send(bytes) {
        Ok(n) if n == bytes.len() && s.try_flush().is_ok() => return Ok(()),
        Ok(0) if !bytes.is_empty() => return Err(io::ErrorKind::WriteZero.into()),
        Ok(n) => &bytes[n..],
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => bytes,
        Err(e) => return Err(e),
    };
    match wait.bound(write_all(s, bytes)).await {
        Ok(r) => r,
        Err(Stop::Timeout) => Err(io::ErrorKind::TimedOut.into()),
        Err(Stop::Shutdown) => Err(io::ErrorKind::Interrupted.into()),
    }
}
