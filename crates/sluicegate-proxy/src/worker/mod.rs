//! A worker thread's state shared by its connection tasks: the upstream
//! pool, the free list of per-request buffer sets, the access log buffer,
//! deadlines, the park set of idle connections, the busy poller and the
//! buffer tunnels relay through. Below session/ and upstream/, which take
//! it as a [`Worker`] and a [`Downstream`]; the plain data it holds is
//! here too: idle HTTP/1.1 upstream connections (`pool`), HTTP/2 upstream
//! connections (`h2conns`), a tunnel handed on after a `101` (`upgraded`),
//! parked client connections (`parkset`), the busy poller (`busypoll`),
//! the body copy a mirrored request feeds its mirror (`tee`) and the
//! long-lived streams a config change may revoke (`revoke`).

pub(crate) mod busypoll;
pub(crate) mod h2conns;
pub(crate) mod parkset;
pub(crate) mod pool;
pub(crate) mod revoke;
pub(crate) mod tee;
pub(crate) mod upgraded;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use crate::clock::deadline::{Deadlines, OwnSlot, Wait};
use crate::filters::Edits;
use crate::observe::accesslog::{self, Sink};
use crate::observe::trace::Ids;
use crate::proto::codec::{RequestFraming, ResponseFraming};
use crate::proto::compress::{Encoder, Encoding};
use crate::proto::head::{RequestHead, ResponseHead};
use crate::snapshot::Shared;
use crate::transport::io::RecvBuf;
use crate::transport::stream::Stream;
use crate::worker::busypoll::BusyPoll;
use crate::worker::h2conns::H2Pool;
use crate::worker::parkset::ParkSet;
use crate::worker::pool::Pool;
use crate::worker::upgraded::Upgraded;

/// Size a receive buffer grows to for an ordinary read (the request head
/// read first, a tunnel's reads).
pub(crate) const BUF_SIZE: usize = 16 * 1024;
/// Initial size of each buffer of a new set. Most requests and many
/// responses fit: a set that only ever sees those stays this small, and
/// one that sees more grows once (up to each read's limit) and keeps the
/// size while it is reused. So a burst of requests in flight at once
/// (each holds a set) leaves three pages per request behind in the
/// allocator, not twelve.
pub(crate) const FIRST_BUF_SIZE: usize = 4 * 1024;
/// Buffers larger than this are not kept on the free list.
const KEEP_BUF_MAX: usize = 128 * 1024;
/// Most free buffer sets a worker keeps (12 KiB each when new, 48 KiB once
/// grown by ordinary reads): as many as its requests in flight need, so a
/// busy worker does not free a set at the end of one request and allocate
/// and zero another for the next.
const FREE_LIST_MAX: usize = 2048;
/// Free sets kept however long they sit unused; above this, sets unused
/// for a whole tick are freed ([`Worker::trim_bufs`]).
const FREE_LIST_KEEP: usize = 32;

/// A worker thread's state, shared by its connection tasks.
pub struct Worker {
    pub shared: Arc<Shared>,
    pub pool: RefCell<Pool>,
    /// HTTP/2 connections to the endpoints of services that speak it.
    pub(crate) h2: RefCell<H2Pool>,
    pub log_buf: RefCell<Vec<u8>>,
    /// The sink the buffered lines belong to (the log in force when their
    /// requests ran, even if a reload changed it since).
    log_sink: RefCell<Option<Arc<Sink>>>,
    /// Deadlines of the waits on this worker's sockets, and its shutdown
    /// signal.
    pub deadlines: Deadlines,
    /// Connections this worker is serving now, parked ones included.
    pub active: Cell<usize>,
    /// Idle plain keep-alive connections, held without a task each.
    pub(crate) parked: ParkSet,
    /// Keeps the worker polling between requests when `busy_poll` is set.
    pub busy: BusyPoll,
    // Boxed on purpose: the sets move between the list and connections,
    // and a pointer moves cheaper than the struct.
    #[allow(clippy::vec_box)]
    free: RefCell<Vec<Box<Bufs>>>,
    /// The fewest sets the free list held since the last trim: that many
    /// sat unused all along (the list is used from its end).
    free_low: Cell<usize>,
    /// What tunnels read into and write on from at once, without an await
    /// in between ([`BUF_SIZE`] once the first tunnel carries bytes).
    pub(crate) relay_buf: RefCell<Vec<u8>>,
    /// Compressors set free by finished answers, with their output
    /// buffers, reset and taken again by the next ones
    /// ([`Worker::take_encoder`]).
    encoders: RefCell<Vec<(Encoder, Vec<u8>)>>,
    /// Request ids this worker makes: a random prefix of its own and a
    /// counter ([`crate::proto::request_id::RequestId::make`]).
    id_prefix: [u8; 16],
    id_next: Cell<u64>,
    /// The worker's pseudo-random numbers (fault injection's draws).
    pub(crate) rng: crate::filters::fault::Rng,
    /// Long-lived streams admitted by an auth filter, checked again when
    /// the config changes.
    pub(crate) revocations: revoke::Revocations,
    /// The worker itself, once shared ([`Worker::into_rc`]): what a task
    /// started from a request (a mirror's copy) holds.
    this: std::cell::OnceCell<std::rc::Weak<Worker>>,
}

