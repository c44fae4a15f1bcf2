//! The server side of the codec: a client's request head, its framing
//! decided by RFC 9112's rules for a recipient that must not be fooled
//! (one Host, no Content-Length beside Transfer-Encoding, nothing but
//! `chunked` as a transfer coding, no bare LF).

use std::mem::MaybeUninit;

use super::{
    has_bare_lf, head_ends_have_bare_lf, header_loop, offset, BodyKind, HeadError, Known, Parsed,
    RequestFraming, MAX_HEADERS,
};
use crate::proto::bytes::{eq_lower, trim, valid_host};
use crate::proto::head::RequestHead;

/// Parses a request head from `buf` (which starts at the head) into `head`,
/// and returns its framing. `max` is the largest head allowed; a partial
/// head already longer than that is `TooLarge`.
pub fn parse_request(
    buf: &[u8],
    max: usize,
    head: &mut RequestHead,
) -> Result<Parsed<RequestFraming>, HeadError> {
    // Left uninitialised: httparse writes the headers it finds, and filling
    // 128 empty ones first cost more than parsing a small head.
    let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(buf, &mut raw) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= max {
                return Err(HeadError::TooLarge);
            }
            if has_bare_lf(buf) {
                return Err(HeadError::Bad("bare LF in request head"));
            }
            return Ok(Parsed::Partial);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(httparse::Error::Version) => return Err(HeadError::Bad("unsupported HTTP version")),
        Err(_) => return Err(HeadError::Bad("malformed request head")),
    };
    if len > max {
        return Err(HeadError::TooLarge);
    }
    let (Some(method), Some(path), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Bad("malformed request line"));
    };
    let line0 = offset(buf, method.as_bytes()).start;
    // Header lines are checked in the header loop.
    let lines_crlf = !head_ends_have_bare_lf(buf, len, line0);
    head.method = offset(buf, method.as_bytes());
    head.target = offset(buf, path.as_bytes());
    head.minor = minor;
    head.scheme = None;
    head.lines = true;
    head.headers.clear();
    head.host = None;
    head.xff.clear();
    let mut expect_continue = false;
    let mut chunked = false;
    let mut te_seen = false;
    head.upgrade = None;
    let mut upgrade = None;
    let (host, xff) = (&mut head.host, &mut head.xff);
    let f = header_loop(
        buf,
        req.headers,
        minor,
        lines_crlf,
        &mut head.headers,
        true,
        |kind, value, skip| {
            match kind {
                Known::TransferEncoding => {
                    if te_seen {
                        return Err(HeadError::Bad("repeated Transfer-Encoding"));
                    }
                    te_seen = true;
                    let v = trim(value);
                    if !eq_lower(v, b"chunked") {
                        if v.split(|&b| b == b',').any(|t| trim(t).is_empty()) {
                            return Err(HeadError::Bad("malformed Transfer-Encoding"));
                        }
                        let last = v.rsplit(|&b| b == b',').next().map(trim).unwrap_or(&[]);
                        if !last.eq_ignore_ascii_case(b"chunked") {
                            return Err(HeadError::Bad("chunked is not the final transfer coding"));
                        }
                        return Err(HeadError::NotImplemented("transfer coding not supported"));
                    }
                    chunked = true;
                }
                Known::Host => {
                    if host.is_some() {
                        return Err(HeadError::Bad("repeated Host header"));
                    }
                    if !valid_host(trim(value)) {
                        return Err(HeadError::Bad("invalid Host header"));
                    }
                    *host = Some(offset(buf, value));
                }
                Known::Expect => {
                    if !trim(value).eq_ignore_ascii_case(b"100-continue") {
                        return Err(HeadError::ExpectationFailed);
                    }
                    expect_continue = minor == 1;
                    *skip = true;
                }
                Known::XForwardedFor => {
                    xff.push(offset(buf, value));
                    *skip = true;
                }
                Known::XForwardedOther => *skip = true,
                Known::Upgrade => upgrade = Some(offset(buf, value)),
                _ => {}
            }
            Ok(())
        },
    )?;
    if !f.crlf {
        return Err(HeadError::Bad("bare LF in request head"));
    }
    if f.upgrade && minor == 1 {
        head.upgrade = upgrade;
    }
    let (close, length) = (f.close, f.length);
    if chunked && length.is_some() {
        return Err(HeadError::Bad("both Content-Length and Transfer-Encoding"));
    }
    if chunked && minor == 0 {
        return Err(HeadError::Bad("Transfer-Encoding in an HTTP/1.0 request"));
    }
    if minor == 1 && head.host.is_none() {
        return Err(HeadError::Bad("missing Host header"));
    }
    let body = if chunked {
        BodyKind::Chunked
    } else {
        match length {
            Some(0) | None => BodyKind::None,
            Some(n) => BodyKind::Length(n),
        }
    };
    Ok(Parsed::Complete(RequestFraming {
        len,
        body,
        close,
        expect_continue,
    }))
}
