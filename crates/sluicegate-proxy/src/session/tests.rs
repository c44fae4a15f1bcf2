//! The HTTP/1.1 session driven over the in-memory transport: requests in,
//! answers out, no socket.

use std::rc::Rc;
use std::time::Duration;

use crate::runtime::worker::Worker;
use crate::snapshot::Shared;
use crate::transport::duplex;
use crate::transport::listener::{self, Prepared};
use crate::transport::stream::Stream;

const CONFIG: &str = r#"
listen: ["127.0.0.1:9"]
routes:
  - name: hello
    match: { path: /hello }
    respond: { status: 200, body: "hi\n", headers: { content-type: text/plain } }
"#;

/// Sends `input` on a new session and returns everything the session
/// answered before it ended (or went quiet for half a second).
fn exchange(input: &[u8]) -> Vec<u8> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build_local(tokio::runtime::LocalOptions::default())
        .unwrap();
    rt.block_on(async {
        let cfg = sluicegate_config::parse_offline(CONFIG).unwrap();
        let worker = Rc::new(Worker::new(Shared::new(&cfg).unwrap()));
        tokio::task::spawn_local({
            let w = worker.clone();
            async move { w.deadlines.run().await }
        });
        let (client, server) = duplex::pair();
        let peer = "192.0.2.7:40000".parse().unwrap();
        let prepared = Prepared {
            stream: Stream::Duplex(server),
            client: peer,
            tls: ("", ""),
            identity: None,
        };
        let session = tokio::task::spawn_local(super::conn::serve_stream(
            worker.clone(),
            prepared,
            listener::plain(peer),
        ));
        let client = Stream::Duplex(client);
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
