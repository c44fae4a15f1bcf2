//! An HTTP/2 upstream's response HEADERS as the protocol-neutral head
//! ([`ResponseHead`]) forwarding relays: the fields laid out, names and
//! values only, in the response's buffer, marked as the HTTP/1.1 codec
//! marks a response's (the length is the gateway's to write from the
//! framing), and the framing decided from the status, the length and
//! whether the stream ended with its head (a gRPC answer that did not
//! end runs to its trailers, length or not). And the other way, a
//! response head's fields as a client stream's HTTP/2 fields
//! ([`client_fields`]). No HTTP/1.1 text.

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

use super::exchange::connection_specific;
use crate::proto::codec::{
    classify, is_hop_by_hop, parse_content_length, BodyKind, Known, ResponseFraming,
};
use crate::proto::head::{Arena, HeaderRef, ResponseHead};

/// Lays out `parts` in `buf` (empty) and describes it in `head`; `end`:
/// the stream ended with the head; `is_head`: the request was HEAD.
pub(crate) fn fill_response_head(
    parts: &http::response::Parts,
    end: bool,
    is_head: bool,
    buf: &mut impl Arena,
    head: &mut ResponseHead,
) -> ResponseFraming {
    debug_assert_eq!(buf.filled_len(), 0, "a head is laid out in an empty buffer");
    let status = parts.status.as_u16();
    head.status = status;
    head.minor = 1;
    head.lines = false;
    head.upgrade = None;
    head.headers.clear();
    let mut length = None;
    let mut grpc = false;
    for (name, value) in parts.headers.iter() {
        let (name, value) = (name.as_str().as_bytes(), value.as_bytes());
        let kind = classify(name);
        if kind == Known::ContentLength {
            length = parse_content_length(value);
        } else if name == b"content-type" {
            grpc = value.starts_with(b"application/grpc");
        }
        head.headers.push(HeaderRef {
            name: buf.put_part(name),
            value: buf.put_part(value),
            skip: is_hop_by_hop(kind),
        });
    }
    let bodiless = is_head || status < 200 || status == 204 || status == 304;
    let body = match (bodiless, length, end) {
        (true, _, _) => BodyKind::None,
        // A gRPC answer's status comes in its trailers, after the data,
        // whatever length it gave: relayed as a stream to its end.
        (false, Some(_), false) if grpc => BodyKind::Stream,
        (false, Some(n), _) => BodyKind::Length(n),
        (false, None, true) => BodyKind::Length(0),
        (false, None, false) => BodyKind::Stream,
    };
    ResponseFraming {
        len: buf.filled_len(),
        body,
        close: false,
        crlf: false,
    }
}

/// Appends `name: value` to the fields of a client stream's HEADERS,
/// unless it names the connection (HTTP/2 carries no such field) or is
/// not a valid field.
pub(crate) fn append_field(map: &mut HeaderMap, name: &[u8], value: &[u8]) {
    if connection_specific(name) {
        return;
    }
    if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
        map.append(n, v);
    }
}

/// The fields of a response head laid out in `raw` (`len`: the head's
/// bytes there) that `keep` keeps, as the header map of a client stream's
/// HEADERS: never those that name the connection, which HTTP/2 does not
/// carry. The values are slices of one copy of the head (one allocation
/// for all of them); `more`: room for the fields the gateway adds.
pub(crate) fn client_fields(
    raw: &[u8],
    len: usize,
    fields: &[HeaderRef],
    more: usize,
    keep: impl Fn(&HeaderRef) -> bool,
) -> HeaderMap {
    let shared = bytes::Bytes::copy_from_slice(&raw[..len]);
    let mut map = HeaderMap::with_capacity(fields.len() + more);
    for h in fields.iter().filter(|h| keep(h)) {
        let name = &raw[h.name.clone()];
        if connection_specific(name) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name),
            HeaderValue::from_maybe_shared(shared.slice(h.value.clone())),
        ) {
            map.append(n, v);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(
        res: http::Response<()>,
        end: bool,
        is_head: bool,
    ) -> (Vec<u8>, ResponseHead, ResponseFraming) {
        let (parts, ()) = res.into_parts();
        let (mut buf, mut head) = (Vec::new(), ResponseHead::default());
        let framing = fill_response_head(&parts, end, is_head, &mut buf, &mut head);
        (buf, head, framing)
    }

    #[test]
    fn fields_are_laid_out_and_the_length_is_the_framings() {
        let res = http::Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .header("content-length", "12")
            .body(())
            .unwrap();
        let (buf, head, framing) = fill(res, false, false);
        assert_eq!(framing.body, BodyKind::Length(12));
        assert_eq!(framing.len, buf.len());
        assert!(!head.lines && !framing.crlf);
        let kept: Vec<_> = head
            .headers
            .iter()
            .filter(|h| !h.skip)
            .map(|h| (&buf[h.name.clone()], &buf[h.value.clone()]))
            .collect();
        assert_eq!(kept, [(&b"content-type"[..], &b"application/json"[..])]);
    }

    #[test]
    fn the_body_follows_the_status_the_length_and_the_end() {
        let res = |status: u16| http::Response::builder().status(status).body(()).unwrap();
        assert_eq!(fill(res(200), false, false).2.body, BodyKind::Stream);
        assert_eq!(fill(res(200), true, false).2.body, BodyKind::Length(0));
        assert_eq!(fill(res(204), false, false).2.body, BodyKind::None);
        assert_eq!(fill(res(304), true, false).2.body, BodyKind::None);
        assert_eq!(fill(res(200), true, true).2.body, BodyKind::None);
        // A gRPC answer with a length still ends with its trailers.
        let grpc = http::Response::builder()
            .status(200)
            .header("content-type", "application/grpc")
            .header("content-length", "29")
            .body(())
            .unwrap();
        assert_eq!(fill(grpc, false, false).2.body, BodyKind::Stream);
    }
}
