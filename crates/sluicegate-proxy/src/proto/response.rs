//! The one renderer of the answers the gateway makes itself: errors (a
//! small JSON body `{"error": "...", "status": N, "request_id": "..."}`
//! that never carries internal detail, with the request id in the head
//! too; to a gRPC request, a trailers-only gRPC status), `respond`
//! routes' fixed answers, CORS preflights' 204s and redirects to HTTPS.
//!
//! An answer ([`Answer`]) is described to a [`Sink`] as what it is in any
//! protocol: a status, header fields, a body's length and the body. Two
//! sinks encode it: [`Text`], HTTP/1.1 text written straight into the
//! connection's write buffer (no allocation of its own), and [`Fielded`],
//! an HTTP/2 stream's head as a header map handed to the stream
//! ([`Exchange::answer`]), its body left in the write buffer to go out as
//! DATA. [`render`] chooses by the client's stream; no HTTP/2 stream is
//! answered in HTTP/1.1 text.

use std::io;

use http::HeaderMap;

use crate::proto::fields::Fields;
use crate::proto::http2::exchange::{AnswerBody, Exchange};
use crate::proto::http2::response::append_field;
use crate::proto::request_id::RequestId;

/// Where a failure came from; each kind maps to one status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The client sent something malformed or ambiguous (400).
    BadRequest,
    RequestTimeout,
    HeadersTooLarge,
    BodyTooLarge,
    NotImplemented,
    MethodNotAllowed,
    NoRoute,
    /// No connection to the upstream could be made, or it answered
    /// something that is not HTTP (502).
    UpstreamFailed,
    /// The upstream did not answer in time (504).
    UpstreamTimeout,
    /// Every connection slot of the endpoint stayed busy (503).
    UpstreamBusy,
    /// No credentials, or unknown ones (401).
    Unauthorized,
    /// The caller is known but not allowed here (403).
    Forbidden,
    /// Over a plan or route limit (429).
    TooManyRequests,
    /// Every endpoint of the service is down (503, with Retry-After).
    NoHealthyEndpoint,
    /// An `Expect` the gateway cannot meet (417).
    ExpectationFailed,
    /// An upgrade over `limits.max_tunnels` (503).
    TooManyTunnels,
    /// The authorization server that must vouch for the caller did not
    /// answer (503): an outage, not a bad credential.
    AuthUnavailable,
    /// An abort injected by the route's `fault`, with its status (200 to
    /// 599).
    Fault(u16),
    /// A route's `forward_auth` or `ext_authz` service denied a gRPC call
    /// with this HTTP status: the call gets the gRPC status of that HTTP
    /// status (401 UNAUTHENTICATED, 403 PERMISSION_DENIED, ...).
    Denied(u16),
}

