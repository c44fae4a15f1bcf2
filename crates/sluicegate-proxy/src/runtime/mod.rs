//! Worker threads: listeners, the accept loop and the server that starts
//! and stops them. What a worker holds is in `worker/`.

pub(crate) mod server;
