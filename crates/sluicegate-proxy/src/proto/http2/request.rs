//! An HTTP/2 request's HEADERS as the protocol-neutral head
//! ([`RequestHead`]) the lifecycle routes, filters and forwards: the
//! pseudo-fields and fields are laid out, names and values only, in the
//! request's buffer, and the head names them by range. No HTTP/1.1 text
//! is written or parsed. The checks the HTTP/1.1 codec makes of a head
//! are made here for what HTTP/2 leaves open (one authority, a valid
//! `Content-Length`, `Expect`), and the fields the gateway never forwards
//! as received are marked as the codec marks them; `cookie` fields are
//! joined into one, as RFC 9113 8.2.3 allows (and an HTTP/1.1 hop needs).

use std::ops::Range;

use http::request::Parts;
use http::Method;

use crate::proto::bytes::{trim, valid_host};
use crate::proto::codec::{
    classify, is_hop_by_hop, parse_content_length, BodyKind, HeadError, Known, RequestFraming,
};
use crate::proto::head::{Arena, HeaderRef, RequestHead};

/// Where a stream's request body is when its head is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyAt {
    /// The client's HEADERS ended the stream: no body.
    None,
    /// All of it arrived with the head: this many bytes, which the caller
    /// puts right after the head (so the request can be sent again).
    Whole(u64),
    /// It is still coming.
    Streams,
}

/// Appends `bytes` to the head's buffer: where they are.
fn put(buf: &mut impl Arena, bytes: &[u8]) -> Range<usize> {
    buf.put_part(bytes)
}