/// What the upstream side uses of the client's connection: its stream,
/// its worker, its deadline slot, and what the forwarded headers say of
/// it. Borrowed from the session for one request, so that forwarding
/// never reaches back into the session.
#[derive(Clone, Copy)]
pub struct Downstream<'a> {
    pub worker: &'a Worker,
    pub client: &'a Stream,
    /// The connection's deadline slot (for the wait for a response head).
    pub slot: &'a OwnSlot<'a>,
    /// The connection's peer address as text.
    pub peer_ip: &'a str,
    /// The connection is TLS.
    pub https: bool,
}

/// Per-request scratch space, reused across requests and connections.
pub struct Bufs {
    /// Bytes from the client.
    pub inb: RecvBuf,
    /// Bytes from the upstream.
    pub upb: RecvBuf,
    /// Bytes being assembled for a write.
    pub out: Vec<u8>,
    /// The current request's head, as routing, filters, balancing and
    /// logging see it; how it is framed in HTTP/1.1 (`req_framing`) is
    /// for the request loop and forwarding.
    pub req: RequestHead,
    pub req_framing: RequestFraming,
    /// The upstream's response head, and its framing.
    pub res: ResponseHead,
    pub res_framing: ResponseFraming,
    /// Method and target of the current request, for the access log.
    pub log_line: Vec<u8>,
    /// The current request is HEAD: answers carry no body.
    pub is_head: bool,
    /// The current request is gRPC (`content-type: application/grpc...`):
    /// the gateway's own answers are gRPC statuses.
    pub grpc: bool,
    /// The client's `grpc-timeout`, when it sent one.
    pub grpc_timeout: Option<std::time::Duration>,
    /// The gRPC status the current gRPC call ended with, once known (from
    /// the answer's head, its trailers, or the gateway's own answer).
    pub grpc_status: Option<u8>,
    /// What the route's filters changed for the current request.
    pub edits: Edits,
    /// A tunnel the current request opened (a `101`), for the session to
    /// run in a task of its own; never set otherwise.
    pub(crate) upgraded: Option<Box<Upgraded>>,
    /// The current request's id, and its span when sampled.
    pub ids: Ids,
    /// The copy of the current request's body its mirror reads, when the
    /// route mirrors it; the body's relay feeds it.
    pub(crate) mirror: Option<tee::Tee>,
    /// The current request's cache fill, on a caching route's miss; the
    /// response's relay judges its head and feeds it the body.
    pub(crate) fill: Option<Box<crate::cache::fill::Fill>>,
    /// The path parameters of the current request's template route.
    pub params: crate::route::template::Params,
}

/// Compressors a worker keeps for reuse, at most.
const KEPT_ENCODERS: usize = 16;

impl Worker {
    /// A compressor of `coding` at `level` ready for a new stream, and an
    /// empty output buffer: one a finished answer set free, else a new
    /// one (gzip and zstd states are reused; brotli's cannot be reset
    /// without a new allocation, so a new one is made each time). `None`
    /// when the coder cannot be made (zstd out of memory).
    pub(crate) fn take_encoder(&self, coding: Encoding, level: i32) -> Option<(Encoder, Vec<u8>)> {
        let mut kept = self.encoders.borrow_mut();
        let found = kept
            .iter()
            .rposition(|(e, _)| e.coding() == coding && e.level() == level);
        match found {
            Some(i) => Some(kept.swap_remove(i)),
            None => Some((Encoder::new(coding, level).ok()?, Vec::new())),
        }
    }

