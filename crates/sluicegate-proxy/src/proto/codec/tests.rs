//! The HTTP/1.1 codec's unit tests: framing rules, header loops.

use super::*;
use crate::proto::head::{RequestHead, ResponseHead};

fn req(raw: &[u8]) -> Result<(RequestHead, RequestFraming), HeadError> {
    let mut head = RequestHead::default();
    match parse_request(raw, 16384, &mut head)? {
        Parsed::Complete(f) => Ok((head, f)),
        Parsed::Partial => Err(HeadError::Bad("partial")),
    }
}

#[test]
fn bare_lf_check_without_scan_agrees_with_the_scan() {
    // Every combination of CRLF / LF for the line ends of heads with
    // leading empty lines, 0 to 3 headers (some with trailing spaces),
    // and the final blank line: refused exactly when the scan finds a
    // bare LF.
    let lines: &[&[u8]] = &[b"Host: x", b"A: 1  ", b"B:\t2"];
    for leading in 0..=2usize {
        for n in 0..=lines.len() {
            let ends = leading + n + 2; // leading, request line, headers, blank
            for mask in 0u32..(1 << ends) {
                let eol = |i: usize| -> &[u8] {
                    if mask & (1 << i) != 0 {
                        b"\n"
                    } else {
                        b"\r\n"
                    }
                };
                let mut raw = Vec::new();
                let mut e = 0;
                for _ in 0..leading {
                    raw.extend_from_slice(eol(e));
                    e += 1;
                }
                raw.extend_from_slice(b"GET /p HTTP/1.1");
                raw.extend_from_slice(eol(e));
                e += 1;
                for l in &lines[..n] {
                    raw.extend_from_slice(l);
                    raw.extend_from_slice(eol(e));
                    e += 1;
                }
                raw.extend_from_slice(eol(e));
                let scan = has_bare_lf(&raw);
                let mut head = RequestHead::default();
                match parse_request(&raw, 16384, &mut head) {
                    Err(HeadError::Bad("bare LF in request head")) => {
                        assert!(scan, "{:?}", String::from_utf8_lossy(&raw))
                    }
                    // Without Host an HTTP/1.1 head is refused anyway.
                    Err(HeadError::Bad(_)) if n == 0 && !scan => {}
                    Ok(Parsed::Complete(_)) => {
                        assert!(!scan, "{:?}", String::from_utf8_lossy(&raw))
                    }
                    other => panic!(
                        "{:?}: {:?}",
                        String::from_utf8_lossy(&raw),
                        other.map(|_| ())
                    ),
                }
            }
        }
    }
}

#[test]
fn header_lines_copied_in_runs_or_rebuilt() {
    let raw = b"GET / HTTP/1.1\r\nHost: x\r\nA:1  \r\nConnection: close\r\nB: 2\r\nC: 3\r\n\r\n";
    let (h, f) = req(raw).unwrap();
    let names = |keep: &[&str], crlf: bool| {
        let mut out = Vec::new();
        append_header_lines(&mut out, raw, &h.headers, f.len, crlf, |r| {
            keep.iter()
                .any(|k| raw[r.name.clone()].eq_ignore_ascii_case(k.as_bytes()))
        });
        String::from_utf8(out).unwrap()
    };
    // Runs keep the bytes as received (including "A:1  ").
    assert_eq!(
        names(&["host", "a", "b", "c"], true),
        "Host: x\r\nA:1  \r\nB: 2\r\nC: 3\r\n"
    );
    assert_eq!(names(&["a", "c"], true), "A:1  \r\nC: 3\r\n");
    assert_eq!(names(&[], true), "");
    assert_eq!(names(&["c"], true), "C: 3\r\n");
    // Rebuilt lines are normalised.
    assert_eq!(names(&["a", "c"], false), "A: 1\r\nC: 3\r\n");
}

#[test]
fn response_head_line_ends() {
    let mut head = ResponseHead::default();
    let ok = b"HTTP/1.1 200 OK\r\nA: 1\r\nContent-Length: 0\r\n\r\n";
    assert!(matches!(
        parse_response(ok, 4096, false, &mut head),
        Ok(Parsed::Complete(ResponseFraming { crlf: true, .. }))
    ));
    let lf = b"HTTP/1.1 200 OK\nA: 1\r\nContent-Length: 0\n\n";
    assert!(matches!(
        parse_response(lf, 4096, false, &mut head),
        Ok(Parsed::Complete(ResponseFraming { crlf: false, .. }))
    ));
}

