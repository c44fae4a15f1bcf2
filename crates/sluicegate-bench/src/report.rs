//! A finished run and its text reports: ab's shape (the seed reports'
//! figures: Requests per second, Time per request, Connection Times,
//! Percentage of requests served within a certain time), wrk's shape, and the
//! JSON document that `merge` reads back.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::stats::{Document, Summary, Totals};

/// The settings a report shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    pub urls: Vec<String>,
    /// "closed" or "open".
    pub mode: String,
    pub connections: u64,
    pub threads: u64,
    pub keep_alive: bool,
    pub pipeline: u64,
    pub rate: Option<f64>,
    pub start_unix_micros: u64,
    pub duration_secs: f64,
    pub parts: u64,
}

/// A finished run, or the merge of several.
#[derive(Debug)]
pub struct Run {
    pub meta: Meta,
    pub totals: Totals,
}

/// The text formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// ab's report (apache2-utils)
    Ab,
    /// wrk's report
    Wrk,
    /// the JSON document (mergeable)
    Json,
}

impl Run {
    pub fn requests_per_sec(&self) -> f64 {
        if self.meta.duration_secs > 0.0 {
            self.totals.completed as f64 / self.meta.duration_secs
        } else {
            0.0
        }
    }

    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Ab => self.ab(),
            Format::Wrk => self.wrk(),
            Format::Json => {
                let mut s =
                    serde_json::to_string_pretty(&self.document()).expect("a document serializes");
                s.push('\n');
                s
            }
        }
    }

    pub fn document(&self) -> Document {
        let (histograms, seconds) = self.totals.encoded();
        let t = &self.totals;
        Document {
            format: "sluicegate-bench/1".into(),
            urls: self.meta.urls.clone(),
            mode: self.meta.mode.clone(),
            connections: self.meta.connections,
            threads: self.meta.threads,
            keep_alive: self.meta.keep_alive,
            pipeline: self.meta.pipeline,
            rate: self.meta.rate,
            start_unix_micros: self.meta.start_unix_micros,
            duration_secs: self.meta.duration_secs,
            parts: self.meta.parts,
            sent: t.sent,
            completed: t.completed,
            errors: t.errors,
            bytes_read: t.bytes_read,
            bytes_written: t.bytes_written,
            connections_opened: t.connections_opened,
            statuses: t
                .statuses
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            document_length: t.document_length,
            requests_per_sec: self.requests_per_sec(),
            latency_micros: Summary::of(&t.latency),
            histograms,
            seconds,
            thread_rates: t.thread_rates.clone(),
        }
    }

    pub fn from_document(doc: &Document) -> Result<Run, String> {
        if doc.format != "sluicegate-bench/1" {
            return Err(format!(
                "unknown format {:?} (expected sluicegate-bench/1)",
                doc.format
            ));
        }
        Ok(Run {
            meta: Meta {
                urls: doc.urls.clone(),
                mode: doc.mode.clone(),
                connections: doc.connections,
                threads: doc.threads,
                keep_alive: doc.keep_alive,
                pipeline: doc.pipeline,
                rate: doc.rate,
                start_unix_micros: doc.start_unix_micros,
                duration_secs: doc.duration_secs,
                parts: doc.parts,
            },
            totals: Totals::from_document(doc)?,
        })
    }

    /// ab's report. Times are in milliseconds with three decimals (ab rounds
    /// to whole milliseconds, too coarse for loopback).
    pub fn ab(&self) -> String {
        let t = &self.totals;
        let m = &self.meta;
        let mut o = String::new();
        let first = m.urls.first().map(String::as_str).unwrap_or("");
        let (host, path) = split_url(first);
        let _ = writeln!(o, "Server Hostname:        {host}");
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "Document Path:          {path}{}",
            if m.urls.len() > 1 {
                " (and others)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "Document Length:        {} bytes",
            t.document_length.unwrap_or(0)
        );
        let _ = writeln!(o);
        let _ = writeln!(o, "Concurrency Level:      {}", m.connections);
        let _ = writeln!(o, "Time taken for tests:   {:.3} seconds", m.duration_secs);
        let _ = writeln!(o, "Complete requests:      {}", t.completed);
        let e = &t.errors;
        let _ = writeln!(o, "Failed requests:        {}", e.failed());
        if e.failed() > 0 {
            let _ = writeln!(
                o,
                "   (Connect: {}, Timeout: {}, Read: {}, Write: {}, Length: {})",
                e.connect, e.timeout, e.read, e.write, e.length
            );
        }
        if e.status > 0 {
            let _ = writeln!(o, "Non-2xx responses:      {}", e.status);
        }
        if m.keep_alive {
            let reused = t
                .completed
                .saturating_sub(t.connections_opened.min(t.completed));
            let _ = writeln!(o, "Keep-Alive requests:    {reused}");
        }
        if let Some(rate) = m.rate {
            let _ = writeln!(o, "Target rate:            {rate:.0} [#/sec] (open loop)");
        }
        let _ = writeln!(o, "Total transferred:      {} bytes", t.bytes_read);
        let _ = writeln!(
            o,
            "Requests per second:    {:.2} [#/sec] (mean)",
            self.requests_per_sec()
        );
        let per = if t.completed > 0 {
            m.duration_secs * 1000.0 / t.completed as f64
        } else {
            0.0
        };
        let _ = writeln!(
            o,
            "Time per request:       {:.3} [ms] (mean)",
            per * m.connections as f64
        );
        let _ = writeln!(
            o,
            "Time per request:       {per:.3} [ms] (mean, across all concurrent requests)"
        );
        let kb = if m.duration_secs > 0.0 {
            t.bytes_read as f64 / 1024.0 / m.duration_secs
        } else {
            0.0
        };
        let _ = writeln!(o, "Transfer rate:          {kb:.2} [Kbytes/sec] received");
        let _ = writeln!(o);
        let _ = writeln!(o, "Connection Times (ms)");
        let _ = writeln!(o, "              min  mean[+/-sd] median   max");
        for (name, h) in [
            ("Connect:", &t.connect),
            ("Processing:", &t.processing),
            ("Waiting:", &t.waiting),
            ("Total:", &t.latency),
        ] {
            let _ = writeln!(
                o,
                "{name:<11} {:>7.3} {:>7.3} {:>6.3} {:>7.3} {:>8.3}",
                ms(h.min()),
                h.mean() / 1000.0,
                h.stdev() / 1000.0,
                ms(h.value_at_quantile(0.5)),
                ms(h.max()),
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "Percentage of the requests served within a certain time (ms)"
        );
        for p in [50, 66, 75, 80, 90, 95, 98, 99] {
            let _ = writeln!(
                o,
                "  {p}%  {:>9.3}",
                ms(t.latency.value_at_quantile(p as f64 / 100.0))
            );
        }
        let _ = writeln!(o, " 100%  {:>9.3} (longest request)", ms(t.latency.max()));
        o
    }

    /// wrk's report, with its latency distribution always shown.
    pub fn wrk(&self) -> String {
        let t = &self.totals;
        let m = &self.meta;
        let mut o = String::new();
        let first = m.urls.first().map(String::as_str).unwrap_or("");
        let _ = writeln!(o, "Running {:.0}s test @ {first}", m.duration_secs.round());
        if m.parts > 1 {
            let _ = writeln!(o, "  merged from {} parts", m.parts);
        }
        let _ = writeln!(
            o,
            "  {} threads and {} connections",
            m.threads, m.connections
        );
        if let Some(rate) = m.rate {
            let _ = writeln!(
                o,
                "  open loop at {rate:.0} requests/sec (latency from the intended send time)"
            );
        }
        let _ = writeln!(o, "  Thread Stats   Avg      Stdev     Max   +/- Stdev");
        let h = &t.latency;
        let _ = writeln!(
            o,
            "    Latency   {:>8} {:>8} {:>8} {:>8.2}%",
            time(h.mean()),
            time(h.stdev()),
            time(h.max() as f64),
            within_stdev(h)
        );
        let (mean, sd, max, within) = sample_stats(&t.thread_rates);
        let _ = writeln!(
            o,
            "    Req/Sec   {:>8} {:>8} {:>8} {:>8.2}%",
            count(mean),
            count(sd),
            count(max),
            within
        );
        let _ = writeln!(o, "  Latency Distribution");
        for p in [50, 75, 90, 99] {
            let _ = writeln!(
                o,
                "     {p}% {:>9}",
                time(h.value_at_quantile(p as f64 / 100.0) as f64)
            );
        }
        let _ = writeln!(o, "  99.9% {:>9}", time(h.value_at_quantile(0.999) as f64));
        let _ = writeln!(
            o,
            "  {} requests in {:.2}s, {} read",
            t.completed,
            m.duration_secs,
            bytes(t.bytes_read as f64)
        );
        let e = &t.errors;
        if e.failed() > 0 {
            let _ = writeln!(
                o,
                "  Socket errors: connect {}, read {}, write {}, timeout {}, length {}",
                e.connect, e.read, e.write, e.timeout, e.length
            );
        }
        if e.status > 0 {
            let _ = writeln!(o, "  Non-2xx responses: {}", e.status);
        }
        let _ = writeln!(o, "Requests/sec: {:>10.2}", self.requests_per_sec());
        let per_sec = if m.duration_secs > 0.0 {
            t.bytes_read as f64 / m.duration_secs
        } else {
            0.0
        };
        let _ = writeln!(o, "Transfer/sec: {:>10}", bytes(per_sec));
        o
    }
}

