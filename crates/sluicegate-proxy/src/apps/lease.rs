//! The tokens one process holds of a global limit: counters the workers
//! spend with one atomic each and the Redis plane (`crate::cluster`)
//! refills.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// One global limit's lease in this process. A worker spends a token with
/// one `fetch_sub`; the count may go to -1 (one request on credit, so the
/// first request of an idle app never waits), which the next lease repays.
#[derive(Debug, Default)]
pub struct Lease {
    /// Rate tokens held.
    pub(crate) rate: AtomicI64,
    /// Quota units held (of the window the plane last leased for).
    pub(crate) quota: AtomicI64,
    /// Requests that asked since the plane last looked: the demand.
    pub(crate) asked: AtomicU64,
    /// This instance's share of what is left of the quota, for counting
    /// locally while Redis is unreachable.
    pub(crate) quota_share: AtomicU64,
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

    pub(crate) fn reset(&self) {
        self.rate.store(0, Ordering::Relaxed);
        self.quota.store(0, Ordering::Relaxed);
        self.asked.store(0, Ordering::Relaxed);
        self.quota_share.store(0, Ordering::Relaxed);
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
}
