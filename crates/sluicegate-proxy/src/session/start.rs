//! How a connection starts, parks and comes back: the serving task for a
//! plain connection at once, a task for the PROXY header and TLS handshake
//! first for the others; an idle keep-alive connection parked (a plain one
//! in the worker's park set, [`super::park`], a TLS one in a small task);
//! an upgraded one handed to its tunnel's task ([`super::tunneled`]); an
//! HTTP/2 one to its session ([`super::h2`]). The count of connections
//! that follows them from task to task is [`super::active`].

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use compact_str::ToCompactString;

use tokio::net::TcpStream;

use super::active::Active;
use super::conn::{Begin, Conn, End};
use super::peer::Peer;
use super::tunneled;
use crate::clock::deadline::OwnSlot;
use crate::transport::listener::{prepare, Accepted, ListenerRt, Prepared};
use crate::transport::stream::Stream;
use crate::transport::uring::Ring;
use crate::worker::parkset::ParkRefused;
use crate::worker::Worker;

/// Starts serving one accepted client connection, which the caller has
/// already counted in `open_connections`. A plain listener's connection is
/// served at once; one that needs a PROXY header or a TLS handshake first
/// gets a task for that, which hands the ready connection to a serving
/// task of its own (so the serving task never carries the handshake's
/// state, nor the plain one an extra layer).
pub(crate) fn accepted(
    worker: &Rc<Worker>,
    tcp: TcpStream,
    peer: SocketAddr,
    listener: Arc<ListenerRt>,
) {
    if listener.tls.is_none() && !listener.proxy_protocol {
        accepted_plain(worker, Stream::Tcp(tcp), peer, listener);
    } else {
        let active = Active::new(worker.clone());
        let tcp = Accepted::Tcp(tcp);
        tokio::task::spawn_local(prepare_then_serve(tcp, peer, listener, active));
    }
}

/// [`accepted`] for a connection a worker's io_uring accepted on a
/// listener that wants a PROXY header or TLS: prepared, then served, on
/// the ring.
pub(crate) fn accepted_ring(
    worker: &Rc<Worker>,
    ring: Rc<Ring>,
    fd: OwnedFd,
    peer: SocketAddr,
    listener: Arc<ListenerRt>,
) {
    let active = Active::new(worker.clone());
    let sock = Accepted::Ring(ring, fd);
    tokio::task::spawn_local(prepare_then_serve(sock, peer, listener, active));
}

/// [`accepted`] for a connection of a plain listener (no PROXY header, no
/// TLS), on whichever transport it came in (epoll or io_uring).
pub(crate) fn accepted_plain(
    worker: &Rc<Worker>,
    stream: Stream,
    peer: SocketAddr,
    listener: Arc<ListenerRt>,
) {
    let active = Active::new(worker.clone());
    let ready = Prepared {
        stream,
        client: peer,
        tls: ("", ""),
        identity: None,
        h2: false,
    };
    tokio::task::spawn_local(serve_stream(ready, listener, active, Begin::New(None)));
}

/// The PROXY header and the TLS handshake, bounded by the handshake
/// timeout (the header timeout on a plain listener); then the serving task.
async fn prepare_then_serve(
    tcp: Accepted,
    peer: SocketAddr,
    listener: Arc<ListenerRt>,
    active: Active,
) {
    let worker = active.worker();
    let limit = {
        let t = &worker.shared.snapshot.load().timeouts;
        if listener.tls.is_some() {
            t.tls_handshake
        } else {
            t.client_header
        }
    };
    let deadline = Instant::now() + limit;
    if let Some(ready) = prepare(&worker.deadlines, &listener, tcp, peer, deadline).await {
        if ready.h2 {
            tokio::task::spawn_local(super::h2::serve(ready, Vec::new(), listener, active));
            return;
        }
        // On a plain listener the PROXY header counted against the first
        // request's header time, which runs from the accept; a TLS
        // handshake has its own timeout, and the header time starts after it.
        let header_by = listener.tls.is_none().then_some(deadline);
        tokio::task::spawn_local(serve_stream(ready, listener, active, Begin::New(header_by)));
    }
}

