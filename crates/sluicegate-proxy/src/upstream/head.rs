//! Heads on the upstream side, encoded from the protocol-neutral head: the
//! request head as it goes upstream (Host, X-Forwarded-*, framing) as
//! HTTP/1.1 text or as an HTTP/2 request's fields, and the response head
//! read back (an HTTP/1.1 head parsed, 1xx relayed; an HTTP/2 stream's
//! HEADERS laid out) and rewritten for the client, as HTTP/1.1 text or
//! HTTP/2 fields.

use std::time::Instant;

use crate::transport::stream::Stream;

use crate::balance::endpoint::EndpointState;
use crate::clock::deadline::Wait;
use crate::filters::{Edits, HeaderOpsRt};
use crate::observe::trace::Ids;
use crate::proto::bytes;
use crate::proto::codec::{self, BodyKind, Parsed, RequestFraming};
use crate::proto::compress::{self, Recode};
use crate::proto::head::{HeaderRef, RequestHead};
use crate::proto::http2::exchange::{connection_specific, AnswerBody, Exchange};
use crate::proto::http2::response::{append_field, client_fields, fill_response_head};
use crate::proto::http2::upstream::UpExchange;
use crate::proto::response;
use crate::route::target::Target;
use crate::transport::io::{write_all_by, ReadError, RecvBuf};
use crate::worker::{Bufs, Downstream, Worker};

/// Largest response head accepted from an upstream.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// Closed or reset before any response byte.
    ClosedEarly,
    Timeout,
    Invalid,
}

/// What the X-Forwarded-* headers say about the client's connection.
#[derive(Clone, Copy)]
pub(crate) struct Forwarded<'a> {
    /// The connection's client address, appended to X-Forwarded-For.
    pub(crate) client: &'a str,
    /// The connection is TLS: X-Forwarded-Proto is `https`.
    pub(crate) https: bool,
    /// X-Forwarded-Host when it is not the request's own host: a request
    /// the gateway makes on a client's behalf carries that client's.
    pub(crate) host: Option<&'a [u8]>,
}

