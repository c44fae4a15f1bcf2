//! Per-endpoint state shared by every worker and kept across reloads:
//! the in-flight limit, latency average, counters, health and circuit.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

#[derive(Debug)]
pub struct EndpointState {
    /// Stable slot of this endpoint in every worker's connection pool.
    pub id: usize,
    /// As written in the config; used in logs and metrics labels.
    pub name: String,
    /// The service it belongs to (an endpoint's state is kept per
    /// service), named in log lines about it.
    pub service: Arc<str>,
    pub addr: SocketAddr,
    pub weight: u32,
    /// `max_connections_per_endpoint`: in-flight requests allowed at once.
    pub max: usize,
    /// Requests in flight now, at most `max` ([`Permit`]s held).
    in_flight: AtomicUsize,
    /// Requests waiting in [`EndpointState::acquire`] for a slot.
    waiting: AtomicUsize,
    /// Wakes one waiter when a permit is dropped while some wait.
    freed: Notify,
    pub ewma: Ewma,
    /// Idle pooled connections, summed over workers.
    pub idle: AtomicI64,
    pub connect_errors: AtomicU64,
    pub requests: AtomicU64,
    /// Attempts it got as a retry after another endpoint failed.
    pub retries: AtomicU64,
    /// Time from the request sent to the response head, per response
    /// (`sluicegate_upstream_response_seconds`).
    pub response_time: crate::observe::metrics::Histogram,
    /// Set by the active health checks; balancers skip unhealthy endpoints.
    pub healthy: std::sync::atomic::AtomicBool,
    /// Consecutive passed and failed health checks.
    pub health_oks: std::sync::atomic::AtomicU32,
    pub health_fails: std::sync::atomic::AtomicU32,
    /// Passive outlier detection from the requests it serves.
    pub breaker: crate::balance::breaker::Breaker,
    /// Out of rotation for a while after a failed connect.
    pub eject: crate::balance::eject::Ejection,
}

impl EndpointState {
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether balancers may pick it: healthy, not ejected after a failed
    /// connect, and its circuit not open (the clock is read only when an
    /// ejection or a circuit has begun).
    #[inline]
    pub fn in_rotation(&self) -> bool {
        self.is_healthy() && self.eject.available_now() && self.breaker.available_now()
    }

    /// Whether it may be picked when every endpoint is out of rotation
    /// and some only for failed connects: healthy and its circuit not
    /// open, ejected or not.
    pub fn usable_when_all_ejected(&self) -> bool {
        self.is_healthy() && self.breaker.available_now()
    }

    pub fn new(id: usize, name: String, addr: SocketAddr, weight: u32, max: usize) -> Self {
        EndpointState {
            id,
            name,
            service: Arc::from(""),
            addr,
            weight: weight.max(1),
            max,
            in_flight: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            freed: Notify::new(),
            ewma: Ewma::default(),
            idle: AtomicI64::new(0),
            connect_errors: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            response_time: Default::default(),
            healthy: std::sync::atomic::AtomicBool::new(true),
            health_oks: std::sync::atomic::AtomicU32::new(0),
            health_fails: std::sync::atomic::AtomicU32::new(0),
            breaker: crate::balance::breaker::Breaker::default(),
            eject: crate::balance::eject::Ejection::default(),
        }
    }

    /// The same, of service `service`.
    pub fn of_service(mut self, service: Arc<str>) -> Self {
        self.service = service;
        self
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Cost for power-of-two-choices: latency average times load.
    pub fn p2c_cost(&self) -> f64 {
        (self.ewma.get() + 1.0) * (self.in_flight() as f64 + 1.0) / f64::from(self.weight)
    }

    /// An in-flight slot if one is free now.
    ///
    /// A counter and a compare-and-swap: the common case costs one atomic
    /// operation here and one when the permit drops. (A `tokio` semaphore
    /// permit took an `Arc` clone and drop and the semaphore's lock on
    /// release, five atomic operations a request.)
    pub fn try_acquire(&self) -> Option<Permit<'_>> {
        let mut n = self.in_flight.load(Ordering::SeqCst);
        while n < self.max {
            match self
                .in_flight
                .compare_exchange_weak(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Some(Permit { ep: self }),
                Err(now) => n = now,
            }
        }
        None
    }

    /// Waits up to `wait` for an in-flight slot.
    pub async fn acquire(&self, wait: Duration) -> Option<Permit<'_>> {
        if let Some(p) = self.try_acquire() {
            return Some(p);
        }
        // Counted as waiting before looking again, so a permit dropped
        // after that look sees the count and wakes a waiter (both sides
        // are SeqCst: either the dropper sees the waiter or the waiter's
        // look sees the freed slot).
        self.waiting.fetch_add(1, Ordering::SeqCst);
        // Uncounted however the wait ends, also when the future is dropped.
        let _waiting = Waiting(&self.waiting);
        let got = tokio::time::timeout(wait, async {
            loop {
                let notified = self.freed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if let Some(p) = self.try_acquire() {
                    return p;
                }
                notified.await;
            }
        })
        .await;
        got.ok()
    }

    pub fn idle_changed(&self, delta: i64) {
        self.idle.fetch_add(delta, Ordering::Relaxed);
    }
}

/// One waiter counted in [`EndpointState::acquire`] until dropped.
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An in-flight slot on an endpoint, given back when dropped.
#[derive(Debug)]
pub struct Permit<'a> {
    ep: &'a EndpointState,
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.ep.release();
    }
}

