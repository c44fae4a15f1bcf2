//! TLS with rustls: the stream over a TCP socket (on epoll or on the
//! worker's io_uring), the server certificate store (PEM loading, SNI and
//! key-type selection) and the `ServerConfig` a listener shares between
//! its workers.

pub(crate) mod certs;
pub(crate) mod client;
pub(crate) mod config;
pub(crate) mod identity;
pub(crate) mod resolver;
pub(crate) mod socket;
pub(crate) mod stream;

pub(crate) use stream::TlsStream;

#[cfg(test)]
pub(crate) mod tests;