/// Writes the request head as it goes upstream into `out`, framed as
/// `framing` says (the client's head in `raw`). `forwarded` is
/// set when the service takes X-Forwarded-* headers; the ones the client
/// sent are never passed on as received. `upgrade`: the client's
/// `Upgrade` value, for an upgrade the route allows (then `Connection:
/// upgrade` goes with it).
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_request_head(
    out: &mut Vec<u8>,
    raw: &[u8],
    req: &RequestHead,
    framing: &RequestFraming,
    t: &Target,
    strip: usize,
    forwarded: Option<Forwarded<'_>>,
    ep: &EndpointState,
    edits: &Edits,
    ids: &Ids,
    upgrade: Option<&[u8]>,
) {
    out.clear();
    out.extend_from_slice(&raw[req.method.clone()]);
    out.push(b' ');
    out.extend_from_slice(upstream_path(raw, t, strip, edits));
    match &edits.query {
        Some(q) => out.extend_from_slice(q),
        None => out.extend_from_slice(&raw[t.query.clone()]),
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let replace_host = t.authority.is_some();
    codec::append_header_lines(out, raw, &req.headers, framing.len, req.lines, |h| {
        !(h.skip || (replace_host && raw[h.name.clone()].eq_ignore_ascii_case(b"host")))
    });
    if replace_host || req.host.is_none() {
        out.extend_from_slice(b"host: ");
        match &t.authority {
            Some(a) => out.extend_from_slice(&raw[a.clone()]),
            None => out.extend_from_slice(ep.name.as_bytes()),
        }
        out.extend_from_slice(b"\r\n");
    }
    if let Some(f) = &forwarded {
        out.extend_from_slice(b"x-forwarded-for: ");
        for v in &req.xff {
            out.extend_from_slice(&raw[v.clone()]);
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(f.client.as_bytes());
        out.extend_from_slice(if f.https {
            b"\r\nx-forwarded-proto: https\r\n"
        } else {
            b"\r\nx-forwarded-proto: http\r\n"
        });
    }
    edits.request_headers.write_h1(out);
    ids.write_upstream_h1(out);
    if let Some(h) = forwarded.and_then(|f| f.host.or_else(|| t.host(raw))) {
        out.extend_from_slice(b"x-forwarded-host: ");
        out.extend_from_slice(h);
        out.extend_from_slice(b"\r\n");
    }
    match framing.body {
        BodyKind::Length(n) => response::content_length(out, n),
        BodyKind::Chunked | BodyKind::Stream => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n")
        }
        BodyKind::None | BodyKind::UntilClose => {}
    }
    if let Some(u) = upgrade {
        out.extend_from_slice(b"connection: upgrade\r\nupgrade: ");
        out.extend_from_slice(u);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// The request head as it goes to an HTTP/2 upstream, encoded from the
/// same head, edits and forwarding facts as [`write_request_head`]'s
/// HTTP/1.1 text: `:authority` from the target's authority, the `Host`,
/// or the endpoint's name; the fields the gateway keeps, then its own.
/// The values are slices of one copy of the client's head. `None` when a
/// part is not valid in HTTP/2 (answered 502 by the caller, like an
/// upstream that cannot be reached).
#[allow(clippy::too_many_arguments)]
pub(crate) fn h2_request_head(
    raw: &[u8],
    req: &RequestHead,
    head_len: usize,
    t: &Target,
    strip: usize,
    forwarded: Option<Forwarded<'_>>,
    ep: &EndpointState,
    edits: &Edits,
    ids: &Ids,
    https: bool,
    grpc: bool,
) -> Option<http::Request<()>> {
    use http::header::{HeaderName, HeaderValue};
    let shared = ::bytes::Bytes::copy_from_slice(&raw[..head_len]);
    let mut pq = Vec::with_capacity(t.path.len() + t.query.len() + 1);
    pq.extend_from_slice(upstream_path(raw, t, strip, edits));
    match &edits.query {
        Some(q) => pq.extend_from_slice(q),
        None => pq.extend_from_slice(&raw[t.query.clone()]),
    }
    let authority = match (&t.authority, &req.host) {
        (Some(a), _) | (None, Some(a)) => shared.slice(a.clone()),
        (None, None) => ::bytes::Bytes::copy_from_slice(ep.name.as_bytes()),
    };
    let uri = http::Uri::builder()
        .scheme(if https { "https" } else { "http" })
        .authority(http::uri::Authority::from_maybe_shared(authority).ok()?)
        .path_and_query(http::uri::PathAndQuery::from_maybe_shared(pq).ok()?)
        .build()
        .ok()?;
    let mut out = http::Request::new(());
    *out.method_mut() = http::Method::from_bytes(&raw[req.method.clone()]).ok()?;
    *out.uri_mut() = uri;
    let fields = out.headers_mut();
    fields.reserve(req.headers.len() + 4);
    for h in &req.headers {
        let name = &raw[h.name.clone()];
        if h.skip || connection_specific(name) || bytes::eq_lower(name, b"host") {
            continue;
        }
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name),
            HeaderValue::from_maybe_shared(shared.slice(h.value.clone())),
        ) else {
            continue;
        };
        fields.append(n, v);
    }
    let mut add = |name: &[u8], value: &[u8]| {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            fields.append(n, v);
        }
    };
    if let Some(f) = &forwarded {
        let mut xff = Vec::new();
        for v in &req.xff {
            xff.extend_from_slice(&raw[v.clone()]);
            xff.extend_from_slice(b", ");
        }
        xff.extend_from_slice(f.client.as_bytes());
        add(b"x-forwarded-for", &xff);
        add(
            b"x-forwarded-proto",
            if f.https { b"https" } else { b"http" },
        );
    }
    edits.request_headers.iter().for_each(|(n, v)| add(n, v));
    ids.each_upstream(&mut add);
    if let Some(h) = forwarded.and_then(|f| f.host.or_else(|| t.host(raw))) {
        add(b"x-forwarded-host", h);
    }
    if grpc {
        // gRPC servers want `te: trailers` (hop-by-hop on HTTP/1.1, so
        // never forwarded as received).
        add(b"te", b"trailers");
    }
    Some(out)
}

/// The path as it goes upstream: the filters' new path, or the target's
/// with the route's prefix (`strip` bytes) taken off.
pub(crate) fn upstream_path<'a>(
    raw: &'a [u8],
    t: &Target,
    strip: usize,
    edits: &'a Edits,
) -> &'a [u8] {
    let path = edits.path.as_deref().unwrap_or_else(|| t.path(raw));
    if !edits.path_final && strip > 0 && strip <= path.len() {
        let rest = &path[strip..];
        if rest.is_empty() {
            b"/"
        } else {
            rest
        }
    } else {
        path
    }
}

