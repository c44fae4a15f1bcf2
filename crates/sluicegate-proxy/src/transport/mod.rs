//! Byte streams to clients and upstreams: one [`stream::Stream`] type for
//! plain TCP (the raw recv/send fast path), TLS, and an in-memory pipe for
//! tests; the receive buffer and reads and writes with deadlines.

#[cfg(test)]
pub(crate) mod duplex;
pub(crate) mod io;
pub(crate) mod stream;
