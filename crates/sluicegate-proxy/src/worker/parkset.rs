//! The data of the worker's park set ([`ParkSet`]): its parked
//! connections, one small slab entry each, with their keep-alive expiries
//! in a dense array beside the slab. The set's task is
//! [`crate::session::park::run`]; a connection goes in by
//! [`crate::session::start`]'s `park`.

use std::cell::{Cell, OnceCell, RefCell};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

use rustix::event::epoll;
use slab::Slab;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;

use crate::transport::listener::ListenerRt;

/// An `expiries` value for a vacant slab key.
pub(crate) const VACANT: u64 = u64::MAX;

/// One parked connection.
pub(crate) struct Parked {
    pub(crate) fd: OwnedFd,
    pub(crate) peer: SocketAddr,
    pub(crate) listener: Arc<ListenerRt>,
    /// When its last answer was written.
    pub(crate) end: Instant,
}

/// One worker's parked plain connections; see [`crate::session::park`].
/// Lives in the [`Worker`](crate::worker::Worker); its task is
/// [`run`](crate::session::park::run).
pub(crate) struct ParkSet {
    /// The set's own epoll instance, watched by tokio; set up by
    /// [`run`](crate::session::park::run).
    pub(crate) epoll: OnceCell<AsyncFd<OwnedFd>>,
    entries: RefCell<Slab<Parked>>,
    /// Each slab key's keep-alive expiry in milliseconds from `base`
    /// (rounded up), [`VACANT`] for a free key: a dense array, so the
    /// scan for expired entries reads 8 bytes per key.
    expiries: RefCell<Vec<u64>>,
    pub(crate) base: Instant,
    /// The earliest expiry in the set (or earlier), in `expiries` units.
    pub(crate) earliest: Cell<u64>,
    /// What the park task's timer is set to, in `expiries` units.
    pub(crate) armed: Cell<u64>,
    /// The park task's waker, to re-arm its timer for an earlier expiry.
    pub(crate) task: RefCell<Option<Waker>>,
    pub(crate) kicked: Cell<bool>,
    /// The park task is running: the set takes connections.
    pub(crate) running: Cell<bool>,
}

impl Default for ParkSet {
    fn default() -> Self {
        Self::new()
    }
}

impl ParkSet {
    pub(crate) fn new() -> ParkSet {
        ParkSet {
            epoll: OnceCell::new(),
            entries: RefCell::new(Slab::new()),
            expiries: RefCell::new(Vec::new()),
            base: Instant::now(),
            earliest: Cell::new(VACANT),
            armed: Cell::new(VACANT),
            task: RefCell::new(None),
            kicked: Cell::new(false),
            running: Cell::new(false),
        }
    }

    #[cfg(test)]
    /// Connections parked now.
    pub(crate) fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    /// `t` in `expiries` units, rounded up (an expiry never fires early).
    fn ms_up(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.base);
        let ms = d.as_millis() as u64;
        if Duration::from_millis(ms) < d {
            ms + 1
        } else {
            ms
        }
    }

    /// `t` in `expiries` units, rounded down.
    fn ms_down(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.base).as_millis() as u64
    }

    /// Puts `tcp` in the set. Gives it back if the set cannot take it.
    pub(crate) fn insert(
        &self,
        tcp: TcpStream,
        peer: SocketAddr,
        listener: Arc<ListenerRt>,
        end: Instant,
        expires: Instant,
    ) -> Result<(), ParkRefused> {
        let Some(ep) = self.epoll.get() else {
            return Err(ParkRefused::Tcp(tcp, listener));
        };
        let ep = ep.get_ref();
        // Out of tokio's reactor: its registration is freed.
        let fd: OwnedFd = match tcp.into_std() {
            Ok(s) => s.into(),
            Err(_) => return Err(ParkRefused::Closed),
        };
        let mut entries = self.entries.borrow_mut();
        let slot = entries.vacant_entry();
        let key = slot.key();
        let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP | epoll::EventFlags::ONESHOT;
        if epoll::add(ep, &fd, epoll::EventData::new_u64(key as u64), flags).is_err() {
            return match TcpStream::from_std(fd.into()) {
                Ok(tcp) => Err(ParkRefused::Tcp(tcp, listener)),
                Err(_) => Err(ParkRefused::Closed),
            };
        }
        slot.insert(Parked {
            fd,
            peer,
            listener,
            end,
        });
        let exp = self.ms_up(expires);
        let mut expiries = self.expiries.borrow_mut();
        if expiries.len() <= key {
            expiries.resize(key + 1, VACANT);
        }
        expiries[key] = exp;
        if exp < self.earliest.get() {
            self.earliest.set(exp);
        }
        if exp < self.armed.get() {
            self.kicked.set(true);
            if let Some(w) = &*self.task.borrow() {
                w.wake_by_ref();
            }
        }
        Ok(())
    }

    /// Takes entry `key` out of the set, if it is there.
    pub(crate) fn take(&self, key: usize) -> Option<Parked> {
        let p = self.entries.borrow_mut().try_remove(key)?;
        self.expiries.borrow_mut()[key] = VACANT;
        Some(p)
    }

    /// Takes out every entry that expired by `now` (they close as they
    /// drop) and returns how many; the earliest expiry left is noted.
    pub(crate) fn expire(&self, now: Instant) -> usize {
        let now = self.ms_down(now);
        let mut next = VACANT;
        let mut gone = 0;
        let mut entries = self.entries.borrow_mut();
        for (k, exp) in self.expiries.borrow_mut().iter_mut().enumerate() {
            if *exp <= now {
                *exp = VACANT;
                entries.remove(k);
                gone += 1;
            } else if *exp < next {
                next = *exp;
            }
        }
        self.earliest.set(next);
        gone
    }

    /// Takes out every entry (they close as they drop); how many.
    pub(crate) fn clear(&self) -> usize {
        let mut entries = self.entries.borrow_mut();
        let n = entries.len();
        entries.clear();
        self.expiries.borrow_mut().clear();
        self.earliest.set(VACANT);
        n
    }
}

/// Why the set did not take a connection.
pub(crate) enum ParkRefused {
    /// It can park in a task instead.
    Tcp(TcpStream, Arc<ListenerRt>),
    /// The socket was lost on the way (tokio failed to release it).
    Closed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parked_connection_is_a_small_entry() {
        // What an idle plain keep-alive connection costs in user space,
        // beside its 8-byte expiry.
        assert!(size_of::<Parked>() <= 64, "{}", size_of::<Parked>());
    }
}
