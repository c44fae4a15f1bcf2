//! Parser for the PROXY protocol header (versions 1 and 2) that a load
//! balancer in front of the gateway sends before the first HTTP byte, to
//! pass on the client's address.
//!
//! [`parse`] is fed the bytes read so far from a new connection and says
//! whether they hold a whole header ([`Parsed::Complete`], with its length
//! so the caller can drop it and hand the rest to the HTTP codec), could
//! still become one ([`Parsed::Partial`]), or cannot ([`ProxyError`]).
//! `Partial` is only returned while the bytes are a prefix of a valid
//! header, so a client that speaks HTTP straight away is refused on its
//! first bytes rather than after a timeout.
//!
//! Version 1 (text), strictly:
//! - `PROXY TCP4 <src> <dst> <sport> <dport>\r\n`, the same with `TCP6`,
//!   or `PROXY UNKNOWN` followed by anything up to `\r\n` (ignored);
//! - single spaces, no empty field, no trailing space;
//! - addresses in the family named (dotted quad without leading zeros for
//!   TCP4, RFC 4291 text for TCP6); ports decimal 0 to 65535, without
//!   leading zeros (`0` itself is allowed);
//! - the `\r\n` within the first 107 bytes; a CR not followed by LF, or a
//!   bare LF, is an error.
//!
//!   While a TCP6 address is incomplete only its characters and length are
//!   checked (TCP4 addresses and ports are checked exactly as they arrive).
//!
//! Version 2 (binary): the 12-byte signature, the version/command byte
//! (version 2; command LOCAL or PROXY), the family/protocol byte, a
//! big-endian 16-bit length, then that many bytes of addresses and TLVs.
//! - LOCAL: the address block and family byte are ignored, as the
//!   specification says; no source or destination.
//! - PROXY over AF_INET or AF_INET6 with STREAM: source and destination.
//! - PROXY with UNSPEC (`0x00`): no addresses; the block is skipped.
//! - PROXY with the other valid combinations (AF_INET/AF_INET6 over DGRAM,
//!   AF_UNIX over STREAM or DGRAM): treated as UNSPEC, which the
//!   specification allows a receiver that does not support them, but the
//!   length must still cover their address block. Any other family/protocol
//!   byte is an error.
//! - The length must cover the address block of the family; what follows
//!   it must be whole TLVs (type, 16-bit length, value) ending exactly at the
//!   declared length. TLVs are skipped (their CRC32C, if any, is not checked).
//! - Resource limit: the wire allows 16 + 65535 bytes, but a header longer
//!   than [`V2_MAX_LEN`] (4096) bytes in all is refused as soon as its
//!   length field is read, so a peer cannot make us buffer 64 KiB for it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest version 1 header, `\r\n` included.
pub(crate) const V1_MAX_LEN: usize = 107;

/// The longest version 2 header we accept, the 16 fixed bytes included
/// (the wire format allows 16 + 65535).
pub(crate) const V2_MAX_LEN: usize = 4096;

const V1_SIG: &[u8] = b"PROXY ";
const V2_SIG: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

/// What [`parse`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A whole header of `len` bytes. `source` and `destination` are `None`
    /// for LOCAL (v2), UNKNOWN (v1), and UNSPEC or unsupported families (v2):
    /// the connection's own endpoints apply.
    Complete {
        len: usize,
        source: Option<SocketAddr>,
        destination: Option<SocketAddr>,
    },
    /// The bytes so far are a valid prefix of a header: read more.
    Partial,
}

