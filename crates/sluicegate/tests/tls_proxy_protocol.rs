//! The client address on the real binary: PROXY protocol listeners (v1 and
//! v2 headers, missing and malformed headers, PROXY then TLS on one
//! listener), `trusted_proxies` with `X-Forwarded-For` (the access log and
//! `ip` rules see the address it gives), and `redirect_https` listeners.

mod ops_common;
mod tls_common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use ops_common::{metric, wait_until, ScratchDir};
use serde_json::Value;
use sluicegate_testkit::{http_request, TestUpstream};
use tls_common::*;

const V1: &[u8] = b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n";

/// A v2 header: PROXY command, TCP over IPv4, 203.0.113.7:5555 -> 127.0.0.1:80.
fn v2_header() -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.push(0x21); // version 2, PROXY
    h.push(0x11); // AF_INET, STREAM
    h.extend_from_slice(&12u16.to_be_bytes());
    h.extend_from_slice(&[203, 0, 113, 7]);
    h.extend_from_slice(&[127, 0, 0, 1]);
    h.extend_from_slice(&5555u16.to_be_bytes());
    h.extend_from_slice(&80u16.to_be_bytes());
    h
}

fn get(path: &str, extra: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: gw.test\r\n{extra}Connection: close\r\n\r\n").into_bytes()
}

/// The parsed access log lines (none if the file is missing).
fn log_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect()
}

/// Waits up to 3 s for the access log line of `path` and returns it.
fn log_line(g: &TlsGw, log: &Path, path: &str) -> Value {
    let mut found = None;
    let ok = wait_until(Duration::from_secs(3), || {
        found = log_lines(log).into_iter().find(|l| l["path"] == path);
        found.is_some()
    });
    g.check(
        ok,
        &format!("no access log line for {path} in {:#?}", log_lines(log)),
    );
    found.unwrap()
}

/// Services and routes: `/api` proxied to the upstream, `/guarded` a
/// respond route refusing 198.51.100.0/24.
fn routes(upstream: u16) -> String {
    format!(
        "services:\n{}routes:\n{}{}    ip: {{ deny: [\"198.51.100.0/24\"] }}\n",
        ops_common::service("api", &[upstream]),
        ops_common::proxy_route("api", "/api", "api"),
        ops_common::respond_route("guarded", "/guarded", "in")
    )
}

struct Setup {
    g: TlsGw,
    up: TestUpstream,
    log: PathBuf,
    _dir: ScratchDir,
}

/// A gateway with `listeners` after the plain one, an access log, `top`
/// (extra top-level keys) and [`routes`].
fn setup(n: usize, listeners: impl Fn(&[u16]) -> Vec<String>, top: &str) -> Setup {
    let up = TestUpstream::start();
    let dir = ScratchDir::new("tls-pp");
    let log = dir.path().join("access.log");
    let (ports, extra) = tls_common::ports(n);
    let yaml = format!(
        "{}log: {{ access: \"{}\" }}\n{top}{}",
        head(ports, &listeners(&extra)),
        log.display(),
        routes(up.port())
    );
    let g = tls_common::start(ports, extra, &yaml);
    Setup {
        g,
        up,
        log,
        _dir: dir,
    }
}

fn pp_listener(extra: &[u16]) -> Vec<String> {
    vec![format!(
        "{{ addr: \"127.0.0.1:{}\", proxy_protocol: true }}",
        extra[0]
    )]
}

fn check_client_from_header(s: &Setup, header: &[u8], path: &str) {
    let mut bytes = header.to_vec();
    bytes.extend(get(path, ""));
    let ex = exchange(s.g.port(0), &bytes, Duration::from_secs(5));
    s.g.check(
        ex.text().starts_with("HTTP/1.1 200"),
        &format!("PROXY header then GET {path}: {:?}", ex.text()),
    );
    let seen = s.up.last_request().expect("the upstream saw the request");
    assert_eq!(seen.path(), path);
    let xff = seen.header_all("x-forwarded-for").join(", ");
    assert!(
        xff.trim().ends_with("203.0.113.7"),
        "the upstream got X-Forwarded-For {xff:?}, expected it to end with 203.0.113.7"
    );
    let line = log_line(&s.g, &s.log, path);
    assert_eq!(line["client"], "203.0.113.7", "{line}");
}

#[test]
fn a_proxy_v1_header_gives_the_client_address() {
    let s = setup(1, pp_listener, "");
    check_client_from_header(&s, V1, "/api/v1");
}

