//! The attempt loop's state and choices, for [`super::forward`]: what a
//! request's sends share ([`Call`]), the endpoint tried now with its
//! in-flight slot and circuit verdict ([`Attempts`]), and after each
//! attempt whether the request goes again ([`Attempts::again_after_head`],
//! [`Attempts::again_after_failure`]: the same endpoint when the upstream
//! took nothing, another within the retries, the deadline and the retry
//! budget). Also one attempt's helpers: a clean pooled connection, what a
//! failed connect costs and how it is logged, the `100 Continue` a client
//! waits for, the endpoint's response time once a head came, and the
//! connection back to the pool once its response was read.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::balance::breaker::Admit;
use crate::balance::endpoint::{EndpointState, Permit};
use crate::proto::codec::BodyKind;
use crate::snapshot::{ServiceRt, Snapshot};
use crate::transport::io::write_all_by;
use crate::transport::stream::Stream;
use crate::upstream::body::client_write_failed;
use crate::upstream::failure::{AttemptError, Side};
use crate::upstream::head::{head_grpc_status, HeadError};
use crate::upstream::plan::{Picked, Plan};
use crate::worker::{Bufs, Downstream, Worker};

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

/// Times a request whose HTTP/2 stream an upstream refused unprocessed
/// (its connection going away) is sent again, on another stream. Each
/// refusal retires its connection, so every try goes on another one; an
/// upstream that ends connections after a few requests (nginx's
/// `keepalive_requests`) refuses a quarter of the streams in flight when
/// many are, and with only 3 tries about one request in a thousand used
/// them all up. Bounded all the same: the request's own time limit holds.
const REFUSED_RETRIES: u32 = 8;

/// The attempt loop's state: the endpoint tried now, its in-flight slot
/// and circuit verdict, what was tried, and the request's deadline for a
/// response head.
pub(crate) struct Attempts<'s> {
    pub(super) service: &'s ServiceRt,
    pub(super) index: usize,
    pub(super) ep: &'s EndpointState,
    pub(super) permit: Permit<'s>,
    pub(super) admit: Verdict<'s>,
    pub(super) tried: u64,
    pub(super) tries: u32,
    /// Sends on this endpoint after a `NotTaken` (0 for the first).
    pub(super) again: u32,
    pub(super) total: Instant,
}

impl<'s> Attempts<'s> {
    /// Moves to another endpoint for a failed attempt when the service's
    /// retries allow one (`free`: the failure cost the endpoint nothing,
    /// so the retry is not paid from the budget).
    fn elsewhere(&mut self, free: bool) -> bool {
        let next = retry_endpoint(
            self.service,
            self.index,
            &mut self.tried,
            &mut self.tries,
            self.total,
            free,
        );
        let Some((i, permit)) = next else {
            return false;
        };
        (self.index, self.permit, self.again) = (i, permit, 0);
        (self.ep, self.admit) = switch_to(self.service, i);
        true
    }

    /// The endpoint that answered (its place in the service) and its
    /// in-flight slot, held until the response is read.
    pub(super) fn answered(self) -> (usize, &'s EndpointState, Permit<'s>) {
        (self.index, self.ep, self.permit)
    }
}

impl<'s> Attempts<'s> {
    /// The first attempt, on the endpoint picked, with its slot. (Taking
    /// the slot is left to the caller: at once when one is free, without
    /// a future of its own on that path, else by waiting up to
    /// `picked.wait`.)
    #[inline]
    pub(super) fn first(service: &'s ServiceRt, picked: Picked<'s>, permit: Permit<'s>) -> Self {
        let ep = picked.ep;
        ep.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        service.retries.deposit();
        Attempts {
            service,
            index: picked.index,
            ep,
            permit,
            admit: Verdict::admit(ep),
            tried: 1 << picked.index.min(63),
            tries: 1,
            again: 0,
            total: picked.total,
        }
    }
}

/// What a request's sends share: its plan, the facts of the call, and
/// what changes as it goes.
pub(super) struct Call<'a, 's> {
    pub(super) worker: &'a Worker,
    /// The client's connection; `None` for a request the gateway made
    /// itself (the internal client): no 1xx goes anywhere, no `100
    /// Continue` is owed, and its body is whole at hand, never streamed.
    pub(super) down: Option<&'a Downstream<'a>>,
    pub(super) snap: &'s Snapshot,
    pub(super) service: &'s ServiceRt,
    pub(super) started: Instant,
    pub(super) plan: Plan,
    pub(super) close_req: bool,
    pub(super) body: BodyKind,
    /// Body bytes sent so far.
    pub(super) bytes_in: u64,
    /// The upstream answered before the whole body was sent.
    pub(super) body_cut: bool,
}

