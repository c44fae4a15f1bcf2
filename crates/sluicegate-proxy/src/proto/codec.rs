//! The HTTP/1.1 codec: message heads parsed on `httparse` into offsets (no
//! copies), strict RFC 9112 framing checks, and the hop-by-hop header
//! rules. The server side (requests, `server.rs`) and the client side
//! (responses, `client.rs`) share the header loop here; each fills a
//! protocol-neutral head (`proto::head`) and returns the message's framing
//! beside it ([`RequestFraming`], [`ResponseFraming`]).
//!
//! A parsed head keeps byte ranges into the connection's read buffer, so a
//! header is forwarded by copying its original bytes, never re-allocated.

use std::ops::Range;

use crate::proto::bytes::{eq_lower, trim};
use crate::proto::head::HeaderRef;

mod client;
mod server;

pub use client::parse_response;
pub use server::parse_request;

/// Most headers accepted in one message head; more is answered with 431.
pub const MAX_HEADERS: usize = 128;

/// Why a request head was refused; each maps to one status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Malformed or ambiguous framing: 400 and close.
    Bad(&'static str),
    /// Too many headers, or the head is larger than allowed: 431.
    TooLarge,
    /// The transfer coding is not one we can frame: 501.
    NotImplemented(&'static str),
    /// An `Expect` other than `100-continue`: 417.
    ExpectationFailed,
}

/// How the body of a message is delimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BodyKind {
    #[default]
    None,
    Length(u64),
    Chunked,
    /// Response only: the body runs until the upstream closes.
    UntilClose,
    /// Data events until the end of an HTTP/2 stream, then maybe
    /// trailers: a body whose length was not given. An HTTP/1.1 peer gets
    /// it chunked; an HTTP/2 peer, as the same DATA and trailers.
    Stream,
}

/// How a request is framed in HTTP/1.1, decided by the codec beside its
/// [`RequestHead`](crate::proto::head::RequestHead): read where the
/// request is framed (its body forwarded or dropped, the connection kept
/// or closed), not by routing, filters or logging.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestFraming {
    /// Length of the head in the buffer, including the final CRLF.
    pub len: usize,
    pub body: BodyKind,
    /// The client asked to close after this request (or is HTTP/1.0 without keep-alive).
    pub close: bool,
    /// An HTTP/1.1 client waits for `100 Continue` before its body.
    pub expect_continue: bool,
}

/// How a response is framed in HTTP/1.1, decided by the codec beside its
/// [`ResponseHead`](crate::proto::head::ResponseHead).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponseFraming {
    /// Length of the head in the buffer, including the final CRLF.
    pub len: usize,
    pub body: BodyKind,
    /// The upstream will close (or did not promise keep-alive).
    pub close: bool,
    /// Every line of the head ends in CRLF, so its lines can be copied as
    /// received (see [`append_header_lines`]).
    pub crlf: bool,
}

fn offset(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

/// The headers the codec treats specially, found by length first so an
/// ordinary header costs one or two comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    ContentLength,
    TransferEncoding,
    Host,
    Connection,
    Expect,
    XForwardedFor,
    /// `X-Forwarded-Proto` and `X-Forwarded-Host`: set by the gateway.
    XForwardedOther,
    /// `Upgrade`: hop-by-hop, passed on only for an upgrade the route
    /// allows (written by the gateway, not copied).
    Upgrade,
    /// Other hop-by-hop headers (RFC 9110 7.6.1): `Keep-Alive`,
    /// `Proxy-Connection`, `TE`, `Trailer`, `Proxy-Authenticate`.
    HopByHop,
    /// Headers the gateway asserts itself (`X-App-Id`): never forwarded as
    /// a client sent them, on any route.
    Asserted,
    Other,
}

pub(crate) fn classify(name: &[u8]) -> Known {
    let is = |k: &[u8]| eq_lower(name, k);
    match name.len() {
        2 if is(b"te") => Known::HopByHop,
        4 if is(b"host") => Known::Host,
        6 if is(b"expect") => Known::Expect,
        7 if is(b"upgrade") => Known::Upgrade,
        7 if is(b"trailer") => Known::HopByHop,
        8 if is(b"x-app-id") => Known::Asserted,
        10 if is(b"connection") => Known::Connection,
        10 if is(b"keep-alive") => Known::HopByHop,
        14 if is(b"content-length") => Known::ContentLength,
        15 if is(b"x-forwarded-for") => Known::XForwardedFor,
        16 if is(b"x-forwarded-host") => Known::XForwardedOther,
        16 if is(b"proxy-connection") => Known::HopByHop,
        17 if is(b"transfer-encoding") => Known::TransferEncoding,
        17 if is(b"x-forwarded-proto") => Known::XForwardedOther,
        18 if is(b"proxy-authenticate") => Known::HopByHop,
        _ => Known::Other,
    }
}

