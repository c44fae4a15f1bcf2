//! HTTP/2 connections to endpoints, per worker: each request to a service
//! that speaks HTTP/2 is a stream on one of its endpoint's connections,
//! so a few connections carry every request in flight (requests are
//! balanced per request, not per connection). A connection takes new
//! streams up to the peer's `max_concurrent_streams` (and
//! [`MAX_STREAMS`]); past that a new connection opens, up to
//! [`MAX_CONNS`](crate::worker::h2conns::MAX_CONNS) per endpoint and worker,
//! after which streams queue on the least busy one. A connection the peer
//! sent GOAWAY on (or that failed) takes no new stream; its streams under
//! way finish. An idle connection closes after the service's
//! `timeouts.idle`.
//!
//! The connections themselves, and the choice a request makes among
//! them, are data in the worker ([`crate::worker::h2conns`]); this module opens
//! and drives them.

use std::io;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use sluicegate_config::UpstreamProtocol;

use crate::balance::endpoint::EndpointState;
use crate::proto::http2::upstream::{ConnState, UpExchange};
use crate::snapshot::ServiceRt;
use crate::transport::h2io::{Flood, H2Io};
use crate::transport::stream::Stream;
use crate::worker::h2conns::{Conn, Plan, MAX_STREAMS};
use crate::worker::Worker;

/// Receive windows for responses: large enough not to hold back a fast
/// upstream on a path with latency.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONN_WINDOW: u32 = 8 * 1024 * 1024;

/// A stream to `ep` for one request, on a connection of the worker's
/// (`true`) or a new one (`false`), connected within `timeout`.
pub(crate) async fn stream(
    worker: &Worker,
    ep: &EndpointState,
    service: &ServiceRt,
    timeout: Duration,
) -> io::Result<(Stream, bool)> {
    let deadline = Instant::now() + timeout;
    loop {
        let plan = worker.h2.borrow_mut().plan(ep.id);
        match plan {
            Plan::Use(send, state) => return Ok((up_stream(send, state), true)),
            Plan::Wait(opened) => {
                let wait = worker.until(deadline).bound(opened.notified()).await;
                if wait.is_err() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
            }
            Plan::Open => {
                // Boxed: a handshake's state machine is large, and only a
                // new connection pays for it, not every stream.
                let opened = Box::pin(open(worker, ep, service, deadline)).await;
                return match opened {
                    Ok(Opened::H2(conn)) => {
                        let (send, state) = (conn.send.clone(), conn.state.clone());
                        worker.h2.borrow_mut().opened(ep.id, Some(conn));
                        Ok((up_stream(send, state), false))
                    }
                    Ok(Opened::Http1(s)) => {
                        worker.h2.borrow_mut().opened(ep.id, None);
                        Ok((s, false))
                    }
                    Err(e) => {
                        worker.h2.borrow_mut().opened(ep.id, None);
                        Err(e)
                    }
                };
            }
        }
    }
}

/// What opening a connection gave.
enum Opened {
    H2(Conn),
    /// `auto`, and the endpoint chose HTTP/1.1 by ALPN.
    Http1(Stream),
}

/// Opens a connection to `ep` by `deadline` and starts its driver.
async fn open(
    worker: &Worker,
    ep: &EndpointState,
    service: &ServiceRt,
    deadline: Instant,
) -> io::Result<Opened> {
    let timeout = deadline.saturating_duration_since(Instant::now());
    let conn = super::dial::connect_stream(&worker.deadlines, ep, service, timeout).await?;
    if let Stream::Tls(t) = &conn {
        if service.protocol == UpstreamProtocol::Auto && !t.alpn_h2() {
            // The endpoint chose HTTP/1.1: this request goes as one, and
            // the connection joins the keep-alive pool after it.
            return Ok(Opened::Http1(conn));
        }
    }
    let mut b = h2::client::Builder::new();
    b.initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONN_WINDOW)
        .max_concurrent_reset_streams(MAX_STREAMS);
    let io = H2Io::client(conn, Flood::default());
    let handshake = worker
        .until(deadline)
        .bound(b.handshake::<_, Bytes>(io))
        .await;
    let (send, connection) = match handshake {
        Ok(Ok(pair)) => pair,
        Ok(Err(e)) => return Err(io::Error::other(e)),
        Err(_) => return Err(io::ErrorKind::TimedOut.into()),
    };
    let state = ConnState::default();
    state.usable.set(true);
    let idle = service.timeouts.idle;
    let watch = state.clone();
    let name = ep.name.clone();
    tokio::task::spawn_local(async move {
        drive(connection, watch, idle, &name).await;
    });
    Ok(Opened::H2(Conn { send, state }))
}

fn up_stream(send: SendRequest<Bytes>, state: ConnState) -> Stream {
    Stream::H2Up(Box::new(UpExchange::new(send, state)))
}

/// Runs a connection until it ends, or until it carried no stream for
/// `idle` (then it closes).
async fn drive(
    mut connection: h2::client::Connection<H2Io, Bytes>,
    state: ConnState,
    idle: Duration,
    name: &str,
) {
    let mut quiet_since: Option<Instant> = None;
    let tick = idle
        .min(Duration::from_secs(1))
        .max(Duration::from_millis(10));
    loop {
        match tokio::time::timeout(tick, &mut connection).await {
            Ok(Ok(())) => break,
            Ok(Err(e)) => {
                tracing::debug!(endpoint = name, error = %e, "HTTP/2 upstream connection ended");
                break;
            }
            Err(_) => {
                if state.open.get() > 0 {
                    quiet_since = None;
                    continue;
                }
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= idle {
                    // No new stream goes on it from here; it closes.
                    state.usable.set(false);
                    break;
                }
            }
        }
    }
    state.usable.set(false);
}
