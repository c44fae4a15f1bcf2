//! HTTP/1.1 on the wire: message heads (server and client side), the
//! chunked coding, and the one renderer of answers the gateway makes itself;
//! and the header fields filters add, which no protocol frames yet.

pub(crate) mod chunked;
pub(crate) mod codec;
pub(crate) mod fields;
pub(crate) mod response;
