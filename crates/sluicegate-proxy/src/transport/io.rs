//! Socket I/O helpers: a reusable receive buffer, reads with deadlines,
//! whole writes, and the worker-local keep-alive pool of upstream
//! connections.

use std::io;
use std::sync::Arc;
use std::time::Instant;

use rustix::net::{RecvFlags, SendFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::runtime::deadline::{Stop, Wait};
use crate::upstream::endpoint::EndpointState;

/// A receive buffer: bytes `start..end` are received and not yet used.
#[derive(Debug)]
pub struct RecvBuf {
    data: Vec<u8>,
    start: usize,
    end: usize,
}

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

    pub fn capacity(&self) -> usize {
        self.data.len()
    }

    /// Reads what is there without waiting: `Ok(None)` when nothing is.
    pub fn try_fill(&mut self, s: &TcpStream, limit: usize) -> io::Result<Option<usize>> {
        let spare = self.spare(limit);
        if spare.is_empty() {
            return Ok(Some(0));
        }
        let room = spare.len();
        match recv(s, spare) {
            Ok(n) => {
                self.end += n;
                drained(s, n, room);
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
        s: &TcpStream,
        limit: usize,
        mut wait: Wait<'_>,
    ) -> Result<usize, ReadError> {
        if self.spare(limit).is_empty() {
            return Ok(0);
        }
        loop {
            let spare = self.spare(limit);
            let room = spare.len();
            match recv(s, spare) {
                Ok(n) => {
                    self.end += n;
                    drained(s, n, room);
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

/// `recv` on `s` under the runtime's readiness tracking, like
/// `TcpStream::try_read`, but made as a raw system call (rustix): glibc's
/// `recv` and `send` also enter and leave a thread cancellation point and
/// set `errno`, about 50 instructions a call, four calls a request.
#[inline]
fn recv(s: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    s.try_io(Interest::READABLE, || {
        rustix::net::recv(s, buf, RecvFlags::empty())
            .map(|(n, _)| n)
            .map_err(io::Error::from)
    })
}

/// `send` like [`recv`]; `MSG_NOSIGNAL` as the standard library sends, so
/// a peer's reset is an error here, never a SIGPIPE.
#[inline]
fn send(s: &TcpStream, bytes: &[u8]) -> io::Result<usize> {
    s.try_io(Interest::WRITABLE, || {
        rustix::net::send(s, bytes, SendFlags::NOSIGNAL).map_err(io::Error::from)
    })
}

/// After a short read the kernel had nothing more: forget the socket's read
/// readiness now, so the next read waits for a new edge instead of making a
/// syscall that returns EAGAIN. Safe with edge-triggered epoll: data that
/// arrives after the read raises a new event, and tokio only clears the
/// readiness it saw before this point.
fn drained(s: &TcpStream, n: usize, room: usize) {
    if n > 0 && n < room {
        let _ = s.try_io(Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }
}

/// Waits until `s` has bytes to read, or an error or EOF to report.
///
/// It waits in the socket's single reader slot (`poll_read_ready`), which
/// costs less than `TcpStream::readable`: that one keeps a list of waiters
/// behind a lock and takes it again to leave. The single slot means one task
/// per socket may wait to read at a time, which is how every socket here is
/// used: a connection's task is the only reader of its client and of the
/// upstream connection it holds.
pub fn read_ready(s: &TcpStream) -> impl std::future::Future<Output = io::Result<()>> + '_ {
    std::future::poll_fn(move |cx| s.poll_read_ready(cx))
}

/// Writes all of `bytes`.
pub async fn write_all(s: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match send(s, bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => s.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Writes all of `bytes`, giving up at `wait`'s deadline.
pub async fn write_all_by(s: &TcpStream, bytes: &[u8], wait: Wait<'_>) -> io::Result<()> {
    // Most writes go out whole at once: no wait, so nothing to register.
    let bytes = match send(s, bytes) {
        Ok(n) if n == bytes.len() => return Ok(()),
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

/// Whether an idle pooled connection is still quiet: nothing arrived on it
/// since its last response. Bytes sent after a complete response (a stray
/// or extra response) would be read as the next request's answer, and a
/// close means the request would fail; either way the connection must go.
///
/// No syscall in the common case: the runtime's read readiness is cleared
/// after the last short read (see `drained`), so it is set only if epoll
/// reported something since, and [`recv`] makes the one-byte read only
/// then, to tell data (or EOF) from a readiness left over by a read that
/// filled the buffer. Nothing is registered: the task is not woken later
/// by this socket.
pub fn quiet(s: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(recv(s, &mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// An idle upstream connection and when it stops being usable. Counted in
/// its endpoint's idle gauge while it exists.
#[derive(Debug)]
struct Idle {
    stream: Option<TcpStream>,
    expires: Instant,
    ep: Arc<EndpointState>,
}

impl Drop for Idle {
    fn drop(&mut self) {
        self.ep.idle_changed(-1);
    }
}

/// One worker's keep-alive connections, by endpoint id. Most recently used
/// first, so a quiet period lets the others expire.
#[derive(Debug, Default)]
pub struct Pool {
    slots: Vec<Vec<Idle>>,
}

impl Pool {
    /// Takes a usable idle connection for endpoint `id`.
    pub fn take(&mut self, id: usize, now: Instant) -> Option<TcpStream> {
        let slot = self.slots.get_mut(id)?;
        while let Some(mut idle) = slot.pop() {
            if idle.expires > now {
                return idle.stream.take();
            }
        }
        None
    }

    /// Keeps `stream` for reuse until `expires`, unless `cap` are kept already.
    pub fn put(
        &mut self,
        ep: &Arc<EndpointState>,
        stream: TcpStream,
        expires: Instant,
        cap: usize,
    ) {
        if self.slots.len() <= ep.id {
            self.slots.resize_with(ep.id + 1, Vec::new);
        }
        let slot = &mut self.slots[ep.id];
        if slot.len() < cap {
            ep.idle_changed(1);
            slot.push(Idle {
                stream: Some(stream),
                expires,
                ep: ep.clone(),
            });
        }
    }

    /// Drops expired connections.
    pub fn sweep(&mut self, now: Instant) {
        for slot in &mut self.slots {
            slot.retain(|i| i.expires > now);
        }
    }

    /// Drops everything (shutdown).
    pub fn clear(&mut self) {
        self.slots.clear();
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

    async fn pair(l: &tokio::net::TcpListener) -> (TcpStream, TcpStream) {
        let ours = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (theirs, _) = l.accept().await.unwrap();
        (ours, theirs)
    }

    #[test]
    fn quiet_until_the_peer_sends_or_closes() {
        run(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            // Bytes after the last response.
            let (ours, mut theirs) = pair(&l).await;
            assert!(quiet(&ours));
            theirs.write_all(b"x").await.unwrap();
            ours.readable().await.unwrap();
            assert!(!quiet(&ours));
            // A close.
            let (ours, theirs) = pair(&l).await;
            assert!(quiet(&ours));
            drop(theirs);
            ours.readable().await.unwrap();
            assert!(!quiet(&ours));
            // Readiness left by a read that filled its buffer: the probe
            // finds nothing, clears it, and the connection is quiet.
            let (ours, mut theirs) = pair(&l).await;
            theirs.write_all(b"yy").await.unwrap();
            ours.readable().await.unwrap();
            let mut buf = [0u8; 2];
            assert_eq!(recv(&ours, &mut buf).unwrap(), 2);
            assert!(quiet(&ours));
            assert!(quiet(&ours));
        });
    }
}
