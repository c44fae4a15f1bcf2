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
//! shard is in `keys`, an app's rules and JWT key in `policy`.

mod build;
mod keys;
pub(crate) mod lease;
pub(crate) mod limit;
mod policy;
mod slab;
pub(crate) mod table;

pub use build::{AppChange, Delta, DeltaError};
pub use table::{AppRef, AppTable};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use crate::apps::limit::LimitState;

/// One app's counters for one scope (the app's own plan, or one service's):
/// its limit state, and (for the app's own slot) its metrics.
#[derive(Debug, Default)]
pub struct AppSlot {
    pub limit: LimitState,
    /// Requests that authenticated as the app.
    pub requests: AtomicU64,
    /// Refused 403: a service, method or path the app may not use.
    pub forbidden: AtomicU64,
    /// Refused 429: over the app's plan.
    pub limited: AtomicU64,
    /// Answered 4xx (the 403s and 429s above among them) and 5xx.
    pub client_errors: AtomicU64,
    pub server_errors: AtomicU64,
    /// Microseconds from request head to response end, summed.
    pub latency_us: AtomicU64,
}

impl AppSlot {
    fn reset(&self) {
        self.limit.reset();
        for c in [
            &self.requests,
            &self.forbidden,
            &self.limited,
            &self.client_errors,
            &self.server_errors,
            &self.latency_us,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// The first chunk's slots; each later chunk is twice the one before, so a
/// million apps take 8 chunks, and the big ones are large enough for the
/// allocator to put on huge pages (a slot is touched at random per request).
const CHUNK_BITS: u32 = 12;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Chunk `k` holds slots `CHUNK * (2^k - 1) .. CHUNK * (2^(k+1) - 1)`.
fn chunk_of(s: u32) -> (usize, usize) {
    let q = (s as usize >> CHUNK_BITS) + 1;
    let k = q.ilog2() as usize;
    (k, s as usize - (((1 << k) - 1) << CHUNK_BITS))
}

fn slot_in(chunks: &[Arc<[AppSlot]>], s: u32) -> &AppSlot {
    let (k, i) = chunk_of(s);
    &chunks[k][i]
}

/// The slots of every app, in chunks that never move, kept by the registry
/// across reloads. A slot whose app is gone is reused only once no table
/// that named it is alive any more (in-flight guards hold their table).
#[derive(Debug, Default)]
pub struct SlotPool {
    chunks: Vec<Arc<[AppSlot]>>,
    used: u32,
    free: Vec<u32>,
    /// Slots dropped by the table of each generation, waiting for every
    /// table up to that generation to be gone.
    retired: Vec<(u64, Vec<u32>)>,
    /// Tables that may still be in use, by generation.
    tables: Vec<(u64, Weak<AppTable>)>,
}

impl SlotPool {
    fn take(&mut self) -> u32 {
        if let Some(s) = self.free.pop() {
            return s;
        }
        let k = self.chunks.len();
        if self.used as usize == ((1 << k) - 1) << CHUNK_BITS {
            self.chunks
                .push((0..CHUNK << k).map(|_| AppSlot::default()).collect());
        }
        self.used += 1;
        self.used - 1
    }

    fn get(&self, s: u32) -> &AppSlot {
        slot_in(&self.chunks, s)
    }

    /// Slots in use or waiting to be reused.
    pub fn live(&self) -> usize {
        self.used as usize - self.free.len()
    }

    /// Frees the retired slots no live table can still reach.
    fn collect(&mut self) {
        self.tables.retain(|(_, t)| t.strong_count() > 0);
        let oldest = self.tables.iter().map(|(g, _)| *g).min();
        let mut i = 0;
        while i < self.retired.len() {
            // Retired by generation g: named only by tables older than g.
            if oldest.is_none_or(|o| o >= self.retired[i].0) {
                let (_, slots) = self.retired.swap_remove(i);
                for &s in &slots {
                    self.get(s).reset();
                }
                self.free.extend(slots);
            } else {
                i += 1;
            }
        }
    }

    /// Gives back the slots a table that was never published took.
    pub fn abandoned(&mut self, table: &AppTable, old: Option<&AppTable>) {
        let mut old_slots = vec![false; self.used as usize];
        for s in old.into_iter().flat_map(|o| o.all_slots()) {
            old_slots[s as usize] = true;
        }
        for s in table.all_slots().filter(|&s| !old_slots[s as usize]) {
            self.get(s).reset();
            self.free.push(s);
        }
    }

    /// Gives back the slots a delta that was never published took.
    pub fn abandoned_delta(&mut self, delta: Delta) {
        for s in delta.taken {
            self.get(s).reset();
            self.free.push(s);
        }
    }

    /// Records a table made by a delta, now published, and the slots of
    /// the table before that it no longer uses.
    pub fn published_delta(&mut self, table: &Arc<AppTable>, delta: Delta) {
        if !delta.dropped.is_empty() {
            self.retired.push((table.generation, delta.dropped));
        }
        self.tables.push((table.generation, Arc::downgrade(table)));
        self.collect();
    }

    /// Records the table now published and the old table's slots it no
    /// longer uses.
    pub fn published(&mut self, table: &Arc<AppTable>, old: Option<&AppTable>) {
        if let Some(old) = old {
            let mut kept = vec![false; self.used as usize];
            for s in table.all_slots() {
                kept[s as usize] = true;
            }
            let dropped: Vec<u32> = old.all_slots().filter(|&s| !kept[s as usize]).collect();
            if !dropped.is_empty() {
                self.retired.push((table.generation, dropped));
            }
        }
        self.tables.push((table.generation, Arc::downgrade(table)));
        self.collect();
    }
}

/// A short, stable fingerprint of a key for logs (written as 8 hex
/// digits): never the key itself.
pub fn fingerprint(key: &[u8]) -> u32 {
    (xxhash_rust::xxh3::xxh3_64_with_seed(key, 0x5167_6174_6557_6179) >> 32) as u32
}

#[cfg(test)]
mod tests;
