//! One worker's HTTP/2 connections to endpoints, as data: by endpoint,
//! the connections open and being opened, and what a request does for its
//! stream ([`H2Pool::plan`]). Opening and driving them is
//! [`crate::upstream::h2pool`]'s.

use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::sync::Notify;

use crate::proto::http2::upstream::ConnState;

/// Connections a worker opens to one endpoint at most.
pub(crate) const MAX_CONNS: usize = 4;
/// Streams one connection carries at once at most, whatever the peer
/// allows.
pub(crate) const MAX_STREAMS: usize = 256;

/// One connection to an endpoint.
pub(crate) struct Conn {
    pub(crate) send: SendRequest<Bytes>,
    pub(crate) state: ConnState,
}

/// One endpoint's connections in a worker.
#[derive(Default)]
struct Endpoint {
    conns: Vec<Conn>,
    /// Connections being opened now.
    opening: usize,
    /// Woken when one of those is open (or failed).
    opened: Rc<Notify>,
}

/// One worker's HTTP/2 connections, by endpoint id.
#[derive(Default)]
pub(crate) struct H2Pool {
    endpoints: HashMap<usize, Endpoint>,
}

/// What a request does for its stream.
pub(crate) enum Plan {
    Use(SendRequest<Bytes>, ConnState),
    /// Open a connection (counted in `opening`).
    Open,
    /// Wait for one being opened.
    Wait(Rc<Notify>),
}

impl std::fmt::Debug for H2Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Pool")
            .field("endpoints", &self.endpoints.len())
            .finish()
    }
}

impl H2Pool {
    /// What a request to endpoint `id` does: take a stream on a usable
    /// connection with room; else open one while fewer than [`MAX_CONNS`]
    /// are open or opening; else queue on the least busy one, or wait for
    /// one being opened. Connections no longer usable are dropped.
    pub(crate) fn plan(&mut self, id: usize) -> Plan {
        let e = self.endpoints.entry(id).or_default();
        e.conns.retain(|c| c.state.usable.get());
        let best = e.conns.iter().min_by_key(|c| c.state.open.get());
        if let Some(c) = best {
            let cap = c.send.current_max_send_streams().min(MAX_STREAMS);
            if c.state.open.get() < cap {
                return Plan::Use(c.send.clone(), c.state.clone());
            }
        }
        if e.conns.len() + e.opening < MAX_CONNS {
            e.opening += 1;
            return Plan::Open;
        }
        match best {
            Some(c) => Plan::Use(c.send.clone(), c.state.clone()),
            None => Plan::Wait(e.opened.clone()),
        }
    }

    /// A connection to `id` opened (`Some`) or failed to (`None`).
    pub(crate) fn opened(&mut self, id: usize, conn: Option<Conn>) {
        let e = self.endpoints.entry(id).or_default();
        e.opening = e.opening.saturating_sub(1);
        if let Some(c) = conn {
            e.conns.push(c);
        }
        e.opened.notify_waiters();
    }
}
