//! The load engine against a real local upstream: counts are exact (what was
//! sent is what the upstream saw) and every failure lands in its class.

use std::net::IpAddr;
use std::time::Duration;

use sluicegate_bench::engine::{Settings, Stop};
use sluicegate_bench::report::{Meta, Run};
use sluicegate_bench::target::{RequestSpec, Url};
use sluicegate_bench::{execute, parse_sources};
use sluicegate_testkit::{free_port, TestUpstream};

struct Load {
    url: String,
    paths: Vec<(String, u32)>,
    connections: usize,
    stop: Stop,
    rate: Option<f64>,
    keep_alive: bool,
    pipeline: usize,
    timeout: Duration,
    sources: Vec<IpAddr>,
    threads: usize,
    body: Vec<u8>,
}

impl Load {
    fn new(url: String, stop: Stop) -> Load {
        Load {
            url,
            paths: Vec::new(),
            connections: 4,
            stop,
            rate: None,
            keep_alive: true,
            pipeline: 1,
            timeout: Duration::from_secs(5),
            sources: Vec::new(),
            threads: 2,
            body: Vec::new(),
        }
    }

    fn run(&self) -> Run {
        let base = Url::parse(&self.url).unwrap();
        let spec = |target: &str, weight| RequestSpec {
            url: Url {
                target: target.to_string(),
                ..base.clone()
            },
            method: if self.body.is_empty() { "GET" } else { "POST" }.into(),
            headers: vec![],
            body: self.body.clone(),
            weight,
        };
        let specs: Vec<RequestSpec> = if self.paths.is_empty() {
            vec![spec(&base.target, 1)]
        } else {
            self.paths.iter().map(|(p, w)| spec(p, *w)).collect()
        };
        let settings = Settings {
            addr: base.resolve().unwrap(),
            requests: specs.iter().map(|s| s.prepare(self.keep_alive)).collect(),
            connections: self.connections,
            threads: self.threads.min(self.connections),
            stop: self.stop,
            rate: self.rate,
            keep_alive: self.keep_alive,
            pipeline: self.pipeline,
            timeout: self.timeout,
            sources: self.sources.clone(),
        };
        let mut meta = Meta {
            urls: vec![self.url.clone()],
            mode: "closed".into(),
            connections: self.connections as u64,
            threads: 2,
            keep_alive: self.keep_alive,
            pipeline: self.pipeline as u64,
            rate: self.rate,
            start_unix_micros: 0,
            duration_secs: 0.0,
            parts: 1,
        };
        execute(settings, &mut meta, false)
    }
}

fn url(up: &TestUpstream, path: &str) -> String {
    format!("http://127.0.0.1:{}{path}", up.port())
}

#[test]
fn keep_alive_counts_are_exact() {
    let up = TestUpstream::start();
    let run = Load::new(url(&up, "/a"), Stop::Requests(3000)).run();
    let t = &run.totals;
    assert_eq!(up.requests_seen(), 3000);
    assert_eq!((t.sent, t.completed), (3000, 3000));
    assert_eq!(t.errors.total(), 0, "{:?}", t.errors);
    assert_eq!(t.statuses.get(&200), Some(&3000));
    assert_eq!(t.latency.len(), 3000);
    assert_eq!(t.connections_opened, 4);
    assert_eq!(up.connections_accepted(), 4);
    assert_eq!(t.seconds.iter().map(|s| s.completed).sum::<u64>(), 3000);
}

#[test]
fn duration_mode_counts_are_exact() {
    let up = TestUpstream::start();
    let run = Load::new(url(&up, "/d"), Stop::Duration(Duration::from_millis(800))).run();
    let t = &run.totals;
    assert!(t.completed > 100, "only {} in 0.8 s", t.completed);
    // Requests in flight at the end still get their answer and are counted.
    assert_eq!(up.requests_seen() as u64, t.sent);
    assert_eq!(t.sent, t.completed);
    assert!(
        run.meta.duration_secs >= 0.8 && run.meta.duration_secs < 3.0,
        "{}",
        run.meta.duration_secs
    );
}

#[test]
fn without_keep_alive_every_request_has_its_connection() {
    let up = TestUpstream::start();
    let mut load = Load::new(url(&up, "/close"), Stop::Requests(200));
    load.keep_alive = false;
    let run = load.run();
    assert_eq!(run.totals.completed, 200);
    assert_eq!(up.requests_seen(), 200);
    assert_eq!(up.connections_accepted(), 200);
    assert_eq!(run.totals.connections_opened, 200);
    let seen = up.last_requests();
    assert!(seen.iter().all(|r| r.header("connection") == Some("close")));
}