impl Permit<'_> {
    /// The same slot, held by something that outlives the borrow of its
    /// endpoint (a tunnel's own task): `ep` must be the permit's endpoint.
    pub fn into_owned(self, ep: &Arc<EndpointState>) -> OwnedPermit {
        assert!(std::ptr::eq(self.ep, &**ep), "a permit of another endpoint");
        std::mem::forget(self);
        OwnedPermit(ep.clone())
    }
}

/// An in-flight slot that keeps its endpoint alive, given back when
/// dropped.
#[derive(Debug)]
pub struct OwnedPermit(Arc<EndpointState>);

impl OwnedPermit {
    pub fn endpoint(&self) -> &Arc<EndpointState> {
        &self.0
    }
}

impl Drop for OwnedPermit {
    fn drop(&mut self) {
        self.0.release();
    }
}

impl EndpointState {
    /// Gives an in-flight slot back.
    fn release(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            // A waiter woken after its timeout passes the wake-up on.
            self.freed.notify_one();
        }
    }
}

/// Exponentially weighted moving average of latency in microseconds,
/// decaying with time so an endpoint that recovers is tried again.
#[derive(Debug)]
pub struct Ewma {
    /// f64 bits of the average.
    value: AtomicU64,
    /// Microseconds since process start of the last update.
    stamp: AtomicU64,
}

/// Decay time constant.
const EWMA_TAU_US: f64 = 10_000_000.0;

impl Default for Ewma {
    fn default() -> Self {
        Ewma {
            value: AtomicU64::new(0f64.to_bits()),
            stamp: AtomicU64::new(0),
        }
    }
}

impl Ewma {
    pub fn get(&self) -> f64 {
        f64::from_bits(self.value.load(Ordering::Relaxed))
    }

    /// Records one observation; races between workers lose an update at
    /// worst, which an average can afford.
    pub fn observe(&self, now_us: u64, sample_us: f64) {
        let last = self.stamp.swap(now_us, Ordering::Relaxed);
        let old = self.get();
        let elapsed = now_us.saturating_sub(last) as f64;
        let w = (-elapsed / EWMA_TAU_US).exp();
        let new = if old == 0.0 {
            sample_us
        } else {
            old * w + sample_us * (1.0 - w)
        };
        self.value.store(new.to_bits(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `f` once and drops it, whatever it returned.
    async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> bool {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::pin::Pin::new(&mut f).poll(cx).is_ready())
        })
        .await
    }

    fn ep(max: usize) -> EndpointState {
        EndpointState::new(0, "e".into(), "127.0.0.1:1".parse().unwrap(), 1, max)
    }

    #[test]
    fn permits_count_and_limit() {
        let e = ep(2);
        let a = e.try_acquire().unwrap();
        let b = e.try_acquire().unwrap();
        assert_eq!(e.in_flight(), 2);
        assert!(e.try_acquire().is_none());
        drop(a);
        assert_eq!(e.in_flight(), 1);
        let _c = e.try_acquire().unwrap();
        drop(b);
        assert_eq!(e.in_flight(), 1);
    }

    #[test]
    fn an_owned_permit_holds_the_slot_until_dropped() {
        let e = Arc::new(ep(1));
        let owned = e.try_acquire().unwrap().into_owned(&e);
        assert_eq!(e.in_flight(), 1);
        assert!(e.try_acquire().is_none());
        assert_eq!(owned.endpoint().name, "e");
        drop(owned);
        assert_eq!(e.in_flight(), 0);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_waiter_gets_a_freed_slot_or_gives_up() {
        let e = ep(1);
        let held = e.try_acquire().unwrap();
        // Nothing is freed: the wait ends empty at its timeout.
        assert!(e.acquire(Duration::from_millis(50)).await.is_none());
        assert_eq!(e.waiting.load(Ordering::SeqCst), 0);
        // Freed while waiting: the waiter gets it.
        let wait = e.acquire(Duration::from_secs(5));
        let free = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            drop(held);
        };
        let (got, ()) = tokio::join!(wait, free);
        assert!(got.is_some());
        assert_eq!(e.in_flight(), 1);
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn each_freed_slot_wakes_one_of_several_waiters() {
        let e = ep(2);
        let a = e.try_acquire().unwrap();
        let b = e.try_acquire().unwrap();
        let w1 = e.acquire(Duration::from_secs(5));
        let w2 = e.acquire(Duration::from_secs(5));
        let w3 = e.acquire(Duration::from_millis(100));
        let free = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            drop(a);
            tokio::time::sleep(Duration::from_millis(10)).await;
            drop(b);
        };
        let (p1, p2, p3, ()) = tokio::join!(w1, w2, w3, free);
        // A wait given up before it ends (its future dropped) is uncounted too.
        {
            let dropped = std::pin::pin!(e.acquire(Duration::from_secs(5)));
            let _ = futures_poll_once(dropped).await;
        }
        assert_eq!(e.waiting.load(Ordering::SeqCst), 0);
        // Two slots were freed: two waiters got one, the third timed out.
        let got = [p1.is_some(), p2.is_some(), p3.is_some()];
        assert_eq!(got.iter().filter(|g| **g).count(), 2, "{got:?}");
        assert_eq!(e.in_flight(), 2);
        assert_eq!(e.waiting.load(Ordering::SeqCst), 0);
    }
}
