//! Per-connection drivers: how a connection starts, parks and comes back
//! (`start`), the HTTP/1.1 client connection's request loop (`conn`), one
//! request's phases in order (`lifecycle`) and the answers the session
//! makes itself (`answer`). Forwarding (`crate::upstream`)
//! sees the connection only as a [`crate::runtime::worker::Downstream`]
//! and never imports from here.

mod answer;
pub(crate) mod conn;
mod lifecycle;
pub(crate) mod park;
pub(crate) mod start;

#[cfg(test)]
mod tests;
