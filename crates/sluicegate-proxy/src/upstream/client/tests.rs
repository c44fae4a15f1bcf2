//! The internal client over the in-memory transport: each connect a test's
//! worker makes is answered by an upstream of the test's own over an
//! in-memory pipe ([`in_memory`]), HTTP/1.1 or HTTP/2; no socket.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::HeaderMap;

use super::{send, send_with, Error, Event, Options, Origin, Part, Response};
use crate::clock::deadline::OwnSlot;
use crate::proto::head::RequestHead;
use crate::proto::http2::exchange::Exchange;
use crate::proto::http2::request::{fill_head, BodyAt};
use crate::route::target::Target;
use crate::snapshot::Shared;
use crate::transport::duplex;
use crate::transport::h2io::{Flood, H2Io};
use crate::transport::io::write_all;
use crate::transport::stream::Stream;
use crate::upstream::dial::in_memory;
use crate::upstream::failure::{AttemptError, Side};
use crate::upstream::held::{HeldResponse, Replay, Replayed};
use crate::worker::{Downstream, Worker};

const A: &str = "192.0.2.1:8080";
const B: &str = "192.0.2.2:8080";

/// Runs `test` on a worker thread's kind of runtime, with a worker on the
/// config whose `services` section is `services`, its deadline sweeper
/// running.
fn on_worker<F: std::future::Future<Output = ()>>(
    services: &str,
    test: impl FnOnce(Rc<Worker>) -> F,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build_local(tokio::runtime::LocalOptions::default())
        .unwrap();
    rt.block_on(async {
        let cfg = format!("listen: [\"127.0.0.1:9\"]\nservices:\n{services}");
        let cfg = sluicegate_config::parse(&cfg).unwrap();
        let worker = Worker::new(Shared::new(&cfg).unwrap()).into_rc();
        let sweeper = worker.clone();
        tokio::task::spawn_local(async move { sweeper.deadlines.run().await });
        test(worker).await;
    });
}

/// What an upstream of a test does with a connection.
#[derive(Clone, Copy)]
enum Upstream {
    /// Refuses it.
    Refuses,
    /// Answers every HTTP/1.1 request on it with these bytes.
    Answers(&'static [u8]),
    /// Answers the first request with these bytes, then closes.
    AnswersAndCloses(&'static [u8]),
    /// Answers the first request with these bytes, and closes without an
    /// answer once the second one came (a keep-alive connection the
    /// upstream gave up on as it was used again).
    AnswersOnce(&'static [u8]),
    /// Speaks HTTP/2: answers each stream with a 200, `x-a: 1`, these
    /// pieces of data, and a trailer `x-sum: 5`.
    H2(&'static [&'static [u8]]),
}

/// What the upstreams saw: connects and requests (HTTP/2 ones as
/// `METHOD authority path`), by address.
#[derive(Default)]
struct Seen {
    connects: HashMap<SocketAddr, usize>,
    requests: HashMap<SocketAddr, Vec<String>>,
}

impl Seen {
    fn requests(&self, addr: &str) -> Vec<String> {
        let addr = addr.parse().unwrap();
        self.requests.get(&addr).cloned().unwrap_or_default()
    }

    fn connects(&self, addr: &str) -> usize {
        self.connects
            .get(&addr.parse().unwrap())
            .copied()
            .unwrap_or(0)
    }
}

/// Answers this thread's connects by the upstreams given per address (any
/// other address refuses).
fn upstreams(of: &[(&str, Upstream)]) -> Rc<RefCell<Seen>> {
    let seen = Rc::new(RefCell::new(Seen::default()));
    let by: HashMap<SocketAddr, Upstream> =
        of.iter().map(|(a, u)| (a.parse().unwrap(), *u)).collect();
    let log = seen.clone();
    in_memory(move |addr| {
        *log.borrow_mut().connects.entry(addr).or_default() += 1;
        let up = match by.get(&addr) {
            None | Some(Upstream::Refuses) => return Err(io::ErrorKind::ConnectionRefused.into()),
            Some(&up) => up,
        };
        let (ours, theirs) = duplex::pair();
        let (theirs, log) = (Stream::Duplex(theirs), log.clone());
        match up {
            Upstream::H2(data) => tokio::task::spawn_local(serve_h2(theirs, addr, data, log)),
            _ => tokio::task::spawn_local(serve(theirs, addr, up, log)),
        };
        Ok(Stream::Duplex(ours))
    });
    seen
}

/// An HTTP/1.1 upstream's side of a connection.
async fn serve(s: Stream, addr: SocketAddr, up: Upstream, seen: Rc<RefCell<Seen>>) {
    let mut buf = Vec::new();
    let mut served = false;
    while let Some(req) = read_request(&s, &mut buf).await {
        let req = String::from_utf8_lossy(&req).into_owned();
        seen.borrow_mut()
            .requests
            .entry(addr)
            .or_default()
            .push(req);
        let (answer, close) = match up {
            Upstream::AnswersOnce(_) if served => return,
            Upstream::AnswersOnce(a) | Upstream::Answers(a) => (a, false),
            Upstream::AnswersAndCloses(a) => (a, true),
            Upstream::Refuses | Upstream::H2(_) => return,
        };
        if write_all(&s, answer).await.is_err() {
            return;
        }
        served = true;
        if close {
            s.shutdown_write();
            return;
        }
    }
}

/// Reads one request (its head, and its body by its `content-length`) off
/// `s`; what came after it stays in `buf`. `None` at the end.
async fn read_request(s: &Stream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            if buf.len() >= end + 4 + len {
                return Some(buf.drain(..end + 4 + len).collect());
            }
        }
        std::future::poll_fn(|cx| s.poll_read_ready(cx))
            .await
            .ok()?;
        let mut piece = [0u8; 4096];
        match s.try_recv(&mut piece) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&piece[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return None,
        }
    }
}