impl ErrorKind {
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::NoRoute => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::RequestTimeout => 408,
            ErrorKind::BodyTooLarge => 413,
            ErrorKind::HeadersTooLarge => 431,
            ErrorKind::NotImplemented => 501,
            ErrorKind::UpstreamFailed => 502,
            ErrorKind::UpstreamBusy => 503,
            ErrorKind::TooManyTunnels => 503,
            ErrorKind::AuthUnavailable => 503,
            ErrorKind::UpstreamTimeout => 504,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::TooManyRequests => 429,
            ErrorKind::NoHealthyEndpoint => 503,
            ErrorKind::ExpectationFailed => 417,
            ErrorKind::Fault(status) | ErrorKind::Denied(status) => status,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "bad request",
            ErrorKind::NoRoute => "no route",
            ErrorKind::MethodNotAllowed => "method not allowed",
            ErrorKind::RequestTimeout => "request timeout",
            ErrorKind::BodyTooLarge => "request body too large",
            ErrorKind::HeadersTooLarge => "request header fields too large",
            ErrorKind::NotImplemented => "not implemented",
            ErrorKind::UpstreamFailed => "bad gateway",
            ErrorKind::UpstreamBusy => "service unavailable",
            ErrorKind::TooManyTunnels => "too many open tunnels",
            ErrorKind::AuthUnavailable => "authorization server unavailable",
            ErrorKind::UpstreamTimeout => "gateway timeout",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::TooManyRequests => "too many requests",
            ErrorKind::NoHealthyEndpoint => "no healthy upstream",
            ErrorKind::ExpectationFailed => "expectation failed",
            ErrorKind::Fault(_) => "fault injected",
            ErrorKind::Denied(_) => "denied by the authorization service",
        }
    }

    /// The gRPC status code a gRPC client gets for this error.
    pub fn grpc_status(self) -> u8 {
        match self {
            ErrorKind::Unauthorized => 16, // UNAUTHENTICATED
            ErrorKind::Forbidden => 7,     // PERMISSION_DENIED
            ErrorKind::TooManyRequests | ErrorKind::BodyTooLarge => 8, // RESOURCE_EXHAUSTED
            ErrorKind::NoRoute => 12,      // UNIMPLEMENTED
            ErrorKind::UpstreamFailed
            | ErrorKind::UpstreamBusy
            | ErrorKind::NoHealthyEndpoint
            | ErrorKind::TooManyTunnels
            | ErrorKind::AuthUnavailable => 14, // UNAVAILABLE
            ErrorKind::UpstreamTimeout | ErrorKind::RequestTimeout => 4, // DEADLINE_EXCEEDED
            ErrorKind::BadRequest
            | ErrorKind::HeadersTooLarge
            | ErrorKind::NotImplemented
            | ErrorKind::MethodNotAllowed
            | ErrorKind::ExpectationFailed => 13, // INTERNAL
            ErrorKind::Fault(status) | ErrorKind::Denied(status) => grpc_for_status(status),
        }
    }

    /// The client connection cannot be reused after this error.
    pub fn closes(self) -> bool {
        matches!(
            self,
            ErrorKind::BadRequest
                | ErrorKind::RequestTimeout
                | ErrorKind::HeadersTooLarge
                | ErrorKind::BodyTooLarge
                | ErrorKind::NotImplemented
                | ErrorKind::ExpectationFailed
        )
    }
}

