//! One attempt's helpers for [`super::forward`]: a clean pooled
//! connection, what a failed connect costs and how it is logged, the
//! endpoint's circuit verdict on an attempt, the endpoint a retry goes
//! to (within the attempts, the deadline and the retry budget), the
//! endpoint's response time once a head came, and the connection back to
//! the pool once its response was read.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::balance::breaker::Admit;
use crate::balance::endpoint::{EndpointState, Permit};
use crate::snapshot::ServiceRt;
use crate::transport::stream::Stream;
use crate::worker::{Bufs, Worker};

/// An idle pooled connection to `ep` that is still clean. The request's
/// start stands in for the clock: an idle connection that expired
/// microseconds ago is still fine to use. One that got stray bytes or a
/// close since its last response is dropped: after a zero-length body,
/// where stray bytes would come right after the head, the socket itself
/// is asked; otherwise the runtime's readiness is, with no syscall. (After
/// a 204, a 304 or a HEAD the connection was not pooled at all: see
/// [`crate::worker::pool`].)
#[inline]
pub(super) fn take_pooled(worker: &Worker, ep: &EndpointState, started: Instant) -> Option<Stream> {
    loop {
        let (s, recheck) = worker.pool.borrow_mut().take(ep.id, started)?;
        let quiet = if recheck { s.quiet_now() } else { s.quiet() };
        if quiet {
            return Some(s);
        }
    }
}

/// Records that a response head came from `ep` for a request sent at
/// `sent_at`: its response time, and its latency average when the
/// service's balancer reads it. When it came, and the microseconds it
/// took.
#[inline]
pub(super) fn head_came(
    service: &ServiceRt,
    ep: &EndpointState,
    sent_at: Instant,
) -> (Instant, u64) {
    let head_at = Instant::now();
    let upstream_us = head_at.duration_since(sent_at).as_micros() as u64;
    ep.response_time.observe(upstream_us);
    if service.balancer.reads_latency() {
        ep.ewma.observe(epoch_us(head_at), upstream_us as f64);
    }
    (head_at, upstream_us)
}

/// Microseconds from a process-wide origin to `now`.
fn epoch_us(now: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    now.saturating_duration_since(*EPOCH.get_or_init(Instant::now))
        .as_micros() as u64
}

/// Puts `up` back into the worker's pool once its response (head in
/// `bufs`, came at `head_at`, `body` bytes of body) was read to its end,
/// when it is clean: the upstream did not say it closes, nothing came past
/// the response, and it is a connection, not an HTTP/2 stream. Kept for
/// the service's idle timeout from the head.
#[inline]
pub(super) fn pool_back(
    worker: &Worker,
    service: &ServiceRt,
    index: usize,
    up: Stream,
    bufs: &Bufs,
    head_at: Instant,
    body: u64,
) {
    if bufs.res_framing.close || !bufs.upb.is_empty() || !up.poolable() {
        return;
    }
    let expires = head_at + service.timeouts.idle;
    let ep = &service.endpoints[index];
    // Not after a 204, 304 or HEAD (see the pool's rule).
    let framing = bufs.res_framing.body;
    worker
        .pool
        .borrow_mut()
        .put(ep, up, expires, ep.max, framing, body);
}

/// A failed connect that cost the endpoint nothing (refused, or no route
/// to it): its retry elsewhere is not paid from the retry budget.
pub(super) fn cost_nothing(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::HostUnreachable
            | std::io::ErrorKind::NetworkUnreachable
    )
}

/// Time until `total`, the request's deadline for a response head.
pub(super) fn time_left(total: Instant) -> Duration {
    total.saturating_duration_since(Instant::now())
}

/// How an attempt was let through its endpoint's circuit, until its
/// outcome is recorded. A half-open probe whose request ends without a
/// verdict on the endpoint (the client went away) gives its slot back on
/// drop, so the circuit cannot stay half-open with every probe taken.
pub(super) struct Verdict<'a> {
    admit: Admit,
    pending: Option<&'a EndpointState>,
}

impl<'a> Verdict<'a> {
    pub(super) fn admit(ep: &'a EndpointState) -> Self {
        let admit = ep.breaker.admit_now().unwrap_or(Admit::Closed);
        Verdict {
            admit,
            pending: (admit == Admit::Probe).then_some(ep),
        }
    }

    /// Counts a failed attempt against the endpoint's circuit.
    pub(super) fn failed(&mut self, ep: &EndpointState) {
        self.pending = None;
        let now = crate::clock::mono_ns(Instant::now());
        if ep.breaker.record(self.admit, false, now) {
            tracing::warn!(service = %ep.service, endpoint = %ep.name, "circuit opened: endpoint out of rotation");
        }
    }

    pub(super) fn succeeded(&mut self, ep: &EndpointState) {
        self.pending = None;
        ep.breaker.succeeded(self.admit);
    }

    /// Counts a failure found after the response head was counted a
    /// success (a malformed body start): as an ordinary failure, since a
    /// probe's verdict was given with the head.
    #[cold]
    pub(super) fn failed_after_success(&mut self, ep: &EndpointState) {
        self.admit = Admit::Closed;
        self.failed(ep);
    }
}

impl Drop for Verdict<'_> {
    fn drop(&mut self) {
        if let Some(ep) = self.pending {
            ep.breaker.release_probe();
        }
    }
}

/// The endpoint `i` of `service`, and its admission through its circuit.
pub(super) fn switch_to(service: &ServiceRt, i: usize) -> (&EndpointState, Verdict<'_>) {
    let ep: &EndpointState = &service.endpoints[i];
    ep.requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (ep, Verdict::admit(ep))
}

/// Counts a failed connect to `ep`: takes the endpoint out of rotation
/// for a while, and logs it (at most once per endpoint per
/// [`crate::balance::eject::LOG_EVERY`], with how many failed since the last line).
#[cold]
pub(super) fn connect_failed(service: &ServiceRt, ep: &EndpointState, e: &std::io::Error) {
    ep.connect_errors
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let f = ep
        .eject
        .connect_failed(crate::clock::mono_ns(Instant::now()));
    if let Some(failures) = f.log {
        match f.ejected_for {
            Some(d) => tracing::warn!(
                service = %service.name, endpoint = %ep.name, error = %e, failures,
                "upstream connect failed; out of rotation for {d:?}"
            ),
            None => tracing::warn!(
                service = %service.name, endpoint = %ep.name, error = %e, failures,
                "upstream connect failed"
            ),
        }
    }
}

/// Another endpoint for a failed attempt, with its in-flight slot: when the
/// service allows one more attempt, an endpoint not tried yet is in
/// rotation, and the retry budget has one (unless the retry is `free`:
/// the failed attempt cost its endpoint nothing).
pub(super) fn retry_endpoint<'s>(
    service: &'s ServiceRt,
    failed: usize,
    tried: &mut u64,
    tries: &mut u32,
    total: Instant,
    free: bool,
) -> Option<(usize, Permit<'s>)> {
    if *tries >= service.retries.settings.attempts
        || service.endpoints.len() < 2
        || time_left(total).is_zero()
    {
        return None;
    }
    let i = crate::balance::balancer::Balancer::pick_other(&service.endpoints, failed, *tried)?;
    let permit = service.endpoints[i].try_acquire()?;
    if !free && !service.retries.withdraw() {
        tracing::debug!(service = %service.name, "retry budget spent");
        return None;
    }
    *tried |= 1 << i.min(63);
    *tries += 1;
    service.endpoints[i]
        .retries
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some((i, permit))
}
