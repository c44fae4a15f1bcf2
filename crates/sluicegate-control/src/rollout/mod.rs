//! Canary rollouts driven by the gateway's own numbers: a route with a
//! `split` and a `rollout` has its last entry's share raised by `step`
//! percentage points after each window of `every` in which that canary
//! kept within the rule's ratios of the other entries (its 5xx rate, its
//! p99 latency), and set back to 0 after a window in which it did not.
//!
//! The controller (`run.rs`) runs on the control runtime, off the data
//! path: it reads the split entries' cumulative counters when a window
//! opens and when it closes, judges the difference (`judge.rs`), and
//! writes the new weights (`weights.rs`) as a config change, through the
//! reloader and its source, as an admin API write of the route would be.
//! The state of every rollout (`board.rs`) is kept by route name across
//! reloads and served at `GET/PUT /routes/{name}/rollout` (`api.rs`), in
//! the metrics and on the dashboard.
//!
//! With the config in etcd, one gateway of the fleet leads (`leader.rs`):
//! only it judges windows and writes, fenced by its leader key; every
//! gateway applies the weights through its config watch. Without etcd the
//! gateway is its own leader.

pub(crate) mod api;
mod board;
mod judge;
mod leader;
pub(crate) mod openapi;
mod run;
mod weights;

pub use board::Board;
pub use run::start;

/// A leader's claim, that its writes compare: the leader key and the
/// lease it must still carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fence {
    pub key: String,
    pub lease: i64,
}
