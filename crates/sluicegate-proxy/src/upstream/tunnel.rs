//! Upgraded connections: once an upstream answers `101 Switching
//! Protocols` to an upgrade the route allows (WebSocket by default), the
//! client's connection and the upstream's become one two-way byte tunnel,
//! until either side has closed and the other finished, or nothing passes
//! either way for `timeouts.tunnel_idle`. The upstream connection is never
//! pooled afterwards, and the client's is closed.
//!
//! An idle tunnel holds no buffer: the request's buffers are given up once
//! the tunnel starts, grow again when bytes come (4 KiB, up to 16 KiB), and
//! are given up again after a second without any.
//!
//! A tunnel holds the snapshot its request started with, so a reload does
//! not cut it; on shutdown it runs on through the drain and ends itself a
//! tenth of `timeouts.drain` before the drain does, so that its close is
//! counted and logged.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// A tunnel that carried nothing for this long gives up its buffers.
const RELEASE_AFTER: Duration = Duration::from_secs(1);

use crate::observe::metrics::GlobalMetrics;
use crate::runtime::deadline::Stop;
use crate::runtime::worker::{Bufs, Downstream, BUF_SIZE, FIRST_BUF_SIZE};
use crate::snapshot::Snapshot;
use crate::transport::io::{read_ready, write_all_by, RecvBuf};
use crate::transport::stream::Stream;
use crate::upstream::body::client_write_failed;

/// Which side had bytes (or a close) first.
enum Side {
    Client(std::io::Result<()>),
    Upstream(std::io::Result<()>),
}

/// Bytes a tunnel carried: client to upstream, upstream to client
/// (the 101's head included).
pub(super) struct Carried {
    pub up: u64,
    pub down: u64,
}

/// Counts an open tunnel in the metrics until dropped.
struct Open<'a>(&'a GlobalMetrics);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.tunnels_open.fetch_sub(1, Relaxed);
    }
}

