//! Lock-free counters and latency histograms, and their Prometheus text form.
//!
//! Labels are bounded: route and service names and endpoint addresses come
//! from the config, never from requests. Metric objects are kept in the
//! registry by name, so a reload keeps counting where it was.

use crate::apps::AppSlot;
use sluicegate_config::GRPC_STATUS_NAMES;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

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

/// Status codes counted one by one: the registered ones and a few that
/// servers and proxies commonly send (nginx's 444 and 494 to 499,
/// Cloudflare's 520 to 527). Any other code is counted as its class's
/// `other` (`code="other"` with `class`); a status outside 100 to 599
/// counts as 1xx or 5xx's other, as its class does.
pub const CODES: [u16; 77] = [
    100, 101, 102, 103, //
    200, 201, 202, 203, 204, 205, 206, 207, 208, 226, //
    300, 301, 302, 303, 304, 305, 306, 307, 308, //
    400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 418,
    421, 422, 423, 424, 425, 426, 428, 429, 431, 444, 451, 494, 495, 496, 497, 499, //
    500, 501, 502, 503, 504, 505, 506, 507, 508, 510, 511, 520, 521, 522, 523, 524, 525, 526, 527,
];

/// Counters per status: one for each of [`CODES`], then one per class
/// for the other codes.
pub const STATUS_SLOTS: usize = CODES.len() + 5;