/// Why the bytes are not a PROXY protocol header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProxyError {
    /// Starts with neither the v1 nor the v2 signature.
    NotProxy,
    /// v1: no `\r\n` within the first 107 bytes.
    V1TooLong,
    /// v1: a CR not followed by LF, or a LF without CR.
    V1LineEnd,
    /// v1: protocol other than TCP4, TCP6 or UNKNOWN.
    V1Protocol,
    /// v1: too few or too many fields, or an empty one (double space).
    V1Fields,
    /// v1: an address that does not parse.
    V1Address,
    /// v1: an IPv6 address after TCP4 or an IPv4 address after TCP6.
    V1FamilyMismatch,
    /// v1: a port that is not decimal 0 to 65535 without leading zeros.
    V1Port,
    /// v2: version nibble other than 2.
    V2Version(u8),
    /// v2: command other than LOCAL (0) or PROXY (1).
    V2Command(u8),
    /// v2: family/protocol byte not one of the specified combinations.
    V2Family(u8),
    /// v2: declared header length over [`V2_MAX_LEN`].
    V2TooLong(usize),
    /// v2: declared length shorter than the family's address block.
    V2ShortAddress { len: usize, need: usize },
    /// v2: a TLV that runs past the declared length.
    V2Tlv,
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ProxyError::NotProxy => f.write_str("not a PROXY protocol header"),
            ProxyError::V1TooLong => {
                write!(f, "PROXY v1 header without CRLF within {V1_MAX_LEN} bytes")
            }
            ProxyError::V1LineEnd => f.write_str("PROXY v1 header with a bare CR or LF"),
            ProxyError::V1Protocol => f.write_str("PROXY v1 protocol is not TCP4, TCP6 or UNKNOWN"),
            ProxyError::V1Fields => {
                f.write_str("PROXY v1 header with missing, extra or empty fields")
            }
            ProxyError::V1Address => f.write_str("PROXY v1 address does not parse"),
            ProxyError::V1FamilyMismatch => {
                f.write_str("PROXY v1 address family does not match the protocol")
            }
            ProxyError::V1Port => {
                f.write_str("PROXY v1 port is not a decimal 0 to 65535 without leading zeros")
            }
            ProxyError::V2Version(v) => write!(f, "PROXY v2 header with version {v}"),
            ProxyError::V2Command(c) => write!(f, "PROXY v2 header with unknown command {c}"),
            ProxyError::V2Family(b) => {
                write!(f, "PROXY v2 header with unknown family/protocol 0x{b:02x}")
            }
            ProxyError::V2TooLong(n) => write!(
                f,
                "PROXY v2 header of {n} bytes, over the limit of {V2_MAX_LEN}"
            ),
            ProxyError::V2ShortAddress { len, need } => write!(
                f,
                "PROXY v2 length {len} is shorter than the {need}-byte address block"
            ),
            ProxyError::V2Tlv => f.write_str("PROXY v2 TLV runs past the header length"),
        }
    }
}

impl std::error::Error for ProxyError {}

/// Parses a PROXY protocol header (v1 or v2) at the start of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, ProxyError> {
    match buf.first() {
        None => Ok(Parsed::Partial),
        Some(b'P') => {
            check_sig(buf, V1_SIG)?;
            if buf.len() < V1_SIG.len() {
                return Ok(Parsed::Partial);
            }
            parse_v1(buf)
        }
        Some(b'\r') => {
            check_sig(buf, V2_SIG)?;
            if buf.len() < V2_SIG.len() {
                return Ok(Parsed::Partial);
            }
            parse_v2(buf)
        }
        Some(_) => Err(ProxyError::NotProxy),
    }
}

