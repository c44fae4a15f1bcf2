//! Byte streams to clients and upstreams: one [`stream::Stream`] type for
//! plain TCP (the raw recv/send fast path) and an in-memory pipe for
//! tests; the receive buffer and reads and writes with deadlines; what a
//! listener reads before the first request (the PROXY protocol header)
//! and the client address behind trusted proxies.

#[cfg(test)]
pub(crate) mod duplex;
pub(crate) mod forwarded;
pub(crate) mod io;
pub(crate) mod proxy_protocol;
pub(crate) mod stream;
