//! Passive outlier detection: each endpoint's circuit breaker, fed by the
//! outcome of the requests it serves. Closed, it counts failures in a
//! window; at the threshold it opens and the balancers skip the endpoint
//! for `open_for`; then it is half-open and lets a few probe requests
//! through: a success closes it, a failure opens it again.
//!
//! State and settings are atomics in the endpoint's state, which outlives
//! reloads, so a reload keeps every circuit as it is and applies new
//! settings to the same endpoint only.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};

use sluicegate_config::Breaker as Settings;

/// How a request was let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The circuit is closed (or there is no breaker).
    Closed,
    /// One of the half-open circuit's probes.
    Probe,
}

#[derive(Debug, Default)]
pub struct Breaker {
    enabled: AtomicBool,
    threshold: AtomicU32,
    window_ns: AtomicU64,
    open_ns: AtomicU64,
    half_open: AtomicU32,
    on_5xx: AtomicBool,
    /// Failures in the window that started at `window_start`.
    fails: AtomicU32,
    window_start: AtomicU64,
    /// 0 when closed; else when the open state ends (then half-open).
    open_until: AtomicU64,
    /// Probes in flight while half-open.
    probes: AtomicU32,
    /// Times the circuit opened (for metrics).
    pub opened: AtomicU64,
}

impl Breaker {
    /// Applies the service's settings (`None`: no breaker, and a circuit
    /// left open is closed).
    pub fn configure(&self, s: Option<&Settings>) {
        match s {
            None => {
                self.enabled.store(false, Relaxed);
                self.open_until.store(0, Relaxed);
            }
            Some(s) => {
                self.threshold.store(s.errors, Relaxed);
                self.window_ns.store(s.window.as_nanos() as u64, Relaxed);
                self.open_ns.store(s.open_for.as_nanos() as u64, Relaxed);
                self.half_open.store(s.half_open_requests, Relaxed);
                self.on_5xx.store(s.on_5xx, Relaxed);
                self.enabled.store(true, Relaxed);
            }
        }
    }

    /// Whether a balancer may pick the endpoint at `now` (nanoseconds of
    /// [`crate::clock::mono_ns`]).
    pub fn available(&self, now: u64) -> bool {
        let until = self.open_until.load(Relaxed);
        until == 0
            || !self.enabled.load(Relaxed)
            || (now >= until && self.probes.load(Relaxed) < self.half_open.load(Relaxed))
    }

    /// [`Breaker::available`] now.
    pub fn available_now(&self) -> bool {
        self.open_until.load(Relaxed) == 0
            || self.available(crate::clock::mono_ns(std::time::Instant::now()))
    }

    /// [`Breaker::admit`] now: the clock is read only when the circuit has
    /// opened; a closed circuit always admits.
    pub fn admit_now(&self) -> Option<Admit> {
        if self.open_until.load(Relaxed) == 0 || !self.enabled.load(Relaxed) {
            return Some(Admit::Closed);
        }
        self.admit(crate::clock::mono_ns(std::time::Instant::now()))
    }

    /// Records a success: nothing to do (and no clock read) for a request
    /// let through a closed circuit that is still closed.
    pub fn succeeded(&self, admit: Admit) {
        if admit == Admit::Closed
            && (self.open_until.load(Relaxed) == 0 || !self.enabled.load(Relaxed))
        {
            return;
        }
        self.record(
            admit,
            true,
            crate::clock::mono_ns(std::time::Instant::now()),
        );
    }

    /// Gives back a probe whose request ended without a verdict on the
    /// endpoint (the client went away, say).
    pub fn release_probe(&self) {
        let _ = self
            .probes
            .fetch_update(Relaxed, Relaxed, |p| p.checked_sub(1));
    }

    /// Lets a request through, or not (another worker took the last probe).
    pub fn admit(&self, now: u64) -> Option<Admit> {
        let until = self.open_until.load(Relaxed);
        if until == 0 || !self.enabled.load(Relaxed) {
            return Some(Admit::Closed);
        }
        if now < until {
            return None;
        }
        let max = self.half_open.load(Relaxed);
        self.probes
            .fetch_update(Relaxed, Relaxed, |p| (p < max).then_some(p + 1))
            .ok()
            .map(|_| Admit::Probe)
    }

    /// Whether a response with `status` counts as a failure.
    pub fn counts_status(&self, status: u16) -> bool {
        status >= 500 && self.on_5xx.load(Relaxed)
    }