    /// Gives a compressor back once its answer is done (reset now, so the
    /// next taker starts at once); dropped when the worker keeps enough,
    /// or for brotli.
    pub(crate) fn put_encoder(&self, (mut e, mut out): (Encoder, Vec<u8>)) {
        let mut kept = self.encoders.borrow_mut();
        if e.coding() == Encoding::Br || kept.len() >= KEPT_ENCODERS || e.reset().is_err() {
            return;
        }
        out.clear();
        // A buffer grown by a large body is not kept at that size.
        out.shrink_to(64 * 1024);
        kept.push((e, out));
    }

    pub fn new(shared: Arc<Shared>) -> Worker {
        Worker {
            shared,
            pool: RefCell::new(Pool::default()),
            h2: RefCell::new(H2Pool::default()),
            log_buf: RefCell::new(Vec::new()),
            log_sink: RefCell::new(None),
            deadlines: Deadlines::new(),
            active: Cell::new(0),
            parked: ParkSet::new(),
            busy: BusyPoll::default(),
            free: RefCell::new(Vec::new()),
            free_low: Cell::new(0),
            relay_buf: RefCell::new(Vec::new()),
            encoders: RefCell::new(Vec::new()),
            id_prefix: crate::proto::request_id::hex16(fastrand::u64(..)),
            id_next: Cell::new(0),
            rng: crate::filters::fault::Rng::new(fastrand::u64(..)),
            revocations: revoke::Revocations::default(),
            this: std::cell::OnceCell::new(),
        }
    }

    /// The worker, shared by its tasks (and reachable from itself:
    /// [`Worker::rc`]).
    pub fn into_rc(self) -> Rc<Worker> {
        let rc = Rc::new(self);
        let _ = rc.this.set(Rc::downgrade(&rc));
        rc
    }

    /// The worker as its tasks share it; `None` for one never shared.
    pub(crate) fn rc(&self) -> Option<Rc<Worker>> {
        self.this.get()?.upgrade()
    }

    /// Makes a new request id into `id`.
    #[inline]
    pub(crate) fn make_request_id(&self, id: &mut crate::proto::request_id::RequestId) {
        let n = self.id_next.get().wrapping_add(1);
        self.id_next.set(n);
        id.make(&self.id_prefix, n);
    }

    pub(crate) fn take_bufs(&self) -> Box<Bufs> {
        // Boxed so a connection task's future stays small and moves cheaply,
        // and kept boxed on the free list so reuse moves only a pointer.
        let mut free = self.free.borrow_mut();
        let set = free.pop();
        self.free_low.set(self.free_low.get().min(free.len()));
        set.unwrap_or_else(|| {
            Box::new(Bufs {
                inb: RecvBuf::new(FIRST_BUF_SIZE),
                upb: RecvBuf::new(FIRST_BUF_SIZE),
                out: Vec::with_capacity(FIRST_BUF_SIZE),
                req: RequestHead::default(),
                req_framing: RequestFraming::default(),
                res: ResponseHead::default(),
                res_framing: ResponseFraming::default(),
                log_line: Vec::new(),
                is_head: false,
                grpc: false,
                grpc_timeout: None,
                grpc_status: None,
                edits: Edits::default(),
                upgraded: None,
                ids: Ids::default(),
                mirror: None,
                fill: None,
                params: Default::default(),
            })
        })
    }

    /// Frees the buffer sets that sat unused since the last call, beyond
    /// [`FREE_LIST_KEEP`]; the worker calls it every tick. After a burst
    /// the list shrinks to what the load still uses within a tick or two.
    pub fn trim_bufs(&self) {
        let mut free = self.free.borrow_mut();
        let unused = self.free_low.get().min(free.len());
        let drop = unused.saturating_sub(FREE_LIST_KEEP);
        // The oldest sets sit at the front.
        free.drain(..drop);
        self.free_low.set(free.len());
    }

    #[cfg(test)]
    /// Free buffer sets held now.
    pub fn free_bufs(&self) -> usize {
        self.free.borrow().len()
    }

