//! Forwarding one request upstream and streaming the response back.
//!
//! Order: pick an endpoint, take an in-flight slot (503 when none frees up
//! within the connect timeout), take a pooled connection or connect (502),
//! send the rewritten head and the body (streamed, re-chunked), read the
//! response head (504 on timeout, 502 when invalid), relay 1xx, write the
//! rewritten response head and stream the body back, then pool the
//! upstream connection if it is clean. A pooled connection that the
//! upstream closed before answering is retried once on a fresh one when the
//! whole request is still at hand.

use std::ops::Range;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::balancer::PickContext;
use crate::breaker::Admit;
use crate::chunked::{write_chunk_header, ChunkedDecoder, LAST_CHUNK};
use crate::codec::{self, BodyKind, Parsed, RequestHead};
use crate::conn::{Bufs, Conn};
use crate::deadline::{Deadlines, Wait};
use crate::endpoint::EndpointState;
use crate::filter::Edits;
use crate::io::{write_all_by, ReadError, RecvBuf};
use crate::response::{self, ErrorKind};
use crate::snapshot::{ServiceRt, Snapshot};

/// Largest response head accepted from an upstream.
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// Reads while streaming bodies use buffers up to this size.
const STREAM_BUF: usize = 64 * 1024;
/// Flush re-encoded chunks once this much is pending.
const FLUSH_AT: usize = 32 * 1024;
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// The request target split into parts, as ranges into the head buffer.
#[derive(Debug, Clone)]
pub struct Target {
    /// Path without query; empty for an absolute-form target with no path.
    pub path: Range<usize>,
    /// The query including its '?', or empty.
    pub query: Range<usize>,
    /// Authority of an absolute-form target; it replaces the Host header.
    pub authority: Option<Range<usize>>,
    /// Host used for routing: the authority, else the Host header.
    pub host: Option<Range<usize>>,
}

impl Target {
    pub fn parse(raw: &[u8], req: &RequestHead) -> Result<Target, ErrorKind> {
        let base = req.target.start;
        let t = &raw[req.target.clone()];
        let split = |start: usize, end: usize| {
            let q = memchr::memchr(b'?', &raw[start..end]).map_or(end, |i| start + i);
            (start..q, q..end)
        };
        if t.first() == Some(&b'/') {
            let (path, query) = split(base, base + t.len());
            return Ok(Target {
                path,
                query,
                authority: None,
                host: req.host.clone(),
            });
        }
        if t == b"*" {
            if &raw[req.method.clone()] != b"OPTIONS" {
                return Err(ErrorKind::BadRequest);
            }
            return Ok(Target {
                path: base..base + 1,
                query: base + 1..base + 1,
                authority: None,
                host: req.host.clone(),
            });
        }
        let scheme = if t.len() >= 7 && t[..7].eq_ignore_ascii_case(b"http://") {
            7
        } else if t.len() >= 8 && t[..8].eq_ignore_ascii_case(b"https://") {
            8
        } else {
            return Err(ErrorKind::BadRequest);
        };
        let rest = &t[scheme..];
        let auth_len = rest
            .iter()
            .position(|&b| b == b'/' || b == b'?')
            .unwrap_or(rest.len());
        let authority = &rest[..auth_len];
        if authority.is_empty() || authority.contains(&b'@') {
            return Err(ErrorKind::BadRequest);
        }
        let a_start = base + scheme;
        let (path, query) = split(a_start + auth_len, base + t.len());
        let authority = a_start..a_start + auth_len;
        Ok(Target {
            path,
            query,
            authority: Some(authority.clone()),
            host: Some(authority),
        })
    }

    /// The path to route on and forward ("/" when an absolute-form target had none).
    pub fn path<'a>(&self, raw: &'a [u8]) -> &'a [u8] {
        if self.path.is_empty() {
            b"/"
        } else {
            &raw[self.path.clone()]
        }
    }

    pub fn host<'a>(&self, raw: &'a [u8]) -> Option<&'a [u8]> {
        self.host.clone().map(|r| &raw[r])
    }
}

