//! `sluicegate bench`: an HTTP/1.1 load generator. Closed loop (like wrk and
//! ab) or open loop at a constant rate (latency from the intended send time,
//! like wrk2), keep-alive or a connection per request, pipelining, many
//! source addresses, weighted scenarios; HdrHistogram latencies; ab, wrk,
//! JSON and HTML reports; `merge` combines the JSON parts of a run spread
//! over several machines exactly.

use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};

pub mod engine;
pub mod hold;
pub mod html;
pub mod report;
pub mod response;
pub mod stats;
pub mod target;

use engine::{Report, Settings, Stop};
use report::{Format, Meta, Run};
use stats::{Document, Totals};
use target::{RequestSpec, Url};

/// `sluicegate bench [OPTIONS] URL` or `sluicegate bench merge PARTS...`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub merge: Option<BenchCommand>,
    #[command(flatten)]
    pub load: LoadArgs,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Merge the JSON parts of one run made on several machines (their
    /// histograms add exactly) and write the reports.
    Merge(MergeArgs),
}

#[derive(Args, Debug)]
pub struct OutputArgs {
    /// Report printed on standard output.
    #[arg(long, value_enum, default_value = "wrk")]
    pub format: Format,
    /// Also write the JSON document (the mergeable part) to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also write the HTML report (self-contained, opens offline).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// JSON documents written with --out.
    #[arg(required = true)]
    pub parts: Vec<PathBuf>,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// http://host[:port]/path (with --scenario: the base for `path:` entries).
    #[arg(required_unless_present = "scenario")]
    pub url: Option<String>,
    /// Connections open at once.
    #[arg(short = 'c', long, default_value_t = 10)]
    pub connections: usize,
    /// Requests in all (default: run for --duration).
    #[arg(short = 'n', long, conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// How long to run, e.g. 10s, 1m (default 10s unless -n is given).
    #[arg(short = 'd', long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
    /// Load threads, each with its share of the connections.
    #[arg(short = 't', long, default_value_t = 1)]
    pub threads: usize,
    /// Keep connections alive (ab's -k); without it every request opens a
    /// connection and asks the server to close it.
    #[arg(short = 'k', long)]
    pub keepalive: bool,
    /// Open loop: send at this many requests per second in all, latency
    /// counted from each request's intended send time.
    #[arg(short = 'R', long)]
    pub rate: Option<f64>,
    /// Requests in flight per keep-alive connection (HTTP/1.1 pipelining).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// Time allowed to connect, and for each response.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Source addresses, used round robin by connection: A, A-B (IPv4 range)
    /// or a comma-separated list of those.
    #[arg(long, value_name = "ADDRS")]
    pub source: Option<String>,
    /// Request method.
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: String,
    /// A request header, "Name: value" (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Send this file as the request body (ab's -p).
    #[arg(short = 'p', long = "body-file", value_name = "FILE")]
    pub body_file: Option<PathBuf>,
    /// Content-Type of the body (ab's -T).
    #[arg(short = 'T', long = "content-type")]
    pub content_type: Option<String>,
    /// A YAML scenario: several requests with weights, methods, headers and
    /// bodies (see docs/bench.md).
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,
    /// Start at this wall-clock time (RFC 3339, e.g. 2026-11-23T17:00:00Z,
    /// or Unix seconds), so that several machines start together.
    #[arg(long, value_name = "TIME")]
    pub start_at: Option<String>,
    /// The live progress line on standard error: auto (only on a terminal),
    /// always or never.
    #[arg(long, default_value = "auto", value_parser = ["auto", "always", "never"])]
    pub progress: String,
    #[command(flatten)]
    pub hold: HoldArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Hold mode: many mostly idle keep-alive connections (`bench/million`).
#[derive(Args, Debug)]
pub struct HoldArgs {
    /// Hold mode: open -c connections at --connect-rate, check each with one
    /// request, keep them all open, and have each send one request at
    /// random times (mean --period) for -d once all are open. Prints one
    /// JSON document (see docs/bench.md).
    #[arg(long)]
    pub hold: bool,
    /// Hold mode: new connections per second while ramping.
    #[arg(long, default_value_t = 2000.0, requires = "hold")]
    pub connect_rate: f64,
    /// Hold mode: mean time between two requests of one connection
    /// (exponential gaps).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration, requires = "hold")]
    pub period: Duration,
    /// Hold mode: rewrite this file every 250 ms with the progress (JSON).
    #[arg(long, value_name = "FILE", requires = "hold")]
    pub status: Option<PathBuf>,
    /// Hold mode: random seed (give each part of a run its own).
    #[arg(long, default_value_t = 1, requires = "hold")]
    pub seed: u64,
}

/// Runs `sluicegate bench`.
pub fn main(args: BenchArgs) -> ExitCode {
    let result = match args.merge {
        Some(BenchCommand::Merge(m)) => merge(&m),
        None if args.load.hold.hold => hold(&args.load),
        None => load(&args.load),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluicegate bench: {e}");
            ExitCode::from(2)
        }
    }
}

