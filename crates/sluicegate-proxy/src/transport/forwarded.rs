//! The client address behind trusted proxies, from `X-Forwarded-For`.
//!
//! Each proxy appends the address it received the request from, so the
//! list reads client, proxy 1, proxy 2, ... and the connection's peer is the
//! last proxy. Only entries added by proxies we trust can be believed:
//! walking from the right, each trusted address vouches for the entry to
//! its left, and the first untrusted one is the client. Anything further
//! left was written by that client and is ignored.
//!
//! Choices:
//! - The peer not trusted: the header is ignored, the peer is the client.
//! - Every entry trusted: the left-most entry (the walk ran out of list).
//! - An entry that is not an address (`unknown`, an obfuscated name, junk)
//!   stops the walk: the address to its right, the last good one seen, is
//!   the client; if it is the right-most entry, the peer is. Nothing left
//!   of junk is believed, since the hop that should have vouched for it
//!   did not write an address.
//! - Empty entries (`a,,b`, a trailing comma, an empty header) are skipped,
//!   as HTTP list syntax says to.
//!
//! Entries may be `192.0.2.1`, `2001:db8::1`, `[2001:db8::1]`,
//! `[2001:db8::1]:443` or `192.0.2.1:443`; spaces and tabs around them
//! are trimmed. Addresses are returned as written (an IPv4-mapped IPv6
//! address stays IPv6; trust checks treat it as IPv4). No allocation.

// Used by the listener once it reads X-Forwarded-For; until then only the
// tests call it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sluicegate_config::Cidr;

/// The client's address: see the module documentation. `xff_values` are
/// the `X-Forwarded-For` header values in the order they appear.
pub(crate) fn client_from_xff<'a>(
    peer: IpAddr,
    trusted: &[Cidr],
    xff_values: impl Iterator<Item = &'a [u8]>,
) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if !is_trusted(peer) {
        return peer;
    }
    // The right-to-left walk stops at the right-most entry that is junk or
    // untrusted. One left-to-right pass finds it: `stop` is the latest such
    // entry so far, `after` the first entry after a junk stop, and `first`
    // the left-most entry (the answer if there is no stop at all).
    let mut first: Option<IpAddr> = None;
    let mut stop = Stop::None;
    let mut after: Option<IpAddr> = None;
    for value in xff_values {
        for entry in value.split(|&b| b == b',') {
            let entry = entry.trim_ascii();
            if entry.is_empty() {
                continue;
            }
            match parse_entry(entry) {
                None => {
                    stop = Stop::Junk;
                    after = None;
                }
                Some(ip) if !is_trusted(ip) => {
                    stop = Stop::Untrusted(ip);
                    after = None;
                }
                Some(ip) => {
                    if first.is_none() && stop == Stop::None {
                        first = Some(ip);
                    }
                    if stop == Stop::Junk && after.is_none() {
                        after = Some(ip);
                    }
                }
            }
        }
    }
    match stop {
        Stop::None => first.unwrap_or(peer),
        Stop::Untrusted(ip) => ip,
        Stop::Junk => after.unwrap_or(peer),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    None,
    Untrusted(IpAddr),
    Junk,
}

