//! An in-memory stream pair for tests: sessions and phases run over it
//! without sockets. Readiness based like a socket: a read of an empty pipe
//! is `WouldBlock` until the other end writes or closes.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Debug, Default)]
struct Pipe {
    bytes: RefCell<VecDeque<u8>>,
    closed: Cell<bool>,
    reader: RefCell<Option<Waker>>,
}

impl Pipe {
    fn wake(&self) {
        if let Some(w) = self.reader.borrow_mut().take() {
            w.wake();
        }
    }
}

/// One end of an in-memory connection.
#[derive(Debug)]
pub(crate) struct Duplex {
    rx: Rc<Pipe>,
    tx: Rc<Pipe>,
}

/// Two connected ends.
pub(crate) fn pair() -> (Duplex, Duplex) {
    let (a, b) = (Rc::new(Pipe::default()), Rc::new(Pipe::default()));
    (
        Duplex {
            rx: a.clone(),
            tx: b.clone(),
        },
        Duplex { rx: b, tx: a },
    )
}

impl Duplex {
    pub(crate) fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut q = self.rx.bytes.borrow_mut();
        if q.is_empty() {
            return if self.rx.closed.get() {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(q.len());
        for (d, s) in buf.iter_mut().zip(q.drain(..n)) {
            *d = s;
        }
        Ok(n)
    }

    pub(crate) fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        if self.tx.closed.get() {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        self.tx.bytes.borrow_mut().extend(bytes);
        self.tx.wake();
        Ok(bytes.len())
    }

    /// The other end reads an end once it has read what was sent.
    pub(crate) fn shutdown_write(&self) {
        self.tx.closed.set(true);
        self.tx.wake();
    }

    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.rx.bytes.borrow().is_empty() || self.rx.closed.get() {
            return Poll::Ready(Ok(()));
        }
        *self.rx.reader.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Duplex {
    fn drop(&mut self) {
        // The other end reads an end once it has read what was sent.
        self.tx.closed.set(true);
        self.tx.wake();
        self.rx.closed.set(true);
    }
}
