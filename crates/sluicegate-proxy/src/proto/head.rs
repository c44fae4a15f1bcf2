//! The protocol-neutral message model's heads, as routing, filters,
//! balancing, logging and the answer renderer see them: a request's
//! method, scheme, authority, target (path and query) and header fields;
//! a response's status and header fields. Each part is a byte range into
//! the buffer the head lives in: the receive buffer an HTTP/1.1 head was
//! parsed in (no copy), or the buffer an HTTP/2 HEADERS frame's fields
//! were laid out in (names and values only, no HTTP/1.1 syntax). Whether
//! the fields are HTTP/1.1 lines that may be copied as received is said by
//! [`RequestHead::lines`] / [`ResponseHead::lines`]. How a message is
//! framed is not here: beside the head (`codec::RequestFraming`,
//! `codec::ResponseFraming`), for the code that frames; its body comes as
//! data, then trailers, then its end (`codec::BodyKind::Stream` for a body
//! whose events come from an HTTP/2 stream).

use std::ops::Range;

/// A header's name and value as ranges into the buffer the head was parsed from.
#[derive(Debug, Clone)]
pub struct HeaderRef {
    pub name: Range<usize>,
    pub value: Range<usize>,
    /// True for headers that must not be forwarded (hop-by-hop or ones the
    /// gateway rewrites itself).
    pub skip: bool,
}

/// A request head.
#[derive(Debug, Clone, Default)]
pub struct RequestHead {
    pub method: Range<usize>,
    /// The request target: origin form (path and query), absolute form,
    /// `*`; split into path, query and authority by `route::target`.
    pub target: Range<usize>,
    /// `:scheme` of an HTTP/2 request (HTTP/1.1 has none: the connection's).
    pub scheme: Option<Range<usize>>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1 (and HTTP/2, whose
    /// semantics are HTTP/1.1's).
    pub minor: u8,
    /// The fields are HTTP/1.1 header lines ending in CRLF in the buffer,
    /// so runs of them can be copied as received; otherwise (HTTP/2) each
    /// is written from its name and value.
    pub lines: bool,
    pub headers: Vec<HeaderRef>,
    /// The `Host` value: the request's authority.
    pub host: Option<Range<usize>>,
    /// Values of every `X-Forwarded-For` header, in order; the gateway
    /// forwards them joined, with the client's address appended.
    pub xff: Vec<Range<usize>>,
    /// The protocol the request asks to switch to: the `Upgrade` value of
    /// an HTTP/1.1 request whose `Connection` names `upgrade`. Forwarded
    /// as an upgrade only when the route allows it and there is no body.
    pub upgrade: Option<Range<usize>>,
}

/// A response head from an upstream.
#[derive(Debug, Clone, Default)]
pub struct ResponseHead {
    pub status: u16,
    pub minor: u8,
    /// The head is an HTTP/1.1 status line and header lines in the buffer
    /// (its reason phrase is copied from there); otherwise (an HTTP/2
    /// upstream's HEADERS) only names and values are.
    pub lines: bool,
    pub headers: Vec<HeaderRef>,
    /// The `Upgrade` value (the protocol a `101` switches to).
    pub upgrade: Option<Range<usize>>,
}

/// A buffer a head is laid out in, part by part (the receive buffer of
/// the request it belongs to), so that the head's ranges can name them.
pub trait Arena {
    /// Bytes in the buffer now: where the next part will start.
    fn filled_len(&self) -> usize;
    /// Appends `bytes`.
    fn append(&mut self, bytes: &[u8]);
    /// Appends `bytes`: where they are.
    fn put_part(&mut self, bytes: &[u8]) -> Range<usize> {
        let at = self.filled_len();
        self.append(bytes);
        at..at + bytes.len()
    }
}

impl Arena for Vec<u8> {
    fn filled_len(&self) -> usize {
        self.len()
    }
    fn append(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}
