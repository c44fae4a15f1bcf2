//! The apps table's key index: key records by keyed hash, four to a
//! cache-line bucket, with linear probing.

use super::slab::Slab;

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KeyRec {
    pub(super) at: u32,
    pub(super) app: u32,
    /// The app's own counter slot, copied here so that its load does not
    /// wait for the app record's.
    pub(super) slot: u32,
    pub(super) len: u16,
    /// High bits of the key's hash, never 0 (0 marks an empty place).
    pub(super) tag: u16,
}

/// Four key records, one cache line.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub(super) struct Bucket([KeyRec; 4]);

/// Key records by keyed hash, four to a 64-byte bucket, in the first
/// bucket with room from the hash's own (linear probing). A lookup reads
/// the hash's bucket and stops at the first bucket with an empty place:
/// usually one cache line, where a control-byte table such as hashbrown's
/// reads its control group first and then the record, two misses in a row
/// at a million keys. Records are never removed (a change builds the
/// shard's table again), so a key is never past a bucket that had room.
#[derive(Debug, Clone)]
pub(super) struct KeyTable {
    pub(super) buckets: Slab<Bucket>,
    mask: usize,
}

impl KeyTable {
    /// Room for `n` keys at most 3/4 full.
    pub(super) fn with_capacity(n: usize) -> KeyTable {
        let buckets = n.div_ceil(3).max(1).next_power_of_two();
        KeyTable {
            buckets: Slab::Own(vec![Bucket::default(); buckets]),
            mask: buckets - 1,
        }
    }

    pub(super) fn tag(hash: u64) -> u16 {
        ((hash >> 48) as u16).max(1)
    }

    /// Adds a record; the table must have room (see `with_capacity`).
    pub(super) fn insert(&mut self, hash: u64, mut rec: KeyRec) {
        rec.tag = Self::tag(hash);
        let mut b = hash as usize & self.mask;
        let buckets = self.buckets.make_mut();
        loop {
            if let Some(place) = buckets[b].0.iter_mut().find(|r| r.tag == 0) {
                *place = rec;
                return;
            }
            b = (b + 1) & self.mask;
        }
    }

    /// Every record in the table.
    pub(super) fn records(&self) -> impl Iterator<Item = &KeyRec> {
        self.buckets
            .iter()
            .flat_map(|b| b.0.iter())
            .filter(|r| r.tag != 0)
    }

    /// Every record whose tag is the hash's, in probe order.
    pub(super) fn candidates(&self, hash: u64) -> impl Iterator<Item = &KeyRec> {
        let tag = Self::tag(hash);
        let start = hash as usize & self.mask;
        let mut done = false;
        (0..=self.mask)
            .map(move |i| &self.buckets[(start + i) & self.mask])
            .take_while(move |b| {
                let more = !done;
                done = b.0.iter().any(|r| r.tag == 0);
                more
            })
            .flat_map(|b| b.0.iter())
            .filter(move |r| r.tag == tag)
    }
}
