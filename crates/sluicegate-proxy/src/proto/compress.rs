//! Response compression's pieces that know HTTP but no route: choosing a
//! coding from a request's `Accept-Encoding` ([`negotiate`]), matching a
//! response's media type against a route's `types` ([`TypeRule`]), and
//! the fields a compressed answer changes (`Vary` merged, `ETag` made
//! weak); the codings themselves are [`codec`]'s.

pub mod codec;
#[cfg(test)]
mod tests;

// `encode_all` codes a whole slice with a coder of its own; the cache's
// coded copies use the worker's reused coders instead (session/cached.rs).
#[allow(unused_imports)]
pub use codec::encode_all;
pub use codec::{Encoder, Encoding, Flush};

/// How an answer's representation changes on its way to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recode {
    /// Not at all.
    Keep,
    /// Sent as it is, though another client would get it compressed:
    /// `Vary: Accept-Encoding` is merged in, for caches on the way.
    Vary,
    /// Compressed in this coding.
    Coded(Encoding),
}

/// A quality value in thousandths (`q=0.5` is 500), absent when unset.
type Q = Option<u16>;

/// The coding to answer with, for a request whose `Accept-Encoding`
/// field values are `values` (none: the header was absent), among
/// `offered` (in the route's order of preference, which breaks ties of
/// quality). A coding is acceptable when listed, or matched by `*`, with
/// a quality above zero; `x-gzip` is `gzip`. `None`: identity (the
/// header was absent, nothing offered is acceptable, or everything is
/// refused; a refused `identity` is answered with identity all the same,
/// as most servers do, rather than 406).
pub fn negotiate<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
    offered: &[Encoding],
) -> Option<Encoding> {
    let mut listed: [Q; 3] = [None; 3];
    let mut star: Q = None;
    for value in values {
        for element in value.split(|&b| b == b',') {
            let mut parts = element.split(|&b| b == b';');
            let name = parts.next().unwrap_or_default().trim_ascii();
            if name.is_empty() {
                continue;
            }
            let q = parts.find_map(quality).unwrap_or(1000);
            let slot = if name == b"*" {
                &mut star
            } else if let Some(e) = Encoding::ALL.iter().find(|e| {
                name.eq_ignore_ascii_case(e.token().as_bytes())
                    || (**e == Encoding::Gzip && name.eq_ignore_ascii_case(b"x-gzip"))
            }) {
                &mut listed[e.index()]
            } else {
                continue;
            };
            // Listed twice: the higher quality counts.
            *slot = Some(slot.map_or(q, |old| old.max(q)));
        }
    }
    let mut best: Option<(Encoding, u16)> = None;
    for &e in offered {
        let q = listed[e.index()].or(star).unwrap_or(0);
        if q > 0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((e, q));
        }
    }
    best.map(|(e, _)| e)
}

/// The quality in one `;`-separated parameter, when it is `q=...`; an
/// invalid value counts as 0 (not acceptable).
fn quality(param: &[u8]) -> Option<u16> {
    let param = param.trim_ascii();
    let (name, value) = param.split_at(param.iter().position(|&b| b == b'=')?);
    if !name.trim_ascii().eq_ignore_ascii_case(b"q") {
        return None;
    }
    Some(parse_q(value[1..].trim_ascii()).unwrap_or(0))
}

/// `0`, `1`, `0.xyz` or `1.000` (RFC 9110 12.4.2) in thousandths.
fn parse_q(v: &[u8]) -> Option<u16> {
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &[][..]),
    };
    if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut q = match int[0] {
        b'0' => 0u16,
        b'1' => 1000,
        _ => return None,
    };
    let mut scale = 100;
    for d in frac {
        q += (d - b'0') as u16 * scale;
        scale /= 10;
    }
    (q <= 1000).then_some(q)
}

/// One entry of a route's `types`: `type/subtype`, `type/*`, or
/// `type/*+suffix`, matched case-insensitively against a media type
/// without its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeRule {
    /// The type, lower case.
    main: Box<str>,
    sub: SubRule,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SubRule {
    Any,
    /// `*+json`: the suffix with its `+`, lower case.
    Suffix(Box<str>),
    Exact(Box<str>),
}

impl TypeRule {
    /// The rule for a `types` entry (the config checked its form).
    pub fn new(pattern: &str) -> Option<TypeRule> {
        let p = pattern.trim().to_ascii_lowercase();
        let (main, sub) = p.split_once('/')?;
        if main.is_empty() || sub.is_empty() || main == "*" {
            return None;
        }
        let sub = if sub == "*" {
            SubRule::Any
        } else if let Some(suffix) = sub.strip_prefix('*') {
            if !suffix.starts_with('+') || suffix.len() < 2 {
                return None;
            }
            SubRule::Suffix(suffix.into())
        } else {
            SubRule::Exact(sub.into())
        };
        Some(TypeRule {
            main: main.into(),
            sub,
        })
    }

    /// Whether `content_type` (a `Content-Type` value) is matched.
    pub fn matches(&self, content_type: &[u8]) -> bool {
        let media = match content_type.iter().position(|&b| b == b';') {
            Some(i) => &content_type[..i],
            None => content_type,
        }
        .trim_ascii();
        let Some(slash) = media.iter().position(|&b| b == b'/') else {
            return false;
        };
        let (main, sub) = (media[..slash].trim_ascii(), media[slash + 1..].trim_ascii());
        if !main.eq_ignore_ascii_case(self.main.as_bytes()) || sub.is_empty() {
            return false;
        }
        match &self.sub {
            SubRule::Any => true,
            SubRule::Exact(s) => sub.eq_ignore_ascii_case(s.as_bytes()),
            SubRule::Suffix(s) => {
                sub.len() > s.len() && sub[sub.len() - s.len()..].eq_ignore_ascii_case(s.as_bytes())
            }
        }
    }
}

/// Whether a `Content-Type` is gRPC's (`application/grpc`, `+proto`,
/// `-web`...): never compressed whatever `types` says.
pub fn is_grpc(content_type: &[u8]) -> bool {
    let t = content_type.trim_ascii();
    t.len() >= 16 && t[..16].eq_ignore_ascii_case(b"application/grpc")
}

/// Whether a `Cache-Control` value has `no-transform`.
pub fn no_transform(cache_control: &[u8]) -> bool {
    cache_control.split(|&b| b == b',').any(|d| {
        let d = d.trim_ascii();
        d.eq_ignore_ascii_case(b"no-transform")
    })
}

/// Appends the weak form of an entity tag: `W/` before a strong one, a
/// weak one as it is.
pub fn weak_etag(etag: &[u8], out: &mut Vec<u8>) {
    let etag = etag.trim_ascii();
    if !(etag.len() >= 2 && etag[..2].eq_ignore_ascii_case(b"w/")) {
        out.extend_from_slice(b"W/");
    }
    out.extend_from_slice(etag);
}

/// Appends one `Vary` value made of the response's own (`values`, every
/// `Vary` line) and `Accept-Encoding`, unless they already name it or
/// are `*`.
pub fn merge_vary<'a>(values: impl IntoIterator<Item = &'a [u8]>, out: &mut Vec<u8>) {
    let start = out.len();
    let mut has = false;
    for v in values {
        for token in v.split(|&b| b == b',') {
            let token = token.trim_ascii();
            if token.is_empty() {
                continue;
            }
            has |= token == b"*" || token.eq_ignore_ascii_case(b"accept-encoding");
            if out.len() > start {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(token);
        }
    }
    if !has {
        if out.len() > start {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(b"Accept-Encoding");
    }
}
