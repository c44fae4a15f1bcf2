//! Proxying end to end: to real nginx (`/test.html`, 1 MiB `/big`, a 5 MiB
//! upload) and to the test upstream; bodies streamed both ways (content-length
//! and chunked), HEAD, `Expect: 100-continue`, 204/304, hop-by-hop headers
//! and the `X-Forwarded-*` headers (on by default, off per service).

mod http_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_common::{body_of, loopback, read_head, read_until_close, service, Gw};
use sluicegate_testkit::nginx::{big_body, BIG_LEN, TEST_HTML};
use sluicegate_testkit::upstream::pattern;
use sluicegate_testkit::{http_get, KeepAliveClient, Nginx, RawUpstream, TestUpstream};

/// A gateway proxying every path (unchanged) to `up`.
fn gateway_to(up: std::net::SocketAddr, limits: &str) -> Gw {
    let svc = service("up", &[up], "");
    Gw::start(&format!(
        "{limits}services:\n{svc}routes:\n  - name: all\n    match: {{ path_prefix: / }}\n    service: up\n"
    ))
}

#[test]
fn nginx_test_page_big_file_and_upload() {
    let nginx = Nginx::start();
    let gw = gateway_to(nginx.addr(), "");

    let resp = http_get(gw.addr(), "/test.html", &[]);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.len(), 75);
    assert_eq!(resp.body_str(), TEST_HTML);

    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let resp = client.get("/big").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body.len(), BIG_LEN);
    assert!(resp.body == big_body(), "1 MiB body corrupted on the way");
    // The same connection still works after a large body.
    let resp = client.get("/test.html").unwrap();
    assert_eq!(resp.body_str(), TEST_HTML);

    let upload = pattern(5 * 1024 * 1024);
    let resp = client.request("POST", "/upload", &[], &upload).unwrap();
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    assert_eq!(resp.body_str(), "len=5242880\n");

    let resp = http_get(gw.addr(), "/hello", &[]);
    assert_eq!(resp.body_str(), "ok");
}

#[test]
fn forwarded_headers_seen_by_nginx() {
    let nginx = Nginx::start();
    let gw = gateway_to(nginx.addr(), "");
    let resp = http_get(gw.addr(), "/headers?x=1", &[("Host", "shop.example.test")]);
    assert_eq!(
        resp.body_str(),
        "xff=127.0.0.1 host=shop.example.test uri=/headers?x=1 xfp=http xfh=shop.example.test\n"
    );
}

#[test]
fn test_upstream_get_post_and_content_length_bodies() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();

    let resp = client.get("/echo/path?a=b").unwrap();
    assert_eq!(resp.status, 200);
    assert!(resp.body_str().contains("\"target\":\"/echo/path?a=b\""));
    assert_eq!(up.last_request().unwrap().method, "GET");

    // Content-length request body, streamed to the upstream intact.
    let body = pattern(300_000);
    let resp = client.request("POST", "/echo", &[], &body).unwrap();
    assert_eq!(resp.status, 200);
    let seen = up.last_request().unwrap();
    assert_eq!(seen.method, "POST");
    assert!(!seen.chunked);
    assert_eq!(seen.header("content-length"), Some("300000"));
    assert!(seen.body == body, "request body corrupted");

    // Content-length response body back.
    let resp = client.get("/x?size=777777").unwrap();
    assert_eq!(resp.header("content-length"), Some("777777"));
    assert!(resp.body == pattern(777_777), "response body corrupted");

    // Upstream status codes pass through.
    let resp = client.get("/x?status=418").unwrap();
    assert_eq!(resp.status, 418);
    assert_eq!(resp.body_str(), "ok\n");
}

#[test]
fn chunked_request_body_is_streamed_as_chunked() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let big = pattern(70_000);
    let mut req =
        b"POST /echo HTTP/1.1\r\nHost: gw.test\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    req.extend_from_slice(b"5\r\nhello\r\n");
    req.extend_from_slice(b"1;ext=val\r\n \r\n");
    req.extend_from_slice(format!("{:X}\r\n", big.len()).as_bytes());
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n0\r\n\r\n");
    client.send_raw(&req).unwrap();
    let resp = client.read_response().unwrap();
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    let seen = up.last_request().unwrap();
    assert!(seen.chunked, "upstream should see a chunked body");
    assert_eq!(seen.header("content-length"), None);
    let mut want = b"hello ".to_vec();
    want.extend_from_slice(&big);
    assert_eq!(seen.body.len(), want.len());
    assert!(seen.body == want, "chunked body content corrupted");

    // The connection is still in sync for the next request.
    let resp = client.get("/echo?next=1").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(up.last_request().unwrap().target, "/echo?next=1");
}

