//! Judging one window of a rollout: the canary's and the baseline's
//! requests, 5xx answers and p99 latency over the window (differences of
//! cumulative counters, the p99 estimated from the latency histogram's
//! bucket differences), and the verdict.
//!
//! The rules (docs/config.md, `rollout`):
//! - a window in which either side has fewer than `min_requests` requests
//!   is skipped (it neither steps nor rolls back);
//! - errors: the canary may have at most `max_error_ratio` times the 5xx
//!   the baseline's rate predicts for its requests, and never fewer than
//!   `max_error_ratio` of them: the baseline's rate is taken as at least
//!   one error per canary window, so one stray 5xx against a clean
//!   baseline does not roll back;
//! - latency: the canary's p99 may be at most `max_p99_ratio` times the
//!   baseline's (each at least one microsecond).

use serde::Serialize;
use sluicegate_config::Rollout;
use utoipa::ToSchema;

/// The latency histogram's upper bounds, in microseconds (the last bucket
/// counts what is over every bound).
pub(crate) use sluicegate_proxy::live::BUCKETS_US;

/// Cumulative counters of one side (or one split entry) at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub requests: u64,
    pub errors: u64,
    pub buckets: [u64; BUCKETS_US.len() + 1],
}

impl Tally {
    /// Adds `other` (the baseline is the sum of every entry but the last).
    pub(crate) fn add(&mut self, other: &Tally) {
        self.requests += other.requests;
        self.errors += other.errors;
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
    }

    /// What happened between `before` and `self`; `None` when a counter
    /// went back (the counters were reset: the window cannot be judged).
    pub(crate) fn since(&self, before: &Tally) -> Option<Tally> {
        let mut buckets = [0; BUCKETS_US.len() + 1];
        for (i, b) in buckets.iter_mut().enumerate() {
            *b = self.buckets[i].checked_sub(before.buckets[i])?;
        }
        Some(Tally {
            requests: self.requests.checked_sub(before.requests)?,
            errors: self.errors.checked_sub(before.errors)?,
            buckets,
        })
    }
}

/// One side's figures over a window, as the API shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub(crate) struct Side {
    pub requests: u64,
    /// 5xx answers.
    pub errors: u64,
    /// The 99th percentile of the latency, estimated from the histogram
    /// (linear within the bucket it falls in); 0 without requests.
    pub p99_ms: f64,
}

impl Side {
    pub(crate) fn of(t: &Tally) -> Side {
        Side {
            requests: t.requests,
            errors: t.errors,
            p99_ms: p99_us(&t.buckets) / 1000.0,
        }
    }
}

/// What a window decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// Good: the canary's share rises by `step`.
    Step,
    /// Bad: the canary's share goes back to 0.
    Rollback,
    /// Too few requests on a side: not counted.
    Skipped,
}

/// The 99th percentile, in microseconds, of the latencies counted in
/// `buckets` (each bucket's own count): linear within the bucket the
/// rank falls in, from its lower bound to its upper one; the last bucket
/// (over every bound) answers the last bound. 0 when empty.
pub(crate) fn p99_us(buckets: &[u64; BUCKETS_US.len() + 1]) -> f64 {
    quantile_us(buckets, 0.99)
}

fn quantile_us(buckets: &[u64; BUCKETS_US.len() + 1], q: f64) -> f64 {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            let Some(&upper) = BUCKETS_US.get(i) else {
                return BUCKETS_US[BUCKETS_US.len() - 1] as f64;
            };
            let lower = if i == 0 { 0 } else { BUCKETS_US[i - 1] };
            let within = (rank - below as f64) / n as f64;
            return lower as f64 + (upper - lower) as f64 * within;
        }
        below += n;
    }
    BUCKETS_US[BUCKETS_US.len() - 1] as f64
}