/// An HTTP/2 upstream's side of a connection (the `h2` crate's server).
async fn serve_h2(
    s: Stream,
    addr: SocketAddr,
    data: &'static [&'static [u8]],
    seen: Rc<RefCell<Seen>>,
) {
    let io = H2Io::new(s, Vec::new(), Flood::default());
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((req, mut respond))) = conn.accept().await {
        let uri = req.uri();
        let line = format!(
            "{} {} {}",
            req.method(),
            uri.authority().unwrap(),
            uri.path()
        );
        seen.borrow_mut()
            .requests
            .entry(addr)
            .or_default()
            .push(line);
        let head = http::Response::builder()
            .status(200)
            .header("x-a", "1")
            .body(())
            .unwrap();
        let mut send = respond.send_response(head, false).unwrap();
        for piece in data {
            send.send_data(Bytes::from_static(piece), false).unwrap();
        }
        let mut trailers = HeaderMap::new();
        trailers.insert("x-sum", "5".parse().unwrap());
        send.send_trailers(trailers).unwrap();
    }
}

/// The body's events to the end: its data joined, its trailers.
async fn body_of(res: &mut Response<'_, '_>) -> (Vec<u8>, Option<HeaderMap>) {
    let (mut data, mut trailers) = (Vec::new(), None);
    loop {
        match res.next().await.unwrap() {
            Event::Data(d) => data.extend_from_slice(&d),
            Event::Trailers(t) => trailers = Some(t),
            Event::End => return (data, trailers),
        }
    }
}

fn get(uri: &str) -> http::Request<Bytes> {
    http::Request::get(uri)
        .header("x-test", "1")
        .body(Bytes::new())
        .unwrap()
}

const ONE: &str = "  - name: s\n    endpoints: [\"192.0.2.1:8080\"]\n";
const TWO: &str = "  - name: s\n    endpoints: [\"192.0.2.1:8080\", \"192.0.2.2:8080\"]\n";

