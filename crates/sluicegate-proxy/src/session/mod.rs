//! Per-connection drivers: how a connection starts, parks and comes back
//! (`start`; its count, `active`; the task of the worker's park set
//! (`crate::worker::parkset`), `park`), the HTTP/1.1 client connection's state and request
//! loop (`conn`, the one `impl Conn`), what a request knows of its
//! connection (`peer`: the peer's facts, and the borrowed `Link` the
//! request code takes in place of the connection), what a request's
//! phases after routing know of it (`req`), one request's phases
//! in order (`lifecycle`; its filters phase, `filtering`; its action's
//! split pick and fault, `action`; its fallback's answer, `fallback`;
//! what its head says of gRPC, `grpc`; its id, trace context and span, `ids`), the
//! answers the session makes itself (`answer`), the task an upgraded
//! connection's tunnel runs in (`tunneled`), and HTTP/2 connections, whose
//! streams go through the same request code (`h2`). Forwarding
//! (`crate::upstream`) sees the connection only as a
//! [`crate::worker::Downstream`] and never imports from here.

mod action;
mod active;
mod aggregate;
mod answer;
mod authz;
mod cached;
pub(crate) mod conn;
mod extauthz;
mod fallback;
mod filtering;
mod grpc;
mod h2;
mod ids;
mod lifecycle;
pub(crate) mod park;
mod peer;
mod req;
mod revocable;
pub(crate) mod start;
mod tunneled;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
