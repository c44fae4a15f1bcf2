//! The parsers the fuzz targets and the seed-replay test drive, exported
//! for them alone: not an API to build on.

pub use crate::proto::chunked::ChunkedDecoder;
pub use crate::proto::codec::{parse_request, parse_response, Parsed, RequestHead, ResponseHead};
pub use crate::route::path::normalize;
pub use crate::route::target::{strip_port, Target};
