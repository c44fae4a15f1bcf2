//! The pool of app slots kept by the registry across reloads
//! ([`SlotPool`]), and the slots one change of apps took and dropped
//! ([`Delta`]).

use std::sync::{Arc, Weak};

use super::slot::{slot_in, AppSlot, CHUNK, CHUNK_BITS};
use super::table::AppTable;

/// The slots a table made by [`AppTable::with_changes`] took (given back
/// if it is not published) and the slots of the table before it that it
/// no longer uses (retired once it is).
#[derive(Debug, Default)]
pub struct Delta {
    pub(super) taken: Vec<u32>,
    pub(super) dropped: Vec<u32>,
}

/// The slots of every app, in chunks that never move, kept by the registry
/// across reloads. A slot whose app is gone is reused only once no table
/// that named it is alive any more (in-flight guards hold their table).
#[derive(Debug, Default)]
pub struct SlotPool {
    pub(super) chunks: Vec<Arc<[AppSlot]>>,
    used: u32,
    free: Vec<u32>,
    /// Slots dropped by the table of each generation, waiting for every
    /// table up to that generation to be gone.
    retired: Vec<(u64, Vec<u32>)>,
    /// Tables that may still be in use, by generation.
    tables: Vec<(u64, Weak<AppTable>)>,
}

impl SlotPool {
    pub(super) fn take(&mut self) -> u32 {
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

    pub(super) fn get(&self, s: u32) -> &AppSlot {
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
