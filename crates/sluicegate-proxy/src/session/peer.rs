//! What a request's code knows of the connection it came on, and nothing
//! it could change: the client's address and where it came in ([`Peer`],
//! one per connection, shared by an HTTP/2 connection's streams), and the
//! borrowed view every phase after the head takes ([`Link`]: the worker,
//! the stream to answer on, the deadline slot and the peer). The
//! connection's own state (buffers, keep-alive, tunnel hand-off) stays
//! with its request loop ([`super::conn`]).

use std::net::SocketAddr;

use compact_str::CompactString;

use crate::clock::deadline::OwnSlot;
use crate::transport::stream::Stream;
use crate::transport::tls::identity::ClientIdentity;
use crate::worker::{Downstream, Worker};

/// Who the client is and where it came in, fixed for the connection.
pub(crate) struct Peer {
    pub addr: SocketAddr,
    /// The client's address as text, formatted once for X-Forwarded-For
    /// and the log (inline: an IPv4 address takes no allocation).
    pub ip: CompactString,
    /// The listener's address (named in the log lines of refused
    /// requests).
    pub listener: SocketAddr,
    /// TLS version and cipher, on a TLS connection.
    pub tls: Option<(&'static str, &'static str)>,
    /// Every request is answered with a redirect to HTTPS.
    pub redirect_https: bool,
    /// Who the client certificate names (`auth: mtls`).
    pub identity: Option<Box<ClientIdentity>>,
}

/// A request's view of its connection, built on the stack for each one:
/// references only, nothing it can change.
#[derive(Clone, Copy)]
pub(super) struct Link<'a> {
    pub worker: &'a Worker,
    /// The stream the request is read from and answered on (an HTTP/2
    /// stream's own, on HTTP/2).
    pub client: &'a Stream,
    /// The deadline slot for the wait for a response head.
    pub slot: &'a OwnSlot<'a>,
    /// The slot of an authenticated request's wait before it registers as
    /// revocable (one per connection on HTTP/1.1, per stream on HTTP/2).
    pub revoke_slot: &'a OwnSlot<'a>,
    pub peer: &'a Peer,
}

impl<'a> Link<'a> {
    /// What forwarding uses of the connection.
    pub fn downstream(self) -> Downstream<'a> {
        Downstream {
            worker: self.worker,
            client: self.client,
            slot: self.slot,
            peer_ip: &self.peer.ip,
            https: self.peer.tls.is_some(),
        }
    }

    /// The request came on an HTTP/2 stream.
    pub fn http2(self) -> bool {
        matches!(self.client, Stream::H2(_))
    }
}
