//! Fuzz-only: the HTTP/1.1 upgrade path's decisions over arbitrary bytes,
//! with their invariants, for the `upgrade` fuzz target and the
//! seed-replay test. Not an API.
//!
//! A request head goes through the codec; its upgrade is taken as
//! `upstream::forward` takes it (the codec found one, the request has no
//! body, and the route allows every protocol named:
//! `upstream::tunnel::allowed`); the bytes after the head are the
//! upstream's answer, parsed by the codec's response parser, and a `101`
//! switches as `upstream::head::read_response_head` lets it (the request
//! was upgrading and the `101` names an `Upgrade`). What each step found
//! is checked against the RFCs' rules written out plainly here.

use crate::proto::codec::{parse_request, parse_response, BodyKind, Parsed};
use crate::proto::head::{RequestHead, ResponseHead};
use crate::upstream::tunnel::allowed;

/// The routes' upgrade lists, chosen by the input's first byte.
fn routes() -> [Vec<Box<str>>; 4] {
    [
        vec![],
        vec!["websocket".into()],
        // `h2c` listed: still never taken.
        vec!["WebSocket".into(), "h2c".into(), "irc".into()],
        vec!["foo".into(), "websocket".into(), "TLS".into()],
    ]
}

/// What the upgrade path made of an input.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Upgrade {
    /// The request head parsed.
    pub parsed: bool,
    /// The codec found an upgrade asked for.
    pub asked: bool,
    /// It would be forwarded as an upgrade.
    pub upgrading: bool,
    /// The answer after the head is a whole `101`.
    pub switching: bool,
    /// The tunnel would open.
    pub tunnel: bool,
}

/// The header fields of a parsed head named `name` (any case), in order.
fn fields<'a>(
    buf: &'a [u8],
    headers: &'a [crate::proto::head::HeaderRef],
    name: &'a [u8],
) -> impl Iterator<Item = &'a crate::proto::head::HeaderRef> + 'a {
    headers
        .iter()
        .filter(move |h| buf[h.name.clone()].eq_ignore_ascii_case(name))
}

/// A comma-separated list's elements, optional whitespace trimmed.
fn tokens(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',').map(|t| {
        let s = t.iter().position(|&b| b != b' ' && b != b'\t');
        let e = t.iter().rposition(|&b| b != b' ' && b != b'\t');
        match (s, e) {
            (Some(s), Some(e)) => &t[s..=e],
            _ => &t[..0],
        }
    })
}

/// Runs the upgrade path over `data` (its first byte chooses the route's
/// list; the rest is a request head and what an upstream answers after
/// it) and checks it: what it did, or what rule it broke.
pub fn upgrade(data: &[u8]) -> Result<Upgrade, String> {
    let mut out = Upgrade::default();
    let Some((&pick, data)) = data.split_first() else {
        return Ok(out);
    };
    let routes = routes();
    let list = &routes[usize::from(pick) % routes.len()];
    let mut head = RequestHead::default();
    let framing = match parse_request(data, 16384, &mut head) {
        Ok(Parsed::Complete(f)) => f,
        _ => return Ok(out),
    };
    out.parsed = true;
    let names_upgrade = fields(data, &head.headers, b"connection")
        .any(|h| tokens(&data[h.value.clone()]).any(|t| t.eq_ignore_ascii_case(b"upgrade")));
    let last_upgrade = fields(data, &head.headers, b"upgrade").last();
    // The codec: an upgrade is asked by an HTTP/1.1 request whose
    // Connection names `upgrade`, and it is the last Upgrade field's value.
    match (&head.upgrade, last_upgrade) {
        (Some(u), Some(h)) if *u == h.value => {
            if head.minor != 1 || !names_upgrade {
                return Err("an upgrade without HTTP/1.1 and Connection: upgrade".into());
            }
        }
        (Some(u), _) => return Err(format!("upgrade {u:?} is not the last Upgrade field")),
        (None, Some(_)) if head.minor == 1 && names_upgrade => {
            return Err("Connection: upgrade and Upgrade, no upgrade found".into())
        }
        (None, _) => {}
    }
    out.asked = head.upgrade.is_some();
    // `upstream::forward`: taken for a request without a body whose
    // protocols the route allows.
    out.upgrading = match &head.upgrade {
        Some(v) if framing.body == BodyKind::None => allowed(&data[v.clone()], list),
        _ => false,
    };
    if let Some(v) = &head.upgrade {
        let value = &data[v.clone()];
        let ok = allowed(value, list);
        let names: Vec<&[u8]> = tokens(value)
            .map(|t| t.split(|&b| b == b'/').next().unwrap_or(t))
            .collect();
        if ok {
            if names.iter().any(|n| n.eq_ignore_ascii_case(b"h2c")) {
                return Err("an upgrade to h2c allowed".into());
            }
            for n in &names {
                if n.is_empty() || !list.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(n)) {
                    return Err(format!(
                        "{:?} allowed, not listed",
                        String::from_utf8_lossy(n)
                    ));
                }
            }
        }
        // Case never matters; no list allows anything.
        if allowed(&value.to_ascii_uppercase(), list) != ok || allowed(value, &[]) {
            return Err("allowed depends on case, or on an empty list".into());
        }
    }
    if out.upgrading && framing.body != BodyKind::None {
        return Err("an upgrade with a body".into());
    }
    // The upstream's answer, after the request head.
    let answer = &data[framing.len..];
    let mut res = ResponseHead::default();
    if let Ok(Parsed::Complete(rf)) = parse_response(answer, 16384, false, &mut res) {
        if rf.len > answer.len() {
            return Err("a response head longer than its bytes".into());
        }
        let last = fields(answer, &res.headers, b"upgrade").last();
        if res.upgrade.as_ref() != last.map(|h| &h.value) {
            return Err("the response's upgrade is not its last Upgrade field".into());
        }
        if res.status == 101 {
            out.switching = true;
            if rf.body != BodyKind::None {
                return Err("a 101 with a body".into());
            }
            // `upstream::head::read_response_head`: a 101 is final only
            // for a request upgrading, and only naming what it switches to.
            out.tunnel = out.upgrading && res.upgrade.is_some();
        }
    }
    if out.tunnel && !(out.upgrading && names_upgrade && head.minor == 1) {
        return Err("a tunnel for a request that did not ask".into());
    }
    Ok(out)
}
