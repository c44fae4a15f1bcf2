//! The cache with compression (`cache` and `compress` on one route), on
//! the real binary against a real upstream on loopback whose requests
//! are counted: one upstream request stores one uncoded object, and hits
//! answer gzip, br, zstd and identity clients from it (each coding made
//! once, kept with the object and counted against the memory bound;
//! later hits do no coding), with the fields of a compressed answer
//! (`Content-Encoding`, `Vary: Accept-Encoding`, a weak `ETag`, the coded
//! `Content-Length`); `q=0` is honoured, a `HEAD` gets the coded head, a
//! conditional request against the weak `ETag` a `304`; ranges,
//! `no-transform` and an upstream's own coding are left alone, its own
//! `Vary` still splits; HTTP/2 clients get the same.

mod http_common;

use std::io::Read;
use std::time::Duration;

use http_common::{service, wait_until, Gw};
use sluicegate_testkit::upstream::pattern;
use sluicegate_testkit::{free_port, http_get, http_request, Proto, Response, TestUpstream};

const HIT: &str = "sluicegate; hit";
const STORED: &str = "sluicegate; fwd=miss; stored";

/// A gateway whose route `cc` caches and compresses (every default), and
/// its admin port.
fn start(up: &TestUpstream) -> (Gw, u16) {
    let admin = free_port();
    let gw = Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\n\
         cache: {{ memory: 8MiB, max_object: 1MiB }}\n\
         services:\n{}\
         routes:\n\
         \x20 - name: cc\n    match: {{ path_prefix: /cc }}\n    service: web\n    compress: true\n    cache: {{ key: [host, path, query] }}\n",
        service("web", &[up.addr()], "")
    ));
    let up_ok = wait_until(Duration::from_secs(10), || {
        http_get(("127.0.0.1", admin), "/metrics", &[]).status == 200
    });
    assert!(up_ok, "the admin API did not answer");
    (gw, admin)
}

fn get(gw: &Gw, path: &str, headers: &[(&str, &str)]) -> Response {
    http_request(gw.addr(), "GET", path, headers, b"")
}

