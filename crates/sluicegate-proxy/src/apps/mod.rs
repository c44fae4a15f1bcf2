//! The apps table compiled from `apps` and `plans`, laid out for a million
//! apps: ids and keys in one text arena, a fixed-size record per app,
//! access rules and plan choices shared between apps that have the same,
//! and each app's counters in a slot of a pool that outlives snapshots.
//!
//! Keys are found through a bucketed hash table of key records (four to a
//! cache line) under a keyed hash (the secret is random per process);
//! every candidate's stored key is compared in constant time, so the time
//! a lookup takes says nothing about how much of a guess was right.
//!
//! The table is in shards (`table`): apps by the hash of their id, keys by
//! the hash of the key, each shard behind its own `Arc`, so that changing
//! one app copies the few shards it touches and shares the rest with the
//! table in force (`build`: the whole table from a config, or a table
//! from the one in force and a list of changed apps). The key index of a
//! shard is in `keys`, an app's rules and JWT key in `policy`; each app's
//! counters (`slot`) in the pool of slots (`pool`) that outlives tables.

mod build;
pub mod introspect;
pub mod jwks;
mod keys;
pub(crate) mod lease;
pub(crate) mod limit;
mod policy;
mod pool;
mod slab;
mod slot;
pub(crate) mod table;
pub mod verified;

pub use build::{AppChange, DeltaError};
pub use pool::SlotPool;
pub use slot::AppSlot;
pub use table::{AppRef, AppTable};

/// A short, stable fingerprint of a key for logs (written as 8 hex
/// digits): never the key itself.
pub fn fingerprint(key: &[u8]) -> u32 {
    (xxhash_rust::xxh3::xxh3_64_with_seed(key, 0x5167_6174_6557_6179) >> 32) as u32
}

#[cfg(test)]
mod tests;