/// Parses `A`, `A-B` and comma-separated lists of them.
pub fn parse_sources(text: &str) -> Result<Vec<IpAddr>, String> {
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            None => out.push(
                part.parse()
                    .map_err(|_| format!("--source: {part:?} is not an IP address"))?,
            ),
            Some((a, b)) => {
                let (a, b): (std::net::Ipv4Addr, std::net::Ipv4Addr) = (
                    a.trim()
                        .parse()
                        .map_err(|_| format!("--source: {a:?} is not an IPv4 address"))?,
                    b.trim()
                        .parse()
                        .map_err(|_| format!("--source: {b:?} is not an IPv4 address"))?,
                );
                let (lo, hi) = (u32::from(a), u32::from(b));
                if lo > hi || hi - lo > 65_535 {
                    return Err(format!(
                        "--source: {part} is not a range of at most 65536 addresses"
                    ));
                }
                out.extend((lo..=hi).map(|v| IpAddr::V4(v.into())));
            }
        }
    }
    if out.is_empty() {
        return Err("--source: no addresses".into());
    }
    Ok(out)
}

/// Parses `--start-at`: RFC 3339 or Unix seconds.
pub fn parse_start_at(text: &str) -> Result<SystemTime, String> {
    if let Ok(secs) = text.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(UNIX_EPOCH + Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_rfc3339_weak(text).map_err(|e| {
        format!(
            "--start-at {text:?}: {e} (give RFC 3339 like 2026-11-23T17:00:00Z, or Unix seconds)"
        )
    })
}

fn build_settings(a: &LoadArgs) -> Result<(Settings, Meta), String> {
    if a.connections == 0 {
        return Err("-c must be at least 1".into());
    }
    if a.threads == 0 {
        return Err("-t must be at least 1".into());
    }
    if a.pipeline == 0 || a.pipeline > 1024 {
        return Err("--pipeline must be 1..1024".into());
    }
    if a.pipeline > 1 && !a.keepalive {
        return Err("--pipeline needs -k (keep-alive)".into());
    }
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            return Err("-R must be a positive rate".into());
        }
    }
    if a.requests == Some(0) {
        return Err("-n must be at least 1".into());
    }
    target::check_method(&a.method)?;
    let base = a.url.as_deref().map(Url::parse).transpose()?;
    let mut headers = Vec::new();
    for h in &a.headers {
        headers.push(target::parse_header(h)?);
    }
    if let Some(ct) = &a.content_type {
        headers.push(target::parse_header(&format!("Content-Type: {ct}"))?);
    }
    let body = match &a.body_file {
        Some(p) => std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?,
        None => Vec::new(),
    };
    let defaults = RequestSpec {
        url: base.clone().unwrap_or(Url {
            host: String::new(),
            port: 80,
            target: "/".into(),
        }),
        method: a.method.clone(),
        headers,
        body,
        weight: 1,
    };
    let specs = match &a.scenario {
        Some(path) => target::load_scenario(path, base.as_ref(), &defaults)?,
        None => vec![defaults],
    };
    let addr = specs[0].url.resolve()?;
    let sources = match &a.source {
        Some(s) => parse_sources(s)?,
        None => Vec::new(),
    };
    if sources.iter().any(|s| s.is_ipv4() != addr.is_ipv4()) {
        return Err(format!(
            "--source addresses must be of the target's family ({addr})"
        ));
    }
    let stop = match (a.requests, a.duration) {
        (Some(n), _) => Stop::Requests(n),
        (None, Some(d)) => Stop::Duration(d),
        (None, None) => Stop::Duration(Duration::from_secs(10)),
    };
    let urls = specs
        .iter()
        .map(|s| format!("http://{}{}", s.url.authority(), s.url.target))
        .collect();
    let settings = Settings {
        addr,
        requests: specs.iter().map(|s| s.prepare(a.keepalive)).collect(),
        connections: a.connections,
        threads: a.threads.min(a.connections),
        stop,
        rate: a.rate,
        keep_alive: a.keepalive,
        pipeline: a.pipeline,
        timeout: a.timeout,
        sources,
    };
    let meta = Meta {
        urls,
        mode: if a.rate.is_some() { "open" } else { "closed" }.into(),
        connections: a.connections as u64,
        threads: settings.threads as u64,
        keep_alive: a.keepalive,
        pipeline: a.pipeline as u64,
        rate: a.rate,
        start_unix_micros: 0,
        duration_secs: 0.0,
        parts: 1,
    };
    Ok((settings, meta))
}

