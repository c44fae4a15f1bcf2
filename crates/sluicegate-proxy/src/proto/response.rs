//! Responses the gateway writes itself: status lines, and errors as a
//! small JSON body `{"error": "...", "status": N, "request_id": "..."}`
//! that never carries internal detail, with the request id in its header
//! too.

use crate::proto::fields::Fields;
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
            ErrorKind::UpstreamTimeout => 504,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::TooManyRequests => 429,
            ErrorKind::NoHealthyEndpoint => 503,
            ErrorKind::ExpectationFailed => 417,
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
            ErrorKind::UpstreamTimeout => "gateway timeout",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::TooManyRequests => "too many requests",
            ErrorKind::NoHealthyEndpoint => "no healthy upstream",
            ErrorKind::ExpectationFailed => "expectation failed",
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
            | ErrorKind::TooManyTunnels => 14, // UNAVAILABLE
            ErrorKind::UpstreamTimeout | ErrorKind::RequestTimeout => 4, // DEADLINE_EXCEEDED
            ErrorKind::BadRequest
            | ErrorKind::HeadersTooLarge
            | ErrorKind::NotImplemented
            | ErrorKind::MethodNotAllowed
            | ErrorKind::ExpectationFailed => 13, // INTERNAL
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

/// Appends a complete error response. `head_only` leaves the body out
/// (for HEAD requests) while keeping its length.
pub fn error(
    out: &mut Vec<u8>,
    kind: ErrorKind,
    close: bool,
    head_only: bool,
    grpc: bool,
    rid: &RequestId,
) {
    error_with(out, kind, close, head_only, grpc, &[], rid);
}

/// [`error`] with extra header fields (a filter's, say). A 503 for a
/// service with no endpoint in rotation says `retry-after: 1`. To a gRPC
/// request (`grpc`) the answer is gRPC's trailers-only form instead: a
/// `200` whose head carries `grpc-status` and `grpc-message`.
pub fn error_with(
    out: &mut Vec<u8>,
    kind: ErrorKind,
    close: bool,
    head_only: bool,
    grpc: bool,
    extra: &[&Fields],
    rid: &RequestId,
) {
    if grpc {
        return grpc_error(out, kind, close, extra, rid);
    }
    let status = kind.status();
    let mut body = Vec::with_capacity(64);
    body.extend_from_slice(b"{\"error\":\"");
    body.extend_from_slice(kind.message().as_bytes());
    body.extend_from_slice(b"\",\"status\":");
    body.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    if !rid.value().is_empty() {
        // Visible ASCII without `"` or `\\` (RequestId::keep): no escapes.
        body.extend_from_slice(b",\"request_id\":\"");
        body.extend_from_slice(rid.value());
        body.push(b'"');
    }
    body.extend_from_slice(b"}\n");
    status_line(out, status);
    out.extend_from_slice(b"content-type: application/json\r\n");
    content_length(out, body.len() as u64);
    if kind == ErrorKind::NoHealthyEndpoint {
        out.extend_from_slice(b"retry-after: 1\r\n");
    }
    for fields in extra {
        fields.write_h1(out);
    }
    rid.write_h1(out);
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !head_only {
        out.extend_from_slice(&body);
    }
}

/// An error as gRPC's trailers-only answer: `200`, `content-type:
/// application/grpc`, `grpc-status` and `grpc-message` in the head, no
/// body (over HTTP/2, one HEADERS frame that ends the stream).
fn grpc_error(out: &mut Vec<u8>, kind: ErrorKind, close: bool, extra: &[&Fields], rid: &RequestId) {
    status_line(out, 200);
    out.extend_from_slice(b"content-type: application/grpc\r\ngrpc-status: ");
    out.extend_from_slice(itoa::Buffer::new().format(kind.grpc_status()).as_bytes());
    // The messages are plain ASCII words: nothing to percent-encode.
    out.extend_from_slice(b"\r\ngrpc-message: ");
    out.extend_from_slice(kind.message().as_bytes());
    out.extend_from_slice(b"\r\n");
    content_length(out, 0);
    for fields in extra {
        fields.write_h1(out);
    }
    rid.write_h1(out);
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_is_small_json() {
        let mut out = Vec::new();
        error(
            &mut out,
            ErrorKind::UpstreamFailed,
            true,
            false,
            false,
            &RequestId::default(),
        );
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("HTTP/1.1 502 Bad Gateway\r\n"));
        assert!(s.contains("connection: close\r\n"));
        assert!(s.ends_with("\r\n\r\n{\"error\":\"bad gateway\",\"status\":502}\n"));
        let body_len = "{\"error\":\"bad gateway\",\"status\":502}\n".len();
        assert!(s.contains(&format!("content-length: {body_len}\r\n")));
    }

    #[test]
    fn the_request_id_is_in_the_head_and_the_body() {
        let mut rid = RequestId::default();
        rid.set_name(b"x-request-id");
        assert!(rid.keep(b"abc-1"));
        let mut out = Vec::new();
        error(&mut out, ErrorKind::NoRoute, false, false, false, &rid);
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("\r\nx-request-id: abc-1\r\n"), "{s}");
        assert!(
            s.ends_with(
                "\r\n\r\n{\"error\":\"no route\",\"status\":404,\"request_id\":\"abc-1\"}\n"
            ),
            "{s}"
        );
        let mut out = Vec::new();
        error(&mut out, ErrorKind::NoRoute, false, false, true, &rid);
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("x-request-id: abc-1\r\n"));
    }

    #[test]
    fn a_grpc_request_gets_a_trailers_only_status() {
        let mut out = Vec::new();
        error(
            &mut out,
            ErrorKind::TooManyRequests,
            false,
            false,
            true,
            &RequestId::default(),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-type: application/grpc\r\ngrpc-status: 8\r\n\
             grpc-message: too many requests\r\ncontent-length: 0\r\n\r\n"
        );
    }
}
