//! A route's fault injection (`fault`): on a share of its requests, an
//! abort (the gateway answers a status itself) or a delay before
//! forwarding. The share is drawn from a worker's own [`Rng`]: a `Cell`,
//! no lock, no system call. The session applies the decision after the
//! route's filters and before forwarding.

use std::cell::Cell;
use std::time::Duration;

use sluicegate_config::Fault;

/// A draw's range: 53 bits, so that every percentage's threshold is exact
/// enough and `100` takes every draw.
pub(super) const SCALE: u64 = 1 << 53;

/// A route's fault settings as requests use them: each share as a
/// threshold on a draw below [`SCALE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRt {
    abort: Option<(u64, u16)>,
    delay: Option<(u64, Duration)>,
}

/// What a request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Injected {
    None,
    Abort(u16),
    Delay(Duration),
}

impl Injected {
    /// The access log's mark.
    pub(crate) fn mark(self) -> Option<&'static str> {
        match self {
            Injected::None => None,
            Injected::Abort(_) => Some("abort"),
            Injected::Delay(_) => Some("delay"),
        }
    }
}

/// `percent` (0 to 100) of [`SCALE`].
pub(super) fn threshold(percent: f64) -> u64 {
    let t = (percent.clamp(0.0, 100.0) / 100.0 * SCALE as f64).round();
    (t as u64).min(SCALE)
}

impl FaultRt {
    pub(crate) fn new(cfg: &Fault) -> FaultRt {
        FaultRt {
            abort: cfg.abort.as_ref().map(|a| (threshold(a.percent), a.status)),
            delay: cfg
                .delay
                .as_ref()
                .map(|d| (threshold(d.percent), d.duration)),
        }
    }

    /// Draws this request's fault: the abort first, then, for a request
    /// not aborted, the delay, each with its own draw.
    #[inline]
    pub(crate) fn draw(&self, rng: &Rng) -> Injected {
        if let Some((t, status)) = self.abort {
            if rng.below(SCALE) < t {
                return Injected::Abort(status);
            }
        }
        if let Some((t, d)) = self.delay {
            if rng.below(SCALE) < t {
                return Injected::Delay(d);
            }
        }
        Injected::None
    }
}

/// A worker's pseudo-random numbers (xorshift64*): one `Cell`, seeded once
/// when the worker starts. Not for secrets.
#[derive(Debug)]
pub(crate) struct Rng(Cell<u64>);

impl Rng {
    /// A generator from `seed` (any value; zero is replaced).
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(Cell::new(if seed == 0 {
            0x9E37_79B9_7F4A_7C15
        } else {
            seed
        }))
    }

    #[inline]
    pub(crate) fn next_u64(&self) -> u64 {
        let mut x = self.0.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A draw below `SCALE`: the top 53 bits.
    #[inline]
    pub(super) fn below(&self, scale: u64) -> u64 {
        debug_assert_eq!(scale, SCALE);
        self.next_u64() >> 11
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate_config::{FaultAbort, FaultDelay};

    fn rt(abort: Option<f64>, delay: Option<f64>) -> FaultRt {
        FaultRt::new(&Fault {
            abort: abort.map(|percent| FaultAbort {
                percent,
                status: 503,
            }),
            delay: delay.map(|percent| FaultDelay {
                percent,
                duration: Duration::from_millis(200),
            }),
        })
    }

    /// Counts aborts and delays over `n` draws.
    fn count(f: &FaultRt, rng: &Rng, n: u32) -> (u32, u32) {
        let (mut aborts, mut delays) = (0, 0);
        for _ in 0..n {
            match f.draw(rng) {
                Injected::Abort(503) => aborts += 1,
                Injected::Delay(d) if d == Duration::from_millis(200) => delays += 1,
                Injected::None => {}
                other => panic!("{other:?}"),
            }
        }
        (aborts, delays)
    }

    #[test]
    fn the_draws_land_at_the_configured_rates() {
        let rng = Rng::new(0x1234_5678);
        let n = 200_000;
        // 1% aborts; of the rest, 5% delayed: 4.95% of all.
        let (aborts, delays) = count(&rt(Some(1.0), Some(5.0)), &rng, n);
        let rate = |k: u32| f64::from(k) / f64::from(n) * 100.0;
        assert!((rate(aborts) - 1.0).abs() < 0.15, "{}", rate(aborts));
        assert!((rate(delays) - 4.95).abs() < 0.3, "{}", rate(delays));
        // A fraction of a percent.
        let (aborts, _) = count(&rt(Some(0.5), None), &rng, n);
        assert!((rate(aborts) - 0.5).abs() < 0.1, "{}", rate(aborts));
        let (aborts, _) = count(&rt(Some(50.0), None), &rng, n);
        assert!((rate(aborts) - 50.0).abs() < 1.0, "{}", rate(aborts));
    }

    #[test]
    fn zero_never_and_a_hundred_always() {
        let rng = Rng::new(7);
        assert_eq!(count(&rt(Some(0.0), Some(0.0)), &rng, 50_000), (0, 0));
        assert_eq!(count(&rt(Some(100.0), None), &rng, 50_000), (50_000, 0));
        assert_eq!(count(&rt(None, Some(100.0)), &rng, 50_000), (0, 50_000));
        // An abort is never also delayed.
        assert_eq!(count(&rt(Some(100.0), Some(100.0)), &rng, 1000), (1000, 0));
        assert_eq!(rt(None, None).draw(&rng), Injected::None);
    }

    #[test]
    fn workers_seeded_apart_draw_apart() {
        let (a, b) = (Rng::new(1), Rng::new(2));
        let same = (0..64).filter(|_| a.next_u64() == b.next_u64()).count();
        assert_eq!(same, 0);
        let z = Rng::new(0);
        assert_ne!(z.next_u64(), 0);
    }
}