/// Lays out the head of `req` in `buf` (cleared first) and describes it in
/// `head`; returns its framing (`len`: the head's bytes in `buf`), its
/// body as `body` says. `upgrade`: an extended CONNECT's protocol and the
/// `Sec-WebSocket-Key` made for it: the request is the HTTP/1.1 upgrade it
/// stands for (a `GET` of its `:path`, asking to switch to `protocol`).
pub(crate) fn fill_head(
    req: &Parts,
    body: BodyAt,
    upgrade: Option<(&str, &str)>,
    buf: &mut impl Arena,
    head: &mut RequestHead,
) -> Result<RequestFraming, HeadError> {
    let base = buf.filled_len();
    debug_assert_eq!(base, 0, "a head is laid out in an empty buffer");
    head.headers.clear();
    head.xff.clear();
    head.minor = 1;
    head.lines = false;
    head.upgrade = None;
    let authority = req.uri.authority().map(|a| a.as_str().as_bytes());
    head.method = put(
        buf,
        if upgrade.is_some() {
            b"GET"
        } else {
            req.method.as_str().as_bytes()
        },
    );
    head.target = if req.method == Method::CONNECT && upgrade.is_none() {
        // Authority form: refused by routing, as over HTTP/1.1.
        put(buf, authority.unwrap_or(b""))
    } else {
        let target = req.uri.path_and_query().map_or("/", |p| p.as_str());
        put(buf, if target.is_empty() { "/" } else { target }.as_bytes())
    };
    head.scheme = req.uri.scheme_str().map(|s| put(buf, s.as_bytes()));
    head.host = None;
    if let Some(a) = authority {
        if !valid_host(a) {
            return Err(HeadError::Bad("invalid :authority"));
        }
        let value = put(buf, a);
        let name = put(buf, b"host");
        head.host = Some(value.clone());
        head.headers.push(HeaderRef {
            name,
            value,
            skip: false,
        });
    }
    if let Some((protocol, key)) = upgrade {
        head.upgrade = Some(put(buf, protocol.as_bytes()));
        let name = put(buf, b"sec-websocket-key");
        let value = put(buf, key.as_bytes());
        head.headers.push(HeaderRef {
            name,
            value,
            skip: false,
        });
    }
    let mut length: Option<u64> = None;
    let mut cookies = 0;
    for (name, value) in req.headers.iter() {
        if name == http::header::COOKIE {
            cookies += 1;
            continue;
        }
        let (name, value) = (name.as_str().as_bytes(), value.as_bytes());
        let kind = classify(name);
        let mut skip = is_hop_by_hop(kind);
        match kind {
            Known::Host => {
                // The same authority twice says nothing new; another one
                // is refused (RFC 9113 8.3.1), as two hosts are over
                // HTTP/1.1.
                match (authority, &head.host) {
                    (Some(a), _) if a.eq_ignore_ascii_case(value) => continue,
                    (Some(_), _) | (None, Some(_)) => {
                        return Err(HeadError::Bad("Host differs from :authority"))
                    }
                    (None, None) if !valid_host(trim(value)) => {
                        return Err(HeadError::Bad("invalid Host header"))
                    }
                    (None, None) => {}
                }
            }
            Known::ContentLength => {
                let n =
                    parse_content_length(value).ok_or(HeadError::Bad("invalid Content-Length"))?;
                if length.is_some_and(|prev| prev != n) {
                    return Err(HeadError::Bad("conflicting Content-Length headers"));
                }
                length = Some(n);
            }
            Known::Expect => {
                if !trim(value).eq_ignore_ascii_case(b"100-continue") {
                    return Err(HeadError::ExpectationFailed);
                }
                skip = true;
            }
            Known::XForwardedFor | Known::XForwardedOther => skip = true,
            _ => {}
        }
        if upgrade.is_some() && (kind == Known::ContentLength || name == b"sec-websocket-key") {
            continue;
        }
        let name = put(buf, name);
        let value = put(buf, value);
        if kind == Known::XForwardedFor {
            head.xff.push(value.clone());
        }
        if kind == Known::Host {
            head.host = Some(value.clone());
        }
        head.headers.push(HeaderRef { name, value, skip });
    }
    if cookies > 0 {
        let name = put(buf, b"cookie");
        let start = buf.filled_len();
        for (i, v) in req.headers.get_all(http::header::COOKIE).iter().enumerate() {
            if i > 0 {
                buf.append(b"; ");
            }
            buf.append(v.as_bytes());
        }
        head.headers.push(HeaderRef {
            name,
            value: start..buf.filled_len(),
            skip: false,
        });
    }
    let body = match body {
        _ if upgrade.is_some() => BodyKind::None,
        BodyAt::None => BodyKind::None,
        BodyAt::Whole(0) => BodyKind::None,
        BodyAt::Whole(n) => BodyKind::Length(n),
        BodyAt::Streams => match length {
            Some(0) => BodyKind::None,
            Some(n) => BodyKind::Length(n),
            None => BodyKind::Stream,
        },
    };
    Ok(RequestFraming {
        len: buf.filled_len(),
        body,
        close: false,
        expect_continue: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of `req` laid out; its fields as `name: value` lines,
    /// skipped ones left out.
    fn fill(req: http::Request<()>, body: BodyAt) -> (String, RequestHead, RequestFraming) {
        let (parts, ()) = req.into_parts();
        let mut buf = Vec::new();
        let mut head = RequestHead::default();
        let framing = fill_head(&parts, body, None, &mut buf, &mut head).unwrap();
        let raw = &buf[..];
        let s = |r: &Range<usize>| String::from_utf8_lossy(&raw[r.clone()]).into_owned();
        let mut text = format!("{} {}\n", s(&head.method), s(&head.target));
        for h in head.headers.iter().filter(|h| !h.skip) {
            text += &format!("{}: {}\n", s(&h.name), s(&h.value));
        }
        (text, head, framing)
    }

    #[test]
    fn pseudo_fields_give_method_target_scheme_and_authority() {
        let req = http::Request::get("https://api.example:8443/v1/items?x=1")
            .header("accept", "*/*")
            .header("cookie", "a=1")
            .header("x-one", "1")
            .header("cookie", "b=2")
            .body(())
            .unwrap();
        let (text, head, framing) = fill(req, BodyAt::None);
        assert_eq!(
            text,
            "GET /v1/items?x=1\nhost: api.example:8443\naccept: */*\nx-one: 1\ncookie: a=1; b=2\n"
        );
        assert!(!head.lines);
        assert!(head.scheme.is_some());
        assert_eq!(framing.body, BodyKind::None);
        assert_eq!(framing.len, {
            let mut b = Vec::new();
            let (p, ()) = http::Request::get("https://api.example:8443/v1/items?x=1")
                .header("accept", "*/*")
                .header("cookie", "a=1")
                .header("x-one", "1")
                .header("cookie", "b=2")
                .body(())
                .unwrap()
                .into_parts();
            fill_head(&p, BodyAt::None, None, &mut b, &mut RequestHead::default()).unwrap();
            b.len()
        });
    }

    #[test]
    fn a_body_without_a_length_streams_and_one_with_keeps_it() {
        let req = http::Request::post("http://h/up").body(()).unwrap();
        assert_eq!(fill(req, BodyAt::Streams).2.body, BodyKind::Stream);
        let req = http::Request::post("http://h/up")
            .header("content-length", "5")
            .body(())
            .unwrap();
        let (text, _, framing) = fill(req, BodyAt::Streams);
        assert_eq!(framing.body, BodyKind::Length(5));
        // The length goes upstream from the framing, not as received.
        assert!(!text.contains("content-length"), "{text}");
        let req = http::Request::post("http://h/up")
            .header("content-length", "5")
            .body(())
            .unwrap();
        assert_eq!(fill(req, BodyAt::Whole(5)).2.body, BodyKind::Length(5));
    }

    #[test]
    fn an_extended_connect_becomes_an_upgrade() {
        let req = http::Request::connect("https://chat.example/socket?room=1")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut buf = Vec::new();
        let mut head = RequestHead::default();
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let framing = fill_head(
            &parts,
            BodyAt::Streams,
            Some(("websocket", key)),
            &mut buf,
            &mut head,
        )
        .unwrap();
        let raw = &buf[..];
        assert_eq!(&raw[head.method.clone()], b"GET");
        assert_eq!(&raw[head.target.clone()], b"/socket?room=1");
        assert_eq!(&raw[head.upgrade.clone().unwrap()], b"websocket");
        assert_eq!(framing.body, BodyKind::None);
        let names: Vec<_> = head.headers.iter().map(|h| &raw[h.name.clone()]).collect();
        assert_eq!(
            names,
            [
                &b"host"[..],
                b"sec-websocket-key",
                b"sec-websocket-version",
                b"sec-websocket-protocol"
            ]
        );
    }

    #[test]
    fn a_host_field_that_differs_from_the_authority_is_refused() {
        let req = http::Request::get("http://a.example/")
            .header("host", "A.example")
            .body(())
            .unwrap();
        assert_eq!(fill(req, BodyAt::None).0.matches("host:").count(), 1);
        let (parts, ()) = http::Request::get("http://a.example/")
            .header("host", "b.example")
            .body(())
            .unwrap()
            .into_parts();
        let mut buf = Vec::new();
        let r = fill_head(
            &parts,
            BodyAt::None,
            None,
            &mut buf,
            &mut RequestHead::default(),
        );
        assert!(matches!(r, Err(HeadError::Bad(_))));
    }

    #[test]
    fn forwarded_and_asserted_fields_are_not_passed_on_as_received() {
        let req = http::Request::get("http://a.example/")
            .header("x-forwarded-for", "10.0.0.1")
            .header("x-forwarded-proto", "https")
            .header("x-app-id", "admin")
            .header("te", "trailers")
            .header("x-kept", "1")
            .body(())
            .unwrap();
        let (text, head, _) = fill(req, BodyAt::None);
        assert_eq!(text, "GET /\nhost: a.example\nx-kept: 1\n");
        assert_eq!(head.xff.len(), 1);
    }

    #[test]
    fn a_bad_length_or_expectation_is_refused() {
        for (name, value) in [("content-length", "x"), ("expect", "nothing")] {
            let (parts, ()) = http::Request::post("http://a.example/")
                .header(name, value)
                .body(())
                .unwrap()
                .into_parts();
            let mut buf = Vec::new();
            let r = fill_head(
                &parts,
                BodyAt::Streams,
                None,
                &mut buf,
                &mut RequestHead::default(),
            );
            assert!(r.is_err(), "{name}: {value}");
        }
    }
}
