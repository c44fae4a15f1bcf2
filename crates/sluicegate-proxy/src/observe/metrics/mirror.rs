//! A route's `mirror`: why copies failed or were abandoned, the route's
//! mirror counters ([`MirrorMetrics`]) and their families.

use super::{family, label};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Why a mirror copy was given up before it ended (see [`MirrorMetrics`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// The copy's body fell further behind the request's than its buffer
    /// holds.
    Behind,
    /// The route had its most copies in flight already.
    InFlightLimit,
    /// The request's own body did not arrive whole (the client went away,
    /// or an early answer cut it).
    Incomplete,
    /// A request the mirror does not copy (a gRPC call whose body streams).
    Unsupported,
}

impl Abandoned {
    const ALL: [Abandoned; 4] = [
        Abandoned::Behind,
        Abandoned::InFlightLimit,
        Abandoned::Incomplete,
        Abandoned::Unsupported,
    ];

    fn name(self) -> &'static str {
        match self {
            Abandoned::Behind => "behind",
            Abandoned::InFlightLimit => "in_flight_limit",
            Abandoned::Incomplete => "incomplete",
            Abandoned::Unsupported => "unsupported",
        }
    }
}

/// Why a mirror copy got no whole answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorFailure {
    /// No connection to any endpoint (or none healthy, or none free).
    Connect,
    /// No answer, or no end of its body, in time.
    Timeout,
    /// Anything else: a reset, a malformed answer.
    Other,
}

impl MirrorFailure {
    const ALL: [MirrorFailure; 3] = [
        MirrorFailure::Connect,
        MirrorFailure::Timeout,
        MirrorFailure::Other,
    ];

    fn name(self) -> &'static str {
        match self {
            MirrorFailure::Connect => "connect",
            MirrorFailure::Timeout => "timeout",
            MirrorFailure::Other => "other",
        }
    }
}

/// A route's mirror counters: copies answered by status class, failed and
/// abandoned by why, and the copies in flight now (which bounds them).
#[derive(Debug, Default)]
pub struct MirrorMetrics {
    /// The mirror service the route names now (for the label); none once
    /// a reload took the route's `mirror` away.
    pub service: std::sync::Mutex<Option<Arc<str>>>,
    /// Copies answered, by class (1xx to 5xx).
    pub answered: [AtomicU64; 5],
    pub failed: [AtomicU64; 3],
    pub abandoned: [AtomicU64; 4],
    pub in_flight: AtomicUsize,
}

impl MirrorMetrics {
    /// A copy was answered with `status` (its body read to its end).
    pub fn answered(&self, status: u16) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.answered[class].fetch_add(1, Ordering::Relaxed);
    }

    pub fn failed(&self, why: MirrorFailure) {
        self.failed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn abandoned(&self, why: Abandoned) {
        self.abandoned[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The copies answered, failed and abandoned so far.
    pub fn totals(&self) -> (u64, u64, u64) {
        let sum = |a: &[AtomicU64]| a.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        (sum(&self.answered), sum(&self.failed), sum(&self.abandoned))
    }
}

/// Writes the mirror families, for the routes (by name) that mirror now.
pub(super) fn render_mirrors<'a>(
    out: &mut String,
    routes: impl Iterator<Item = (&'a str, &'a MirrorMetrics)>,
) {
    let mirrored = routes.filter_map(|(route, m)| {
        let service = m.service.lock().ok()?.clone()?;
        Some((label(route), label(&service), m))
    });
    let mirrored: Vec<_> = mirrored.collect();
    family(
        out,
        "sluicegate_mirror_requests_total",
        "counter",
        "Mirror copies answered, by route, mirror service and status class.",
        mirrored.iter().flat_map(|(route, service, m)| {
            m.answered.iter().enumerate().map(move |(i, c)| {
                (
                    format!(
                        "route=\"{route}\",service=\"{service}\",class=\"{}xx\"",
                        i + 1
                    ),
                    c.load(Ordering::Relaxed),
                )
            })
        }),
    );
    family(
        out,
        "sluicegate_mirror_failures_total",
        "counter",
        "Mirror copies without a whole answer, by route and reason.",
        mirrored.iter().flat_map(|(route, _, m)| {
            MirrorFailure::ALL.into_iter().map(move |why| {
                (
                    format!("route=\"{route}\",reason=\"{}\"", why.name()),
                    m.failed[why as usize].load(Ordering::Relaxed),
                )
            })
        }),
    );
    family(
        out,
        "sluicegate_mirror_abandoned_total",
        "counter",
        "Mirror copies given up (never the request itself), by route and reason.",
        mirrored.iter().flat_map(|(route, _, m)| {
            Abandoned::ALL.into_iter().map(move |why| {
                (
                    format!("route=\"{route}\",reason=\"{}\"", why.name()),
                    m.abandoned[why as usize].load(Ordering::Relaxed),
                )
            })
        }),
    );
    family(
        out,
        "sluicegate_mirror_in_flight",
        "gauge",
        "Mirror copies in flight now, by route.",
        mirrored.iter().map(|(route, _, m)| {
            (
                format!("route=\"{route}\""),
                m.in_flight.load(Ordering::Relaxed),
            )
        }),
    );
}
