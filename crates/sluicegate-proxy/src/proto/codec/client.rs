//! The client side of the codec: an upstream's response head, its framing
//! decided as RFC 9112 6.3 says a recipient of a response does (no body for
//! HEAD, 1xx, 204 and 304; chunked when last; otherwise the length, or
//! until the upstream closes).

use std::mem::MaybeUninit;

use super::{
    head_ends_have_bare_lf, header_loop, offset, BodyKind, HeadError, Known, Parsed,
    ResponseFraming, MAX_HEADERS,
};
use crate::proto::bytes::{eq_lower, trim};
use crate::proto::head::ResponseHead;

/// Parses a response head from an upstream into `head`, and returns its
/// framing. `head_request` says whether the request was HEAD (then no body
/// follows whatever the headers say).
pub fn parse_response(
    buf: &[u8],
    max: usize,
    head_request: bool,
    head: &mut ResponseHead,
) -> Result<Parsed<ResponseFraming>, HeadError> {
    let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut res, buf, &mut raw)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= max {
                return Err(HeadError::TooLarge);
            }
            return Ok(Parsed::Partial);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Bad("malformed response head")),
    };
    if len > max {
        return Err(HeadError::TooLarge);
    }
    let (Some(status), Some(minor)) = (res.code, res.version) else {
        return Err(HeadError::Bad("malformed status line"));
    };
    if !(100..=999).contains(&status) {
        return Err(HeadError::Bad("invalid status code"));
    }
    // Header lines are checked in the header loop.
    let lines_crlf = !head_ends_have_bare_lf(buf, len, 0);
    head.status = status;
    head.minor = minor;
    head.lines = true;
    head.headers.clear();
    let mut te: Option<bool> = None;
    let mut upgrade = None;
    let f = header_loop(
        buf,
        res.headers,
        minor,
        lines_crlf,
        &mut head.headers,
        false,
        |kind, value, _| {
            if kind == Known::TransferEncoding {
                let last = value.rsplit(|&b| b == b',').next().map(trim).unwrap_or(&[]);
                te = Some(te.unwrap_or(true) && eq_lower(last, b"chunked"));
            } else if kind == Known::Upgrade {
                upgrade = Some(offset(buf, value));
            }
            Ok(())
        },
    )?;
    head.upgrade = upgrade;
    let (mut close, length) = (f.close, f.length);
    let no_body = head_request || (100..200).contains(&status) || status == 204 || status == 304;
    let body = if no_body {
        BodyKind::None
    } else {
        match (te, length) {
            (Some(true), _) => BodyKind::Chunked,
            (Some(false), _) => {
                close = true;
                BodyKind::UntilClose
            }
            (None, Some(n)) => BodyKind::Length(n),
            (None, None) => {
                close = true;
                BodyKind::UntilClose
            }
        }
    };
    if te.is_some() && length.is_some() {
        // Both framings: the length is ignored (RFC 9112 6.3) and the
        // connection cannot be trusted afterwards.
        close = true;
    }
    Ok(Parsed::Complete(ResponseFraming {
        len,
        body,
        close,
        crlf: f.crlf,
    }))
}
