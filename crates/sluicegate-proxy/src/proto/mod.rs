//! HTTP on the wire: message heads as the rest of the data plane sees
//! them (`head`, no framing), the HTTP/1.1 codec that parses them and
//! decides their framing (server and client side), byte helpers, the
//! chunked coding, the one renderer of answers the gateway makes itself
//! (HTTP/1.1 text or HTTP/2 fields), the header fields filters add, and
//! HTTP/2 streams mapped to and from the neutral heads (`http2`).

pub(crate) mod bytes;
pub(crate) mod chunked;
pub(crate) mod codec;
pub mod compress;
pub(crate) mod fields;
pub(crate) mod head;
pub(crate) mod http2;
pub(crate) mod request_id;
pub(crate) mod response;