/// Resolves when the upstream sends something while the request body is
/// still being streamed: true when response bytes arrived (kept in `upb`),
/// false when it closed or failed. Stale readiness from a pooled
/// connection's previous response is cleared by the failed read.
pub(crate) async fn early_response(up: &Stream, upb: &mut RecvBuf) -> bool {
    if let Stream::H2Up(x) = up {
        // The head waits in the stream until read.
        return std::future::poll_fn(|cx| x.poll_head_ready(cx)).await;
    }
    loop {
        if crate::transport::io::read_ready(up).await.is_err() {
            return false;
        }
        match upb.try_fill(up, MAX_RESPONSE_HEAD) {
            Ok(None) => continue,
            Ok(Some(n)) => return n > 0,
            Err(_) => return false,
        }
    }
}

/// Reads the final response head into `bufs.res` (its framing into
/// `bufs.res_framing`), relaying 1xx informational responses (other than
/// 100) to clients that take them (HTTP/1.1 and HTTP/2, not HTTP/1.0;
/// `down`: the client's connection, none for a request the gateway made
/// itself). A `101` is final when the request asked for an upgrade
/// (`upgrading`), and invalid otherwise.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn read_response_head(
    up: &Stream,
    worker: &Worker,
    down: Option<&Downstream<'_>>,
    bufs: &mut Bufs,
    is_head: bool,
    client_minor: u8,
    deadline: Instant,
    upgrading: bool,
) -> Result<(), HeadError> {
    // The wait, in the client connection's own deadline slot when there
    // is one.
    let wait = || match down {
        Some(d) => worker.until(deadline).in_slot(d.slot),
        None => worker.until(deadline),
    };
    if let Stream::H2Up(x) = up {
        return read_h2_response_head(x, wait(), bufs, is_head).await;
    }
    let mut got = false;
    loop {
        // Right after the request went out nothing is there yet: read first.
        let parsed = if bufs.upb.is_empty() {
            Ok(Parsed::Partial)
        } else {
            codec::parse_response(bufs.upb.filled(), MAX_RESPONSE_HEAD, is_head, &mut bufs.res)
        };
        match parsed {
            Ok(Parsed::Complete(framing)) => {
                bufs.res_framing = framing;
                let status = bufs.res.status;
                if status >= 200 {
                    return Ok(());
                }
                if status == 101 {
                    return if upgrading && bufs.res.upgrade.is_some() {
                        Ok(())
                    } else {
                        Err(HeadError::Invalid)
                    };
                }
                if let Some(down) = down.filter(|_| status != 100 && client_minor == 1) {
                    relay_informational(down, bufs, framing.len, deadline).await;
                }
                bufs.upb.consume(framing.len);
                got = true;
            }
            Ok(Parsed::Partial) => match bufs.upb.fill(up, MAX_RESPONSE_HEAD, wait()).await {
                Ok(0) | Err(ReadError::Io(_) | ReadError::Shutdown) => {
                    return Err(if bufs.upb.is_empty() && !got {
                        HeadError::ClosedEarly
                    } else {
                        HeadError::Invalid
                    })
                }
                Ok(_) => {}
                Err(ReadError::Timeout) => return Err(HeadError::Timeout),
            },
            Err(_) => return Err(HeadError::Invalid),
        }
    }
}

/// Relays the informational head (`len` bytes in `bufs.upb`, 103 Early
/// Hints say) to the client: as it came to an HTTP/1.1 client, as
/// informational fields to an HTTP/2 stream. Whether it got there does not
/// matter: the final head's write tells.
#[cold]
async fn relay_informational(down: &Downstream<'_>, bufs: &Bufs, len: usize, deadline: Instant) {
    let raw = bufs.upb.filled();
    match down.client.h2() {
        Some(x) => {
            let fields = client_fields(raw, len, &bufs.res.headers, 0, |h| !h.skip);
            let _ = x.informational(bufs.res.status, fields);
        }
        None => {
            let _ = write_all_by(down.client, &raw[..len], down.worker.until(deadline)).await;
        }
    }
}