impl Call<'_, '_> {
    /// A `100 Continue` is still owed for this request's body (to a
    /// client whose request asked for it; never to the gateway itself).
    #[inline]
    pub(super) fn owes_continue(&self) -> bool {
        !self.plan.sent_continue && self.body != BodyKind::None
    }
}

/// Writes the `100 Continue` the client waits for before it sends its
/// body, once per request.
#[cold]
pub(super) async fn send_continue(call: &mut Call<'_, '_>) -> Result<(), AttemptError> {
    call.plan.sent_continue = true;
    let Some(down) = call.down else {
        return Ok(());
    };
    let deadline = Instant::now() + call.snap.timeouts.client_write;
    let wrote = write_all_by(
        down.client,
        b"HTTP/1.1 100 Continue\r\n\r\n",
        call.worker.until(deadline),
    )
    .await;
    wrote.map_err(|e| {
        client_write_failed(call.worker, &e);
        AttemptError::Downstream
    })
}

impl<'s> Attempts<'s> {
    /// After a response head came (in `bufs.res`): records the circuit's
    /// verdict and the call's gRPC status, and says whether the request
    /// goes to another endpoint (an idempotent request still at hand whose
    /// status the service retries; a gRPC call's trailers-only status
    /// named in `retries.on`, whatever its method).
    pub(super) fn again_after_head(&mut self, call: &Call<'_, 's>, bufs: &mut Bufs) -> bool {
        let status = bufs.res.status;
        if self.ep.breaker.counts_status(status) {
            self.admit.failed(self.ep);
        } else {
            self.admit.succeeded(self.ep);
        }
        if bufs.grpc {
            bufs.grpc_status = head_grpc_status(bufs);
        }
        let r = &call.service.retries.settings;
        let plan = &call.plan;
        let at_hand = plan.replayable && plan.portable && !call.body_cut;
        let again = (plan.idempotent && at_hand && r.on_status.contains(&status))
            || (bufs.grpc && at_hand && bufs.grpc_status.is_some_and(|c| r.on_grpc.contains(&c)));
        if again && self.elsewhere(false) {
            tracing::debug!(endpoint = %self.ep.name, status, "retrying elsewhere");
            return true;
        }
        false
    }

    /// After an attempt failed: whether the request is sent again, on the
    /// same endpoint when nothing was processed (a failed connect goes
    /// elsewhere or nowhere), or on another one when the service's retries
    /// allow it for this failure and the request may go (anything after a
    /// failed connect, since nothing was sent; otherwise only an
    /// idempotent request still at hand). Counts the failure against the
    /// endpoint's circuit when the upstream's side caused it.
    #[cold]
    pub(super) fn again_after_failure(
        &mut self,
        call: &Call<'_, 's>,
        failed: &AttemptError,
    ) -> bool {
        let plan = &call.plan;
        let resend = !matches!(failed, AttemptError::Connect(_))
            && failed.unprocessed(plan.replayable)
            && self.again < REFUSED_RETRIES;
        if resend {
            self.again += 1;
            return true;
        }
        if failed.side() == Side::Upstream {
            self.admit.failed(self.ep);
        }
        let r = &call.service.retries.settings;
        let (allowed, free) = match failed {
            AttemptError::Connect(e) => (r.on_connect, cost_nothing(e)),
            AttemptError::Head { e, .. } => match e {
                HeadError::ClosedEarly => (r.on_reset, false),
                HeadError::Timeout => (r.on_timeout, false),
                HeadError::Invalid => (false, false),
            },
            _ => (false, false),
        };
        let may = match failed {
            AttemptError::Connect(_) => plan.portable,
            _ => plan.idempotent && plan.replayable && plan.portable && !call.body_cut,
        };
        if allowed && may && self.elsewhere(free) {
            return true;
        }
        if !matches!(failed, AttemptError::Downstream) {
            let status = failed.kind().status();
            tracing::debug!(endpoint = %self.ep.name, status, side = ?failed.side(), "attempt failed");
        }
        false
    }
}