/// Never forwarded as received: hop-by-hop headers, and the framing
/// headers the gateway writes itself from its own framing decision.
pub(crate) fn is_hop_by_hop(k: Known) -> bool {
    matches!(
        k,
        Known::HopByHop
            | Known::Upgrade
            | Known::Connection
            | Known::ContentLength
            | Known::TransferEncoding
            | Known::Asserted
    )
}

/// A bare LF (one not preceded by CR) anywhere in the head is refused:
/// `httparse` accepts it, RFC 9112 lets a server reject it, and accepting
/// it is a request-smuggling vector behind lenient upstreams.
fn has_bare_lf(head: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', head).any(|i| i == 0 || head[i - 1] != b'\r')
}

/// True when the line that starts at `at` follows a CRLF.
#[inline]
fn crlf_before(buf: &[u8], at: usize) -> bool {
    at >= 2 && buf.get(at - 2..at) == Some(b"\r\n")
}

/// [`has_bare_lf`] for a complete head, without scanning it: every LF in a
/// head httparse accepted ends a line (none can sit inside a token, target
/// or value), and each line but the last ends just before the next one
/// starts. So checking the byte before each header line, the two line ends
/// at the close of the head, and any empty lines skipped before the request
/// line (`line0` is where the request line starts) covers every LF. This
/// checks all but the header lines; the parsers check those with
/// [`crlf_before`] as they walk the headers, so the head is read once.
fn head_ends_have_bare_lf(buf: &[u8], len: usize, line0: usize) -> bool {
    (line0 > 0 && has_bare_lf(&buf[..line0]))
        || !crlf_before(buf, len)
        || !crlf_before(buf, len - 2)
}

/// Parses a Content-Length value: digits only, and a comma list only when
/// every element is the same number.
pub(crate) fn parse_content_length(v: &[u8]) -> Option<u64> {
    let mut result: Option<u64> = None;
    for part in v.split(|&b| b == b',') {
        let part = trim(part);
        if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = part
            .iter()
            .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
        match result {
            Some(prev) if prev != n => return None,
            _ => result = Some(n),
        }
    }
    result
}

/// What a `Connection` header value says, read in one pass.
#[derive(Default, Clone, Copy)]
struct ConnTokens {
    close: bool,
    keep_alive: bool,
    /// It names `upgrade`.
    upgrade: bool,
    /// It names other headers, which are then hop-by-hop too.
    other: bool,
}

fn connection_tokens(v: &[u8]) -> ConnTokens {
    let mut t = ConnTokens::default();
    // The usual values, a single token, without splitting.
    if eq_lower(v, b"keep-alive") {
        t.keep_alive = true;
        return t;
    }
    if eq_lower(v, b"close") {
        t.close = true;
        return t;
    }
    for token in v.split(|&b| b == b',') {
        let token = trim(token);
        if eq_lower(token, b"close") {
            t.close = true;
        } else if eq_lower(token, b"keep-alive") {
            t.keep_alive = true;
        } else if !token.is_empty() {
            t.upgrade |= eq_lower(token, b"upgrade");
            t.other = true;
        }
    }
    t
}

/// Appends to `out` the header lines of a head in `raw` for which `keep`
/// holds, in order. When every line ends in CRLF (`crlf`; always so for a
/// request head we accepted) each run of kept lines is copied as received
/// in one piece; otherwise each line is rebuilt as `name: value` CRLF.
/// `head_len` is the head's length, final blank line included.
pub fn append_header_lines(
    out: &mut Vec<u8>,
    raw: &[u8],
    headers: &[HeaderRef],
    head_len: usize,
    crlf: bool,
    keep: impl Fn(&HeaderRef) -> bool,
) {
    if !crlf {
        for h in headers.iter().filter(|h| keep(h)) {
            out.extend_from_slice(&raw[h.name.clone()]);
            out.extend_from_slice(b": ");
            out.extend_from_slice(&raw[h.value.clone()]);
            out.extend_from_slice(b"\r\n");
        }
        return;
    }
    let mut run: Option<usize> = None;
    for h in headers {
        if keep(h) {
            run.get_or_insert(h.name.start);
        } else if let Some(start) = run.take() {
            out.extend_from_slice(&raw[start..h.name.start]);
        }
    }
    if let Some(start) = run {
        // The last run ends where the final blank line starts.
        out.extend_from_slice(&raw[start..head_len - 2]);
    }
}

