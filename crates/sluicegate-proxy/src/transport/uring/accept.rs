//! A listening socket on the worker's ring: one multishot accept, held
//! (cancelled) for an upgrade, the connections it had accepted served
//! first.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::rc::Rc;
use std::task::{Context, Poll};

use io_uring::{opcode, types};

use super::{user_data, AcceptState, Entry, Recv, Ring, OP_ACCEPT, OP_IGNORE};

/// A listening socket accepting by multishot accept on the worker's ring.
pub(crate) struct Acceptor {
    ring: Rc<Ring>,
    pub(super) state: Rc<AcceptState>,
    slot: usize,
}

impl Acceptor {
    /// `listener` must outlive the acceptor (the caller keeps it).
    pub(crate) fn new(ring: Rc<Ring>, listener: RawFd) -> Acceptor {
        let state = Rc::new(AcceptState {
            fd: listener,
            queue: RefCell::new(VecDeque::new()),
            armed: Cell::new(Recv::Idle),
            waker: RefCell::new(None),
            held: Cell::new(false),
        });
        let slot = ring
            .entries
            .borrow_mut()
            .insert(Entry::Accept(state.clone()));
        Acceptor { ring, state, slot }
    }

    /// The next accepted socket.
    pub(crate) fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<OwnedFd>> {
        if let Some(r) = self.state.queue.borrow_mut().pop_front() {
            return Poll::Ready(r);
        }
        self.state.held.set(false);
        if self.state.armed.get() == Recv::Idle {
            self.state.armed.set(Recv::Armed);
            self.ring.push(
                opcode::AcceptMulti::new(types::Fd(self.state.fd))
                    // Non-blocking, for the sockets handed to the epoll
                    // path (TLS, PROXY header).
                    .flags(
                        (rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK)
                            .bits() as i32,
                    )
                    .build()
                    .user_data(user_data(self.slot, OP_ACCEPT)),
            );
        }
        *self.state.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Stops accepting (connections wait in the listen queue) until the
    /// next [`Acceptor::poll_accept`]. The kernel may still have accepted
    /// some before the cancel took effect: [`Acceptor::poll_held`] hands
    /// them out, and the caller must serve them, since they are no longer
    /// in the listen queue for another process to take.
    pub(crate) fn hold(&self) {
        if self.state.held.replace(true) {
            return;
        }
        if self.state.armed.get() == Recv::Armed {
            self.state.armed.set(Recv::Cancelling);
            self.ring.push(
                opcode::AsyncCancel::new(user_data(self.slot, OP_ACCEPT))
                    .build()
                    .user_data(user_data(self.slot, OP_IGNORE)),
            );
            self.ring.turn();
        }
    }
}

impl Acceptor {
    /// After [`Acceptor::hold`]: the connections accepted before the hold
    /// took effect (taken in already, or posted by the kernel until the
    /// multishot accept's last completion), one at a time; `None` once
    /// that accept is over and none is left, so every other connection
    /// waits in the listen queue.
    pub(crate) fn poll_held(&self, cx: &mut Context<'_>) -> Poll<Option<io::Result<OwnedFd>>> {
        if let Some(r) = self.state.queue.borrow_mut().pop_front() {
            return Poll::Ready(Some(r));
        }
        if self.state.armed.get() == Recv::Idle {
            return Poll::Ready(None);
        }
        // The accept's last completion wakes us (taken in at a turn).
        *self.state.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.hold();
        // The accept's last completion may still come: the slot stays
        // until the ring goes (a listener per worker, no reuse).
        self.state.waker.borrow_mut().take();
    }
}
