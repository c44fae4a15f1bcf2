//! Ejection on failed connects, on by default: an endpoint whose connect is
//! refused or times out leaves rotation at once for `base`, doubled at each
//! further failed connect in a row (up to `max`); the first connect that
//! succeeds brings it back for good. When the time is up the endpoint is
//! picked again as usual, so its next request is the probe (a refused one
//! costs that request nothing: it is retried elsewhere).
//!
//! Also where failed connects are logged: one line per endpoint per
//! [`LOG_EVERY`] at most, with how many failed since the last line.
//!
//! State and settings are atomics in the endpoint's state, which outlives
//! reloads, like the breaker's.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use sluicegate_config::Ejection as Settings;

/// Failed connects to one endpoint are logged at most this often.
pub const LOG_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct Ejection {
    enabled: AtomicBool,
    base_ns: AtomicU64,
    max_ns: AtomicU64,
    /// 0 while in rotation; else when the ejection ends (nanoseconds of
    /// [`crate::clock::mono_ns`]), kept after it ends until a
    /// connect succeeds.
    until: AtomicU64,
    /// Failed connects in a row that ejected it.
    streak: AtomicU32,
    /// Times it was ejected (for metrics).
    pub ejections: AtomicU64,
    /// Failed connects not logged yet, and when the last line was written.
    unlogged: AtomicU64,
    logged_at: AtomicU64,
}

/// What a failed connect did, for its log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed {
    /// Out of rotation for this long from now (`None`: ejection is off, or
    /// another worker's failure had just ejected it).
    pub ejected_for: Option<Duration>,
    /// `Some(n)`: write a log line now, for `n` failures (this one
    /// included); `None`: one was written less than [`LOG_EVERY`] ago.
    pub log: Option<u64>,
}

impl Ejection {
    /// Applies the service's settings (`None`: off, and an ejected endpoint
    /// is back).
    pub fn configure(&self, s: Option<&Settings>) {
        match s {
            None => {
                self.enabled.store(false, Relaxed);
                self.until.store(0, Relaxed);
                self.streak.store(0, Relaxed);
            }
            Some(s) => {
                self.base_ns.store(s.base.as_nanos() as u64, Relaxed);
                self.max_ns.store(s.max.as_nanos() as u64, Relaxed);
                self.enabled.store(true, Relaxed);
            }
        }
    }

    /// Whether balancers may pick the endpoint: one load while it is in
    /// rotation; the clock is read only after an ejection.
    #[inline]
    pub fn available_now(&self) -> bool {
        let until = self.until.load(Relaxed);
        until == 0 || crate::clock::mono_ns(std::time::Instant::now()) >= until
    }

    /// Whether it is out of rotation at `now`.
    pub fn is_ejected(&self, now: u64) -> bool {
        now < self.until.load(Relaxed)
    }

    /// Records a failed connect at `now`: ejects the endpoint unless it is
    /// ejected already, and says whether to log.
    pub fn connect_failed(&self, now: u64) -> Failed {
        let mut ejected_for = None;
        if self.enabled.load(Relaxed) {
            let until = self.until.load(Relaxed);
            if now >= until {
                let n = self.streak.load(Relaxed).min(30);
                let d = self
                    .base_ns
                    .load(Relaxed)
                    .saturating_mul(1 << n)
                    .min(self.max_ns.load(Relaxed));
                // One worker ejects it; another that failed at the same time
                // finds it ejected and leaves the streak alone.
                if self
                    .until
                    .compare_exchange(until, now + d, Relaxed, Relaxed)
                    .is_ok()
                {
                    self.streak.fetch_add(1, Relaxed);
                    self.ejections.fetch_add(1, Relaxed);
                    ejected_for = Some(Duration::from_nanos(d));
                }
            }
        }
        self.unlogged.fetch_add(1, Relaxed);
        let last = self.logged_at.load(Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= LOG_EVERY.as_nanos() as u64;
        let log = (due
            && self
                .logged_at
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok())
        .then(|| self.unlogged.swap(0, Relaxed));
        Failed { ejected_for, log }
    }

    /// Records a connect that succeeded: back in rotation for good (one
    /// load when it was never ejected).
    #[inline]
    pub fn connect_ok(&self) {
        if self.until.load(Relaxed) != 0 {
            self.until.store(0, Relaxed);
            self.streak.store(0, Relaxed);
        }
    }
}

impl Ejection {
    /// For an upgrade: the time left of the ejection at `now` (0: up, but
    /// no connect has succeeded since) and the streak of failed connects,
    /// if it is on and the endpoint was ejected.
    pub fn carried(&self, now: u64) -> Option<(u64, u32)> {
        let until = self.until.load(Relaxed);
        (self.enabled.load(Relaxed) && until != 0)
            .then(|| (until.saturating_sub(now), self.streak.load(Relaxed)))
    }

