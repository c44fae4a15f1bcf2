//! Hold mode (`sluicegate bench --hold`): open C keep-alive connections at a
//! bounded connect rate, check each with one request, keep them all open,
//! and have each send one small request at random times (exponential gaps of
//! mean `--period`, so all together send a steady C/P per second) for
//! `--duration` once every connection is open. Built for the
//! million-connection experiment (`bench/million`), where many such parts
//! run at once, each under a process's descriptor limit.
//!
//! A connection costs little here: its state is one small task (the socket,
//! a response reader, a timer); reads go through one buffer per thread.
//! Failures are counted by the call that failed and its errno; the first
//! one is kept with the connection count reached, which is where a machine
//! stops short. The result is one JSON document (latency histograms as
//! value/count pairs, which add exactly across parts); `--status FILE` is
//! rewritten every second while running, for the script that watches.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{sleep_until, timeout};

use crate::response::{Reader, MAX_HEAD};
use crate::stats::{new_histogram, record};

/// What a hold run needs, fixed before the start.
#[derive(Debug, Clone)]
pub struct HoldSettings {
    pub addr: SocketAddr,
    pub request: Vec<u8>,
    pub connections: usize,
    /// New connections per second while ramping.
    pub connect_rate: f64,
    /// Mean time between two requests of one connection.
    pub period: Duration,
    /// How long to hold once every connection is open (or has failed).
    pub hold: Duration,
    /// Per connect and per response.
    pub timeout: Duration,
    /// Source addresses, used round robin by connection.
    pub sources: Vec<IpAddr>,
    /// Rewritten every second with the progress so far.
    pub status: Option<PathBuf>,
    /// Random seed (parts of one run should differ).
    pub seed: u64,
}

/// The first failure of a run: the call, its error, and how many
/// connections were open when it happened.
#[derive(Debug, Clone, Serialize)]
pub struct FirstFailure {
    pub call: &'static str,
    pub errno: String,
    pub message: String,
    pub open_then: u64,
    pub at_secs: f64,
}

/// A latency histogram in the JSON document.
#[derive(Debug, Serialize)]
pub struct Latency {
    pub count: u64,
    pub p50_micros: u64,
    pub p99_micros: u64,
    pub p999_micros: u64,
    pub max_micros: u64,
    /// `[value, count]` pairs (microseconds): parts add by value.
    pub histogram: Vec<[u64; 2]>,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        let q = |p| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(p)
            }
        };
        Latency {
            count: h.len(),
            p50_micros: q(0.5),
            p99_micros: q(0.99),
            p999_micros: q(0.999),
            max_micros: if h.is_empty() { 0 } else { h.max() },
            histogram: h
                .iter_recorded()
                .map(|v| {
                    [
                        h.highest_equivalent(v.value_iterated_to()),
                        v.count_at_value(),
                    ]
                })
                .collect(),
        }
    }
}

/// The JSON document of a hold run.
#[derive(Debug, Serialize)]
pub struct HoldDocument {
    pub mode: &'static str,
    pub url: String,
    pub asked: u64,
    /// Connections that connected and got their first response.
    pub held: u64,
    /// Of those, still open at the end.
    pub held_at_end: u64,
    pub connect_rate_asked: f64,
    /// Connections made per second during the ramp.
    pub connects_per_sec: f64,
    /// New connections in each second from the start.
    pub connects_timeline: Vec<u64>,
    pub ramp_secs: f64,
    pub start_unix_micros: u64,
    pub held_from_unix_micros: u64,
    pub end_unix_micros: u64,
    pub period_secs: f64,
    pub hold_secs: f64,
    /// Failures by `call:ERRNO` (or `call:kind`).
    pub errors: BTreeMap<String, u64>,
    pub errors_total: u64,
    pub first_failure: Option<FirstFailure>,
    pub statuses: BTreeMap<u16, u64>,
    /// Each connection's first request, made while ramping.
    pub ramp_latency: Latency,
    /// Requests sent once every connection of this part was open.
    pub held_latency: Latency,
    pub max_rss_kib: u64,
}

#[derive(Default)]
struct Counts {
    attempted: u64,
    connected: u64,
    held: u64,
    open: u64,
    done_ramping: u64,
    first_connect: Option<Instant>,
    last_connect: Option<Instant>,
    errors: BTreeMap<String, u64>,
    errors_total: u64,
    first_failure: Option<FirstFailure>,
    statuses: BTreeMap<u16, u64>,
    timeline: Vec<u64>,
}

