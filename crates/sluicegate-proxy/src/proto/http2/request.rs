//! An HTTP/2 request's head written as the HTTP/1.1 head the codec reads,
//! so that it is parsed, checked and routed by the same code as any other:
//! `:method` and `:path` make the request line, `:authority` the `Host`,
//! the fields follow as received (`cookie` fields joined, as RFC 9113
//! 8.2.3 says for a hop to HTTP/1.1), and a body without a length is
//! framed as chunked.

use http::request::Parts;
use http::Method;

/// Where a stream's request body is when its head is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyAt {
    /// The client's HEADERS ended the stream: no body.
    None,
    /// All of it arrived with the head: this many bytes, given with their
    /// length right after the head (so the request can be sent again).
    Whole(u64),
    /// It is still coming.
    Streams,
}

/// Writes the head of `req` into `out`, its body framed as `body` says.
/// Returns whether the body is given chunked (still coming, no length).
///
/// The fields' bytes were checked by the HTTP/2 decoder (no CR, LF or NUL
/// in a value, lowercase token names, no connection-specific field, `te`
/// only `trailers`), so the text written is a well-formed head.
pub(crate) fn write_head(req: &Parts, body: BodyAt, out: &mut Vec<u8>) -> bool {
    let authority = req.uri.authority().map(|a| a.as_str());
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    if req.method == Method::CONNECT {
        out.extend_from_slice(authority.unwrap_or("").as_bytes());
    } else {
        let target = req.uri.path_and_query().map_or("/", |p| p.as_str());
        out.extend_from_slice(if target.is_empty() { "/" } else { target }.as_bytes());
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(a) = authority {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let mut length = false;
    let mut cookies = 0;
    for (name, value) in req.headers.iter() {
        if name == http::header::COOKIE {
            cookies += 1;
            continue;
        }
        if name == http::header::HOST {
            // The same authority twice says nothing new; a different one
            // is written out, and the codec refuses the two hosts (400),
            // as RFC 9113 8.3.1 says a server should.
            if authority.is_some_and(|a| a.as_bytes().eq_ignore_ascii_case(value.as_bytes())) {
                continue;
            }
        }
        if name == http::header::CONTENT_LENGTH {
            if matches!(body, BodyAt::Whole(_)) {
                // Written below, from what arrived (which the framing
                // layer checked against it).
                continue;
            }
            length = true;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if cookies > 0 {
        out.extend_from_slice(b"cookie: ");
        for (i, v) in req.headers.get_all(http::header::COOKIE).iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b"; ");
            }
            out.extend_from_slice(v.as_bytes());
        }
        out.extend_from_slice(b"\r\n");
    }
    if let BodyAt::Whole(n) = body {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let chunked = body == BodyAt::Streams && !length;
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
    chunked
}

/// Writes an extended CONNECT (RFC 8441) for `protocol` (`websocket`)
/// as the HTTP/1.1 upgrade request it stands for: `GET` of its `:path`,
/// `Connection: upgrade`, `Upgrade: websocket`, and a `Sec-WebSocket-Key`
/// of its own (`key`: an HTTP/2 client sends none); the other fields as
/// received. No body framing: the stream's DATA is the tunnel's.
pub(crate) fn write_connect_head(req: &Parts, protocol: &str, key: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(b"GET ");
    let target = req.uri.path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(if target.is_empty() { "/" } else { target }.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    if let Some(a) = req.uri.authority() {
        out.extend_from_slice(b"host: ");
        out.extend_from_slice(a.as_str().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"connection: upgrade\r\nupgrade: ");
    out.extend_from_slice(protocol.as_bytes());
    out.extend_from_slice(b"\r\nsec-websocket-key: ");
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in req.headers.iter() {
        if name == http::header::HOST
            || name == http::header::CONTENT_LENGTH
            || name == http::header::SEC_WEBSOCKET_KEY
        {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(req: http::Request<()>, end: bool) -> (String, bool) {
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        let body = if end { BodyAt::None } else { BodyAt::Streams };
        let chunked = write_head(&parts, body, &mut out);
        (String::from_utf8(out).unwrap(), chunked)
    }

    #[test]
    fn pseudo_fields_make_the_request_line_and_host() {
        let req = http::Request::get("https://api.example:8443/v1/items?x=1")
            .header("accept", "*/*")
            .header("cookie", "a=1")
            .header("x-one", "1")
            .header("cookie", "b=2")
            .body(())
            .unwrap();
        let (text, chunked) = head(req, true);
        assert_eq!(
            text,
            "GET /v1/items?x=1 HTTP/1.1\r\nhost: api.example:8443\r\naccept: */*\r\n\
             x-one: 1\r\ncookie: a=1; b=2\r\n\r\n"
        );
        assert!(!chunked);
    }

    #[test]
    fn a_body_without_a_length_is_chunked_and_one_with_keeps_it() {
        let req = http::Request::post("http://h/up").body(()).unwrap();
        let (text, chunked) = head(req, false);
        assert!(chunked);
        assert!(
            text.ends_with("transfer-encoding: chunked\r\n\r\n"),
            "{text}"
        );
        let req = http::Request::post("http://h/up")
            .header("content-length", "5")
            .body(())
            .unwrap();
        let (text, chunked) = head(req, false);
        assert!(!chunked);
        assert!(text.contains("content-length: 5\r\n"), "{text}");
    }

    #[test]
    fn an_extended_connect_becomes_an_upgrade() {
        let req = http::Request::connect("https://chat.example/socket?room=1")
            .header("sec-websocket-version", "13")
            .header("sec-websocket-protocol", "chat")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        write_connect_head(&parts, "websocket", "dGhlIHNhbXBsZSBub25jZQ==", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "GET /socket?room=1 HTTP/1.1\r\nhost: chat.example\r\nconnection: upgrade\r\n\
             upgrade: websocket\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             sec-websocket-version: 13\r\nsec-websocket-protocol: chat\r\n\r\n"
        );
        let mut head = crate::proto::head::RequestHead::default();
        let parsed = crate::proto::codec::parse_request(text.as_bytes(), 16384, &mut head);
        assert!(parsed.is_ok());
        assert!(head.upgrade.is_some());
    }

    #[test]
    fn a_body_that_came_whole_gets_its_length() {
        let req = http::Request::post("http://h/up")
            .header("content-length", "5")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut out = Vec::new();
        assert!(!write_head(&parts, BodyAt::Whole(5), &mut out));
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("content-length: 5\r\n").count(), 1, "{text}");
        assert!(!text.contains("transfer-encoding"), "{text}");
    }

    #[test]
    fn a_host_field_that_differs_from_the_authority_is_kept_for_the_codec_to_refuse() {
        let req = http::Request::get("http://a.example/")
            .header("host", "A.example")
            .body(())
            .unwrap();
        assert_eq!(head(req, true).0.matches("host:").count(), 1);
        let req = http::Request::get("http://a.example/")
            .header("host", "b.example")
            .body(())
            .unwrap();
        let (text, _) = head(req, true);
        let mut parsed = crate::proto::head::RequestHead::default();
        assert!(crate::proto::codec::parse_request(text.as_bytes(), 16384, &mut parsed).is_err());
    }
}
