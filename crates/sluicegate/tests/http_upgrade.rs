//! HTTP/1.1 upgrades end to end (WebSocket and others): an upgrade the
//! route allows is authenticated like any request and forwarded with its
//! `Upgrade`/`Connection` headers; the upstream's `101` turns the
//! connection into a two-way tunnel (bytes both ways, half-closes passed
//! on, `timeouts.tunnel_idle`, `limits.max_tunnels`, metrics, access log);
//! `Upgrade: h2c` and protocols the route does not list are dropped; a
//! `101` the client did not ask for is a `502`; a reload does not cut an
//! open tunnel, and a shutdown lets it run through the drain and logs it.

mod http_common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use http_common::{service, Gw};
use sluicegate_testkit::{free_port, http_get, RawUpstream};

const WS_REQUEST: &str = "GET /chat HTTP/1.1\r\nHost: example\r\nConnection: Upgrade\r\n\
     Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
     Sec-WebSocket-Version: 13\r\n\r\n";

/// Reads a head (to the blank line) from `s`, byte by byte so nothing
/// after it is taken.
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// An upstream that answers an upgrade request with `101` (when it asked
/// for one) and then echoes every byte back, upper-cased, until the client
/// ends; anything else gets a `200` naming what it saw. Keeps every head.
fn echo_upstream() -> (RawUpstream, Arc<Mutex<Vec<String>>>) {
    let heads = Arc::new(Mutex::new(Vec::new()));
    let seen = heads.clone();
    let up = RawUpstream::start(move |mut s: TcpStream| {
        // Long enough for a tunnel left idle while a thousand others are
        // set up on a loaded machine (the test's own reads are bounded).
        let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
        let head = read_head(&mut s);
        seen.lock().unwrap().push(head.clone());
        let lower = head.to_ascii_lowercase();
        if !lower.contains("\r\nupgrade: websocket") {
            let body = if lower.contains("\r\nupgrade:") {
                "upgrade seen"
            } else {
                "plain"
            };
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            return;
        }
        let _ = s.write_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\nhello",
        );
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if s.write_all(&buf[..n].to_ascii_uppercase()).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = s.shutdown(Shutdown::Write);
    });
    (up, heads)
}

/// Reads from `s` until `want` bytes came (or the wait runs out).
fn read_n(s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let end = Instant::now() + Duration::from_secs(5);
    while got.len() < want && Instant::now() < end {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got
}

fn metric(admin: u16, name: &str) -> u64 {
    let text = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

fn gateway(up: &RawUpstream, admin: u16, extra_route: &str, top: &str) -> Gw {
    Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\n{top}services:\n{}routes:\n  - name: ws\n    service: s\n{extra_route}",
        service("s", &[up.addr()], "")
    ))
}