/// The gRPC status for an injected abort's or an authorization service's
/// denial's HTTP status: that of the gateway's own error with the same
/// status, else UNKNOWN.
fn grpc_for_status(status: u16) -> u8 {
    match status {
        401 => 16,             // UNAUTHENTICATED
        403 => 7,              // PERMISSION_DENIED
        413 | 429 => 8,        // RESOURCE_EXHAUSTED
        404 => 12,             // UNIMPLEMENTED
        502 | 503 => 14,       // UNAVAILABLE
        408 | 504 => 4,        // DEADLINE_EXCEEDED
        400..=499 | 501 => 13, // INTERNAL
        _ => 2,                // UNKNOWN
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// Appends `HTTP/1.1 NNN Reason\r\n`.
pub fn status_line(out: &mut Vec<u8>, status: u16) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends `content-length: N\r\n`.
pub fn content_length(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A head fixed in advance (a `respond` route's): its status and fields,
/// and the same as HTTP/1.1 text (status line and field lines), which
/// [`Text`] writes in one copy. Small (32 bytes), for the route's two
/// cache lines.
#[derive(Debug)]
pub struct FixedHead {
    status: u16,
    h1: Box<[u8]>,
    fields: Box<Fields>,
}

impl FixedHead {
    pub fn new(status: u16, fields: Fields) -> FixedHead {
        let mut h1 = Vec::new();
        status_line(&mut h1, status);
        fields.write_h1(&mut h1);
        FixedHead {
            status,
            h1: h1.into_boxed_slice(),
            fields: Box::new(fields),
        }
    }

    pub fn status(&self) -> u16 {
        self.status
    }
}

/// What an answer is described to, part by part and in this order: its
/// status (or a head fixed in advance), its fields, then [`Sink::end`]
/// with its body. Each protocol's encoder is one.
pub trait Sink {
    fn status(&mut self, status: u16);
    /// A head fixed in advance: its status and fields.
    fn fixed(&mut self, head: &FixedHead);
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// A field whose value is a number.
    fn number(&mut self, name: &[u8], n: u64);
    fn fields(&mut self, fields: &Fields);
    /// The request id's field (none before an id is set).
    fn request_id(&mut self, rid: &RequestId);
    /// The body's length (`content-length`); never said for a status
    /// without a body.
    fn length(&mut self, n: u64);
    /// The client's connection closes after this answer.
    fn close(&mut self);
    /// An HTTP/1.0 client's connection stays open after this answer.
    fn keep_alive(&mut self);
    /// The head is whole; `body` follows (none for HEAD).
    fn end(&mut self, body: &[u8]);
    /// The body, of a length not known yet, runs until its end (chunked,
    /// over HTTP/1.1).
    fn until_end(&mut self);
}

/// The HTTP/1.1 encoder: the answer as text appended to the write buffer.
pub struct Text<'a>(pub &'a mut Vec<u8>);

impl Sink for Text<'_> {
    #[inline]
    fn status(&mut self, status: u16) {
        status_line(self.0, status);
    }
    #[inline]
    fn fixed(&mut self, head: &FixedHead) {
        self.0.extend_from_slice(&head.h1);
    }
    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.0.extend_from_slice(name);
        self.0.extend_from_slice(b": ");
        self.0.extend_from_slice(value);
        self.0.extend_from_slice(b"\r\n");
    }
    #[inline]
    fn number(&mut self, name: &[u8], n: u64) {
        self.field(name, itoa::Buffer::new().format(n).as_bytes());
    }
    #[inline]
    fn fields(&mut self, fields: &Fields) {
        fields.write_h1(self.0);
    }
    #[inline]
    fn request_id(&mut self, rid: &RequestId) {
        rid.write_h1(self.0);
    }
    #[inline]
    fn length(&mut self, n: u64) {
        content_length(self.0, n);
    }
    #[inline]
    fn close(&mut self) {
        self.0.extend_from_slice(b"connection: close\r\n");
    }
    fn until_end(&mut self) {
        self.0.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    #[inline]
    fn keep_alive(&mut self) {
        self.0.extend_from_slice(b"connection: keep-alive\r\n");
    }
    #[inline]
    fn end(&mut self, body: &[u8]) {
        self.0.extend_from_slice(b"\r\n");
        self.0.extend_from_slice(body);
    }
}

/// The HTTP/2 encoder: the head as a header map, without the fields that
/// name the connection (HTTP/2 carries none), handed to the stream by
/// [`Fielded::send`]; the body appended to the write buffer, to go out as
/// DATA.
pub struct Fielded<'a> {
    status: u16,
    fields: HeaderMap,
    body: AnswerBody,
    out: &'a mut Vec<u8>,
}

impl<'a> Fielded<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> Fielded<'a> {
        Fielded {
            status: 0,
            fields: HeaderMap::new(),
            body: AnswerBody::Empty,
            out,
        }
    }

    /// Sends the head on `x`; its body (what [`Sink::end`] appended) is
    /// then the stream's to write.
    pub fn send(self, x: &Exchange) -> io::Result<()> {
        x.answer(self.status, self.fields, self.body)
    }
}

impl Sink for Fielded<'_> {
    fn status(&mut self, status: u16) {
        self.status = status;
    }
    fn fixed(&mut self, head: &FixedHead) {
        self.status = head.status;
        self.fields(&head.fields);
    }
    fn field(&mut self, name: &[u8], value: &[u8]) {
        append_field(&mut self.fields, name, value);
    }
    fn number(&mut self, name: &[u8], n: u64) {
        self.field(name, itoa::Buffer::new().format(n).as_bytes());
    }
    fn fields(&mut self, fields: &Fields) {
        fields.iter().for_each(|(n, v)| self.field(n, v));
    }
    fn request_id(&mut self, rid: &RequestId) {
        if !rid.value().is_empty() {
            self.field(rid.name(), rid.value());
        }
    }
    fn length(&mut self, n: u64) {
        self.number(b"content-length", n);
        self.body = match n {
            0 => AnswerBody::Empty,
            n => AnswerBody::Length(n),
        };
    }
    fn until_end(&mut self) {
        self.body = AnswerBody::UntilEnd;
    }
    // A stream ends with its answer; its connection is not its to close.
    fn close(&mut self) {}
    fn keep_alive(&mut self) {}
    fn end(&mut self, body: &[u8]) {
        self.out.extend_from_slice(body);
    }
}