#[test]
fn chunked_response_delivered_intact() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    for size in [1usize, 100, 65_536, 1_000_003] {
        let resp = client.get(&format!("/x?chunked=1&size={size}")).unwrap();
        assert_eq!(resp.status, 200);
        assert_eq!(resp.body.len(), size);
        assert!(
            resp.body == pattern(size),
            "chunked body of {size} corrupted"
        );
    }
    let resp = client.get("/x?chunked=1&status=404").unwrap();
    assert_eq!(resp.status, 404);
    assert_eq!(resp.body_str(), "ok\n");
}

#[test]
fn request_body_is_streamed_not_buffered() {
    // The upstream signals once it got the head and the first 64 KiB, while
    // the client still holds back the rest of a 4 MiB body.
    const TOTAL: usize = 4 * 1024 * 1024;
    const FIRST: usize = 64 * 1024;
    let (tx, rx) = mpsc::channel::<usize>();
    let tx = Arc::new(Mutex::new(tx));
    let raw = RawUpstream::start(move |mut s: TcpStream| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        let mut signalled = false;
        let mut body_start = None;
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if body_start.is_none() {
                body_start = got.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4);
            }
            let Some(start) = body_start else { continue };
            let body = got.len() - start;
            if !signalled && body >= FIRST {
                signalled = true;
                let _ = tx.lock().unwrap().send(body);
            }
            if body >= TOTAL {
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                    body.to_string().len()
                );
                let _ = s.write_all(reply.as_bytes());
                return;
            }
        }
    });
    let gw = gateway_to(raw.addr(), "");
    let mut client = TcpStream::connect(gw.addr()).unwrap();
    client
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let body = pattern(TOTAL);
    let head = format!("POST /up HTTP/1.1\r\nHost: gw.test\r\nContent-Length: {TOTAL}\r\n\r\n");
    client.write_all(head.as_bytes()).unwrap();
    client.write_all(&body[..FIRST]).unwrap();
    let early = rx.recv_timeout(Duration::from_secs(3));
    assert!(
        early.is_ok(),
        "upstream did not receive the first 64 KiB while the client held back the rest"
    );
    client.write_all(&body[FIRST..]).unwrap();
    let head = read_head(&mut client, Duration::from_secs(5)).expect("response head");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut rest = [0u8; 7];
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client.read_exact(&mut rest).unwrap();
    assert_eq!(&rest, TOTAL.to_string().as_bytes());
}

#[test]
fn response_body_is_streamed_not_buffered() {
    // The upstream sends the head and 64 KiB of a 4 MiB body, then waits
    // for the test to have seen them through the gateway.
    const TOTAL: usize = 4 * 1024 * 1024;
    const FIRST: usize = 64 * 1024;
    let (tx, rx) = mpsc::channel::<()>();
    let rx = Arc::new(Mutex::new(rx));
    let raw = RawUpstream::start(move |mut s: TcpStream| {
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let body = pattern(TOTAL);
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {TOTAL}\r\n\r\n");
        if s.write_all(head.as_bytes()).is_err() || s.write_all(&body[..FIRST]).is_err() {
            return;
        }
        let go = rx.lock().unwrap().recv_timeout(Duration::from_secs(5));
        if go.is_ok() {
            let _ = s.write_all(&body[FIRST..]);
        }
    });
    let gw = gateway_to(raw.addr(), "");
    let mut client = TcpStream::connect(gw.addr()).unwrap();
    client
        .write_all(b"GET /down HTTP/1.1\r\nHost: gw.test\r\n\r\n")
        .unwrap();
    let head = read_head(&mut client, Duration::from_secs(3)).expect("head before the whole body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut first = vec![0u8; FIRST];
    client
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    client
        .read_exact(&mut first)
        .expect("first 64 KiB delivered before the upstream sent the rest");
    tx.send(()).unwrap();
    let mut rest = vec![0u8; TOTAL - FIRST];
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client.read_exact(&mut rest).unwrap();
    first.extend_from_slice(&rest);
    assert!(first == pattern(TOTAL), "streamed body corrupted");
}

#[test]
fn head_keeps_content_length_and_sends_no_body() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let resp = client.request("HEAD", "/x?size=1234", &[], b"").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-length"), Some("1234"));
    assert!(resp.body.is_empty());
    assert_eq!(up.last_request().unwrap().method, "HEAD");
    // Had any body bytes followed the HEAD response, this would misparse.
    let resp = client.get("/x?size=5").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, b"abcde");
    // Nothing stray after the last response either.
    client
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut stray = [0u8; 16];
    let n = client.stream().peek(&mut stray).unwrap_or(0);
    assert_eq!(n, 0, "stray bytes after the responses");
}

