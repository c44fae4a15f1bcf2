//! The request target (origin, absolute or asterisk form) split into the
//! ranges routing and forwarding use, and the Host header's port removed.

use std::ops::Range;

use crate::proto::head::RequestHead;
use crate::proto::response::ErrorKind;

/// The request target split into parts, as ranges into the head buffer.
#[derive(Debug, Clone)]
pub struct Target {
    /// Path without query; empty for an absolute-form target with no path.
    pub path: Range<usize>,
    /// The query including its '?', or empty.
    pub query: Range<usize>,
    /// Authority of an absolute-form target; it replaces the Host header.
    pub authority: Option<Range<usize>>,
    /// Host used for routing: the authority, else the Host header.
    pub host: Option<Range<usize>>,
}

impl Target {
    pub fn parse(raw: &[u8], req: &RequestHead) -> Result<Target, ErrorKind> {
        let base = req.target.start;
        let t = &raw[req.target.clone()];
        // A fragment is the client's own (RFC 9110 4.2.5): one sent in a
        // request target is refused, never forwarded inside the path.
        if crate::proto::bytes::find_byte(b'#', t).is_some() {
            return Err(ErrorKind::BadRequest);
        }
        let split = |start: usize, end: usize| {
            let q =
                crate::proto::bytes::find_byte(b'?', &raw[start..end]).map_or(end, |i| start + i);
            (start..q, q..end)
        };
        if t.first() == Some(&b'/') {
            let (path, query) = split(base, base + t.len());
            return Ok(Target {
                path,
                query,
                authority: None,
                host: req.host.clone(),
            });
        }
        if t == b"*" {
            if &raw[req.method.clone()] != b"OPTIONS" {
                return Err(ErrorKind::BadRequest);
            }
            return Ok(Target {
                path: base..base + 1,
                query: base + 1..base + 1,
                authority: None,
                host: req.host.clone(),
            });
        }
        let scheme = if t.len() >= 7 && t[..7].eq_ignore_ascii_case(b"http://") {
            7
        } else if t.len() >= 8 && t[..8].eq_ignore_ascii_case(b"https://") {
            8
        } else {
            return Err(ErrorKind::BadRequest);
        };
        let rest = &t[scheme..];
        let auth_len = rest
            .iter()
            .position(|&b| b == b'/' || b == b'?' || b == b'#')
            .unwrap_or(rest.len());
        let authority = &rest[..auth_len];
        if authority.is_empty() || !crate::proto::bytes::valid_host(authority) {
            return Err(ErrorKind::BadRequest);
        }
        let a_start = base + scheme;
        let (path, query) = split(a_start + auth_len, base + t.len());
        let authority = a_start..a_start + auth_len;
        Ok(Target {
            path,
            query,
            authority: Some(authority.clone()),
            host: Some(authority),
        })
    }

    /// The path to route on and forward ("/" when an absolute-form target had none).
    pub fn path<'a>(&self, raw: &'a [u8]) -> &'a [u8] {
        if self.path.is_empty() {
            b"/"
        } else {
            &raw[self.path.clone()]
        }
    }

    pub fn host<'a>(&self, raw: &'a [u8]) -> Option<&'a [u8]> {
        self.host.clone().map(|r| &raw[r])
    }
}

/// `host:port` -> `host`; `[v6]:port` -> `[v6]`.
pub fn strip_port(h: &[u8]) -> &[u8] {
    if h.first() == Some(&b'[') {
        return match memchr::memchr(b']', h) {
            Some(i) => &h[..=i],
            None => h,
        };
    }
    match crate::proto::bytes::rfind_byte(b':', h) {
        Some(i) => &h[..i],
        None => h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::codec::{self, Parsed};

    fn parse(raw: &[u8]) -> Result<(Target, RequestHead), ErrorKind> {
        let mut head = RequestHead::default();
        match codec::parse_request(raw, 8192, &mut head) {
            Ok(Parsed::Complete(_)) => {}
            _ => panic!("bad head"),
        }
        Target::parse(raw, &head).map(|t| (t, head))
    }

    #[test]
    fn targets() {
        let raw = b"GET /a/b?x=1 HTTP/1.1\r\nHost: h:80\r\n\r\n";
        let (t, _) = parse(raw).unwrap();
        assert_eq!(t.path(raw), b"/a/b");
        assert_eq!(&raw[t.query.clone()], b"?x=1");
        assert_eq!(strip_port(t.host(raw).unwrap()), b"h");
        let raw = b"GET http://Other:8080/p?q HTTP/1.1\r\nHost: h\r\n\r\n";
        let (t, _) = parse(raw).unwrap();
        assert_eq!(t.path(raw), b"/p");
        assert_eq!(t.host(raw).unwrap(), b"Other:8080");
        let raw = b"GET http://o HTTP/1.1\r\nHost: h\r\n\r\n";
        let (t, _) = parse(raw).unwrap();
        assert_eq!(t.path(raw), b"/");
        assert!(parse(b"GET x HTTP/1.1\r\nHost: h\r\n\r\n").is_err());
        assert!(parse(b"GET * HTTP/1.1\r\nHost: h\r\n\r\n").is_err());
        assert!(parse(b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n").is_ok());
        assert!(parse(b"GET http://u@h/ HTTP/1.1\r\nHost: h\r\n\r\n").is_err());
        assert_eq!(strip_port(b"[::1]:80"), b"[::1]");
    }
}
