//! The edges a slow or hostile client (or a sloppy upstream) finds: a
//! client that never reads its response is closed at
//! `timeouts.client_write` and counted; a head that trickles in is cut at
//! `client_header` after the accept, not after its first byte; an
//! oversized head gets its whole 431 before the close, never a reset; a
//! malformed first chunk from the upstream is a 502 while nothing of the
//! response was sent; and bytes an upstream sends after a bodiless response
//! never answer the next request.

mod http_common;
mod ops_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use sluicegate_testkit::{read_request_head, TestUpstream};

#[test]
fn a_client_that_never_reads_is_closed_at_client_write_and_counted() {
    use ops_common::{metric, proxy_route, service, start, wait_until, Ports};
    let up = TestUpstream::start();
    let ports = Ports::new();
    let yaml = format!(
        "{}timeouts: {{ client_write: 1s }}\nservices:\n{}routes:\n{}",
        ports.head(),
        service("s", &[up.addr().port()]),
        proxy_route("all", "/", "s"),
    );
    let _gw = start(ports, &yaml);
    let written = "sluicegate_client_write_timeouts_total";
    assert_eq!(metric(ports, written), 0.0);
    // 64 MiB asked for, none of it read: the socket buffers fill within
    // a fraction of a second, then the gateway's write waits.
    let mut s = TcpStream::connect(ports.addr()).unwrap();
    s.write_all(b"GET /big?size=67108864 HTTP/1.1\r\nHost: a\r\n\r\n")
        .unwrap();
    let t0 = Instant::now();
    assert!(
        wait_until(Duration::from_secs(8), || metric(ports, written) == 1.0),
        "no client write timeout counted after {:?}",
        t0.elapsed()
    );
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(5), "closed after {took:?}");
    // The upstream connection the response came from is closed with it.
    assert!(
        wait_until(Duration::from_secs(2), || up.connections_open() == 0),
        "the upstream connection is still held"
    );
    // The client finds what was buffered, then the end of the stream.
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(got.len() < 64 << 20, "the whole body arrived");
    assert_eq!(metric(ports, written), 1.0);
}

#[test]
fn a_head_that_trickles_in_is_cut_at_client_header_after_the_accept() {
    let up = TestUpstream::start();
    let gw = http_common::Gw::start(&format!(
        "timeouts: {{ client_header: 1s }}\nservices:\n{}routes:\n  - name: all\n    service: s\n",
        http_common::service("s", &[up.addr()], "")
    ));
    let mut s = TcpStream::connect(gw.addr()).unwrap();
    let accepted = Instant::now();
    s.set_nodelay(true).unwrap();
    let mut w = s.try_clone().unwrap();
    // The first byte just before the header timeout, then one byte every
    // 100 ms: a head that would take seconds to complete.
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        for b in b"GET /slow HTTP/1.1\r\nHost: a\r\nX-Slow: aaaaaaaaaaaaaaaaaaaa\r\n\r\n" {
            if w.write_all(&[*b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let took = accepted.elapsed();
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text:?} after {took:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(1400),
        "cut {took:?} after the accept, not about client_header (1 s)"
    );
    writer.join().unwrap();
    assert_eq!(up.requests_seen(), 0);
}

#[test]
fn an_oversized_head_sent_in_one_go_gets_its_whole_431() {
    let gw = http_common::Gw::start(
        "routes:\n  - name: ok\n    respond: { status: 200, body: \"ok\" }\n",
    );
    // 200 KB of headers against the default 16 KiB limit, written at once:
    // the gateway answers while most of it is still on its way.
    let mut head = b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec();
    let mut i = 0;
    while head.len() < 200_000 {
        head.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "y".repeat(100)).as_bytes());
        i += 1;
    }
    head.extend_from_slice(b"\r\n");
    for round in 0..5 {
        // A small send buffer, as on a slow link: most of the head is
        // still to be sent when the gateway answers.
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_send_buffer_size(8192).unwrap();
        sock.connect(&gw.addr().into()).unwrap();
        let mut s: TcpStream = sock.into();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // A client (curl, say) that fails to send its request reports
        // that, not the answer: the whole head must go out.
        let wrote = s.write_all(&head);
        let mut got = Vec::new();
        let read = s.read_to_end(&mut got);
        let text = String::from_utf8_lossy(&got);
        assert!(
            wrote.is_ok() && read.is_ok(),
            "round {round}: reset (write: {wrote:?}, read: {read:?}; got {text:?})"
        );
        assert!(
            text.starts_with("HTTP/1.1 431 "),
            "round {round}: got {text:?}"
        );
        assert!(text.contains("connection: close\r\n"), "{text}");
        http_common::assert_json_error_body(http_common::body_of(&text), 431);
    }
}

