//! HTTP/1.1 message heads: parsing on `httparse` into offsets (no copies),
//! strict RFC 9112 framing checks, and the hop-by-hop header rules.
//!
//! A parsed head keeps byte ranges into the connection's read buffer, so a
//! header is forwarded by copying its original bytes, never re-allocated.

use std::mem::MaybeUninit;
use std::ops::Range;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Length(u64),
    Chunked,
    /// Response only: the body runs until the upstream closes.
    UntilClose,
}

/// A header's name and value as ranges into the buffer the head was parsed from.
#[derive(Debug, Clone)]
pub struct HeaderRef {
    pub name: Range<usize>,
    pub value: Range<usize>,
    /// True for headers that must not be forwarded (hop-by-hop or ones the
    /// gateway rewrites itself).
    pub skip: bool,
}

/// A request head, with its framing already decided.
#[derive(Debug, Clone, Default)]
pub struct RequestHead {
    /// Length of the head in the buffer, including the final CRLF.
    pub len: usize,
    pub method: Range<usize>,
    pub target: Range<usize>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub headers: Vec<HeaderRef>,
    pub body: Option<BodyKind>,
    pub host: Option<Range<usize>>,
    /// Values of every `X-Forwarded-For` header, in order; the gateway
    /// forwards them joined, with the client's address appended.
    pub xff: Vec<Range<usize>>,
    /// The client asked to close after this request (or is HTTP/1.0 without keep-alive).
    pub close: bool,
    pub expect_continue: bool,
    /// The `Upgrade` value of an HTTP/1.1 request whose `Connection` names
    /// `upgrade` (and that has no body): what it asks to switch to.
    pub upgrade: Option<Range<usize>>,
}

/// A response head from an upstream.
#[derive(Debug, Clone, Default)]
pub struct ResponseHead {
    pub len: usize,
    pub status: u16,
    pub minor: u8,
    pub headers: Vec<HeaderRef>,
    pub body: Option<BodyKind>,
    /// The upstream will close (or did not promise keep-alive).
    pub close: bool,
    /// Every line of the head ends in CRLF, so its lines can be copied as
    /// received (see [`append_header_lines`]).
    pub crlf: bool,
    /// The `Upgrade` value (the protocol a `101` switches to).
    pub upgrade: Option<Range<usize>>,
}

impl RequestHead {
    pub fn body(&self) -> BodyKind {
        self.body.unwrap_or(BodyKind::None)
    }
}

impl ResponseHead {
    pub fn body(&self) -> BodyKind {
        self.body.unwrap_or(BodyKind::None)
    }
}

fn offset(buf: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - buf.as_ptr() as usize;
    start..start + part.len()
}

/// The headers the codec treats specially, found by length first so an
/// ordinary header costs one or two comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
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

/// `b` equals `lower` ignoring ASCII case, where `lower` is a literal with
/// no uppercase letters (a header name or token as the RFCs spell it).
///
/// Exact, and without a branch per byte: where `lower` has a letter, the
/// byte of `b` must equal it once its case bit (0x20) is set, which only
/// that letter's two cases do; elsewhere the bytes must be equal. Header
/// names and tokens are short, so this is a few instructions per byte where
/// `eq_ignore_ascii_case` takes a compare and branch for each.
#[inline]
pub(crate) fn eq_lower(b: &[u8], lower: &[u8]) -> bool {
    debug_assert!(!lower.iter().any(u8::is_ascii_uppercase));
    let fold = |x: u8, l: u8| {
        let case = if l.is_ascii_lowercase() { 0x20 } else { 0 };
        (x | case) ^ l
    };
    // Most names of the right length differ in their first byte: check it
    // before the rest.
    b.len() == lower.len()
        && (b.is_empty() || fold(b[0], lower[0]) == 0)
        && b.iter()
            .zip(lower)
            .fold(0u8, |diff, (&x, &l)| diff | fold(x, l))
            == 0
}

fn classify(name: &[u8]) -> Known {
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
fn is_hop_by_hop(k: Known) -> bool {
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

/// Bytes of a reg-name (unreserved, pct-encoded, sub-delims).
static HOST_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            );
        i += 1;
    }
    t
};