/// Outcome of trying to parse a head from the bytes received so far.
pub enum Parsed<T> {
    Complete(T),
    /// More bytes are needed.
    Partial,
}

/// What the header loop found that frames a message.
struct Found {
    /// The peer will close (HTTP/1.0 without keep-alive, or `close`).
    close: bool,
    length: Option<u64>,
    /// Every header line ended in CRLF (and the lines checked before).
    crlf: bool,
    /// `Connection` names `upgrade`.
    upgrade: bool,
}

/// The header loop both sides share: checks each line's CRLF, classifies
/// the name, takes `Content-Length` (refusing conflicting ones) and
/// `Connection` (`close`, `keep-alive`, and headers it names, which are
/// then hop-by-hop too), marks hop-by-hop headers, and records a
/// [`HeaderRef`] per header in `out`. `side` handles what only one side
/// looks at (Host, Transfer-Encoding, ...) and may mark the header
/// skipped. With `strict_connection`, more than four `Connection` headers
/// naming other tokens is an error (a request); else the rest are ignored
/// (a response).
#[inline(always)]
fn header_loop<'b>(
    buf: &'b [u8],
    headers: &[httparse::Header<'b>],
    minor: u8,
    crlf: bool,
    out: &mut Vec<HeaderRef>,
    strict_connection: bool,
    mut side: impl FnMut(Known, &'b [u8], &mut bool) -> Result<(), HeadError>,
) -> Result<Found, HeadError> {
    let mut f = Found {
        close: minor == 0,
        length: None,
        crlf,
        upgrade: false,
    };
    let mut conn_values: [Option<Range<usize>>; 4] = Default::default();
    let mut conn_count = 0;
    out.clear();
    for h in headers {
        let name = h.name.as_bytes();
        let value = h.value;
        let name_at = offset(buf, name);
        f.crlf &= crlf_before(buf, name_at.start);
        let kind = classify(name);
        let mut skip = is_hop_by_hop(kind);
        match kind {
            Known::ContentLength => {
                let n =
                    parse_content_length(value).ok_or(HeadError::Bad("invalid Content-Length"))?;
                if f.length.is_some_and(|prev| prev != n) {
                    return Err(HeadError::Bad("conflicting Content-Length headers"));
                }
                f.length = Some(n);
            }
            Known::Connection => {
                let t = connection_tokens(value);
                if t.other {
                    if conn_count < conn_values.len() {
                        conn_values[conn_count] = Some(offset(buf, value));
                        conn_count += 1;
                    } else if strict_connection {
                        return Err(HeadError::Bad("too many Connection headers"));
                    }
                }
                f.upgrade |= t.upgrade;
                if t.close {
                    f.close = true;
                } else if minor == 0 && t.keep_alive {
                    f.close = false;
                }
            }
            Known::Other => {}
            _ => side(kind, value, &mut skip)?,
        }
        out.push(HeaderRef {
            name: name_at,
            value: offset(buf, value),
            skip,
        });
    }
    if conn_count > 0 {
        mark_connection_tokens(buf, &conn_values[..conn_count], out);
    }
    Ok(f)
}

fn mark_connection_tokens(
    buf: &[u8],
    conn_values: &[Option<Range<usize>>],
    headers: &mut [HeaderRef],
) {
    for v in conn_values.iter().flatten() {
        for token in buf[v.clone()].split(|&b| b == b',') {
            let token = trim(token);
            // Host is never dropped for a Connection token (the framing
            // headers are the gateway's to write anyway).
            if token.is_empty()
                || token.eq_ignore_ascii_case(b"close")
                || token.eq_ignore_ascii_case(b"keep-alive")
                || token.eq_ignore_ascii_case(b"host")
            {
                continue;
            }
            for h in headers.iter_mut() {
                if buf[h.name.clone()].eq_ignore_ascii_case(token) {
                    h.skip = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