/// `host:port` -> `host`; `[v6]:port` -> `[v6]`.
pub fn strip_port(h: &[u8]) -> &[u8] {
    if h.first() == Some(&b'[') {
        return match memchr::memchr(b']', h) {
            Some(i) => &h[..=i],
            None => h,
        };
    }
    match memchr::memrchr(b':', h) {
        Some(i) => &h[..i],
        None => h,
    }
}

/// How a request ended, for metrics, the access log and the connection.
#[derive(Debug)]
pub struct Outcome<'s> {
    pub status: u16,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub close: bool,
    pub upstream_us: Option<u64>,
    pub endpoint: Option<&'s EndpointState>,
}

impl Outcome<'_> {
    pub fn local(status: u16, bytes_out: u64, close: bool) -> Self {
        Outcome {
            status,
            bytes_in: 0,
            bytes_out,
            close,
            upstream_us: None,
            endpoint: None,
        }
    }
}

/// What `forward` needs besides the buffers.
pub struct Request<'a, 'w, 's> {
    pub conn: &'a Conn<'w>,
    pub snap: &'s Snapshot,
    pub service: &'s ServiceRt,
    pub target: &'a Target,
    /// Bytes of the path to strip (the matched prefix), or 0.
    pub strip: usize,
    pub started: Instant,
}

/// Microseconds from a process-wide origin to `now`.
fn epoch_us(now: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    now.saturating_duration_since(*EPOCH.get_or_init(Instant::now))
        .as_micros() as u64
}

/// Reads and drops `n` body bytes from the client.
pub async fn discard(
    client: &TcpStream,
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

async fn connect(addr: std::net::SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let s = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    s.set_nodelay(true)?;
    Ok(s)
}

/// Writes the request head as it goes upstream into `out`.
#[allow(clippy::too_many_arguments)]
fn write_request_head(
    out: &mut Vec<u8>,
    raw: &[u8],
    req: &RequestHead,
    t: &Target,
    strip: usize,
    peer_ip: &str,
    ep: &EndpointState,
    edits: &Edits,
) {
    out.clear();
    out.extend_from_slice(&raw[req.method.clone()]);
    out.push(b' ');
    let path = edits.path.as_deref().unwrap_or_else(|| t.path(raw));
    let path = if !edits.path_final && strip > 0 && strip <= path.len() {
        let rest = &path[strip..];
        if rest.is_empty() {
            b"/"
        } else {
            rest
        }
    } else {
        path
    };
    out.extend_from_slice(path);
    match &edits.query {
        Some(q) => out.extend_from_slice(q),
        None => out.extend_from_slice(&raw[t.query.clone()]),
    }
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let replace_host = t.authority.is_some();
    codec::append_header_lines(out, raw, &req.headers, req.len, true, |h| {
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
    out.extend_from_slice(b"x-forwarded-for: ");
    for v in &req.xff {
        out.extend_from_slice(&raw[v.clone()]);
        out.extend_from_slice(b", ");
    }
    out.extend_from_slice(peer_ip.as_bytes());
    out.extend_from_slice(b"\r\nx-forwarded-proto: http\r\n");
    out.extend_from_slice(&edits.request_headers);
    if let Some(h) = t.host(raw) {
        out.extend_from_slice(b"x-forwarded-host: ");
        out.extend_from_slice(h);
        out.extend_from_slice(b"\r\n");
    }
    match req.body() {
        BodyKind::Length(n) => response::content_length(out, n),
        BodyKind::Chunked => out.extend_from_slice(b"transfer-encoding: chunked\r\n"),
        BodyKind::None | BodyKind::UntilClose => {}
    }
    out.extend_from_slice(b"\r\n");
}

enum BodyError {
    /// The client went away or stalled.
    Client,
    Upstream,
    BadChunk,
    TooLarge,
}

enum HeadError {
    /// Closed or reset before any response byte.
    ClosedEarly,
    Timeout,
    Invalid,
}

/// Answers an error to the client from inside `forward`.
async fn fail<'s>(conn: &Conn<'_>, bufs: &mut Bufs, kind: ErrorKind, close: bool) -> Outcome<'s> {
    fail_with(conn, bufs, kind, close, &[]).await
}

/// [`fail`] with extra header lines on the answer.
async fn fail_with<'s>(
    conn: &Conn<'_>,
    bufs: &mut Bufs,
    kind: ErrorKind,
    close: bool,
    extra: &[u8],
) -> Outcome<'s> {
    let close = close || kind.closes();
    bufs.out.clear();
    response::error_with(&mut bufs.out, kind, close, bufs.is_head, extra);
    let len = bufs.out.len() as u64;
    let write = write_all_by(
        &conn.client,
        &bufs.out,
        conn.worker.deadlines.after(CLIENT_WRITE_TIMEOUT),
    )
    .await;
    Outcome::local(kind.status(), len, close || write.is_err())
}

