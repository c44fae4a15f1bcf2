//! Message bodies on the forwarding path, as data, trailers and an end:
//! the request body streamed upstream (chunked to an HTTP/1.1 upstream
//! when it has no length, as DATA to an HTTP/2 one; an HTTP/2 client's
//! trailers as the last chunk's trailer fields or a trailing HEADERS),
//! the response body streamed back (an HTTP/2 upstream's trailers relayed
//! as trailers), and the client bytes read and dropped when an answer
//! came before the body ended. A mirrored request's body is teed as it
//! is streamed (its data, never its framing), and its copy is sent from
//! that feed ([`send_fed`]).

use std::time::{Duration, Instant};

use crate::transport::stream::Stream;

use crate::clock::deadline::{Deadlines, Wait};
use crate::proto::chunked::{write_chunk_header, ChunkedDecoder, LAST_CHUNK};
use crate::proto::codec::BodyKind;
use crate::proto::http2::exchange::trailer_map;
use crate::transport::io::{write_all_by, RecvBuf};
use crate::worker::tee::{Feed, Tee};
use crate::worker::{Bufs, Downstream, Worker};

/// Reads while streaming bodies use buffers up to this size.
pub(crate) const STREAM_BUF: usize = 64 * 1024;
/// Flush re-encoded chunks once this much is pending.
const FLUSH_AT: usize = 32 * 1024;