/// One list entry: an address, `[v6]`, `[v6]:port` or `v4:port`.
fn parse_entry(entry: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(entry).ok()?;
    if let Some(rest) = text.strip_prefix('[') {
        let (addr, tail) = rest.split_once(']')?;
        if !(tail.is_empty() || tail.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    let (addr, port) = text.split_once(':')?;
    if !is_port(port) {
        return None;
    }
    addr.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

fn is_port(text: &str) -> bool {
    (1..=5).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_digit())
        && text.parse::<u32>().is_ok_and(|p| p <= 65535)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn cidrs(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|s| Cidr::parse(s).unwrap()).collect()
    }

    fn client(peer: &str, trusted: &[&str], values: &[&str]) -> IpAddr {
        client_from_xff(
            ip(peer),
            &cidrs(trusted),
            values.iter().map(|v| v.as_bytes()),
        )
    }

    const TRUSTED: &[&str] = &["10.0.0.0/8", "2001:db8:ffff::/48"];

    #[test]
    fn untrusted_peer_is_the_client() {
        assert_eq!(
            client("203.0.113.9", TRUSTED, &["198.51.100.1"]),
            ip("203.0.113.9")
        );
        assert_eq!(
            client("203.0.113.9", &[], &["198.51.100.1"]),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn trusted_peer_without_header_is_the_client() {
        assert_eq!(client("10.0.0.1", TRUSTED, &[]), ip("10.0.0.1"));
        assert_eq!(client("10.0.0.1", TRUSTED, &["", " , "]), ip("10.0.0.1"));
    }

    #[test]
    fn right_most_untrusted_entry() {
        assert_eq!(
            client("10.0.0.1", TRUSTED, &["198.51.100.1"]),
            ip("198.51.100.1")
        );
        // A client can put anything on the left; it is not believed.
        assert_eq!(
            client(
                "10.0.0.1",
                TRUSTED,
                &["1.1.1.1, 198.51.100.1, 10.0.0.7,10.1.2.3"]
            ),
            ip("198.51.100.1")
        );
        // Junk left of the client does not matter either.
        assert_eq!(
            client("10.0.0.1", TRUSTED, &["unknown, 198.51.100.1, 10.0.0.7"]),
            ip("198.51.100.1")
        );
    }

    #[test]
    fn values_are_joined_in_order() {
        assert_eq!(
            client(
                "10.0.0.1",
                TRUSTED,
                &["1.1.1.1", "198.51.100.1, 10.0.0.7", "10.0.0.8"]
            ),
            ip("198.51.100.1")
        );
        assert_eq!(
            client("10.0.0.1", TRUSTED, &["198.51.100.1", "1.1.1.1"]),
            ip("1.1.1.1")
        );
    }

    #[test]
    fn all_trusted_gives_the_left_most() {
        assert_eq!(
            client("10.0.0.1", TRUSTED, &["10.9.9.9, 10.0.0.7", "10.0.0.8"]),
            ip("10.9.9.9")
        );
        assert_eq!(
            client("10.0.0.1", TRUSTED, &[",, 10.9.9.9 ,10.0.0.7,"]),
            ip("10.9.9.9")
        );
    }

    #[test]
    fn junk_stops_the_walk() {
        // The last good address seen right of the junk.
        assert_eq!(
            client(
                "10.0.0.1",
                TRUSTED,
                &["198.51.100.1, unknown, 10.0.0.7, 10.0.0.8"]
            ),
            ip("10.0.0.7")
        );
        assert_eq!(
            client("10.0.0.1", TRUSTED, &["198.51.100.1, _hidden", "10.0.0.7"]),
            ip("10.0.0.7")
        );
        // Junk right-most: nothing good seen, so the peer.
        assert_eq!(
            client("10.0.0.1", TRUSTED, &["198.51.100.1, 10.0.0.7, garbage"]),
            ip("10.0.0.1")
        );
        // An untrusted address right of the junk is found before it.
        assert_eq!(
            client("10.0.0.1", TRUSTED, &["junk, 198.51.100.1, 10.0.0.7"]),
            ip("198.51.100.1")
        );
        // Several junk entries: the right-most one counts.
        assert_eq!(
            client("10.0.0.1", TRUSTED, &["x, 10.0.0.5, y, 10.0.0.6, 10.0.0.7"]),
            ip("10.0.0.6")
        );
        assert_eq!(
            client("10.0.0.1", TRUSTED, &["x, 10.0.0.5, y"]),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn entry_forms() {
        let t = TRUSTED;
        assert_eq!(
            client("10.0.0.1", t, &["198.51.100.1:4711"]),
            ip("198.51.100.1")
        );
        assert_eq!(
            client("10.0.0.1", t, &["[2001:db8::5]:443"]),
            ip("2001:db8::5")
        );
        assert_eq!(client("10.0.0.1", t, &["[2001:db8::5]"]), ip("2001:db8::5"));
        assert_eq!(
            client("10.0.0.1", t, &["\t2001:db8::5 "]),
            ip("2001:db8::5")
        );
        assert_eq!(
            client(
                "2001:db8:ffff::1",
                t,
                &["2001:db8::5, [2001:db8:ffff::9]:1"]
            ),
            ip("2001:db8::5")
        );
        // IPv4-mapped addresses are trusted as IPv4 and returned as written.
        assert_eq!(
            client(
                "::ffff:10.0.0.1",
                t,
                &["::ffff:198.51.100.1, ::ffff:10.0.0.2"]
            ),
            ip("::ffff:198.51.100.1")
        );
        for junk in [
            "[2001:db8::5]:",
            "[2001:db8::5]:65536",
            "[2001:db8::5]x",
            "[2001:db8::5",
            "[198.51.100.1]",
            "198.51.100.1:",
            "198.51.100.1:99999",
            "198.51.100.1:+1",
            "2001:db8::5:443:x",
            "fe80::1%eth0",
            "01.2.3.4",
            "unknown",
            "\u{e9}",
        ] {
            assert_eq!(parse_entry(junk.as_bytes()), None, "{junk}");
        }
        assert_eq!(parse_entry(b"\xff"), None);
    }
}
