//! A route's `split`: the counters of each of its services
//! ([`SplitMetrics`]) and their families.

use super::{by_class, family, header, label, Histogram, StatusCounts};
use std::sync::atomic::{AtomicU64, Ordering};

/// The counters of one service of a route's `split`: the requests it
/// answered by status and their latency. Kept in the registry by (route,
/// service), so a reload (a change of weights) keeps counting.
#[derive(Debug)]
pub struct SplitMetrics {
    pub route: String,
    pub service: String,
    pub status: StatusCounts,
    pub latency: Histogram,
    /// Microseconds spent waiting for the upstream, summed.
    pub upstream_us: AtomicU64,
}

impl SplitMetrics {
    pub fn new(route: &str, service: &str) -> Self {
        SplitMetrics {
            route: route.to_string(),
            service: service.to_string(),
            status: StatusCounts::default(),
            latency: Histogram::default(),
            upstream_us: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn record(&self, status: u16, us: u64, upstream_us: Option<u64>) {
        self.status.record(status);
        self.latency.observe(us);
        if let Some(up) = upstream_us {
            self.upstream_us.fetch_add(up, Ordering::Relaxed);
        }
    }
}

/// Writes the families of split routes, by route and service.
pub fn render_splits<'a>(out: &mut String, splits: impl Iterator<Item = &'a SplitMetrics> + Clone) {
    let labels = |m: &SplitMetrics| {
        format!(
            "route=\"{}\",service=\"{}\"",
            label(&m.route),
            label(&m.service)
        )
    };
    family(
        out,
        "sluicegate_split_requests_total",
        "counter",
        "Requests of split routes, by route, the service of the split that answered and status class.",
        splits
            .clone()
            .flat_map(|m| by_class(format!("{},", labels(m)), m.status.classes())),
    );
    header(
        out,
        "sluicegate_split_request_duration_seconds",
        "histogram",
        "Time from request head to response end on split routes, by route and the service that answered.",
    );
    for m in splits {
        m.latency
            .render(out, "sluicegate_split_request_duration_seconds", &labels(m));
    }
}
