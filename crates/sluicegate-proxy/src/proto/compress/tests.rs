//! Tests of negotiation, type matching, the changed fields, and the
//! codings (each decoded by its own crate's decoder).

use std::io::Read;

use super::*;
use Encoding::{Br, Gzip, Zstd};

fn pick(header: &str) -> Option<Encoding> {
    negotiate([header.as_bytes()], &Encoding::ALL)
}

#[test]
fn the_client_s_preference_wins_then_the_route_s_order() {
    assert_eq!(pick("gzip"), Some(Gzip));
    assert_eq!(pick("gzip, br"), Some(Br));
    assert_eq!(pick("gzip, br, zstd"), Some(Zstd));
    assert_eq!(pick("gzip;q=1, br;q=0.5"), Some(Gzip));
    assert_eq!(pick("br;q=0.8, gzip;q=0.9, zstd;q=0.1"), Some(Gzip));
    assert_eq!(pick("GZIP , Br ;Q=0.2"), Some(Gzip));
    assert_eq!(pick("x-gzip"), Some(Gzip));
    // The route's order breaks ties.
    assert_eq!(negotiate([b"gzip, br".as_slice()], &[Gzip, Br]), Some(Gzip));
    assert_eq!(negotiate([b"gzip, br".as_slice()], &[Br, Gzip]), Some(Br));
    // Split over several lines.
    assert_eq!(
        negotiate([b"gzip".as_slice(), b"br".as_slice()], &[Gzip, Br]),
        Some(Gzip)
    );
}

#[test]
fn q_zero_refuses_and_unlisted_is_not_acceptable() {
    assert_eq!(pick("gzip;q=0"), None);
    assert_eq!(pick("br;q=0, gzip"), Some(Gzip));
    assert_eq!(pick("zstd;q=0.000, br;q=0.0, gzip;q=0.001"), Some(Gzip));
    assert_eq!(pick("deflate"), None);
    assert_eq!(pick("identity"), None);
    assert_eq!(pick(""), None);
    assert_eq!(negotiate(std::iter::empty::<&[u8]>(), &Encoding::ALL), None);
    // Not offered by the route.
    assert_eq!(negotiate([b"br".as_slice()], &[Gzip]), None);
    // A malformed quality is not acceptable.
    assert_eq!(pick("gzip;q=2"), None);
    assert_eq!(pick("gzip;q=abc"), None);
    assert_eq!(pick("gzip;q=0.1234"), None);
}

#[test]
fn a_star_stands_for_what_is_not_listed() {
    assert_eq!(pick("*"), Some(Zstd));
    assert_eq!(pick("*;q=0"), None);
    assert_eq!(pick("zstd;q=0, *"), Some(Br));
    assert_eq!(pick("*;q=0.5, gzip"), Some(Gzip));
    assert_eq!(pick("*;q=0, gzip;q=0.3"), Some(Gzip));
    assert_eq!(pick("identity;q=0, *;q=0"), None);
    assert_eq!(pick("identity;q=0, gzip"), Some(Gzip));
}

#[test]
fn types_match_without_parameters_and_case() {
    let rules: Vec<TypeRule> = sluicegate_config::Compress::DEFAULT_TYPES
        .iter()
        .map(|t| TypeRule::new(t).unwrap())
        .collect();
    let m = |t: &str| rules.iter().any(|r| r.matches(t.as_bytes()));
    assert!(m("text/html"));
    assert!(m("Text/Event-Stream"));
    assert!(m("application/json; charset=utf-8"));
    assert!(m(" APPLICATION/JSON "));
    assert!(m("application/problem+json"));
    assert!(m("application/javascript"));
    assert!(m("application/xml"));
    assert!(m("image/svg+xml"));
    assert!(!m("image/png"));
    assert!(!m("application/octet-stream"));
    assert!(!m("application/jsonx"));
    assert!(!m("application/+json"));
    assert!(!m("text"));
    assert!(!m("text/"));
    assert!(!m(""));
    assert!(TypeRule::new("*/*").is_none());
    assert!(TypeRule::new("text").is_none());
    assert!(TypeRule::new("application/*json").is_none());
    assert!(is_grpc(b"application/grpc"));
    assert!(is_grpc(b"application/grpc-web+proto"));
    assert!(!is_grpc(b"application/json"));
}

#[test]
fn no_transform_is_found_among_directives() {
    assert!(no_transform(b"no-transform"));
    assert!(no_transform(b"public, No-Transform, max-age=60"));
    assert!(!no_transform(b"no-store"));
    assert!(!no_transform(b"no-transformer"));
}

