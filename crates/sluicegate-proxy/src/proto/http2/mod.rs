//! HTTP/2 streams carried by the HTTP/1.1 lifecycle: a stream's request
//! head written as the head the codec reads ([`request`]), and the stream
//! itself as the byte stream the lifecycle reads its body from and writes
//! its answer to ([`exchange`]). The HTTP/2 framing is the `h2` crate's.

pub(crate) mod exchange;
pub(crate) mod request;