#[test]
fn pipelining_keeps_counts_exact() {
    let up = TestUpstream::start();
    let mut load = Load::new(url(&up, "/p"), Stop::Requests(1000));
    load.connections = 2;
    load.pipeline = 8;
    let run = load.run();
    assert_eq!(up.requests_seen(), 1000);
    assert_eq!(run.totals.completed, 1000);
    assert_eq!(run.totals.errors.total(), 0, "{:?}", run.totals.errors);
    assert_eq!(up.connections_accepted(), 2);
}

#[test]
fn non_2xx_answers_are_counted_not_failed() {
    let up = TestUpstream::start();
    let run = Load::new(url(&up, "/?status=503"), Stop::Requests(40)).run();
    let e = run.totals.errors;
    assert_eq!((e.status, e.failed()), (40, 0), "{e:?}");
    assert_eq!(run.totals.statuses.get(&503), Some(&40));
}

#[test]
fn a_slow_upstream_times_out() {
    let up = TestUpstream::start();
    let mut load = Load::new(url(&up, "/?delay=3000"), Stop::Requests(4));
    load.connections = 2;
    load.timeout = Duration::from_millis(200);
    let run = load.run();
    let e = run.totals.errors;
    assert_eq!(
        (e.timeout, e.failed(), run.totals.completed),
        (4, 4, 0),
        "{e:?}"
    );
}

#[test]
fn an_upstream_that_closes_is_a_read_error() {
    let up = TestUpstream::start();
    let run = Load::new(url(&up, "/?close=before"), Stop::Requests(20)).run();
    let e = run.totals.errors;
    assert_eq!(
        (e.read, e.failed(), run.totals.completed),
        (20, 20, 0),
        "{e:?}"
    );
    assert_eq!(up.requests_seen(), 20);
}

#[test]
fn a_short_body_is_a_length_error() {
    let up = TestUpstream::start();
    let run = Load::new(url(&up, "/?close=mid"), Stop::Requests(20)).run();
    let e = run.totals.errors;
    assert_eq!(
        (e.length, e.failed(), run.totals.completed),
        (20, 20, 0),
        "{e:?}"
    );
}

#[test]
fn a_refused_connection_is_a_connect_error() {
    let port = free_port();
    let mut load = Load::new(format!("http://127.0.0.1:{port}/"), Stop::Requests(10));
    load.connections = 2;
    let run = load.run();
    let e = run.totals.errors;
    assert_eq!(
        (e.connect, e.failed(), run.totals.completed, run.totals.sent),
        (10, 10, 0, 10),
        "{e:?}"
    );
}

#[test]
fn open_loop_holds_the_rate() {
    let up = TestUpstream::start();
    let mut load = Load::new(url(&up, "/r"), Stop::Duration(Duration::from_secs(2)));
    load.rate = Some(500.0);
    let run = load.run();
    let t = &run.totals;
    // 1000 intended sends in 2 s; the last ones may fall just outside.
    assert!(
        (980..=1001).contains(&t.completed),
        "completed {}",
        t.completed
    );
    assert_eq!(up.requests_seen() as u64, t.sent);
}

#[test]
fn open_loop_charges_a_stalled_server_for_the_wait() {
    // One connection asked for a request every 10 ms, each answered after
    // 50 ms: requests queue behind each other. From the intended send time
    // the latency grows with the queue; a closed loop would report ~50 ms.
    let up = TestUpstream::start();
    let mut load = Load::new(
        url(&up, "/?delay=50"),
        Stop::Duration(Duration::from_secs(1)),
    );
    load.connections = 1;
    load.rate = Some(100.0);
    let open = load.run();
    load.rate = None;
    let closed = load.run();
    let (o, c) = (&open.totals.latency, &closed.totals.latency);
    assert!(
        c.value_at_quantile(0.99) < 150_000,
        "closed p99 {}",
        c.value_at_quantile(0.99)
    );
    assert!(
        o.value_at_quantile(0.99) > 400_000,
        "open p99 {} us",
        o.value_at_quantile(0.99)
    );
    assert!(
        o.max() > 3 * c.max(),
        "open max {} closed max {}",
        o.max(),
        c.max()
    );
}

#[test]
fn weighted_scenario_splits_the_requests() {
    let up = TestUpstream::start();
    let mut load = Load::new(url(&up, "/"), Stop::Requests(4000));
    load.paths = vec![("/three".into(), 3), ("/one".into(), 1)];
    let run = load.run();
    assert_eq!(run.totals.completed, 4000);
    let seen = up.last_requests();
    assert_eq!(seen.len(), 4000);
    let three = seen.iter().filter(|r| r.target == "/three").count();
    let one = seen.iter().filter(|r| r.target == "/one").count();
    assert_eq!(three + one, 4000);
    assert!((2800..=3200).contains(&three), "/three {three} of 4000");
}