fn accept(coding: &str) -> Vec<(&str, &str)> {
    match coding {
        "" => vec![],
        c => vec![("Accept-Encoding", c)],
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

/// A hit in `coding` with the fields of a compressed answer, a length,
/// decoding to `want`.
fn assert_coded_hit(r: &Response, coding: &str, want: &[u8]) {
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("cache-status"), Some(HIT), "{:?}", r.headers);
    assert_eq!(
        r.header("content-encoding"),
        Some(coding),
        "{:?}",
        r.headers
    );
    assert_eq!(r.header_all("vary"), ["Accept-Encoding"], "{:?}", r.headers);
    assert!(!r.chunked, "a hit has its length");
    let len: usize = r.header("content-length").unwrap().parse().unwrap();
    assert_eq!(len, r.body.len());
    assert!(r.body.len() < want.len() / 4, "coded: {}", r.body.len());
    assert_eq!(decode(coding, &r.body), want, "{coding}");
}

/// A series' value in the gateway's `/metrics` (0 when absent).
fn metric(admin: u16, series: &str) -> u64 {
    let text = http_get(("127.0.0.1", admin), "/metrics", &[]).body_str();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// The bytes the store holds, from `GET /cache`.
fn cache_bytes(admin: u16) -> u64 {
    let r = http_get(("127.0.0.1", admin), "/cache", &[]);
    assert_eq!(r.status, 200, "{}", r.body_str());
    let v: serde_json::Value = serde_json::from_str(&r.body_str()).unwrap();
    v["bytes"].as_u64().expect("bytes")
}

#[test]
fn one_upstream_request_serves_every_coding_from_one_object() {
    let up = TestUpstream::start();
    let (gw, admin) = start(&up);
    let body = pattern(10 * 1024);
    let path = "/cc/one?size=10240&header=cache-control:max-age=60&header=etag:%22v1%22";
    // The miss: compressed as it streams, and stored uncoded.
    let miss = get(&gw, path, &accept("gzip"));
    assert_eq!(miss.header("cache-status"), Some(STORED));
    assert_eq!(miss.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &miss.body), body);
    let stored = cache_bytes(admin);
    assert!(stored > 10 * 1024, "{stored}");
    // Each coding from the one object, made by its first hit and counted
    // against the bound with it.
    let mut grown = stored;
    for coding in ["gzip", "br", "zstd"] {
        let r = get(&gw, path, &accept(coding));
        assert_coded_hit(&r, coding, &body);
        assert_eq!(r.header("etag"), Some("W/\"v1\""));
        let now = cache_bytes(admin);
        assert!(
            now >= grown + r.body.len() as u64,
            "{coding}: {grown} -> {now} for {} coded bytes",
            r.body.len()
        );
        grown = now;
    }
    // Identity: the stored body, its strong ETag, and Vary.
    let r = get(&gw, path, &[]);
    assert_eq!(r.header("cache-status"), Some(HIT));
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header_all("vary"), ["Accept-Encoding"]);
    assert_eq!(r.header("etag"), Some("\"v1\""));
    assert_eq!(r.body, body);
    assert_eq!(up.requests_seen(), 1, "one upstream request for all");

    // Later hits do no coding: the bytes given to coders stay as they
    // are, the answers count as sent from the kept copies.
    let series = |s: &str| format!("sluicegate_compress_{s}{{route=\"cc\",");
    let coded_in = metric(
        admin,
        &format!("{}direction=\"in\"}}", series("bytes_total")),
    );
    assert_eq!(coded_in, 10240 * 4, "the miss's body, then one per coding");
    for _ in 0..5 {
        assert_coded_hit(&get(&gw, path, &accept("br, gzip;q=0.5")), "br", &body);
        assert_coded_hit(&get(&gw, path, &accept("gzip")), "gzip", &body);
    }
    let cached = |coding: &str| {
        metric(
            admin,
            &format!("{}algorithm=\"{coding}\"}}", series("cached_total")),
        )
    };
    assert_eq!((cached("br"), cached("gzip")), (5, 5));
    let after = metric(
        admin,
        &format!("{}direction=\"in\"}}", series("bytes_total")),
    );
    assert_eq!(after, coded_in, "a hit codes nothing");
    assert_eq!(cache_bytes(admin), grown, "nothing more kept");
    assert_eq!(up.requests_seen(), 1);

    // q=0 is honoured on hits as on the forwarded path.
    for (accept_encoding, coding) in [
        ("gzip;q=0, br", Some("br")),
        ("zstd;q=0, br;q=0, *", Some("gzip")),
        ("gzip;q=0", None),
        ("*;q=0", None),
        ("identity", None),
        ("zstd;q=0.1, gzip;q=0.9", Some("gzip")),
    ] {
        let r = get(&gw, path, &accept(accept_encoding));
        match coding {
            Some(c) => assert_coded_hit(&r, c, &body),
            None => {
                assert_eq!(r.header("content-encoding"), None, "{accept_encoding}");
                assert_eq!(r.header_all("vary"), ["Accept-Encoding"]);
                assert_eq!(r.body, body, "{accept_encoding}");
            }
        }
    }

    // A HEAD gets the head a GET gets: coded, its coded length.
    let gz_len = get(&gw, path, &accept("gzip")).body.len();
    let head = http_request(gw.addr(), "HEAD", path, &accept("gzip"), b"");
    assert_eq!(head.status, 200);
    assert_eq!(head.header("cache-status"), Some(HIT));
    assert_eq!(head.header("content-encoding"), Some("gzip"));
    assert_eq!(head.header("content-length"), Some(&*gz_len.to_string()));
    assert_eq!(head.header("etag"), Some("W/\"v1\""));
    assert!(head.body.is_empty());

    // Conditional requests against the weak ETag (weak comparison): 304
    // from memory with the coded answer's fields; another tag: the body.
    for inm in ["W/\"v1\"", "\"v1\"", "\"v0\", W/\"v1\""] {
        let r = get(
            &gw,
            path,
            &[("Accept-Encoding", "gzip"), ("If-None-Match", inm)],
        );
        assert_eq!(r.status, 304, "{inm}");
        assert_eq!(r.header("cache-status"), Some(HIT));
        assert_eq!(r.header("etag"), Some("W/\"v1\""));
        assert_eq!(r.header("vary"), Some("Accept-Encoding"));
        assert!(r.body.is_empty());
    }
    let r = get(
        &gw,
        path,
        &[("Accept-Encoding", "zstd"), ("If-None-Match", "W/\"v2\"")],
    );
    assert_coded_hit(&r, "zstd", &body);

    // HTTP/2 clients: the same object, coded.
    for coding in ["gzip", "br", "zstd"] {
        let r = Proto::H2c.get(gw.addr(), path, &accept(coding));
        assert_coded_hit(&r, coding, &body);
    }
    assert_eq!(up.requests_seen(), 1);
}