fn hold(a: &LoadArgs) -> Result<(), String> {
    if a.scenario.is_some() || a.rate.is_some() || a.requests.is_some() || a.pipeline != 1 {
        return Err("--hold takes none of --scenario, -R, -n, --pipeline".into());
    }
    if !a.keepalive {
        return Err("--hold needs -k (its connections are kept alive)".into());
    }
    let h = &a.hold;
    if !(h.connect_rate.is_finite() && h.connect_rate > 0.0) {
        return Err("--connect-rate must be a positive rate".into());
    }
    if h.period.is_zero() {
        return Err("--period must be positive".into());
    }
    let (settings, meta) = build_settings(a)?;
    let hs = hold::HoldSettings {
        addr: settings.addr,
        request: settings.requests[0].bytes.clone(),
        connections: a.connections,
        connect_rate: h.connect_rate,
        period: h.period,
        hold: a.duration.unwrap_or(Duration::from_secs(10)),
        timeout: a.timeout,
        sources: settings.sources,
        status: h.status.clone(),
        seed: h.seed,
    };
    let doc = hold::run(hs, meta.urls[0].clone());
    let text = serde_json::to_string_pretty(&doc).expect("a document serializes") + "\n";
    if let Some(path) = &a.output.out {
        std::fs::write(path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    print!("{text}");
    Ok(())
}

fn load(a: &LoadArgs) -> Result<(), String> {
    let (settings, mut meta) = build_settings(a)?;
    if let Some(at) = &a.start_at {
        let when = parse_start_at(at)?;
        match when.duration_since(SystemTime::now()) {
            Ok(wait) if wait > Duration::from_secs(24 * 3600) => {
                return Err(format!("--start-at {at} is more than a day away"));
            }
            Ok(wait) => std::thread::sleep(wait),
            Err(late) => eprintln!(
                "sluicegate bench: --start-at was {:.3} s ago; starting now",
                late.duration().as_secs_f64()
            ),
        }
    }
    let progress = match a.progress.as_str() {
        "always" => true,
        "never" => false,
        _ => std::io::stderr().is_terminal(),
    };
    let run = execute(settings, &mut meta, progress);
    write_outputs(&run, &a.output)
}

/// Runs the load and collects the threads' reports into a [`Run`].
pub fn execute(settings: Settings, meta: &mut Meta, progress: bool) -> Run {
    let settings = Arc::new(settings);
    let (tx, rx) = mpsc::channel();
    meta.start_unix_micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    let start = Instant::now();
    let handles = engine::spawn(settings.clone(), start, tx);
    let threads = handles.len();
    let mut totals = Totals::default();
    let mut finished = start;
    let mut done = 0;
    let mut last_line = Instant::now();
    while done < threads {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(Report::Second(s)) => totals.add_second(&s),
            Ok(Report::Final(f)) => {
                done += 1;
                totals.sent += f.sent;
                totals.bytes_written += f.bytes_written;
                totals.connections_opened += f.connections_opened;
                for (code, n) in f.statuses {
                    *totals.statuses.entry(code).or_default() += n;
                }
                totals.connect.add(&f.connect).expect("same bounds");
                totals.waiting.add(&f.waiting).expect("same bounds");
                totals.processing.add(&f.processing).expect("same bounds");
                if totals.document_length.is_none() {
                    totals.document_length = f.document_length;
                }
                totals.thread_rates.extend(f.rates);
                finished = finished.max(f.finished);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if progress && last_line.elapsed() >= Duration::from_secs(1) {
            last_line = Instant::now();
            let secs = start.elapsed().as_secs_f64();
            let completed: u64 = totals.seconds.iter().map(|s| s.completed).sum();
            let errors: u64 = totals.seconds.iter().map(|s| s.errors.total()).sum();
            let rate = totals.seconds.iter().last().map_or(0, |s| s.completed);
            eprint!(
                "\r{secs:6.1}s  {completed:>10} responses  {rate:>8}/s last second  errors {errors:<6}  p99 so far {:<10}",
                report::time(totals.latency.value_at_quantile(0.99) as f64)
            );
            let _ = std::io::stderr().flush();
        }
    }
    for h in handles {
        let _ = h.join();
    }
    if progress {
        eprintln!();
    }
    for s in &totals.seconds {
        totals.completed += s.completed;
        totals.bytes_read += s.bytes_read;
        totals.errors.add(&s.errors);
    }
    meta.duration_secs = finished.saturating_duration_since(start).as_secs_f64();
    Run {
        meta: meta.clone(),
        totals,
    }
}

fn write_outputs(run: &Run, out: &OutputArgs) -> Result<(), String> {
    if let Some(path) = &out.out {
        std::fs::write(path, run.render(Format::Json))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &out.html {
        std::fs::write(path, html::render(run)).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    print!("{}", run.render(out.format));
    Ok(())
}

/// Reads and merges parts: counts add, histograms add bucket by bucket,
/// timelines line up by each part's wall-clock start.
pub fn merge_documents(docs: &[Document]) -> Result<Run, String> {
    let runs: Vec<Run> = docs
        .iter()
        .map(Run::from_document)
        .collect::<Result<_, _>>()?;
    let first = runs.first().ok_or("nothing to merge")?;
    let start = runs
        .iter()
        .map(|r| r.meta.start_unix_micros)
        .min()
        .unwrap_or(0);
    let mut meta = first.meta.clone();
    meta.start_unix_micros = start;
    meta.connections = 0;
    meta.threads = 0;
    meta.parts = 0;
    meta.rate = None;
    let mut end = 0f64;
    let mut totals = Totals::default();
    for r in &runs {
        let offset_micros = r.meta.start_unix_micros - start;
        meta.connections += r.meta.connections;
        meta.threads += r.meta.threads;
        meta.parts += r.meta.parts;
        meta.rate = match (meta.rate, r.meta.rate) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        for u in &r.meta.urls {
            if !meta.urls.contains(u) {
                meta.urls.push(u.clone());
            }
        }
        meta.keep_alive &= r.meta.keep_alive;
        end = end.max(offset_micros as f64 / 1e6 + r.meta.duration_secs);
        totals.merge(&r.totals, (offset_micros as f64 / 1e6).round() as u64);
    }
    meta.duration_secs = end;
    Ok(Run { meta, totals })
}

fn merge(m: &MergeArgs) -> Result<(), String> {
    let mut docs = Vec::new();
    for p in &m.parts {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let doc: Document = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a bench JSON document: {e}", p.display()))?;
        docs.push(doc);
    }
    let run = merge_documents(&docs)?;
    write_outputs(&run, &m.output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources() {
        let s = parse_sources("127.0.0.2-127.0.0.4,127.0.0.9").unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[3], "127.0.0.9".parse::<IpAddr>().unwrap());
        assert!(parse_sources("127.0.0.4-127.0.0.2").is_err());
        assert!(parse_sources("nope").is_err());
        assert!(parse_sources("10.0.0.0-10.2.0.0").is_err());
    }

    #[test]
    fn start_times() {
        assert_eq!(
            parse_start_at("1700000000").unwrap(),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        );
        assert_eq!(
            parse_start_at("2023-11-14T22:13:20Z").unwrap(),
            UNIX_EPOCH + Duration::from_secs(1_700_000_000)
        );
        assert!(parse_start_at("tomorrow").is_err());
    }
}
