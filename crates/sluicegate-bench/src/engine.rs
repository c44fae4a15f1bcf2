//! The load engine: one single-threaded tokio runtime per thread, each driving
//! its share of the connections. A connection writes requests (up to the
//! pipeline depth at once), reads responses with [`Reader`], and records each
//! one; once a second every thread hands its counts to the coordinator.
//!
//! Closed loop: a connection sends its next request as soon as a response
//! ends. Open loop (`rate`): connection `g` of `C` sends at
//! `start + g/R + k*C/R`, and a request's latency counts from that intended
//! time, so a server that stalls is charged for the requests it kept the
//! generator from sending (no coordinated omission).
//!
//! The open-loop send times are in `schedule`, a thread's counts in `counts`.

mod counts;
mod schedule;

pub use counts::{Report, ThreadTotals};
pub use schedule::{latency_start, Schedule};

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::pin::pin;
use std::rc::Rc;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{sleep_until, timeout};

use crate::response::{Reader, MAX_HEAD};
use crate::stats::{record, ErrorClass, Second};
use crate::target::Prepared;
use counts::Recorder;

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many requests in all.
    Requests(u64),
    /// After this long (requests in flight then still get their answer).
    Duration(Duration),
}

/// Everything the engine needs, fixed before the start.
#[derive(Debug)]
pub struct Settings {
    pub addr: SocketAddr,
    pub requests: Vec<Prepared>,
    pub connections: usize,
    pub threads: usize,
    pub stop: Stop,
    /// Open loop: requests per second over all connections.
    pub rate: Option<f64>,
    pub keep_alive: bool,
    /// Requests in flight per connection (HTTP/1.1 pipelining); 1 = none.
    pub pipeline: usize,
    /// Per connect and per response.
    pub timeout: Duration,
    /// Source addresses, used round robin by connection.
    pub sources: Vec<IpAddr>,
}

/// One thread's share of the run.
struct Shared {
    settings: Arc<Settings>,
    start: Instant,
    end: Option<Instant>,
    /// Requests this thread may still send (`Stop::Requests`).
    tickets: Cell<u64>,
    rec: RefCell<Recorder>,
    rng: RefCell<fastrand::Rng>,
    /// Running sums of the request weights.
    cumulative: Vec<u32>,
    /// Requests completed in each full second so far.
    rates: RefCell<Vec<u64>>,
}

impl Shared {
    /// Whether a new request may start at `now`; takes it if so.
    fn take(&self, now: Instant) -> bool {
        match self.end {
            Some(end) => now < end,
            None => {
                let t = self.tickets.get();
                if t == 0 {
                    return false;
                }
                self.tickets.set(t - 1);
                true
            }
        }
    }

    /// Open loop: whether the schedule's next slot belongs to the run
    /// (before the end, or among the first `-n` slots of all connections).
    fn slot_allowed(&self, sch: &Schedule) -> bool {
        match (self.end, self.settings.stop) {
            (Some(end), _) => sch.next() < end,
            (None, Stop::Requests(n)) => sch.slot() < n,
            (None, Stop::Duration(_)) => true,
        }
    }

    fn more(&self, now: Instant) -> bool {
        match self.end {
            Some(end) => now < end,
            None => self.tickets.get() > 0,
        }
    }

    fn pick(&self) -> &Prepared {
        let reqs = &self.settings.requests;
        if reqs.len() == 1 {
            return &reqs[0];
        }
        let total = *self.cumulative.last().unwrap_or(&1);
        let r = self.rng.borrow_mut().u32(0..total);
        let i = self.cumulative.partition_point(|&c| c <= r);
        &reqs[i.min(reqs.len() - 1)]
    }

    fn fail(&self, class: ErrorClass, n: u64) {
        if n > 0 {
            self.rec.borrow_mut().second.errors.count(class, n);
        }
    }
}

/// A request written and not yet answered.
struct InFlight {
    /// Latency counts from here: the send (closed loop) or the intended
    /// send (open loop).
    start: Instant,
    written: Instant,
    first_byte: Option<Instant>,
    head: bool,
    connect_micros: u64,
}

fn micros(d: Duration) -> u64 {
    d.as_micros().min(u64::MAX as u128) as u64
}

