//! A request's id and trace context, decided once its head is read: the
//! id a trusted proxy sent is kept, any other is replaced by one the
//! worker makes; with `tracing`, the client's `traceparent` (or the
//! sampling ratio) decides whether the request gets a span, and a sampled
//! request's span is queued for export when it ends. An unsampled
//! request's `traceparent` and `tracestate` pass on untouched. Each takes
//! what it reads: the worker and the peer's address, or the request's
//! [`Link`]; none the connection.

use std::net::IpAddr;
use std::ops::Range;
use std::time::Instant;

use super::peer::Link;
use crate::observe::trace::{Parent, Sampled, SpanRecord};
use crate::snapshot::Snapshot;
use crate::upstream::forward::Outcome;
use crate::worker::{Bufs, Worker};

/// Sets `bufs.ids` for the request whose head is in `bufs` (`path`:
/// its path, for a span), from a connection with `peer` on `worker`, and
/// marks the client's fields the gateway replaces so they are not
/// forwarded.
pub(super) fn request_ids(
    worker: &Worker,
    peer: IpAddr,
    snap: &Snapshot,
    bufs: &mut Bufs,
    path: Range<usize>,
) {
    let ids = &mut bufs.ids;
    let name = &*snap.request_id_header;
    ids.rid.set_name(name);
    ids.sampled = None;
    let trusted =
        !snap.trusted_proxies.is_empty() && snap.trusted_proxies.iter().any(|c| c.contains(peer));
    let sampler = snap.sampler.filter(|_| worker.shared.tracer.is_some());
    let raw = bufs.inb.filled();
    let mut kept = false;
    let mut parent = None;
    let mut has_parent = false;
    for h in bufs.req.headers.iter_mut() {
        let n = &raw[h.name.clone()];
        if n.len() == name.len() && n.eq_ignore_ascii_case(name) {
            // Kept once, from a trusted proxy; dropped otherwise.
            if trusted && !kept && ids.rid.keep(&raw[h.value.clone()]) {
                kept = true;
            } else {
                h.skip = true;
            }
        } else if sampler.is_some() && n.len() == 11 && n.eq_ignore_ascii_case(b"traceparent") {
            // Two of them: neither is believed.
            parent = if has_parent {
                None
            } else {
                Parent::parse(&raw[h.value.clone()])
            };
            has_parent = true;
        }
    }
    ids.made = !kept;
    if !kept {
        worker.make_request_id(&mut ids.rid);
    }
    let Some(sampler) = sampler else { return };
    if !sampler.sample(parent.as_ref()) {
        return;
    }
    let method = &raw[bufs.req.method.clone()];
    ids.sampled = Some(Sampled::start(parent.as_ref(), method, &raw[path]));
    if has_parent {
        // The upstream's parent is the gateway's span.
        for h in bufs.req.headers.iter_mut() {
            if raw[h.name.clone()].eq_ignore_ascii_case(b"traceparent") {
                h.skip = true;
            }
        }
    }
}

/// Queues the span of a sampled request that ended with `outcome`
/// (after `total_us`; a tunnel's at its `101`).
#[cold]
pub(super) fn end_span(
    link: Link<'_>,
    bufs: &mut Bufs,
    names: (&str, &str),
    outcome: &Outcome,
    total_us: u64,
) {
    let (Some(span), Some(tracer)) = (bufs.ids.sampled.take(), &link.worker.shared.tracer) else {
        return;
    };
    tracer.push(SpanRecord {
        span,
        route: names.0.into(),
        service: names.1.into(),
        endpoint: outcome
            .endpoint
            .as_ref()
            .map_or("", |e| e.name.as_str())
            .into(),
        request_id: compact_str::CompactString::from_utf8_lossy(bufs.ids.rid.value()),
        status: outcome.status,
        total_us,
        upstream_us: outcome.upstream_us,
        http2: link.http2(),
        tls: link.peer.tls.is_some(),
    });
}

/// Microseconds from `started` to now (for a span that ends before the
/// request's own end is taken, a tunnel's).
pub(super) fn since(started: Instant) -> u64 {
    started.elapsed().as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::codec::{self, Parsed};
    use crate::session::testing::{runtime, worker_on};

    /// The id a client sends is kept only from a trusted proxy, once, and
    /// not forwarded when replaced; no connection is needed to decide it.
    #[test]
    fn a_request_id_is_kept_from_a_trusted_proxy_only() {
        let config = "listen: [\"127.0.0.1:9\"]\ntrusted_proxies: [\"192.0.2.0/24\"]\n\
                      routes: [{ name: a, match: { path: / }, respond: { status: 204 } }]\n";
        runtime().block_on(async {
            let worker = worker_on(config);
            let snap = worker.shared.snapshot.load_full();
            let mut bufs = worker.take_bufs();
            for (peer, kept) in [("192.0.2.7", true), ("198.51.100.1", false)] {
                bufs.inb.clear();
                bufs.inb.put(
                    b"GET / HTTP/1.1\r\nHost: a\r\nX-Request-Id: abc\r\nX-Request-Id: def\r\n\r\n",
                );
                let max = snap.limits.max_header_bytes;
                let Ok(Parsed::Complete(_)) =
                    codec::parse_request(bufs.inb.filled(), max, &mut bufs.req)
                else {
                    panic!("the head does not parse");
                };
                let path = bufs.req.target.clone();
                request_ids(&worker, peer.parse().unwrap(), &snap, &mut bufs, path);
                assert_eq!(bufs.ids.made, !kept, "{peer}");
                assert_eq!(bufs.ids.rid.value() == b"abc", kept, "{peer}");
                assert_eq!(bufs.ids.rid.value().len(), if kept { 3 } else { 32 });
                let skipped: Vec<bool> = bufs.req.headers.iter().map(|h| h.skip).collect();
                // Host stays; the first id goes on only as the one kept.
                assert_eq!(skipped, [false, !kept, true], "{peer}");
            }
            worker.give_bufs(bufs);
        });
    }
}