pub async fn forward<'s>(cx: Request<'_, '_, 's>, bufs: &mut Bufs) -> Outcome<'s> {
    let Request {
        conn,
        snap,
        service,
        target,
        strip,
        started,
    } = cx;
    let worker = conn.worker;
    let body = bufs.req.body();
    let close_req = bufs.req.close || worker.shutting_down();
    // Until the body is read, an error answer must close the connection.
    let body_pending = body != BodyKind::None;
    if let BodyKind::Length(n) = body {
        if n > snap.limits.max_body_bytes {
            return fail(conn, bufs, ErrorKind::BodyTooLarge, true).await;
        }
    }
    let raw = bufs.inb.filled();
    let ep_arc = {
        let req = &bufs.req;
        let lookup = |name: &[u8]| -> Option<&[u8]> {
            req.headers
                .iter()
                .find(|h| raw[h.name.clone()].eq_ignore_ascii_case(name))
                .map(|h| &raw[h.value.clone()])
        };
        let pcx = PickContext {
            client_ip: conn.peer.ip(),
            path: target.path(raw),
            header: &lookup,
        };
        service.balancer.pick(&service.endpoints, &pcx)
    };
    let Some(mut ep_index) = ep_arc else {
        // Every endpoint is down: shed at once, never queue.
        let close = close_req || body_pending;
        return fail_with(
            conn,
            bufs,
            ErrorKind::NoHealthyEndpoint,
            close,
            b"retry-after: 1\r\n",
        )
        .await;
    };
    let mut ep: &'s EndpointState = &service.endpoints[ep_index];
    // Every attempt must have the response head by then.
    let total = started + service.timeouts.request;
    let wait = service.timeouts.connect.min(service.timeouts.request);
    let Some(mut _permit) = ep.acquire(wait).await else {
        let mut o = fail(
            conn,
            bufs,
            ErrorKind::UpstreamBusy,
            close_req || body_pending,
        )
        .await;
        o.endpoint = Some(ep);
        return o;
    };
    ep.requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    service.retries.deposit();
    let mut admit = Verdict::admit(ep);
    let mut tried: u64 = 1 << ep_index.min(63);
    let mut tries = 1;
    let raw = bufs.inb.filled();
    // The head names no endpoint (it has a Host), so it can go to another.
    let portable = bufs.req.host.is_some() || target.authority.is_some();
    let idempotent = matches!(
        &raw[bufs.req.method.clone()],
        b"GET" | b"HEAD" | b"OPTIONS" | b"PUT" | b"DELETE" | b"TRACE"
    );
    write_request_head(
        &mut bufs.out,
        raw,
        &bufs.req,
        target,
        strip,
        &conn.peer_ip,
        ep,
        &bufs.edits,
    );
    let is_head = &raw[bufs.req.method.clone()] == b"HEAD";
    let client_minor = bufs.req.minor;
    let expect_continue = bufs.req.expect_continue;
    bufs.inb.consume(bufs.req.len);
    // Body bytes that already arrived go out with the head.
    let mut remaining = 0;
    let mut bytes_in = 0;
    if let BodyKind::Length(n) = body {
        let take = (bufs.inb.len() as u64).min(n) as usize;
        bufs.out.extend_from_slice(&bufs.inb.filled()[..take]);
        bufs.inb.consume(take);
        remaining = n - take as u64;
        bytes_in = take as u64;
    }
    let chunked = body == BodyKind::Chunked;
    let replayable = remaining == 0 && !chunked;
    let mut sent_continue = !expect_continue || !bufs.inb.is_empty() || bytes_in > 0;
    let mut attempt = 0;
    // The upstream answered before the whole body was sent.
    let mut body_cut = false;
    let (up, sent_at) = loop {
        bufs.upb.clear();
        // The request's start stands in for the clock: an idle connection
        // that expired microseconds ago is still fine to use.
        // A retry after a pooled connection failed takes a fresh one: the
        // next pooled one may have been closed by the upstream just the same.
        let mut pooled = None;
        if attempt == 0 {
            loop {
                let taken = worker.pool.borrow_mut().take(ep.id, started);
                let Some(s) = taken else { break };
                // Stray bytes or a close since its last response: not usable.
                if crate::io::quiet(&s).await {
                    pooled = Some(s);
                    break;
                }
            }
        }
        let reused = pooled.is_some();
        let up = match pooled {
            Some(s) => s,
            None => match connect(ep.addr, service.timeouts.connect.min(time_left(total))).await {
                Ok(s) => s,
                Err(e) => {
                    ep.connect_errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(endpoint = %ep.name, error = %e, "upstream connect failed");
                    admit.failed(ep);
                    // Nothing was sent: any request may go elsewhere.
                    if service.retries.settings.on_connect && portable {
                        if let Some((i, permit)) =
                            retry_endpoint(service, ep_index, &mut tried, &mut tries, total)
                        {
                            (ep_index, _permit, attempt) = (i, permit, 0);
                            (ep, admit) = switch_to(service, i);
                            continue;
                        }
                    }
                    let mut o = fail(
                        conn,
                        bufs,
                        ErrorKind::UpstreamFailed,
                        close_req || remaining > 0 || chunked,
                    )
                    .await;
                    o.endpoint = Some(ep);
                    return o;
                }
            },
        };
        if !sent_continue && body_pending {
            sent_continue = true;
            let deadline = Instant::now() + CLIENT_WRITE_TIMEOUT;
            if write_all_by(
                &conn.client,
                b"HTTP/1.1 100 Continue\r\n\r\n",
                worker.until(deadline),
            )
            .await
            .is_err()
            {
                return Outcome::local(400, 0, true);
            }
        }
        let deadline = service.timeouts.response_header;
        if !chunked
            && write_all_by(&up, &bufs.out, worker.deadlines.after(deadline))
                .await
                .is_err()
        {
            // Nothing beyond `out` was consumed: a retry is safe.
            if reused && attempt == 0 {
                attempt += 1;
                continue;
            }
            admit.failed(ep);
            let mut o = fail(
                conn,
                bufs,
                ErrorKind::UpstreamFailed,
                close_req || remaining > 0,
            )
            .await;
            o.endpoint = Some(ep);
            return o;
        }
        if !replayable {
            // Stream the body while watching the upstream: one that answers
            // early (say 413) gets its answer relayed at once, and the rest
            // of the body is not sent.
            let Bufs { inb, out, upb, .. } = &mut *bufs;
            let sent = tokio::select! {
                r = send_body(&worker.deadlines, &conn.client, &up, inb, out, body, remaining, snap) => r,
                early = early_response(&up, upb) => {
                    if early {
                        body_cut = true;
                        Ok(0)
                    } else {
                        Err(BodyError::Upstream)
                    }
                }
            };
            match sent {
                Ok(n) => bytes_in += n,
                Err(e) => {
                    let kind = match e {
                        BodyError::Client => return Outcome::local(400, 0, true),
                        BodyError::Upstream => {
                            admit.failed(ep);
                            ErrorKind::UpstreamFailed
                        }
                        BodyError::BadChunk => ErrorKind::BadRequest,
                        BodyError::TooLarge => ErrorKind::BodyTooLarge,
                    };
                    let mut o = fail(conn, bufs, kind, true).await;
                    o.endpoint = Some(ep);
                    return o;
                }
            }
        }
        let sent_at = Instant::now();
        let deadline = (sent_at + service.timeouts.response_header).min(total);
        let head = read_response_head(&up, conn, bufs, is_head, client_minor, deadline).await;
        // What this attempt's outcome allows: another endpoint for an
        // idempotent request still at hand, when the service retries it.
        let r = &service.retries.settings;
        let elsewhere = idempotent && replayable && portable && !body_cut;
        match head {
            Ok(()) => {
                let status = bufs.res.status;
                if ep.breaker.counts_status(status) {
                    admit.failed(ep);
                } else {
                    admit.succeeded(ep);
                }
                if elsewhere && r.on_status.contains(&status) {
                    if let Some((i, permit)) =
                        retry_endpoint(service, ep_index, &mut tried, &mut tries, total)
                    {
                        tracing::debug!(endpoint = %ep.name, status, "retrying elsewhere");
                        (ep_index, _permit, attempt) = (i, permit, 0);
                        (ep, admit) = switch_to(service, i);
                        continue;
                    }
                }
                break (up, sent_at);
            }
            Err(HeadError::ClosedEarly) if reused && replayable && attempt == 0 => {
                attempt += 1;
                continue;
            }
            Err(e) => {
                admit.failed(ep);
                let again = match e {
                    HeadError::ClosedEarly => r.on_reset,
                    HeadError::Timeout => r.on_timeout,
                    HeadError::Invalid => false,
                };
                if again && elsewhere {
                    if let Some((i, permit)) =
                        retry_endpoint(service, ep_index, &mut tried, &mut tries, total)
                    {
                        (ep_index, _permit, attempt) = (i, permit, 0);
                        (ep, admit) = switch_to(service, i);
                        continue;
                    }
                }
                let kind = match e {
                    HeadError::Timeout => ErrorKind::UpstreamTimeout,
                    _ => ErrorKind::UpstreamFailed,
                };
                tracing::debug!(endpoint = %ep.name, status = kind.status(), "upstream response failed");
                let mut o = fail(conn, bufs, kind, close_req).await;
                o.endpoint = Some(ep);
                return o;
            }
        }
    };
    let head_at = Instant::now();
    let upstream_us = head_at.duration_since(sent_at).as_micros() as u64;
    if service.balancer.reads_latency() {
        ep.ewma.observe(epoch_us(head_at), upstream_us as f64);
    }
    let status = bufs.res.status;
    let res_body = bufs.res.body();
    let close = close_req
        || body_cut
        || worker.shutting_down()
        || res_body == BodyKind::UntilClose
        || (res_body == BodyKind::Chunked && client_minor == 0);
    write_response_head(bufs, close, client_minor);
    let relay = relay_body(conn, &up, bufs, res_body, client_minor == 1, service).await;
    let mut outcome = Outcome {
        status,
        bytes_in,
        bytes_out: 0,
        close,
        upstream_us: Some(upstream_us),
        endpoint: Some(ep),
    };
    match relay {
        Ok(n) => {
            outcome.bytes_out = n;
            if !bufs.res.close && !body_cut && bufs.upb.is_empty() {
                let expires = head_at + service.timeouts.idle;
                let ep_arc = &service.endpoints[ep_index];
                worker.pool.borrow_mut().put(ep_arc, up, expires, ep.max);
            }
        }
        Err((n, _)) => {
            outcome.bytes_out = n;
            outcome.close = true;
        }
    }
    if body_cut {
        linger(
            &worker.deadlines,
            &conn.client,
            &mut bufs.inb,
            snap.limits.max_body_bytes,
        )
        .await;
    }
    outcome
}