/// The verdict on a window where the canary saw `canary` and the baseline
/// `baseline`.
pub(crate) fn judge(rule: &Rollout, canary: &Tally, baseline: &Tally) -> Verdict {
    if canary.requests < rule.min_requests || baseline.requests < rule.min_requests {
        return Verdict::Skipped;
    }
    // The baseline's rate, at least one error per canary window.
    let base_rate =
        (baseline.errors as f64 / baseline.requests as f64).max(1.0 / canary.requests as f64);
    let canary_rate = canary.errors as f64 / canary.requests as f64;
    if canary_rate > rule.max_error_ratio * base_rate {
        return Verdict::Rollback;
    }
    let (c99, b99) = (p99_us(&canary.buckets), p99_us(&baseline.buckets));
    if c99.max(1.0) > rule.max_p99_ratio * b99.max(1.0) {
        return Verdict::Rollback;
    }
    Verdict::Step
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> Rollout {
        Rollout {
            step: 10,
            every: std::time::Duration::from_secs(1),
            max_error_ratio: 2.0,
            max_p99_ratio: 1.5,
            min_requests: 100,
        }
    }

    /// `requests` requests, `errors` of them 5xx, all in bucket `bucket`.
    fn tally(requests: u64, errors: u64, bucket: usize) -> Tally {
        let mut t = Tally {
            requests,
            errors,
            ..Tally::default()
        };
        t.buckets[bucket] = requests;
        t
    }

    #[test]
    fn too_few_requests_on_either_side_skip() {
        assert_eq!(
            judge(&rule(), &tally(99, 0, 0), &tally(1000, 0, 0)),
            Verdict::Skipped
        );
        assert_eq!(
            judge(&rule(), &tally(500, 0, 0), &tally(99, 0, 0)),
            Verdict::Skipped
        );
        // Even a canary failing every request is not judged on 99.
        assert_eq!(
            judge(&rule(), &tally(99, 99, 0), &tally(1000, 0, 0)),
            Verdict::Skipped
        );
        assert_eq!(
            judge(&rule(), &tally(100, 0, 0), &tally(100, 0, 0)),
            Verdict::Step
        );
    }

    #[test]
    fn error_rates_compare_by_the_ratio() {
        // Baseline 1%: the canary may reach 2%.
        let base = tally(1000, 10, 0);
        assert_eq!(judge(&rule(), &tally(500, 10, 0), &base), Verdict::Step);
        assert_eq!(judge(&rule(), &tally(500, 11, 0), &base), Verdict::Rollback);
        // 5% against a clean baseline rolls back.
        assert_eq!(
            judge(&rule(), &tally(100, 5, 0), &tally(1900, 0, 0)),
            Verdict::Rollback
        );
    }

    #[test]
    fn a_clean_baseline_still_allows_a_stray_error() {
        // One error per canary window is the floor of the baseline's rate:
        // with a ratio of 2, two 5xx pass, three do not.
        let base = tally(100_000, 0, 0);
        assert_eq!(judge(&rule(), &tally(100, 1, 0), &base), Verdict::Step);
        assert_eq!(judge(&rule(), &tally(100, 2, 0), &base), Verdict::Step);
        assert_eq!(judge(&rule(), &tally(100, 3, 0), &base), Verdict::Rollback);
        // Both clean: a step.
        assert_eq!(
            judge(&rule(), &tally(100, 0, 0), &tally(100, 0, 0)),
            Verdict::Step
        );
    }

    #[test]
    fn p99_compares_by_the_ratio() {
        // Same bucket: equal estimates.
        assert_eq!(
            judge(&rule(), &tally(200, 0, 3), &tally(200, 0, 3)),
            Verdict::Step
        );
        // 2.5-5 ms against under 0.5 ms: rolled back.
        assert_eq!(
            judge(&rule(), &tally(200, 0, 3), &tally(200, 0, 0)),
            Verdict::Rollback
        );
        // The canary faster than the baseline is fine.
        assert_eq!(
            judge(&rule(), &tally(200, 0, 0), &tally(200, 0, 5)),
            Verdict::Step
        );
        // A looser ratio lets 2x through.
        let loose = Rollout {
            max_p99_ratio: 3.0,
            ..rule()
        };
        assert_eq!(
            judge(&loose, &tally(200, 0, 3), &tally(200, 0, 2)),
            Verdict::Step
        );
    }

    #[test]
    fn p99_is_linear_within_its_bucket() {
        let mut b = [0u64; BUCKETS_US.len() + 1];
        assert_eq!(p99_us(&b), 0.0);
        // 100 requests under 500 us: rank 99 of 100 -> 495 us.
        b[0] = 100;
        assert!((p99_us(&b) - 495.0).abs() < 1e-9);
        // 98 fast, 2 in 1-2.5 ms: rank 99 is half way into that bucket.
        b[0] = 98;
        b[2] = 2;
        assert!((p99_us(&b) - 1750.0).abs() < 1e-9, "{}", p99_us(&b));
        // Over every bound: the last bound.
        let mut slow = [0u64; BUCKETS_US.len() + 1];
        slow[BUCKETS_US.len()] = 10;
        assert_eq!(p99_us(&slow), 10_000_000.0);
    }

    #[test]
    fn differences_of_counters_and_resets() {
        let before = tally(100, 1, 0);
        let mut after = tally(250, 4, 0);
        after.buckets[1] = 7;
        let d = after.since(&before).unwrap();
        assert_eq!(
            (d.requests, d.errors, d.buckets[0], d.buckets[1]),
            (150, 3, 150, 7)
        );
        // A counter that went back: not a window.
        assert!(before.since(&after).is_none());
        let mut sum = tally(1, 0, 0);
        sum.add(&tally(2, 1, 0));
        assert_eq!((sum.requests, sum.errors, sum.buckets[0]), (3, 1, 3));
    }
}
