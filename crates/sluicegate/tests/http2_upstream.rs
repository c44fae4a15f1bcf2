//! HTTP/2 to upstreams, against Debian's nginx speaking HTTP/2: in the
//! clear with prior knowledge (`protocol: h2c`), over TLS by ALPN
//! (`protocol: h2`), and chosen by ALPN (`protocol: auto`, which falls
//! back to HTTP/1.1 against an nginx without HTTP/2). Requests from
//! HTTP/1.1 and HTTP/2 clients become streams multiplexed on a few
//! connections; bodies pass whole both ways; a connection the upstream
//! ends with GOAWAY (nginx after `keepalive_requests`) fails no request.

mod http_common;
mod ops_common;
mod tls_common;

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use sluicegate_testkit::{http_get, http_request, TestUpstream};
use tls_common::upstream::{quoted, NginxTls, Pki};
use tls_common::{head, ports, run_cmd, start, TlsGw};

/// nginx's answer names the HTTP version it served; `/body` passes the
/// request on (as HTTP/1.1) to the test upstream, which keeps the body.
fn nginx(pki: &Pki, listen: &str, up: &TestUpstream, extra: &str) -> NginxTls {
    NginxTls::start_listen(
        listen,
        &pki.file("up.pem"),
        &pki.file("up.key"),
        &format!(
            "        client_max_body_size 10m;\n{extra}\
             \x20       location /body {{ proxy_pass http://{}/echo; proxy_http_version 1.1; }}\n",
            up.addr()
        ),
    )
}

/// A gateway with service `up` (the `service` keys given) behind `/`.
fn gateway(endpoint: &str, service: &str) -> TlsGw {
    let (p, extra) = ports(0);
    let yaml = format!(
        "{}services:\n  - name: up\n    endpoints: [\"{endpoint}\"]\n{service}\
         routes:\n  - name: all\n    service: up\n",
        head(p, &[])
    );
    start(p, extra, &yaml)
}

fn h2load(url: &str, n: usize, conns: usize, streams: usize) -> String {
    let run = run_cmd(
        Command::new("h2load").args([
            "-n",
            &n.to_string(),
            "-c",
            &conns.to_string(),
            "-m",
            &streams.to_string(),
            url,
        ]),
        b"",
        Duration::from_secs(60),
    );
    run.stdout
}

/// nginx's connections (their serial numbers) in its access log.
fn connections(n: &NginxTls) -> HashSet<u64> {
    n.access().iter().map(|l| l.connection).collect()
}