/// Time until `total`, the request's deadline for a response head.
fn time_left(total: Instant) -> Duration {
    total.saturating_duration_since(Instant::now())
}

/// How an attempt was let through its endpoint's circuit, until its
/// outcome is recorded. A half-open probe whose request ends without a
/// verdict on the endpoint (the client went away) gives its slot back on
/// drop, so the circuit cannot stay half-open with every probe taken.
struct Verdict<'a> {
    admit: Admit,
    pending: Option<&'a EndpointState>,
}

impl<'a> Verdict<'a> {
    fn admit(ep: &'a EndpointState) -> Self {
        let admit = ep.breaker.admit_now().unwrap_or(Admit::Closed);
        Verdict {
            admit,
            pending: (admit == Admit::Probe).then_some(ep),
        }
    }

    /// Counts a failed attempt against the endpoint's circuit.
    fn failed(&mut self, ep: &EndpointState) {
        self.pending = None;
        let now = crate::limit::mono_ns(Instant::now());
        if ep.breaker.record(self.admit, false, now) {
            tracing::warn!(endpoint = %ep.name, "circuit opened: endpoint out of rotation");
        }
    }

    fn succeeded(&mut self, ep: &EndpointState) {
        self.pending = None;
        ep.breaker.succeeded(self.admit);
    }
}