/// Counts a write to the client that failed because the client did not
/// read within `timeouts.client_write` (the caller closes the connection).
/// Called on write errors only, so a request that writes pays nothing.
#[cold]
pub(crate) fn client_write_failed(worker: &Worker, e: &std::io::Error) {
    if e.kind() == std::io::ErrorKind::TimedOut {
        worker
            .shared
            .global
            .client_write_timeouts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

pub(crate) enum BodyError {
    /// The client went away or stalled.
    Client,
    Upstream,
    BadChunk,
    TooLarge,
}

/// Reads and drops `n` body bytes from the client.
pub async fn discard(
    client: &Stream,
    inb: &mut RecvBuf,
    mut n: u64,
    wait: Wait<'_>,
) -> Result<(), ()> {
    loop {
        let take = (inb.len() as u64).min(n) as usize;
        inb.consume(take);
        n -= take as u64;
        if n == 0 {
            return Ok(());
        }
        match inb.fill(client, STREAM_BUF, wait).await {
            Ok(0) | Err(_) => return Err(()),
            Ok(_) => {}
        }
    }
}

/// After answering before the client finished sending its body, reads and
/// drops what it still sends (bounded in bytes and time) before the close,
/// so the client reads the answer instead of a reset.
pub(crate) async fn linger(dl: &Deadlines, client: &Stream, inb: &mut RecvBuf, max: u64) {
    const IDLE: Duration = Duration::from_secs(1);
    const TOTAL: Duration = Duration::from_secs(10);
    let until = Instant::now() + TOTAL;
    let mut dropped = 0u64;
    while dropped <= max && Instant::now() < until {
        inb.clear();
        match inb
            .fill(
                client,
                STREAM_BUF,
                dl.at((Instant::now() + IDLE).min(until)),
            )
            .await
        {
            Ok(n) if n > 0 => dropped += n as u64,
            _ => break,
        }
    }
}

/// Streams the rest of a request body upstream, each read waiting at most
/// `idle` for the client, a chunked one refused past `max_body` bytes;
/// returns the bytes sent. Its data is copied to `tee` as it goes, when
/// the request is mirrored, and the copy ended with the body.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn send_body(
    dl: &Deadlines,
    client: &Stream,
    up: &Stream,
    inb: &mut RecvBuf,
    out: &mut Vec<u8>,
    body: BodyKind,
    mut remaining: u64,
    max_body: u64,
    idle: Duration,
    tee: Option<&Tee>,
) -> Result<u64, BodyError> {
    let mut sent = 0;
    // An HTTP/2 upstream's stream takes the data as it is, and its end
    // explicitly; an HTTP/1.1 one, the body framed.
    let framed = !matches!(up, Stream::H2Up(_));
    let upstream_failed = |_| BodyError::Upstream;
    match body {
        BodyKind::Length(_) => {
            while remaining > 0 {
                if inb.is_empty() {
                    match inb.fill(client, STREAM_BUF, dl.after(idle)).await {
                        Ok(0) | Err(_) => return Err(BodyError::Client),
                        Ok(_) => {}
                    }
                }
                let take = (inb.len() as u64).min(remaining) as usize;
                if let Some(t) = tee {
                    t.push(&inb.filled()[..take]);
                }
                write_all_by(up, &inb.filled()[..take], dl.after(idle))
                    .await
                    .map_err(|_| BodyError::Upstream)?;
                inb.consume(take);
                remaining -= take as u64;
                sent += take as u64;
            }
            up.end_body().map_err(upstream_failed)?;
        }
        BodyKind::Chunked => {
            let mut dec = ChunkedDecoder::new();
            loop {
                let step = dec.step(inb.filled()).map_err(|_| BodyError::BadChunk)?;
                if let Some(r) = step.data {
                    if framed {
                        write_chunk_header(out, r.len());
                    }
                    if let Some(t) = tee {
                        t.push(&inb.filled()[r.clone()]);
                    }
                    out.extend_from_slice(&inb.filled()[r]);
                    if framed {
                        out.extend_from_slice(b"\r\n");
                    }
                }
                inb.consume(step.consumed);
                if dec.total > max_body {
                    return Err(BodyError::TooLarge);
                }
                if dec.is_done() && framed {
                    out.extend_from_slice(LAST_CHUNK);
                }
                if dec.is_done() || out.len() >= FLUSH_AT || inb.is_empty() {
                    write_all_by(up, out, dl.after(idle))
                        .await
                        .map_err(|_| BodyError::Upstream)?;
                    out.clear();
                }
                if dec.is_done() {
                    sent = dec.total;
                    up.end_body().map_err(upstream_failed)?;
                    break;
                }
                if inb.is_empty() {
                    match inb.fill(client, STREAM_BUF, dl.after(idle)).await {
                        Ok(0) | Err(_) => return Err(BodyError::Client),
                        Ok(_) => {}
                    }
                }
            }
        }
        BodyKind::Stream => {
            // Data as the client's HTTP/2 stream gives it, each read sent
            // as one chunk; the head (and anything before) goes before the
            // first wait.
            loop {
                if !out.is_empty() {
                    write_all_by(up, out, dl.after(idle))
                        .await
                        .map_err(|_| BodyError::Upstream)?;
                    out.clear();
                }
                match inb.fill(client, STREAM_BUF, dl.after(idle)).await {
                    Ok(0) => {
                        // The end, with the client's trailers when it
                        // sent some: the last chunk's trailer fields, or
                        // a trailing HEADERS.
                        let trailers = client.take_trailers().and_then(forwardable_trailers);
                        if !framed {
                            up.end_body_with(trailers).map_err(upstream_failed)?;
                            break;
                        }
                        write_last_chunk(out, trailers.as_ref());
                        write_all_by(up, out, dl.after(idle))
                            .await
                            .map_err(upstream_failed)?;
                        out.clear();
                        break;
                    }
                    Ok(_) => {
                        let data = inb.filled();
                        sent += data.len() as u64;
                        if sent > max_body {
                            return Err(BodyError::TooLarge);
                        }
                        if framed {
                            write_chunk_header(out, data.len());
                        }
                        if let Some(t) = tee {
                            t.push(data);
                        }
                        out.extend_from_slice(data);
                        if framed {
                            out.extend_from_slice(b"\r\n");
                        }
                        inb.clear();
                    }
                    Err(_) => return Err(BodyError::Client),
                }
            }
        }
        BodyKind::None | BodyKind::UntilClose => {}
    }
    if let Some(t) = tee {
        t.end();
    }
    Ok(sent)
}

/// Sends a mirror's copy of a request body upstream from its `feed`,
/// after what `out` still holds when the body is chunked (the head, for
/// an HTTP/1.1 upstream): `remaining` bytes as they are for a body with a
/// length, else chunked (as DATA to an HTTP/2 upstream). Each write waits
/// at most `idle`. A copy cut short is [`BodyError::Client`] (its feed
/// says why), one longer than its length [`BodyError::TooLarge`].
#[allow(clippy::too_many_arguments)]
pub(crate) async fn send_fed(
    dl: &Deadlines,
    up: &Stream,
    out: &mut Vec<u8>,
    feed: &Feed,
    chunked: bool,
    mut remaining: u64,
    idle: Duration,
    fed_idle: Duration,
) -> Result<u64, BodyError> {
    let framed = chunked && !matches!(up, Stream::H2Up(_));
    let mut sent = 0u64;
    if !chunked {
        // The head went with [`super::plan::send_head`].
        out.clear();
    }
    loop {
        if !out.is_empty() {
            write_all_by(up, out, dl.after(idle))
                .await
                .map_err(|_| BodyError::Upstream)?;
            out.clear();
        }
        let next = dl.after(fed_idle).bound(feed.next()).await;
        match next.map_err(|_| BodyError::Client)? {
            Ok(Some(data)) => {
                if !chunked {
                    if data.len() as u64 > remaining {
                        return Err(BodyError::TooLarge);
                    }
                    remaining -= data.len() as u64;
                }
                sent += data.len() as u64;
                if framed {
                    write_chunk_header(out, data.len());
                }
                out.extend_from_slice(&data);
                if framed {
                    out.extend_from_slice(b"\r\n");
                }
            }
            Ok(None) if !chunked && remaining > 0 => return Err(BodyError::Client),
            Ok(None) => {
                if framed {
                    out.extend_from_slice(LAST_CHUNK);
                    write_all_by(up, out, dl.after(idle))
                        .await
                        .map_err(|_| BodyError::Upstream)?;
                    out.clear();
                }
                up.end_body().map_err(|_| BodyError::Upstream)?;
                return Ok(sent);
            }
            Err(_) => return Err(BodyError::Client),
        }
    }
}

/// Why relaying a response body failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The client went away or did not read in time.
    Client,
    /// The upstream failed (closed, stalled, sent a malformed body).
    Upstream,
    /// The upstream's chunked body was malformed from its first chunk line
    /// while the response head was still unsent in `bufs.out`: nothing
    /// reached the client, which can still get an error answer.
    Unsent,
}