    pub(crate) fn give_bufs(&self, mut b: Box<Bufs>) {
        debug_assert!(b.upgraded.is_none(), "a tunnel left in a buffer set");
        let mut free = self.free.borrow_mut();
        if free.len() < FREE_LIST_MAX
            && b.out.capacity() <= KEEP_BUF_MAX
            && b.inb.capacity() <= KEEP_BUF_MAX
            && b.upb.capacity() <= KEEP_BUF_MAX
        {
            b.inb.clear();
            b.upb.clear();
            b.out.clear();
            // The rest of the edits is cleared before each use.
            b.edits.guards.clear();
            // A body copy left by a request cut short ends here.
            b.mirror = None;
            // And a cache fill (its flight's waiters wake).
            b.fill = None;
            free.push(b);
        }
    }

    /// Writes buffered access log lines to the sink they belong to.
    pub fn flush_log(&self) {
        let mut buf = self.log_buf.borrow_mut();
        if buf.is_empty() {
            return;
        }
        if let Some(sink) = &*self.log_sink.borrow() {
            sink.write(&buf);
        }
        buf.clear();
    }

    /// The log buffer, ready for a line bound for `sink`: lines buffered
    /// for another sink (before a reload) are written out first.
    pub(crate) fn log_buf_for(&self, sink: &Arc<Sink>) -> std::cell::RefMut<'_, Vec<u8>> {
        let same = matches!(&*self.log_sink.borrow(), Some(s) if Arc::ptr_eq(s, sink));
        if !same {
            self.flush_log();
            *self.log_sink.borrow_mut() = Some(sink.clone());
        }
        self.log_buf.borrow_mut()
    }

    /// Appends an access log line to the buffer for `sink`, and writes
    /// the buffer out once it is full enough.
    #[inline]
    pub(crate) fn append_log(&self, sink: &Arc<Sink>, entry: &accesslog::Entry<'_>) {
        let mut buf = self.log_buf_for(sink);
        accesslog::format(&mut buf, entry);
        if buf.len() >= accesslog::FLUSH_AT {
            sink.write(&buf);
            buf.clear();
        }
    }

    /// Appends the line of a request refused before routing (see
    /// [`accesslog::format_refused`]).
    #[cold]
    pub(crate) fn append_refused_log(
        &self,
        sink: &Arc<Sink>,
        entry: &accesslog::Entry<'_>,
        listener: std::net::SocketAddr,
    ) {
        let mut buf = self.log_buf_for(sink);
        accesslog::format_refused(&mut buf, entry, listener);
        if buf.len() >= accesslog::FLUSH_AT {
            sink.write(&buf);
            buf.clear();
        }
    }

    /// True once the worker started draining.
    pub fn shutting_down(&self) -> bool {
        self.deadlines.shutting_down()
    }

    /// A wait that gives up at `deadline`.
    pub fn until(&self, deadline: Instant) -> Wait<'_> {
        self.deadlines.at(deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker() -> Worker {
        let cfg = sluicegate_config::parse("listen: [\"127.0.0.1:9\"]\n").unwrap();
        Worker::new(Shared::new(&cfg).unwrap())
    }

    #[test]
    fn free_buffer_sets_follow_the_load_and_idle_ones_are_freed() {
        let w = worker();
        // 300 requests in flight at once: all 300 sets come back to the list.
        let sets: Vec<_> = (0..300).map(|_| w.take_bufs()).collect();
        for s in sets {
            w.give_bufs(s);
        }
        assert_eq!(w.free_bufs(), 300);
        // Every one was in use during this tick: none is freed.
        w.trim_bufs();
        assert_eq!(w.free_bufs(), 300);
        // Next tick 100 are in use at the peak: the 200 others sat unused,
        // and all but the reserve of them are freed.
        let sets: Vec<_> = (0..100).map(|_| w.take_bufs()).collect();
        for s in sets {
            w.give_bufs(s);
        }
        w.trim_bufs();
        assert_eq!(w.free_bufs(), 100 + FREE_LIST_KEEP);
        // An idle tick leaves the reserve only, however many ticks pass.
        w.trim_bufs();
        assert_eq!(w.free_bufs(), FREE_LIST_KEEP);
        w.trim_bufs();
        assert_eq!(w.free_bufs(), FREE_LIST_KEEP);
        // The list never holds more than its cap.
        let sets: Vec<_> = (0..FREE_LIST_MAX + 10).map(|_| w.take_bufs()).collect();
        for s in sets {
            w.give_bufs(s);
        }
        assert_eq!(w.free_bufs(), FREE_LIST_MAX);
    }
}
