//! The tokens one process holds of a global limit: counters the workers
//! spend with one atomic each and the Redis plane (`crate::cluster`)
//! refills.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

const SEEN_BITS: u32 = 40;
const SEEN_MASK: u64 = (1 << SEEN_BITS) - 1;
const SEEN_TAG: u64 = (1 << (64 - SEEN_BITS)) - 1;

/// One global limit's lease in this process. A worker spends a token with
/// one `fetch_sub`; a rate's count may go to -1 (one request on credit, so
/// the first request of an idle app never waits), which the next lease
/// repays. A quota's never does.
#[derive(Debug, Default)]
pub struct Lease {
    /// Rate tokens held.
    pub(crate) rate: AtomicI64,
    /// Quota units held (of the window the plane last leased for). Never
    /// spent on credit: a quota is exact.
    pub(crate) quota: AtomicI64,
    /// Requests that asked since the plane last looked: the demand.
    pub(crate) asked: AtomicU64,
    /// What Redis said is left of the quota when the plane last asked:
    /// the window's tag (high 24 bits) and the units left plus one (low
    /// 40; 0: not known). Zero left means the quota is spent for that
    /// window, and a request is refused without waiting; while Redis is
    /// unreachable, this instance counts locally its share of what is left.
    pub(crate) quota_seen: AtomicU64,
    /// Rate tokens put in `rate` on credit when the limit went idle (its
    /// share of the burst, not taken from Redis): the next lease repays
    /// them first. Only the plane reads and writes it.
    pub(crate) owed: AtomicI64,
}

impl Lease {
    /// Spends one token of `counter`; `false` (nothing spent) when the
    /// lease is empty and its credit used.
    #[inline]
    pub(crate) fn spend(counter: &AtomicI64) -> bool {
        if counter.fetch_sub(1, Ordering::Relaxed) < 0 {
            counter.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Spends one unit of `counter` if it holds one (no credit).
    #[inline]
    pub(crate) fn spend_exact(counter: &AtomicI64) -> bool {
        if counter.fetch_sub(1, Ordering::Relaxed) <= 0 {
            counter.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Units left in Redis for window `win`, when known.
    pub(crate) fn seen(&self, win: u64) -> Option<u64> {
        let v = self.quota_seen.load(Ordering::Relaxed);
        let left = v & SEEN_MASK;
        (left > 0 && v >> SEEN_BITS == win & SEEN_TAG).then(|| left - 1)
    }

    /// Units left in Redis when last seen, whatever the window.
    pub(crate) fn seen_any(&self) -> Option<u64> {
        let left = self.quota_seen.load(Ordering::Relaxed) & SEEN_MASK;
        left.checked_sub(1)
    }

    pub(crate) fn set_seen(&self, win: u64, left: u64) {
        let v = (win & SEEN_TAG) << SEEN_BITS | (left + 1).min(SEEN_MASK);
        self.quota_seen.store(v, Ordering::Relaxed);
    }

    pub(crate) fn reset(&self) {
        self.rate.store(0, Ordering::Relaxed);
        self.quota.store(0, Ordering::Relaxed);
        self.asked.store(0, Ordering::Relaxed);
        self.quota_seen.store(0, Ordering::Relaxed);
        self.owed.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_request_on_credit_then_none() {
        let l = Lease::default();
        assert!(Lease::spend(&l.rate));
        assert!(!Lease::spend(&l.rate));
        assert_eq!(l.rate.load(Ordering::Relaxed), -1);
        // A lease of 3 repays the credit and leaves 2.
        l.rate.fetch_add(3, Ordering::Relaxed);
        assert!(Lease::spend(&l.rate) && Lease::spend(&l.rate));
        assert!(Lease::spend(&l.rate)); // credit again
        assert!(!Lease::spend(&l.rate));
    }

    #[test]
    fn quota_units_are_never_spent_on_credit() {
        let l = Lease::default();
        assert!(!Lease::spend_exact(&l.quota));
        assert_eq!(l.quota.load(Ordering::Relaxed), 0);
        l.quota.fetch_add(2, Ordering::Relaxed);
        assert!(Lease::spend_exact(&l.quota) && Lease::spend_exact(&l.quota));
        assert!(!Lease::spend_exact(&l.quota));
        assert_eq!(l.quota.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn what_is_left_is_known_per_window() {
        let l = Lease::default();
        assert_eq!(l.seen(7), None);
        l.set_seen(7, 0);
        assert_eq!(l.seen(7), Some(0));
        assert_eq!(l.seen(8), None, "another window is not known");
        assert_eq!(l.seen_any(), Some(0));
        l.set_seen(8, 12);
        assert_eq!(l.seen(8), Some(12));
    }
}
