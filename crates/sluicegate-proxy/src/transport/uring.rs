//! The io_uring transport for plain TCP (`io_uring: true`): one ring per
//! worker thread, its fd watched by the worker's tokio runtime so that
//! completions wake tasks, and every submission made during a turn of the
//! worker's loop sent to the kernel by ONE `io_uring_enter`, in the
//! runtime's before-park hook ([`turn`]).
//!
//! - Receives are multishot, into buffers the ring provides (a buffer
//!   ring shared by the worker's connections): data arrives with no system
//!   call; [`UringTcp::try_recv`] copies it out and gives the buffer back.
//!   A multishot receive that ends (the kernel ends them now and then, the
//!   buffers ran out: `ENOBUFS`) is armed again when the connection is
//!   next read, or when buffers come back.
//! - Sends go through an owned buffer per connection: `try_send` copies in
//!   and returns at once; the bytes queued during a turn leave in one send
//!   per connection at the end of the turn, the rest of a partial send
//!   right after its completion. A full buffer is `WouldBlock` until a
//!   send completes.
//! - Accepts are multishot ([`Acceptor`]).
//! - A socket is closed only once no operation refers to it any more:
//!   dropping a [`UringTcp`] cancels its receive, lets queued bytes go out,
//!   and closes the fd when the last completion is in.
//!
//! The readiness-based API mirrors [`super::stream::Stream`]'s, so sessions,
//! HTTP/1.1 and HTTP/2 run over it unchanged.
//!
//! Unsafe code, allowed in this file alone: memory shared with the kernel
//! (the buffer ring, submissions pointing into buffers kept alive until
//! their completion) is what io_uring is.
#![allow(unsafe_code)]

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::Waker;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use slab::Slab;
use tokio::io::unix::AsyncFd;

/// Submission queue entries; the completion queue gets twice as many.
const ENTRIES: u32 = 4096;
/// A connection holding this many unread buffers has its receive
/// cancelled until its reader catches up, so that one slow reader cannot
/// take every buffer of the worker.
const MAX_HELD: usize = 8;
/// A connection's send buffer.
const TX_CAP: usize = 64 * 1024;
/// Send buffers kept for reuse per worker: a connection holds one only
/// while it has bytes to send, so an idle connection costs none.
const TX_SPARE: usize = 64;

/// Operation kinds, in the low byte of a completion's user data (the slot
/// is above it).
const OP_RECV: u64 = 1;
const OP_SEND: u64 = 2;
const OP_ACCEPT: u64 = 3;
/// A one-shot readiness poll for a connection without buffers.
const OP_POLL: u64 = 5;
/// Cancels and shutdowns: completions with nothing to do.
const OP_IGNORE: u64 = 4;

fn user_data(slot: usize, op: u64) -> u64 {
    ((slot as u64) << 8) | op
}

/// Why a worker runs on epoll although `io_uring` was asked for: the
/// kernel refused the ring (`io_uring_disabled`, seccomp, an old kernel).
/// The one log line says so.
pub(crate) fn refused_reason(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc_eperm) if libc_eperm == rustix::io::Errno::PERM.raw_os_error() => {
            "not permitted (kernel.io_uring_disabled or a seccomp filter)"
        }
        Some(n) if n == rustix::io::Errno::NOSYS.raw_os_error() => "not in this kernel",
        Some(n) if n == rustix::io::Errno::INVAL.raw_os_error() => {
            "a feature this transport needs is not in this kernel"
        }
        _ => "refused",
    }
}

/// Whether workers use io_uring: the config's `io_uring` unless the
/// environment's `SLUICEGATE_IO_URING` (`1` or `0`) says otherwise (so a
/// test suite can run in either mode); off when neither says.
pub fn wanted(config: Option<bool>, env: Option<&str>) -> bool {
    match env.map(str::trim) {
        Some("1" | "true") => true,
        Some("0" | "false") => false,
        _ => config.unwrap_or(false),
    }
}

thread_local! {
    /// The ring of the worker running on this thread, if it has one.
    static CURRENT: RefCell<Option<Rc<Ring>>> = const { RefCell::new(None) };
}

