//! HTTP on the wire: message heads as the rest of the data plane sees
//! them (`head`, no framing), the HTTP/1.1 codec that parses them and
//! decides their framing (server and client side), byte helpers, the
//! chunked coding, the one renderer of answers the gateway makes itself,
//! the header fields filters add, and HTTP/2 streams seen as HTTP/1.1
//! messages (`http2`).

pub(crate) mod bytes;
pub(crate) mod chunked;
pub(crate) mod codec;
pub(crate) mod fields;
pub(crate) mod head;
pub(crate) mod http2;
pub(crate) mod request_id;
pub(crate) mod response;
