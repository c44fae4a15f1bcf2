//! An app's counters for one scope ([`AppSlot`]) and where slot numbers
//! sit in the pool's chunks, which never move.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::apps::limit::LimitState;

/// One app's counters for one scope (the app's own plan, or one service's):
/// its limit state, and (for the app's own slot) its metrics.
#[derive(Debug, Default)]
pub struct AppSlot {
    pub limit: LimitState,
    /// Requests that authenticated as the app.
    pub requests: AtomicU64,
    /// Refused 403: a service, method or path the app may not use.
    pub forbidden: AtomicU64,
    /// Refused 429: over the app's plan.
    pub limited: AtomicU64,
    /// Answered 4xx (the 403s and 429s above among them) and 5xx.
    pub client_errors: AtomicU64,
    pub server_errors: AtomicU64,
    /// Microseconds from request head to response end, summed.
    pub latency_us: AtomicU64,
}

impl AppSlot {
    pub(super) fn reset(&self) {
        self.limit.reset();
        for c in [
            &self.requests,
            &self.forbidden,
            &self.limited,
            &self.client_errors,
            &self.server_errors,
            &self.latency_us,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// The first chunk's slots; each later chunk is twice the one before, so a
/// million apps take 8 chunks, and the big ones are large enough for the
/// allocator to put on huge pages (a slot is touched at random per request).
pub(super) const CHUNK_BITS: u32 = 12;
pub(super) const CHUNK: usize = 1 << CHUNK_BITS;

/// Chunk `k` holds slots `CHUNK * (2^k - 1) .. CHUNK * (2^(k+1) - 1)`.
pub(super) fn chunk_of(s: u32) -> (usize, usize) {
    let q = (s as usize >> CHUNK_BITS) + 1;
    let k = q.ilog2() as usize;
    (k, s as usize - (((1 << k) - 1) << CHUNK_BITS))
}

pub(super) fn slot_in(chunks: &[Arc<[AppSlot]>], s: u32) -> &AppSlot {
    let (k, i) = chunk_of(s);
    &chunks[k][i]
}
