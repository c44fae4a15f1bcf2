//! Byte-level helpers the codec and the request phases share: an ASCII
//! case-insensitive compare against a lowercase literal, short-slice byte
//! searches, whitespace trimming, and the check of a Host value (with its
//! byte table). Nothing here knows about messages.

/// `b` equals `lower` ignoring ASCII case, where `lower` is a literal with
/// no uppercase letters (a header name or token as the RFCs spell it).
///
/// Exact, and without a branch per byte: where `lower` has a letter, the
/// byte of `b` must equal it once its case bit (0x20) is set, which only
/// that letter's two cases do; elsewhere the bytes must be equal. Header
/// names and tokens are short, so this is a few instructions per byte where
/// `eq_ignore_ascii_case` takes a compare and branch for each.
#[inline]
pub(crate) fn eq_lower(b: &[u8], lower: &[u8]) -> bool {
    debug_assert!(!lower.iter().any(u8::is_ascii_uppercase));
    let fold = |x: u8, l: u8| {
        let case = if l.is_ascii_lowercase() { 0x20 } else { 0 };
        (x | case) ^ l
    };
    // Most names of the right length differ in their first byte: check it
    // before the rest.
    b.len() == lower.len()
        && (b.is_empty() || fold(b[0], lower[0]) == 0)
        && b.iter()
            .zip(lower)
            .fold(0u8, |diff, (&x, &l)| diff | fold(x, l))
            == 0
}

/// Bytes of a reg-name (unreserved, pct-encoded, sub-delims).
static HOST_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b'%'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
            );
        i += 1;
    }
    t
};

/// A Host value is a reg-name or an IP literal, with an optional port
/// (RFC 9110 7.2, RFC 3986 3.2.2); anything else (spaces, a path, a
/// userinfo) is refused rather than routed on and copied upstream. Empty
/// is allowed, as RFC 9112 3.2 asks of a target without an authority.
/// The port is found from the end (digits after the last colon), then
/// the rest takes one table lookup per byte, without a branch.
#[inline]
pub(crate) fn valid_host(v: &[u8]) -> bool {
    let mut end = v.len();
    while end > 0 && v[end - 1].is_ascii_digit() {
        end -= 1;
    }
    let host = if end > 0 && v[end - 1] == b':' && v.len() - end <= 5 {
        &v[..end - 1]
    } else {
        v
    };
    if host.first() == Some(&b'[') {
        return host.len() > 2
            && host[host.len() - 1] == b']'
            && host[1..host.len() - 1]
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
    }
    host.iter()
        .fold(true, |ok, &b| ok & HOST_BYTE[usize::from(b)])
}

/// Where `b` first occurs in `hay`. Most slices searched per request (a
/// path, a Host value) are shorter than one vector, and there a plain loop
/// costs less than memchr's dispatch and set-up (callgrind: about 120
/// instructions fewer per request over the router's, target's and Host
/// searches).
#[inline]
pub(crate) fn find_byte(b: u8, hay: &[u8]) -> Option<usize> {
    if hay.len() < 32 {
        hay.iter().position(|&x| x == b)
    } else {
        memchr::memchr(b, hay)
    }
}

/// Where `b` last occurs in `hay`; see [`find_byte`].
#[inline]
pub(crate) fn rfind_byte(b: u8, hay: &[u8]) -> Option<usize> {
    if hay.len() < 32 {
        hay.iter().rposition(|&x| x == b)
    } else {
        memchr::memrchr(b, hay)
    }
}

/// `v` without leading and trailing spaces and tabs (optional
/// whitespace, RFC 9110 5.6.3).
pub(crate) fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|b| !matches!(b, b' ' | b'\t'));
    let Some(start) = start else { return &[] };
    let end = v
        .iter()
        .rposition(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(start);
    &v[start..=end]
}

#[cfg(test)]
mod tests;