/// Streams the response body to the client after the head in `bufs.out`;
/// each read may wait `idle` for the upstream, each write `client_write`
/// (`timeouts.client_write`) for the client. Returns body bytes written; on error, the bytes written
/// so far and what failed.
pub(crate) async fn relay_body(
    down: &Downstream<'_>,
    up: &Stream,
    bufs: &mut Bufs,
    body: BodyKind,
    rechunk: bool,
    idle: Duration,
    client_write: Duration,
) -> Result<u64, (u64, Fault)> {
    let client = down.client;
    // An HTTP/2 client takes the data as it is, its trailers as a trailing
    // HEADERS: nothing is framed for it.
    let rechunk = rechunk && !matches!(client, Stream::H2(_));
    let dl = &down.worker.deadlines;
    let wdl = || dl.after(client_write);
    // A failed write to the client: counted when it timed out.
    let client_failed = |e: std::io::Error, n: u64| {
        client_write_failed(down.worker, &e);
        (n, Fault::Client)
    };
    let mut written = 0u64;
    match body {
        BodyKind::None => {
            write_all_by(client, &bufs.out, wdl())
                .await
                .map_err(|e| client_failed(e, 0))?;
        }
        BodyKind::Length(n) => {
            let take = (bufs.upb.len() as u64).min(n) as usize;
            bufs.out.extend_from_slice(&bufs.upb.filled()[..take]);
            tee(&mut bufs.fill, &bufs.upb.filled()[..take]);
            bufs.upb.consume(take);
            write_all_by(client, &bufs.out, wdl())
                .await
                .map_err(|e| client_failed(e, 0))?;
            written = take as u64;
            while written < n {
                match bufs.upb.fill(up, STREAM_BUF, dl.after(idle)).await {
                    Ok(0) | Err(_) => return Err((written, Fault::Upstream)),
                    Ok(_) => {}
                }
                let take = (bufs.upb.len() as u64).min(n - written) as usize;
                tee(&mut bufs.fill, &bufs.upb.filled()[..take]);
                write_all_by(client, &bufs.upb.filled()[..take], wdl())
                    .await
                    .map_err(|e| client_failed(e, written))?;
                bufs.upb.consume(take);
                written += take as u64;
            }
        }
        BodyKind::Chunked => {
            let mut dec = ChunkedDecoder::new();
            // Trailer fields (gRPC's status), passed on after the last
            // chunk when the body is re-chunked.
            let mut trailers = Vec::new();
            loop {
                let step = match dec.step(bufs.upb.filled()) {
                    Ok(step) => step,
                    // Only the head is in `out`, never written: the first
                    // chunk line came with it and is malformed.
                    Err(_) if written == 0 && !bufs.out.is_empty() => {
                        return Err((0, Fault::Unsent))
                    }
                    Err(_) => return Err((written, Fault::Upstream)),
                };
                if let Some(r) = step.data {
                    if rechunk {
                        write_chunk_header(&mut bufs.out, r.len());
                    }
                    bufs.out.extend_from_slice(&bufs.upb.filled()[r.clone()]);
                    tee(&mut bufs.fill, &bufs.upb.filled()[r.clone()]);
                    if rechunk {
                        bufs.out.extend_from_slice(b"\r\n");
                    }
                    written += r.len() as u64;
                }
                if let Some(r) = step.trailer {
                    trailers.extend_from_slice(&bufs.upb.filled()[r]);
                }
                bufs.upb.consume(step.consumed);
                if dec.is_done() && rechunk {
                    if trailers.is_empty() {
                        bufs.out.extend_from_slice(LAST_CHUNK);
                    } else {
                        bufs.out.extend_from_slice(b"0\r\n");
                        bufs.out.extend_from_slice(&trailers);
                        bufs.out.extend_from_slice(b"\r\n");
                        if bufs.grpc {
                            bufs.grpc_status = grpc_status_in(&trailers).or(bufs.grpc_status);
                        }
                    }
                }
                if dec.is_done() {
                    // Whole: stored before its end reaches the client.
                    if let Some(f) = bufs.fill.as_deref_mut() {
                        f.whole = true;
                        f.commit();
                    }
                }
                if dec.is_done() || bufs.out.len() >= FLUSH_AT || bufs.upb.is_empty() {
                    write_all_by(client, &bufs.out, wdl())
                        .await
                        .map_err(|e| client_failed(e, written))?;
                    bufs.out.clear();
                }
                if dec.is_done() {
                    break;
                }
                if bufs.upb.is_empty() {
                    match bufs.upb.fill(up, STREAM_BUF, dl.after(idle)).await {
                        Ok(0) | Err(_) => return Err((written, Fault::Upstream)),
                        Ok(_) => {}
                    }
                }
            }
            if let Stream::H2(x) = client {
                if bufs.grpc {
                    bufs.grpc_status = grpc_status_in(&trailers).or(bufs.grpc_status);
                }
                let t = trailer_map(&trailers);
                let sent = match t.is_empty() {
                    false => x.send_trailers(t),
                    true => {
                        x.finish();
                        Ok(())
                    }
                };
                sent.map_err(|e| client_failed(e, written))?;
            }
        }
        BodyKind::Stream => {
            // Data events from an HTTP/2 upstream until its stream ends:
            // chunked to an HTTP/1.1 client, as they come otherwise.
            loop {
                let data = bufs.upb.filled();
                if !data.is_empty() {
                    if rechunk {
                        write_chunk_header(&mut bufs.out, data.len());
                    }
                    bufs.out.extend_from_slice(data);
                    tee(&mut bufs.fill, data);
                    if rechunk {
                        bufs.out.extend_from_slice(b"\r\n");
                    }
                    written += data.len() as u64;
                    bufs.upb.clear();
                }
                if !bufs.out.is_empty() {
                    write_all_by(client, &bufs.out, wdl())
                        .await
                        .map_err(|e| client_failed(e, written))?;
                    bufs.out.clear();
                }
                match bufs.upb.fill(up, STREAM_BUF, dl.after(idle)).await {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(_) => return Err((written, Fault::Upstream)),
                }
            }
            end_stream_body(down, up, bufs, rechunk, wdl())
                .await
                .map_err(|e| client_failed(e, written))?;
        }
        BodyKind::UntilClose => {
            written = bufs.upb.len() as u64;
            bufs.out.extend_from_slice(bufs.upb.filled());
            tee(&mut bufs.fill, bufs.upb.filled());
            bufs.upb.clear();
            write_all_by(client, &bufs.out, wdl())
                .await
                .map_err(|e| client_failed(e, 0))?;
            loop {
                match bufs.upb.fill(up, STREAM_BUF, dl.after(idle)).await {
                    Ok(0) => break,
                    Err(_) => return Err((written, Fault::Upstream)),
                    Ok(_) => {}
                }
                tee(&mut bufs.fill, bufs.upb.filled());
                write_all_by(client, bufs.upb.filled(), wdl())
                    .await
                    .map_err(|e| client_failed(e, written))?;
                written += bufs.upb.len() as u64;
                bufs.upb.clear();
            }
        }
    }
    Ok(written)
}