/// An answer the gateway makes itself, as it is whatever the protocol.
pub struct Answer<'a> {
    pub what: What<'a>,
    /// The request's id: in the head (and in an error's body).
    pub rid: &'a RequestId,
    /// The client's connection closes after the answer.
    pub close: bool,
    /// The request was HEAD: no body, its length said all the same.
    pub head_only: bool,
    /// The client speaks HTTP/1.0: a fixed answer says when its
    /// connection stays open.
    pub http10: bool,
}

/// What answer it is.
pub enum What<'a> {
    /// An error, with more fields (a filter's, say). A 503 for a service
    /// with no endpoint in rotation says `retry-after: 1`. To a gRPC
    /// request (`grpc`) it is gRPC's trailers-only answer instead: a `200`
    /// whose head carries `grpc-status` and `grpc-message`, no body.
    Error {
        kind: ErrorKind,
        grpc: bool,
        extra: &'a [&'a Fields],
    },
    /// A fixed answer: its head; the fields the filters left for the
    /// answer (CORS, rate limits), then those of the route's header ops;
    /// its body (none for 1xx, 204 and 304, which say no length either).
    Fixed {
        head: Head<'a>,
        edits: &'a Fields,
        ops: &'a Fields,
        body: &'a [u8],
    },
    /// A head whose body follows, written by the caller as it comes (the
    /// cache's answer to a request that waited for another's fetch):
    /// `length` when known; otherwise chunked over HTTP/1.1, until the
    /// close for an HTTP/1.0 client (whose connection must close), until
    /// the stream's end over HTTP/2.
    Streamed {
        head: Head<'a>,
        edits: &'a Fields,
        ops: &'a Fields,
        length: Option<u64>,
    },
}

/// A fixed answer's head.
pub enum Head<'a> {
    /// Built in advance: a `respond` route's.
    Fixed(&'a FixedHead),
    /// A status and its own fields: a CORS preflight's 204, a redirect.
    Fields(u16, &'a Fields),
}

impl Head<'_> {
    pub fn status(&self) -> u16 {
        match self {
            Head::Fixed(h) => h.status,
            Head::Fields(status, _) => *status,
        }
    }
}

/// A status whose answer has no body and says no length.
pub fn bodiless(status: u16) -> bool {
    status < 200 || status == 204 || status == 304
}

