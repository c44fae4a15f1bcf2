//! The workers' accept loops (epoll and io_uring), the connection limit
//! at accept, and the switch that holds and resumes them for an upgrade.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::session::start;
use crate::transport::listener::{self, ListenerRt};
use crate::transport::stream::Stream;
use crate::transport::uring::{Acceptor, Ring, UringTcp};
use crate::worker::Worker;

/// What the workers' accept loops do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Accept,
    /// Accept nothing for now (connections wait in the listen queues):
    /// an upgrade is taking this process's state.
    Hold,
    /// Draining for good.
    Stop,
}

/// Holds and resumes the gateway's accept loops (for an upgrade), from
/// any thread. Never undoes a shutdown.
#[derive(Debug, Clone)]
pub struct AcceptSwitch {
    phase: Arc<watch::Sender<Phase>>,
    holds: Arc<Holds>,
}

/// How long [`AcceptSwitch::hold`] waits for the accept loops to take the
/// hold in full.
pub(super) const HOLD_WAIT: Duration = Duration::from_secs(2);

impl AcceptSwitch {
    pub(super) fn new(phase: Arc<watch::Sender<Phase>>, holds: Arc<Holds>) -> AcceptSwitch {
        AcceptSwitch { phase, holds }
    }

    /// Stops accepting until [`AcceptSwitch::resume`]; connections queue
    /// on the listening sockets meanwhile, none is refused. Requests on
    /// connections already accepted go on. Returns once every accept loop
    /// takes nothing more from the kernel (on io_uring, its multishot
    /// accept is over and what it had accepted is being served), bounded
    /// by [`HOLD_WAIT`]: a connection made after the call waits in the
    /// queue, for the next process to take.
    pub fn hold(&self) {
        self.phase.send_if_modified(|p| {
            let was = *p == Phase::Accept;
            if was {
                *p = Phase::Hold;
            }
            was
        });
        if !self.holds.wait_held(HOLD_WAIT) {
            tracing::warn!(
                waited_ms = HOLD_WAIT.as_millis() as u64,
                "hold: some accept loop has not stopped accepting yet"
            );
        }
    }

    /// Accepting again after [`AcceptSwitch::hold`] (an upgrade failed).
    pub fn resume(&self) {
        self.phase.send_if_modified(|p| {
            let was = *p == Phase::Hold;
            if was {
                *p = Phase::Accept;
            }
            was
        });
    }
}

/// The accept loops that run, and how many of them have taken the hold in
/// full: what [`AcceptSwitch::hold`] waits on. Touched only when a loop
/// starts, ends, holds or resumes; never per connection.
#[derive(Debug, Default)]
pub(super) struct Holds {
    count: std::sync::Mutex<HoldCount>,
    changed: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct HoldCount {
    loops: usize,
    held: usize,
}

impl Holds {
    fn count(&self) -> std::sync::MutexGuard<'_, HoldCount> {
        self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `true` once every accept loop holds; `false` after `within`.
    fn wait_held(&self, within: Duration) -> bool {
        let count = self.count();
        let (count, _) = self
            .changed
            .wait_timeout_while(count, within, |c| c.held < c.loops)
            .unwrap_or_else(|e| e.into_inner());
        count.held >= count.loops
    }

