//! The rollout controller (`run.rs`), on the control runtime, off the
//! data path: it reads the split entries' cumulative counters when a
//! window opens and when it closes, judges the difference, and writes the
//! new weights as a config change, through the reloader and its source,
//! as an admin API write of the route would be.
//!
//! With the config in etcd, one gateway of the fleet leads (`leader.rs`):
//! only it judges windows and writes, fenced by its leader key; every
//! gateway applies the weights through its config watch. Without etcd the
//! gateway is its own leader.

mod leader;
pub(crate) mod run;

pub use run::start;