/// Slot of each status 0 to 599 (under 100: 1xx's other).
static SLOT: [u8; 600] = {
    let mut t = [0u8; 600];
    let mut s = 0;
    while s < 600 {
        let class = if s < 100 { 0 } else { s / 100 - 1 };
        t[s] = (CODES.len() + class) as u8;
        s += 1;
    }
    let mut i = 0;
    while i < CODES.len() {
        t[CODES[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// The counter slot of `status`: one table read, no branch but the
/// bounds clamp.
#[inline]
pub fn status_slot(status: u16) -> usize {
    usize::from(SLOT[usize::from(status).min(599)])
}

/// The status class (0 for 1xx ... 4 for 5xx) a slot counts.
pub fn slot_class(slot: usize) -> usize {
    match CODES.get(slot) {
        Some(c) => usize::from(c / 100) - 1,
        None => slot - CODES.len(),
    }
}

/// Responses by status: see [`CODES`].
#[derive(Debug)]
pub struct StatusCounts([AtomicU64; STATUS_SLOTS]);

impl Default for StatusCounts {
    fn default() -> Self {
        StatusCounts(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl StatusCounts {
    #[inline]
    pub fn record(&self, status: u16) {
        self.0[status_slot(status)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts by class, 1xx to 5xx.
    pub fn classes(&self) -> [u64; 5] {
        let mut out = [0; 5];
        for (slot, c) in self.0.iter().enumerate() {
            out[slot_class(slot)] += c.load(Ordering::Relaxed);
        }
        out
    }

    /// Writes one line per code counted (codes never seen are left out),
    /// with `labels` (already escaped) first.
    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (slot, c) in self.0.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            let _ = match CODES.get(slot) {
                Some(code) => writeln!(out, "{name}{{{labels}{sep}code=\"{code}\"}} {n}"),
                None => writeln!(
                    out,
                    "{name}{{{labels}{sep}code=\"other\",class=\"{}xx\"}} {n}",
                    slot - CODES.len() + 1
                ),
            };
        }
    }
}

/// Why a route's fallback answered: the `cause` label of
/// `sluicegate_fallbacks_total`, in the order of
/// [`RouteMetrics::fallbacks`].
pub const FALLBACK_CAUSES: [&str; 8] = [
    "no_endpoint",
    "breaker_open",
    "busy",
    "connect_failed",
    "retries_exhausted",
    "timeout",
    "upstream_failed",
    "upstream_5xx",
];

/// Per-route counters: responses by status and total latency.
#[derive(Debug)]
pub struct RouteMetrics {
    pub name: String,
    pub status: StatusCounts,
    pub latency: Histogram,
    /// Microseconds spent waiting for upstreams (request sent to response
    /// head), summed over the requests that went upstream.
    pub upstream_us: AtomicU64,
    /// Requests refused 401 by the route's auth (no or unknown credentials).
    pub unauthorized: AtomicU64,
    /// Requests the route's `fault` aborted, and delayed.
    pub fault_aborts: AtomicU64,
    pub fault_delays: AtomicU64,
    /// Requests the route's `fallback` answered, by cause (the order of
    /// [`FALLBACK_CAUSES`]); and those whose fallback service could not
    /// take them (their body had gone upstream), answered the error.
    pub fallbacks: [AtomicU64; FALLBACK_CAUSES.len()],
    pub fallbacks_unsent: AtomicU64,
    /// gRPC calls by the status they ended with (codes 0 to 16); index 17:
    /// calls that ended without one (cut, or a non-gRPC answer).
    pub grpc: [AtomicU64; 18],
    /// The route's `mirror` copies: kept with the route's other counters,
    /// so a reload keeps them too.
    pub mirror: MirrorMetrics,
    /// The route's compressed answers, kept like its other counters.
    pub compress: CompressMetrics,
}

/// A route's compressed answers: how many in each coding (the order of
/// [`crate::proto::compress::Encoding::ALL`]), and the body bytes taken
/// from the upstream and sent compressed.
#[derive(Debug, Default)]
pub struct CompressMetrics {
    pub responses: [AtomicU64; 3],
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
}

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

/// Writes the per-app families, skipping apps with no requests.
pub fn render_apps<'a>(
    out: &mut String,
    apps: impl Iterator<Item = (&'a str, &'a AppSlot)> + Clone,
) {
    type Family = (&'static str, &'static str, fn(&AppSlot) -> u64);
    let families: [Family; 3] = [
        (
            "sluicegate_app_requests_total",
            "Requests authenticated as an app.",
            |a| a.requests.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_app_forbidden_total",
            "Requests of an app refused 403 (service, method or path not allowed).",
            |a| a.forbidden.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_app_limited_total",
            "Requests of an app refused 429 (over its plan).",
            |a| a.limited.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, get) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (id, a) in apps
            .clone()
            .filter(|(_, a)| a.requests.load(Ordering::Relaxed) > 0)
        {
            let _ = writeln!(out, "{name}{{app=\"{}\"}} {}", label(id), get(a));
        }
    }
}

impl RouteMetrics {
    pub fn new(name: &str) -> Self {
        RouteMetrics {
            name: name.to_string(),
            status: Default::default(),
            latency: Histogram::default(),
            upstream_us: AtomicU64::new(0),
            unauthorized: AtomicU64::new(0),
            fault_aborts: AtomicU64::new(0),
            fault_delays: AtomicU64::new(0),
            fallbacks: Default::default(),
            fallbacks_unsent: AtomicU64::new(0),
            grpc: Default::default(),
            mirror: MirrorMetrics::default(),
            compress: CompressMetrics::default(),
        }
    }

    pub fn record(&self, status: u16, us: u64, upstream_us: Option<u64>) {
        self.status.record(status);
        self.latency.observe(us);
        if let Some(up) = upstream_us {
            self.upstream_us.fetch_add(up, Ordering::Relaxed);
        }
    }

    /// Counts a gRPC call's ending status.
    #[cold]
    pub fn record_grpc(&self, status: Option<u8>) {
        let i = status.map_or(17, |s| usize::from(s).min(17));
        self.grpc[i].fetch_add(1, Ordering::Relaxed);
    }
}

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
    out.push_str("# HELP sluicegate_split_requests_total Requests of split routes, by route, the service of the split that answered and status class.\n");
    out.push_str("# TYPE sluicegate_split_requests_total counter\n");
    for m in splits.clone() {
        for (i, n) in m.status.classes().iter().enumerate() {
            let _ = writeln!(
                out,
                "sluicegate_split_requests_total{{route=\"{}\",service=\"{}\",class=\"{}xx\"}} {n}",
                label(&m.route),
                label(&m.service),
                i + 1,
            );
        }
    }
    out.push_str("# HELP sluicegate_split_request_duration_seconds Time from request head to response end on split routes, by route and the service that answered.\n");
    out.push_str("# TYPE sluicegate_split_request_duration_seconds histogram\n");
    for m in splits {
        let l = format!(
            "route=\"{}\",service=\"{}\"",
            label(&m.route),
            label(&m.service)
        );
        m.latency
            .render(out, "sluicegate_split_request_duration_seconds", &l);
    }
}

/// Process-wide counters.
#[derive(Debug, Default)]
pub struct GlobalMetrics {
    /// Client connections open now (also enforces `max_connections`).
    pub open_connections: AtomicUsize,
    pub accepted: AtomicU64,
    /// Connections closed at accept because `max_connections` was reached.
    pub refused: AtomicU64,
    /// Client connections closed because the client did not read a
    /// response within `timeouts.client_write`.
    pub client_write_timeouts: AtomicU64,
    /// Requests from HTTP/2 clients whose trailers were dropped: their
    /// body had a length, which an HTTP/1.1 upstream gets without them.
    pub request_trailers_dropped: AtomicU64,
    /// Upgraded connections (tunnels) open now, opened in all, refused
    /// over `limits.max_tunnels`, and the bytes they carried each way.
    pub tunnels_open: AtomicU64,
    pub tunnels_total: AtomicU64,
    pub tunnels_refused: AtomicU64,
    pub tunnel_bytes_up: AtomicU64,
    pub tunnel_bytes_down: AtomicU64,
    /// Requests answered before a route was chosen (malformed requests,
    /// no route), by status like routes.
    pub unrouted: StatusCounts,
    pub reloads_ok: AtomicU64,
    pub reloads_failed: AtomicU64,
    /// Endpoint sets changed by the discovery plane.
    pub discoveries: AtomicU64,
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

/// Writes the route metric families.
pub fn render_routes<'a>(out: &mut String, routes: impl Iterator<Item = &'a RouteMetrics> + Clone) {
    out.push_str(
        "# HELP sluicegate_requests_total Requests answered, by route and status class.\n",
    );
    out.push_str("# TYPE sluicegate_requests_total counter\n");
    for r in routes.clone() {
        for (i, n) in r.status.classes().iter().enumerate() {
            let _ = writeln!(
                out,
                "sluicegate_requests_total{{route=\"{}\",class=\"{}xx\"}} {n}",
                label(&r.name),
                i + 1,
            );
        }
    }
    out.push_str(
        "# HELP sluicegate_responses_total Requests answered, by route and exact status code (codes seen so far).\n",
    );
    out.push_str("# TYPE sluicegate_responses_total counter\n");
    for r in routes.clone() {
        let l = format!("route=\"{}\"", label(&r.name));
        r.status.render(out, "sluicegate_responses_total", &l);
    }
    out.push_str(
        "# HELP sluicegate_unauthorized_total Requests refused 401 by a route's auth, by route.\n",
    );
    out.push_str("# TYPE sluicegate_unauthorized_total counter\n");
    for r in routes.clone() {
        let _ = writeln!(
            out,
            "sluicegate_unauthorized_total{{route=\"{}\"}} {}",
            label(&r.name),
            r.unauthorized.load(Ordering::Relaxed)
        );
    }
    type Family = (&'static str, &'static str, fn(&RouteMetrics) -> u64);
    let faults: [Family; 2] = [
        (
            "sluicegate_fault_aborts_total",
            "Requests answered by the route's fault injection (abort), by route.",
            |r| r.fault_aborts.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_fault_delays_total",
            "Requests delayed by the route's fault injection, by route.",
            |r| r.fault_delays.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, get) in faults {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for r in routes.clone() {
            let _ = writeln!(out, "{name}{{route=\"{}\"}} {}", label(&r.name), get(r));
        }
    }
    render_mirrors(out, routes.clone());
    render_compress(out, routes.clone());
    out.push_str(
        "# HELP sluicegate_fallbacks_total Requests the route's fallback answered, by route and why its service could not.\n# TYPE sluicegate_fallbacks_total counter\n",
    );
    for r in routes.clone() {
        for (cause, c) in FALLBACK_CAUSES.iter().zip(&r.fallbacks) {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(
                    out,
                    "sluicegate_fallbacks_total{{route=\"{}\",cause=\"{cause}\"}} {n}",
                    label(&r.name)
                );
            }
        }
    }
    out.push_str(
        "# HELP sluicegate_fallbacks_unsent_total Requests answered the error because their body had gone (partly) upstream, so that the fallback service could not take them, by route.\n# TYPE sluicegate_fallbacks_unsent_total counter\n",
    );
    for r in routes.clone() {
        let n = r.fallbacks_unsent.load(Ordering::Relaxed);
        if n > 0 {
            let _ = writeln!(
                out,
                "sluicegate_fallbacks_unsent_total{{route=\"{}\"}} {n}",
                label(&r.name)
            );
        }
    }
    out.push_str(
        "# HELP sluicegate_grpc_requests_total gRPC calls by route and the gRPC status they ended with (none: cut, or no gRPC answer).\n",
    );
    out.push_str("# TYPE sluicegate_grpc_requests_total counter\n");
    for r in routes.clone() {
        for (i, c) in r.grpc.iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            if n == 0 {
                continue;
            }
            let status = GRPC_STATUS_NAMES.get(i).copied().unwrap_or("none");
            let _ = writeln!(
                out,
                "sluicegate_grpc_requests_total{{route=\"{}\",grpc_status=\"{}\"}} {n}",
                label(&r.name),
                status
            );
        }
    }
    out.push_str("# HELP sluicegate_request_duration_seconds Time from request head to response end, by route.\n");
    out.push_str("# TYPE sluicegate_request_duration_seconds histogram\n");
    for r in routes {
        let l = format!("route=\"{}\"", label(&r.name));
        r.latency
            .render(out, "sluicegate_request_duration_seconds", &l);
    }
}

/// Writes the compression families, for the routes that compressed an
/// answer.
fn render_compress<'a>(out: &mut String, routes: impl Iterator<Item = &'a RouteMetrics> + Clone) {
    use crate::proto::compress::Encoding;
    let compressed = routes.filter(|r| {
        r.compress
            .responses
            .iter()
            .any(|c| c.load(Ordering::Relaxed) > 0)
    });
    out.push_str(
        "# HELP sluicegate_compress_responses_total Answers compressed, by route and coding.\n",
    );
    out.push_str("# TYPE sluicegate_compress_responses_total counter\n");
    for r in compressed.clone() {
        for (e, c) in Encoding::ALL.iter().zip(&r.compress.responses) {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(
                    out,
                    "sluicegate_compress_responses_total{{route=\"{}\",algorithm=\"{}\"}} {n}",
                    label(&r.name),
                    e.token()
                );
            }
        }
    }
    out.push_str("# HELP sluicegate_compress_bytes_total Body bytes of compressed answers, by route: taken from the upstream (in) and sent (out).\n");
    out.push_str("# TYPE sluicegate_compress_bytes_total counter\n");
    for r in compressed {
        let c = &r.compress;
        for (direction, n) in [("in", &c.bytes_in), ("out", &c.bytes_out)] {
            let _ = writeln!(
                out,
                "sluicegate_compress_bytes_total{{route=\"{}\",direction=\"{direction}\"}} {}",
                label(&r.name),
                n.load(Ordering::Relaxed)
            );
        }
    }
}

/// Writes the mirror families, for the routes that mirror now.
fn render_mirrors<'a>(out: &mut String, routes: impl Iterator<Item = &'a RouteMetrics> + Clone) {
    let mirrored = routes.filter_map(|r| {
        let service = r.mirror.service.lock().ok()?.clone()?;
        Some((label(&r.name), label(&service), &r.mirror))
    });
    let mirrored: Vec<_> = mirrored.collect();
    out.push_str("# HELP sluicegate_mirror_requests_total Mirror copies answered, by route, mirror service and status class.\n");
    out.push_str("# TYPE sluicegate_mirror_requests_total counter\n");
    for (route, service, m) in &mirrored {
        for (i, c) in m.answered.iter().enumerate() {
            let _ = writeln!(
                out,
                "sluicegate_mirror_requests_total{{route=\"{route}\",service=\"{service}\",class=\"{}xx\"}} {}",
                i + 1,
                c.load(Ordering::Relaxed)
            );
        }
    }
    out.push_str("# HELP sluicegate_mirror_failures_total Mirror copies without a whole answer, by route and reason.\n");
    out.push_str("# TYPE sluicegate_mirror_failures_total counter\n");
    for (route, _, m) in &mirrored {
        for why in MirrorFailure::ALL {
            let n = m.failed[why as usize].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "sluicegate_mirror_failures_total{{route=\"{route}\",reason=\"{}\"}} {n}",
                why.name()
            );
        }
    }
    out.push_str("# HELP sluicegate_mirror_abandoned_total Mirror copies given up (never the request itself), by route and reason.\n");
    out.push_str("# TYPE sluicegate_mirror_abandoned_total counter\n");
    for (route, _, m) in &mirrored {
        for why in Abandoned::ALL {
            let n = m.abandoned[why as usize].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "sluicegate_mirror_abandoned_total{{route=\"{route}\",reason=\"{}\"}} {n}",
                why.name()
            );
        }
    }
    out.push_str("# HELP sluicegate_mirror_in_flight Mirror copies in flight now, by route.\n");
    out.push_str("# TYPE sluicegate_mirror_in_flight gauge\n");
    for (route, _, m) in &mirrored {
        let n = m.in_flight.load(Ordering::Relaxed);
        let _ = writeln!(out, "sluicegate_mirror_in_flight{{route=\"{route}\"}} {n}");
    }
}

