//! Process-wide counters ([`GlobalMetrics`]) and their families, and the
//! listeners' (TLS handshakes, PROXY header errors, certificate expiry).

use super::{by_class, family, header, label, StatusCounts};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

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
    /// Long-lived streams closed because a config change or a token's
    /// expiry revoked what they authenticated with, by route and reason
    /// (rare, and counted off the request path: behind a lock).
    pub revoked: std::sync::Mutex<std::collections::BTreeMap<(String, &'static str), u64>>,
}

impl GlobalMetrics {
    /// Counts a stream of `route` closed for `reason`.
    pub fn count_revoked(&self, route: &str, reason: &'static str) {
        let mut m = self.revoked.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((route.to_string(), reason)).or_default() += 1;
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
    let name = "sluicegate_revoked_streams_total";
    let _ = writeln!(
        out,
        "# HELP {name} Long-lived streams (tunnels, HTTP/2 and gRPC streams) closed because what they authenticated with was revoked or expired.\n# TYPE {name} counter"
    );
    for ((route, reason), n) in g.revoked.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let _ = writeln!(
            out,
            "{name}{{route=\"{}\",reason=\"{reason}\"}} {n}",
            label(route)
        );
    }
    family(
        out,
        "sluicegate_unrouted_requests_total",
        "counter",
        "Requests answered before a route was chosen (malformed, no route), by status class.",
        by_class(String::new(), g.unrouted.classes()),
    );
    header(
        out,
        "sluicegate_unrouted_responses_total",
        "counter",
        "Requests answered before a route was chosen, by exact status code (codes seen so far).",
    );
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
