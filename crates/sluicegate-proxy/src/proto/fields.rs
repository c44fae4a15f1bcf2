//! Header fields without wire framing: what filters and policies add to a
//! request or to an answer (`X-App-Id`, `RateLimit-*`, CORS, header ops),
//! as names and values. Each protocol's codec writes them its own way
//! (HTTP/1.1: [`Fields::write_h1`]), so nothing above the codec speaks
//! HTTP/1.1 bytes.

/// A list of header fields in one buffer (reused across requests: cleared,
/// never shrunk).
///
/// The buffer holds them as HTTP/1.1 lines (`name: value\r\n`), the form
/// today's one protocol writes, so that writing them is one copy; what a
/// caller sees is names and values only.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fields {
    buf: Vec<u8>,
    /// Per field, where its name ends and where its line ends in `buf`;
    /// each field starts where the one before it ends.
    ends: Vec<(u32, u32)>,
}

/// No fields.
pub static NONE: Fields = Fields::new();

impl Fields {
    pub const fn new() -> Fields {
        Fields {
            buf: Vec::new(),
            ends: Vec::new(),
        }
    }

    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Keeps the first `n` fields only.
    pub fn truncate(&mut self, n: usize) {
        if n < self.ends.len() {
            let end = n.checked_sub(1).map_or(0, |i| self.ends[i].1 as usize);
            self.buf.truncate(end);
            self.ends.truncate(n);
        }
    }

    /// Adds `name: value`.
    #[inline(always)]
    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        // One capacity check; the separators are then plain stores.
        self.buf.reserve(name.len() + value.len() + 4);
        self.buf.extend_from_slice(name);
        let name_end = self.buf.len() as u32;
        self.buf.extend_from_slice(b": ");
        self.buf.extend_from_slice(value);
        self.buf.extend_from_slice(b"\r\n");
        self.ends.push((name_end, self.buf.len() as u32));
    }

    /// Adds a field named `name` whose value `value` appends to the buffer
    /// it is given (for values written in parts, such as numbers).
    pub fn push_with(&mut self, name: &[u8], value: impl FnOnce(&mut Vec<u8>)) {
        self.buf.extend_from_slice(name);
        let name_end = self.buf.len() as u32;
        self.buf.extend_from_slice(b": ");
        value(&mut self.buf);
        self.buf.extend_from_slice(b"\r\n");
        self.ends.push((name_end, self.buf.len() as u32));
    }

    /// Adds every field of `other`, in order.
    pub fn extend(&mut self, other: &Fields) {
        let base = self.buf.len() as u32;
        self.buf.extend_from_slice(&other.buf);
        self.ends
            .extend(other.ends.iter().map(|&(n, v)| (n + base, v + base)));
    }

    /// The fields in order, as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0usize;
        self.ends.iter().map(move |&(n, v)| {
            let (n, v) = (n as usize, v as usize);
            let field = (&self.buf[start..n], &self.buf[n + 2..v - 2]);
            start = v;
            field
        })
    }

    /// The value of the first field named `name` (ASCII case-insensitive).
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Appends the fields as HTTP/1.1 header lines (`name: value\r\n`).
    #[inline]
    pub fn write_h1(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_keeps_the_first_fields() {
        let mut f = Fields::default();
        f.push(b"a", b"1");
        f.push(b"b", b"2");
        f.truncate(5);
        assert_eq!(f.len(), 2);
        f.truncate(1);
        let mut out = Vec::new();
        f.write_h1(&mut out);
        assert_eq!(out, b"a: 1\r\n");
        f.push(b"c", b"3");
        assert_eq!(f.get(b"c"), Some(&b"3"[..]));
        f.truncate(0);
        assert!(f.is_empty());
    }

    #[test]
    fn fields_keep_their_order_and_are_written_as_h1_lines() {
        let mut f = Fields::default();
        assert!(f.is_empty());
        f.push(b"x-app-id", b"acme");
        f.push_with(b"ratelimit-limit", |v| v.extend_from_slice(b"100"));
        f.push(b"x-empty", b"");
        let mut other = Fields::default();
        other.push(b"Vary", b"Origin");
        f.extend(&other);
        assert_eq!(f.len(), 4);
        let all: Vec<_> = f.iter().collect();
        assert_eq!(
            all,
            [
                (&b"x-app-id"[..], &b"acme"[..]),
                (b"ratelimit-limit", b"100"),
                (b"x-empty", b""),
                (b"Vary", b"Origin"),
            ]
        );
        assert_eq!(f.get(b"vary"), Some(&b"Origin"[..]));
        let mut out = Vec::new();
        f.write_h1(&mut out);
        assert_eq!(
            out,
            b"x-app-id: acme\r\nratelimit-limit: 100\r\nx-empty: \r\nVary: Origin\r\n"
        );
        f.clear();
        assert!(f.is_empty() && f.iter().next().is_none());
    }
}
