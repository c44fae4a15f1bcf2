//! What the gateway tells operators: Prometheus metrics (the process's
//! own among them) and the access log.

pub(crate) mod accesslog;
pub mod live;
pub(crate) mod metrics;
pub mod process;
