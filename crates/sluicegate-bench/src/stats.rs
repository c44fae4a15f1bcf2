//! What a run measured: latency histograms (microseconds, HdrHistogram), error
//! counts by class, status counts and the per-second timeline; their exact
//! merge (threads of one run, or the parts of a distributed run) and the JSON
//! form they are written and read back in.

use std::collections::BTreeMap;

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The largest latency a histogram holds, in microseconds (one hour); larger
/// values are recorded as this.
pub const MAX_MICROS: u64 = 3_600_000_000;

/// A latency histogram in microseconds with three significant figures.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("valid histogram bounds")
}

/// Records `micros` (at least 1, at most [`MAX_MICROS`]).
#[inline]
pub fn record(h: &mut Histogram<u64>, micros: u64) {
    h.saturating_record(micros.max(1));
}

/// Failed requests by cause, in the shape of ab's "Failed requests" and
/// wrk's "Socket errors" lines.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errors {
    /// The connection could not be made (refused, unreachable, timed out).
    pub connect: u64,
    /// No complete response within the request timeout.
    pub timeout: u64,
    /// The connection failed or closed before the response head was read, or
    /// the response could not be parsed.
    pub read: u64,
    /// The request could not be written.
    pub write: u64,
    /// A complete response whose status was not 2xx.
    pub status: u64,
    /// The body ended before the length its head declared.
    pub length: u64,
}

impl Errors {
    /// Failed requests: every class except non-2xx answers, which are
    /// complete responses.
    pub fn failed(&self) -> u64 {
        self.connect + self.timeout + self.read + self.write + self.length
    }

    /// Every class, non-2xx included.
    pub fn total(&self) -> u64 {
        self.failed() + self.status
    }

    pub fn add(&mut self, other: &Errors) {
        self.connect += other.connect;
        self.timeout += other.timeout;
        self.read += other.read;
        self.write += other.write;
        self.status += other.status;
        self.length += other.length;
    }

    /// Adds `n` to the class `class`.
    pub fn count(&mut self, class: ErrorClass, n: u64) {
        let slot = match class {
            ErrorClass::Connect => &mut self.connect,
            ErrorClass::Timeout => &mut self.timeout,
            ErrorClass::Read => &mut self.read,
            ErrorClass::Write => &mut self.write,
            ErrorClass::Length => &mut self.length,
        };
        *slot += n;
    }
}

/// The classes of a request that got no complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    Connect,
    Timeout,
    Read,
    Write,
    Length,
}

/// One second of a run, as counted by the threads (and, after a merge, by
/// every part).
#[derive(Debug, Clone)]
pub struct Second {
    /// Seconds since the run's start.
    pub at: u64,
    /// Responses completed in this second.
    pub completed: u64,
    pub errors: Errors,
    pub bytes_read: u64,
    /// Latencies of the responses completed in this second.
    pub latency: Histogram<u64>,
}

impl Second {
    pub fn new(at: u64) -> Second {
        Second {
            at,
            completed: 0,
            errors: Errors::default(),
            bytes_read: 0,
            latency: new_histogram(),
        }
    }

    pub fn add(&mut self, other: &Second) {
        self.completed += other.completed;
        self.errors.add(&other.errors);
        self.bytes_read += other.bytes_read;
        self.latency
            .add(&other.latency)
            .expect("same histogram bounds");
    }
}

/// Everything a run (or a merge of runs) measured.
#[derive(Debug, Clone)]
pub struct Totals {
    /// Requests written to a connection (or that failed to connect).
    pub sent: u64,
    /// Complete responses, whatever their status.
    pub completed: u64,
    pub errors: Errors,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Connections opened successfully.
    pub connections_opened: u64,
    /// Responses by status code.
    pub statuses: BTreeMap<u16, u64>,
    /// From the intended send time (open loop) or the send (closed loop) to
    /// the response's last byte.
    pub latency: Histogram<u64>,
    /// Time to connect, per request: 0 for a request on a reused connection.
    pub connect: Histogram<u64>,
    /// From the request's last byte written to the response's first byte.
    pub waiting: Histogram<u64>,
    /// Latency minus connect time.
    pub processing: Histogram<u64>,
    /// The body length of the first complete response (ab's "Document Length").
    pub document_length: Option<u64>,
    /// The per-second timeline, ordered by `at`.
    pub seconds: Vec<Second>,
    /// Requests completed per second by each thread of each part (wrk's
    /// "Req/Sec" thread statistic is over these).
    pub thread_rates: Vec<u64>,
}

impl Default for Totals {
    fn default() -> Self {
        Totals {
            sent: 0,
            completed: 0,
            errors: Errors::default(),
            bytes_read: 0,
            bytes_written: 0,
            connections_opened: 0,
            statuses: BTreeMap::new(),
            latency: new_histogram(),
            connect: new_histogram(),
            waiting: new_histogram(),
            processing: new_histogram(),
            document_length: None,
            seconds: Vec::new(),
            thread_rates: Vec::new(),
        }
    }
}