#[test]
fn a_proxy_v2_header_gives_the_client_address() {
    let s = setup(1, pp_listener, "");
    check_client_from_header(&s, &v2_header(), "/api/v2");
    // v1 on the same listener still works after a v2 header.
    check_client_from_header(&s, V1, "/api/v1-after-v2");
}

#[test]
fn a_missing_or_malformed_proxy_header_closes_the_connection_unanswered() {
    let s = setup(1, pp_listener, "");
    let port = s.g.port(0);
    let series = format!(
        "sluicegate_proxy_protocol_errors_total{{listener=\"{}\"}}",
        listener(port)
    );
    let before = metric(s.g.ports, &series);

    let mut bad_v2 = v2_header();
    bad_v2[12] = 0x31; // version 3
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("no header", get("/api/none", "")),
        ("a malformed v1 header", {
            let mut b = b"PROXY TCP4 not-an-address 127.0.0.1 5555 80\r\n".to_vec();
            b.extend(get("/api/bad-v1", ""));
            b
        }),
        ("a v1 header with junk", {
            let mut b = b"PROXY GARBAGE\r\n".to_vec();
            b.extend(get("/api/junk-v1", ""));
            b
        }),
        ("a v2 header of version 3", {
            let mut b = bad_v2;
            b.extend(get("/api/bad-v2", ""));
            b
        }),
    ];
    let n = cases.len();
    for (what, bytes) in cases.drain(..) {
        let ex = exchange(port, &bytes, Duration::from_secs(5));
        s.g.check(
            ex.closed && ex.data.is_empty(),
            &format!(
                "{what}: expected a close with no response, got closed={} {:?}",
                ex.closed,
                ex.text()
            ),
        );
    }
    assert_eq!(s.up.requests_seen(), 0, "a request got through");
    s.g.check(
        wait_metric(s.g.ports, &series, Duration::from_secs(2), |v| {
            v >= before + n as f64
        }),
        &format!(
            "{series} did not count {n} errors (was {before}):\n{}",
            ops_common::metrics(s.g.ports)
        ),
    );
    // The listener still works.
    check_client_from_header(&s, V1, "/api/good");
}

#[test]
fn a_proxy_header_then_tls_on_one_listener() {
    let certs = Certs::new();
    let tls = certs.tls(&["a", "b"], None, "");
    let s = setup(
        1,
        |extra| {
            vec![format!(
                "{{ addr: \"127.0.0.1:{}\", proxy_protocol: true, tls: {tls} }}",
                extra[0]
            )]
        },
        "",
    );
    let port = s.g.port(0);
    for (header, path) in [(V1.to_vec(), "/api/tls-v1"), (v2_header(), "/api/tls-v2")] {
        let run = python_get(port, "a.test", &certs.ca(), path, &header);
        s.g.check(
            run.success && run.stdout.contains("HTTP/1.1 200"),
            &format!("PROXY header then TLS: {}", run.all()),
        );
        assert!(
            run.stdout
                .lines()
                .next()
                .unwrap_or("")
                .ends_with(&certs.sha256("a")),
            "{}",
            run.stdout
        );
        let seen = s.up.last_request().expect("the upstream saw the request");
        assert_eq!(seen.path(), path);
        let xff = seen.header_all("x-forwarded-for").join(", ");
        assert!(
            xff.trim().ends_with("203.0.113.7"),
            "X-Forwarded-For {xff:?}"
        );
        assert_eq!(seen.header("x-forwarded-proto"), Some("https"));
        let line = log_line(&s.g, &s.log, path);
        assert_eq!(line["client"], "203.0.113.7", "{line}");
    }
    // TLS without the header is refused on this listener.
    let run = python_get(port, "a.test", &certs.ca(), "/api/no-header", b"");
    assert!(
        !run.success,
        "TLS without a PROXY header was served: {}",
        run.all()
    );
    assert!(s.up.last_request().unwrap().path() != "/api/no-header");
}

/// Sends `GET path` with `X-Forwarded-For: xff` to the plain listener.
fn get_with_xff(s: &Setup, path: &str, xff: &str) -> u16 {
    let resp = http_request(s.g.plain(), "GET", path, &[("X-Forwarded-For", xff)], b"");
    resp.status
}

