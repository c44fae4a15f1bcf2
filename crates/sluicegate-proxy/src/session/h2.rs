//! A client's HTTP/2 connection: the framing layer (the `h2` crate) run in
//! the connection's task, and each stream served in a task of its own by
//! the same request code as an HTTP/1.1 request
//! ([`super::lifecycle::exchange`], over a [`Link`] to the stream and the
//! connection's [`Peer`], no connection state of its own), its head laid
//! out as the protocol-neutral head that code reads and the stream as the
//! one it answers on ([`crate::proto::http2`]); no HTTP/1.1 text is
//! written or parsed. A WebSocket over HTTP/2 (RFC 8441, an
//! extended CONNECT, enabled in the connection's SETTINGS) is given as the
//! upgrade it stands for, and its tunnel runs on the stream.
//!
//! Limits: the listener's `http2` settings (concurrent streams, windows,
//! the rate of new streams, which ends a flooding connection with GOAWAY
//! `ENHANCE_YOUR_CALM`), the header list size from
//! `limits.max_header_bytes`; the framing layer's own guards against
//! streams reset before they are served (Rapid Reset) and streams it had
//! to reset for the client's errors (MadeYouReset). An idle connection
//! closes after `timeouts.keepalive`; a draining worker sends GOAWAY and
//! lets the streams under way finish within `timeouts.drain`.
//!
//! A connection ended for its client's fault (a limit, a flood, a
//! protocol error) ends in order: the GOAWAY with its code, then our side
//! of the stream (a TLS close_notify, then the FIN), then what the client
//! still sends is read and dropped, bounded in bytes and time, before the
//! close. A close with the client's bytes unread would reset the
//! connection: a client still writing its flood would fail on a write
//! before reading why, and the reset can discard the GOAWAY on its way.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use compact_str::ToCompactString;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream};

use super::active::Active;
use super::answer::{refuse_head, LINGER_MAX};
use super::lifecycle::{self, Next};
use super::peer::{Link, Peer};
use crate::clock::deadline::{OwnSlot, Stop};
use crate::proto::codec::{HeadError, RequestFraming};
use crate::proto::http2::exchange::{take_ready, Exchange, Taken};
use crate::proto::http2::request::{fill_head, BodyAt};
use crate::transport::h2io::{Flood, H2Io};
use crate::transport::listener::{ListenerRt, Prepared};
use crate::transport::stream::Stream;
use crate::upstream::body::linger;
use crate::worker::{Bufs, Worker};

/// A request body up to this size that came whole with its head is given
/// with its length (see [`stream`]).
const WHOLE_MAX: usize = 64 * 1024;
/// Send buffer the framing layer keeps per stream beyond the window.
const SEND_BUFFER: usize = 256 * 1024;
/// At most this much of a request body still coming after its answer
/// went whole is read and dropped before the stream is reset (as a small
/// body is before an HTTP/1.1 connection's next request).
const DRAIN_MAX: u64 = 64 * 1024;
/// Streams the client may reset before the gateway took them up, at once.
const PENDING_RESETS: usize = 64;
/// Streams the gateway may reset for the client's errors before the
/// connection ends (MadeYouReset, CVE-2025-8671).
const ERROR_RESETS: usize = 256;

type H2Connection = h2::server::Connection<H2Io, Bytes>;

/// What every stream of a connection shares.
struct Shared {
    peer: Peer,
    /// Streams being served now.
    open: Cell<usize>,
}

/// A new-streams rate: a bucket of `per_second` tokens, refilled
/// continuously.
struct StreamRate {
    per_second: f64,
    tokens: f64,
    at: Instant,
}

impl StreamRate {
    fn new(per_second: u32, now: Instant) -> StreamRate {
        StreamRate {
            per_second: f64::from(per_second),
            tokens: f64::from(per_second),
            at: now,
        }
    }