/// A Host value is a reg-name or an IP literal, with an optional port
/// (RFC 9110 7.2, RFC 3986 3.2.2); anything else (spaces, a path, a
/// userinfo) is refused rather than routed on and copied upstream. Empty
/// is allowed, as RFC 9112 3.2 asks of a target without an authority.
/// The port is found from the end (digits after the last colon), then
/// the rest takes one table lookup per byte, without a branch.
#[inline]
pub(crate) fn valid_host(v: &[u8]) -> bool {
    let mut end = v.len();
    while end > 0 && v[end - 1].is_ascii_digit() {
        end -= 1;
    }
    let host = if end > 0 && v[end - 1] == b':' && v.len() - end <= 5 {
        &v[..end - 1]
    } else {
        v
    };
    if host.first() == Some(&b'[') {
        return host.len() > 2
            && host[host.len() - 1] == b']'
            && host[1..host.len() - 1]
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
    }
    host.iter()
        .fold(true, |ok, &b| ok & HOST_BYTE[usize::from(b)])
}

/// Where `b` first occurs in `hay`. Most slices searched per request (a
/// path, a Host value) are shorter than one vector, and there a plain loop
/// costs less than memchr's dispatch and set-up (callgrind: about 120
/// instructions fewer per request over the router's, target's and Host
/// searches).
#[inline]
pub(crate) fn find_byte(b: u8, hay: &[u8]) -> Option<usize> {
    if hay.len() < 32 {
        hay.iter().position(|&x| x == b)
    } else {
        memchr::memchr(b, hay)
    }
}

/// Where `b` last occurs in `hay`; see [`find_byte`].
#[inline]
pub(crate) fn rfind_byte(b: u8, hay: &[u8]) -> Option<usize> {
    if hay.len() < 32 {
        hay.iter().rposition(|&x| x == b)
    } else {
        memchr::memrchr(b, hay)
    }
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
fn parse_content_length(v: &[u8]) -> Option<u64> {
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

pub fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let Some(start) = start else { return &[] };
    let end = v
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(start);
    &v[start..=end]
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

/// Parses a request head from `buf` (which starts at the head). `max` is the
/// largest head allowed; a partial head already longer than that is
/// `TooLarge`.
pub fn parse_request(
    buf: &[u8],
    max: usize,
    head: &mut RequestHead,
) -> Result<Parsed<()>, HeadError> {
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
    head.len = len;
    head.method = offset(buf, method.as_bytes());
    head.target = offset(buf, path.as_bytes());
    head.minor = minor;
    head.headers.clear();
    head.host = None;
    head.xff.clear();
    head.expect_continue = false;
    let mut chunked = false;
    let mut te_seen = false;
    head.upgrade = None;
    let mut upgrade = None;
    let (host, xff, expect_continue) = (&mut head.host, &mut head.xff, &mut head.expect_continue);
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
                    *expect_continue = minor == 1;
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
    head.close = close;
    head.body = Some(if chunked {
        BodyKind::Chunked
    } else {
        match length {
            Some(0) | None => BodyKind::None,
            Some(n) => BodyKind::Length(n),
        }
    });
    Ok(Parsed::Complete(()))
}

/// What the header loop found that frames a message.
struct Framing {
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
) -> Result<Framing, HeadError> {
    let mut f = Framing {
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

/// Parses a response head from an upstream. `head_request` says whether
/// the request was HEAD (then no body follows whatever the headers say).
pub fn parse_response(
    buf: &[u8],
    max: usize,
    head_request: bool,
    head: &mut ResponseHead,
) -> Result<Parsed<()>, HeadError> {
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
    head.len = len;
    // Header lines are checked in the header loop.
    let lines_crlf = !head_ends_have_bare_lf(buf, len, 0);
    head.status = status;
    head.minor = minor;
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
    head.crlf = f.crlf;
    head.upgrade = upgrade;
    let (mut close, length) = (f.close, f.length);
    let no_body = head_request || (100..200).contains(&status) || status == 204 || status == 304;
    head.body = Some(if no_body {
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
    });
    if te.is_some() && length.is_some() {
        // Both framings: the length is ignored (RFC 9112 6.3) and the
        // connection cannot be trusted afterwards.
        close = true;
    }
    head.close = close;
    Ok(Parsed::Complete(()))
}

#[cfg(test)]
mod tests;
