//! A shard's array as requests read it: a range of one block shared by
//! every shard of a whole build (one allocation of tens of megabytes at a
//! million apps, so on huge pages, see `crates/sluicegate/src/hugepages.rs`),
//! or a vector of its own once a change has copied the shard.

use std::ops::Deref;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub(super) enum Slab<T> {
    Own(Vec<T>),
    Part {
        block: Arc<[T]>,
        start: usize,
        len: usize,
    },
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab::Own(Vec::new())
    }
}

impl<T> Deref for Slab<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match self {
            Slab::Own(v) => v,
            Slab::Part { block, start, len } => &block[*start..*start + *len],
        }
    }
}

impl<T: Clone> Slab<T> {
    /// The array as a vector of its own, to change (copied out of a
    /// shared block the first time).
    pub(super) fn make_mut(&mut self) -> &mut Vec<T> {
        if let Slab::Part { .. } = self {
            *self = Slab::Own(self.to_vec());
        }
        match self {
            Slab::Own(v) => v,
            Slab::Part { .. } => unreachable!("made its own just above"),
        }
    }
}

/// Moves every shard's array into one block, each shard's array becoming
/// a range of it. Arrays that are empty stay empty vectors.
pub(super) fn pack<'s, T: Clone + 's>(slabs: impl Iterator<Item = &'s mut Slab<T>>) {
    let slabs: Vec<&mut Slab<T>> = slabs.filter(|s| !s.is_empty()).collect();
    let total = slabs.iter().map(|s| s.len()).sum();
    let mut all: Vec<T> = Vec::with_capacity(total);
    for s in &slabs {
        all.extend_from_slice(s);
    }
    let block: Arc<[T]> = all.into();
    let mut start = 0;
    for s in slabs {
        let len = s.len();
        *s = Slab::Part {
            block: block.clone(),
            start,
            len,
        };
        start += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_slabs_read_as_before_and_copy_on_change() {
        let mut slabs = [
            Slab::Own(vec![1, 2]),
            Slab::Own(vec![]),
            Slab::Own(vec![3, 4, 5]),
        ];
        pack(slabs.iter_mut());
        assert_eq!(&*slabs[0], &[1, 2]);
        assert!(slabs[1].is_empty());
        assert_eq!(&*slabs[2], &[3, 4, 5]);
        let Slab::Part { block, .. } = &slabs[2] else {
            panic!("packed")
        };
        assert_eq!(block.len(), 5);
        let mut changed = slabs[2].clone();
        changed.make_mut().push(6);
        assert_eq!(&*changed, &[3, 4, 5, 6]);
        assert_eq!(&*slabs[2], &[3, 4, 5], "the shared block is not changed");
    }
}
