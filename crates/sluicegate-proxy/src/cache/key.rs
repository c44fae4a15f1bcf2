//! A cache key's parts, owned: what a fill keeps to store its answer
//! under, and what a flight is known by. A lookup hashes and compares
//! the parts where they lie instead ([`super::store::Store::get`]).

/// A key's parts, owned: one buffer and where each part ends.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Key {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Key {
    pub fn push(&mut self, part: &[u8]) {
        self.bytes.extend_from_slice(part);
        self.ends.push(self.bytes.len());
    }

    /// The parts in order.
    pub fn parts(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let p = &self.bytes[start..end];
                start = end;
                p
            })
            .collect()
    }
}
