//! Per-connection drivers: the HTTP/1.1 client connection's request loop
//! and the bodies it streams.

pub(crate) mod body;
pub(crate) mod conn;

#[cfg(test)]
mod tests;
