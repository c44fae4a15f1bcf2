//! Request path normalisation, done once before routing: the path that is
//! matched is the path that is forwarded, so no spelling of a path can
//! reach a route other than the one it was matched to (`/public/../admin`,
//! `/%61dmin`, `//admin`, `/./admin`).
//!
//! Rules (documented in `docs/config.md`):
//! - `%XX` escapes of unreserved characters (letters, digits, `-._~`) are
//!   decoded; other escapes are kept, with upper-case hex.
//! - An escaped `/` or `\` (`%2F`, `%5C`), a NUL (`%00`), a raw `\`, or a
//!   malformed escape is refused (400): no upstream could agree with us on
//!   what such a path means.
//! - Runs of `/` become one `/`.
//! - `.` and `..` segments are removed (RFC 3986 5.2.4); `..` never climbs
//!   above the root.

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadPath(pub &'static str);

use crate::proto::chunked::hex;

/// True when `path` is already in normal form (the common case, checked
/// without copying).
fn is_normal(path: &[u8]) -> bool {
    if path.first() != Some(&b'/') {
        return false;
    }
    let mut prev = 0u8;
    for (i, &b) in path.iter().enumerate() {
        match b {
            b'\\' => return false,
            // Normal escapes: upper-case hex of a byte that must stay escaped.
            b'%' => {
                let upper = |j: usize| matches!(path.get(j), Some(b'0'..=b'9' | b'A'..=b'F'));
                if !upper(i + 1) || !upper(i + 2) {
                    return false;
                }
                let c = hex(path[i + 1]).unwrap_or(0) << 4 | hex(path[i + 2]).unwrap_or(0);
                if unreserved(c) || matches!(c, b'/' | b'\\' | 0) {
                    return false;
                }
            }
            b'/' if prev == b'/' => return false,
            b'.' if prev == b'/' => {
                // "/." followed by "/", end, or ".": a dot segment.
                match path.get(i + 1) {
                    None | Some(b'/') => return false,
                    Some(b'.') if matches!(path.get(i + 2), None | Some(b'/')) => return false,
                    _ => {}
                }
            }
            _ => {}
        }
        prev = b;
    }
    true
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Normalises `path` (an origin-form path, without the query). `Ok(None)`
/// means it is already normal; `Ok(Some(p))` is the normal form.
pub fn normalize(path: &[u8]) -> Result<Option<Vec<u8>>, BadPath> {
    if is_normal(path) {
        return Ok(None);
    }
    if path.first() != Some(&b'/') {
        // Only origin-form paths reach here (absolute-form targets are
        // reduced to their path before); an empty path is "/".
        if path.is_empty() {
            return Ok(Some(b"/".to_vec()));
        }
        return Err(BadPath("path does not start with /"));
    }
    // Decode unreserved escapes, refuse the dangerous ones.
    let mut decoded = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = path[i];
        match b {
            b'\\' => return Err(BadPath("backslash in path")),
            b'%' => {
                let (Some(h), Some(l)) = (
                    path.get(i + 1).copied().and_then(hex),
                    path.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(BadPath("malformed percent-escape in path"));
                };
                let c = h << 4 | l;
                match c {
                    b'/' | b'\\' => return Err(BadPath("escaped slash in path")),
                    0 => return Err(BadPath("escaped NUL in path")),
                    c if unreserved(c) => decoded.push(c),
                    c => {
                        const HEX: &[u8; 16] = b"0123456789ABCDEF";
                        decoded.extend_from_slice(&[
                            b'%',
                            HEX[usize::from(c >> 4)],
                            HEX[usize::from(c & 15)],
                        ]);
                    }
                }
                i += 3;
            }
            _ => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    // Segments: drop empty ones and "."; ".." pops (never past the root).
    let mut segs: Vec<&[u8]> = Vec::new();
    let trailing = matches!(decoded.last(), Some(b'/'))
        || decoded.ends_with(b"/.")
        || decoded.ends_with(b"/..");
    for seg in decoded.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => {
                segs.pop();
            }
            s => segs.push(s),
        }
    }
    let mut out = Vec::with_capacity(decoded.len());
    for s in &segs {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    if out.is_empty() || (trailing && !segs.is_empty()) {
        out.push(b'/');
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(p: &str) -> Result<String, &'static str> {
        match normalize(p.as_bytes()) {
            Ok(None) => Ok(p.to_string()),
            Ok(Some(v)) => Ok(String::from_utf8(v).unwrap()),
            Err(BadPath(why)) => Err(why),
        }
    }

    #[test]
    fn normal_paths_are_left_alone() {
        for p in [
            "/",
            "/a",
            "/a/b/",
            "/a.b/c..d/.e/f.",
            "/~key/x",
            "/a-b_c",
            "/a%20b",
            "/%C3%A9",
        ] {
            assert_eq!(normalize(p.as_bytes()), Ok(None), "{p}");
        }
    }

    #[test]
    fn dot_segments_and_slashes() {
        assert_eq!(n("/public/../admin"), Ok("/admin".into()));
        assert_eq!(n("/a/./b"), Ok("/a/b".into()));
        assert_eq!(n("//admin"), Ok("/admin".into()));
        assert_eq!(n("/a//b///c"), Ok("/a/b/c".into()));
        assert_eq!(n("/../../etc"), Ok("/etc".into()));
        assert_eq!(n("/a/b/.."), Ok("/a/".into()));
        assert_eq!(n("/a/."), Ok("/a/".into()));
        assert_eq!(n("/.."), Ok("/".into()));
        assert_eq!(n("/a/b/"), Ok("/a/b/".into()));
        assert_eq!(n("/a//"), Ok("/a/".into()));
    }

    #[test]
    fn escapes() {
        assert_eq!(n("/%61dmin"), Ok("/admin".into()));
        assert_eq!(n("/a/%2e%2e/b"), Ok("/b".into()));
        assert_eq!(n("/a/%2E/b"), Ok("/a/b".into()));
        assert_eq!(n("/%7Ekey/x"), Ok("/~key/x".into()));
        assert_eq!(n("/a%20b"), Ok("/a%20b".into()));
        assert_eq!(n("/a%3fb%c3%a9"), Ok("/a%3Fb%C3%A9".into()));
        assert_eq!(n("/a%2Fb"), Err("escaped slash in path"));
        assert_eq!(n("/a%2fb"), Err("escaped slash in path"));
        assert_eq!(n("/a%5Cb"), Err("escaped slash in path"));
        assert_eq!(n("/a\\b"), Err("backslash in path"));
        assert_eq!(n("/a%00"), Err("escaped NUL in path"));
        assert_eq!(n("/a%zz"), Err("malformed percent-escape in path"));
        assert_eq!(n("/a%4"), Err("malformed percent-escape in path"));
    }

    #[test]
    fn normal_form_is_a_fixed_point() {
        let samples = [
            "/a/../b/./c//d/",
            "/%2e%2e/x",
            "/x/%2e/",
            "//",
            "/a/b/../../..",
            "/%41%42/%43",
            "/a%20b/../c%3f",
            "/%c3%a9/./x",
        ];
        for p in samples {
            let once = n(p).unwrap();
            assert_eq!(normalize(once.as_bytes()), Ok(None), "{p} -> {once}");
        }
    }
}