/// Runs the engine: `threads` threads from `start` until the stop condition;
/// reports arrive on `tx`.
pub fn spawn(
    settings: Arc<Settings>,
    start: Instant,
    tx: mpsc::Sender<Report>,
) -> Vec<std::thread::JoinHandle<()>> {
    let threads = settings.threads.clamp(1, settings.connections.max(1));
    let mut handles = Vec::with_capacity(threads);
    let mut first_conn = 0;
    for t in 0..threads {
        let conns =
            settings.connections / threads + usize::from(t < settings.connections % threads);
        let tickets = match settings.stop {
            Stop::Requests(n) => n / threads as u64 + u64::from((t as u64) < n % threads as u64),
            Stop::Duration(_) => 0,
        };
        let (s, tx) = (settings.clone(), tx.clone());
        let range = first_conn..first_conn + conns;
        first_conn += conns;
        let h = std::thread::Builder::new()
            .name(format!("bench-{t}"))
            .spawn(move || thread_main(s, start, range, tickets, tx))
            .expect("spawn a load thread");
        handles.push(h);
    }
    handles
}

fn thread_main(
    settings: Arc<Settings>,
    start: Instant,
    conns: std::ops::Range<usize>,
    tickets: u64,
    tx: mpsc::Sender<Report>,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .expect("build a load thread's runtime");
    let mut cumulative = Vec::with_capacity(settings.requests.len());
    let mut sum = 0u32;
    for r in &settings.requests {
        sum = sum.saturating_add(r.weight);
        cumulative.push(sum);
    }
    let end = match settings.stop {
        Stop::Duration(d) => Some(start + d),
        Stop::Requests(_) => None,
    };
    let shared = Rc::new(Shared {
        settings,
        start,
        end,
        tickets: Cell::new(tickets),
        rec: RefCell::new(Recorder::new()),
        rng: RefCell::new(fastrand::Rng::with_seed(0x5eed ^ conns.start as u64)),
        cumulative,
        rates: RefCell::new(Vec::new()),
    });
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let mut tasks = Vec::new();
        for g in conns.clone() {
            tasks.push(tokio::task::spawn_local(connection(shared.clone(), g)));
        }
        let live = Rc::new(Cell::new(tasks.len()));
        let ticker = tokio::task::spawn_local(ticker(shared.clone(), live.clone(), tx.clone()));
        for t in tasks {
            let _ = t.await;
            live.set(live.get() - 1);
        }
        ticker.abort();
        let _ = ticker.await;
    });
    let finished = Instant::now();
    let rec = shared.rec.replace(Recorder::new());
    let last = rec.second;
    let ran = finished.saturating_duration_since(start);
    let mut rates = shared.rates.take();
    if rates.is_empty() && ran > Duration::ZERO {
        // A run shorter than a second: its one rate, scaled to a second.
        rates.push((last.completed as f64 / ran.as_secs_f64()).round() as u64);
    }
    let _ = tx.send(Report::Second(last));
    let statuses = rec
        .statuses
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(code, n)| (code as u16, *n))
        .collect();
    let _ = tx.send(Report::Final(Box::new(ThreadTotals {
        sent: rec.sent,
        bytes_written: rec.bytes_written,
        connections_opened: rec.connections_opened,
        statuses,
        connect: rec.connect,
        waiting: rec.waiting,
        processing: rec.processing,
        document_length: rec.document_length,
        rates,
        finished,
    })));
}

/// Hands the counts of each second to the coordinator, and keeps each full
/// second's completions for the Req/Sec statistic.
async fn ticker(shared: Rc<Shared>, live: Rc<Cell<usize>>, tx: mpsc::Sender<Report>) {
    let mut k = 0u64;
    while live.get() > 0 {
        sleep_until((shared.start + Duration::from_secs(k + 1)).into()).await;
        let second = std::mem::replace(&mut shared.rec.borrow_mut().second, Second::new(k + 1));
        shared.rates.borrow_mut().push(second.completed);
        if tx.send(Report::Second(second)).is_err() {
            break;
        }
        k += 1;
    }
}

