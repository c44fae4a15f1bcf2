//! Per-connection drivers: how a connection starts, parks and comes back
//! (`start`), the HTTP/1.1 client connection's request loop (`conn`), the
//! answers it makes itself (`answer`) and the bodies it streams (`body`).

mod answer;
pub(crate) mod body;
pub(crate) mod conn;
pub(crate) mod start;

#[cfg(test)]
mod tests;