#[test]
fn a_get_reads_a_length_body_and_its_connection_is_pooled_and_used_again() {
    on_worker(ONE, |worker| async move {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-a: 1\r\n\r\nhello";
        let seen = upstreams(&[(A, Upstream::Answers(answer))]);
        let snap = worker.shared.snapshot.load();
        let service = &snap.services[0];
        let ep = &service.endpoints[0];
        let mut res = send(&worker, &snap, service, get("http://api.example/items?x=1"))
            .await
            .unwrap();
        assert_eq!((res.status(), res.endpoint()), (200, A));
        assert!(res.upstream_us() < 1_000_000, "{}", res.upstream_us());
        assert_eq!(res.fields().get("x-a").unwrap(), "1");
        assert!(res.fields().get("content-length").is_none());
        assert_eq!(body_of(&mut res).await, (b"hello".to_vec(), None));
        assert_eq!(res.next().await.unwrap(), Event::End);
        // Read to its end: the connection waits in the pool, the slot and
        // the buffer set are back.
        assert_eq!(ep.idle.load(Ordering::Relaxed), 1);
        assert_eq!(ep.in_flight(), 0);
        drop(res);
        assert_eq!(worker.free_bufs(), 1);
        let req = &seen.borrow().requests(A)[0];
        assert!(req.starts_with("GET /items?x=1 HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("\r\nhost: api.example\r\n"), "{req}");
        assert!(req.contains("\r\nx-test: 1\r\n"), "{req}");
        assert!(req.contains("\r\nx-request-id: "), "{req}");
        assert!(!req.contains("x-forwarded-"), "{req}");
        // The same connection again, from the pool.
        let mut res = send(&worker, &snap, service, get("http://api.example/again"))
            .await
            .unwrap();
        assert_eq!(body_of(&mut res).await.0, b"hello");
        assert_eq!(
            (seen.borrow().connects(A), seen.borrow().requests(A).len()),
            (1, 2)
        );
        // The endpoint's counters and response times, as for a client's.
        assert_eq!(ep.requests.load(Ordering::Relaxed), 2);
        assert_eq!(ep.response_time.read().0.iter().sum::<u64>(), 2);
    });
}

#[test]
fn a_chunked_body_gives_its_data_then_its_trailers() {
    on_worker(ONE, |worker| async move {
        let answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
            5\r\nhello\r\n6\r\n world\r\n0\r\nx-checksum: abc\r\n\r\n";
        let seen = upstreams(&[(A, Upstream::Answers(answer))]);
        let snap = worker.shared.snapshot.load();
        let service = &snap.services[0];
        // No authority: the endpoint's name is the Host.
        let post = http::Request::post("/upload")
            .header("x-request-id", "mine")
            .body(Bytes::from_static(b"abc"))
            .unwrap();
        let mut res = send(&worker, &snap, service, post).await.unwrap();
        assert!(res.fields().get("transfer-encoding").is_none());
        let (data, trailers) = body_of(&mut res).await;
        assert_eq!(data, b"hello world");
        assert_eq!(trailers.unwrap().get("x-checksum").unwrap(), "abc");
        assert_eq!(service.endpoints[0].idle.load(Ordering::Relaxed), 1);
        let req = &seen.borrow().requests(A)[0];
        assert!(req.starts_with("POST /upload HTTP/1.1\r\n"), "{req}");
        assert!(req.contains("\r\nhost: 192.0.2.1:8080\r\n"), "{req}");
        assert!(req.contains("\r\ncontent-length: 3\r\n"), "{req}");
        // Its own id, passed on once.
        assert_eq!(req.matches("x-request-id").count(), 1, "{req}");
        assert!(req.contains("\r\nx-request-id: mine\r\n"), "{req}");
        assert!(req.ends_with("\r\n\r\nabc"), "{req}");
    });
}

#[test]
fn a_body_until_the_close_ends_with_it_and_one_cut_short_fails() {
    on_worker(ONE, |worker| async move {
        let snap = worker.shared.snapshot.load();
        let service = &snap.services[0];
        let ep = &service.endpoints[0];
        let answer = b"HTTP/1.1 200 OK\r\n\r\nall of it";
        upstreams(&[(A, Upstream::AnswersAndCloses(answer))]);
        let mut res = send(&worker, &snap, service, get("http://a/"))
            .await
            .unwrap();
        assert_eq!(body_of(&mut res).await, (b"all of it".to_vec(), None));
        assert_eq!((ep.idle.load(Ordering::Relaxed), ep.in_flight()), (0, 0));
        // A length the upstream does not keep to.
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf";
        upstreams(&[(A, Upstream::AnswersAndCloses(answer))]);
        let mut res = send(&worker, &snap, service, get("http://a/"))
            .await
            .unwrap();
        let half = Event::Data(Bytes::from_static(b"half"));
        assert_eq!(res.next().await.unwrap(), half);
        let e = res.next().await.unwrap_err();
        assert!(matches!(e, Error::Body) && !e.retry_safe(), "{e:?}");
        assert_eq!(e.side(), Side::Upstream);
        assert!(matches!(res.next().await, Err(Error::Body)));
        assert_eq!((ep.idle.load(Ordering::Relaxed), ep.in_flight()), (0, 0));
    });
}

/// Sends two GETs to the two endpoints, `A` answering as `a` does and
/// `B` with a 200: whichever endpoint the balancer picks first, `A` gets
/// one of them, and `B` answers both (one as a retry). What they saw.
async fn both_answered_by_b(worker: &Worker, a: Upstream) -> Rc<RefCell<Seen>> {
    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
    let seen = upstreams(&[(A, a), (B, Upstream::Answers(ok))]);
    let snap = worker.shared.snapshot.load();
    let service = &snap.services[0];
    for _ in 0..2 {
        let mut res = send(worker, &snap, service, get("http://api.example/"))
            .await
            .unwrap();
        assert_eq!((res.status(), res.endpoint()), (200, B));
        assert_eq!(body_of(&mut res).await.0, b"ok");
    }
    assert_eq!(seen.borrow().requests(B).len(), 2);
    assert_eq!(service.endpoints[1].retries.load(Ordering::Relaxed), 1);
    seen
}

#[test]
fn a_failed_connect_goes_to_the_other_endpoint() {
    on_worker(TWO, |worker| async move {
        // A refused connect takes A out of rotation: tried once.
        let seen = both_answered_by_b(&worker, Upstream::Refuses).await;
        assert_eq!(seen.borrow().connects(A), 1);
        let a = &worker.shared.snapshot.load().services[0].endpoints[0];
        assert_eq!(a.connect_errors.load(Ordering::Relaxed), 1);
    });
}

#[test]
fn a_listed_status_goes_to_the_other_endpoint() {
    let services = format!("{TWO}    retries: {{ on: [connect, 503] }}\n");
    on_worker(&services, |worker| async move {
        let busy = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n";
        let seen = both_answered_by_b(&worker, Upstream::Answers(busy)).await;
        assert_eq!(seen.borrow().requests(A).len(), 1);
    });
}

#[test]
fn a_pooled_connection_closed_unanswered_sends_the_request_again_on_a_new_one() {
    on_worker(ONE, |worker| async move {
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let seen = upstreams(&[(A, Upstream::AnswersOnce(answer))]);
        let snap = worker.shared.snapshot.load();
        let service = &snap.services[0];
        let ep = &service.endpoints[0];
        for path in ["/first", "/second"] {
            let uri = format!("http://api.example{path}");
            let mut res = send(&worker, &snap, service, get(&uri)).await.unwrap();
            assert_eq!(
                (res.status(), body_of(&mut res).await.0),
                (200, b"ok".to_vec())
            );
        }
        // The second went on the pooled connection, which closed without
        // an answer: taken by nobody, so sent again on a new connection,
        // to the same endpoint, neither a retry nor a failure.
        let requests = seen.borrow().requests(A);
        let paths: Vec<_> = requests
            .iter()
            .map(|r| r.split(' ').nth(1).unwrap())
            .collect();
        assert_eq!(paths, ["/first", "/second", "/second"]);
        assert_eq!(seen.borrow().connects(A), 2);
        assert_eq!(ep.retries.load(Ordering::Relaxed), 0);
        assert_eq!(ep.requests.load(Ordering::Relaxed), 2);
        assert!(ep.breaker.admit_now().is_some());
    });
}

#[test]
fn failures_are_typed_and_give_the_buffers_back() {
    on_worker(ONE, |worker| async move {
        upstreams(&[(A, Upstream::Refuses)]);
        let snap = worker.shared.snapshot.load();
        let service = &snap.services[0];
        let e = send(&worker, &snap, service, get("http://api.example/"))
            .await
            .unwrap_err();
        assert!(
            matches!(e, Error::Attempt(AttemptError::Connect(_))),
            "{e:?}"
        );
        assert_eq!((e.side(), e.kind().status()), (Side::Upstream, 502));
        assert!(e.retry_safe());
        // The only endpoint is out of rotation now, ejected: tried again
        // all the same, since every endpoint is.
        let e = send(&worker, &snap, service, get("http://api.example/"))
            .await
            .unwrap_err();
        assert!(e.retry_safe(), "{e:?}");
        // A request that cannot be laid out is the gateway's own fault.
        let bad = http::Request::post("http://api.example/")
            .header("content-length", "x")
            .body(Bytes::new())
            .unwrap();
        let e = send(&worker, &snap, service, bad).await.unwrap_err();
        assert!(matches!(e, Error::Request) && e.side() == Side::Internal);
        assert_eq!(worker.free_bufs(), 1);
        assert_eq!(service.endpoints[0].in_flight(), 0);
    });
}

#[test]
fn an_http2_upstream_gives_its_data_then_its_trailers() {
    let services = format!("{ONE}    protocol: h2c\n");
    on_worker(&services, |worker| async move {
        let seen = upstreams(&[(A, Upstream::H2(&[b"hel", b"lo"]))]);
        let snap = worker.shared.snapshot.load();
        let service = &snap.services[0];
        for path in ["/one", "/two"] {
            let uri = format!("http://api.example{path}");
            let mut res = send(&worker, &snap, service, get(&uri)).await.unwrap();
            assert_eq!(res.status(), 200);
            assert_eq!(res.fields().get("x-a").unwrap(), "1");
            let (data, trailers) = body_of(&mut res).await;
            assert_eq!(data, b"hello");
            assert_eq!(trailers.unwrap().get("x-sum").unwrap(), "5");
        }
        // Two streams on one connection.
        assert_eq!(seen.borrow().connects(A), 1);
        assert_eq!(
            seen.borrow().requests(A),
            ["GET api.example /one", "GET api.example /two"]
        );
    });
}

#[test]
fn a_response_is_held_whole_or_refused_past_its_limit() {
    on_worker(ONE, |worker| async move {
        let answer = b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\nx-a: 1\r\n\r\n\
            5\r\nhello\r\n6\r\n world\r\n0\r\nx-checksum: abc\r\n\r\n";
        upstreams(&[(A, Upstream::Answers(answer))]);
        let snap = worker.shared.snapshot.load();
        let service = &snap.services[0];
        let res = send(&worker, &snap, service, get("http://a/"))
            .await
            .unwrap();
        let held = HeldResponse::read(res, 1024).await.unwrap();
        assert_eq!(held.status, 201);
        assert_eq!(held.fields.get("x-a").unwrap(), "1");
        assert_eq!(held.body.concat(), b"hello world");
        assert_eq!(held.trailers.unwrap().get("x-checksum").unwrap(), "abc");
        let ep = &service.endpoints[0];
        assert_eq!(ep.idle.load(Ordering::Relaxed), 1);
        let res = send(&worker, &snap, service, get("http://a/"))
            .await
            .unwrap();
        let e = HeldResponse::read(res, 8).await.unwrap_err();
        assert!(matches!(e, Error::TooLarge), "{e:?}");
        // Its connection was closed, not pooled.
        assert_eq!(ep.idle.load(Ordering::Relaxed), 0);
    });
}

/// A held response of `hello` in two pieces, `content-type: text/plain`,
/// and fields the replay must not pass on as held.
fn hello(trailers: bool) -> HeldResponse {
    let mut fields = HeaderMap::new();
    fields.insert("content-type", "text/plain".parse().unwrap());
    fields.insert("connection", "keep-alive".parse().unwrap());
    fields.insert("content-length", "99".parse().unwrap());
    HeldResponse {
        status: 200,
        fields,
        body: vec![
            Bytes::from_static(b"hel"),
            Bytes::new(),
            Bytes::from_static(b"lo"),
        ],
        trailers: trailers.then(|| {
            let mut t = HeaderMap::new();
            t.insert("x-sum", "5".parse().unwrap());
            t
        }),
    }
}

/// Replays `held` to an HTTP/1.x client (`minor`, HEAD or not, closing
/// or not) over the in-memory pipe: what the client read, and what the
/// replay said.
async fn replay_h1(
    worker: &Worker,
    held: &HeldResponse,
    minor: u8,
    is_head: bool,
    close: bool,
) -> (String, Replayed) {
    let (ours, theirs) = duplex::pair();
    let how = Replay {
        deadlines: &worker.deadlines,
        write_timeout: std::time::Duration::from_secs(1),
        is_head,
        client_minor: minor,
        close,
    };
    let ours = Stream::Duplex(ours);
    let replayed = held.replay(&ours, how, &mut Vec::new()).await.unwrap();
    drop(ours);
    let (theirs, mut got) = (Stream::Duplex(theirs), Vec::new());
    let mut piece = [0u8; 4096];
    while let Ok(n @ 1..) = theirs.try_recv(&mut piece) {
        got.extend_from_slice(&piece[..n]);
    }
    (String::from_utf8(got).unwrap(), replayed)
}

#[test]
fn a_held_response_is_replayed_to_http1_clients() {
    on_worker(ONE, |worker| async move {
        let w = &worker;
        let whole = hello(false);
        let (text, r) = replay_h1(w, &whole, 1, false, false).await;
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\nhello"
        );
        assert_eq!((r.bytes, r.close), (5, false));
        // With trailers: chunked, the trailers after the last chunk.
        let (text, r) = replay_h1(w, &hello(true), 1, false, false).await;
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n\
             3\r\nhel\r\n2\r\nlo\r\n0\r\nx-sum: 5\r\n\r\n"
        );
        assert_eq!((r.bytes, r.close), (5, false));
        // To HTTP/1.0: no chunks, so until the close, trailers dropped.
        let (text, r) = replay_h1(w, &hello(true), 0, false, false).await;
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nhello"
        );
        assert!(r.close);
        let (text, _) = replay_h1(w, &whole, 0, false, false).await;
        assert!(text.contains("\r\ncontent-length: 5\r\nconnection: keep-alive\r\n\r\nhello"));
        // HEAD: the head alone; a closing connection says so.
        let (text, r) = replay_h1(w, &whole, 1, true, true).await;
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\
             connection: close\r\n\r\n"
        );
        assert_eq!((r.bytes, r.close), (0, true));
        // A 304 has no body, whatever is held.
        let not_modified = HeldResponse {
            status: 304,
            ..hello(false)
        };
        let (text, _) = replay_h1(w, &not_modified, 1, false, false).await;
        assert_eq!(
            text,
            "HTTP/1.1 304 Not Modified\r\ncontent-type: text/plain\r\n\r\n"
        );
        // A large body in large pieces: each goes as it is.
        let big = HeldResponse {
            body: vec![
                Bytes::from(vec![b'x'; 40_000]),
                Bytes::from(vec![b'y'; 40_000]),
            ],
            ..hello(false)
        };
        let (text, r) = replay_h1(w, &big, 1, false, false).await;
        let body = text.split_once("\r\n\r\n").unwrap().1;
        assert!(text.contains("\r\ncontent-length: 80000\r\n"));
        assert_eq!((body.len(), r.bytes), (80_000, 80_000));
        assert!(body.starts_with('x') && body.ends_with('y'));
    });
}