#[test]
fn simple_get() {
    let raw = b"GET /a?b HTTP/1.1\r\nHost: x\r\nX-Other: 1\r\n\r\nrest";
    let (h, f) = req(raw).unwrap();
    assert_eq!(&raw[h.method.clone()], b"GET");
    assert_eq!(&raw[h.target.clone()], b"/a?b");
    assert_eq!(f.len, raw.len() - 4);
    assert_eq!(f.body, BodyKind::None);
    assert!(!f.close);
    assert!(!f.expect_continue);
    assert_eq!(&raw[h.host.clone().unwrap()], b"x");
}

#[test]
fn framing_is_strict() {
    let bad: &[&[u8]] = &[
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Name: x\r\nHost: a\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n",
        ];
    for raw in bad {
        let r = req(raw);
        assert!(
            matches!(r, Err(HeadError::Bad(_))),
            "{:?} -> {:?}",
            String::from_utf8_lossy(raw),
            r.map(|(_, f)| f)
        );
    }
    let r = req(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
    assert!(matches!(r, Err(HeadError::NotImplemented(_))));
}

#[test]
fn body_kinds() {
    let body = |raw: &[u8]| req(raw).unwrap().1.body;
    assert_eq!(
        body(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n\r\n"),
        BodyKind::Length(12)
    );
    assert_eq!(
        body(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 3\r\n\r\n"),
        BodyKind::Length(3)
    );
    assert_eq!(
        body(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n"),
        BodyKind::Chunked
    );
}

#[test]
fn connection_and_hop_by_hop() {
    let raw = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: 5\r\nX-Keep: 2\r\n\r\n";
    let (h, f) = req(raw).unwrap();
    assert!(f.close);
    let kept: Vec<&[u8]> = h
        .headers
        .iter()
        .filter(|x| !x.skip)
        .map(|x| &raw[x.name.clone()])
        .collect();
    assert_eq!(kept, vec![&b"Host"[..], &b"X-Keep"[..]]);
    assert!(req(b"GET / HTTP/1.0\r\n\r\n").unwrap().1.close);
    assert!(
        !req(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap()
            .1
            .close
    );
}

#[test]
fn too_large_and_partial() {
    let mut head = RequestHead::default();
    let raw = b"GET / HTTP/1.1\r\nHost: x\r\n";
    assert!(matches!(
        parse_request(raw, 16384, &mut head),
        Ok(Parsed::Partial)
    ));
    let big = [b'a'; 2000];
    let mut raw = b"GET / HTTP/1.1\r\nX: ".to_vec();
    raw.extend_from_slice(&big);
    assert_eq!(
        parse_request(&raw, 1024, &mut head).err(),
        Some(HeadError::TooLarge)
    );
    let mut many = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..200 {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(
        parse_request(&many, 1 << 20, &mut head).err(),
        Some(HeadError::TooLarge)
    );
}

#[test]
fn responses() {
    let res = |raw: &[u8], head_request: bool| {
        let mut head = ResponseHead::default();
        match parse_response(raw, 16384, head_request, &mut head) {
            Ok(Parsed::Complete(f)) => (f.body, f.close),
            other => panic!("{:?}", other.map(|_| ())),
        }
    };
    let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok";
    assert_eq!(res(raw, false), (BodyKind::Length(2), false));
    assert_eq!(res(raw, true).0, BodyKind::None);
    let raw = b"HTTP/1.1 200 OK\r\n\r\n";
    assert_eq!(res(raw, false), (BodyKind::UntilClose, true));
    let raw = b"HTTP/1.1 204 No Content\r\n\r\n";
    assert_eq!(res(raw, false).0, BodyKind::None);
    let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n";
    assert_eq!(res(raw, false), (BodyKind::Chunked, true));
    let mut head = ResponseHead::default();
    assert!(parse_response(b"HTTP/1.1 abc\r\n\r\n", 16384, false, &mut head).is_err());
    assert!(parse_response(b"garbage\r\n\r\n", 16384, false, &mut head).is_err());
}
