//! A request's id as it travels: the header it goes in (`request_id.header`)
//! and its value, kept from a trusted proxy or made by the worker. Both sit
//! in one fixed buffer as the header line they are written as, so that no
//! request allocates for its id and writing it is one copy.

/// Longest id kept from a trusted proxy; a longer one is replaced.
pub const MAX_ID: usize = 128;
const MAX_NAME: usize = sluicegate_config::MAX_REQUEST_ID_HEADER;
const MAX_LINE: usize = MAX_NAME + 2 + MAX_ID + 2;

/// The current request's id and the header that carries it, held as the
/// line `name: id\r\n`.
#[derive(Clone)]
pub struct RequestId {
    line: [u8; MAX_LINE],
    name_len: u8,
    value_len: u8,
}

impl Default for RequestId {
    fn default() -> Self {
        RequestId {
            line: [0; MAX_LINE],
            name_len: 0,
            value_len: 0,
        }
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(self.value()))
    }
}

/// Every byte as two lower-case hex digits.
static HEX_PAIRS: [[u8; 2]; 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = [HEX[i >> 4], HEX[i & 15]];
        i += 1;
    }
    t
};

/// `n` as 16 lower-case hex digits.
#[inline]
pub fn hex16(n: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, b) in n.to_be_bytes().iter().enumerate() {
        out[2 * i..2 * i + 2].copy_from_slice(&HEX_PAIRS[*b as usize]);
    }
    out
}

impl RequestId {
    /// The header's name, lower case.
    pub fn name(&self) -> &[u8] {
        &self.line[..self.name_len as usize]
    }

    /// The id; empty before a request sets one.
    pub fn value(&self) -> &[u8] {
        let at = self.name_len as usize + 2;
        &self.line[at..at + self.value_len as usize]
    }

    /// Sets the header's name (at most `request_id.header`'s 48 bytes);
    /// a new name leaves no id until one is set.
    #[inline]
    pub fn set_name(&mut self, name: &[u8]) {
        if self.name() != name {
            let n = name.len().min(MAX_NAME);
            self.line[..n].copy_from_slice(&name[..n]);
            self.line[n..n + 2].copy_from_slice(b": ");
            self.name_len = n as u8;
            self.value_len = 0;
        }
    }

    /// Sets the id to `v` (already checked) and ends the line.
    #[inline]
    fn set_value(&mut self, v: &[u8]) {
        let at = self.name_len as usize + 2;
        self.line[at..at + v.len()].copy_from_slice(v);
        self.line[at + v.len()..at + v.len() + 2].copy_from_slice(b"\r\n");
        self.value_len = v.len() as u8;
    }

    /// Keeps `id` as received when it is one the gateway can pass on and
    /// log as it is: 1 to [`MAX_ID`] visible ASCII characters other than
    /// `"` and `\`. False (nothing kept) otherwise.
    pub fn keep(&mut self, id: &[u8]) -> bool {
        let ok = !id.is_empty()
            && id.len() <= MAX_ID
            && id
                .iter()
                .all(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
        if ok {
            self.set_value(id);
        }
        ok
    }

    /// Makes an id: the worker's prefix (16 hex digits, [`hex16`] of a
    /// random number) and its request counter `n`, 32 hex digits.
    #[inline]
    pub fn make(&mut self, prefix: &[u8; 16], n: u64) {
        let mut v = [0u8; 32];
        v[..16].copy_from_slice(prefix);
        v[16..].copy_from_slice(&hex16(n));
        self.set_value(&v);
    }

    /// Appends `name: id\r\n` (nothing before an id is set).
    #[inline]
    pub fn write_h1(&self, out: &mut Vec<u8>) {
        if self.value_len == 0 || self.name_len == 0 {
            return;
        }
        out.extend_from_slice(&self.line[..self.name_len as usize + self.value_len as usize + 4]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_ids_are_prefix_and_counter_in_hex() {
        let mut id = RequestId::default();
        id.set_name(b"x-request-id");
        id.make(&hex16(0x0123_4567_89ab_cdef), 42);
        assert_eq!(id.value(), b"0123456789abcdef000000000000002a");
        let mut out = Vec::new();
        id.write_h1(&mut out);
        assert_eq!(out, b"x-request-id: 0123456789abcdef000000000000002a\r\n");
        assert_eq!(&hex16(u64::MAX), b"ffffffffffffffff");
        // A new name: no id until one is set.
        id.set_name(b"x-correlation-id");
        assert_eq!(id.value(), b"");
        let mut out = Vec::new();
        id.write_h1(&mut out);
        assert!(out.is_empty());
        assert!(id.keep(b"abc"));
        id.write_h1(&mut out);
        assert_eq!(out, b"x-correlation-id: abc\r\n");
    }

    #[test]
    fn only_plain_ids_are_kept() {
        let mut id = RequestId::default();
        id.set_name(b"x-request-id");
        assert!(id.keep(b"req-1/abc"));
        assert_eq!(id.value(), b"req-1/abc");
        for bad in [
            &b""[..],
            b"a b",
            b"a\"b",
            b"a\\b",
            b"\xc3\xa9",
            &[b'a'; MAX_ID + 1],
        ] {
            assert!(!id.keep(bad), "{bad:?}");
            assert_eq!(id.value(), b"req-1/abc");
        }
        assert!(id.keep(&[b'z'; MAX_ID]));
        let mut out = Vec::new();
        id.write_h1(&mut out);
        assert_eq!(out.len(), 12 + 2 + MAX_ID + 2);
    }
}