    fn admit(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + dt * self.per_second).min(self.per_second);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Serves an HTTP/2 connection until it ends. `early` holds bytes read
/// from it already (the h2c preface, or part of it).
pub(crate) async fn serve(p: Prepared, early: Vec<u8>, listener: Arc<ListenerRt>, active: Active) {
    let worker = active.worker().clone();
    let Some(settings) = listener.http2.clone() else {
        return;
    };
    let (header_time, keepalive, drain, max_head) = {
        let snap = worker.shared.snapshot.load();
        let t = &snap.timeouts;
        (
            t.client_header,
            t.keepalive,
            t.drain,
            snap.limits.max_header_bytes,
        )
    };
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(settings.max_concurrent_streams)
        .initial_window_size(settings.stream_window)
        .initial_connection_window_size(settings.connection_window)
        .max_header_list_size(max_head as u32)
        .max_send_buffer_size(SEND_BUFFER)
        .max_pending_accept_reset_streams(PENDING_RESETS)
        .max_local_error_reset_streams(Some(ERROR_RESETS))
        // WebSocket over HTTP/2 (RFC 8441).
        .enable_connect_protocol();
    let flood = Flood::default();
    let io = H2Io::new(p.stream, early, flood.clone());
    let socket = io.socket();
    let handshake = worker
        .deadlines
        .after(header_time)
        .or_shutdown()
        .bound(b.handshake::<_, Bytes>(io))
        .await;
    let mut conn = match handshake {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            tracing::debug!(peer = %p.client, error = %e, "HTTP/2 handshake failed");
            return;
        }
        Err(_) => return,
    };
    let shared = Rc::new(Shared {
        peer: Peer {
            addr: p.client,
            ip: p.client.ip().to_compact_string(),
            listener: listener.addr,
            tls: listener.tls.is_some().then_some(p.tls),
            redirect_https: listener.redirect_https,
            identity: p.identity,
        },
        open: Cell::new(0),
    });
    let mut rate = StreamRate::new(settings.max_streams_per_second, Instant::now());
    let mut draining: Option<Instant> = None;
    // Whether the connection ends for the client's fault, a GOAWAY with
    // an error code sent.
    let refused = loop {
        let wait = match draining {
            Some(until) => worker.deadlines.at(until),
            None => worker.deadlines.after(keepalive).or_shutdown(),
        };
        let next = std::future::poll_fn(|cx| {
            if flood.detected() {
                return Poll::Ready(None);
            }
            conn.poll_accept(cx).map(Some)
        });
        match wait.bound(next).await {
            Ok(None) => {
                tracing::debug!(peer = %shared.peer.addr, "HTTP/2 client floods PING or SETTINGS frames");
                calm_down(&worker, &mut conn).await;
                break true;
            }
            Ok(Some(Some(Ok((req, respond))))) => {
                if !rate.admit(Instant::now()) {
                    tracing::debug!(peer = %shared.peer.addr, "HTTP/2 client opens streams too fast");
                    calm_down(&worker, &mut conn).await;
                    break true;
                }
                let (worker, shared) = (worker.clone(), shared.clone());
                tokio::task::spawn_local(stream(worker, shared, req, respond));
            }
            Ok(Some(Some(Err(e)))) => {
                tracing::debug!(peer = %shared.peer.addr, error = %e, "HTTP/2 connection failed");
                // The framing layer's own limits (Rapid Reset, MadeYouReset)
                // and protocol errors: its GOAWAY is written and its side
                // ended already.
                break e.is_go_away() && e.is_library();
            }
            Ok(Some(None)) => break false,
            Err(Stop::Timeout) if draining.is_some() => break false,
            Err(Stop::Timeout) if shared.open.get() > 0 => {}
            Err(Stop::Timeout | Stop::Shutdown) => {
                // Idle past the keep-alive timeout, or the worker drains:
                // GOAWAY, and the streams under way finish.
                conn.graceful_shutdown();
                draining = Some(Instant::now() + drain);
            }
        }
    };
    drop(conn);
    if refused {
        let_client_read_why(&worker, &socket).await;
    }
}

/// After a GOAWAY with an error code: ends our side of the stream (a TLS
/// close_notify, then the FIN, unless the framing layer did already), then
/// reads and drops what the client still sends, bounded in bytes and time,
/// so that the close does not reset the connection before the client read
/// why it ends.
async fn let_client_read_why(worker: &Worker, socket: &Stream) {
    socket.shutdown_write();
    let mut bufs = worker.take_bufs();
    linger(&worker.deadlines, socket, &mut bufs.inb, LINGER_MAX).await;
    worker.give_bufs(bufs);
}

/// Ends a connection whose client floods it: GOAWAY `ENHANCE_YOUR_CALM`,
/// written (and our side ended) within a second.
async fn calm_down(worker: &Worker, conn: &mut H2Connection) {
    conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
    let _ = worker
        .deadlines
        .after(Duration::from_secs(1))
        .bound(std::future::poll_fn(|cx| conn.poll_closed(cx)))
        .await;
}