#[test]
fn no_body_for_204_and_304() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    for status in [204u16, 304, 204] {
        let resp = client.get(&format!("/x?status={status}")).unwrap();
        assert_eq!(resp.status, status);
        assert!(resp.body.is_empty());
        assert!(
            resp.header("transfer-encoding").is_none(),
            "{status} with TE"
        );
    }
    let resp = client.get("/x?size=3").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(
        resp.body, b"abc",
        "stream out of sync after bodyless responses"
    );
}

#[test]
fn expect_100_continue_gets_interim_then_final_response() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = TcpStream::connect(gw.addr()).unwrap();
    client
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client
        .write_all(
            b"POST /echo HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 11\r\nExpect: 100-continue\r\n\r\n",
        )
        .unwrap();
    let interim = read_head(&mut client, Duration::from_secs(3))
        .expect("a 100 Continue before the body is sent");
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
    client.write_all(b"hello world").unwrap();
    let head = read_head(&mut client, Duration::from_secs(5)).expect("final response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let seen = up.last_request().unwrap();
    assert_eq!(seen.body, b"hello world");
    assert_eq!(up.requests_seen(), 1);
}

#[test]
fn hop_by_hop_headers_removed_and_forwarded_headers_set() {
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");

    let resp = http_get(
        gw.addr(),
        "/echo",
        &[
            ("Host", "api.example.test:8443"),
            ("Connection", "keep-alive, X-Hop-Secret"),
            ("Keep-Alive", "timeout=5"),
            ("TE", "trailers"),
            ("Upgrade", "foo/1"),
            ("Proxy-Connection", "keep-alive"),
            ("X-Hop-Secret", "s3cret"),
            ("X-Keep-Me", "yes"),
        ],
    );
    assert_eq!(resp.status, 200);
    let seen = up.last_request().unwrap();
    for name in [
        "keep-alive",
        "te",
        "upgrade",
        "proxy-connection",
        "x-hop-secret",
    ] {
        assert_eq!(seen.header(name), None, "hop-by-hop {name} forwarded");
    }
    // Any Connection header the gateway sends upstream is its own.
    for value in seen.header_all("connection") {
        assert!(
            !value.to_ascii_lowercase().contains("x-hop-secret"),
            "client's Connection forwarded: {value}"
        );
    }
    assert_eq!(seen.header("x-keep-me"), Some("yes"));
    assert_eq!(seen.header("host"), Some("api.example.test:8443"));
    assert_eq!(seen.header_all("host").len(), 1);
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(seen.header("x-forwarded-proto"), Some("http"));
    assert_eq!(
        seen.header("x-forwarded-host"),
        Some("api.example.test:8443")
    );

    // An existing X-Forwarded-For is appended to, not replaced.
    http_get(gw.addr(), "/echo", &[("X-Forwarded-For", "203.0.113.9")]);
    let seen = up.last_request().unwrap();
    let xff = seen.header_all("x-forwarded-for").join(", ");
    assert_eq!(xff, "203.0.113.9, 127.0.0.1");
    // Several X-Forwarded-For lines keep their order, the client comes last.
    http_get(
        gw.addr(),
        "/echo",
        &[
            ("X-Forwarded-For", "198.51.100.1"),
            ("X-Forwarded-For", "198.51.100.2, 198.51.100.3"),
        ],
    );
    let seen = up.last_request().unwrap();
    let xff = seen.header_all("x-forwarded-for").join(", ");
    assert_eq!(xff, "198.51.100.1, 198.51.100.2, 198.51.100.3, 127.0.0.1");
    // A client cannot claim to have come over https.
    http_get(gw.addr(), "/echo", &[("X-Forwarded-Proto", "https")]);
    let seen = up.last_request().unwrap();
    assert_eq!(seen.header_all("x-forwarded-proto"), vec!["http"]);

    // Hop-by-hop headers in the response are not passed to the client.
    let resp = http_get(
        gw.addr(),
        "/x?header=Keep-Alive:timeout%3D9&header=X-Resp-Hop:1&header=Connection:X-Resp-Hop&header=X-Resp-Keep:2",
        &[],
    );
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("x-resp-hop"), None, "{:?}", resp.headers);
    assert_eq!(resp.header("keep-alive"), None, "{:?}", resp.headers);
    assert_eq!(resp.header("x-resp-keep"), Some("2"));
}

