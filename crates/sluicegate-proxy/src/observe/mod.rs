//! What the gateway tells operators: Prometheus metrics (the process's
//! own among them), the access log, request ids' trace context and the
//! OTLP export of spans.

pub(crate) mod accesslog;
pub(crate) mod metrics;
pub mod otlp;
pub mod process;
pub mod trace;
