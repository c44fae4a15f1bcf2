//! The HTTP/1.1 session driven over the in-memory transport: requests in,
//! answers out, no socket. HTTP/2 streams: [`http2`].

mod http2;

use std::rc::Rc;
use std::time::Duration;

use super::testing::{read_some, runtime, worker, worker_on};
use crate::transport::duplex;
use crate::transport::listener::{self, Prepared};
use crate::transport::stream::Stream;
use crate::worker::Worker;

/// A connection to `worker` over the in-memory pipe, counted as an
/// accepted connection is before it is served: the client's end, and the
/// gateway's ready to serve (`h2`: HTTP/2 from its first byte).
fn accepted(worker: &Rc<Worker>, h2: bool) -> (Stream, Prepared) {
    let (client, server) = duplex::pair();
    let prepared = Prepared {
        stream: Stream::Duplex(server),
        client: "192.0.2.7:40000".parse().unwrap(),
        tls: ("", ""),
        identity: None,
        h2,
    };
    worker
        .shared
        .global
        .open_connections
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (Stream::Duplex(client), prepared)
}

/// A new session on `worker` over the in-memory pipe: the client's end and
/// the serving task.
fn open_session(worker: &Rc<Worker>) -> (Stream, tokio::task::JoinHandle<()>) {
    let (client, prepared) = accepted(worker, false);
    let peer = prepared.client;
    let session = tokio::task::spawn_local(super::start::serve_stream(
        prepared,
        listener::plain(peer),
        super::active::Active::new(worker.clone()),
        super::conn::Begin::New(None),
    ));
    (client, session)
}

/// Sends `input` on a new session and returns everything the session
/// answered before it ended (or went quiet for half a second).
fn exchange(input: &[u8]) -> Vec<u8> {
    runtime().block_on(async {
        let worker = worker();
        let (client, session) = open_session(&worker);
        crate::transport::io::write_all(&client, input)
            .await
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let c = &client;
            let ready = std::future::poll_fn(|cx| c.poll_read_ready(cx));
            if tokio::time::timeout(Duration::from_millis(500), ready)
                .await
                .is_err()
            {
                break;
            }
            match c.try_recv(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
        }
        drop(client);
        let _ = tokio::time::timeout(Duration::from_secs(1), session).await;
        got
    })
}