#[test]
fn a_malformed_first_chunk_that_came_with_the_head_is_a_502() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // Head and a chunk size that is not hex, in one write: the gateway
    // has sent the client nothing when it finds out.
    let conns = Arc::new(AtomicUsize::new(0));
    let count = conns.clone();
    let up = sluicegate_testkit::RawUpstream::start(move |mut s: TcpStream| {
        count.fetch_add(1, Ordering::SeqCst);
        while read_request_head(&mut s) {
            let reply =
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n";
            if s.write_all(reply).is_err() {
                return;
            }
        }
    });
    let gw = http_common::Gw::start(&format!(
        "services:\n{}routes:\n  - name: all\n    service: s\n",
        http_common::service(
            "s",
            &[up.addr()],
            "    breaker: { errors: 2, window: 10s, open_for: 10s }\n"
        )
    ));
    let mut client = sluicegate_testkit::KeepAliveClient::connect(gw.addr()).unwrap();
    for i in 0..2 {
        let r = client
            .get(&format!("/c/{i}"))
            .unwrap_or_else(|e| panic!("request {i}: no answer: {e:?}"));
        http_common::assert_json_error(&r, 502);
    }
    // Never pooled, and counted as failures by the breaker: the circuit is
    // open after two, and the next request is shed without reaching it.
    assert_eq!(conns.load(Ordering::SeqCst), 2);
    let r = client.get("/c/after").unwrap();
    http_common::assert_json_error(&r, 503);
    assert_eq!(conns.load(Ordering::SeqCst), 2);
}

/// Reads one response off `r`: status and body (`Content-Length` framed,
/// or none).
fn read_response(r: &mut impl std::io::BufRead) -> std::io::Result<(u16, Vec<u8>)> {
    let mut status = 0;
    let mut len = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if line == "\r\n" {
            break;
        }
        if status == 0 {
            status = http_common::status_of(line.as_bytes()).unwrap_or(1);
        } else if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                len = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok((status, body))
}

#[test]
fn bytes_an_upstream_sends_after_a_204_never_answer_the_next_request() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc, Mutex};
    // The upstream's first connection answers its first request with a
    // 204, then, once the client has that 204, sends a whole response
    // nobody asked for. Every other request is answered with the number
    // of the connection it came on.
    let (got_204, wait_204) = mpsc::channel::<()>();
    let wait_204 = Arc::new(Mutex::new(wait_204));
    let conns = Arc::new(AtomicUsize::new(0));
    let count = conns.clone();
    let up = sluicegate_testkit::RawUpstream::start(move |mut s: TcpStream| {
        let n = count.fetch_add(1, Ordering::SeqCst);
        let mut first = n == 0;
        while read_request_head(&mut s) {
            if std::mem::take(&mut first) {
                reply_204_then_stray(&mut s, || {
                    let _ = wait_204
                        .lock()
                        .unwrap()
                        .recv_timeout(Duration::from_secs(3));
                });
                continue;
            }
            if !reply_conn(&mut s, n) {
                return;
            }
        }
    });
    let gw = http_common::Gw::start_with_workers(
        &format!(
            "services:\n{}routes:\n  - name: local\n    match: {{ path: /l }}\n    respond: {{ status: 200, body: \"l\" }}\n  - name: all\n    service: s\n",
            http_common::service("s", &[up.addr()], "")
        ),
        1,
    );
    // Pipelined on one connection: the 204 request, many requests the
    // gateway answers itself (the time the stray bytes take to arrive,
    // with no wait in between for the worker to hear of them), then one
    // for the upstream again.
    const LOCAL: usize = 4000;
    let mut batch = b"GET /nc HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
    for _ in 0..LOCAL {
        batch.extend_from_slice(b"GET /l HTTP/1.1\r\nHost: a\r\n\r\n");
    }
    batch.extend_from_slice(b"GET /real HTTP/1.1\r\nHost: a\r\n\r\n");
    let mut s = TcpStream::connect(gw.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&batch).unwrap();
    let mut r = std::io::BufReader::new(s);
    let (status, _) = read_response(&mut r).unwrap();
    assert_eq!(status, 204);
    got_204.send(()).unwrap();
    let t_204 = Instant::now();
    for i in 0..LOCAL {
        let (status, body) = read_response(&mut r).unwrap();
        assert_eq!((status, &body[..]), (200, &b"l"[..]), "local answer {i}");
    }
    let (status, body) = read_response(&mut r).unwrap();
    println!(
        "{LOCAL} local answers and the last one {:?} after the 204",
        t_204.elapsed()
    );
    let body = String::from_utf8_lossy(&body);
    assert_eq!(
        (status, &*body),
        (200, "conn1"),
        "the request after the 204 got the stray response"
    );
    assert_eq!(conns.load(Ordering::SeqCst), 2);
}

