//! What the gateway tells operators: Prometheus metrics and the access log.

pub(crate) mod accesslog;
pub mod live;
pub(crate) mod metrics;
pub mod otlp;
pub mod trace;