/// This thread's ring, when its worker runs on io_uring.
pub(crate) fn current() -> Option<Rc<Ring>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Makes `ring` this thread's (or none).
pub(crate) fn set_current(ring: Option<Rc<Ring>>) {
    CURRENT.with(|c| *c.borrow_mut() = ring);
}

/// The before-park hook of a worker on io_uring: queues the sends of the
/// turn, makes the turn's one `io_uring_enter`, and takes in the
/// completions (waking their tasks, which the runtime then runs instead
/// of sleeping).
pub(crate) fn turn() {
    CURRENT.with(|c| {
        if let Some(r) = c.borrow().as_ref() {
            r.turn();
        }
    });
}

/// Where the receive of a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recv {
    Idle,
    Armed,
    /// Cancelled (held buffers, a drop); its last completion is due.
    Cancelling,
    /// Ended for want of buffers: armed again when some come back;
    /// meanwhile reads are plain `recv` calls on readiness (a one-shot
    /// poll on the ring), so a connection whose reader waits for another
    /// connection's progress never waits for buffers that connection holds.
    Starving,
}

/// Where the sends of a connection stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Send {
    Idle,
    /// Bytes wait for the end of the turn.
    Queued,
    /// A send of the buffer's first bytes is in the kernel.
    InFlight,
}

struct ConnInner {
    /// Received buffers not yet read: (buffer id, length, read so far).
    rx: VecDeque<(u16, u32, u32)>,
    /// The end of the stream: 0 at EOF, a negative errno on error.
    rx_end: Option<i32>,
    recv: Recv,
    read_waker: Option<Waker>,
    /// Bytes taken by `try_send` and not yet sent. Its capacity is
    /// reserved once and never grows, so the address a send refers to
    /// stays valid while the send is in flight. Taken from the worker's
    /// spares when bytes come, and given back once they are all sent.
    tx: Vec<u8>,
    send: Send,
    tx_err: Option<i32>,
    write_waker: Option<Waker>,
    /// Shut our side down once the buffer is out.
    shut: bool,
    /// The handle is gone: close once nothing is in flight.
    dropped: bool,
    /// A one-shot poll (while starving) is in flight.
    polling: bool,
    /// That poll saw the socket readable: a plain `recv` is due before
    /// the next poll (cleared when it finds nothing).
    readable: bool,
}

struct ConnState {
    fd: OwnedFd,
    inner: RefCell<ConnInner>,
}

/// What the ring and an [`Acceptor`] share of one listener.
struct AcceptState {
    fd: RawFd,
    queue: RefCell<VecDeque<io::Result<OwnedFd>>>,
    armed: Cell<Recv>,
    waker: RefCell<Option<Waker>>,
    held: Cell<bool>,
}

enum Entry {
    Conn(Rc<ConnState>),
    Accept(Rc<AcceptState>),
}

/// One worker's ring. Not shared between threads.
///
/// Fields drop in order: the eventfd's registration, the eventfd, the ring (cancelled in
/// `drop`), the connections, then the buffers nothing refers to any more.
pub(crate) struct Ring {
    /// The eventfd the kernel signals when this ring has work for the
    /// worker's next enter.
    fd: AsyncFd<RawFd>,
    /// Open while registered above.
    _eventfd: OwnedFd,
    uring: RefCell<IoUring>,
    entries: RefCell<Slab<Entry>>,
    /// Connections with bytes queued this turn.
    pending: RefCell<Vec<usize>>,
    /// Connections waiting for receive buffers.
    starving: RefCell<Vec<usize>>,
    cqes: RefCell<Vec<cqueue::Entry>>,
    /// Buffers given back since the last publish.
    returned: Cell<bool>,
    bufs: BufRing,
    /// Send buffers no connection holds now.
    tx_spare: RefCell<Vec<Vec<u8>>>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("entries", &self.entries.borrow().len())
            .finish()
    }
}

