//! Values a route's `match` reads besides the path: a query parameter
//! (decoded) and a cookie (as sent). Both are read in place: no copy, no
//! allocation.
//!
//! - A query parameter is the first `name=value` pair (split on `&`, then
//!   on the first `=`; no `=`: an empty value) whose name decodes to the
//!   one wanted. Names and values are compared decoded: `%XX` is the byte
//!   it escapes and `+` a space, as HTML forms send them; a `%` not
//!   followed by two hex digits stands for itself.
//! - A cookie is the first `name=value` pair (split on `;`, blanks around
//!   each pair and around the `=` ignored) of that name, in the first
//!   `Cookie` field holding one; the value is compared as sent, quotes
//!   included.

use crate::proto::chunked::hex;

/// Whether the first parameter `name` of `query` (without its `?`) has
/// the value `want`; `false` when it has none.
pub(crate) fn query_param_is(query: &[u8], name: &[u8], want: &[u8]) -> bool {
    for part in query.split(|&b| b == b'&') {
        let (k, v) = match memchr::memchr(b'=', part) {
            Some(i) => (&part[..i], &part[i + 1..]),
            None => (part, &part[part.len()..]),
        };
        if !part.is_empty() && decoded_eq(k, name) {
            return decoded_eq(v, want);
        }
    }
    false
}

/// Whether `raw`, with `%XX` and `+` decoded, is `want`.
fn decoded_eq(raw: &[u8], want: &[u8]) -> bool {
    let mut i = 0;
    let mut w = want.iter();
    while i < raw.len() {
        let b = match raw[i] {
            b'+' => b' ',
            b'%' => match (
                raw.get(i + 1).and_then(|&c| hex(c)),
                raw.get(i + 2).and_then(|&c| hex(c)),
            ) {
                (Some(hi), Some(lo)) => {
                    i += 2;
                    hi << 4 | lo
                }
                _ => b'%',
            },
            b => b,
        };
        if w.next() != Some(&b) {
            return false;
        }
        i += 1;
    }
    w.next().is_none()
}

/// In one `Cookie` field, the value of the first cookie `name`.
pub(crate) fn cookie<'f>(field: &'f [u8], name: &[u8]) -> Option<&'f [u8]> {
    field.split(|&b| b == b';').find_map(|pair| {
        let i = memchr::memchr(b'=', pair)?;
        (trim(&pair[..i]) == name).then(|| trim(&pair[i + 1..]))
    })
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded_and_the_first_counts() {
        let q = b"a=1&v=2&v=3&sp=x+y&pc=%41%2fb&bad=%zz&flag&empty=";
        assert!(query_param_is(q, b"v", b"2"));
        assert!(!query_param_is(q, b"v", b"3"));
        assert!(query_param_is(q, b"sp", b"x y"));
        assert!(query_param_is(q, b"pc", b"A/b"));
        assert!(query_param_is(q, b"bad", b"%zz"));
        assert!(query_param_is(q, b"flag", b""));
        assert!(query_param_is(q, b"empty", b""));
        assert!(!query_param_is(q, b"missing", b""));
        assert!(!query_param_is(q, b"a", b"12"));
        assert!(!query_param_is(q, b"a", b""));
        assert!(query_param_is(b"x%20y=1", b"x y", b"1"));
        assert!(!query_param_is(b"", b"a", b""));
        assert!(query_param_is(b"%", b"%", b""));
    }

    #[test]
    fn cookies_are_split_and_trimmed_values_kept_as_sent() {
        let f = b"a=1; b = 2 ;c=\"q\";  d=x=y; a=9";
        assert_eq!(cookie(f, b"a"), Some(&b"1"[..]));
        assert_eq!(cookie(f, b"b"), Some(&b"2"[..]));
        assert_eq!(cookie(f, b"c"), Some(&b"\"q\""[..]));
        assert_eq!(cookie(f, b"d"), Some(&b"x=y"[..]));
        assert_eq!(cookie(f, b"e"), None);
        assert_eq!(cookie(b"novalue; a=1", b"novalue"), None);
        assert_eq!(cookie(b"", b"a"), None);
    }
}