#[test]
fn trusted_proxies_take_the_client_from_x_forwarded_for() {
    let s = setup(1, pp_listener, "trusted_proxies: [\"127.0.0.1/32\"]\n");
    let mut wrong = Vec::new();
    for (path, xff, status, client) in [
        ("/guarded?one", "198.51.100.9", 403, "198.51.100.9"),
        ("/api/one", "198.51.100.9", 200, "198.51.100.9"),
        (
            "/guarded?chain",
            "198.51.100.9, 127.0.0.1",
            403,
            "198.51.100.9",
        ),
        ("/api/chain", "198.51.100.9, 127.0.0.1", 200, "198.51.100.9"),
        // The rightmost untrusted address counts, not the leftmost.
        (
            "/guarded?spoof",
            "198.51.100.9, 192.0.2.4",
            200,
            "192.0.2.4",
        ),
        ("/guarded?other", "192.0.2.5", 200, "192.0.2.5"),
    ] {
        let got = get_with_xff(&s, path, xff);
        let line = log_line(&s.g, &s.log, path);
        if got != status || line["client"] != client {
            wrong.push(format!(
                "{path} with X-Forwarded-For {xff:?}: expected {status} and client {client}, got {got} and client {}",
                line["client"]
            ));
        }
    }
    // A PROXY header from an untrusted address: its X-Forwarded-For is not
    // believed.
    let mut bytes = V1.to_vec();
    bytes.extend(get(
        "/guarded?via-proxy",
        "X-Forwarded-For: 198.51.100.9\r\n",
    ));
    let ex = exchange(s.g.port(0), &bytes, Duration::from_secs(5));
    let line = log_line(&s.g, &s.log, "/guarded?via-proxy");
    if !ex.text().starts_with("HTTP/1.1 200") || line["client"] != "203.0.113.7" {
        wrong.push(format!(
            "PROXY from 203.0.113.7 (untrusted) with X-Forwarded-For 198.51.100.9: expected 200 and client 203.0.113.7, got {:?} and client {}",
            ex.text().lines().next(),
            line["client"]
        ));
    }
    s.g.check(wrong.is_empty(), &format!("{wrong:#?}"));
}

#[test]
fn without_trusted_proxies_x_forwarded_for_changes_nothing() {
    let s = setup(1, pp_listener, "");
    for (path, xff) in [
        ("/guarded?one", "198.51.100.9"),
        ("/guarded?chain", "198.51.100.9, 127.0.0.1"),
    ] {
        let got = get_with_xff(&s, path, xff);
        let line = log_line(&s.g, &s.log, path);
        s.g.check(
            got == 200 && line["client"] == "127.0.0.1",
            &format!(
                "{path} with X-Forwarded-For {xff:?} and no trusted proxy: expected 200 and client 127.0.0.1, got {got} and {line}"
            ),
        );
    }
    // The upstream gets the client's X-Forwarded-For with the peer appended.
    assert_eq!(get_with_xff(&s, "/api/x", "198.51.100.9"), 200);
    let seen = s.up.last_request().unwrap();
    let xff = seen.header_all("x-forwarded-for").join(", ");
    let parts: Vec<&str> = xff.split(',').map(str::trim).collect();
    assert_eq!(
        parts,
        ["198.51.100.9", "127.0.0.1"],
        "X-Forwarded-For {xff:?}"
    );
}

#[test]
fn a_redirect_https_listener_redirects_every_request() {
    let s = setup(
        1,
        |extra| {
            vec![format!(
                "{{ addr: \"127.0.0.1:{}\", redirect_https: true }}",
                extra[0]
            )]
        },
        "",
    );
    let port = s.g.port(0);
    let mut wrong = Vec::new();
    for (method, target, host, status, location) in [
        (
            "GET",
            "/x?y=1",
            "example.com:8080",
            301,
            "https://example.com/x?y=1",
        ),
        (
            "HEAD",
            "/x?y=1",
            "example.com:8080",
            301,
            "https://example.com/x?y=1",
        ),
        (
            "GET",
            "/api/deep/path",
            "example.com",
            301,
            "https://example.com/api/deep/path",
        ),
        (
            "POST",
            "/x?y=1",
            "example.com:8080",
            308,
            "https://example.com/x?y=1",
        ),
        (
            "PUT",
            "/form",
            "example.com",
            308,
            "https://example.com/form",
        ),
    ] {
        let resp = http_request(
            ops_common::local(port),
            method,
            target,
            &[("Host", host)],
            b"",
        );
        let got = resp.header("location").unwrap_or("");
        if resp.status != status || got != location {
            wrong.push(format!(
                "{method} {target} Host {host}: expected {status} {location}, got {} {got:?}",
                resp.status
            ));
        }
    }
    s.g.check(wrong.is_empty(), &format!("{wrong:#?}"));
    assert_eq!(
        s.up.requests_seen(),
        0,
        "a redirected request reached the upstream"
    );
    // The plain listener of the same gateway is not redirected.
    let r = http_request(
        s.g.plain(),
        "GET",
        "/guarded",
        &[("Host", "example.com")],
        b"",
    );
    assert_eq!(r.status, 200);
}
