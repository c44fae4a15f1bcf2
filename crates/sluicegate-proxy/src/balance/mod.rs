//! A service's endpoints and the state kept for them, shared by every
//! worker and carried across reloads: the endpoints themselves, the
//! balancers that choose one, circuit breakers, ejection after failed
//! connects, and the service's retry budget. The snapshot holds these;
//! the drivers in `upstream/` read and update them.

pub(crate) mod balancer;
pub(crate) mod breaker;
pub(crate) mod budget;
pub(crate) mod eject;
pub(crate) mod endpoint;
