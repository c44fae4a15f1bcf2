//! An open tunnel as the request hands it on ([`Upgraded`]), and the bytes
//! a tunnel carried ([`Carried`]); starting and relaying it is
//! [`crate::upstream::tunnel`]'s.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::balance::endpoint::{EndpointState, OwnedPermit};
use crate::snapshot::Shared;
use crate::transport::stream::Stream;

/// Bytes a tunnel carried: client to upstream, upstream to client
/// (the 101's head included).
#[derive(Debug, Clone, Copy, Default)]
pub struct Carried {
    pub up: u64,
    pub down: u64,
}

/// An open tunnel, its `101` written: what its own task carries on with
/// besides the client's stream. Counted in `tunnels_open` until dropped;
/// dropping it closes the upstream connection and gives the endpoint's
/// in-flight slot back.
pub(crate) struct Upgraded {
    pub(crate) up: Stream,
    pub(crate) permit: OwnedPermit,
    pub(crate) shared: Arc<Shared>,
    /// What it carried so far.
    pub(crate) carried: Carried,
}

impl Upgraded {
    /// The endpoint it is connected to.
    pub fn endpoint(&self) -> &Arc<EndpointState> {
        self.permit.endpoint()
    }

    /// What it carried so far.
    pub fn carried(&self) -> Carried {
        self.carried
    }
}

impl Drop for Upgraded {
    fn drop(&mut self) {
        self.shared.global.tunnels_open.fetch_sub(1, Relaxed);
    }
}