#[test]
fn a_strong_etag_becomes_weak() {
    let w = |e: &str| {
        let mut out = Vec::new();
        weak_etag(e.as_bytes(), &mut out);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(w("\"abc\""), "W/\"abc\"");
    assert_eq!(w("W/\"abc\""), "W/\"abc\"");
    assert_eq!(w(" \"x\" "), "W/\"x\"");
}

#[test]
fn vary_is_merged() {
    let v = |vals: &[&str]| {
        let mut out = Vec::new();
        merge_vary(vals.iter().map(|v| v.as_bytes()), &mut out);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(v(&[]), "Accept-Encoding");
    assert_eq!(v(&["Origin"]), "Origin, Accept-Encoding");
    assert_eq!(
        v(&["Origin, Cookie", "X-A"]),
        "Origin, Cookie, X-A, Accept-Encoding"
    );
    assert_eq!(v(&["accept-encoding"]), "accept-encoding");
    assert_eq!(v(&["Origin,accept-Encoding"]), "Origin, accept-Encoding");
    assert_eq!(v(&["*"]), "*");
    assert_eq!(v(&[" , "]), "Accept-Encoding");
}

/// A body that compresses, with some variety.
fn sample(n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    let mut i = 0u64;
    while v.len() < n {
        v.extend_from_slice(
            format!("{{\"id\":{i},\"name\":\"item {}\"}},", i * 7919 % 1000).as_bytes(),
        );
        i += 1;
    }
    v.truncate(n);
    v
}

fn decode(coding: Encoding, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        Gzip => {
            flate2::read::GzDecoder::new(data)
                .read_to_end(&mut out)
                .unwrap();
        }
        Br => {
            brotli::Decompressor::new(data, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        Zstd => {
            out = zstd::stream::decode_all(data).unwrap();
        }
    }
    out
}

#[test]
fn every_coding_round_trips_whole_and_reset() {
    let body = sample(200_000);
    for coding in Encoding::ALL {
        for level in [1, 3] {
            let once = encode_all(coding, level, &body).unwrap();
            assert!(once.len() < body.len() / 3, "{coding:?} {}", once.len());
            assert_eq!(decode(coding, &once), body, "{coding:?}");
        }
        // A reset encoder makes a whole new stream.
        let mut e = Encoder::new(coding, 1).unwrap();
        let mut first = Vec::new();
        e.encode(b"partly", &mut first, Flush::Sync).unwrap();
        e.reset().unwrap();
        let mut out = Vec::new();
        e.encode(&body, &mut out, Flush::Finish).unwrap();
        assert_eq!(decode(coding, &out), body, "{coding:?} after reset");
        assert_eq!(decode(coding, &encode_all(coding, 1, b"").unwrap()), b"");
    }
}

/// A decoder of a stream still open: what it has after the bytes so far.
fn decode_so_far(coding: Encoding, data: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 1 << 16];
    let mut got = 0;
    match coding {
        Gzip => {
            let mut r = flate2::read::GzDecoder::new(data);
            while let Ok(n) = r.read(&mut out[got..]) {
                if n == 0 {
                    break;
                }
                got += n;
            }
        }
        Br => {
            let mut r = brotli::Decompressor::new(data, 4096);
            while let Ok(n) = r.read(&mut out[got..]) {
                if n == 0 {
                    break;
                }
                got += n;
            }
        }
        Zstd => {
            let mut r = zstd::stream::read::Decoder::new(data).unwrap();
            while let Ok(n) = r.read(&mut out[got..]) {
                if n == 0 {
                    break;
                }
                got += n;
            }
        }
    }
    out.truncate(got);
    out
}

#[test]
fn a_sync_flush_makes_everything_so_far_decodable() {
    for coding in Encoding::ALL {
        let mut e = Encoder::new(coding, 1).unwrap();
        let mut out = Vec::new();
        e.encode(b"data: one\n\n", &mut out, Flush::Sync).unwrap();
        assert_eq!(decode_so_far(coding, &out), b"data: one\n\n", "{coding:?}");
        e.encode(b"data: two\n\n", &mut out, Flush::None).unwrap();
        e.encode(b"", &mut out, Flush::Sync).unwrap();
        assert_eq!(
            decode_so_far(coding, &out),
            b"data: one\n\ndata: two\n\n",
            "{coding:?}"
        );
        e.encode(b"", &mut out, Flush::Finish).unwrap();
        assert_eq!(decode(coding, &out), b"data: one\n\ndata: two\n\n");
    }
}