pub fn render_global(out: &mut String, g: &GlobalMetrics) {
    let gauge = |out: &mut String, name: &str, help: &str, kind: &str, v: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    };
    gauge(
        out,
        "sluicegate_client_connections",
        "Client connections open now.",
        "gauge",
        g.open_connections.load(Ordering::Relaxed) as u64,
    );
    gauge(
        out,
        "sluicegate_client_connections_accepted_total",
        "Client connections accepted.",
        "counter",
        g.accepted.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_client_connections_refused_total",
        "Client connections closed at accept over limits.max_connections.",
        "counter",
        g.refused.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_client_write_timeouts_total",
        "Client connections closed because the client did not read within timeouts.client_write.",
        "counter",
        g.client_write_timeouts.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_request_trailers_dropped_total",
        "Requests from HTTP/2 clients whose trailers were dropped (a body with a length).",
        "counter",
        g.request_trailers_dropped.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_tunnels_open",
        "Upgraded connections (WebSocket and other tunnels) open now.",
        "gauge",
        g.tunnels_open.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_tunnels_total",
        "Upgraded connections opened (a 101 relayed).",
        "counter",
        g.tunnels_total.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_tunnels_refused_total",
        "Upgrade requests answered 503 over limits.max_tunnels.",
        "counter",
        g.tunnels_refused.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_tunnel_bytes_upstream_total",
        "Bytes tunnels carried from clients to upstreams.",
        "counter",
        g.tunnel_bytes_up.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_tunnel_bytes_downstream_total",
        "Bytes tunnels carried from upstreams to clients.",
        "counter",
        g.tunnel_bytes_down.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_config_reloads_total",
        "Configuration reloads applied.",
        "counter",
        g.reloads_ok.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_config_reload_failures_total",
        "Configuration reloads refused (invalid config).",
        "counter",
        g.reloads_failed.load(Ordering::Relaxed),
    );
    gauge(
        out,
        "sluicegate_discovery_changes_total",
        "Endpoint sets of services changed by DNS discovery.",
        "counter",
        g.discoveries.load(Ordering::Relaxed),
    );
    out.push_str("# HELP sluicegate_unrouted_requests_total Requests answered before a route was chosen (malformed, no route), by status class.\n");
    out.push_str("# TYPE sluicegate_unrouted_requests_total counter\n");
    for (i, n) in g.unrouted.classes().iter().enumerate() {
        let _ = writeln!(
            out,
            "sluicegate_unrouted_requests_total{{class=\"{}xx\"}} {n}",
            i + 1,
        );
    }
    out.push_str("# HELP sluicegate_unrouted_responses_total Requests answered before a route was chosen, by exact status code (codes seen so far).\n");
    out.push_str("# TYPE sluicegate_unrouted_responses_total counter\n");
    g.unrouted
        .render(out, "sluicegate_unrouted_responses_total", "");
}