struct Shared {
    s: HoldSettings,
    start: Instant,
    held_from: Cell<Option<Instant>>,
    counts: RefCell<Counts>,
    ramp: RefCell<Histogram<u64>>,
    steady: RefCell<Histogram<u64>>,
    /// The thread's read buffer (never borrowed across an await).
    buf: RefCell<Vec<u8>>,
    rng: RefCell<fastrand::Rng>,
}

impl Shared {
    fn fail(&self, call: &'static str, e: &io::Error) {
        let errno = errno_name(e);
        let mut c = self.counts.borrow_mut();
        *c.errors.entry(format!("{call}:{errno}")).or_default() += 1;
        c.errors_total += 1;
        if c.first_failure.is_none() {
            c.first_failure = Some(FirstFailure {
                call,
                errno,
                message: e.to_string(),
                open_then: c.open,
                at_secs: self.start.elapsed().as_secs_f64(),
            });
        }
    }
}

/// `EMFILE`, `EADDRNOTAVAIL`, ... for the errors a big run meets; else the
/// number, or the kind for errors that have none (timeouts, closes).
pub fn errno_name(e: &io::Error) -> String {
    let Some(n) = e.raw_os_error() else {
        return match e.kind() {
            io::ErrorKind::TimedOut => "timeout".into(),
            io::ErrorKind::UnexpectedEof => "closed".into(),
            io::ErrorKind::InvalidData => "malformed".into(),
            k => format!("{k:?}"),
        };
    };
    let name = match n {
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::ENOMEM => "ENOMEM",
        libc::ENOBUFS => "ENOBUFS",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EPIPE => "EPIPE",
        libc::EAGAIN => "EAGAIN",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::EINTR => "EINTR",
        _ => return format!("errno {n}"),
    };
    name.into()
}