fn split_url(url: &str) -> (&str, &str) {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    }
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

/// wrk's time format: microseconds in, "849.09us" / "1.47ms" / "2.00s" out.
pub fn time(micros: f64) -> String {
    if micros < 1000.0 {
        format!("{micros:.2}us")
    } else if micros < 1_000_000.0 {
        format!("{:.2}ms", micros / 1000.0)
    } else {
        format!("{:.2}s", micros / 1_000_000.0)
    }
}

/// wrk's count format: "75.58k".
pub fn count(n: f64) -> String {
    if n < 1000.0 {
        format!("{n:.2}")
    } else if n < 1_000_000.0 {
        format!("{:.2}k", n / 1000.0)
    } else {
        format!("{:.2}M", n / 1_000_000.0)
    }
}

/// wrk's byte format (binary units): "159.97MB".
pub fn bytes(n: f64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u < units.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2}{}", units[u])
}

/// The share of recorded values within one standard deviation of the mean.
fn within_stdev(h: &Histogram<u64>) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    let (mean, sd) = (h.mean(), h.stdev());
    let lo = (mean - sd).max(0.0) as u64;
    let hi = (mean + sd) as u64;
    h.count_between(lo, hi) as f64 * 100.0 / h.len() as f64
}

/// Mean, standard deviation, max and the share within one deviation.
fn sample_stats(v: &[u64]) -> (f64, f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<u64>() as f64 / n;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    let sd = var.sqrt();
    let max = *v.iter().max().unwrap_or(&0) as f64;
    let within = v.iter().filter(|&&x| (x as f64 - mean).abs() <= sd).count() as f64 * 100.0 / n;
    (mean, sd, max, within)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{record, Second};

    fn sample_run() -> Run {
        let mut totals = Totals::default();
        for at in 0..2u64 {
            let mut s = Second::new(at);
            for v in 1..=1000u64 {
                record(&mut s.latency, v * 10);
            }
            s.completed = 1000;
            s.bytes_read = 100_000;
            totals.add_second(&s);
            totals.bytes_read += 100_000;
        }
        for v in 0..2000u64 {
            totals
                .connect
                .saturating_record(if v < 20 { 150 } else { 0 });
            record(&mut totals.waiting, 1000);
            record(&mut totals.processing, 5000);
        }
        totals.completed = 2000;
        totals.sent = 2003;
        totals.errors.read = 3;
        totals.errors.status = 7;
        totals.connections_opened = 20;
        totals.statuses.insert(200, 1993);
        totals.statuses.insert(503, 7);
        totals.document_length = Some(75);
        totals.thread_rates = vec![1000, 1000];
        Run {
            meta: Meta {
                urls: vec!["http://127.0.0.1:8080/test.html".into()],
                mode: "closed".into(),
                connections: 20,
                threads: 1,
                keep_alive: true,
                pipeline: 1,
                rate: None,
                start_unix_micros: 1_700_000_000_000_000,
                duration_secs: 2.0,
                parts: 1,
            },
            totals,
        }
    }

    #[test]
    fn ab_report_shape_and_numbers() {
        let r = sample_run().ab();
        for line in [
            "Server Hostname:        127.0.0.1:8080",
            "Document Path:          /test.html",
            "Document Length:        75 bytes",
            "Concurrency Level:      20",
            "Time taken for tests:   2.000 seconds",
            "Complete requests:      2000",
            "Failed requests:        3",
            "   (Connect: 0, Timeout: 0, Read: 3, Write: 0, Length: 0)",
            "Non-2xx responses:      7",
            "Keep-Alive requests:    1980",
            "Requests per second:    1000.00 [#/sec] (mean)",
            "Time per request:       20.000 [ms] (mean)",
            "Time per request:       1.000 [ms] (mean, across all concurrent requests)",
            "Connection Times (ms)",
            "Percentage of the requests served within a certain time (ms)",
        ] {
            assert!(r.contains(line), "missing {line:?} in\n{r}");
        }
        // Latencies 10us..10ms evenly: the median is 5 ms, 90% is 9 ms.
        assert!(
            r.contains("  50%      5.003") || r.contains("  50%      5.000"),
            "{r}"
        );
        assert!(
            r.contains("  90%      9.007") || r.contains("  90%      9.000"),
            "{r}"
        );
        assert!(r.contains(" 100%     10.007 (longest request)"), "{r}");
        let total = r.lines().find(|l| l.starts_with("Total:")).unwrap();
        let cols: Vec<f64> = total
            .split_whitespace()
            .skip(1)
            .map(|c| c.parse().unwrap())
            .collect();
        assert_eq!(cols.len(), 5);
        assert!((cols[1] - 5.005).abs() < 0.01, "mean {total}");
    }

    #[test]
    fn wrk_report_shape_and_numbers() {
        let r = sample_run().wrk();
        for line in [
            "Running 2s test @ http://127.0.0.1:8080/test.html",
            "  1 threads and 20 connections",
            "  Thread Stats   Avg      Stdev     Max   +/- Stdev",
            "  Latency Distribution",
            "  2000 requests in 2.00s, 195.31KB read",
            "  Socket errors: connect 0, read 3, write 0, timeout 0, length 0",
            "  Non-2xx responses: 7",
            "Requests/sec:    1000.00",
            "Transfer/sec:    97.66KB",
        ] {
            assert!(r.contains(line), "missing {line:?} in\n{r}");
        }
        let latency = r
            .lines()
            .find(|l| l.trim_start().starts_with("Latency "))
            .unwrap();
        assert!(
            latency.contains("5.01ms") && latency.contains("10.01ms"),
            "{latency}"
        );
        let rps = r
            .lines()
            .find(|l| l.trim_start().starts_with("Req/Sec"))
            .unwrap();
        assert!(rps.contains("1.00k") && rps.contains("100.00%"), "{rps}");
    }

    #[test]
    fn json_round_trip() {
        let run = sample_run();
        let text = run.render(Format::Json);
        let doc: Document = serde_json::from_str(&text).unwrap();
        assert_eq!(doc.completed, 2000);
        assert_eq!(doc.statuses.get("503"), Some(&7));
        let back = Run::from_document(&doc).unwrap();
        assert_eq!(back.meta, run.meta);
        assert_eq!(back.totals.latency, run.totals.latency);
        assert_eq!(back.totals.connect, run.totals.connect);
        assert_eq!(back.totals.seconds.len(), 2);
        assert_eq!(back.totals.errors, run.totals.errors);
    }

    #[test]
    fn formats() {
        assert_eq!(time(849.094), "849.09us");
        assert_eq!(time(1470.0), "1.47ms");
        assert_eq!(time(2_000_000.0), "2.00s");
        assert_eq!(count(75580.0), "75.58k");
        assert_eq!(bytes(1024.0 * 1024.0 * 1.5), "1.50MB");
        let (mean, sd, max, within) = sample_stats(&[10, 20, 30]);
        assert_eq!((mean, sd, max), (20.0, 10.0, 30.0));
        assert!((within - 100.0).abs() < 1e-9);
    }
}