impl Ring {
    /// Sets up a ring with its receive buffers, registered with the
    /// current tokio runtime. Errors when the kernel refuses io_uring or a
    /// feature used here (multishot receive needs Linux 6.0, deferred
    /// task work 6.1).
    pub(crate) fn new() -> io::Result<Rc<Ring>> {
        // Completions are posted only inside this thread's own enter
        // (`DEFER_TASKRUN`, which needs `SINGLE_ISSUER`): a receive's work
        // runs in the turn's enter, batched, instead of interrupting the
        // worker wherever it is (a task-work signal per wake-up) and
        // contending with the sender for the socket's lock.
        let uring = IoUring::builder()
            .setup_cqsize(ENTRIES * 4)
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(ENTRIES)?;
        let probe = {
            let mut p = io_uring::Probe::new();
            uring.submitter().register_probe(&mut p)?;
            p
        };
        for code in [
            opcode::RecvMulti::CODE,
            opcode::Send::CODE,
            opcode::AcceptMulti::CODE,
            opcode::AsyncCancel::CODE,
        ] {
            if !probe.is_supported(code) {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::INVAL.raw_os_error(),
                ));
            }
        }
        let bufs = BufRing::new()?;
        // SAFETY: the entries live as long as the ring: `Ring` drops its
        // `IoUring` (cancelling everything) before its buffers.
        unsafe {
            uring
                .submitter()
                .register_buf_ring_with_flags(bufs.entries as u64, BUFS, BGID, 0)?;
        }
        // The ring's own fd does not wake a poller for deferred work: the
        // kernel signals this eventfd when work is first queued (and when
        // completions are posted). It is never read: the worker's epoll
        // is edge-triggered, and every signal is an edge.
        let efd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        uring.submitter().register_eventfd(efd.as_raw_fd())?;
        // SAFETY: the eventfd is `Ring`'s, which drops it after this
        // registration (field order).
        let fd = unsafe {
            AsyncFd::register_with_interest(efd.as_raw_fd(), tokio::io::Interest::READABLE)
        }?;
        Ok(Rc::new(Ring {
            fd,
            _eventfd: efd,
            uring: RefCell::new(uring),
            bufs,
            entries: RefCell::new(Slab::new()),
            pending: RefCell::new(Vec::new()),
            starving: RefCell::new(Vec::new()),
            cqes: RefCell::new(Vec::with_capacity(256)),
            returned: Cell::new(false),
            tx_spare: RefCell::new(Vec::new()),
        }))
    }

    /// Runs the kernel's work for the ring (a receive or accept ready
    /// while the worker slept in `epoll_wait`) as soon as the worker
    /// wakes: a turn, here in a task, so the tasks its completions wake
    /// run in this same pass of the scheduler. (Woken from the
    /// before-park hook instead, they would cost the runtime one more
    /// non-blocking `epoll_wait` first.) Runs for the worker's life.
    pub(crate) async fn drive(self: Rc<Self>) {
        loop {
            let Ok(mut g) = self.fd.readable().await else {
                return;
            };
            g.clear_ready();
            drop(g);
            self.turn();
        }
    }

    fn push(&self, e: squeue::Entry) {
        let mut u = self.uring.borrow_mut();
        // SAFETY: every entry refers to memory kept alive until its
        // completion (a connection's state stays in `entries` until then).
        while unsafe { u.submission().push(&e) }.is_err() {
            // Full: send what is queued now.
            if let Err(err) = u.submit() {
                tracing::warn!(error = %err, "io_uring submit failed");
            }
        }
    }

    /// The end of a turn: sends queued, one enter, completions in. Taking
    /// completions in can queue more (the rest of a partial send, a
    /// cancel, a receive armed again) without waking any task: those go
    /// in another enter before the worker sleeps, or nothing would submit
    /// them until some unrelated event woke it.
    fn turn(&self) {
        loop {
            let pending = std::mem::take(&mut *self.pending.borrow_mut());
            for slot in &pending {
                self.start_send(*slot);
            }
            let mut v = pending;
            v.clear();
            {
                let mut p = self.pending.borrow_mut();
                if p.is_empty() {
                    *p = v;
                }
            }
            let mut u = self.uring.borrow_mut();
            // An overflowed completion queue is flushed by an enter too,
            // and deferred work runs only in one (`submit` passes
            // GETEVENTS when the kernel flags work).
            let queued = {
                let sq = u.submission();
                !sq.is_empty() || sq.cq_overflow() || sq.taskrun()
            };
            if !queued {
                break;
            }
            // The completions this enter posts are taken in right after
            // it: they must not signal the eventfd, or the worker's next
            // sleep would end at once for nothing. Work the kernel queues
            // meanwhile sets the task-run flag, which the loop reads
            // again once signals are back on.
            u.completion().disable_eventfd();
            let r = u.submit();
            u.completion().enable_eventfd();
            std::sync::atomic::fence(Ordering::SeqCst);
            if let Err(e) = r {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::warn!(error = %e, "io_uring submit failed");
                }
            }
            drop(u);
            self.reap();
        }
        self.reap();
    }

    fn start_send(&self, slot: usize) {
        let entries = self.entries.borrow();
        let Some(Entry::Conn(c)) = entries.get(slot) else {
            return;
        };
        let c = c.clone();
        drop(entries);
        let mut i = c.inner.borrow_mut();
        if i.send != Send::Queued {
            return;
        }
        if i.tx.is_empty() {
            i.send = Send::Idle;
            return;
        }
        i.send = Send::InFlight;
        let e = opcode::Send::new(
            types::Fd(c.fd.as_raw_fd()),
            i.tx.as_ptr(),
            i.tx.len() as u32,
        )
        .flags(rustix::net::SendFlags::NOSIGNAL.bits() as i32)
        .build()
        .user_data(user_data(slot, OP_SEND));
        drop(i);
        self.push(e);
    }

    /// Takes in every completion there is.
    fn reap(&self) {
        let mut cqes = std::mem::take(&mut *self.cqes.borrow_mut());
        loop {
            {
                let mut u = self.uring.borrow_mut();
                cqes.extend(u.completion());
            }
            if cqes.is_empty() {
                break;
            }
            for cqe in cqes.drain(..) {
                self.complete(cqe);
            }
        }
        *self.cqes.borrow_mut() = cqes;
        if self.returned.replace(false) {
            self.bufs.publish();
            let starving = std::mem::take(&mut *self.starving.borrow_mut());
            for slot in starving {
                if let Some(Entry::Conn(c)) = self.entries.borrow().get(slot) {
                    let mut i = c.inner.borrow_mut();
                    if i.recv == Recv::Starving {
                        i.recv = Recv::Idle;
                        if let Some(w) = i.read_waker.take() {
                            w.wake();
                        }
                    }
                }
            }
        }
    }

    fn complete(&self, cqe: cqueue::Entry) {
        let ud = cqe.user_data();
        let op = ud & 0xff;
        if op == OP_IGNORE {
            return;
        }
        let slot = (ud >> 8) as usize;
        let entry = match self.entries.borrow().get(slot) {
            Some(Entry::Conn(c)) => Ok(c.clone()),
            Some(Entry::Accept(a)) => Err(a.clone()),
            None => return,
        };
        let res = cqe.result();
        let more = cqueue::more(cqe.flags());
        match (op, entry) {
            (OP_RECV, Ok(c)) => {
                let mut i = c.inner.borrow_mut();
                if res > 0 {
                    match cqueue::buffer_select(cqe.flags()) {
                        Some(bid) if !i.dropped => i.rx.push_back((bid, res as u32, 0)),
                        Some(bid) => self.give_back(bid),
                        None => {}
                    }
                } else if res == 0 {
                    i.rx_end.get_or_insert(0);
                } else if res == -rustix::io::Errno::NOBUFS.raw_os_error() {
                    if !more && i.recv == Recv::Armed && !i.dropped {
                        i.recv = Recv::Starving;
                        self.starving.borrow_mut().push(slot);
                    }
                } else if res != -rustix::io::Errno::CANCELED.raw_os_error() {
                    i.rx_end.get_or_insert(res);
                }
                if !more && i.recv != Recv::Starving {
                    i.recv = Recv::Idle;
                }
                if i.recv == Recv::Armed && i.rx.len() >= MAX_HELD {
                    i.recv = Recv::Cancelling;
                    drop(i);
                    self.push(
                        opcode::AsyncCancel::new(user_data(slot, OP_RECV))
                            .build()
                            .user_data(user_data(slot, OP_IGNORE)),
                    );
                    i = c.inner.borrow_mut();
                }
                if let Some(w) = i.read_waker.take() {
                    w.wake();
                }
                drop(i);
                self.maybe_finish(slot, &c);
            }
            (OP_SEND, Ok(c)) => {
                let mut i = c.inner.borrow_mut();
                i.send = Send::Idle;
                if res >= 0 {
                    let n = (res as usize).min(i.tx.len());
                    i.tx.drain(..n);
                    if !i.tx.is_empty() {
                        // The rest of a partial send, at once.
                        i.send = Send::Queued;
                        drop(i);
                        self.start_send(slot);
                        i = c.inner.borrow_mut();
                    } else {
                        if i.shut {
                            let _ = rustix::net::shutdown(&c.fd, rustix::net::Shutdown::Write);
                        }
                        self.spare_tx(std::mem::take(&mut i.tx));
                    }
                } else {
                    i.tx_err = Some(res);
                    i.tx.clear();
                    self.spare_tx(std::mem::take(&mut i.tx));
                }
                if let Some(w) = i.write_waker.take() {
                    w.wake();
                }
                drop(i);
                self.maybe_finish(slot, &c);
            }
            (OP_POLL, Ok(c)) => {
                let mut i = c.inner.borrow_mut();
                i.polling = false;
                // Readable, hung up or failed: either way the reader's
                // `recv` has something to say.
                i.readable = res > 0;
                if let Some(w) = i.read_waker.take() {
                    w.wake();
                }
                drop(i);
                self.maybe_finish(slot, &c);
            }
            (OP_ACCEPT, Err(a)) => {
                if res >= 0 {
                    // SAFETY: a new descriptor the kernel just made for us.
                    let fd = unsafe { OwnedFd::from_raw_fd(res) };
                    a.queue.borrow_mut().push_back(Ok(fd));
                } else if res != -rustix::io::Errno::CANCELED.raw_os_error() {
                    a.queue
                        .borrow_mut()
                        .push_back(Err(io::Error::from_raw_os_error(-res)));
                }
                if !more {
                    a.armed.set(Recv::Idle);
                }
                if let Some(w) = a.waker.borrow_mut().take() {
                    w.wake();
                }
            }
            _ => {}
        }
    }

    /// A send buffer for a connection that has bytes to send.
    fn take_tx(&self) -> Vec<u8> {
        self.tx_spare
            .borrow_mut()
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(TX_CAP))
    }

    /// Keeps an emptied send buffer for the next connection that needs
    /// one (up to [`TX_SPARE`]).
    fn spare_tx(&self, buf: Vec<u8>) {
        let mut spare = self.tx_spare.borrow_mut();
        if buf.capacity() >= TX_CAP && spare.len() < TX_SPARE {
            spare.push(buf);
        }
    }

    fn give_back(&self, bid: u16) {
        self.bufs.put(bid);
        self.returned.set(true);
    }

    /// Closes a dropped connection's socket once no operation refers to
    /// it: its slot goes, and with the last reference its fd.
    fn maybe_finish(&self, slot: usize, c: &Rc<ConnState>) {
        let i = c.inner.borrow();
        if i.dropped
            && matches!(i.recv, Recv::Idle | Recv::Starving)
            && !i.polling
            && i.send == Send::Idle
            && (i.tx.is_empty() || i.tx_err.is_some())
        {
            drop(i);
            self.entries.borrow_mut().try_remove(slot);
        }
    }

    fn arm_recv(&self, slot: usize, fd: RawFd) {
        self.push(
            opcode::RecvMulti::new(types::Fd(fd), BGID)
                .build()
                .user_data(user_data(slot, OP_RECV)),
        );
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Nothing may still write into the buffers (or read from a send
        // buffer) once they are freed: cancel every operation now,
        // synchronously, before the fields drop.
        let u = self.uring.get_mut();
        let _ = u
            .submitter()
            .register_sync_cancel(None, types::CancelBuilder::any());
    }
}

mod accept;
mod bufs;
mod tcp;
#[cfg(test)]
mod tests;

pub(crate) use accept::Acceptor;
#[cfg(test)]
use bufs::BUF_SIZE;
use bufs::{BufRing, BGID, BUFS};
pub(crate) use tcp::UringTcp;
