//! Response compression (`compress`) on the real binary: gzip, brotli and
//! zstd answers decoded by the test to the upstream's bytes (length and
//! chunked upstream bodies, a keep-alive connection reusing the coders,
//! an HTTP/2 client), the coding chosen by q-values; what is left alone
//! (no or refused Accept-Encoding, small bodies, other types, an
//! upstream's own Content-Encoding, no-transform, Range and 206, HEAD,
//! 204 and 304, gRPC, a route without compress); the changed fields
//! (Vary, also on an answer sent as it is to a client that takes no
//! coding; weak ETag); the counters; and a server-sent event that arrives,
//! decoded as it comes, before the upstream ends its stream.

mod http_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_common::{bin, service, wait_until};
use sluicegate_testkit::upstream::pattern;
use sluicegate_testkit::{
    free_port, http_get, http_request, read_request_head, Gateway, KeepAliveClient, RawUpstream,
    Response, TestUpstream,
};

const DEADLINE: Duration = Duration::from_secs(10);

/// A gateway on free loopback ports (listener and admin) with these
/// routes: `all` (compress: true), `gz` (gzip only, JSON only, from 100
/// bytes), `plain` (no compress) to the test upstream, `events` to the
/// event stream upstream.
struct Gw {
    _gw: Gateway,
    port: u16,
    admin: u16,
}

impl Gw {
    fn start(up: &TestUpstream, events: Option<&RawUpstream>) -> Gw {
        let events_addr = events.map_or(up.addr(), |e| e.addr());
        let routes = r#"routes:
  - name: all
    match: { path_prefix: /all }
    service: s
    compress: true
  - name: gz
    match: { path_prefix: /gz }
    service: s
    strip_prefix: true
    compress: { algorithms: [gzip], min_size: 100, types: [application/json], level: best }
  - name: plain
    match: { path_prefix: /plain }
    service: s
  - name: events
    match: { path_prefix: /events }
    service: e
    compress: true
"#;
        let mut last = String::new();
        for _ in 0..3 {
            let (port, admin) = (free_port(), free_port());
            let yaml = format!(
                "listen: [\"127.0.0.1:{port}\"]\nworkers: 1\nadmin: {{ listen: \"127.0.0.1:{admin}\" }}\n\
                 log: {{ level: warn, access: off }}\nreload: {{ watch: false }}\nservices:\n{}{}{routes}",
                service("s", &[up.addr()], ""),
                service("e", &[events_addr], ""),
            );
            let mut gw = Gateway::spawn(bin(), &yaml);
            match gw.wait_ready(&[port, admin], DEADLINE) {
                Ok(()) => {
                    return Gw {
                        _gw: gw,
                        port,
                        admin,
                    }
                }
                Err(why) => last = format!("{why}\n{}\n{}", gw.stdout(), gw.stderr()),
            }
        }
        panic!("gateway did not start: {last}");
    }

    fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn get(&self, path: &str, accept: &str) -> Response {
        let h = [("Accept-Encoding", accept)];
        http_get(self.addr(), path, if accept.is_empty() { &[] } else { &h })
    }

    fn metrics(&self) -> String {
        http_get(("127.0.0.1", self.admin), "/metrics", &[]).body_str()
    }
}

fn decode(coding: &str, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .expect("gzip");
        }
        "br" => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .expect("br");
        }
        "zstd" => out = zstd::stream::decode_all(data).expect("zstd"),
        other => panic!("unexpected coding {other}"),
    }
    out
}

/// The answer is compressed in `coding`, with the fields that go with it,
/// and decodes to `want`.
fn assert_coded(r: &Response, coding: &str, want: &[u8]) {
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("content-encoding"),
        Some(coding),
        "{:?}",
        r.headers
    );
    assert_eq!(r.header("content-length"), None, "{:?}", r.headers);
    assert!(r.chunked, "chunked to an HTTP/1.1 client");
    assert!(r.body.len() < want.len() / 4, "coded: {}", r.body.len());
    assert_eq!(decode(coding, &r.body), want, "{coding}");
}

fn assert_identity(r: &Response, want_len: usize) {
    assert_eq!(r.header("content-encoding"), None, "{:?}", r.headers);
    assert_eq!(r.body.len(), want_len, "{:?}", r.headers);
}