/// Connects, from `source` if given.
async fn connect(addr: SocketAddr, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = source {
        sock.bind(SocketAddr::new(ip, 0))?;
    }
    let stream = sock.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Writes the rest of a request within `limit`; on failure, the class the
/// requests already in flight on the connection fall into.
async fn write_rest(stream: &mut TcpStream, bytes: &[u8], limit: Duration) -> Option<ErrorClass> {
    match timeout(limit, stream.write_all(bytes)).await {
        Ok(Ok(())) => None,
        Ok(Err(_)) => Some(ErrorClass::Read),
        Err(_) => Some(ErrorClass::Timeout),
    }
}

/// One connection's life: connect, send, read, record; reconnect after a
/// failure or a close; stop when the run's requests or time are used up.
async fn connection(sh: Rc<Shared>, g: usize) {
    let s = sh.settings.clone();
    let source = (!s.sources.is_empty()).then(|| s.sources[g % s.sources.len()]);
    let depth = if s.keep_alive { s.pipeline.max(1) } else { 1 };
    let mut schedule = s.rate.map(|r| Schedule::new(sh.start, g, s.connections, r));
    // Small to start (thousands of connections each have one); grown while
    // a response head does not fit, up to the longest head allowed.
    let mut buf = vec![0u8; 4096];
    let mut wbuf: Vec<u8> = Vec::with_capacity(1024);
    let mut inflight: VecDeque<InFlight> = VecDeque::with_capacity(depth);
    // One timer per connection, moved only when it would fire too late.
    let far = || Instant::now() + Duration::from_secs(3600);
    let mut timer_at = far();
    let mut timer = pin!(sleep_until(timer_at.into()));
    // When this connection last became free to send (open loop): a request
    // due before then waited on the server.
    let mut room_at = sh.start;

    'connect: loop {
        // The first request of the connection is claimed before connecting,
        // so that no connection is opened for a request another took. In
        // open loop that is the next slot of the schedule: wait for it.
        let mut reserved = match schedule.as_ref() {
            Some(sch) => {
                if !sh.slot_allowed(sch) {
                    return;
                }
                if sch.next() > Instant::now() {
                    sleep_until(sch.next().into()).await;
                }
                false
            }
            None => {
                if !sh.take(Instant::now()) {
                    return;
                }
                true
            }
        };
        let began = Instant::now();
        let mut stream = match timeout(s.timeout, connect(s.addr, source)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(_)) | Err(_) => {
                // The request this connection was for fails to connect.
                sh.rec.borrow_mut().sent += 1;
                sh.fail(ErrorClass::Connect, 1);
                match schedule.as_mut() {
                    // Its slot is used; the next try waits for the next one.
                    Some(sch) => {
                        sch.advance();
                    }
                    // Do not spin on a refusing target.
                    None => tokio::time::sleep(Duration::from_millis(10)).await,
                }
                continue 'connect;
            }
        };
        let connected = Instant::now();
        let mut connect_micros = micros(connected - began);
        let mut fresh = true;
        if s.keep_alive {
            room_at = connected;
        }
        sh.rec.borrow_mut().connections_opened += 1;
        let mut reader = Reader::new();
        let mut have = 0usize;
        inflight.clear();

        loop {
            // Send what may be sent now.
            let now = Instant::now();
            wbuf.clear();
            let mut added = 0usize;
            while inflight.len() < depth {
                let start = match schedule.as_mut() {
                    Some(sch) => {
                        if sch.next() > now || !sh.slot_allowed(sch) {
                            break;
                        }
                        let ready = if fresh && !s.keep_alive { began } else { now };
                        latency_start(sch.advance(), room_at, ready)
                    }
                    None => {
                        if !std::mem::take(&mut reserved) && !sh.take(now) {
                            break;
                        }
                        if fresh {
                            began
                        } else {
                            now
                        }
                    }
                };
                fresh = false;
                // Connect time belongs to a request only if its latency
                // started before the connection was made.
                let took = std::mem::take(&mut connect_micros);
                let req = sh.pick();
                wbuf.extend_from_slice(&req.bytes);
                inflight.push_back(InFlight {
                    start,
                    written: now,
                    first_byte: None,
                    head: req.head,
                    connect_micros: if start < connected { took } else { 0 },
                });
                added += 1;
                if !s.keep_alive {
                    break;
                }
            }
            if added > 0 {
                if inflight.len() == added {
                    reader.expect(inflight[0].head);
                }
                {
                    let mut rec = sh.rec.borrow_mut();
                    rec.sent += added as u64;
                    rec.bytes_written += wbuf.len() as u64;
                }
                // Most writes go out whole at once, with no timer armed;
                // the rest are bounded, so that a server that stops
                // reading cannot hold the run forever.
                let failed = match stream.try_write(&wbuf) {
                    Ok(n) if n == wbuf.len() => None,
                    Ok(n) => write_rest(&mut stream, &wbuf[n..], s.timeout).await,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        write_rest(&mut stream, &wbuf, s.timeout).await
                    }
                    Err(_) => Some(ErrorClass::Read),
                };
                if let Some(class) = failed {
                    sh.fail(class, (inflight.len() - added) as u64);
                    sh.fail(ErrorClass::Write, added as u64);
                    inflight.clear();
                    continue 'connect;
                }
                let written = Instant::now();
                let n = inflight.len();
                for f in inflight.range_mut(n - added..) {
                    f.written = written;
                }
            }
            if inflight.is_empty() {
                match schedule.as_ref() {
                    Some(sch) => {
                        if !sh.slot_allowed(sch) {
                            return;
                        }
                        sleep_until(sch.next().into()).await;
                    }
                    None => {
                        if !reserved && !sh.more(Instant::now()) {
                            return;
                        }
                    }
                }
                continue;
            }

            // Wait for bytes, the oldest request's timeout, or (open loop,
            // room in the pipeline) the next send time.
            let deadline = inflight[0].written + s.timeout;
            let mut wake = deadline;
            if let Some(sch) = schedule.as_ref() {
                if inflight.len() < depth && sh.slot_allowed(sch) {
                    wake = wake.min(sch.next());
                }
            }
            if timer_at > wake {
                timer_at = wake;
                timer.as_mut().reset(wake.into());
            }
            let read = tokio::select! {
                biased;
                r = stream.read(&mut buf[have..]) => Some(r),
                _ = timer.as_mut() => None,
            };
            let n = match read {
                None => {
                    timer_at = far();
                    timer.as_mut().reset(timer_at.into());
                    if Instant::now() >= deadline {
                        sh.fail(ErrorClass::Timeout, inflight.len() as u64);
                        inflight.clear();
                        continue 'connect;
                    }
                    continue;
                }
                Some(Err(_)) => {
                    sh.fail(ErrorClass::Read, inflight.len() as u64);
                    inflight.clear();
                    continue 'connect;
                }
                Some(Ok(0)) => {
                    let ended = reader.finish_at_close();
                    if let Some(done) = ended {
                        let f = inflight.pop_front().expect("a request in flight");
                        complete(&sh, &f, done.status, done.body_len, Instant::now());
                        room_at = Instant::now();
                    } else if reader.in_body() {
                        inflight.pop_front();
                        sh.fail(ErrorClass::Length, 1);
                    }
                    sh.fail(ErrorClass::Read, inflight.len() as u64);
                    inflight.clear();
                    continue 'connect;
                }
                Some(Ok(n)) => n,
            };
            let arrived = Instant::now();
            sh.rec.borrow_mut().second.bytes_read += n as u64;
            if let Some(f) = inflight.front_mut() {
                f.first_byte.get_or_insert(arrived);
            }
            have += n;
            let mut used = 0;
            let mut close = false;
            while used < have && !inflight.is_empty() {
                match reader.feed(&buf[used..have]) {
                    Ok((u, done)) => {
                        used += u;
                        let Some(done) = done else { break };
                        if inflight.len() == depth {
                            room_at = arrived;
                        }
                        let f = inflight.pop_front().expect("a request in flight");
                        complete(&sh, &f, done.status, done.body_len, arrived);
                        if let Some(next) = inflight.front_mut() {
                            reader.expect(next.head);
                            // Its first byte is here only if bytes follow
                            // the response that just ended.
                            if used < have {
                                next.first_byte = Some(arrived);
                            }
                        }
                        if done.close {
                            close = true;
                            break;
                        }
                    }
                    Err(_) => {
                        sh.fail(ErrorClass::Read, inflight.len() as u64);
                        inflight.clear();
                        continue 'connect;
                    }
                }
            }
            // A head split across reads stays at the buffer's start.
            buf.copy_within(used..have, 0);
            have -= used;
            if have == buf.len() && buf.len() < MAX_HEAD {
                buf.resize((buf.len() * 2).min(MAX_HEAD), 0);
            }
            if close || (!s.keep_alive && inflight.is_empty()) {
                // The server closes: what is still in flight is lost.
                sh.fail(ErrorClass::Read, inflight.len() as u64);
                inflight.clear();
                if !s.keep_alive {
                    // Let the server close first, so TIME_WAIT stays there.
                    let _ = timeout(s.timeout, async {
                        while let Ok(n) = stream.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                        }
                    })
                    .await;
                    // Free to send again only now: a slow close delays the
                    // next request, and that wait is the server's.
                    room_at = Instant::now();
                }
                continue 'connect;
            }
        }
    }
}

/// Records a complete response.
fn complete(sh: &Shared, f: &InFlight, status: u16, body_len: u64, at: Instant) {
    let total = micros(at.saturating_duration_since(f.start));
    let waiting = micros(
        f.first_byte
            .unwrap_or(at)
            .saturating_duration_since(f.written),
    );
    let mut rec = sh.rec.borrow_mut();
    rec.second.completed += 1;
    record(&mut rec.second.latency, total);
    rec.connect.saturating_record(f.connect_micros);
    record(&mut rec.waiting, waiting);
    record(&mut rec.processing, total.saturating_sub(f.connect_micros));
    if let Some(slot) = rec.statuses.get_mut(status as usize) {
        *slot += 1;
    }
    if !(200..300).contains(&status) {
        rec.second.errors.status += 1;
    }
    if rec.document_length.is_none() {
        rec.document_length = Some(body_len);
    }
}