fn unix_micros(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

/// This process's peak resident set (VmHWM), KiB.
fn max_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// A socket bound to `source` with IP_BIND_ADDRESS_NO_PORT, so that the
/// port is chosen at connect time per destination: one source address then
/// gives a whole ephemeral range to each destination, whatever other
/// processes bind to it.
fn socket(
    addr: SocketAddr,
    source: Option<IpAddr>,
) -> Result<TcpSocket, (&'static str, io::Error)> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| ("socket", e))?;
    if let Some(ip) = source {
        if ip.is_ipv4() {
            no_port(&sock).map_err(|e| ("setsockopt", e))?;
        }
        sock.bind(SocketAddr::new(ip, 0)).map_err(|e| ("bind", e))?;
    }
    Ok(sock)
}

#[allow(unsafe_code)]
fn no_port(sock: &TcpSocket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: a valid descriptor owned by `sock`, and a c_int option value
    // that outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends the request and reads its whole response.
async fn exchange(sh: &Shared, stream: &TcpStream) -> Result<u16, (&'static str, io::Error)> {
    let req = &sh.s.request;
    let mut sent = 0;
    while sent < req.len() {
        match stream.try_write(&req[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                stream.writable().await.map_err(|e| ("write", e))?;
            }
            Err(e) => return Err(("write", e)),
        }
    }
    let mut reader = Reader::new();
    // Bytes of a head split across reads (rare: responses are small).
    let mut pending: Vec<u8> = Vec::new();
    loop {
        stream.readable().await.map_err(|e| ("read", e))?;
        let mut buf = sh.buf.borrow_mut();
        let n = match stream.try_read(&mut buf) {
            Ok(0) => {
                return Err((
                    "read",
                    io::Error::new(io::ErrorKind::UnexpectedEof, "closed by the server"),
                ))
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(("read", e)),
        };
        let bytes: &[u8] = if pending.is_empty() {
            &buf[..n]
        } else {
            pending.extend_from_slice(&buf[..n]);
            &pending
        };
        let (used, done) = reader
            .feed(bytes)
            .map_err(|m| ("read", io::Error::new(io::ErrorKind::InvalidData, m.0)))?;
        if let Some(done) = done {
            if used < bytes.len() {
                return Err((
                    "read",
                    io::Error::new(io::ErrorKind::InvalidData, "bytes after the response"),
                ));
            }
            if done.close {
                return Err((
                    "read",
                    io::Error::new(io::ErrorKind::UnexpectedEof, "the server closes"),
                ));
            }
            return Ok(done.status);
        }
        let rest = bytes[used..].to_vec();
        if rest.len() >= MAX_HEAD {
            return Err((
                "read",
                io::Error::new(io::ErrorKind::InvalidData, "response head too long"),
            ));
        }
        pending = rest;
    }
}

/// One request with the timeout; records it in `hist`. False if the
/// connection is lost.
async fn request(sh: &Shared, stream: &TcpStream, ramp: bool) -> bool {
    let began = Instant::now();
    let res = match timeout(sh.s.timeout, exchange(sh, stream)).await {
        Ok(r) => r,
        Err(_) => Err((
            "response",
            io::Error::new(io::ErrorKind::TimedOut, "no response in time"),
        )),
    };
    match res {
        Ok(status) => {
            let took = micros(began.elapsed());
            let steady = !ramp && sh.held_from.get().is_some_and(|t| began >= t);
            if ramp {
                record(&mut sh.ramp.borrow_mut(), took);
            } else if steady {
                record(&mut sh.steady.borrow_mut(), took);
            }
            let mut c = sh.counts.borrow_mut();
            *c.statuses.entry(status).or_default() += 1;
            if !(200..300).contains(&status) {
                *c.errors.entry(format!("status:{status}")).or_default() += 1;
                c.errors_total += 1;
            }
            true
        }
        Err((call, e)) => {
            sh.fail(call, &e);
            false
        }
    }
}

/// Exponential gap of mean `period`, at most 20 means.
fn gap(sh: &Shared) -> Duration {
    let u = sh.rng.borrow_mut().f64();
    let x = -(1.0 - u).ln();
    sh.s.period.mul_f64(x.min(20.0))
}

async fn connection(sh: Rc<Shared>, i: usize) {
    let s = &sh.s;
    let at = sh.start + Duration::from_secs_f64(i as f64 / s.connect_rate);
    sleep_until(at.into()).await;
    let source = (!s.sources.is_empty()).then(|| s.sources[i % s.sources.len()]);
    sh.counts.borrow_mut().attempted += 1;
    let stream = match socket(s.addr, source) {
        Err((call, e)) => {
            sh.fail(call, &e);
            None
        }
        Ok(sock) => match timeout(s.timeout, sock.connect(s.addr)).await {
            Ok(Ok(st)) => Some(st),
            Ok(Err(e)) => {
                sh.fail("connect", &e);
                None
            }
            Err(_) => {
                sh.fail(
                    "connect",
                    &io::Error::new(io::ErrorKind::TimedOut, "no connection in time"),
                );
                None
            }
        },
    };
    let ok = match &stream {
        Some(st) => {
            {
                let mut c = sh.counts.borrow_mut();
                c.connected += 1;
                c.open += 1;
                let sec = sh.start.elapsed().as_secs() as usize;
                if c.timeline.len() <= sec {
                    c.timeline.resize(sec + 1, 0);
                }
                c.timeline[sec] += 1;
                let now = Instant::now();
                c.first_connect.get_or_insert(now);
                c.last_connect = Some(now);
            }
            let _ = st.set_nodelay(true);
            request(&sh, st, true).await
        }
        None => false,
    };
    {
        let mut c = sh.counts.borrow_mut();
        c.done_ramping += 1;
        if ok {
            c.held += 1;
        } else if stream.is_some() {
            c.open -= 1;
        }
    }
    let Some(stream) = stream.filter(|_| ok) else {
        return;
    };
    loop {
        let next = Instant::now() + gap(&sh);
        sleep_until(next.into()).await;
        if !request(&sh, &stream, false).await {
            sh.counts.borrow_mut().open -= 1;
            return;
        }
    }
}

fn write_status(sh: &Shared, phase: &str) {
    let Some(path) = &sh.s.status else { return };
    let c = sh.counts.borrow();
    let doc = serde_json::json!({
        "phase": phase,
        "asked": sh.s.connections,
        "attempted": c.attempted,
        "connected": c.connected,
        "held": c.held,
        "open": c.open,
        "errors": c.errors_total,
        "requests": sh.ramp.borrow().len() + sh.steady.borrow().len(),
        "secs": sh.start.elapsed().as_secs_f64(),
        "first_failure": c.first_failure,
    });
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, doc.to_string()).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// Runs a hold: returns its document.
pub fn run(s: HoldSettings, url: String) -> HoldDocument {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .expect("build the hold runtime");
    let start_wall = SystemTime::now();
    let sh = Rc::new(Shared {
        start: Instant::now(),
        held_from: Cell::new(None),
        counts: RefCell::new(Counts::default()),
        ramp: RefCell::new(new_histogram()),
        steady: RefCell::new(new_histogram()),
        buf: RefCell::new(vec![0u8; 64 * 1024]),
        rng: RefCell::new(fastrand::Rng::with_seed(s.seed)),
        s,
    });
    let local = tokio::task::LocalSet::new();
    let mut held_wall = start_wall;
    local.block_on(&rt, async {
        let tasks: Vec<_> = (0..sh.s.connections)
            .map(|i| tokio::task::spawn_local(connection(sh.clone(), i)))
            .collect();
        let mut tick = sh.start;
        let mut end: Option<Instant> = None;
        loop {
            tick += Duration::from_millis(250);
            sleep_until(tick.into()).await;
            let now = Instant::now();
            let ramped = {
                let c = sh.counts.borrow();
                c.done_ramping as usize == sh.s.connections
            };
            if ramped && end.is_none() {
                sh.held_from.set(Some(now));
                held_wall = SystemTime::now();
                end = Some(now + sh.s.hold);
            }
            if let Some(e) = end {
                if now >= e {
                    break;
                }
            }
            write_status(&sh, if end.is_some() { "held" } else { "ramp" });
        }
        for t in tasks {
            t.abort();
        }
    });
    let end_wall = SystemTime::now();
    let held_from = sh.held_from.get().unwrap_or(sh.start);
    let ramp_secs = held_from.saturating_duration_since(sh.start).as_secs_f64();
    let c = sh.counts.borrow();
    // The ramp proper: from the first connect to the last.
    let connects_per_sec = match (c.first_connect, c.last_connect) {
        (Some(a), Some(b)) if c.connected > 1 && b > a => {
            (c.connected - 1) as f64 / (b - a).as_secs_f64()
        }
        _ => c.connected as f64,
    };
    let doc = HoldDocument {
        mode: "hold",
        url,
        asked: sh.s.connections as u64,
        held: c.held,
        held_at_end: c.open,
        connect_rate_asked: sh.s.connect_rate,
        connects_per_sec,
        connects_timeline: c.timeline.clone(),
        ramp_secs,
        start_unix_micros: unix_micros(start_wall),
        held_from_unix_micros: unix_micros(held_wall),
        end_unix_micros: unix_micros(end_wall),
        period_secs: sh.s.period.as_secs_f64(),
        hold_secs: sh.s.hold.as_secs_f64(),
        errors: c.errors.clone(),
        errors_total: c.errors_total,
        first_failure: c.first_failure.clone(),
        statuses: c.statuses.clone(),
        ramp_latency: Latency::of(&sh.ramp.borrow()),
        held_latency: Latency::of(&sh.steady.borrow()),
        max_rss_kib: max_rss_kib(),
    };
    drop(c);
    write_status(&sh, "done");
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_names() {
        assert_eq!(
            errno_name(&io::Error::from_raw_os_error(libc::EMFILE)),
            "EMFILE"
        );
        assert_eq!(
            errno_name(&io::Error::from_raw_os_error(libc::EADDRNOTAVAIL)),
            "EADDRNOTAVAIL"
        );
        assert_eq!(errno_name(&io::Error::from_raw_os_error(200)), "errno 200");
        assert_eq!(
            errno_name(&io::Error::new(io::ErrorKind::TimedOut, "x")),
            "timeout"
        );
    }

    #[test]
    fn histogram_pairs_add_up() {
        let mut h = new_histogram();
        for v in [100, 100, 250, 10_000] {
            record(&mut h, v);
        }
        let l = Latency::of(&h);
        assert_eq!(l.count, 4);
        assert_eq!(l.histogram.iter().map(|p| p[1]).sum::<u64>(), 4);
        assert!(l.p50_micros >= 100 && l.p50_micros < 101);
        assert!(l.max_micros >= 10_000);
    }
}
