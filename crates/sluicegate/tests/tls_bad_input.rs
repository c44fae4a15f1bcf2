//! Bad input on the TLS and plain ports of the real binary: plain HTTP on a
//! TLS port, a ClientHello on a plain port, silent clients, and thousands
//! of stalled handshakes beside a real client.

mod ops_common;
mod tls_common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ops_common::metric;
use sluicegate_testkit::{http_get, TestUpstream};
use tls_common::termination::{config, start_default};
use tls_common::*;

fn handshakes(port: u16, result: &str) -> String {
    format!(
        "sluicegate_tls_handshakes_total{{listener=\"{}\",result=\"{result}\"}}",
        listener(port)
    )
}

#[test]
fn plain_http_on_the_tls_port_is_closed_and_counted() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    let port = g.port(0);
    let series = handshakes(port, "not_tls");
    let before = metric_or_zero(g.ports, &series);

    let ex = exchange(
        port,
        b"GET /hello HTTP/1.1\r\nHost: a.test\r\n\r\n",
        Duration::from_secs(3),
    );
    g.check(
        ex.closed,
        &format!(
            "plain HTTP on the TLS port: not closed within 3 s, got {:?}",
            ex.text()
        ),
    );
    assert!(
        !ex.text().contains("HTTP/1.1 200"),
        "plain HTTP got an answer on the TLS port: {:?}",
        ex.text()
    );
    g.check(
        wait_metric(g.ports, &series, Duration::from_secs(2), |v| {
            v >= before + 1.0
        }),
        &format!(
            "{series} did not count the plain HTTP request:\n{}",
            ops_common::metrics(g.ports)
        ),
    );
    // Still serving both kinds.
    let (code, _, run) = curl_tls(port, "a.test", "/hello", Some(&certs.ca()));
    assert_eq!(code, 200, "{}", run.all());
    assert_eq!(http_get(g.plain(), "/hello", &[]).status, 200);
    let ok = metric(g.ports, &handshakes(port, "ok"));
    assert!(ok >= 1.0, "result=\"ok\" is {ok}");
}

/// A record header and the start of a ClientHello (a full one is never sent).
const HALF_CLIENT_HELLO: &[u8] = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\
\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10";

#[test]
fn a_client_hello_on_a_plain_port_gets_400() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    for bytes in [&b"\x16\x03\x01\x00\x05hello"[..], HALF_CLIENT_HELLO] {
        let ex = exchange(g.ports.listen, bytes, Duration::from_secs(3));
        g.check(
            ex.text().starts_with("HTTP/1.1 400"),
            &format!(
                "a ClientHello on the plain port got {:?} (closed {})",
                ex.text(),
                ex.closed
            ),
        );
    }
    // A real client speaking TLS to the plain port fails cleanly.
    let s = s_client(g.ports.listen, &["-servername", "a.test"]);
    assert!(!s.handshake_ok(), "{}", s.all());
    assert_eq!(http_get(g.plain(), "/hello", &[]).status, 200);
}

#[test]
fn a_silent_client_is_closed_after_the_handshake_timeout() {
    let certs = Certs::new();
    let up = TestUpstream::start();
    let g = start_default(&certs, &up);
    let port = g.port(0);
    let series = handshakes(port, "timeout");
    let before = metric_or_zero(g.ports, &series);

    let silent = exchange(port, b"", Duration::from_secs(4));
    let half = exchange(port, HALF_CLIENT_HELLO, Duration::from_secs(4));
    for (what, ex) in [("sending nothing", &silent), ("half a ClientHello", &half)] {
        g.check(
            ex.closed
                && ex.elapsed >= Duration::from_millis(900)
                && ex.elapsed < Duration::from_millis(3_000),
            &format!(
                "a client {what} on the TLS port (tls_handshake: 1s): closed {} after {:?}",
                ex.closed, ex.elapsed
            ),
        );
    }
    g.check(
        wait_metric(g.ports, &series, Duration::from_secs(2), |v| {
            v >= before + 2.0
        }),
        &format!(
            "{series} did not count two timeouts:\n{}",
            ops_common::metrics(g.ports)
        ),
    );
}

#[test]
fn stalled_handshakes_do_not_hold_up_a_real_client() {
    const STALLED: usize = 5_000;
    ensure_nofile(STALLED as u64 + 1_000);
    let certs = Certs::new();
    let up = TestUpstream::start();
    let (ports, extra) = tls_common::ports(1);
    // A handshake timeout longer than the test, so every stalled
    // connection is still open while the real client comes.
    let yaml = config(ports, extra[0], &certs, "1.2", up.port(), "hello")
        .replace("tls_handshake: 1s", "tls_handshake: 30s");
    let g = tls_common::start(ports, extra, &yaml);
    let port = g.port(0);
    let addr = ops_common::local(port);

    let began = Instant::now();
    let mut conns = Vec::with_capacity(STALLED);
    for i in 0..STALLED {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
            Ok(mut c) => {
                let _ = c.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = c.write_all(HALF_CLIENT_HELLO);
                conns.push(c);
            }
            Err(e) => panic!(
                "connection {i} of {STALLED} failed after {:?}: {e}",
                began.elapsed()
            ),
        }
    }
    let opened = began.elapsed();

    let t = Instant::now();
    let (code, body, run) = curl_tls(port, "a.test", "/hello", Some(&certs.ca()));
    let took = t.elapsed();
    g.check(
        code == 200 && body == "hello" && took < Duration::from_secs(2),
        &format!(
            "with {STALLED} stalled handshakes (opened in {opened:?}) curl took {took:?}: {}",
            run.all()
        ),
    );
    drop(conns);
    // Gone with their clients, without a crash.
    let mut g = g;
    let running = g.gw.is_running();
    g.check(running, "the gateway exited");
    let (code, _, run) = curl_tls(port, "a.test", "/hello", Some(&certs.ca()));
    assert_eq!(code, 200, "{}", run.all());
}
