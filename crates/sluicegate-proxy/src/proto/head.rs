//! Message heads as routing, filters, balancing and logging see them:
//! method, target, version and header fields (as byte ranges into the
//! buffer the head was read from), and the facts about a request or
//! response that any HTTP version states (its authority, the protocol it
//! asks to switch to). How the message is framed on the wire is not here:
//! the HTTP/1.1 codec decides that beside the head (`codec::RequestFraming`,
//! `codec::ResponseFraming`), for the code that frames.

use std::ops::Range;

/// A header's name and value as ranges into the buffer the head was parsed from.
#[derive(Debug, Clone)]
pub struct HeaderRef {
    pub name: Range<usize>,
    pub value: Range<usize>,
    /// True for headers that must not be forwarded (hop-by-hop or ones the
    /// gateway rewrites itself).
    pub skip: bool,
}

/// A request head.
#[derive(Debug, Clone, Default)]
pub struct RequestHead {
    pub method: Range<usize>,
    pub target: Range<usize>,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub headers: Vec<HeaderRef>,
    /// The `Host` value: the request's authority.
    pub host: Option<Range<usize>>,
    /// Values of every `X-Forwarded-For` header, in order; the gateway
    /// forwards them joined, with the client's address appended.
    pub xff: Vec<Range<usize>>,
    /// The protocol the request asks to switch to: the `Upgrade` value of
    /// an HTTP/1.1 request whose `Connection` names `upgrade`. Forwarded
    /// as an upgrade only when the route allows it and there is no body.
    pub upgrade: Option<Range<usize>>,
}

/// A response head from an upstream.
#[derive(Debug, Clone, Default)]
pub struct ResponseHead {
    pub status: u16,
    pub minor: u8,
    pub headers: Vec<HeaderRef>,
    /// The `Upgrade` value (the protocol a `101` switches to).
    pub upgrade: Option<Range<usize>>,
}