/// Serves one stream: its head laid out as the protocol-neutral head the
/// request code reads ([`fill_head`]), the stream as the one it reads the
/// body from and answers on.
async fn stream(
    worker: Rc<Worker>,
    shared: Rc<Shared>,
    req: http::Request<RecvStream>,
    respond: SendResponse<Bytes>,
) {
    shared.open.set(shared.open.get() + 1);
    let (parts, mut recv) = req.into_parts();
    let mut bufs = worker.take_bufs();
    bufs.inb.clear();
    let protocol = parts.extensions.get::<h2::ext::Protocol>();
    let (head, exchange) =
        if let (Some(p), true) = (protocol, parts.method == http::Method::CONNECT) {
            // An extended CONNECT: the upgrade it stands for, with a
            // `Sec-WebSocket-Key` of its own (an HTTP/2 client sends none).
            let key = websocket_key();
            let upgrade = Some((p.as_str(), key.as_str()));
            let head = fill_head(
                &parts,
                BodyAt::Streams,
                upgrade,
                &mut bufs.inb,
                &mut bufs.req,
            );
            let exchange = Exchange::new(recv, respond, false, Vec::new());
            exchange.set_connect();
            (head, exchange)
        } else {
            // A body that came whole with its head (most small requests, every
            // unary gRPC call) goes after the head with its length: the request
            // can then be sent again (retries). Otherwise what came of it leads
            // the stream's body. A body that came whole but with trailers
            // streams too, so that an HTTP/1.1 upstream gets it chunked,
            // with them.
            let mut early = Vec::new();
            let mut trailers = None;
            let body = if recv.is_end_stream() {
                BodyAt::None
            } else {
                match take_ready(&mut recv, &mut early, WHOLE_MAX) {
                    Taken::Whole(None) => BodyAt::Whole(early.len() as u64),
                    Taken::Whole(t) => {
                        trailers = t;
                        BodyAt::Streams
                    }
                    Taken::Part => BodyAt::Streams,
                }
            };
            let head = fill_head(&parts, body, None, &mut bufs.inb, &mut bufs.req);
            if let BodyAt::Whole(_) = body {
                bufs.inb.put(&early);
                early.clear();
            }
            let is_head = parts.method == http::Method::HEAD;
            let exchange = Exchange::new(recv, respond, is_head, early);
            if let Some(t) = trailers {
                exchange.set_trailers(t);
            }
            (head, exchange)
        };
    drop(parts);
    // Boxed, so that the stream's task stays small: the request's state
    // (about 4 KiB) is made in a plain allocation when the task first
    // runs, instead of being copied twice into a task block aligned to
    // 128 bytes at the spawn.
    Box::pin(serve_one(&worker, &shared, exchange, bufs, head)).await;
    shared.open.set(shared.open.get() - 1);
}

/// Counts a request whose trailers were dropped.
#[cold]
fn count_dropped_trailers(worker: &Worker) {
    worker
        .shared
        .global
        .request_trailers_dropped
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// A fresh `Sec-WebSocket-Key` (16 random bytes, base64).
fn websocket_key() -> String {
    use base64::Engine;
    let bytes: [u8; 16] = std::array::from_fn(|_| fastrand::u8(..));
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Serves the request whose head is in `bufs` (its framing `head`, or why
/// it is refused) on the stream `exchange`; a `101` (an extended
/// CONNECT's upgrade) runs its tunnel here, on the stream, to its end.
async fn serve_one(
    worker: &Rc<Worker>,
    shared: &Shared,
    exchange: Exchange,
    mut bufs: Box<Bufs>,
    head: Result<RequestFraming, HeadError>,
) {
    let client = Stream::H2(Box::new(exchange));
    let slot = OwnSlot::new(&worker.deadlines);
    // Takes no entry unless the stream is authenticated.
    let revoke_slot = OwnSlot::new(&worker.deadlines);
    let link = Link {
        worker,
        client: &client,
        slot: &slot,
        revoke_slot: &revoke_slot,
        peer: &shared.peer,
    };
    worker.busy.touch();
    let snap = worker.shared.snapshot.load_full();
    let next = match head {
        Ok(framing) => {
            bufs.req_framing = framing;
            lifecycle::exchange(link, &snap, &mut bufs, Instant::now()).await
        }
        Err(e) => {
            refuse_head(link, &snap, &mut bufs, e).await;
            Next::Close
        }
    };
    worker.busy.touch();
    if let (Some(x), false) = (client.h2(), matches!(next, Next::Tunnel(_))) {
        // Trailers no upstream took: the body had a length, and went
        // with it and without them.
        if x.trailers_left() {
            count_dropped_trailers(worker);
        }
        // Answered whole before the body was all in: what of it comes
        // now is read and dropped, so that a client that sends it
        // whatever the answer ends its stream cleanly; one still sending
        // past the bound gets RST_STREAM NO_ERROR as the exchange goes.
        if x.body_left() {
            linger(&worker.deadlines, &client, &mut bufs.inb, DRAIN_MAX).await;
        }
    }
    worker.give_bufs(bufs);
    if let Next::Tunnel(h) = next {
        super::tunneled::relay_and_record(worker, &client, &snap, h).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_rate_allows_a_burst_then_its_rate() {
        let t0 = Instant::now();
        let mut r = StreamRate::new(100, t0);
        assert_eq!((0..150).filter(|_| r.admit(t0)).count(), 100);
        // A tenth of a second later: ten more.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!((0..50).filter(|_| r.admit(t1)).count(), 10);
        // However long the pause, no more than the burst.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..500).filter(|_| r.admit(t2)).count(), 100);
    }
}