#[test]
fn answers_a_fixed_route_and_keeps_the_connection() {
    let got = exchange(b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n");
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\nhi\n"), "{text}");
    assert!(!text.contains("connection: close"), "{text}");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let got =
        exchange(b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\nGET /nope HTTP/1.1\r\nHost: a\r\n\r\n");
    let text = String::from_utf8_lossy(&got);
    let first = text.find("HTTP/1.1 200").expect("200 first");
    let second = text.find("HTTP/1.1 404").expect("404 second");
    assert!(first < second, "{text}");
}

#[test]
fn bad_framing_gets_400_and_the_session_closes() {
    let got = exchange(
        b"GET /hello HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    );
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
}

#[test]
fn an_idle_connection_parks_and_serves_its_next_request() {
    runtime().block_on(async {
        let worker = worker();
        let (client, _session) = open_session(&worker);
        let req = b"GET /hello HTTP/1.1\r\nHost: a\r\n\r\n";
        let io = crate::transport::io::write_all;
        io(&client, req).await.unwrap();
        let first = read_some(&client, Duration::from_millis(30)).await.unwrap();
        assert!(first.starts_with(b"HTTP/1.1 200"));
        // Idle past PARK_AFTER (50 ms): parked, still counted as active.
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(worker.active.get(), 1);
        io(&client, req).await.unwrap();
        let second = read_some(&client, Duration::from_millis(30)).await.unwrap();
        assert!(second.starts_with(b"HTTP/1.1 200"), "{second:?}");
        // Parked again, the keep-alive timeout (400 ms) still closes it,
        // counted from the last answer.
        let closed = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                if read_some(&client, Duration::from_millis(100))
                    .await
                    .is_none()
                {
                    return;
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the parked connection was not closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(worker.active.get(), 0);
    });
}

#[test]
fn a_parked_connection_is_a_small_task() {
    runtime().block_on(async {
        let worker = worker();
        let peer: std::net::SocketAddr = "192.0.2.7:40000".parse().unwrap();
        let (a, _b) = duplex::pair();
        let p = || Prepared {
            stream: Stream::Duplex(duplex::pair().0),
            client: peer,
            tls: ("", ""),
            identity: None,
            h2: false,
        };
        let now = std::time::Instant::now();
        worker
            .shared
            .global
            .open_connections
            .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let parked = super::start::parked_wait(
            p(),
            listener::plain(peer),
            super::active::Active::new(worker.clone()),
            now,
            now,
        );
        let serving = super::start::serve_stream(
            p(),
            listener::plain(peer),
            super::active::Active::new(worker.clone()),
            super::conn::Begin::New(None),
        );
        let (parked, serving) = (size_of_val(&parked), size_of_val(&serving));
        drop(a);
        // What an idle keep-alive connection costs beyond its socket.
        assert!(parked <= 512, "parked task future: {parked} bytes");
        assert!(serving > 4 * parked, "serving {serving}, parked {parked}");
    });
}

/// The size of the future `f` returns (it takes four arguments).
fn future_size<F, A, B, C, D, R>(_f: F) -> usize
where
    F: FnOnce(A, B, C, D) -> R,
{
    size_of::<R>()
}

#[test]
fn a_tunnel_task_is_small() {
    // What an idle tunnel holds besides its two sockets and a few small
    // boxes: a fraction of the serving task it came from.
    let tunnel = future_size(super::tunneled::run);
    let serving = future_size(super::start::serve_stream);
    assert!(tunnel <= 640, "tunnel task future: {tunnel} bytes");
    assert!(serving > 4 * tunnel, "serving {serving}, tunnel {tunnel}");
}

/// An upstream on a local port that answers each connection's first
/// request head with a `101`, then echoes what it gets.
async fn upgrading_upstream() -> std::net::SocketAddr {
    scripted_upstream(
        b"HTTP/1.1 101 Switching Protocols\r\n\
        Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    )
    .await
}

/// An upstream on a local port that answers each connection's first
/// request head with `answer`, then echoes what it gets.
async fn scripted_upstream(answer: &'static [u8]) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::task::spawn_local(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::task::spawn_local(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                if s.write_all(answer).await.is_err() {
                    return;
                }
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn a_tunnel_runs_in_its_own_task_and_the_counts_follow_it() {
    runtime().block_on(async {
        let up = upgrading_upstream().await;
        let cfg = format!(
            "listen: [\"127.0.0.1:9\"]\nservices:\n  - name: s\n    endpoints: [\"{up}\"]\n\
             routes:\n  - name: ws\n    service: s\n"
        );
        let worker = worker_on(&cfg);
        let (client, serving) = open_session(&worker);
        let req = b"GET /chat HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n\
            Upgrade: websocket\r\n\r\n";
        let io = crate::transport::io::write_all;
        io(&client, req).await.unwrap();
        let head = read_some(&client, Duration::from_millis(200))
            .await
            .unwrap();
        assert!(head.starts_with(b"HTTP/1.1 101 "), "{head:?}");
        // The serving task has ended and given its buffers back; the
        // tunnel's task holds the connection, still counted.
        tokio::time::timeout(Duration::from_secs(2), serving)
            .await
            .expect("the serving task ended")
            .unwrap();
        assert_eq!(worker.free_bufs(), 1);
        let global = &worker.shared.global;
        let open = |g: &crate::observe::metrics::GlobalMetrics| {
            (
                g.open_connections
                    .load(std::sync::atomic::Ordering::Relaxed),
                g.tunnels_open.load(std::sync::atomic::Ordering::Relaxed),
            )
        };
        assert_eq!((worker.active.get(), open(global)), (1, (1, 1)));
        // Bytes both ways, through the tunnel's task.
        io(&client, b"ping").await.unwrap();
        let echo = read_some(&client, Duration::from_millis(200))
            .await
            .unwrap();
        assert_eq!(echo, b"ping");
        // The client ends: the tunnel closes, and every count with it.
        client.shutdown_write();
        assert_eq!(read_some(&client, Duration::from_secs(2)).await, None);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!((worker.active.get(), open(global)), (0, (0, 0)));
        let bytes = (
            global
                .tunnel_bytes_up
                .load(std::sync::atomic::Ordering::Relaxed),
            global
                .tunnel_bytes_down
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        assert_eq!(bytes.0, 4);
        assert!(bytes.1 > 4, "the 101 and the echo: {bytes:?}");
    });
}
