//! Byte streams to clients and upstreams: one [`stream::Stream`] type for
//! plain TCP (the raw recv/send fast path, in [`tcp`]), TLS, and an
//! in-memory pipe for tests; the receive buffer and reads and writes with deadlines; the
//! listeners' own settings and what a connection goes through before its
//! first request (the PROXY protocol header, the TLS handshake); the
//! client address behind trusted proxies.

#[cfg(test)]
pub(crate) mod duplex;
pub(crate) mod forwarded;
pub(crate) mod h2io;
pub(crate) mod io;
pub(crate) mod listener;
pub(crate) mod proxy_protocol;
pub(crate) mod stream;
pub(crate) mod tcp;
pub(crate) mod tls;
pub(crate) mod uring;
