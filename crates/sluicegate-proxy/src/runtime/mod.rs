//! Worker threads and what they share: listeners and the accept loop,
//! the per-worker state, deadlines and the shutdown signal, busy polling.

pub(crate) mod busypoll;
pub(crate) mod deadline;
pub(crate) mod server;
pub(crate) mod worker;