/// Replays `held` to an HTTP/2 client's stream (the `h2` crate's client
/// and server over the in-memory pipe, the gateway's side an
/// [`Exchange`]): the head, data and trailers the client read.
async fn replay_h2(
    worker: &Worker,
    held: &HeldResponse,
) -> (http::response::Parts, Vec<u8>, Option<HeaderMap>) {
    let (c, s) = duplex::pair();
    let client = tokio::task::spawn_local(async move {
        let io = H2Io::client(Stream::Duplex(c), Flood::default());
        let (mut send, conn) = h2::client::handshake(io).await.unwrap();
        tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        let req = http::Request::get("http://a.example/").body(()).unwrap();
        let (res, _) = send.send_request(req, true).unwrap();
        let (parts, mut body) = res.await.unwrap().into_parts();
        let mut data = Vec::new();
        while let Some(d) = body.data().await {
            let d = d.unwrap();
            body.flow_control().release_capacity(d.len()).unwrap();
            data.extend_from_slice(&d);
        }
        (parts, data, body.trailers().await.unwrap())
    });
    let io = H2Io::new(Stream::Duplex(s), Vec::new(), Flood::default());
    let mut conn = h2::server::handshake(io).await.unwrap();
    let (req, respond) = conn.accept().await.unwrap().unwrap();
    tokio::task::spawn_local(async move { while conn.accept().await.is_some() {} });
    let x = Exchange::new(req.into_body(), respond, false, Vec::new());
    let stream = Stream::H2(Box::new(x));
    let how = Replay {
        deadlines: &worker.deadlines,
        write_timeout: std::time::Duration::from_secs(1),
        is_head: false,
        client_minor: 1,
        close: false,
    };
    let r = held.replay(&stream, how, &mut Vec::new()).await.unwrap();
    drop(stream);
    let (head, data, trailers) = client.await.unwrap();
    // Never closes the connection; counts what went as DATA.
    assert_eq!((r.bytes, r.close), (data.len() as u64, false));
    (head, data, trailers)
}