    /// Records a request's outcome; says whether this opened the circuit.
    pub fn record(&self, admit: Admit, ok: bool, now: u64) -> bool {
        if !self.enabled.load(Relaxed) {
            return false;
        }
        if admit == Admit::Probe {
            self.probes.fetch_sub(1, Relaxed);
        }
        if ok {
            if admit == Admit::Probe || self.open_until.load(Relaxed) != 0 {
                self.open_until.store(0, Relaxed);
                self.fails.store(0, Relaxed);
                self.window_start.store(now, Relaxed);
            }
            return false;
        }
        if admit == Admit::Probe {
            self.open_until
                .store(now + self.open_ns.load(Relaxed), Relaxed);
            self.opened.fetch_add(1, Relaxed);
            return true;
        }
        if self.open_until.load(Relaxed) != 0 {
            return false; // a request let through before it opened
        }
        let start = self.window_start.load(Relaxed);
        if now.saturating_sub(start) > self.window_ns.load(Relaxed) {
            self.window_start.store(now, Relaxed);
            self.fails.store(0, Relaxed);
        }
        let n = self.fails.fetch_add(1, Relaxed) + 1;
        if n >= self.threshold.load(Relaxed) {
            self.open_until
                .store(now + self.open_ns.load(Relaxed), Relaxed);
            self.fails.store(0, Relaxed);
            self.opened.fetch_add(1, Relaxed);
            return true;
        }
        false
    }

    /// Whether the circuit is open now (not half-open).
    pub fn is_open(&self, now: u64) -> bool {
        self.enabled.load(Relaxed) && now < self.open_until.load(Relaxed)
    }

    /// The circuit at `now` as a word: `off` (no breaker), `closed`,
    /// `open` or `half-open`.
    pub fn state(&self, now: u64) -> &'static str {
        let until = self.open_until.load(Relaxed);
        match () {
            _ if !self.enabled.load(Relaxed) => "off",
            _ if until == 0 => "closed",
            _ if now < until => "open",
            _ => "half-open",
        }
    }
}

/// A circuit as an upgrade carries it to the new process, with times
/// relative to the moment it was read (the breaker's own times are
/// [`crate::clock::mono_ns`], which means nothing in another process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Carried {
    /// Open: nanoseconds left before it turns half-open (0: half-open now).
    /// `None`: closed.
    pub open_for: Option<u64>,
    /// Failures counted in the current window, and the window's age.
    pub fails: u32,
    pub window_age: u64,
}

impl Breaker {
    /// The circuit at `now`, if the breaker is on and not at rest (closed
    /// with no failure counted). Probes in flight are not carried: their
    /// requests belong to the old process.
    pub fn carried(&self, now: u64) -> Option<Carried> {
        if !self.enabled.load(Relaxed) {
            return None;
        }
        let until = self.open_until.load(Relaxed);
        let fails = self.fails.load(Relaxed);
        if until == 0 && fails == 0 {
            return None;
        }
        Some(Carried {
            open_for: (until != 0).then(|| until.saturating_sub(now)),
            fails,
            window_age: now.saturating_sub(self.window_start.load(Relaxed)),
        })
    }