impl Answer<'_> {
    /// Describes the answer to `out`, part by part.
    #[inline]
    pub fn describe<S: Sink>(&self, out: &mut S) {
        match &self.what {
            What::Error {
                kind,
                grpc: true,
                extra,
            } => self.grpc_error(out, *kind, extra),
            What::Error { kind, extra, .. } => self.error(out, *kind, extra),
            What::Fixed {
                head,
                edits,
                ops,
                body,
            } => {
                match head {
                    Head::Fixed(h) => out.fixed(h),
                    Head::Fields(status, fields) => {
                        out.status(*status);
                        out.fields(fields);
                    }
                }
                out.fields(edits);
                out.request_id(self.rid);
                out.fields(ops);
                let no_body = bodiless(head.status());
                if !no_body {
                    out.length(body.len() as u64);
                }
                self.connection(out, true);
                out.end(if self.head_only || no_body { &[] } else { body });
            }
            What::Streamed {
                head,
                edits,
                ops,
                length,
            } => {
                match head {
                    Head::Fixed(h) => out.fixed(h),
                    Head::Fields(status, fields) => {
                        out.status(*status);
                        out.fields(fields);
                    }
                }
                out.fields(edits);
                out.request_id(self.rid);
                out.fields(ops);
                match length {
                    _ if bodiless(head.status()) => {}
                    Some(n) => out.length(*n),
                    None if self.http10 => {}
                    None => out.until_end(),
                }
                self.connection(out, true);
                out.end(&[]);
            }
        }
    }

    /// What the head says of the connection: that it closes, or (when
    /// `keep_alive` is said at all) that an HTTP/1.0 client's stays open.
    fn connection<S: Sink>(&self, out: &mut S, keep_alive: bool) {
        if self.close {
            out.close();
        } else if keep_alive && self.http10 {
            out.keep_alive();
        }
    }

    fn error<S: Sink>(&self, out: &mut S, kind: ErrorKind, extra: &[&Fields]) {
        let status = kind.status();
        let mut body = Vec::with_capacity(64);
        error_body(&mut body, kind, None, self.rid);
        out.status(status);
        // Only an injected abort can be a 204 or a 304: no body, no length.
        let no_body = bodiless(status);
        if !no_body {
            out.field(b"content-type", b"application/json");
            out.length(body.len() as u64);
        }
        if kind == ErrorKind::NoHealthyEndpoint {
            out.field(b"retry-after", b"1");
        }
        self.tail(out, extra);
        out.end(if self.head_only || no_body {
            &[]
        } else {
            &body
        });
    }

    /// An error as gRPC's trailers-only answer: `200`, `content-type:
    /// application/grpc`, `grpc-status` and `grpc-message` in the head, no
    /// body (over HTTP/2, one HEADERS frame that ends the stream).
    fn grpc_error<S: Sink>(&self, out: &mut S, kind: ErrorKind, extra: &[&Fields]) {
        out.status(200);
        out.field(b"content-type", b"application/grpc");
        out.number(b"grpc-status", u64::from(kind.grpc_status()));
        // The messages are plain ASCII words: nothing to percent-encode.
        out.field(b"grpc-message", kind.message().as_bytes());
        out.length(0);
        self.tail(out, extra);
        out.end(&[]);
    }

    /// An error's last fields: `extra`, the request id, the connection's.
    fn tail<S: Sink>(&self, out: &mut S, extra: &[&Fields]) {
        for fields in extra {
            out.fields(fields);
        }
        out.request_id(self.rid);
        self.connection(out, false);
    }
}

/// An error's JSON body: `{"error", "status"}`, then `extra` (a name and
/// a value, both plain ASCII words needing no escapes) when given, then
/// the request id.
pub fn error_body(
    body: &mut Vec<u8>,
    kind: ErrorKind,
    extra: Option<(&str, &str)>,
    rid: &RequestId,
) {
    body.extend_from_slice(b"{\"error\":\"");
    body.extend_from_slice(kind.message().as_bytes());
    body.extend_from_slice(b"\",\"status\":");
    body.extend_from_slice(itoa::Buffer::new().format(kind.status()).as_bytes());
    if let Some((name, value)) = extra {
        body.extend_from_slice(b",\"");
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(b"\":\"");
        body.extend_from_slice(value.as_bytes());
        body.push(b'"');
    }
    if !rid.value().is_empty() {
        // Visible ASCII without `"` or `\\` (RequestId::keep): no escapes.
        body.extend_from_slice(b",\"request_id\":\"");
        body.extend_from_slice(rid.value());
        body.push(b'"');
    }
    body.extend_from_slice(b"}\n");
}

/// Renders `answer` for a client into `out` (cleared first): as HTTP/1.1
/// text; or, for an HTTP/2 stream (`h2`), its head handed to the stream at
/// once as fields, and its body left in `out`. Either way `out` is then
/// written to the client as it is. An error when the stream took no head
/// (it is gone, or the status is not a final one: the stream is reset).
#[inline]
pub fn render(answer: &Answer<'_>, h2: Option<&Exchange>, out: &mut Vec<u8>) -> io::Result<()> {
    out.clear();
    match h2 {
        None => {
            answer.describe(&mut Text(out));
            Ok(())
        }
        Some(x) => render_fields(answer, x, out),
    }
}

/// [`render`] for an HTTP/2 stream. Out of line: the HTTP/1.1 path stays
/// small.
#[inline(never)]
fn render_fields(answer: &Answer<'_>, x: &Exchange, out: &mut Vec<u8>) -> io::Result<()> {
    let mut sink = Fielded::new(out);
    answer.describe(&mut sink);
    sink.send(x)
}

#[cfg(test)]
mod tests;
