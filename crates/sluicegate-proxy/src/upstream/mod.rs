//! The upstream side: forwarding a request and streaming its answer back,
//! requests the gateway makes itself (the internal client, `client`; the
//! copies a route's `mirror` sends with it, `mirror`) and
//! responses held in memory and replayed (`held`), new connections to
//! endpoints (`dial`), HTTP/2 connections to endpoints
//! (`h2pool`, their data in the worker in `crate::worker::h2conns`),
//! tunnels after a `101` (`tunnel`, an open one as handed on in
//! `crate::worker::upgraded`), the upstream
//! heads, and active health checks. The per-service state they read
//! (endpoints, balancers, breakers, ejection, retry budgets) is in
//! `balance/`.

mod attempt;
pub(crate) mod body;
pub(crate) mod compress;
// The internal client and held responses: for the features built on them
// (mirroring, caching, aggregation, forward auth); only their tests use
// them until those land.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod client;
mod connect;
mod dial;
mod duplex;
pub(crate) mod failure;
mod fill;
pub(crate) mod forward;
pub(crate) mod h2pool;
pub(crate) mod handback;
pub(crate) mod head;
pub(crate) mod health;
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod held;
pub(crate) mod mirror;
mod outcome;
mod plan;
pub(crate) mod refresh;
pub(crate) mod tunnel;