/// Copies a piece of a response body to the request's cache fill, when
/// it has one (a caching route's miss; `None` elsewhere: one test).
#[inline(always)]
fn tee(fill: &mut Option<Box<crate::cache::fill::Fill>>, data: &[u8]) {
    if let Some(f) = fill {
        f.push(data);
    }
}

/// Ends a body relayed from an HTTP/2 upstream: its trailers (gRPC's
/// status) to an HTTP/2 client as a trailing HEADERS, to an HTTP/1.1
/// client as the last chunk's trailer fields (`rechunk`); the end of the
/// stream otherwise.
async fn end_stream_body(
    down: &Downstream<'_>,
    up: &Stream,
    bufs: &mut Bufs,
    rechunk: bool,
    wait: Wait<'_>,
) -> std::io::Result<()> {
    let trailers = up.take_trailers();
    if let Some(t) = &trailers {
        if bufs.grpc {
            let code = t.get("grpc-status").and_then(|v| grpc_code(v.as_bytes()));
            bufs.grpc_status = code.or(bufs.grpc_status);
        }
    }
    if let Stream::H2(x) = down.client {
        return match trailers {
            Some(t) if !t.is_empty() => x.send_trailers(t),
            _ => {
                x.finish();
                Ok(())
            }
        };
    }
    if !rechunk {
        return Ok(());
    }
    bufs.out.clear();
    write_last_chunk(&mut bufs.out, trailers.as_ref());
    let r = write_all_by(down.client, &bufs.out, wait).await;
    bufs.out.clear();
    r
}