#[test]
fn a_held_response_is_replayed_to_http2_clients() {
    on_worker(ONE, |worker| async move {
        let (head, data, trailers) = replay_h2(&worker, &hello(false)).await;
        assert_eq!(head.status, 200);
        assert_eq!(head.headers.get("content-type").unwrap(), "text/plain");
        assert_eq!(head.headers.get("content-length").unwrap(), "5");
        assert!(head.headers.get("connection").is_none());
        assert_eq!((data, trailers), (b"hello".to_vec(), None));
        // With trailers: no length, the trailers end the stream.
        let (head, data, trailers) = replay_h2(&worker, &hello(true)).await;
        assert!(head.headers.get("content-length").is_none());
        assert_eq!(data, b"hello");
        assert_eq!(trailers.unwrap().get("x-sum").unwrap(), "5");
        let empty = HeldResponse {
            status: 204,
            ..hello(false)
        };
        let (head, data, _) = replay_h2(&worker, &empty).await;
        assert_eq!((head.status.as_u16(), data.len()), (204, 0));
    });
}

/// The facts of a client's HTTP/2 request over TLS to `shop.example`
/// from 198.51.100.7, which came through a proxy for 203.0.113.9.
fn origin(worker: &Worker) -> Origin {
    let (ours, _theirs) = duplex::pair();
    let client = Stream::Duplex(ours);
    let slot = OwnSlot::new(&worker.deadlines);
    let down = Downstream {
        worker,
        client: &client,
        slot: &slot,
        peer_ip: "198.51.100.7",
        https: true,
    };
    let (parts, ()) = http::Request::get("https://shop.example/cart")
        .header("x-forwarded-for", "203.0.113.9")
        .body(())
        .unwrap()
        .into_parts();
    let (mut raw, mut head) = (Vec::new(), RequestHead::default());
    fill_head(&parts, BodyAt::None, None, &mut raw, &mut head).unwrap();
    let t = Target::parse(&raw, &head).unwrap();
    Origin::of(&down, "198.51.100.7".parse().unwrap(), &raw, &head, &t)
}

