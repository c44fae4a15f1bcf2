//! Lock-free counters and latency histograms, and their Prometheus text form.
//!
//! Labels are bounded: route and service names and endpoint addresses come
//! from the config, never from requests. Metric objects are kept in the
//! registry by name, so a reload keeps counting where it was.
//!
//! Here: histograms, label escaping and the helpers that write a family;
//! the counters and families by what they count in the files beside.

mod aggregate;
mod apps;
mod authz;
mod cache;
mod compress;
mod global;
mod mirror;
mod route;
mod split;
mod status;

pub use aggregate::{render_parts, PartMetrics};
pub use apps::render_apps;
pub use authz::{render_issuers, AuthzMetrics, CheckMetrics, IssuerUse};
pub use cache::{render_store, StoreUse};
pub use compress::CompressMetrics;
pub(crate) use global::render_listeners;
pub use global::{render_global, GlobalMetrics};
pub use mirror::{Abandoned, MirrorFailure, MirrorMetrics};
pub use route::{render_routes, RouteMetrics, FALLBACK_CAUSES};
pub use split::{render_splits, SplitMetrics};
pub use status::StatusCounts;

use std::fmt::Display;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the latency buckets, in microseconds.
pub const BUCKETS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, us: u64) {
        let i = BUCKETS_US.partition_point(|&b| b < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Each bucket's count (not cumulative; the last: over every bound)
    /// and the sum of the times, in microseconds.
    pub fn read(&self) -> ([u64; BUCKETS_US.len() + 1], u64) {
        let counts = std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed));
        (counts, self.sum_us.load(Ordering::Relaxed))
    }

    pub(crate) fn render(&self, out: &mut String, name: &str, labels: &str) {
        let (counts, sum_us) = self.read();
        render_histogram(out, name, labels, &counts, sum_us);
    }
}

/// Writes one histogram's lines from its bucket counts (not cumulative)
/// and sum in microseconds.
pub(crate) fn render_histogram(
    out: &mut String,
    name: &str,
    labels: &str,
    counts: &[u64; BUCKETS_US.len() + 1],
    sum_us: u64,
) {
    {
        let mut cumulative = 0;
        for (i, b) in counts.iter().enumerate() {
            cumulative += b;
            let le = match BUCKETS_US.get(i) {
                Some(us) => format!("{}", *us as f64 / 1e6),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let sum = sum_us as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// Escapes a label value for the Prometheus text format.
pub fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// Writes a family's `# HELP` and `# TYPE` lines.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Writes a family: its header, then one line per (labels, value) of
/// `rows` (the labels escaped and joined already).
fn family<L: Display, V: Display>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    rows: impl Iterator<Item = (L, V)>,
) {
    header(out, name, kind, help);
    for (labels, v) in rows {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

/// The rows of counts by status class (1xx to 5xx): `class` after
/// `labels` (empty, or ending in a comma).
fn by_class(labels: String, counts: [u64; 5]) -> impl Iterator<Item = (String, u64)> {
    (1..)
        .zip(counts)
        .map(move |(class, n)| (format!("{labels}class=\"{class}xx\""), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(100);
        h.observe(700);
        h.observe(20_000_000);
        let mut s = String::new();
        h.render(&mut s, "x", "r=\"a\"");
        assert!(s.contains("x_bucket{r=\"a\",le=\"0.0005\"} 1\n"), "{s}");
        assert!(s.contains("x_bucket{r=\"a\",le=\"0.001\"} 2\n"), "{s}");
        assert!(s.contains("x_bucket{r=\"a\",le=\"10\"} 2\n"), "{s}");
        assert!(s.contains("x_bucket{r=\"a\",le=\"+Inf\"} 3\n"), "{s}");
        assert!(s.contains("x_count{r=\"a\"} 3\n"), "{s}");
    }

    #[test]
    fn label_escaping() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