#[test]
fn connections_come_from_the_source_addresses() {
    let up = TestUpstream::start();
    let mut load = Load::new(url(&up, "/s"), Stop::Requests(40));
    load.keep_alive = false;
    load.sources = parse_sources("127.0.0.2-127.0.0.5").unwrap();
    let run = load.run();
    assert_eq!(run.totals.completed, 40, "{:?}", run.totals.errors);
    let mut peers: Vec<IpAddr> = up
        .last_requests()
        .iter()
        .map(|r| r.peer.unwrap().ip())
        .collect();
    peers.sort();
    peers.dedup();
    let want: Vec<IpAddr> = (2..=5)
        .map(|i| format!("127.0.0.{i}").parse().unwrap())
        .collect();
    assert_eq!(peers, want);
}

/// Answers every request on a connection with a response whose head is
/// `head_pad` bytes longer than usual, until the client closes.
fn padded_upstream(head_pad: usize) -> sluicegate_testkit::RawUpstream {
    use std::io::{Read, Write};
    sluicegate_testkit::RawUpstream::start(move |mut stream| {
        let pad = "x".repeat(head_pad);
        let reply = format!("HTTP/1.1 200 OK\r\nX-Pad: {pad}\r\nContent-Length: 2\r\n\r\nok");
        let mut pending = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = match stream.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                pending.drain(..end + 4);
                if stream.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
        }
    })
}

#[test]
fn long_response_heads_are_read_whole() {
    // 20 KiB heads: more than a connection's first read buffer.
    let up = padded_upstream(20 * 1024);
    let mut load = Load::new(
        format!("http://127.0.0.1:{}/", up.port()),
        Stop::Requests(50),
    );
    load.connections = 2;
    load.pipeline = 4;
    let run = load.run();
    assert_eq!(run.totals.completed, 50, "{:?}", run.totals.errors);
    assert_eq!(run.totals.errors.total(), 0);
    assert_eq!(run.totals.document_length, Some(2));
}

#[test]
fn a_head_over_64_kib_is_a_read_error() {
    let up = padded_upstream(70 * 1024);
    let mut load = Load::new(
        format!("http://127.0.0.1:{}/", up.port()),
        Stop::Requests(3),
    );
    load.connections = 1;
    let run = load.run();
    assert_eq!(
        (run.totals.errors.read, run.totals.completed),
        (3, 0),
        "{:?}",
        run.totals.errors
    );
}

#[test]
fn open_loop_sends_only_the_slots_of_the_run() {
    // 10 keep-alive connections at 5 requests/s for 1 s: 5 slots in all,
    // and nothing after the end even though 5 connections never got one.
    let up = TestUpstream::start();
    let mut load = Load::new(url(&up, "/slots"), Stop::Duration(Duration::from_secs(1)));
    load.connections = 10;
    load.rate = Some(5.0);
    let run = load.run();
    assert_eq!((run.totals.sent, run.totals.completed), (5, 5));
    assert_eq!(up.requests_seen(), 5);
    assert!(
        run.meta.duration_secs < 1.3,
        "ran {} s",
        run.meta.duration_secs
    );

    // -n in open loop: the first n slots of all connections, at any thread.
    let up = TestUpstream::start();
    let mut load = Load::new(url(&up, "/n"), Stop::Requests(4));
    load.connections = 8;
    load.rate = Some(8.0);
    let run = load.run();
    assert_eq!((run.totals.sent, run.totals.completed), (4, 4));
    // Slots at 0, 1/8, 2/8, 3/8 s.
    assert!(
        run.meta.duration_secs < 0.9,
        "ran {} s",
        run.meta.duration_secs
    );
}

#[test]
fn open_loop_keeps_its_rate_against_a_refusing_target() {
    let port = free_port();
    let mut load = Load::new(
        format!("http://127.0.0.1:{port}/"),
        Stop::Duration(Duration::from_secs(1)),
    );
    load.connections = 2;
    load.rate = Some(4.0);
    let run = load.run();
    let e = run.totals.errors;
    assert_eq!((e.connect, run.totals.sent), (4, 4), "{e:?}");
}

#[test]
fn a_server_that_stops_reading_cannot_hold_the_run() {
    // It accepts and never reads: a 32 MiB body cannot be written.
    let up =
        sluicegate_testkit::RawUpstream::start(|_s| std::thread::sleep(Duration::from_secs(3)));
    let mut load = Load::new(
        format!("http://127.0.0.1:{}/", up.port()),
        Stop::Requests(1),
    );
    load.connections = 1;
    load.timeout = Duration::from_millis(300);
    load.body = vec![b'x'; 32 << 20];
    let t0 = std::time::Instant::now();
    let run = load.run();
    assert!(
        t0.elapsed() < Duration::from_millis(2500),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(
        (run.totals.errors.write, run.totals.completed),
        (1, 0),
        "{:?}",
        run.totals.errors
    );
}