    /// Takes over a circuit carried from another process, at `now`: an
    /// open one stays open for what it had left. Ignored when this breaker
    /// is off (the new config has none for the service): says whether it
    /// applied.
    pub fn restore(&self, c: &Carried, now: u64) -> bool {
        if !self.enabled.load(Relaxed) {
            return false;
        }
        if let Some(left) = c.open_for {
            self.open_until
                .store(now.saturating_add(left).max(1), Relaxed);
        }
        self.fails.store(c.fails, Relaxed);
        self.window_start
            .store(now.saturating_sub(c.window_age).max(1), Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn breaker(errors: u32, half_open: u32) -> Breaker {
        let b = Breaker::default();
        b.configure(Some(&Settings {
            errors,
            window: Duration::from_millis(100),
            open_for: Duration::from_millis(50),
            half_open_requests: half_open,
            on_5xx: false,
        }));
        b
    }

    #[test]
    fn opens_at_the_threshold_within_the_window_only() {
        let b = breaker(3, 1);
        let t = 1_000 * MS;
        assert!(!b.record(Admit::Closed, false, t));
        assert!(!b.record(Admit::Closed, false, t + 10 * MS));
        // The window ran out: counting starts again.
        assert!(!b.record(Admit::Closed, false, t + 200 * MS));
        assert!(!b.record(Admit::Closed, false, t + 210 * MS));
        assert!(b.available(t + 210 * MS));
        assert!(b.record(Admit::Closed, false, t + 220 * MS));
        assert!(!b.available(t + 221 * MS));
        assert_eq!(b.admit(t + 221 * MS), None);
        assert!(b.is_open(t + 221 * MS));
    }

    #[test]
    fn half_open_lets_probes_through_and_a_success_closes() {
        let b = breaker(1, 2);
        let t = 1_000 * MS;
        assert!(b.record(Admit::Closed, false, t));
        let later = t + 60 * MS;
        assert!(b.available(later));
        let p1 = b.admit(later).unwrap();
        let p2 = b.admit(later).unwrap();
        assert_eq!((p1, p2), (Admit::Probe, Admit::Probe));
        assert_eq!(b.admit(later), None, "only two probes at once");
        assert!(!b.available(later));
        b.record(p1, true, later);
        assert_eq!(b.admit(later), Some(Admit::Closed));
        b.record(p2, true, later);
        assert!(!b.is_open(later));
    }

    #[test]
    fn a_failed_probe_opens_again() {
        let b = breaker(1, 1);
        let t = 1_000 * MS;
        b.record(Admit::Closed, false, t);
        let p = b.admit(t + 60 * MS).unwrap();
        assert!(b.record(p, false, t + 60 * MS));
        assert!(!b.available(t + 70 * MS));
        assert!(b.available(t + 111 * MS));
        assert_eq!(b.opened.load(Relaxed), 2);
    }

    #[test]
    fn a_probe_given_back_without_a_verdict_frees_its_slot() {
        let b = breaker(1, 1);
        let t = 1_000 * MS;
        b.record(Admit::Closed, false, t);
        let later = t + 60 * MS;
        assert_eq!(b.admit(later), Some(Admit::Probe));
        assert!(!b.available(later));
        b.release_probe();
        assert!(b.available(later), "the next request may probe");
        b.release_probe(); // never below zero
        assert_eq!(b.admit(later), Some(Admit::Probe));
    }

    #[test]
    fn a_success_through_a_closed_circuit_changes_nothing() {
        let b = breaker(2, 1);
        b.record(Admit::Closed, false, 1_000 * MS);
        b.succeeded(Admit::Closed);
        // The failure still counts: one more opens it.
        assert!(b.record(Admit::Closed, false, 1_001 * MS));
        assert_eq!(b.admit(1_002 * MS), None);
    }

    #[test]
    fn without_settings_it_never_opens() {
        let b = Breaker::default();
        for i in 0..100 {
            assert!(!b.record(Admit::Closed, false, i));
        }
        assert!(b.available(100));
        b.configure(Some(&Settings {
            errors: 1,
            window: Duration::from_secs(1),
            open_for: Duration::from_secs(1),
            half_open_requests: 1,
            on_5xx: true,
        }));
        assert!(b.counts_status(503) && !b.counts_status(404));
        assert!(b.record(Admit::Closed, false, 200));
        b.configure(None);
        assert!(b.available(201));
    }

    #[test]
    fn a_carried_circuit_keeps_what_it_had_left_in_another_clock() {
        let old = breaker(2, 1);
        let t = 1_000 * MS;
        assert_eq!(old.carried(t), None, "at rest: nothing to carry");
        old.record(Admit::Closed, false, t);
        let c = old.carried(t + 10 * MS).unwrap();
        assert_eq!((c.open_for, c.fails, c.window_age), (None, 1, 10 * MS));
        old.record(Admit::Closed, false, t + 20 * MS); // opens for 50 ms
        let c = old.carried(t + 30 * MS).unwrap();
        assert_eq!(c.open_for, Some(40 * MS));
        // The new process's clock reads something else entirely.
        let new = breaker(2, 1);
        let u = 7 * MS;
        assert!(new.restore(&c, u));
        assert!(!new.available(u + 39 * MS));
        assert!(new.is_open(u + 39 * MS));
        assert!(new.available(u + 40 * MS), "half-open when its time is up");
        // Half-open carries as open with nothing left; off, nothing applies.
        let c = old.carried(t + 100 * MS).unwrap();
        assert_eq!(c.open_for, Some(0));
        let off = Breaker::default();
        assert!(!off.restore(&c, u));
        assert!(off.available(u));
    }
}
