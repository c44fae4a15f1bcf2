//! W3C trace context and the spans of sampled requests: the `traceparent`
//! a client sends, the sampling decision, what a worker hands the exporter
//! for each sampled request (through a bounded queue that never blocks a
//! worker: a full queue drops the span and counts it), and the counters.
//! The export itself runs off the request path ([`super::otlp`]).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use compact_str::CompactString;
use tokio::sync::mpsc;

use crate::proto::request_id::RequestId;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A `traceparent` header (version `00` as W3C Trace Context level 1
/// defines it; a later version is read by the same first four fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl Parent {
    /// Parses a `traceparent` value; `None` for an invalid one (which is
    /// then treated as absent, as the specification asks).
    pub fn parse(v: &[u8]) -> Option<Parent> {
        let v = crate::proto::bytes::trim(v);
        if v.len() < 55 || (v.len() > 55 && v[55] != b'-') {
            return None;
        }
        let version = hex_byte(&v[0..2])?;
        if version == 0xff || (version == 0 && v.len() != 55) {
            return None;
        }
        if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, b) in trace_id.iter_mut().enumerate() {
            *b = hex_byte(&v[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, b) in span_id.iter_mut().enumerate() {
            *b = hex_byte(&v[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&v[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(Parent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }
}

/// Two lower-case hex digits (the specification allows no upper case).
fn hex_byte(two: &[u8]) -> Option<u8> {
    let d = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    Some(d(two[0])? << 4 | d(two[1])?)
}

fn put_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    for b in bytes {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

/// How requests are sampled, from `tracing.sampling.ratio`: a client's
/// `traceparent` decides for its request (sampled flag set or not); a
/// request without one is sampled with the ratio.
#[derive(Debug, Clone, Copy)]
pub struct Sampler {
    /// A random `u64` below this samples; `u64::MAX` with `always`.
    threshold: u64,
    always: bool,
}

impl Sampler {
    pub fn new(ratio: f64) -> Sampler {
        Sampler {
            threshold: (ratio.clamp(0.0, 1.0) * u64::MAX as f64) as u64,
            always: ratio >= 1.0,
        }
    }

    /// Whether a request with `parent` (or none) is sampled.
    #[inline]
    pub fn sample(&self, parent: Option<&Parent>) -> bool {
        match parent {
            Some(p) => p.sampled,
            None => self.always || (self.threshold > 0 && fastrand::u64(..) < self.threshold),
        }
    }
}

/// A sampled request's span, from its start: its ids, its parent, and
/// what the request asked.
#[derive(Debug, Clone)]
pub struct Sampled {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The client's span, when it sent a `traceparent`.
    pub parent: Option<[u8; 8]>,
    pub start: SystemTime,
    pub method: CompactString,
    /// The path as received (no query: it may carry secrets).
    pub path: CompactString,
}

impl Sampled {
    /// A new span: the parent's trace, or a new one.
    pub fn start(parent: Option<&Parent>, method: &[u8], path: &[u8]) -> Sampled {
        let nonzero = |mut n: u64| {
            while n == 0 {
                n = fastrand::u64(..);
            }
            n
        };
        let trace_id = match parent {
            Some(p) => p.trace_id,
            None => {
                let hi = nonzero(fastrand::u64(..)).to_be_bytes();
                let lo = fastrand::u64(..).to_be_bytes();
                std::array::from_fn(|i| if i < 8 { hi[i] } else { lo[i - 8] })
            }
        };
        Sampled {
            trace_id,
            span_id: nonzero(fastrand::u64(..)).to_be_bytes(),
            parent: parent.map(|p| p.span_id),
            start: SystemTime::now(),
            method: CompactString::from_utf8_lossy(method),
            path: CompactString::from_utf8_lossy(path),
        }
    }

    /// Appends `traceparent: 00-<trace>-<this span>-01\r\n`: the upstream's
    /// parent is the gateway's span.
    pub fn write_h1(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"traceparent: ");
        self.write_value(out);
        out.extend_from_slice(b"\r\n");
    }

    /// Appends the `traceparent` value naming this span.
    pub fn write_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"00-");
        put_hex(out, &self.trace_id);
        out.push(b'-');
        put_hex(out, &self.span_id);
        out.extend_from_slice(b"-01");
    }
}

/// What the current request says of itself beyond its head: its id, and
/// its span when sampled.
#[derive(Debug, Default, Clone)]
pub struct Ids {
    pub rid: RequestId,
    /// The id was made here (or replaced an untrusted one): it goes
    /// upstream as a header of its own. A trusted proxy's id is passed on
    /// in its own header, as received.
    pub made: bool,
    pub sampled: Option<Sampled>,
}

impl Ids {
    /// The header fields the gateway adds upstream: the id it made, the
    /// `traceparent` naming its span.
    #[inline]
    pub fn write_upstream_h1(&self, out: &mut Vec<u8>) {
        if self.made {
            self.rid.write_h1(out);
        }
        if let Some(s) = &self.sampled {
            s.write_h1(out);
        }
    }
}

impl Ids {
    /// The fields of [`Ids::write_upstream_h1`], each given to `add` as a
    /// name and a value (for an HTTP/2 upstream).
    pub fn each_upstream(&self, add: &mut impl FnMut(&[u8], &[u8])) {
        if self.made && !self.rid.value().is_empty() && !self.rid.name().is_empty() {
            add(self.rid.name(), self.rid.value());
        }
        if let Some(s) = &self.sampled {
            let mut v = Vec::with_capacity(55);
            s.write_value(&mut v);
            add(b"traceparent", &v);
        }
    }
}

/// One sampled request, as a worker hands it to the exporter.
#[derive(Debug)]
pub struct SpanRecord {
    pub span: Sampled,
    pub route: CompactString,
    pub service: CompactString,
    pub endpoint: CompactString,
    pub request_id: CompactString,
    pub status: u16,
    pub total_us: u64,
    pub upstream_us: Option<u64>,
    pub http2: bool,
    pub tls: bool,
}

/// The process's side of the span queue: workers push, the exporter task
/// ([`super::otlp::run`]) takes.
#[derive(Debug)]
pub struct Tracer {
    tx: mpsc::Sender<SpanRecord>,
    rx: Mutex<Option<mpsc::Receiver<SpanRecord>>>,
    /// Spans dropped because the queue was full (the exporter behind).
    pub dropped: AtomicU64,
    /// Spans the collector took, and spans lost because an export failed.
    pub exported: AtomicU64,
    pub export_failed: AtomicU64,
}

impl Tracer {
    /// A queue of `capacity` spans.
    pub fn new(capacity: usize) -> Tracer {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        Tracer {
            tx,
            rx: Mutex::new(Some(rx)),
            dropped: AtomicU64::new(0),
            exported: AtomicU64::new(0),
            export_failed: AtomicU64::new(0),
        }
    }

    /// Queues a span without waiting; a full queue drops it (counted).
    pub fn push(&self, span: SpanRecord) {
        if self.tx.try_send(span).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The receiving end, once (for the exporter task).
    pub(crate) fn take_receiver(&self) -> Option<mpsc::Receiver<SpanRecord>> {
        self.rx.lock().ok()?.take()
    }

    /// The span counters in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        for (name, help, v) in [
            (
                "sluicegate_trace_spans_exported_total",
                "Spans of sampled requests the OTLP collector accepted.",
                &self.exported,
            ),
            (
                "sluicegate_trace_spans_dropped_total",
                "Spans dropped because the export queue (tracing.queue) was full.",
                &self.dropped,
            ),
            (
                "sluicegate_trace_spans_export_failed_total",
                "Spans lost because an export to the collector failed.",
                &self.export_failed,
            ),
        ] {
            let v = v.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &[u8] = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn traceparent_parses_and_is_written_back_with_the_gateway_span() {
        let p = Parent::parse(TP).unwrap();
        assert!(p.sampled);
        assert_eq!(p.span_id, [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]);
        let s = Sampled::start(Some(&p), b"GET", b"/");
        assert_eq!((s.trace_id, s.parent), (p.trace_id, Some(p.span_id)));
        assert_ne!(s.span_id, p.span_id);
        let mut out = Vec::new();
        s.write_h1(&mut out);
        let line = String::from_utf8(out).unwrap();
        assert!(line.starts_with("traceparent: 00-0af7651916cd43dd8448eb211c80319c-"));
        assert!(
            line.ends_with("-01\r\n") && line.len() == 13 + 55 + 2,
            "{line}"
        );
        let back = Parent::parse(&line.as_bytes()[13..68]).unwrap();
        assert_eq!(back.span_id, s.span_id);
        let unsampled = Parent::parse(&[&TP[..53], b"00"].concat()).unwrap();
        assert!(!unsampled.sampled);
    }

    #[test]
    fn invalid_traceparents_are_ignored() {
        let bad: [&[u8]; 7] = [
            b"",
            &TP[..54],
            b"00-00000000000000000000000000000000-b7ad6b7169203331-01",
            b"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            b"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            b"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        ];
        for b in bad {
            assert_eq!(Parent::parse(b), None, "{:?}", String::from_utf8_lossy(b));
        }
        // A later version may carry more fields.
        assert!(
            Parent::parse(b"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x").is_some()
        );
    }

    #[test]
    fn the_parent_decides_else_the_ratio() {
        let p = Parent::parse(TP).unwrap();
        let off = Parent {
            sampled: false,
            ..p
        };
        for ratio in [0.0, 0.5, 1.0] {
            let s = Sampler::new(ratio);
            assert!(s.sample(Some(&p)));
            assert!(!s.sample(Some(&off)));
        }
        assert!((0..1000).all(|_| Sampler::new(1.0).sample(None)));
        assert!((0..1000).all(|_| !Sampler::new(0.0).sample(None)));
        let half = (0..10_000)
            .filter(|_| Sampler::new(0.5).sample(None))
            .count();
        assert!((4_000..6_000).contains(&half), "{half}");
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let t = Tracer::new(2);
        let rec = || SpanRecord {
            span: Sampled::start(None, b"GET", b"/"),
            route: "r".into(),
            service: "s".into(),
            endpoint: "e".into(),
            request_id: "id".into(),
            status: 200,
            total_us: 1,
            upstream_us: None,
            http2: false,
            tls: false,
        };
        for _ in 0..5 {
            t.push(rec());
        }
        assert_eq!(t.dropped.load(Ordering::Relaxed), 3);
        let mut rx = t.take_receiver().unwrap();
        assert!(rx.try_recv().is_ok() && rx.try_recv().is_ok() && rx.try_recv().is_err());
        assert!(t.take_receiver().is_none());
    }
}