impl Totals {
    /// Adds one second's counts to the timeline (merging with a second of the
    /// same `at`) and to the latency histogram.
    pub fn add_second(&mut self, second: &Second) {
        self.latency
            .add(&second.latency)
            .expect("same histogram bounds");
        match self.seconds.binary_search_by_key(&second.at, |s| s.at) {
            Ok(i) => self.seconds[i].add(second),
            Err(i) => {
                let mut s = Second::new(second.at);
                s.add(second);
                self.seconds.insert(i, s);
            }
        }
    }

    /// Merges `other` into `self`: counts add, histograms merge bucket by
    /// bucket (exact), timelines add second by second. `offset` shifts
    /// `other`'s seconds (a part that started later than the first one).
    pub fn merge(&mut self, other: &Totals, offset: u64) {
        self.sent += other.sent;
        self.completed += other.completed;
        self.errors.add(&other.errors);
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
        self.connections_opened += other.connections_opened;
        for (code, n) in &other.statuses {
            *self.statuses.entry(*code).or_default() += n;
        }
        for (mine, theirs) in [
            (&mut self.connect, &other.connect),
            (&mut self.waiting, &other.waiting),
            (&mut self.processing, &other.processing),
        ] {
            mine.add(theirs).expect("same histogram bounds");
        }
        if self.document_length.is_none() {
            self.document_length = other.document_length;
        }
        for second in &other.seconds {
            let mut s = second.clone();
            s.at += offset;
            self.add_second(&s);
        }
        self.thread_rates.extend_from_slice(&other.thread_rates);
    }
}

/// The JSON document of a run: the settings that matter to a reader, the
/// wall-clock start, and every total with histograms in HdrHistogram's V2
/// encoding (base64), so that parts merge exactly.
#[derive(Debug, Serialize, Deserialize)]
pub struct Document {
    /// Always "sluicegate-bench/1".
    pub format: String,
    pub urls: Vec<String>,
    pub mode: String,
    pub connections: u64,
    pub threads: u64,
    pub keep_alive: bool,
    pub pipeline: u64,
    /// The requested rate (open loop), requests per second.
    pub rate: Option<f64>,
    /// Wall-clock start, microseconds since the Unix epoch.
    pub start_unix_micros: u64,
    /// From the start to the last response, seconds.
    pub duration_secs: f64,
    /// How many runs this document merges (1 for a single run).
    pub parts: u64,
    pub sent: u64,
    pub completed: u64,
    pub errors: Errors,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub connections_opened: u64,
    pub statuses: BTreeMap<String, u64>,
    pub document_length: Option<u64>,
    pub requests_per_sec: f64,
    /// Latency summary in microseconds (for readers; the histograms are the
    /// exact data).
    pub latency_micros: Summary,
    pub histograms: EncodedHistograms,
    pub seconds: Vec<EncodedSecond>,
    pub thread_rates: Vec<u64>,
}