/// [`read_response_head`] from an HTTP/2 upstream's stream: its HEADERS
/// laid out in `bufs.upb` (informational heads are the framing layer's).
#[cold]
async fn read_h2_response_head(
    x: &UpExchange,
    wait: Wait<'_>,
    bufs: &mut Bufs,
    is_head: bool,
) -> Result<(), HeadError> {
    let got = wait.bound(std::future::poll_fn(|cx| x.poll_head(cx))).await;
    let head = match got {
        Ok(Ok(head)) => head,
        Ok(Err(_)) => return Err(HeadError::ClosedEarly),
        Err(_) => return Err(HeadError::Timeout),
    };
    bufs.upb.clear();
    bufs.res_framing =
        fill_response_head(&head.parts, head.end, is_head, &mut bufs.upb, &mut bufs.res);
    Ok(())
}

/// Writes the response head as it goes to the client into `bufs.out` and
/// consumes the upstream's head from `bufs.upb`. To an HTTP/2 client the
/// head goes at once, as the same fields (see [`h2_response_head`]), and
/// `bufs.out` is left empty for the body. `recode`: the body is sent
/// compressed (`Content-Encoding` set, `Vary` merged, a strong `ETag`
/// made weak, no `Content-Length` nor `Accept-Ranges`, chunked to an
/// HTTP/1.1 client), or as it is with `Vary` merged, or as it is.
pub(crate) fn write_response_head(
    bufs: &mut Bufs,
    close: bool,
    client_minor: u8,
    client: &Stream,
    recode: Recode,
) {
    if let Stream::H2(x) = client {
        h2_response_head(bufs, x, recode);
        return;
    }
    let raw = bufs.upb.filled();
    let res = &bufs.res;
    let framing = bufs.res_framing;
    let out = &mut bufs.out;
    out.clear();
    // Status line: our version, the upstream's code and reason (the
    // standard one when its head came as fields).
    out.extend_from_slice(b"HTTP/1.1 ");
    if res.lines {
        let line_end = bytes::find_byte(b'\n', raw).unwrap_or(0);
        let mut line = &raw[9.min(line_end)..line_end];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        out.extend_from_slice(line);
    } else {
        out.extend_from_slice(itoa::Buffer::new().format(res.status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(response::reason(res.status).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    let body = framing.body;
    let ops = bufs.edits.response_ops.as_deref();
    let rid = &bufs.ids.rid;
    let keep = kept(raw, body, res.status, ops, bufs.edits.cors, rid.name());
    let (len, crlf) = (framing.len, framing.crlf);
    match recode {
        Recode::Keep => codec::append_header_lines(out, raw, &res.headers, len, crlf, &keep),
        _ => {
            let kept = |h: &HeaderRef| keep(h) && !rewritten(&raw[h.name.clone()], recode);
            codec::append_header_lines(out, raw, &res.headers, len, crlf, kept);
        }
    }
    drop(keep);
    if let Some(o) = ops {
        o.fields.write_h1(out);
    }
    recoded_fields(raw, &res.headers, recode, |n, v| {
        out.extend_from_slice(n);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    });
    match body {
        _ if matches!(recode, Recode::Coded(_)) => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n")
        }
        BodyKind::Length(n) => response::content_length(out, n),
        BodyKind::Chunked | BodyKind::Stream if client_minor == 1 => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n")
        }
        _ => {}
    }
    bufs.edits.response_headers.write_h1(out);
    rid.write_h1(out);
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if client_minor == 0 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    bufs.upb.consume(len);
}

/// Which of the upstream's response fields go on to the client: not the
/// hop-by-hop ones nor those the gateway rewrites (a length without a body,
/// of HEAD or 304, still describes the resource and is kept), nor those
/// the route's header ops drop, nor the upstream's CORS fields where the
/// route answers CORS itself, nor the upstream's request id field
/// (`rid_name`: the gateway sends the request's own).
fn kept<'a>(
    raw: &'a [u8],
    body: BodyKind,
    status: u16,
    ops: Option<&'a HeaderOpsRt>,
    cors: bool,
    rid_name: &'a [u8],
) -> impl Fn(&HeaderRef) -> bool + 'a {
    let keep_length = body == BodyKind::None && status != 204 && status >= 200;
    move |h| {
        let name = &raw[h.name.clone()];
        (!h.skip || (keep_length && bytes::eq_lower(name, b"content-length")))
            && !ops.is_some_and(|o| o.drops(name))
            && !(cors && name.len() > 15 && name[..15].eq_ignore_ascii_case(b"access-control-"))
            && !(name.len() == rid_name.len() && name.eq_ignore_ascii_case(rid_name))
    }
}