#[test]
fn a_call_for_a_client_carries_its_forwarded_facts_and_the_gateways_own_none() {
    let services =
        format!("{ONE}  - name: bare\n    endpoints: [\"{B}\"]\n    forwarded_headers: false\n");
    on_worker(&services, |worker| async move {
        let answer = b"HTTP/1.1 204 No Content\r\n\r\n";
        let seen = upstreams(&[
            (A, Upstream::Answers(answer)),
            (B, Upstream::Answers(answer)),
        ]);
        let snap = worker.shared.snapshot.load();
        // Fields written in code never pass as X-Forwarded-*.
        let req = || {
            http::Request::get("http://auth.internal/check")
                .header("x-forwarded-for", "6.6.6.6")
                .header("x-forwarded-host", "evil.example")
                .body(Bytes::new())
                .unwrap()
        };
        let on_behalf = Options {
            origin: Some(origin(&worker)),
            ..Options::default()
        };
        for (service, opts) in [
            (&snap.services[0], &on_behalf),
            (&snap.services[0], &Options::default()),
            (&snap.services[1], &on_behalf),
        ] {
            let mut res = send_with(&worker, &snap, service, req(), opts)
                .await
                .unwrap();
            assert_eq!(body_of(&mut res).await.0, b"");
        }
        let to_a = seen.borrow().requests(A);
        let (mine, own) = (&to_a[0], &to_a[1]);
        assert!(mine.contains("\r\nhost: auth.internal\r\n"), "{mine}");
        assert!(
            mine.contains("\r\nx-forwarded-for: 203.0.113.9, 198.51.100.7\r\n"),
            "{mine}"
        );
        assert!(mine.contains("\r\nx-forwarded-proto: https\r\n"), "{mine}");
        assert!(
            mine.contains("\r\nx-forwarded-host: shop.example\r\n"),
            "{mine}"
        );
        assert_eq!(mine.matches("x-forwarded-").count(), 3, "{mine}");
        assert!(!own.contains("x-forwarded-"), "{own}");
        // A service that takes no X-Forwarded-* gets none, on anyone's behalf.
        let bare = &seen.borrow().requests(B)[0];
        assert!(!bare.contains("x-forwarded-"), "{bare}");
    });
}