    /// Takes over an ejection carried from another process, at `now`.
    /// Ignored when ejection is off here; says whether it applied.
    pub fn restore(&self, left: u64, streak: u32, now: u64) -> bool {
        if !self.enabled.load(Relaxed) {
            return false;
        }
        self.until.store(now.saturating_add(left).max(1), Relaxed);
        self.streak.store(streak, Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ejection(base_ms: u64, max_ms: u64) -> Ejection {
        let e = Ejection::default();
        e.configure(Some(&Settings {
            base: Duration::from_millis(base_ms),
            max: Duration::from_millis(max_ms),
        }));
        e
    }

    #[test]
    fn a_failed_connect_ejects_for_a_growing_time_until_one_succeeds() {
        let e = ejection(100, 350);
        let t = 1_000 * MS;
        assert!(!e.is_ejected(t));
        assert_eq!(
            e.connect_failed(t).ejected_for,
            Some(Duration::from_millis(100))
        );
        assert!(e.is_ejected(t + 99 * MS) && !e.is_ejected(t + 100 * MS));
        // A failure seen by another worker while ejected changes nothing.
        assert_eq!(e.connect_failed(t + 50 * MS).ejected_for, None);
        // The probe after the time is up fails: twice as long, then capped.
        let t2 = t + 100 * MS;
        assert_eq!(
            e.connect_failed(t2).ejected_for,
            Some(Duration::from_millis(200))
        );
        let t3 = t2 + 200 * MS;
        assert_eq!(
            e.connect_failed(t3).ejected_for,
            Some(Duration::from_millis(350))
        );
        assert_eq!(e.ejections.load(Relaxed), 3);
        // A connect that succeeds: in rotation, and the next failure starts
        // from `base` again.
        e.connect_ok();
        assert!(!e.is_ejected(t3 + MS));
        assert_eq!(
            e.connect_failed(t3 + 2 * MS).ejected_for,
            Some(Duration::from_millis(100))
        );
    }

    #[test]
    fn failures_are_logged_once_per_interval_with_their_count() {
        let e = ejection(100, 1000);
        let t = 5_000 * MS;
        assert_eq!(e.connect_failed(t).log, Some(1), "the first is logged");
        for k in 1..=9 {
            assert_eq!(e.connect_failed(t + k * 10 * MS).log, None);
        }
        let later = t + LOG_EVERY.as_nanos() as u64;
        assert_eq!(e.connect_failed(later).log, Some(10), "nine held back");
        assert_eq!(e.connect_failed(later + MS).log, None);
    }

    #[test]
    fn a_carried_ejection_keeps_its_time_left_and_its_streak() {
        let old = ejection(100, 1000);
        let t = 1_000 * MS;
        assert_eq!(old.carried(t), None);
        old.connect_failed(t);
        old.connect_failed(t + 100 * MS); // the second in a row: 200 ms
        assert_eq!(old.carried(t + 150 * MS), Some((150 * MS, 2)));
        let new = ejection(100, 1000);
        let u = 3 * MS;
        assert!(new.restore(150 * MS, 2, u));
        assert!(new.is_ejected(u + 149 * MS) && !new.is_ejected(u + 150 * MS));
        // The next failure goes on doubling: 400 ms.
        assert_eq!(
            new.connect_failed(u + 150 * MS).ejected_for,
            Some(Duration::from_millis(400))
        );
        assert!(!Ejection::default().restore(150 * MS, 2, u));
    }

    #[test]
    fn off_it_never_ejects_and_turning_it_off_brings_the_endpoint_back() {
        let e = Ejection::default();
        assert_eq!(e.connect_failed(1_000 * MS).ejected_for, None);
        assert!(!e.is_ejected(1_000 * MS));
        let e = ejection(100, 100);
        e.connect_failed(1_000 * MS);
        assert!(e.is_ejected(1_001 * MS));
        e.configure(None);
        assert!(!e.is_ejected(1_001 * MS));
    }
}
