//! A service's retry budget: retries stay a bounded share of its traffic,
//! kept across reloads by service name.

use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A service's retry settings and budget: every request adds a share of
/// a retry (the budget percentage), every retry takes a whole one, so
/// retries stay a bounded share of traffic even when every attempt fails.
#[derive(Debug)]
pub struct RetryBudget {
    pub settings: sluicegate_config::Retries,
    /// Thousandths of a retry; shared with the budget of the same service
    /// in the next config, so a reload neither refills nor empties it.
    tokens: Arc<std::sync::atomic::AtomicI64>,
}

impl RetryBudget {
    /// Most retries saved up, and the retries a fresh budget starts with
    /// (so a quiet service can still retry).
    const CAP: i64 = 100_000;
    const START: i64 = 10_000;

    pub fn new(settings: sluicegate_config::Retries) -> Self {
        Self::with_tokens(settings, Self::fresh_tokens())
    }

    /// The token store of a service seen for the first time.
    pub fn fresh_tokens() -> Arc<std::sync::atomic::AtomicI64> {
        Arc::new(std::sync::atomic::AtomicI64::new(Self::START))
    }

    /// A budget over an existing token store (kept across reloads).
    pub fn with_tokens(
        settings: sluicegate_config::Retries,
        tokens: Arc<std::sync::atomic::AtomicI64>,
    ) -> Self {
        RetryBudget { settings, tokens }
    }

    /// Adds one request's share (once full, only a load).
    pub fn deposit(&self) {
        if self.settings.attempts > 1 && self.tokens.load(Ordering::Relaxed) < Self::CAP {
            self.tokens.fetch_add(
                i64::from(self.settings.budget_percent) * 10,
                Ordering::Relaxed,
            );
        }
    }

    /// Takes one retry, if the budget has one.
    pub fn withdraw(&self) -> bool {
        self.tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t >= 1000).then_some(t - 1000)
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::RetryBudget;

    #[test]
    fn retries_are_a_bounded_share_of_requests() {
        let b = RetryBudget::new(sluicegate_config::Retries::default()); // 20%
                                                                         // A fresh budget holds 10 retries.
        assert_eq!((0..50).filter(|_| b.withdraw()).count(), 10);
        // Then one retry per 5 requests.
        for _ in 0..100 {
            b.deposit();
        }
        assert_eq!((0..50).filter(|_| b.withdraw()).count(), 20);
        // Saved up to a cap, however long the quiet spell.
        for _ in 0..10_000_000 / 200 {
            b.deposit();
        }
        assert_eq!((0..500).filter(|_| b.withdraw()).count(), 100);
    }
}
