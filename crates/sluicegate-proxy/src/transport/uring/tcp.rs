//! A plain TCP connection on the worker's ring: reads out of the
//! buffers its multishot receive filled, writes into its send buffer
//! (sent at the end of the turn), readiness as `Stream` expects it, and a
//! drop that closes the socket only once no operation refers to it.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::rc::Rc;
use std::task::{Context, Poll};

use io_uring::{opcode, types};

use super::{
    user_data, ConnInner, ConnState, Entry, Recv, Ring, Send, OP_IGNORE, OP_POLL, OP_RECV,
};

/// A plain TCP connection on the worker's ring.
pub(crate) struct UringTcp {
    ring: Rc<Ring>,
    pub(super) state: Rc<ConnState>,
    slot: usize,
}

impl std::fmt::Debug for UringTcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringTcp")
            .field("fd", &self.state.fd.as_raw_fd())
            .finish()
    }
}

impl UringTcp {
    /// Puts a connected socket on `ring`, its receive armed (submitted
    /// with the turn's other entries).
    pub(crate) fn new(ring: Rc<Ring>, fd: OwnedFd) -> UringTcp {
        let raw = fd.as_raw_fd();
        let state = Rc::new(ConnState {
            fd,
            inner: RefCell::new(ConnInner {
                rx: VecDeque::new(),
                rx_end: None,
                recv: Recv::Armed,
                read_waker: None,
                tx: Vec::new(),
                send: Send::Idle,
                tx_err: None,
                write_waker: None,
                shut: false,
                dropped: false,
                polling: false,
                readable: false,
            }),
        });
        let slot = ring.entries.borrow_mut().insert(Entry::Conn(state.clone()));
        ring.arm_recv(slot, raw);
        UringTcp { ring, state, slot }
    }

    /// Reads what has arrived: `Ok(0)` at the end, `WouldBlock` when
    /// nothing has yet.
    pub(crate) fn try_recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut i = self.state.inner.borrow_mut();
        let mut n = 0;
        while n < buf.len() {
            let Some((bid, len, off)) = i.rx.front_mut() else {
                break;
            };
            let from = &self.ring.bufs.buf(*bid)[*off as usize..*len as usize];
            let k = from.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&from[..k]);
            n += k;
            *off += k as u32;
            if *off == *len {
                let bid = *bid;
                i.rx.pop_front();
                self.ring.give_back(bid);
            }
        }
        if n > 0 {
            if self.ring.returned.get() {
                self.ring.bufs.publish();
            }
            return Ok(n);
        }
        match i.rx_end {
            Some(0) => Ok(0),
            Some(e) => Err(io::Error::from_raw_os_error(-e)),
            None if i.recv == Recv::Starving && !buf.is_empty() => {
                // No multishot receive is armed: the socket is ours to read.
                match rustix::net::recv(&self.state.fd, buf, rustix::net::RecvFlags::DONTWAIT) {
                    Ok((0, _)) => {
                        i.rx_end = Some(0);
                        Ok(0)
                    }
                    Ok((n, _)) => Ok(n),
                    Err(e) => {
                        if e == rustix::io::Errno::AGAIN {
                            // Drained: the next wait polls again.
                            i.readable = false;
                        }
                        Err(e.into())
                    }
                }
            }
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Takes what fits in the send buffer: the count, or `WouldBlock`
    /// when it is full. The bytes leave at the end of the turn.
    pub(crate) fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        let mut i = self.state.inner.borrow_mut();
        if let Some(e) = i.tx_err {
            return Err(io::Error::from_raw_os_error(-e));
        }
        if i.tx.capacity() == 0 {
            i.tx = self.ring.take_tx();
        }
        let room = i.tx.capacity() - i.tx.len();
        let n = room.min(bytes.len());
        if n == 0 {
            return if bytes.is_empty() {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        // Within capacity: the buffer does not move.
        i.tx.extend_from_slice(&bytes[..n]);
        if i.send == Send::Idle {
            i.send = Send::Queued;
            self.ring.pending.borrow_mut().push(self.slot);
        }
        Ok(n)
    }

    /// Ready when a read would not block.
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut i = self.state.inner.borrow_mut();
        // A starving connection is read by plain `recv` once its poll saw
        // it readable: arming another poll instead would complete at once,
        // again and again, with the reader never told.
        if !i.rx.is_empty() || i.rx_end.is_some() || (i.recv == Recv::Starving && i.readable) {
            return Poll::Ready(Ok(()));
        }
        if i.recv == Recv::Idle {
            i.recv = Recv::Armed;
            self.ring.arm_recv(self.slot, self.state.fd.as_raw_fd());
        } else if i.recv == Recv::Starving && !i.polling {
            i.polling = true;
            self.ring.push(
                opcode::PollAdd::new(
                    types::Fd(self.state.fd.as_raw_fd()),
                    (rustix::event::PollFlags::IN | rustix::event::PollFlags::RDHUP).bits() as u32,
                )
                .build()
                .user_data(user_data(self.slot, OP_POLL)),
            );
        }
        match &i.read_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => i.read_waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Ready when the send buffer has room (or the connection failed).
    pub(crate) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut i = self.state.inner.borrow_mut();
        if i.tx_err.is_some() || i.tx.capacity() == 0 || i.tx.len() < i.tx.capacity() {
            return Poll::Ready(Ok(()));
        }
        match &i.write_waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => i.write_waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Our side's FIN, after the bytes already taken.
    pub(crate) fn shutdown_write(&self) {
        let mut i = self.state.inner.borrow_mut();
        if i.tx.is_empty() {
            let _ = rustix::net::shutdown(&self.state.fd, rustix::net::Shutdown::Write);
        } else {
            i.shut = true;
        }
    }

    /// Nothing arrived since the last read (as far as the completions
    /// taken in so far tell).
    pub(crate) fn quiet(&self) -> bool {
        let i = self.state.inner.borrow();
        if i.recv == Recv::Starving {
            drop(i);
            return self.quiet_now();
        }
        i.rx.is_empty() && i.rx_end.is_none()
    }

    /// [`UringTcp::quiet`], asking the kernel too: what the socket holds
    /// and what completions it has posted.
    pub(crate) fn quiet_now(&self) -> bool {
        let mut probe = [0u8; 1];
        let r = rustix::net::recv(
            &self.state.fd,
            &mut probe,
            rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
        );
        self.ring.reap();
        let i = self.state.inner.borrow();
        matches!(r, Err(rustix::io::Errno::AGAIN)) && i.rx.is_empty() && i.rx_end.is_none()
    }
}

impl Drop for UringTcp {
    fn drop(&mut self) {
        let mut i = self.state.inner.borrow_mut();
        i.dropped = true;
        i.read_waker = None;
        i.write_waker = None;
        for (bid, _, _) in i.rx.drain(..) {
            self.ring.give_back(bid);
        }
        let recv = i.recv == Recv::Armed;
        if recv {
            i.recv = Recv::Cancelling;
        }
        let poll = i.polling;
        drop(i);
        if recv {
            self.ring.push(
                opcode::AsyncCancel::new(user_data(self.slot, OP_RECV))
                    .build()
                    .user_data(user_data(self.slot, OP_IGNORE)),
            );
        }
        if poll {
            self.ring.push(
                opcode::AsyncCancel::new(user_data(self.slot, OP_POLL))
                    .build()
                    .user_data(user_data(self.slot, OP_IGNORE)),
            );
        }
        self.ring.maybe_finish(self.slot, &self.state);
    }
}