impl Drop for Verdict<'_> {
    fn drop(&mut self) {
        if let Some(ep) = self.pending {
            ep.breaker.release_probe();
        }
    }
}

/// The endpoint `i` of `service`, and its admission through its circuit.
fn switch_to(service: &ServiceRt, i: usize) -> (&EndpointState, Verdict<'_>) {
    let ep: &EndpointState = &service.endpoints[i];
    ep.requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (ep, Verdict::admit(ep))
}

/// Another endpoint for a failed attempt, with its in-flight slot: when the
/// service allows one more attempt, its retry budget has one, and an
/// endpoint not tried yet is in rotation.
fn retry_endpoint<'s>(
    service: &'s ServiceRt,
    failed: usize,
    tried: &mut u64,
    tries: &mut u32,
    total: Instant,
) -> Option<(usize, crate::endpoint::Permit<'s>)> {
    if *tries >= service.retries.settings.attempts
        || service.endpoints.len() < 2
        || time_left(total).is_zero()
    {
        return None;
    }
    let i = crate::balancer::Balancer::pick_other(&service.endpoints, failed, *tried)?;
    let permit = service.endpoints[i].try_acquire()?;
    if !service.retries.withdraw() {
        tracing::debug!(service = %service.name, "retry budget spent");
        return None;
    }
    *tried |= 1 << i.min(63);
    *tries += 1;
    service.endpoints[i]
        .retries
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Some((i, permit))
}

