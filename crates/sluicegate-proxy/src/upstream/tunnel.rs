//! Upgraded connections: once an upstream answers `101 Switching
//! Protocols` to an upgrade the route allows (WebSocket by default), the
//! client's connection and the upstream's become one two-way byte tunnel,
//! until either side has closed and the other finished, or nothing passes
//! either way for `timeouts.tunnel_idle`. The upstream connection is never
//! pooled afterwards, and the client's is closed.
//!
//! Two steps: [`start`] runs in the connection's serving task, writes the
//! `101` (to an HTTP/2 client's extended CONNECT, RFC 8441, the stream's
//! `200` as fields) and whatever either side sent along with its head,
//! and counts the tunnel open; [`relay`] then runs in a task of the tunnel's own (see
//! `session::tunneled`), which holds only the two streams, the endpoint's
//! in-flight slot and a few counters, so that the serving task (its whole
//! request state machine) ends and gives its buffers back.
//!
//! A tunnel holds no buffer of its own: bytes are read into the worker's
//! relay buffer (16 KiB, shared by its tunnels) and written on at once;
//! only what the other side does not take at once is copied out and held,
//! until it is written.
//!
//! A tunnel holds the snapshot its request started with, so a reload does
//! not cut it, unless the reload revokes the app's authentication (see
//! `crate::worker::revoke`): then a WebSocket gets a close frame (1008,
//! policy violation) and the tunnel ends; on shutdown it runs on through the drain and ends itself a
//! tenth of `timeouts.drain` before the drain does, so that its close is
//! counted and logged.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::balance::endpoint::OwnedPermit;
use crate::clock::deadline::Stop;
use crate::observe::metrics::GlobalMetrics;
use crate::proto::http2::exchange::Exchange;
use crate::proto::http2::response::{append_field, client_fields};
use crate::snapshot::Snapshot;
use crate::transport::io::{read_ready, write_all_by};
use crate::transport::stream::Stream;
use crate::upstream::body::client_write_failed;
use crate::worker::revoke::Registered;
use crate::worker::upgraded::{Carried, Upgraded};
use crate::worker::{Bufs, Downstream, Worker, BUF_SIZE};

/// Which side had bytes (or a close) first, or whether the tunnel's
/// authentication was revoked.
enum Side {
    Client(std::io::Result<()>),
    Upstream(std::io::Result<()>),
    Revoked,
}