    /// One accept loop counted in (before its worker starts, so that a
    /// hold waits for it too), counted out when the ticket goes.
    pub(super) fn ticket(self: &Arc<Holds>) -> HoldTicket {
        self.count().loops += 1;
        HoldTicket {
            holds: self.clone(),
            held: false,
        }
    }
}

/// An accept loop's place in [`Holds`].
pub(super) struct HoldTicket {
    holds: Arc<Holds>,
    held: bool,
}

impl HoldTicket {
    /// This loop takes nothing more from the kernel (or again does).
    fn set_held(&mut self, held: bool) {
        if self.held != held {
            self.held = held;
            let mut c = self.holds.count();
            if held {
                c.held += 1;
            } else {
                c.held -= 1;
            }
            drop(c);
            self.holds.changed.notify_all();
        }
    }
}

impl Drop for HoldTicket {
    fn drop(&mut self) {
        self.set_held(false);
        self.holds.count().loops -= 1;
        self.holds.changed.notify_all();
    }
}

/// Counts a new connection in, or refuses it (`false`) past
/// `limits.max_connections`; refreshes the listener's `settings` from the
/// current snapshot.
fn admit(worker: &Worker, key: SocketAddr, settings: &mut Arc<ListenerRt>) -> bool {
    let global = &worker.shared.global;
    let snap = worker.shared.snapshot.load();
    let max = snap.limits.max_connections;
    if let Some(l) = snap.listener(key) {
        if !Arc::ptr_eq(l, settings) {
            *settings = l.clone();
        }
    }
    drop(snap);
    if global.open_connections.fetch_add(1, Ordering::Relaxed) >= max {
        global.open_connections.fetch_sub(1, Ordering::Relaxed);
        global.refused.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    global.accepted.fetch_add(1, Ordering::Relaxed);
    true
}

/// The listener's settings as last seen in a snapshot: kept if a reload
/// drops its address (listen changes apply on restart).
fn settings_of(worker: &Worker, key: SocketAddr) -> Arc<ListenerRt> {
    worker
        .shared
        .snapshot
        .load()
        .listener(key)
        .cloned()
        .unwrap_or_else(|| listener::plain(key))
}

/// Waits out a hold, counted as held meanwhile: `false` when the gateway
/// stops instead.
async fn held(shutdown: &mut watch::Receiver<Phase>, ticket: &mut HoldTicket) -> bool {
    loop {
        let phase = *shutdown.borrow_and_update();
        ticket.set_held(phase == Phase::Hold);
        match phase {
            Phase::Accept => return true,
            Phase::Stop => return false,
            Phase::Hold => {
                if shutdown.changed().await.is_err() {
                    return false;
                }
            }
        }
    }
}

/// The accept loop of a worker on io_uring: one multishot accept. Every
/// connection is served on the ring: a plain listener's at once, one that
/// needs a TLS handshake over the ring first (the TLS layer's socket is
/// the ring's), one that needs a PROXY header after that header, read
/// through epoll by peeking (then the socket moves to the ring).
pub(super) async fn accept_loop_uring(
    worker: Rc<Worker>,
    listener: std::net::TcpListener,
    key: SocketAddr,
    mut shutdown: watch::Receiver<Phase>,
    mut ticket: HoldTicket,
    ring: Rc<Ring>,
) {
    use std::os::fd::AsRawFd;
    // Accepted sockets inherit it (an inherited listener may lack it).
    let _ = socket2::SockRef::from(&listener).set_tcp_nodelay(true);
    let acceptor = Acceptor::new(ring.clone(), listener.as_raw_fd());
    let mut settings = settings_of(&worker, key);
    // Held, and serving what the kernel accepted before the hold.
    let mut holding = false;
    loop {
        let accepted = if holding {
            // Those are ours alone: left unserved, they would be reset
            // when this process goes, while the new one takes the rest.
            match std::future::poll_fn(|cx| acceptor.poll_held(cx)).await {
                Some(a) => a,
                None => {
                    holding = false;
                    if !held(&mut shutdown, &mut ticket).await {
                        return;
                    }
                    continue;
                }
            }
        } else {
            tokio::select! {
                biased;
                r = shutdown.changed() => {
                    if r.is_err() { return; }
                    // Held: stop the multishot accept so that connections
                    // wait in the listen queue (for a new process, say).
                    acceptor.hold();
                    holding = true;
                    continue;
                }
                a = std::future::poll_fn(|cx| acceptor.poll_accept(cx)) => a,
            }
        };
        match accepted {
            Ok(fd) => {
                let peer = match socket2::SockRef::from(&fd).peer_addr() {
                    Ok(a) => match a.as_socket() {
                        Some(a) => a,
                        None => continue,
                    },
                    // Reset before we got to it.
                    Err(_) => continue,
                };
                if !admit(&worker, key, &mut settings) {
                    continue;
                }
                if settings.tls.is_none() && !settings.proxy_protocol {
                    let s = Stream::Uring(UringTcp::new(ring.clone(), fd));
                    start::accepted_plain(&worker, s, peer, settings.clone());
                } else {
                    start::accepted_ring(&worker, ring.clone(), fd, peer, settings.clone());
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

pub(super) async fn accept_loop(
    worker: Rc<Worker>,
    listener: TcpListener,
    key: SocketAddr,
    mut shutdown: watch::Receiver<Phase>,
    mut ticket: HoldTicket,
) {
    let mut settings = settings_of(&worker, key);
    loop {
        let accepted = tokio::select! {
            biased;
            r = shutdown.changed() => {
                if r.is_err() { return; }
                // Held: wait for the next change without accepting.
                if !held(&mut shutdown, &mut ticket).await { return; }
                continue;
            }
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                if !admit(&worker, key, &mut settings) {
                    drop(stream);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                start::accepted(&worker, stream, peer, settings.clone());
            }
            Err(e) => {
                // Out of file descriptors or similar: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