/// A latency summary, microseconds.
#[derive(Debug, Serialize, Deserialize)]
pub struct Summary {
    pub min: u64,
    pub mean: f64,
    pub stdev: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Summary {
    pub fn of(h: &Histogram<u64>) -> Summary {
        Summary {
            min: h.min(),
            mean: h.mean(),
            stdev: h.stdev(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct EncodedHistograms {
    pub latency: String,
    pub connect: String,
    pub waiting: String,
    pub processing: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct EncodedSecond {
    pub at: u64,
    pub completed: u64,
    pub errors: Errors,
    pub bytes_read: u64,
    pub p50_micros: u64,
    pub p99_micros: u64,
    pub latency: String,
}

/// HdrHistogram's V2 encoding of `h`, in base64.
pub fn encode(h: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    V2Serializer::new()
        .serialize(h, &mut bytes)
        .expect("serializing into memory cannot fail");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The histogram [`encode`] wrote, re-bounded like [`new_histogram`].
pub fn decode(text: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("histogram is not base64: {e}"))?;
    let h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("histogram does not decode: {e:?}"))?;
    let mut out = new_histogram();
    out.add(&h)
        .map_err(|e| format!("histogram out of range: {e:?}"))?;
    Ok(out)
}

impl Totals {
    /// Reads back the totals of a [`Document`].
    pub fn from_document(doc: &Document) -> Result<Totals, String> {
        let mut statuses = BTreeMap::new();
        for (code, n) in &doc.statuses {
            let code: u16 = code
                .parse()
                .map_err(|_| format!("status {code:?} is not a number"))?;
            statuses.insert(code, *n);
        }
        let mut seconds = Vec::with_capacity(doc.seconds.len());
        for s in &doc.seconds {
            seconds.push(Second {
                at: s.at,
                completed: s.completed,
                errors: s.errors,
                bytes_read: s.bytes_read,
                latency: decode(&s.latency)?,
            });
        }
        seconds.sort_by_key(|s| s.at);
        Ok(Totals {
            sent: doc.sent,
            completed: doc.completed,
            errors: doc.errors,
            bytes_read: doc.bytes_read,
            bytes_written: doc.bytes_written,
            connections_opened: doc.connections_opened,
            statuses,
            latency: decode(&doc.histograms.latency)?,
            connect: decode(&doc.histograms.connect)?,
            waiting: decode(&doc.histograms.waiting)?,
            processing: decode(&doc.histograms.processing)?,
            document_length: doc.document_length,
            seconds,
            thread_rates: doc.thread_rates.clone(),
        })
    }

    /// The encoded parts of a [`Document`] for these totals.
    pub fn encoded(&self) -> (EncodedHistograms, Vec<EncodedSecond>) {
        let hists = EncodedHistograms {
            latency: encode(&self.latency),
            connect: encode(&self.connect),
            waiting: encode(&self.waiting),
            processing: encode(&self.processing),
        };
        let seconds = self
            .seconds
            .iter()
            .map(|s| EncodedSecond {
                at: s.at,
                completed: s.completed,
                errors: s.errors,
                bytes_read: s.bytes_read,
                p50_micros: s.latency.value_at_quantile(0.5),
                p99_micros: s.latency.value_at_quantile(0.99),
                latency: encode(&s.latency),
            })
            .collect();
        (hists, seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = new_histogram();
        for v in values {
            record(&mut h, v);
        }
        h
    }

    #[test]
    fn percentiles_on_known_data() {
        // 1..=10000 microseconds, once each.
        let h = filled(1..=10_000);
        assert_eq!(h.len(), 10_000);
        assert_eq!(h.min(), 1);
        assert!(h.equivalent(h.max(), 10_000));
        // Three significant figures: within 0.1% of the exact rank.
        for (q, exact) in [(0.5, 5_000u64), (0.9, 9_000), (0.99, 9_900), (0.999, 9_990)] {
            let got = h.value_at_quantile(q);
            let err = got.abs_diff(exact) as f64 / exact as f64;
            assert!(err <= 0.001, "q{q}: {got} vs {exact}");
        }
        assert!((h.mean() - 5_000.5).abs() < 5.0, "mean {}", h.mean());
        // Standard deviation of 1..=n is sqrt((n^2 - 1) / 12).
        let sd = ((10_000f64 * 10_000.0 - 1.0) / 12.0).sqrt();
        assert!((h.stdev() - sd).abs() / sd < 0.002, "sd {}", h.stdev());
    }

    #[test]
    fn small_values_are_exact() {
        let h = filled([3, 3, 3, 7, 7, 100]);
        assert_eq!(h.value_at_quantile(0.5), 3);
        assert_eq!(h.value_at_quantile(0.8), 7);
        assert_eq!(h.max(), 100);
        // Zero is recorded as 1 microsecond, never lost.
        let z = filled([0]);
        assert_eq!(z.len(), 1);
        assert_eq!(z.min(), 1);
    }

    #[test]
    fn merge_of_parts_equals_the_whole() {
        let values: Vec<u64> = (0..30_000u64).map(|i| (i * 7919) % 250_000 + 1).collect();
        let whole = filled(values.iter().copied());
        let mut merged = Totals::default();
        for part in values.chunks(10_000) {
            let mut t = Totals::default();
            let mut s = Second::new(0);
            for v in part {
                record(&mut s.latency, *v);
                s.completed += 1;
            }
            t.completed = part.len() as u64;
            t.add_second(&s);
            // Round-trip through the JSON encoding, as `merge` does.
            let back = decode(&encode(&t.latency)).unwrap();
            assert_eq!(back, t.latency);
            merged.merge(&t, 0);
        }
        assert_eq!(merged.latency, whole);
        assert_eq!(merged.completed, 30_000);
        for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                merged.latency.value_at_quantile(q),
                whole.value_at_quantile(q)
            );
        }
        assert_eq!(merged.seconds.len(), 1);
        assert_eq!(merged.seconds[0].completed, 30_000);
    }

    #[test]
    fn timelines_align_by_offset() {
        let mut a = Totals::default();
        let mut b = Totals::default();
        for at in 0..3 {
            let mut s = Second::new(at);
            s.completed = 10;
            record(&mut s.latency, 5);
            a.add_second(&s);
            b.add_second(&s);
        }
        // b started one second after a.
        a.merge(&b, 1);
        let counts: Vec<(u64, u64)> = a.seconds.iter().map(|s| (s.at, s.completed)).collect();
        assert_eq!(counts, vec![(0, 10), (1, 20), (2, 20), (3, 10)]);
        assert_eq!(a.latency.len(), 6);
    }

    #[test]
    fn error_totals() {
        let mut e = Errors::default();
        e.count(ErrorClass::Connect, 2);
        e.count(ErrorClass::Length, 1);
        e.status = 5;
        assert_eq!(e.failed(), 3);
        assert_eq!(e.total(), 8);
    }
}
