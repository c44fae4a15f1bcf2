//! Sluicegate's data plane: worker threads with their own listeners,
//! the HTTP/1.1 codec, routing, load balancing, upstream connection pools,
//! metrics and access logging. See `docs/architecture.md` for the request
//! flow.

pub mod accesslog;
pub mod apps;
pub mod balancer;
pub mod body;
pub mod breaker;
pub mod busypoll;
pub mod chunked;
pub mod codec;
pub mod conn;
pub mod deadline;
pub mod endpoint;
pub mod filter;
pub mod forward;
pub mod health;
pub mod io;
pub mod limit;
pub mod metrics;
pub mod path;
pub mod response;
pub mod router;
pub mod server;
pub mod snapshot;
pub mod target;
pub mod upstream_head;
pub mod worker;

pub use server::Gateway;
pub use snapshot::{Shared, Snapshot};