#[test]
fn a_websocket_upgrade_becomes_a_two_way_tunnel() {
    let (up, heads) = echo_upstream();
    let admin = free_port();
    let gw = gateway(&up, admin, "", "");
    let mut c = TcpStream::connect(gw.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(WS_REQUEST.as_bytes()).unwrap();
    let head = read_head(&mut c);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("\r\nconnection: upgrade\r\n"), "{head}");
    assert!(lower.contains("\r\nupgrade: websocket\r\n"), "{head}");
    assert!(lower.contains("sec-websocket-accept: "), "{head}");
    // The upstream's first bytes, sent right after its 101.
    assert_eq!(read_n(&mut c, 5), b"hello");
    // The upstream saw the upgrade and the WebSocket headers.
    let seen = heads.lock().unwrap()[0].to_ascii_lowercase();
    assert!(seen.contains("\r\nupgrade: websocket\r\n"), "{seen}");
    assert!(seen.contains("\r\nconnection: upgrade\r\n"), "{seen}");
    assert!(seen.contains("sec-websocket-key: "), "{seen}");
    // Bytes both ways, several times.
    for msg in ["abc", "second message", "x"] {
        c.write_all(msg.as_bytes()).unwrap();
        assert_eq!(read_n(&mut c, msg.len()), msg.to_uppercase().as_bytes());
    }
    let big = vec![b'q'; 300_000];
    c.write_all(&big).unwrap();
    assert_eq!(read_n(&mut c, big.len()).len(), big.len());
    assert_eq!(metric(admin, "sluicegate_tunnels_open"), 1);
    // The tunnel's own task holds the connection: still counted open.
    assert_eq!(metric(admin, "sluicegate_client_connections"), 1);
    // The client ends its side: passed on, the upstream ends too, and the
    // tunnel closes.
    c.shutdown(Shutdown::Write).unwrap();
    let rest = read_n(&mut c, 1);
    assert!(rest.is_empty(), "closed after the upstream ended");
    let end = Instant::now() + Duration::from_secs(3);
    while metric(admin, "sluicegate_tunnels_open") != 0 && Instant::now() < end {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(metric(admin, "sluicegate_tunnels_open"), 0);
    assert_eq!(metric(admin, "sluicegate_tunnels_total"), 1);
    let end = Instant::now() + Duration::from_secs(3);
    while metric(admin, "sluicegate_client_connections") != 0 && Instant::now() < end {
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(metric(admin, "sluicegate_client_connections"), 0);
    let up_bytes = metric(admin, "sluicegate_tunnel_bytes_upstream_total");
    assert_eq!(up_bytes, (3 + 14 + 1 + 300_000) as u64);
}

#[test]
fn h2c_and_unlisted_protocols_are_dropped_and_an_unasked_101_is_a_502() {
    let (up, heads) = echo_upstream();
    let admin = free_port();
    let gw = gateway(
        &up,
        admin,
        "  - name: none\n    match: { path_prefix: /none }\n    service: s\n    upgrade: []\n",
        "",
    );
    let ask = |path: &str, upgrade: &str| {
        let mut c = TcpStream::connect(gw.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings, close\r\nUpgrade: {upgrade}\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        let _ = c.read_to_string(&mut out);
        out
    };
    // h2c is never honoured nor forwarded: a plain request reaches the upstream.
    let r = ask("/h2", "h2c");
    assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    assert!(r.ends_with("plain"), "{r}");
    // A protocol the route does not list: the same.
    let r = ask("/other", "irc/6.9");
    assert!(r.ends_with("plain"), "{r}");
    // A route with `upgrade: []`: not even WebSocket.
    let r = ask("/none", "websocket");
    assert!(r.ends_with("plain"), "{r}");
    for h in heads.lock().unwrap().iter() {
        let h = h.to_ascii_lowercase();
        assert!(!h.contains("\r\nupgrade:"), "{h}");
        assert!(!h.contains("http2-settings"), "{h}");
    }
    // An upstream that switches protocols without being asked: 502.
    let rogue = RawUpstream::start(|mut s: TcpStream| {
        let _ = read_head(&mut s);
        let _ = s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
        thread::sleep(Duration::from_millis(200));
    });
    let gw2 = gateway(&rogue, free_port(), "", "");
    let r = http_get(gw2.addr(), "/plain", &[]);
    assert_eq!(r.status, 502);
}

#[test]
fn an_upgrade_is_authenticated_like_any_request() {
    let (up, heads) = echo_upstream();
    let admin = free_port();
    let gw = Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\nservices:\n{}\
         plans:\n  p: {{ rate: 100/s }}\n\
         apps:\n  - {{ id: chat-app, keys: [chat-key-000001], plan: p }}\n\
         routes:\n  - name: ws\n    service: s\n    auth: app_key\n",
        service("s", &[up.addr()], "")
    ));
    let mut c = TcpStream::connect(gw.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(WS_REQUEST.as_bytes()).unwrap();
    let head = read_head(&mut c);
    assert!(head.starts_with("HTTP/1.1 401 "), "{head}");
    assert!(
        heads.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
    let mut c = TcpStream::connect(gw.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = WS_REQUEST.replace("\r\n\r\n", "\r\nX-App-Key: chat-key-000001\r\n\r\n");
    c.write_all(req.as_bytes()).unwrap();
    let head = read_head(&mut c);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    let seen = heads.lock().unwrap()[0].to_ascii_lowercase();
    assert!(seen.contains("\r\nx-app-id: chat-app\r\n"), "{seen}");
    assert!(
        !seen.contains("chat-key-000001"),
        "the key is not passed on"
    );
}

#[test]
fn an_idle_tunnel_is_closed_and_a_reload_does_not_cut_a_busy_one() {
    let (up, _) = echo_upstream();
    let admin = free_port();
    let gw = gateway(
        &up,
        admin,
        "",
        "timeouts: { tunnel_idle: 800ms }\nlimits: { max_tunnels: 2 }\n",
    );
    let open = || {
        let mut c = TcpStream::connect(gw.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(WS_REQUEST.as_bytes()).unwrap();
        let head = read_head(&mut c);
        (c, head)
    };
    let (mut idle, head) = open();
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert_eq!(read_n(&mut idle, 5), b"hello");
    let (mut busy, head) = open();
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert_eq!(read_n(&mut busy, 5), b"hello");
    // Over limits.max_tunnels: 503.
    let (_third, head) = open();
    assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
    assert_eq!(metric(admin, "sluicegate_tunnels_refused_total"), 1);
    // The busy one keeps talking across a reload; the idle one is cut
    // after tunnel_idle.
    let started = Instant::now();
    let mut reloaded = false;
    while started.elapsed() < Duration::from_millis(1500) {
        busy.write_all(b"ping").unwrap();
        assert_eq!(read_n(&mut busy, 4), b"PING");
        if !reloaded && started.elapsed() > Duration::from_millis(300) {
            gw.gw.reload_signal();
            reloaded = true;
        }
        thread::sleep(Duration::from_millis(100));
    }
    let mut b = [0u8; 16];
    let n = idle.read(&mut b).unwrap_or(0);
    assert_eq!(n, 0, "the idle tunnel was closed");
    busy.write_all(b"still").unwrap();
    assert_eq!(read_n(&mut busy, 5), b"STILL");
    assert!(metric(admin, "sluicegate_config_reloads_total") >= 1);
}

#[test]
fn a_shutdown_lets_a_tunnel_run_until_the_drain_ends_and_its_close_is_logged() {
    let (up, _) = echo_upstream();
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let yaml = format!(
        "listen: [\"127.0.0.1:{port}\"]\nworkers: 1\nreload: {{ watch: false }}\n\
         log: {{ level: warn, access: \"{}\" }}\ntimeouts: {{ drain: 1500ms }}\n\
         services:\n{}routes:\n  - name: ws\n    service: s\n",
        log.display(),
        service("s", &[up.addr()], "")
    );
    let mut gw = sluicegate_testkit::Gateway::spawn(http_common::bin(), &yaml);
    gw.wait_ready(&[port], Duration::from_secs(10)).unwrap();
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(WS_REQUEST.as_bytes()).unwrap();
    assert!(read_head(&mut c).starts_with("HTTP/1.1 101 "));
    assert_eq!(read_n(&mut c, 5), b"hello");
    gw.terminate();
    let stopped = Instant::now();
    // Still carrying bytes while the drain runs.
    thread::sleep(Duration::from_millis(500));
    c.write_all(b"during drain").unwrap();
    assert_eq!(read_n(&mut c, 12), b"DURING DRAIN");
    // Cut when the drain ends, and the process exits.
    let mut b = [0u8; 8];
    let n = c.read(&mut b).unwrap_or(0);
    assert_eq!(n, 0, "closed at the end of the drain");
    let took = stopped.elapsed();
    assert!(
        took >= Duration::from_millis(1200) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert!(gw.wait_exit(Duration::from_secs(5)).is_some());
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let line = text
        .lines()
        .find(|l| l.contains("\"status\":101"))
        .unwrap_or_else(|| panic!("no 101 line in the access log:\n{text}"));
    assert!(line.contains("\"path\":\"/chat\""), "{line}");
    assert!(line.contains("\"bytes_in\":12,"), "{line}");
}

#[test]
fn reloads_every_200ms_cut_none_of_a_thousand_open_tunnels() {
    let (up, _) = echo_upstream();
    let admin = free_port();
    // A tunnel holds its endpoint's in-flight slot: room for 1,000.
    let gw = Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\nlimits: {{ max_connections: 5000 }}\nservices:\n{}routes:\n  - name: ws\n    service: s\n",
        service("s", &[up.addr()], "    max_connections_per_endpoint: 2000\n")
    ));
    let mut tunnels = Vec::with_capacity(1000);
    // In batches of 50, within the test upstream's listen backlog.
    for batch in 0..20 {
        let start = tunnels.len();
        for _ in 0..50 {
            let mut c = TcpStream::connect(gw.addr()).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(WS_REQUEST.as_bytes()).unwrap();
            tunnels.push(c);
        }
        for (i, c) in tunnels[start..].iter_mut().enumerate() {
            let head = read_head(c);
            assert!(
                head.starts_with("HTTP/1.1 101 "),
                "batch {batch}, tunnel {i}: {head}"
            );
            assert_eq!(read_n(c, 5), b"hello", "tunnel {i}");
        }
    }
    assert_eq!(metric(admin, "sluicegate_tunnels_open"), 1000);
    // Ten reloads, 200 ms apart, while every tunnel keeps talking.
    for round in 0..10 {
        gw.gw.reload_signal();
        for (i, c) in tunnels.iter_mut().enumerate().skip(round % 10).step_by(10) {
            c.write_all(b"ab").unwrap();
            assert_eq!(read_n(c, 2), b"AB", "tunnel {i} in round {round}");
        }
        thread::sleep(Duration::from_millis(200));
    }
    assert!(metric(admin, "sluicegate_config_reloads_total") >= 5);
    for (i, c) in tunnels.iter_mut().enumerate() {
        c.write_all(b"z").unwrap();
        assert_eq!(read_n(c, 1), b"Z", "tunnel {i} after the reloads");
    }
    assert_eq!(metric(admin, "sluicegate_tunnels_open"), 1000);
}