/// Whether the start of `buf` agrees with `sig` as far as both go.
fn check_sig(buf: &[u8], sig: &[u8]) -> Result<(), ProxyError> {
    let n = buf.len().min(sig.len());
    if buf[..n] == sig[..n] {
        Ok(())
    } else {
        Err(ProxyError::NotProxy)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, ProxyError> {
    let window = &buf[..buf.len().min(V1_MAX_LEN)];
    let end = window.iter().position(|&b| b == b'\r' || b == b'\n');
    let (line, complete) = match end {
        Some(i) if window[i] == b'\n' => return Err(ProxyError::V1LineEnd),
        // The LF would be byte 108.
        Some(i) if i + 2 > V1_MAX_LEN => return Err(ProxyError::V1TooLong),
        Some(i) => match buf.get(i + 1) {
            Some(b'\n') => (&buf[V1_SIG.len()..i], true),
            Some(_) => return Err(ProxyError::V1LineEnd),
            // The line is whole; only the LF is missing.
            None => (&buf[V1_SIG.len()..i], false),
        },
        None if buf.len() >= V1_MAX_LEN => return Err(ProxyError::V1TooLong),
        None => (&buf[V1_SIG.len()..], false),
    };
    let done = complete || end.is_some();
    let addrs = check_v1_line(line, done)?;
    match addrs {
        Some((source, destination)) if complete => Ok(Parsed::Complete {
            len: V1_SIG.len() + line.len() + 2,
            source,
            destination,
        }),
        _ => Ok(Parsed::Partial),
    }
}

type Endpoints = (Option<SocketAddr>, Option<SocketAddr>);

/// Checks the v1 line after `PROXY ` and before the CRLF. `done` says the
/// line is whole; if not, its last field may still grow. Returns the
/// endpoints once `done`.
fn check_v1_line(line: &[u8], done: bool) -> Result<Option<Endpoints>, ProxyError> {
    // proto, src, dst, sport, dport
    let mut parts: [&[u8]; 5] = [b""; 5];
    let mut n = 0;
    let proto_len = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
    let proto = &line[..proto_len];
    let proto_done = done || proto_len < line.len();
    let family = match proto {
        b"TCP4" if proto_done => Family::V4,
        b"TCP6" if proto_done => Family::V6,
        // Anything after UNKNOWN and a space is ignored.
        b"UNKNOWN" if proto_done => return Ok(done.then_some((None, None))),
        _ if !proto_done
            && [&b"TCP4"[..], b"TCP6", b"UNKNOWN"]
                .iter()
                .any(|p| p.starts_with(proto)) =>
        {
            return Ok(None)
        }
        _ => return Err(ProxyError::V1Protocol),
    };
    for p in line.split(|&b| b == b' ') {
        if n == parts.len() {
            return Err(ProxyError::V1Fields);
        }
        parts[n] = p;
        n += 1;
    }
    if done && n < parts.len() {
        return Err(ProxyError::V1Fields);
    }
    for (i, part) in parts.iter().enumerate().take(n).skip(1) {
        let whole = done || i + 1 < n;
        if whole && part.is_empty() {
            return Err(ProxyError::V1Fields);
        }
        match i {
            1 | 2 => check_addr(part, family, whole)?,
            _ => check_port(part, whole)?,
        }
    }
    if !done {
        return Ok(None);
    }
    let source = SocketAddr::new(v1_addr(parts[1], family)?, v1_port(parts[3])?);
    let destination = SocketAddr::new(v1_addr(parts[2], family)?, v1_port(parts[4])?);
    Ok(Some((Some(source), Some(destination))))
}

/// Checks a v1 address field; an incomplete one (`whole` false) must be a
/// possible prefix of an address of `family`.
fn check_addr(text: &[u8], family: Family, whole: bool) -> Result<(), ProxyError> {
    if whole {
        return v1_addr(text, family).map(|_| ());
    }
    let ok = match family {
        Family::V4 => {
            // Every octet but the last is whole; the last may be empty (more
            // to come). A prefix of a valid octet is a valid octet.
            let dots = text.iter().filter(|&&b| b == b'.').count();
            dots <= 3
                && text.split(|&b| b == b'.').enumerate().all(|(i, octet)| {
                    (i == dots && octet.is_empty()) || decimal(octet, 255).is_some()
                })
        }
        Family::V6 => {
            text.len() <= 45
                && text
                    .iter()
                    .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        }
    };
    if ok {
        Ok(())
    } else {
        Err(ProxyError::V1Address)
    }
}

fn v1_addr(text: &[u8], family: Family) -> Result<IpAddr, ProxyError> {
    let s = std::str::from_utf8(text).map_err(|_| ProxyError::V1Address)?;
    match family {
        Family::V4 => match s.parse::<Ipv4Addr>() {
            Ok(a) => Ok(IpAddr::V4(a)),
            Err(_) if s.parse::<Ipv6Addr>().is_ok() => Err(ProxyError::V1FamilyMismatch),
            Err(_) => Err(ProxyError::V1Address),
        },
        Family::V6 => match s.parse::<Ipv6Addr>() {
            Ok(a) => Ok(IpAddr::V6(a)),
            Err(_) if s.parse::<Ipv4Addr>().is_ok() => Err(ProxyError::V1FamilyMismatch),
            Err(_) => Err(ProxyError::V1Address),
        },
    }
}

/// Checks a v1 port; an incomplete one may be empty. A prefix of a valid
/// port is a valid port, so the same test serves both.
fn check_port(text: &[u8], whole: bool) -> Result<(), ProxyError> {
    if (!whole && text.is_empty()) || decimal(text, 65535).is_some() {
        Ok(())
    } else {
        Err(ProxyError::V1Port)
    }
}

fn v1_port(text: &[u8]) -> Result<u16, ProxyError> {
    decimal(text, 65535)
        .and_then(|v| u16::try_from(v).ok())
        .ok_or(ProxyError::V1Port)
}

/// A decimal number of one to five digits, no leading zero (but `0`
/// itself), at most `max`.
fn decimal(text: &[u8], max: u32) -> Option<u32> {
    if text.is_empty() || text.len() > 5 || (text.len() > 1 && text[0] == b'0') {
        return None;
    }
    let mut v = 0u32;
    for &b in text {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u32::from(b - b'0');
    }
    (v <= max).then_some(v)
}

/// The length of the address block for a v2 family/protocol byte, and
/// whether its addresses are used (AF_INET/AF_INET6 over STREAM).
fn v2_block(fam: u8) -> Result<(usize, bool), ProxyError> {
    match fam {
        0x00 => Ok((0, false)),
        0x11 => Ok((12, true)),
        0x12 => Ok((12, false)),
        0x21 => Ok((36, true)),
        0x22 => Ok((36, false)),
        0x31 | 0x32 => Ok((216, false)),
        _ => Err(ProxyError::V2Family(fam)),
    }
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, ProxyError> {
    let Some(&ver_cmd) = buf.get(12) else {
        return Ok(Parsed::Partial);
    };
    if ver_cmd >> 4 != 2 {
        return Err(ProxyError::V2Version(ver_cmd >> 4));
    }
    let local = match ver_cmd & 0x0f {
        0 => true,
        1 => false,
        c => return Err(ProxyError::V2Command(c)),
    };
    let Some(&fam) = buf.get(13) else {
        return Ok(Parsed::Partial);
    };
    // LOCAL: the family is discarded along with the address block.
    let (block, used) = if local { (0, false) } else { v2_block(fam)? };
    if buf.len() < 16 {
        return Ok(Parsed::Partial);
    }
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let total = 16 + len;
    if total > V2_MAX_LEN {
        return Err(ProxyError::V2TooLong(total));
    }
    if len < block {
        return Err(ProxyError::V2ShortAddress { len, need: block });
    }
    // TLVs follow the address block, except after LOCAL or UNSPEC where the
    // whole block is ignored.
    if !local && fam != 0x00 {
        check_tlvs(&buf[..buf.len().min(total)], 16 + block, total)?;
    }
    if buf.len() < total {
        return Ok(Parsed::Partial);
    }
    let (source, destination) = if !used {
        (None, None)
    } else if block == 12 {
        let a = &buf[16..28];
        let ip = |o: usize| IpAddr::V4(Ipv4Addr::new(a[o], a[o + 1], a[o + 2], a[o + 3]));
        let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
        (
            Some(SocketAddr::new(ip(0), port(8))),
            Some(SocketAddr::new(ip(4), port(10))),
        )
    } else {
        let a = &buf[16..52];
        let ip = |o: usize| {
            let mut b = [0u8; 16];
            b.copy_from_slice(&a[o..o + 16]);
            IpAddr::V6(Ipv6Addr::from(b))
        };
        let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
        (
            Some(SocketAddr::new(ip(0), port(32))),
            Some(SocketAddr::new(ip(16), port(34))),
        )
    };
    Ok(Parsed::Complete {
        len: total,
        source,
        destination,
    })
}

/// Walks the TLVs in `avail[start..end]` (as far as `avail` goes): each
/// must fit before `end`, the declared end of the header.
fn check_tlvs(avail: &[u8], start: usize, end: usize) -> Result<(), ProxyError> {
    let mut pos = start;
    while pos < end {
        if pos + 3 > end {
            return Err(ProxyError::V2Tlv);
        }
        if pos + 3 > avail.len() {
            return Ok(());
        }
        let tlen = usize::from(u16::from_be_bytes([avail[pos + 1], avail[pos + 2]]));
        pos += 3 + tlen;
        if pos > end {
            return Err(ProxyError::V2Tlv);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