/// The wait for the revocation of a tunnel's registered grant, for
/// [`relay`]: it holds the registration, which ends when it is dropped.
pub(crate) fn revoke_wait(reg: Registered<'_>) -> RevokeWait<'_> {
    Box::pin(async move { reg.grant.wait().await })
}

/// The wait for a tunnel's revocation, boxed (only tunnels of an
/// authenticated app have one: the others' tasks stay as small).
pub(crate) type RevokeWait<'g> = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'g>>;

/// Ready when the grant `w` waits on is revoked; never without one.
fn poll_revoked(
    w: &mut Option<RevokeWait<'_>>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<()> {
    match w {
        Some(w) => w.as_mut().poll(cx),
        None => std::task::Poll::Pending,
    }
}

/// A server's WebSocket close frame: 1008 (policy violation), with a reason.
const CLOSE_1008: &[u8] = b"\x88\x09\x03\xf0revoked";

/// Whether a request may upgrade to `value` (its `Upgrade` header) on a
/// route that allows `allowed`: every protocol it names is listed there
/// (a `/version` suffix aside), and none is `h2c`.
pub(crate) fn allowed(value: &[u8], allowed: &[Box<str>]) -> bool {
    !allowed.is_empty()
        && value.split(|&b| b == b',').all(|token| {
            let token = crate::proto::bytes::trim(token);
            let name = token.split(|&b| b == b'/').next().unwrap_or(token);
            !name.is_empty()
                && !name.eq_ignore_ascii_case(b"h2c")
                && allowed
                    .iter()
                    .any(|a| a.as_bytes().eq_ignore_ascii_case(name))
        })
}

/// Writes the `101` as it goes to the client into `bufs.out`: the
/// upstream's status line and end-to-end headers, the filters' response
/// fields, and `Connection: upgrade` with the upstream's `Upgrade`; takes
/// the upstream's head out of `bufs.upb`.
fn switching_head(bufs: &mut Bufs) {
    let raw = bufs.upb.filled();
    let (res, framing) = (&bufs.res, bufs.res_framing);
    let out = &mut bufs.out;
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\n");
    let (len, crlf) = (framing.len, framing.crlf);
    crate::proto::codec::append_header_lines(out, raw, &res.headers, len, crlf, |h| !h.skip);
    bufs.edits.response_headers.write_h1(out);
    out.extend_from_slice(b"connection: upgrade\r\nupgrade: ");
    if let Some(u) = &res.upgrade {
        out.extend_from_slice(&raw[u.clone()]);
    }
    out.extend_from_slice(b"\r\n\r\n");
    bufs.upb.consume(len);
}

/// An extended CONNECT's tunnel (RFC 8441) opened on the client's HTTP/2
/// stream: the upstream's `101` as the stream's `200`, with the upstream's
/// end-to-end fields (not its `Sec-WebSocket-Accept`: the key it answers
/// was the gateway's) and the filters' response fields; takes the
/// upstream's head out of `bufs.upb`.
fn open_h2_tunnel(bufs: &mut Bufs, x: &Exchange) -> std::io::Result<()> {
    let raw = bufs.upb.filled();
    let (res, len) = (&bufs.res, bufs.res_framing.len);
    let edits = &bufs.edits.response_headers;
    let mut fields = client_fields(raw, len, &res.headers, edits.len(), |h| {
        !h.skip && !raw[h.name.clone()].eq_ignore_ascii_case(b"sec-websocket-accept")
    });
    edits
        .iter()
        .for_each(|(n, v)| append_field(&mut fields, n, v));
    bufs.upb.consume(len);
    x.open_tunnel(fields)
}

/// Starts the tunnel after the upstream's `101` (its head in `bufs.upb`,
/// and what it sent after it): counts it open, writes the `101` and those
/// bytes to the client, and what the client sent after its request head
/// (in `bufs.inb`) to the upstream. The open tunnel for its own task to
/// [`relay`]; or, when a side failed already, what was carried (the
/// tunnel is over and counted).
pub(super) async fn start(
    down: &Downstream<'_>,
    up: Stream,
    permit: OwnedPermit,
    bufs: &mut Bufs,
    snap: &Snapshot,
) -> Result<Box<Upgraded>, Carried> {
    let shared = down.worker.shared.clone();
    let global = &shared.global;
    global.tunnels_open.fetch_add(1, Relaxed);
    global.tunnels_total.fetch_add(1, Relaxed);
    let mut t = Box::new(Upgraded {
        up,
        permit,
        shared,
        carried: Carried::default(),
    });
    let dl = &down.worker.deadlines;
    // The 101 (an HTTP/2 stream's 200) and the upstream's first bytes,
    // then the client's.
    let opened = match down.client.h2() {
        Some(x) => {
            bufs.out.clear();
            open_h2_tunnel(bufs, x)
        }
        None => {
            switching_head(bufs);
            Ok(())
        }
    };
    bufs.out.extend_from_slice(bufs.upb.filled());
    bufs.upb.clear();
    let wait = dl.after(snap.timeouts.client_write);
    let written = match opened {
        Ok(()) => write_all_by(down.client, &bufs.out, wait).await,
        failed => failed,
    };
    match written {
        Ok(()) => t.carried.down += bufs.out.len() as u64,
        Err(e) => {
            client_write_failed(down.worker, &e);
            return Err(count(&t.shared.global, t.carried));
        }
    }
    if !bufs.inb.is_empty() {
        let idle = snap.timeouts.tunnel_idle;
        if write_all_by(&t.up, bufs.inb.filled(), dl.after(idle))
            .await
            .is_err()
        {
            return Err(count(&t.shared.global, t.carried));
        }
        t.carried.up += bufs.inb.len() as u64;
        bufs.inb.clear();
    }
    Ok(t)
}

/// What became of what one side of a tunnel had for the other.
enum Passed {
    /// Nothing after all (a wake-up without bytes).
    Nothing,
    /// The side is done sending.
    End,
    /// `k` bytes were read; `rest` of them (maybe none but a TLS record
    /// not out yet) the other side did not take at once.
    Read {
        k: usize,
        rest: Option<Vec<u8>>,
    },
    Failed,
}

/// Reads what `from` has into the worker's relay buffer and writes it to
/// `to` at once; what `to` does not take now is copied out, for the
/// tunnel to hold until it is written. No await: the buffer is the
/// worker's, shared by its tunnels.
fn pass(worker: &Worker, from: &Stream, to: &Stream) -> Passed {
    let mut buf = worker.relay_buf.borrow_mut();
    if buf.is_empty() {
        buf.resize(BUF_SIZE, 0);
    }
    let k = match from.try_recv(&mut buf) {
        Ok(0) => return Passed::End,
        Ok(k) => k,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Passed::Nothing,
        Err(_) => return Passed::Failed,
    };
    let bytes = &buf[..k];
    let rest = match to.try_send(bytes) {
        Ok(n) if n == k && to.try_flush().is_ok() => None,
        Ok(0) => return Passed::Failed,
        Ok(n) => Some(bytes[n..].to_vec()),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Some(bytes.to_vec()),
        Err(_) => return Passed::Failed,
    };
    Passed::Read { k, rest }
}

/// Runs an open tunnel between `client` and its upstream until either
/// side is done, it idles past `timeouts.tunnel_idle` or the drain is
/// about to end; then closes its upstream side, counts it closed and its
/// bytes in the metrics, and returns what it carried in all (the `101`
/// and the first bytes included).
pub(crate) async fn relay(
    t: Box<Upgraded>,
    worker: &Worker,
    client: &Stream,
    snap: &Snapshot,
    mut revoke_wait: Option<RevokeWait<'_>>,
    websocket: bool,
) -> Carried {
    let idle = snap.timeouts.tunnel_idle;
    let dl = &worker.deadlines;
    let up = &t.up;
    let mut carried = t.carried;
    let (mut client_open, mut up_open) = (true, true);
    // Once the worker drains: when this tunnel ends itself, a little before
    // the drain does (so that its end is logged).
    let mut drain_by: Option<Instant> = None;
    let mut last = Instant::now();
    loop {
        let idle_end = last + idle;
        let wait = match drain_by {
            None => dl.at(idle_end).or_shutdown(),
            Some(by) => dl.at(by.min(idle_end)),
        };
        let side = wait
            .bound(async {
                tokio::select! {
                    r = read_ready(client), if client_open => Side::Client(r),
                    r = read_ready(up), if up_open => Side::Upstream(r),
                    () = std::future::poll_fn(|cx| poll_revoked(&mut revoke_wait, cx)) => Side::Revoked,
                }
            })
            .await;
        let (from, to, open, n) = match side {
            Err(Stop::Shutdown) => {
                let drain = snap.timeouts.drain;
                drain_by = Some(Instant::now() + drain.saturating_sub(drain / 10));
                continue;
            }
            // Idle past tunnel_idle, or the drain is ending.
            Err(Stop::Timeout) => break,
            Ok(Side::Revoked) => {
                if websocket && client_open {
                    let by = dl.after(snap.timeouts.client_write.min(Duration::from_secs(1)));
                    let _ = Box::pin(write_all_by(client, CLOSE_1008, by)).await;
                }
                if let Some(x) = client.h2() {
                    x.cancel();
                } else {
                    client.shutdown_write();
                }
                break;
            }
            Ok(Side::Client(r)) => (r.map(|()| client), up, &mut client_open, &mut carried.up),
            Ok(Side::Upstream(r)) => (r.map(|()| up), client, &mut up_open, &mut carried.down),
        };
        let Ok(from) = from else { break };
        match pass(worker, from, to) {
            Passed::Nothing => continue,
            Passed::End => {
                // One side is done sending: pass its end on, and carry the
                // other way until that side is done too.
                *open = false;
                to.shutdown_write();
                if !client_open && !up_open {
                    break;
                }
            }
            Passed::Read { k, rest } => {
                if let Some(rest) = rest {
                    // The other side is slow: these bytes are the only
                    // buffer a tunnel holds, until they are written. (The
                    // write's future is boxed: kept inline, it would be
                    // most of every idle tunnel's task.)
                    let write = Box::pin(write_all_by(to, &rest, dl.after(idle)));
                    if write.await.is_err() {
                        break;
                    }
                }
                *n += k as u64;
                last = Instant::now();
            }
            Passed::Failed => break,
        }
    }
    let global = &worker.shared.global;
    drop(t);
    count(global, carried)
}

/// Adds a finished tunnel's bytes to the metrics.
fn count(global: &GlobalMetrics, c: Carried) -> Carried {
    global.tunnel_bytes_up.fetch_add(c.up, Relaxed);
    global.tunnel_bytes_down.fetch_add(c.down, Relaxed);
    c
}

#[cfg(test)]
mod tests {
    use super::allowed;

    #[test]
    fn only_listed_protocols_and_never_h2c() {
        let ws: Vec<Box<str>> = vec!["websocket".into()];
        assert!(allowed(b"websocket", &ws));
        assert!(allowed(b"WebSocket", &ws));
        assert!(!allowed(b"h2c", &ws));
        assert!(!allowed(b"websocket, h2c", &ws));
        assert!(!allowed(b"irc/6.9", &ws));
        assert!(!allowed(b"", &ws));
        assert!(!allowed(b"websocket", &[]));
        let two: Vec<Box<str>> = vec!["websocket".into(), "irc".into()];
        assert!(allowed(b"irc/6.9, websocket", &two));
        let h2c: Vec<Box<str>> = vec!["h2c".into()];
        assert!(!allowed(b"h2c", &h2c), "never h2c, whatever is listed");
    }
}
