//! Canary rollouts driven by the gateway's own numbers: a route with a
//! `split` and a `rollout` has its last entry's share raised by `step`
//! percentage points after each window of `every` in which that canary
//! kept within the rule's ratios of the other entries (its 5xx rate, its
//! p99 latency), and set back to 0 after a window in which it did not.
//!
//! This folder holds what the rest of the control plane builds on, and
//! imports none of it: the state of every rollout (`board.rs`), kept by
//! route name across reloads and shown in the metrics; the judging of a
//! window (`judge.rs`); the weights as percentage points (`weights.rs`);
//! and a leader's fence. The controller and the fleet's leadership are in
//! `canary/`, the admin API's `GET/PUT /routes/{name}/rollout` in
//! `api/rollout.rs`.

pub(crate) mod board;
pub(crate) mod judge;
pub(crate) mod weights;

pub use board::Board;

/// Tests' config text: a listener, the services `services` (each with an
/// endpoint of its own, ports from 9001), then `routes` under `routes:`.
#[cfg(test)]
pub(crate) fn test_config(services: &[&str], routes: &str) -> String {
    let mut text = "listen: 127.0.0.1:8080\nservices:\n".to_string();
    for (i, name) in services.iter().enumerate() {
        text += &format!(
            "  - name: {name}\n    endpoints: [\"127.0.0.1:{}\"]\n",
            9001 + i
        );
    }
    text + "routes:\n" + routes
}

/// A leader's claim, that its writes compare: the leader key and the
/// lease it must still carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fence {
    pub key: String,
    pub lease: i64,
}