#[test]
fn a_call_past_its_deadlines_ends_with_a_timeout_for_its_head_or_its_body() {
    on_worker(ONE, |worker| async move {
        let snap = worker.shared.snapshot.load();
        let service = &snap.services[0];
        let ep = &service.endpoints[0];
        let within = std::time::Duration::from_millis(150);
        // No answer at all (the service's own response_header is 60 s).
        upstreams(&[(A, Upstream::Answers(b""))]);
        let opts = Options {
            head_within: Some(within),
            ..Options::default()
        };
        let t0 = std::time::Instant::now();
        let e = send_with(&worker, &snap, service, get("http://a/"), &opts)
            .await
            .unwrap_err();
        let took = t0.elapsed();
        assert!(matches!(e, Error::Deadline(Part::Head)), "{e:?}");
        assert!(took >= within && took < 10 * within, "{took:?}");
        assert!(!e.retry_safe());
        assert_eq!(e.kind(), crate::proto::response::ErrorKind::UpstreamTimeout);
        assert_eq!(ep.in_flight(), 0);
        // A head, then half the body and nothing more.
        upstreams(&[(
            A,
            Upstream::Answers(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf"),
        )]);
        let opts = Options {
            body_within: Some(within),
            ..Options::default()
        };
        let mut res = send_with(&worker, &snap, service, get("http://a/"), &opts)
            .await
            .unwrap();
        let t0 = std::time::Instant::now();
        assert_eq!(
            res.next().await.unwrap(),
            Event::Data(Bytes::from_static(b"half"))
        );
        let e = res.next().await.unwrap_err();
        let took = t0.elapsed();
        assert!(matches!(e, Error::Deadline(Part::Body)), "{e:?}");
        assert!(took < 10 * within, "{took:?}");
        assert_eq!((ep.idle.load(Ordering::Relaxed), ep.in_flight()), (0, 0));
        drop(res);
        // Within its deadlines, a call is as any other.
        upstreams(&[(
            A,
            Upstream::Answers(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
        )]);
        let opts = Options {
            head_within: Some(within),
            body_within: Some(within),
            ..Options::default()
        };
        let mut res = send_with(&worker, &snap, service, get("http://a/"), &opts)
            .await
            .unwrap();
        assert_eq!(body_of(&mut res).await, (b"ok".to_vec(), None));
    });
}