#[test]
fn each_coding_decodes_to_the_upstream_s_body_as_the_client_prefers() {
    let up = TestUpstream::start();
    let gw = Gw::start(&up, None);
    let body = pattern(10 * 1024);
    for (accept, coding) in [
        ("gzip", "gzip"),
        ("br", "br"),
        ("zstd", "zstd"),
        // Equal preference: the route's order (zstd, br, gzip).
        ("gzip, br, zstd", "zstd"),
        ("gzip, br", "br"),
        ("gzip;q=1, br;q=0.5, zstd;q=0.2", "gzip"),
        ("zstd;q=0, br;q=0, *", "gzip"),
        ("x-gzip", "gzip"),
    ] {
        let r = gw.get("/all?size=10240", accept);
        assert_coded(&r, coding, &body);
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{accept}");
        // A chunked upstream body, in several reads.
        let r = gw.get("/all?size=10240&chunked=1", accept);
        assert_coded(&r, coding, &body);
    }
    // Vary merged with the upstream's, a strong ETag made weak, a weak one
    // kept, no Accept-Ranges.
    let r = gw.get(
        "/all?size=4096&header=vary:Origin&header=etag:%22v1%22&header=accept-ranges:bytes",
        "gzip",
    );
    assert_coded(&r, "gzip", &pattern(4096));
    assert_eq!(r.header_all("vary"), ["Origin, Accept-Encoding"]);
    assert_eq!(r.header("etag"), Some("W/\"v1\""));
    assert_eq!(r.header("accept-ranges"), None);
    let r = gw.get("/all?size=4096&header=etag:W/%22v2%22", "br");
    assert_eq!(r.header("etag"), Some("W/\"v2\""));
    // A JSON answer on a gzip-only route, at the best level.
    let r = gw.get(
        "/gz/echo?pad=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "br, gzip",
    );
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    let doc: serde_json::Value = serde_json::from_slice(&decode("gzip", &r.body)).unwrap();
    assert_eq!(doc["method"], "GET");
    // Several answers on one connection: each its own stream, the coders
    // reused by the worker.
    let mut c = KeepAliveClient::connect(gw.addr()).unwrap();
    for (i, coding) in ["gzip", "zstd", "gzip", "br", "zstd", "gzip"]
        .iter()
        .enumerate()
    {
        let size = 2000 + i * 3000;
        let path = format!(
            "/all?size={size}{}",
            if i % 2 == 0 { "&chunked=1" } else { "" }
        );
        let r = c
            .request("GET", &path, &[("Accept-Encoding", coding)], b"")
            .unwrap();
        assert_coded(&r, coding, &pattern(size));
    }
    // Counted by route and coding, with the bytes in and out.
    let m = gw.metrics();
    for (coding, n) in [("gzip", 10), ("br", 4), ("zstd", 6)] {
        let line =
            format!("sluicegate_compress_responses_total{{route=\"all\",algorithm=\"{coding}\"}} ");
        let got: u64 = m
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .unwrap_or_else(|| panic!("no {line} in\n{m}"))
            .parse()
            .unwrap();
        assert!(got >= n, "{coding}: {got}");
    }
    let bytes = |dir: &str| -> u64 {
        let line = format!("sluicegate_compress_bytes_total{{route=\"all\",direction=\"{dir}\"}} ");
        m.lines()
            .find_map(|l| l.strip_prefix(&line))
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(bytes("in") > 20 * 10240, "{m}");
    assert!(bytes("out") < bytes("in") / 4, "{m}");
    assert!(m.contains("sluicegate_compress_responses_total{route=\"gz\",algorithm=\"gzip\"} 1"));
}

#[test]
fn what_is_not_for_compressing_is_left_alone() {
    let up = TestUpstream::start();
    let gw = Gw::start(&up, None);
    let n = 10 * 1024;
    // No coding asked, or every one refused, or none the route offers.
    for accept in [
        "",
        "identity",
        "gzip;q=0, br;q=0, zstd;q=0",
        "*;q=0",
        "deflate",
    ] {
        let r = gw.get("/all?size=10240", accept);
        assert_identity(&r, n);
        assert_eq!(r.header("content-length"), Some("10240"), "{accept}");
        // Another client would get it compressed: caches are told.
        assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{accept}");
    }
    let r = gw.get(
        "/all?size=10240&header=vary:Cookie&header=etag:%22s%22",
        "deflate",
    );
    assert_eq!(r.header_all("vary"), ["Cookie, Accept-Encoding"]);
    assert_eq!(r.header("etag"), Some("\"s\""));
    let r = gw.get("/gz/echo", "br, zstd");
    assert_eq!(r.header("content-encoding"), None);
    assert!(serde_json::from_slice::<serde_json::Value>(&r.body).is_ok());
    // Smaller than min_size (1 KiB by default).
    let r = gw.get("/all?size=1000", "gzip");
    assert_identity(&r, 1000);
    assert_eq!(r.header("vary"), None);
    assert_coded(&gw.get("/all?size=1024", "gzip"), "gzip", &pattern(1024));
    // A type the route does not list (gz: JSON only; the upstream's is
    // text/plain), and gRPC whatever the list.
    assert_identity(&gw.get("/gz?size=10240", "gzip"), n);
    assert_identity(
        &gw.get(
            "/all?size=10240&header=content-type:application/grpc",
            "gzip",
        ),
        n,
    );
    // The upstream's own coding: passed on as it is.
    let r = gw.get("/all?size=10240&header=content-encoding:br", "gzip, br");
    assert_eq!(r.header_all("content-encoding"), ["br"]);
    assert_eq!(r.body, pattern(n));
    // no-transform.
    let r = gw.get(
        "/all?size=10240&header=cache-control:public,%20no-transform",
        "gzip",
    );
    assert_identity(&r, n);
    // A range request, and a 206.
    let r = http_get(
        gw.addr(),
        "/all?size=10240",
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-99")],
    );
    assert_identity(&r, n);
    assert_identity(&gw.get("/all?size=10240&status=206", "gzip"), n);
    // HEAD: the upstream's head as it is.
    let r = http_request(
        gw.addr(),
        "HEAD",
        "/all?size=10240",
        &[("Accept-Encoding", "gzip")],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("content-length"), Some("10240"));
    // 204 and 304.
    for status in [204, 304] {
        let r = gw.get(&format!("/all?status={status}&header=etag:%22x%22"), "gzip");
        assert_eq!(r.status, status);
        assert_eq!(r.header("content-encoding"), None);
        if status == 304 {
            assert_eq!(r.header("etag"), Some("\"x\""));
        }
    }
    // A route without compress.
    let r = gw.get("/plain?size=10240", "gzip");
    assert_identity(&r, n);
    assert_eq!(r.header("vary"), None);
    // An HTTP/1.0 client: nothing to carry a body of unknown length on a
    // connection kept alive.
    let mut s = TcpStream::connect(gw.addr()).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(b"GET /all?size=10240 HTTP/1.0\r\nAccept-Encoding: gzip\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(!text.contains("content-encoding"), "{text}");
    assert!(text.contains("content-length: 10240"), "{text}");
}

/// GETs `path` over HTTP/2 (prior knowledge) with `accept`: the status,
/// the fields and the body.
fn h2_get(port: u16, path: &str, accept: &str) -> (u16, http::HeaderMap, Vec<u8>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let (mut client, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        let req = http::Request::get(format!("http://127.0.0.1:{port}{path}"))
            .header("accept-encoding", accept)
            .body(())
            .unwrap();
        let (res, _) = client.send_request(req, true).unwrap();
        let res = tokio::time::timeout(DEADLINE, res).await.unwrap().unwrap();
        let (parts, mut body) = res.into_parts();
        let mut data = Vec::new();
        while let Some(chunk) = tokio::time::timeout(DEADLINE, body.data()).await.unwrap() {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        (parts.status.as_u16(), parts.headers, data)
    })
}

#[test]
fn an_http2_client_gets_the_answer_compressed() {
    let up = TestUpstream::start();
    let gw = Gw::start(&up, None);
    for (coding, chunked) in [("gzip", false), ("br", true), ("zstd", false)] {
        let path = format!(
            "/all?size=30000&header=etag:%22e%22{}",
            if chunked { "&chunked=1" } else { "" }
        );
        let (status, fields, body) = h2_get(gw.port, &path, coding);
        assert_eq!(status, 200);
        assert_eq!(fields.get("content-encoding").unwrap(), coding);
        assert!(fields.get("content-length").is_none(), "{fields:?}");
        assert_eq!(fields.get("vary").unwrap(), "Accept-Encoding");
        assert_eq!(fields.get("etag").unwrap(), "W/\"e\"");
        assert_eq!(decode(coding, &body), pattern(30000), "{coding}");
    }
    let (_, fields, body) = h2_get(gw.port, "/all?size=30000", "identity");
    assert!(fields.get("content-encoding").is_none());
    assert_eq!(body, pattern(30000));
}

/// Reads an HTTP/1.1 answer's chunked body from `s` as it comes (after
/// its head), feeding the data to `feed` until it returns true or the
/// body ends; true when `feed` did.
fn read_chunks(s: &mut TcpStream, buf: &mut Vec<u8>, mut feed: impl FnMut(&[u8]) -> bool) -> bool {
    let until = Instant::now() + DEADLINE;
    let mut tmp = [0u8; 8192];
    loop {
        // Every whole chunk in the buffer.
        while let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") {
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap().trim(), 16)
                    .expect("chunk size");
            if size == 0 {
                return false;
            }
            let end = line_end + 2 + size + 2;
            if buf.len() < end {
                break;
            }
            let data = buf[line_end + 2..end - 2].to_vec();
            buf.drain(..end);
            if feed(&data) {
                return true;
            }
        }
        assert!(Instant::now() < until, "the body did not come in time");
        let n = s.read(&mut tmp).expect("read");
        assert!(n > 0, "closed before the body ended");
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// A streaming decoder of one coding, fed the coded bytes as they come,
/// writing what it decodes to `out`.
fn stream_decoder(coding: &str, out: SharedVec) -> Box<dyn Write> {
    match coding {
        "gzip" => Box::new(flate2::write::GzDecoder::new(out)),
        "br" => Box::new(brotli::DecompressorWriter::new(out, 4096)),
        _ => Box::new(zstd::stream::write::Decoder::new(out).unwrap()),
    }
}

/// The decoded bytes so far, shared with the decoder writing them.
#[derive(Default, Clone)]
struct SharedVec(Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for SharedVec {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_server_sent_event_arrives_decoded_before_the_stream_ends() {
    // Each connection: one event, then wait until the test has read it
    // (released), then a second event and the end.
    let started = Arc::new(AtomicUsize::new(0));
    let released = Arc::new(AtomicUsize::new(0));
    let (s2, r2) = (started.clone(), released.clone());
    let events = RawUpstream::start(move |mut s| {
        if !read_request_head(&mut s) {
            return;
        }
        let me = s2.fetch_add(1, Ordering::SeqCst);
        let head =
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                    transfer-encoding: chunked\r\nconnection: close\r\n\r\n";
        let one = b"data: one\n\n";
        let mut first = head.as_bytes().to_vec();
        first.extend_from_slice(format!("{:x}\r\n", one.len()).as_bytes());
        first.extend_from_slice(one);
        first.extend_from_slice(b"\r\n");
        if s.write_all(&first).is_err() {
            return;
        }
        let until = Instant::now() + DEADLINE;
        while r2.load(Ordering::SeqCst) <= me && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let two = b"data: two\n\n";
        let mut rest = format!("{:x}\r\n", two.len()).into_bytes();
        rest.extend_from_slice(two);
        rest.extend_from_slice(b"\r\n0\r\n\r\n");
        let _ = s.write_all(&rest);
    });
    let up = TestUpstream::start();
    let gw = Gw::start(&up, Some(&events));
    for coding in ["gzip", "br", "zstd"] {
        let mut s = TcpStream::connect(gw.addr()).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        write!(
            s,
            "GET /events HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {coding}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        // The head.
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = s.read(&mut tmp).unwrap();
            assert!(n > 0, "no head");
            buf.extend_from_slice(&tmp[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        assert!(
            head.contains(&format!("content-encoding: {coding}\r\n")),
            "{head}"
        );
        assert!(head.contains("transfer-encoding: chunked"), "{head}");
        buf.drain(..head_end);
        let out = SharedVec::default();
        let decoded = out.0.clone();
        let mut dec = stream_decoder(coding, out);
        let has = |want: &[u8]| {
            decoded
                .lock()
                .unwrap()
                .windows(want.len())
                .any(|w| w == want)
        };
        // The first event, while the upstream still holds the stream open.
        let got_one = read_chunks(&mut s, &mut buf, |data| {
            dec.write_all(data).unwrap();
            let _ = dec.flush();
            has(b"data: one\n\n")
        });
        assert!(got_one, "{coding}: the first event did not arrive decoded");
        assert!(!has(b"two"));
        released.fetch_add(1, Ordering::SeqCst);
        // Then the rest, to the end of the coded stream.
        read_chunks(&mut s, &mut buf, |data| {
            dec.write_all(data).unwrap();
            false
        });
        let _ = dec.flush();
        drop(dec);
        assert_eq!(
            decoded.lock().unwrap().as_slice(),
            b"data: one\n\ndata: two\n\n",
            "{coding}"
        );
    }
    assert!(wait_until(DEADLINE, || started.load(Ordering::SeqCst) == 3));
}