/// Serves requests on a connection ready for them.
pub(crate) async fn serve_stream(
    p: Prepared,
    listener: Arc<ListenerRt>,
    active: Active,
    begin: Begin,
) {
    let last_end = match begin {
        Begin::New(_) => None,
        Begin::Resumed(end) => Some(end),
    };
    let worker = active.worker().clone();
    let tls = listener.tls.is_some().then_some(p.tls);
    let mut conn = Conn {
        worker: &worker,
        client: p.stream,
        peer: Peer {
            addr: p.client,
            ip: p.client.ip().to_compact_string(),
            listener: listener.addr,
            tls,
            redirect_https: listener.redirect_https,
            identity: p.identity,
        },
        h2c: listener.http2.is_some() && listener.tls.is_none(),
        bufs: None,
        last_end,
        slot: OwnSlot::new(&worker.deadlines),
        revoke_slot: OwnSlot::new(&worker.deadlines),
    };
    let end = conn.run(begin).await;
    let early = match (&end, &conn.bufs) {
        (End::Http2, Some(b)) => b.inb.filled().to_vec(),
        _ => Vec::new(),
    };
    if let Some(b) = conn.bufs.take() {
        worker.give_bufs(b);
    }
    match end {
        End::Close => {}
        End::Park(end) => {
            let expires = end + worker.shared.snapshot.load().timeouts.keepalive;
            let parked = Prepared {
                stream: conn.client,
                client: conn.peer.addr,
                tls: p.tls,
                identity: conn.peer.identity,
                h2: false,
            };
            park(parked, listener, active, end, expires);
        }
        End::Tunnel(snap, h) => {
            // The tunnel's own task takes the connection; this one ends.
            tokio::task::spawn_local(tunneled::run(conn.client, active, snap, h));
        }
        End::Http2 => {
            let ready = Prepared {
                stream: conn.client,
                client: conn.peer.addr,
                tls: p.tls,
                identity: conn.peer.identity,
                h2: true,
            };
            tokio::task::spawn_local(super::h2::serve(ready, early, listener, active));
        }
    }
}

/// A parked keep-alive connection that the park set does not take (TLS,
/// or no park set running): waits for its next request's bytes (then
/// serves it in a new serving task), the keep-alive timeout or the
/// worker's shutdown (then closes). Its future holds the connection and
/// one wait, a small fraction of a serving task's.
pub(super) async fn parked_wait(
    p: Prepared,
    listener: Arc<ListenerRt>,
    active: Active,
    end: Instant,
    expires: Instant,
) {
    let ready = {
        let wait = active.worker().deadlines.at(expires).or_shutdown();
        wait.bound(crate::transport::io::read_ready(&p.stream))
            .await
    };
    if let Ok(Ok(())) = ready {
        tokio::task::spawn_local(serve_stream(p, listener, active, Begin::Resumed(end)));
    }
}

/// Parks an idle keep-alive connection whose last answer was written at
/// `end`, until `expires`: in the worker's park set when it is a plain TCP
/// connection and the set's task runs, otherwise in a task of its own. At
/// shutdown it closes instead.
pub(super) fn park(
    p: Prepared,
    listener: Arc<ListenerRt>,
    active: Active,
    end: Instant,
    expires: Instant,
) {
    let worker = active.worker().clone();
    if worker.shutting_down() {
        return;
    }
    let set = &worker.parked;
    let Prepared {
        stream,
        client,
        tls,
        identity,
        h2: _,
    } = p;
    let (stream, listener) = match stream {
        Stream::Tcp(tcp) if listener.tls.is_none() && set.running.get() => {
            match set.insert(tcp, client, listener, end, expires) {
                Ok(()) => {
                    active.into_parked();
                    return;
                }
                Err(ParkRefused::Tcp(tcp, listener)) => (Stream::Tcp(tcp), listener),
                Err(ParkRefused::Closed) => return,
            }
        }
        other => (other, listener),
    };
    let p = Prepared {
        stream,
        client,
        tls,
        identity,
        h2: false,
    };
    tokio::task::spawn_local(parked_wait(p, listener, active, end, expires));
}
