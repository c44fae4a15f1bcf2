//! A route's compressed answers: how many in each coding and the body
//! bytes in and out, and their Prometheus families.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{family, label};

/// A route's compressed answers: how many in each coding (the order of
/// [`crate::proto::compress::Encoding::ALL`]), and the body bytes taken
/// from the upstream and sent compressed; with the cache, how many of
/// those answers were a coded body the cache kept (no coding done), and
/// the bytes of the coded bodies it made counted in and out.
#[derive(Debug, Default)]
pub struct CompressMetrics {
    pub responses: [AtomicU64; 3],
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub cached: [AtomicU64; 3],
}

/// Writes the compression families, for the routes (by name) that
/// compressed an answer.
pub(super) fn render_compress<'a>(
    out: &mut String,
    routes: impl Iterator<Item = (&'a str, &'a CompressMetrics)>,
) {
    use crate::proto::compress::Encoding;
    let compressed: Vec<_> = routes
        .filter(|(_, c)| c.responses.iter().any(|n| n.load(Ordering::Relaxed) > 0))
        .map(|(route, c)| (label(route), c))
        .collect();
    family(
        out,
        "sluicegate_compress_responses_total",
        "counter",
        "Answers compressed, by route and coding.",
        compressed.iter().flat_map(|(route, c)| {
            Encoding::ALL
                .iter()
                .zip(&c.responses)
                .map(|(e, n)| (e, n.load(Ordering::Relaxed)))
                .filter(|(_, n)| *n > 0)
                .map(move |(e, n)| (format!("route=\"{route}\",algorithm=\"{}\"", e.token()), n))
        }),
    );
    family(
        out,
        "sluicegate_compress_cached_total",
        "counter",
        "Compressed answers sent from a coded body the cache kept, by route and coding.",
        compressed.iter().flat_map(|(route, c)| {
            Encoding::ALL
                .iter()
                .zip(&c.cached)
                .map(|(e, n)| (e, n.load(Ordering::Relaxed)))
                .filter(|(_, n)| *n > 0)
                .map(move |(e, n)| (format!("route=\"{route}\",algorithm=\"{}\"", e.token()), n))
        }),
    );
    family(
        out,
        "sluicegate_compress_bytes_total",
        "counter",
        "Body bytes of compressed answers, by route: taken from the upstream (in) and sent (out).",
        compressed.iter().flat_map(|(route, c)| {
            [("in", &c.bytes_in), ("out", &c.bytes_out)]
                .into_iter()
                .map(move |(direction, n)| {
                    (
                        format!("route=\"{route}\",direction=\"{direction}\""),
                        n.load(Ordering::Relaxed),
                    )
                })
        }),
    );
}
