//! The HTTP/2 part of the model: the `http2` section (streams, flow-control
//! windows, the stream rate a connection may open).

/// How client HTTP/2 connections are run (`http2`). Whether a listener
/// speaks HTTP/2 at all is its own `http2` flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2Settings {
    /// Streams a client may have open at once on one connection
    /// (`SETTINGS_MAX_CONCURRENT_STREAMS`).
    pub max_concurrent_streams: u32,
    /// Each stream's receive window in bytes: how much of a request body
    /// a client may send before the gateway reads it.
    pub stream_window: u32,
    /// The connection's receive window in bytes, shared by its streams.
    pub connection_window: u32,
    /// Streams a client may open on one connection per second (a burst of
    /// as many is allowed); more ends the connection with GOAWAY
    /// `ENHANCE_YOUR_CALM`. Streams opened and reset at once (Rapid Reset)
    /// count like any other.
    pub max_streams_per_second: u32,
}

impl Default for Http2Settings {
    fn default() -> Self {
        Http2Settings {
            max_concurrent_streams: 128,
            stream_window: 1024 * 1024,
            connection_window: 4 * 1024 * 1024,
            max_streams_per_second: 10_000,
        }
    }
}