#[test]
fn ranges_no_transform_an_upstream_s_coding_and_its_vary_are_respected() {
    let up = TestUpstream::start();
    let (gw, _admin) = start(&up);
    let body = pattern(4096);
    // A range request on a hit: the stored body as it is (the cache
    // serves no ranges), never coded.
    let path = "/cc/range?size=4096&header=cache-control:max-age=60";
    assert_eq!(
        get(&gw, path, &accept("gzip")).header("cache-status"),
        Some(STORED)
    );
    let r = get(
        &gw,
        path,
        &[("Accept-Encoding", "gzip"), ("Range", "bytes=0-9")],
    );
    assert_eq!(r.header("cache-status"), Some(HIT));
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.header("vary"), None);
    assert_eq!(r.body, body);

    // no-transform: stored and served as the upstream sent it.
    let path = "/cc/nt?size=4096&header=cache-control:max-age=60,no-transform";
    let miss = get(&gw, path, &accept("gzip"));
    assert_eq!(miss.header("cache-status"), Some(STORED));
    assert_eq!(miss.header("content-encoding"), None);
    let r = get(&gw, path, &accept("gzip"));
    assert_eq!(r.header("cache-status"), Some(HIT));
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, body);

    // An answer coded by the upstream is stored and served as it is,
    // never coded again.
    let path = "/cc/ce?size=4096&header=cache-control:max-age=60&header=content-encoding:gzip";
    let miss = get(&gw, path, &accept("gzip"));
    assert_eq!(miss.header("cache-status"), Some(STORED));
    let r = get(&gw, path, &accept("br"));
    assert_eq!(r.header("cache-status"), Some(HIT));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(r.body, body, "the upstream's bytes, untouched");

    // A small answer (under min_size) is stored, never coded.
    let path = "/cc/small?size=100&header=cache-control:max-age=60";
    get(&gw, path, &accept("gzip"));
    let r = get(&gw, path, &accept("gzip"));
    assert_eq!(r.header("cache-status"), Some(HIT));
    assert_eq!((r.header("content-encoding"), r.body.len()), (None, 100));

    // The upstream's own Vary still splits objects; Accept-Encoding does
    // not.
    let before = up.requests_seen();
    let path = "/cc/vary?size=4096&header=cache-control:max-age=60&header=vary:Origin";
    let a = [("Origin", "https://a.example"), ("Accept-Encoding", "gzip")];
    assert_eq!(get(&gw, path, &a).header("cache-status"), Some(STORED));
    let a_br = [("Origin", "https://a.example"), ("Accept-Encoding", "br")];
    let r = get(&gw, path, &a_br);
    assert_coded_hit_vary(&r, "br", &body);
    let b = [("Origin", "https://b.example"), ("Accept-Encoding", "br")];
    assert_eq!(get(&gw, path, &b).header("cache-status"), Some(STORED));
    assert_eq!(up.requests_seen(), before + 2);
}

/// [`assert_coded_hit`] for an answer whose upstream said `Vary: Origin`.
fn assert_coded_hit_vary(r: &Response, coding: &str, want: &[u8]) {
    assert_eq!(r.header("cache-status"), Some(HIT), "{:?}", r.headers);
    assert_eq!(r.header("content-encoding"), Some(coding));
    assert_eq!(r.header_all("vary"), ["Origin, Accept-Encoding"]);
    assert_eq!(decode(coding, &r.body), want);
}
