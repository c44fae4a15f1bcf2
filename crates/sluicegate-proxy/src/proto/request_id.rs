//! A request's id as it travels: the header it goes in (`request_id.header`)
//! and its value, kept from a trusted proxy or made by the worker, both in
//! fixed buffers so that no request allocates for its id.

/// Longest id kept from a trusted proxy; a longer one is replaced.
pub const MAX_ID: usize = 128;
const MAX_NAME: usize = sluicegate_config::MAX_REQUEST_ID_HEADER;

/// The current request's id and the header that carries it.
#[derive(Clone)]
pub struct RequestId {
    name: [u8; MAX_NAME],
    name_len: u8,
    value: [u8; MAX_ID],
    value_len: u8,
}

impl Default for RequestId {
    fn default() -> Self {
        RequestId {
            name: [0; MAX_NAME],
            name_len: 0,
            value: [0; MAX_ID],
            value_len: 0,
        }
    }
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", String::from_utf8_lossy(self.value()))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl RequestId {
    /// The header's name, lower case.
    pub fn name(&self) -> &[u8] {
        &self.name[..self.name_len as usize]
    }

    /// The id; empty before a request sets one.
    pub fn value(&self) -> &[u8] {
        &self.value[..self.value_len as usize]
    }

    /// Sets the header's name (at most `request_id.header`'s 48 bytes).
    #[inline]
    pub fn set_name(&mut self, name: &[u8]) {
        if self.name() != name {
            let n = name.len().min(MAX_NAME);
            self.name[..n].copy_from_slice(&name[..n]);
            self.name_len = n as u8;
        }
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
            self.value[..id.len()].copy_from_slice(id);
            self.value_len = id.len() as u8;
        }
        ok
    }

    /// Makes an id: the worker's random `prefix` and its request counter
    /// `n`, 32 lower-case hex digits.
    #[inline]
    pub fn make(&mut self, prefix: u64, n: u64) {
        for (i, b) in self.value[..32].iter_mut().enumerate() {
            let word = if i < 16 { prefix } else { n };
            *b = HEX[(word >> ((15 - (i & 15)) * 4)) as usize & 15];
        }
        self.value_len = 32;
    }

    /// Appends `name: id\r\n` (nothing before an id is set).
    #[inline]
    pub fn write_h1(&self, out: &mut Vec<u8>) {
        if self.value_len == 0 || self.name_len == 0 {
            return;
        }
        out.extend_from_slice(self.name());
        out.extend_from_slice(b": ");
        out.extend_from_slice(self.value());
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_ids_are_prefix_and_counter_in_hex() {
        let mut id = RequestId::default();
        id.set_name(b"x-request-id");
        id.make(0x0123_4567_89ab_cdef, 42);
        assert_eq!(id.value(), b"0123456789abcdef000000000000002a");
        let mut out = Vec::new();
        id.write_h1(&mut out);
        assert_eq!(out, b"x-request-id: 0123456789abcdef000000000000002a\r\n");
    }

    #[test]
    fn only_plain_ids_are_kept() {
        let mut id = RequestId::default();
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
    }
}