/// The response head to an HTTP/2 client: the fields [`kept`] and those the
/// gateway adds, handed to the stream as a header map (values as slices of
/// one copy of the upstream's head). A stream that is gone by now fails
/// the body's first write.
fn h2_response_head(bufs: &mut Bufs, x: &Exchange, recode: Recode) {
    let raw = bufs.upb.filled();
    let res = &bufs.res;
    let framing = bufs.res_framing;
    let ops = bufs.edits.response_ops.as_deref();
    let rid = &bufs.ids.rid;
    let keep = kept(
        raw,
        framing.body,
        res.status,
        ops,
        bufs.edits.cors,
        rid.name(),
    );
    let mut fields = match recode {
        Recode::Keep => client_fields(raw, framing.len, &res.headers, 2, &keep),
        _ => {
            let kept = |h: &HeaderRef| keep(h) && !rewritten(&raw[h.name.clone()], recode);
            client_fields(raw, framing.len, &res.headers, 5, kept)
        }
    };
    drop(keep);
    let mut add = |name: &[u8], value: &[u8]| append_field(&mut fields, name, value);
    if let Some(o) = ops {
        o.fields.iter().for_each(|(n, v)| add(n, v));
    }
    recoded_fields(raw, &res.headers, recode, &mut add);
    let body = match framing.body {
        _ if matches!(recode, Recode::Coded(_)) => AnswerBody::UntilEnd,
        BodyKind::None => AnswerBody::Empty,
        BodyKind::Length(n) => {
            add(b"content-length", itoa::Buffer::new().format(n).as_bytes());
            AnswerBody::Length(n)
        }
        // Relayed as data, its trailers apart (`body::relay_body`).
        BodyKind::Chunked | BodyKind::UntilClose | BodyKind::Stream => AnswerBody::UntilEnd,
    };
    bufs.edits
        .response_headers
        .iter()
        .for_each(|(n, v)| add(n, v));
    add(rid.name(), rid.value());
    let _ = x.answer(res.status, fields, body);
    bufs.out.clear();
    bufs.upb.consume(framing.len);
}

/// The upstream's fields that `recode` writes in a form of its own
/// ([`recoded_fields`]) or not at all (ranges of a coded body are not
/// served): `Vary`, and for a compressed answer `ETag` and
/// `Accept-Ranges` too.
fn rewritten(name: &[u8], recode: Recode) -> bool {
    match recode {
        Recode::Keep => false,
        Recode::Vary => bytes::eq_lower(name, b"vary"),
        Recode::Coded(_) => {
            bytes::eq_lower(name, b"etag")
                || bytes::eq_lower(name, b"vary")
                || bytes::eq_lower(name, b"accept-ranges")
        }
    }
}

/// The fields `recode` adds: `Vary` with `Accept-Encoding` merged into
/// the upstream's (`headers` over `raw`), and for a compressed answer
/// `Content-Encoding` and its `ETag` made weak.
fn recoded_fields(
    raw: &[u8],
    headers: &[HeaderRef],
    recode: Recode,
    mut add: impl FnMut(&[u8], &[u8]),
) {
    if recode == Recode::Keep {
        return;
    }
    if let Recode::Coded(coding) = recode {
        add(b"content-encoding", coding.token().as_bytes());
    }
    let named = |name: &'static [u8]| {
        headers
            .iter()
            .filter(move |h| bytes::eq_lower(&raw[h.name.clone()], name))
            .map(|h| &raw[h.value.clone()])
    };
    let mut v = Vec::with_capacity(64);
    compress::merge_vary(named(b"vary"), &mut v);
    add(b"vary", &v);
    if let (Recode::Coded(_), Some(etag)) = (recode, named(b"etag").next()) {
        v.clear();
        compress::weak_etag(etag, &mut v);
        add(b"etag", &v);
    }
}

/// The `grpc-status` in the response head in `bufs` (a trailers-only gRPC
/// answer carries it there).
pub(crate) fn head_grpc_status(bufs: &Bufs) -> Option<u8> {
    let raw = bufs.upb.filled();
    bufs.res
        .headers
        .iter()
        .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(b"grpc-status"))
        .and_then(|h| crate::upstream::body::grpc_code(&raw[h.value.clone()]))
}
