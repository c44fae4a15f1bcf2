//! The parsers the fuzz targets and the seed-replay test drive, exported
//! for them alone: not an API to build on.

pub use crate::proto::chunked::ChunkedDecoder;
pub use crate::proto::codec::{parse_request, parse_response, Parsed, RequestHead, ResponseHead};
pub use crate::route::path::normalize;
pub use crate::route::target::{strip_port, Target};

use std::net::SocketAddr;

/// A whole PROXY protocol header: its length, source and destination.
pub type ProxyHeader = (usize, Option<SocketAddr>, Option<SocketAddr>);

/// [`crate::transport::proxy_protocol::parse`]: `Ok(None)` for a valid
/// prefix (read more), the error's text if the bytes cannot be a header.
pub fn proxy_protocol(buf: &[u8]) -> Result<Option<ProxyHeader>, String> {
    use crate::transport::proxy_protocol::{parse, Parsed};
    match parse(buf) {
        Ok(Parsed::Complete {
            len,
            source,
            destination,
        }) => Ok(Some((len, source, destination))),
        Ok(Parsed::Partial) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}
