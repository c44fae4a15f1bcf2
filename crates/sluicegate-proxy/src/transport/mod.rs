//! Byte streams to clients and upstreams: the receive buffer and reads
//! and writes with deadlines on the raw recv/send fast path.

pub(crate) mod io;