/// Whether a request may upgrade to `value` (its `Upgrade` header) on a
/// route that allows `allowed`: every protocol it names is listed there
/// (a `/version` suffix aside), and none is `h2c`.
pub(super) fn allowed(value: &[u8], allowed: &[Box<str>]) -> bool {
    !allowed.is_empty()
        && value.split(|&b| b == b',').all(|token| {
            let token = crate::proto::codec::trim(token);
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
    let res = &bufs.res;
    let out = &mut bufs.out;
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\n");
    crate::proto::codec::append_header_lines(out, raw, &res.headers, res.len, res.crlf, |h| {
        !h.skip
    });
    bufs.edits.response_headers.write_h1(out);
    out.extend_from_slice(b"connection: upgrade\r\nupgrade: ");
    if let Some(u) = &res.upgrade {
        out.extend_from_slice(&raw[u.clone()]);
    }
    out.extend_from_slice(b"\r\n\r\n");
    let len = res.len;
    bufs.upb.consume(len);
}

/// Runs the tunnel after the upstream's `101` (its head in `bufs.upb`,
/// and what it sent after it); what the client sent after its request
/// head is in `bufs.inb`.
pub(super) async fn run(
    down: &Downstream<'_>,
    up: &Stream,
    bufs: &mut Bufs,
    snap: &Snapshot,
) -> Carried {
    let global = &down.worker.shared.global;
    global.tunnels_open.fetch_add(1, Relaxed);
    global.tunnels_total.fetch_add(1, Relaxed);
    let _open = Open(global);
    let idle = snap.timeouts.tunnel_idle;
    let dl = &down.worker.deadlines;
    let mut carried = Carried { up: 0, down: 0 };
    // The 101 and the upstream's first bytes, then the client's.
    switching_head(bufs);
    bufs.out.extend_from_slice(bufs.upb.filled());
    bufs.upb.clear();
    match write_all_by(down.client, &bufs.out, dl.after(snap.timeouts.client_write)).await {
        Ok(()) => carried.down += bufs.out.len() as u64,
        Err(e) => {
            client_write_failed(down.worker, &e);
            return count(global, carried);
        }
    }
    if !bufs.inb.is_empty() {
        if write_all_by(up, bufs.inb.filled(), dl.after(idle))
            .await
            .is_err()
        {
            return count(global, carried);
        }
        carried.up += bufs.inb.len() as u64;
        bufs.inb.clear();
    }
    let (mut client_open, mut up_open) = (true, true);
    // Once the worker drains: when this tunnel ends itself, a little before
    // the drain does (so that its end is logged).
    let mut drain_by: Option<Instant> = None;
    // An idle tunnel holds no buffer: they are given up now, grow again
    // when bytes come, and are given up after RELEASE_AFTER without any.
    release(bufs);
    let mut holding = false;
    let mut last = Instant::now();
    loop {
        let idle_end = last + idle;
        let wake = if holding {
            (last + RELEASE_AFTER).min(idle_end)
        } else {
            idle_end
        };
        let wait = match drain_by {
            None => dl.at(wake).or_shutdown(),
            Some(by) => dl.at(by.min(wake)),
        };
        let side = wait
            .bound(async {
                tokio::select! {
                    r = read_ready(down.client), if client_open => Side::Client(r),
                    r = read_ready(up), if up_open => Side::Upstream(r),
                }
            })
            .await;
        let (from, to, buf, open, n) = match side {
            Err(Stop::Shutdown) => {
                let drain = snap.timeouts.drain;
                drain_by = Some(Instant::now() + drain.saturating_sub(drain / 10));
                continue;
            }
            Err(Stop::Timeout) => {
                let now = Instant::now();
                if holding && now < idle_end && drain_by.is_none_or(|by| now < by) {
                    // Quiet for a while: give the buffers up.
                    release(bufs);
                    holding = false;
                    continue;
                }
                // Idle past tunnel_idle, or the drain is ending.
                break;
            }
            Ok(Side::Client(r)) => (
                r.map(|()| down.client),
                up,
                &mut bufs.inb,
                &mut client_open,
                &mut carried.up,
            ),
            Ok(Side::Upstream(r)) => (
                r.map(|()| up),
                down.client,
                &mut bufs.upb,
                &mut up_open,
                &mut carried.down,
            ),
        };
        let Ok(from) = from else { break };
        match buf.try_fill(from, BUF_SIZE) {
            Ok(None) => continue,
            Ok(Some(0)) => {
                // One side is done sending: pass its end on, and carry the
                // other way until that side is done too.
                *open = false;
                to.shutdown_write();
                if !client_open && !up_open {
                    break;
                }
            }
            Ok(Some(k)) => {
                if write_all_by(to, buf.filled(), dl.after(idle))
                    .await
                    .is_err()
                {
                    break;
                }
                *n += k as u64;
                buf.clear();
                holding = true;
                last = Instant::now();
            }
            Err(_) => break,
        }
    }
    restore(bufs);
    count(global, carried)
}

/// Gives up the request buffers' memory while a tunnel is quiet.
fn release(bufs: &mut Bufs) {
    bufs.inb = RecvBuf::new(0);
    bufs.upb = RecvBuf::new(0);
    bufs.out = Vec::new();
}

/// Puts back buffers of a new set's size for the next use of `bufs`.
fn restore(bufs: &mut Bufs) {
    if bufs.inb.capacity() < FIRST_BUF_SIZE {
        bufs.inb = RecvBuf::new(FIRST_BUF_SIZE);
    }
    if bufs.upb.capacity() < FIRST_BUF_SIZE {
        bufs.upb = RecvBuf::new(FIRST_BUF_SIZE);
    }
    if bufs.out.capacity() < FIRST_BUF_SIZE {
        bufs.out = Vec::with_capacity(FIRST_BUF_SIZE);
    }
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
