//! Worker threads and what they share: listeners and the accept loop,
//! the per-worker state, busy polling.

pub(crate) mod busypoll;
pub(crate) mod server;
pub(crate) mod worker;
