//! HTTP/2 streams carried by the HTTP/1.1 lifecycle: a client stream's
//! request head written as the head the codec reads ([`request`]), the
//! stream itself as the byte stream the lifecycle reads its body from and
//! writes its answer to ([`exchange`]), and a stream to an upstream as the
//! byte stream forwarding writes its request to and reads its response
//! from ([`upstream`]). The HTTP/2 framing is the `h2` crate's.

pub(crate) mod exchange;
pub(crate) mod request;
pub(crate) mod upstream;
