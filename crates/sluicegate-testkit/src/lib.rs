//! Sluicegate's test kit: real peers and blocking clients for end-to-end tests.
//!
//! - [`upstream`]: [`TestUpstream`], an HTTP/1.1 server steered by the request's
//!   query string (echo, status, delays, close modes, chunked replies), and
//!   [`RawUpstream`] for tests that write arbitrary bytes.
//! - [`nginx`]: [`Nginx`], Debian's nginx started on a free port with a fixed site
//!   (or a config the test renders).
//! - [`haproxy`]: [`Haproxy`], Debian's HAProxy with a test's config, as a peer.
//! - [`redis`]: [`RedisServer`] and [`RedisCluster`], Debian's `redis-server`
//!   on free loopback ports.
//! - [`varnish`]: [`Varnish`], Debian's varnishd with a test's VCL, as a
//!   reference cache.
//! - [`dns`]: [`DnsServer`], an authoritative DNS server on a free loopback
//!   port (UDP and TCP) answering A, AAAA and SRV from a table the test changes.
//! - [`gateway`]: [`Gateway`], the sluicegate binary run from a YAML string.
//! - [`client`]: blocking helpers ([`http_get`], [`raw_exchange`],
//!   [`KeepAliveClient`]) with a 5 s default timeout.
//! - [`curl`]: one-shot HTTP/2 requests by the `curl` CLI ([`curl_request`])
//!   and [`Proto`], to run a test over HTTP/1.1 and HTTP/2.
//!
//! Everything here uses plain std blocking sockets and threads so that it
//! never shares a runtime with the code under test.
#![forbid(unsafe_code)]

pub mod client;
pub mod curl;
pub mod dns;
pub mod gateway;
pub mod haproxy;
pub mod nginx;
pub mod redis;
pub mod upstream;
pub mod varnish;
mod wire;

pub use client::{
    http_get, http_request, raw_exchange, try_http_get, try_http_request, KeepAliveClient, Response,
};
pub use curl::{curl_request, Proto};
pub use dns::{DnsServer, Srv};
pub use gateway::{free_port, Gateway};
pub use haproxy::Haproxy;
pub use nginx::Nginx;
pub use redis::{RedisCluster, RedisServer, RedisTls};
pub use upstream::{read_request_head, RawUpstream, SeenRequest, TestUpstream};
pub use varnish::Varnish;