/// Writes the listener families: TLS handshakes by result, PROXY header
/// errors (every configured listener), and the time left on each
/// certificate the listeners serve now.
pub(crate) fn render_listeners(
    out: &mut String,
    counters: &[(
        std::net::SocketAddr,
        std::sync::Arc<crate::transport::listener::ListenerCounters>,
    )],
    current: &[std::sync::Arc<crate::transport::listener::ListenerRt>],
) {
    use crate::transport::listener::FAILURES;
    let tls: Vec<_> = counters
        .iter()
        .filter(|(a, _)| current.iter().any(|l| l.addr == *a && l.tls.is_some()))
        .collect();
    if !tls.is_empty() {
        let name = "sluicegate_tls_handshakes_total";
        let _ = writeln!(
            out,
            "# HELP {name} TLS handshakes on a listener by result: ok, or why it failed.\n# TYPE {name} counter"
        );
        for (addr, c) in &tls {
            let _ = writeln!(
                out,
                "{name}{{listener=\"{addr}\",result=\"ok\"}} {}",
                c.handshakes_ok.load(Ordering::Relaxed)
            );
            for (i, f) in FAILURES.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "{name}{{listener=\"{addr}\",result=\"{}\"}} {}",
                    f.label(),
                    c.handshakes_failed[i].load(Ordering::Relaxed)
                );
            }
        }
    }
    let proxied: Vec<_> = counters
        .iter()
        .filter(|(a, _)| current.iter().any(|l| l.addr == *a && l.proxy_protocol))
        .collect();
    if !proxied.is_empty() {
        let name = "sluicegate_proxy_protocol_errors_total";
        let _ = writeln!(
            out,
            "# HELP {name} Connections closed for a missing or malformed PROXY header.\n# TYPE {name} counter"
        );
        for (addr, c) in proxied {
            let _ = writeln!(
                out,
                "{name}{{listener=\"{addr}\"}} {}",
                c.proxy_header_errors.load(Ordering::Relaxed)
            );
        }
    }
    let now = crate::transport::tls::certs::unix_now();
    let mut first = true;
    for l in current {
        let Some(t) = &l.tls else { continue };
        for cert in t.certs.certs() {
            let name = "sluicegate_tls_certificate_expiry_seconds";
            if first {
                let _ = writeln!(
                    out,
                    "# HELP {name} Seconds until a served certificate expires (negative once it has).\n# TYPE {name} gauge"
                );
                first = false;
            }
            let cn = cert.names().next().unwrap_or("");
            let _ = writeln!(
                out,
                "{name}{{listener=\"{}\",name=\"{}\",cert=\"{}\"}} {}",
                l.addr,
                label(cn),
                label(&cert.path().display().to_string()),
                cert.not_after_unix() - now
            );
        }
    }
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
    fn every_status_has_a_slot_of_its_class() {
        for status in 0..1000u16 {
            let slot = status_slot(status);
            assert!(slot < STATUS_SLOTS);
            let class = usize::from(status / 100).clamp(1, 5) - 1;
            assert_eq!(slot_class(slot), class, "{status}");
            match CODES.iter().position(|&c| c == status) {
                Some(i) => assert_eq!(slot, i),
                None => assert!(slot >= CODES.len(), "{status}"),
            }
        }
        let c = StatusCounts::default();
        for s in [200, 200, 431, 299, 999] {
            c.record(s);
        }
        assert_eq!(c.classes(), [0, 3, 0, 1, 1]);
        let mut out = String::new();
        c.render(&mut out, "x", "r=\"a\"");
        assert_eq!(
            out,
            "x{r=\"a\",code=\"200\"} 2\nx{r=\"a\",code=\"431\"} 1\n\
             x{r=\"a\",code=\"other\",class=\"2xx\"} 1\n\
             x{r=\"a\",code=\"other\",class=\"5xx\"} 1\n"
        );
    }

    #[test]
    fn label_escaping() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