#[test]
fn h2c_streams_are_multiplexed_and_bodies_pass() {
    let pki = Pki::new();
    let up = TestUpstream::start();
    let n = nginx(&pki, "http2", &up, "");
    let g = gateway(&n.endpoint(), "    protocol: h2c\n");
    // An HTTP/1.1 client: nginx serves HTTP/2.
    let r = http_get(g.plain(), "/plain", &[]);
    assert_eq!(r.status, 200, "{}", n.logs());
    assert!(r.body_str().contains("http=HTTP/2.0"), "{}", r.body_str());
    // Bodies with a length and chunked, to nginx and on to the test
    // upstream, whole.
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let r = http_request(g.plain(), "POST", "/body/len", &[], &body);
    assert_eq!(r.status, 200);
    let seen = up
        .last_requests()
        .pop()
        .expect("the body reached the upstream");
    assert!(seen.body == body, "a body with a length arrived changed");
    let mut chunked = Vec::new();
    for part in body.chunks(70_000) {
        chunked.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        chunked.extend_from_slice(part);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let raw = sluicegate_testkit::raw_exchange(
        g.plain(),
        &[
            &b"POST /body/chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"[..],
            &chunked,
        ]
        .concat(),
        Duration::from_secs(5),
    );
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    assert!(
        up.last_requests().pop().unwrap().body == body,
        "a chunked body arrived changed"
    );
    // Many requests at once from HTTP/2 clients: a few connections carry
    // them all (at most 4 per endpoint and worker, 2 workers).
    let out = h2load(&format!("http://{}/many", g.plain()), 3000, 8, 16);
    assert!(out.contains("3000 succeeded, 0 failed"), "{out}");
    let conns = connections(&n);
    assert!(conns.len() <= 8, "{} connections to nginx", conns.len());
}

#[test]
fn h2_over_tls_and_auto_choose_by_alpn() {
    let pki = Pki::new();
    let up = TestUpstream::start();
    let h2 = nginx(&pki, "ssl http2", &up, "");
    let h1 = nginx(&pki, "ssl", &up, "");
    let tls = format!("    tls: {{ ca: {}, sni: up.test }}\n", quoted(&pki.ca()));
    for (n, protocol, want) in [
        (&h2, "h2", "HTTP/2.0"),
        (&h2, "auto", "HTTP/2.0"),
        (&h1, "auto", "HTTP/1.1"),
    ] {
        let g = gateway(&n.endpoint(), &format!("{tls}    protocol: {protocol}\n"));
        for i in 0..3 {
            let r = http_get(g.plain(), &format!("/x?i={i}"), &[]);
            assert_eq!(r.status, 200, "{protocol}: {}", n.logs());
            let text = r.body_str();
            assert!(
                text.contains(&format!("http={want}")) && text.contains("proto=TLSv1."),
                "{protocol} to {}: {text}",
                want
            );
        }
    }
}

#[test]
fn goaway_from_the_upstream_fails_no_request() {
    let pki = Pki::new();
    let up = TestUpstream::start();
    // nginx ends each HTTP/2 connection with GOAWAY after 50 requests.
    let n = nginx(&pki, "http2", &up, "        keepalive_requests 50;\n");
    let g = gateway(&n.endpoint(), "    protocol: h2c\n");
    let out = h2load(&format!("http://{}/goaway", g.plain()), 3000, 4, 32);
    assert!(
        out.contains("3000 succeeded, 0 failed"),
        "{out}\n{}",
        n.logs()
    );
    assert!(out.contains("3000 2xx"), "{out}");
    // It took many connections: each ended after its 50.
    assert!(
        connections(&n).len() >= 3000 / 50,
        "{:?}",
        connections(&n).len()
    );
}

/// A gRPC answer that gives its length still ends with its trailers:
/// relayed to an HTTP/2 client as a trailing HEADERS, and to an HTTP/1.1
/// client as the last chunk's fields. (nginx's `return` sends the length,
/// `add_trailer` the status after the body.)
#[test]
fn a_grpc_answer_with_a_length_keeps_its_trailers() {
    use std::io::{Read, Write};
    let pki = Pki::new();
    let up = TestUpstream::start();
    let n = nginx(
        &pki,
        "http2",
        &up,
        "        location /grpc { default_type application/grpc; \
         add_trailer grpc-status 0 always; add_trailer grpc-message done always; \
         return 200 \"0123456789\"; }\n",
    );
    let g = gateway(&n.endpoint(), "    protocol: h2c\n");
    let run = run_cmd(
        Command::new("curl").args([
            "-sS",
            "--max-time",
            "10",
            "--http2-prior-knowledge",
            "-D",
            "-",
            "-o",
            "/dev/null",
            &format!("http://{}/grpc", g.plain()),
        ]),
        b"",
        Duration::from_secs(20),
    );
    assert!(run.stdout.starts_with("HTTP/2 200"), "{}", run.stdout);
    assert!(
        run.stdout.contains("grpc-status: 0"),
        "{}\n{}",
        run.stdout,
        n.logs()
    );
    assert!(run.stdout.contains("grpc-message: done"), "{}", run.stdout);
    // HTTP/1.1: chunked, the trailers after the last chunk.
    let mut s = std::net::TcpStream::connect(g.plain()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /grpc HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(text.contains("transfer-encoding: chunked"), "{text}");
    assert!(text.contains("\r\n0123456789\r\n"), "{text}");
    assert!(
        text.ends_with("0\r\ngrpc-status: 0\r\ngrpc-message: done\r\n\r\n"),
        "{text}"
    );
}
