//! Worker threads: listeners, the accept loops and the server that starts
//! and stops them. What a worker holds is in `worker/`.

pub(crate) mod accept;
pub(crate) mod server;
