//! A service's endpoint set: its endpoint states (kept across snapshots by
//! service, endpoint name and in-flight limit, so pools, health, ejection
//! and breaker state stay) and its balancer (kept while the set and weights
//! are unchanged), built for a compile or for a set the discovery plane
//! found (`discovered.rs`).

use std::sync::Arc;

use sluicegate_config::{Endpoint, Service};

use super::{EndpointKey, Registry};
use crate::balance::balancer::{Balancer, BalancerState};
use crate::balance::endpoint::EndpointState;

/// The endpoints of one service as built for a snapshot.
pub(super) struct Members {
    pub keys: Vec<EndpointKey>,
    pub eps: Vec<Arc<EndpointState>>,
    pub balancer: Balancer,
    /// What the balancer's state was built for, and that state.
    pub fingerprint: String,
    pub bstate: Arc<BalancerState>,
}

fn balancer_fingerprint(svc: &Service, eps: &[Arc<EndpointState>]) -> String {
    let mut s = format!("{:?}/{:?}", svc.balance, svc.hash_key);
    for e in eps {
        s.push_str(&format!("/{}*{}", e.name, e.weight));
    }
    s
}

/// The endpoints of `svc`: those of its config, then `discovered` (the
/// discovery plane's last answer), each with the state the registry kept
/// for the same name and address, or a new one.
pub(super) fn build(svc: &Service, discovered: &[Endpoint], reg: &mut Registry) -> Members {
    let all = svc.endpoints.iter().chain(discovered);
    let mut keys = Vec::with_capacity(svc.endpoints.len() + discovered.len());
    let mut eps = Vec::with_capacity(keys.capacity());
    for ep in all {
        let key = (
            svc.name.clone(),
            ep.name.clone(),
            svc.max_connections_per_endpoint,
        );
        let state = match reg.endpoints.get(&key) {
            Some(s) if s.addr == ep.addr && s.weight == ep.weight.max(1) => s.clone(),
            _ => {
                let id = reg.next_endpoint_id;
                reg.next_endpoint_id += 1;
                Arc::new(
                    EndpointState::new(
                        id,
                        ep.name.clone(),
                        ep.addr,
                        ep.weight,
                        svc.max_connections_per_endpoint,
                    )
                    .of_service(svc.name.as_str().into()),
                )
            }
        };
        keys.push(key);
        eps.push(state);
    }
    let fingerprint = balancer_fingerprint(svc, &eps);
    let bstate = match reg.balancers.get(&svc.name) {
        Some((old, st)) if *old == fingerprint => st.clone(),
        _ => Arc::new(BalancerState::default()),
    };
    let balancer = Balancer::new(svc.balance, &svc.hash_key, &eps, bstate.clone());
    Members {
        keys,
        eps,
        balancer,
        fingerprint,
        bstate,
    }
}
