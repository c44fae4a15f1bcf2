//! An `aggregate` route's parts: each part's counters ([`PartMetrics`]:
//! calls by result, their latency) and their families.

use super::{family, header, label, Histogram};
use std::sync::atomic::{AtomicU64, Ordering};

/// The counters of one part of an aggregate route, kept in the registry
/// by (route, part) so a reload keeps counting.
#[derive(Debug)]
pub struct PartMetrics {
    pub route: String,
    pub part: String,
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    /// From the part's call to its answer read whole (or its failure).
    pub latency: Histogram,
}

impl PartMetrics {
    pub fn new(route: &str, part: &str) -> Self {
        PartMetrics {
            route: route.to_string(),
            part: part.to_string(),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            latency: Histogram::default(),
        }
    }

    /// One call ended, well or not, after `us` microseconds (a part not
    /// called, as one it waited for failed, counts as failed, with no
    /// time).
    pub fn record(&self, ok: bool, us: Option<u64>) {
        let n = if ok { &self.ok } else { &self.failed };
        n.fetch_add(1, Ordering::Relaxed);
        if let Some(us) = us {
            self.latency.observe(us);
        }
    }
}

/// Writes the families of aggregate routes' parts, by route and part.
pub fn render_parts<'a>(out: &mut String, parts: impl Iterator<Item = &'a PartMetrics> + Clone) {
    let labels =
        |m: &PartMetrics| format!("route=\"{}\",part=\"{}\"", label(&m.route), label(&m.part));
    family(
        out,
        "sluicegate_aggregate_parts_total",
        "counter",
        "Parts of aggregate routes, by route, part and result (ok, failed).",
        parts.clone().flat_map(|m| {
            [("ok", &m.ok), ("failed", &m.failed)].map(|(r, n)| {
                (
                    format!("{},result=\"{r}\"", labels(m)),
                    n.load(Ordering::Relaxed),
                )
            })
        }),
    );
    header(
        out,
        "sluicegate_aggregate_part_duration_seconds",
        "histogram",
        "Time of the parts of aggregate routes, from the call to the answer read whole, by route and part.",
    );
    for m in parts {
        m.latency.render(
            out,
            "sluicegate_aggregate_part_duration_seconds",
            &labels(m),
        );
    }
}