/// Answers a `204`, then, once `wait` returns, a whole response nobody
/// asked for (write errors ignored).
fn reply_204_then_stray(s: &mut TcpStream, wait: impl FnOnce()) {
    let _ = s.write_all(b"HTTP/1.1 204 No Content\r\n\r\n");
    wait();
    let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTRAY");
}

/// Answers a request with the number of the upstream connection it came
/// on (`connN`); false when the write failed.
fn reply_conn(s: &mut TcpStream, n: usize) -> bool {
    let body = format!("conn{n}");
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(reply.as_bytes()).is_ok()
}

/// The request line of the next request on an upstream-side connection
/// (its head read through the blank line); `None` at its end.
fn request_line(r: &mut impl std::io::BufRead) -> Option<String> {
    let mut first = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line == "\r\n" {
            return Some(first);
        }
        if first.is_empty() {
            first = line;
        }
    }
}

#[test]
fn a_response_an_upstream_sends_300ms_after_a_204_never_answers_a_later_request() {
    use std::io::BufReader;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    // The upstream answers `GET /nc` with a 204, then 300 ms later sends
    // a whole response nobody asked for on the same connection; anything
    // else gets the number of the connection it came on.
    let (conns, strays, after_204) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let (c, st, a) = (conns.clone(), strays.clone(), after_204.clone());
    let up = sluicegate_testkit::RawUpstream::start(move |s: TcpStream| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        let mut had_204 = false;
        while let Some(line) = request_line(&mut r) {
            if had_204 {
                // Reused after its 204: the rule this test is about.
                a.fetch_add(1, Ordering::SeqCst);
            }
            if line.starts_with("GET /nc ") {
                had_204 = true;
                reply_204_then_stray(&mut w, || std::thread::sleep(Duration::from_millis(300)));
                st.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            if !reply_conn(&mut w, n) {
                return;
            }
        }
    });
    let gw = http_common::Gw::start_with_workers(
        &format!(
            "services:\n{}routes:\n  - name: all\n    service: s\n",
            http_common::service("s", &[up.addr()], "")
        ),
        1,
    );
    let connect = || {
        let s = TcpStream::connect(gw.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (s.try_clone().unwrap(), std::io::BufReader::new(s))
    };
    let req = |path: &str| format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n");
    let answer = |r: &mut BufReader<TcpStream>, what: &str| {
        let (status, body) = read_response(r).unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
        let body = String::from_utf8_lossy(&body).into_owned();
        assert_ne!(body, "STRAY", "{what} got the stray response");
        assert!(
            status == 200 && body.starts_with("conn"),
            "{what}: {status} {body:?}"
        );
    };
    // Pipelined with the 204's request.
    let (mut w, mut r) = connect();
    w.write_all((req("/nc") + &req("/a") + &req("/b")).as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut r).unwrap().0, 204);
    answer(&mut r, "pipelined /a");
    answer(&mut r, "pipelined /b");
    // Written as soon as the 204 came.
    let (mut w, mut r) = connect();
    w.write_all(req("/nc").as_bytes()).unwrap();
    assert_eq!(read_response(&mut r).unwrap().0, 204);
    w.write_all((req("/a") + &req("/b")).as_bytes()).unwrap();
    answer(&mut r, "/a after the 204");
    answer(&mut r, "/b after the 204");
    // Another client's request, meanwhile.
    let (mut w, mut r) = connect();
    w.write_all(req("/nc").as_bytes()).unwrap();
    assert_eq!(read_response(&mut r).unwrap().0, 204);
    let (mut w2, mut r2) = connect();
    w2.write_all(req("/a").as_bytes()).unwrap();
    answer(&mut r2, "another client's /a");
    // Once every stray is out, later requests do not get them either.
    assert!(
        http_common::wait_until(Duration::from_secs(5), || strays.load(Ordering::SeqCst)
            == 3),
        "the upstream did not send its strays"
    );
    for i in 0..3 {
        w.write_all(req("/later").as_bytes()).unwrap();
        answer(&mut r, &format!("later request {i}"));
    }
    assert_eq!(
        after_204.load(Ordering::SeqCst),
        0,
        "a connection carried a request after its 204"
    );
}