#[test]
fn forwarded_headers_off_writes_none_and_passes_none_on() {
    let up = TestUpstream::start();
    let on = service("on", &[up.addr()], "");
    let off = service("off", &[up.addr()], "    forwarded_headers: false\n");
    let gw = Gw::start(&format!(
        "services:\n{on}{off}routes:\n  - name: off\n    match: {{ path_prefix: /off/ }}\n    service: off\n    request_headers: {{ set: {{ X-Set: one }} }}\n  - name: on\n    match: {{ path_prefix: / }}\n    service: on\n"
    ));
    let sent = [
        ("Host", "shop.example.test"),
        ("X-Forwarded-For", "203.0.113.9"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "evil.example.test"),
        ("X-Keep-Me", "yes"),
    ];
    let resp = http_get(gw.addr(), "/off/echo", &sent);
    assert_eq!(resp.status, 200);
    let seen = up.last_request().unwrap();
    for name in ["x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"] {
        assert_eq!(
            seen.header_all(name),
            Vec::<&str>::new(),
            "{name} sent upstream"
        );
    }
    assert_eq!(seen.header("host"), Some("shop.example.test"));
    assert_eq!(seen.header("x-keep-me"), Some("yes"));
    assert_eq!(seen.header("x-set"), Some("one"));
    // The other service on the same gateway still gets them.
    let resp = http_get(gw.addr(), "/echo", &sent);
    assert_eq!(resp.status, 200);
    let seen = up.last_request().unwrap();
    assert_eq!(
        seen.header("x-forwarded-for"),
        Some("203.0.113.9, 127.0.0.1")
    );
    assert_eq!(seen.header_all("x-forwarded-proto"), vec!["http"]);
    assert_eq!(
        seen.header_all("x-forwarded-host"),
        vec!["shop.example.test"]
    );
}

#[test]
fn http10_client_gets_an_unchunked_body() {
    // An HTTP/1.0 client cannot read chunked framing: a chunked upstream
    // response must reach it de-chunked (or delimited by close).
    let up = TestUpstream::start();
    let gw = gateway_to(up.addr(), "");
    let mut client = TcpStream::connect(loopback(gw.port)).unwrap();
    client
        .write_all(b"GET /x?chunked=1&size=100 HTTP/1.0\r\n\r\n")
        .unwrap();
    let got = read_until_close(&mut client, Duration::from_secs(3));
    assert!(got.closed, "HTTP/1.0 without keep-alive must close");
    let text = got.text();
    assert!(text.starts_with("HTTP/1."), "{text}");
    let head = text.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert_eq!(body_of(&text).as_bytes(), &pattern(100)[..]);

    // Even when it asked for keep-alive: no chunked framing to HTTP/1.0.
    let mut client = TcpStream::connect(loopback(gw.port)).unwrap();
    client
        .write_all(b"GET /x?chunked=1&size=50 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap();
    let got = read_until_close(&mut client, Duration::from_millis(500));
    let text = got.text();
    let head = text.split("\r\n\r\n").next().unwrap().to_ascii_lowercase();
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert_eq!(body_of(&text).as_bytes(), &pattern(50)[..]);
    // Without a length the body can only be delimited by closing.
    assert!(
        got.closed || head.contains("content-length: 50"),
        "{text:?}"
    );
}
