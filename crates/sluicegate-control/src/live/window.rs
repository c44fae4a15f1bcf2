//! Figures over a recent window, from two samples of the data plane's
//! cumulative counters: rates, percentiles from the latency histogram's
//! bucket deltas, and the share of latency the gateway itself adds.

use serde::Serialize;
use sluicegate_proxy::live::{RouteCounts, SplitEntryCounts, BUCKETS_US};
use utoipa::ToSchema;

/// Histogram bucket counts, as the data plane keeps them.
pub(crate) type Buckets = [u64; BUCKETS_US.len() + 1];

/// Cumulative counters summed over routes (one route, a service's
/// routes, or all).
#[derive(Debug, Clone, Default)]
pub(crate) struct Sum {
    pub status: [u64; 5],
    pub buckets: Buckets,
    pub total_us: u64,
    pub upstream_us: u64,
}

impl Sum {
    pub fn add(&mut self, r: &RouteCounts) {
        for (a, b) in self.status.iter_mut().zip(r.status) {
            *a += b;
        }
        for (a, b) in self.buckets.iter_mut().zip(r.buckets) {
            *a += b;
        }
        self.total_us += r.total_us;
        self.upstream_us += r.upstream_us;
    }

    /// Adds one service's share of a split route.
    pub fn add_split(&mut self, e: &SplitEntryCounts) {
        for (a, b) in self.status.iter_mut().zip(e.status) {
            *a += b;
        }
        for (a, b) in self.buckets.iter_mut().zip(e.buckets) {
            *a += b;
        }
        self.total_us += e.total_us;
        self.upstream_us += e.upstream_us;
    }

    /// What was counted after `old` (a counter that went back, as a route
    /// removed and added again, counts from zero).
    pub fn since(&self, old: &Sum) -> Sum {
        let sub = |a: u64, b: u64| if a >= b { a - b } else { a };
        Sum {
            status: std::array::from_fn(|i| sub(self.status[i], old.status[i])),
            buckets: std::array::from_fn(|i| sub(self.buckets[i], old.buckets[i])),
            total_us: sub(self.total_us, old.total_us),
            upstream_us: sub(self.upstream_us, old.upstream_us),
        }
    }

    pub fn requests(&self) -> u64 {
        self.status.iter().sum()
    }
}

/// Requests by status class.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub(crate) struct Classes {
    #[serde(rename = "1xx")]
    pub c1: u64,
    #[serde(rename = "2xx")]
    pub c2: u64,
    #[serde(rename = "3xx")]
    pub c3: u64,
    #[serde(rename = "4xx")]
    pub c4: u64,
    #[serde(rename = "5xx")]
    pub c5: u64,
}

impl From<[u64; 5]> for Classes {
    fn from(s: [u64; 5]) -> Self {
        Classes {
            c1: s[0],
            c2: s[1],
            c3: s[2],
            c4: s[3],
            c5: s[4],
        }
    }
}

/// The traffic of a route, a service or the whole gateway.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub(crate) struct Traffic {
    /// Requests answered since start (or since the route appeared), by class.
    pub requests: Classes,
    /// Requests answered in the window, by class.
    pub window: Classes,
    /// Requests per second over the window.
    pub rate: f64,
    /// Latency percentiles over the window, in milliseconds (none: no
    /// request in the window).
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The share of the window's latency spent in the gateway itself, from
    /// 0 to 1: the time from request head to response end, less the time
    /// waiting for upstreams (request sent to response head), over that
    /// time.
    pub gateway_share: Option<f64>,
}

impl Traffic {
    /// The traffic of `now`, with the window `now - old` over `secs`.
    pub fn of(now: &Sum, old: &Sum, secs: f64) -> Traffic {
        let w = now.since(old);
        let n = w.requests();
        let share = (w.total_us > 0).then(|| {
            let own = w.total_us.saturating_sub(w.upstream_us);
            round(own as f64 / w.total_us as f64, 4)
        });
        Traffic {
            requests: now.status.into(),
            window: w.status.into(),
            rate: if secs > 0.0 {
                round(n as f64 / secs, 2)
            } else {
                0.0
            },
            p50_ms: quantile(&w.buckets, 0.50),
            p99_ms: quantile(&w.buckets, 0.99),
            gateway_share: share,
        }
    }
}

pub(crate) fn round(v: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (v * m).round() / m
}

/// The `q` quantile of a histogram, in milliseconds, interpolated
/// linearly inside its bucket; in the last (unbounded) bucket, its lower
/// bound.
pub(crate) fn quantile(buckets: &Buckets, q: f64) -> Option<f64> {
    let n: u64 = buckets.iter().sum();
    if n == 0 {
        return None;
    }
    let rank = (q * n as f64).max(1.0);
    let mut below = 0u64;
    for (i, &c) in buckets.iter().enumerate() {
        if c > 0 && (below + c) as f64 >= rank {
            let lo = if i == 0 { 0 } else { BUCKETS_US[i - 1] } as f64;
            let Some(&hi) = BUCKETS_US.get(i) else {
                return Some(round(lo / 1000.0, 3));
            };
            let frac = (rank - below as f64) / c as f64;
            return Some(round((lo + (hi as f64 - lo) * frac) / 1000.0, 3));
        }
        below += c;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_inside_the_bucket() {
        let mut b = Buckets::default();
        // 100 requests between 1 and 2.5 ms.
        b[2] = 100;
        assert_eq!(quantile(&b, 0.5), Some(1.75));
        assert_eq!(quantile(&b, 0.99), Some(2.485));
        b[0] = 100;
        // Half at most 0.5 ms now.
        assert_eq!(quantile(&b, 0.5), Some(0.5));
        assert_eq!(quantile(&Buckets::default(), 0.5), None);
        let mut slow = Buckets::default();
        slow[BUCKETS_US.len()] = 3;
        assert_eq!(quantile(&slow, 0.99), Some(10_000.0));
    }

    #[test]
    fn the_window_is_the_difference() {
        let r = |n: u64, us: u64, up: u64| RouteCounts {
            status: [0, n, 0, 0, 1],
            total_us: us,
            upstream_us: up,
            ..Default::default()
        };
        let (mut old, mut now) = (Sum::default(), Sum::default());
        old.add(&r(10, 1000, 500));
        now.add(&r(30, 5000, 4500));
        let t = Traffic::of(&now, &old, 2.0);
        assert_eq!(t.rate, 10.0);
        assert_eq!(t.window.c2, 20);
        assert_eq!(t.requests.c2, 30);
        assert_eq!(t.gateway_share, Some(0.0));
        let t = Traffic::of(&now, &Sum::default(), 1.0);
        assert_eq!(t.gateway_share, Some(0.1));
    }
}