/// After answering before the client finished sending its body, reads and
/// drops what it still sends (bounded in bytes and time) before the close,
/// so the client reads the answer instead of a reset.
async fn linger(dl: &Deadlines, client: &TcpStream, inb: &mut RecvBuf, max: u64) {
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

/// Streams the rest of a request body upstream; returns the bytes sent.
#[allow(clippy::too_many_arguments)]
async fn send_body(
    dl: &Deadlines,
    client: &TcpStream,
    up: &TcpStream,
    inb: &mut RecvBuf,
    out: &mut Vec<u8>,
    body: BodyKind,
    mut remaining: u64,
    snap: &Snapshot,
) -> Result<u64, BodyError> {
    let idle = snap.timeouts.client_body;
    let mut sent = 0;
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
                write_all_by(up, &inb.filled()[..take], dl.after(idle))
                    .await
                    .map_err(|_| BodyError::Upstream)?;
                inb.consume(take);
                remaining -= take as u64;
                sent += take as u64;
            }
        }
        BodyKind::Chunked => {
            let mut dec = ChunkedDecoder::new();
            loop {
                let step = dec.step(inb.filled()).map_err(|_| BodyError::BadChunk)?;
                if let Some(r) = step.data {
                    write_chunk_header(out, r.len());
                    out.extend_from_slice(&inb.filled()[r]);
                    out.extend_from_slice(b"\r\n");
                }
                inb.consume(step.consumed);
                if dec.total > snap.limits.max_body_bytes {
                    return Err(BodyError::TooLarge);
                }
                if dec.is_done() {
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
        BodyKind::None | BodyKind::UntilClose => {}
    }
    Ok(sent)
}

/// Resolves when the upstream sends something while the request body is
/// still being streamed: true when response bytes arrived (kept in `upb`),
/// false when it closed or failed. Stale readiness from a pooled
/// connection's previous response is cleared by the failed read.
async fn early_response(up: &TcpStream, upb: &mut RecvBuf) -> bool {
    loop {
        if crate::io::read_ready(up).await.is_err() {
            return false;
        }
        match upb.try_fill(up, MAX_RESPONSE_HEAD) {
            Ok(None) => continue,
            Ok(Some(n)) => return n > 0,
            Err(_) => return false,
        }
    }
}

/// Reads the final response head into `bufs.res`, relaying 1xx
/// informational responses (other than 100) to HTTP/1.1 clients.
async fn read_response_head(
    up: &TcpStream,
    conn: &Conn<'_>,
    bufs: &mut Bufs,
    is_head: bool,
    client_minor: u8,
    deadline: Instant,
) -> Result<(), HeadError> {
    let mut got = false;
    loop {
        match codec::parse_response(bufs.upb.filled(), MAX_RESPONSE_HEAD, is_head, &mut bufs.res) {
            Ok(Parsed::Complete(())) => {
                let status = bufs.res.status;
                if status >= 200 {
                    return Ok(());
                }
                if status == 101 {
                    return Err(HeadError::Invalid);
                }
                if status != 100 && client_minor == 1 {
                    let info = &bufs.upb.filled()[..bufs.res.len];
                    let _ = write_all_by(&conn.client, info, conn.worker.until(deadline)).await;
                }
                bufs.upb.consume(bufs.res.len);
                got = true;
            }
            Ok(Parsed::Partial) => match bufs
                .upb
                .fill(up, MAX_RESPONSE_HEAD, conn.worker.until(deadline))
                .await
            {
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

/// Writes the response head as it goes to the client into `bufs.out` and
/// consumes the upstream's head from `bufs.upb`.
fn write_response_head(bufs: &mut Bufs, close: bool, client_minor: u8) {
    let raw = bufs.upb.filled();
    let res = &bufs.res;
    let out = &mut bufs.out;
    out.clear();
    // Status line: our version, the upstream's code and reason.
    let line_end = memchr::memchr(b'\n', raw).unwrap_or(0);
    let mut line = &raw[9.min(line_end)..line_end];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(line);
    out.extend_from_slice(b"\r\n");
    let body = res.body();
    // With no body (HEAD, 304), the upstream's Content-Length still
    // describes the resource and is passed on.
    let keep_length = body == BodyKind::None && res.status != 204 && res.status >= 200;
    let ops = bufs.edits.response_ops.as_deref();
    let cors = bufs.edits.cors;
    codec::append_header_lines(out, raw, &res.headers, res.len, res.crlf, |h| {
        let name = &raw[h.name.clone()];
        (!h.skip || (keep_length && codec::eq_lower(name, b"content-length")))
            && !ops.is_some_and(|o| o.drops(name))
            && !(cors && name.len() > 15 && name[..15].eq_ignore_ascii_case(b"access-control-"))
    });
    if let Some(o) = ops {
        out.extend_from_slice(&o.lines);
    }
    match body {
        BodyKind::Length(n) => response::content_length(out, n),
        BodyKind::Chunked if client_minor == 1 => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n")
        }
        _ => {}
    }
    out.extend_from_slice(&bufs.edits.response_headers);
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    } else if client_minor == 0 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    let len = res.len;
    bufs.upb.consume(len);
}

/// Streams the response body to the client after the head in `bufs.out`.
/// Returns body bytes written; on error, the bytes written so far and
/// whether the upstream (true) or the client failed.
async fn relay_body(
    conn: &Conn<'_>,
    up: &TcpStream,
    bufs: &mut Bufs,
    body: BodyKind,
    rechunk: bool,
    service: &ServiceRt,
) -> Result<u64, (u64, bool)> {
    let idle = service.timeouts.response_body;
    let client = &conn.client;
    let dl = &conn.worker.deadlines;
    let wdl = || dl.after(CLIENT_WRITE_TIMEOUT);
    let mut written = 0u64;
    match body {
        BodyKind::None => {
            write_all_by(client, &bufs.out, wdl())
                .await
                .map_err(|_| (0, false))?;
        }
        BodyKind::Length(n) => {
            let take = (bufs.upb.len() as u64).min(n) as usize;
            bufs.out.extend_from_slice(&bufs.upb.filled()[..take]);
            bufs.upb.consume(take);
            write_all_by(client, &bufs.out, wdl())
                .await
                .map_err(|_| (0, false))?;
            written = take as u64;
            while written < n {
                match bufs.upb.fill(up, STREAM_BUF, dl.after(idle)).await {
                    Ok(0) | Err(_) => return Err((written, true)),
                    Ok(_) => {}
                }
                let take = (bufs.upb.len() as u64).min(n - written) as usize;
                write_all_by(client, &bufs.upb.filled()[..take], wdl())
                    .await
                    .map_err(|_| (written, false))?;
                bufs.upb.consume(take);
                written += take as u64;
            }
        }
        BodyKind::Chunked => {
            let mut dec = ChunkedDecoder::new();
            loop {
                let step = dec.step(bufs.upb.filled()).map_err(|_| (written, true))?;
                if let Some(r) = step.data {
                    if rechunk {
                        write_chunk_header(&mut bufs.out, r.len());
                    }
                    bufs.out.extend_from_slice(&bufs.upb.filled()[r.clone()]);
                    if rechunk {
                        bufs.out.extend_from_slice(b"\r\n");
                    }
                    written += r.len() as u64;
                }
                bufs.upb.consume(step.consumed);
                if dec.is_done() && rechunk {
                    bufs.out.extend_from_slice(LAST_CHUNK);
                }
                if dec.is_done() || bufs.out.len() >= FLUSH_AT || bufs.upb.is_empty() {
                    write_all_by(client, &bufs.out, wdl())
                        .await
                        .map_err(|_| (written, false))?;
                    bufs.out.clear();
                }
                if dec.is_done() {
                    break;
                }
                if bufs.upb.is_empty() {
                    match bufs.upb.fill(up, STREAM_BUF, dl.after(idle)).await {
                        Ok(0) | Err(_) => return Err((written, true)),
                        Ok(_) => {}
                    }
                }
            }
        }
        BodyKind::UntilClose => {
            written = bufs.upb.len() as u64;
            bufs.out.extend_from_slice(bufs.upb.filled());
            bufs.upb.clear();
            write_all_by(client, &bufs.out, wdl())
                .await
                .map_err(|_| (0, false))?;
            loop {
                match bufs.upb.fill(up, STREAM_BUF, dl.after(idle)).await {
                    Ok(0) => break,
                    Err(_) => return Err((written, true)),
                    Ok(_) => {}
                }
                write_all_by(client, bufs.upb.filled(), wdl())
                    .await
                    .map_err(|_| (written, false))?;
                written += bufs.upb.len() as u64;
                bufs.upb.clear();
            }
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &[u8]) -> Result<(Target, RequestHead), ErrorKind> {
        let mut head = RequestHead::default();
        match codec::parse_request(raw, 8192, &mut head) {
            Ok(Parsed::Complete(())) => {}
            _ => panic!("bad head"),
        }
        Target::parse(raw, &head).map(|t| (t, head))
    }

    #[test]
    fn targets() {
        let raw = b"GET /a/b?x=1 HTTP/1.1\r\nHost: h:80\r\n\r\n";
        let (t, _) = parse(raw).unwrap();
        assert_eq!(t.path(raw), b"/a/b");
        assert_eq!(&raw[t.query.clone()], b"?x=1");
        assert_eq!(strip_port(t.host(raw).unwrap()), b"h");
        let raw = b"GET http://Other:8080/p?q HTTP/1.1\r\nHost: h\r\n\r\n";
        let (t, _) = parse(raw).unwrap();
        assert_eq!(t.path(raw), b"/p");
        assert_eq!(t.host(raw).unwrap(), b"Other:8080");
        let raw = b"GET http://o HTTP/1.1\r\nHost: h\r\n\r\n";
        let (t, _) = parse(raw).unwrap();
        assert_eq!(t.path(raw), b"/");
        assert!(parse(b"GET x HTTP/1.1\r\nHost: h\r\n\r\n").is_err());
        assert!(parse(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n").is_err());
        assert!(parse(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").is_ok());
        assert!(parse(b"GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n").is_err());
        assert_eq!(strip_port(b"[::1]:80"), b"[::1]");
    }
}