/// Appends the last chunk of a chunked body, with `trailers` as its
/// trailer fields when there are some.
pub(crate) fn write_last_chunk(out: &mut Vec<u8>, trailers: Option<&http::HeaderMap>) {
    match trailers.filter(|t| !t.is_empty()) {
        None => out.extend_from_slice(LAST_CHUNK),
        Some(t) => {
            out.extend_from_slice(b"0\r\n");
            for (name, value) in t {
                out.extend_from_slice(name.as_str().as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(value.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Request trailer fields an upstream never gets (RFC 9110 6.5.1: what
/// must be known before the content, which a recipient may merge into
/// the head): the connection's own and framing fields, routing,
/// credentials, request modifiers, content format, and the fields the
/// gateway itself writes in the head (a trailer must not undo them).
const NOT_IN_TRAILERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "content-length",
    "content-encoding",
    "content-type",
    "content-range",
    "host",
    "authorization",
    "proxy-authorization",
    "cookie",
    "expect",
    "max-forwards",
    "range",
    "cache-control",
    "pragma",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
    "x-app-id",
    "x-request-id",
];

/// A client's request trailers without the fields that must not be
/// forwarded ([`NOT_IN_TRAILERS`]); none when nothing is left.
pub(crate) fn forwardable_trailers(mut t: http::HeaderMap) -> Option<http::HeaderMap> {
    for name in NOT_IN_TRAILERS {
        t.remove(*name);
    }
    (!t.is_empty()).then_some(t)
}

/// The `grpc-status` among header field lines (`name: value` CRLF).
pub(crate) fn grpc_status_in(lines: &[u8]) -> Option<u8> {
    lines.split(|&b| b == b'\n').find_map(|line| {
        let (name, value) = line.split_at(line.iter().position(|&b| b == b':')?);
        name.trim_ascii()
            .eq_ignore_ascii_case(b"grpc-status")
            .then(|| grpc_code(value[1..].trim_ascii()))
            .flatten()
    })
}

/// A gRPC status code, 0 to 16.
pub(crate) fn grpc_code(v: &[u8]) -> Option<u8> {
    let s = std::str::from_utf8(v).ok()?;
    s.parse::<u8>().ok().filter(|c| *c <= 16)
}
