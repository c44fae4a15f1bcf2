//! RFC 9111's rules for a shared cache, as pure functions over header
//! values: `Cache-Control` directives (response and request), whether an
//! answer may be stored, its freshness lifetime (`s-maxage`, `max-age`,
//! `Expires` less `Date`, else the route's `default_ttl` for the statuses
//! cacheable by default), its age when it arrived (`Age`, `Date`), and
//! HTTP dates (IMF-fixdate).

use std::time::Duration;

use crate::clock::calendar::days_from_civil;

/// The statuses stored without an explicit freshness when the route has
/// a `default_ttl` (RFC 9110's heuristically cacheable ones); no other
/// status is stored at all.
pub const CACHEABLE: [u16; 11] = [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501];

/// The directives of a response's `Cache-Control` that a shared cache
/// acts on; unknown ones are ignored.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResponseDirectives {
    pub no_store: bool,
    pub private: bool,
    pub public: bool,
    /// `no-cache` (unqualified, or naming fields: both mean revalidate
    /// before each use here).
    pub no_cache: bool,
    pub must_revalidate: bool,
    pub proxy_revalidate: bool,
    pub max_age: Option<u64>,
    pub s_maxage: Option<u64>,
    pub stale_while_revalidate: Option<u64>,
    pub stale_if_error: Option<u64>,
}

/// The directives of a request's `Cache-Control` (and `Pragma:
/// no-cache`, which stands for `no-cache` when `Cache-Control` is absent).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RequestDirectives {
    pub no_store: bool,
    pub no_cache: bool,
    pub max_age: Option<u64>,
    /// `max-stale` with no value: any staleness.
    pub max_stale: Option<u64>,
    pub min_fresh: Option<u64>,
    pub only_if_cached: bool,
}

/// Calls `visit` with each directive of a `Cache-Control` value: its
/// lower-cased name (at most 32 bytes; longer ones are skipped) and its
/// argument, unquoted.
fn each_directive(value: &[u8], mut visit: impl FnMut(&[u8], Option<&[u8]>)) {
    for item in value.split(|&b| b == b',') {
        let item = item.trim_ascii();
        if item.is_empty() {
            continue;
        }
        let (name, arg) = match item.iter().position(|&b| b == b'=') {
            Some(i) => (item[..i].trim_ascii(), Some(item[i + 1..].trim_ascii())),
            None => (item, None),
        };
        let mut lower = [0u8; 32];
        if name.len() > lower.len() {
            continue;
        }
        for (d, s) in lower.iter_mut().zip(name) {
            *d = s.to_ascii_lowercase();
        }
        let arg = arg.map(|a| {
            a.strip_prefix(b"\"")
                .and_then(|a| a.strip_suffix(b"\""))
                .unwrap_or(a)
        });
        visit(&lower[..name.len()], arg);
    }
}

/// A delta-seconds argument; a value too large for 2^31 is 2^31 (RFC
/// 9111 section 1.2.2); anything but digits is no value.
fn seconds(arg: Option<&[u8]>) -> Option<u64> {
    let arg = arg?;
    if arg.is_empty() || !arg.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for &b in arg {
        n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
    }
    Some(n.min(1 << 31))
}

impl ResponseDirectives {
    /// Adds the directives of one `Cache-Control` field value.
    pub fn add(&mut self, value: &[u8]) {
        each_directive(value, |name, arg| match name {
            b"no-store" => self.no_store = true,
            b"private" => self.private = true,
            b"public" => self.public = true,
            b"no-cache" => self.no_cache = true,
            b"must-revalidate" => self.must_revalidate = true,
            b"proxy-revalidate" => self.proxy_revalidate = true,
            // A malformed max-age makes the answer stale (section 4.2.1):
            // zero.
            b"max-age" => self.max_age = Some(seconds(arg).unwrap_or(0)),
            b"s-maxage" => self.s_maxage = Some(seconds(arg).unwrap_or(0)),
            b"stale-while-revalidate" => self.stale_while_revalidate = seconds(arg),
            b"stale-if-error" => self.stale_if_error = seconds(arg),
            _ => {}
        });
    }
}

impl RequestDirectives {
    /// Adds the directives of one `Cache-Control` field value.
    pub fn add(&mut self, value: &[u8]) {
        each_directive(value, |name, arg| match name {
            b"no-store" => self.no_store = true,
            b"no-cache" => self.no_cache = true,
            b"max-age" => self.max_age = Some(seconds(arg).unwrap_or(0)),
            b"max-stale" => self.max_stale = Some(seconds(arg).unwrap_or(u64::MAX)),
            b"min-fresh" => self.min_fresh = seconds(arg),
            b"only-if-cached" => self.only_if_cached = true,
            _ => {}
        });
    }
}

/// What the response's fields say, besides `Cache-Control`, that storing
/// it depends on.
#[derive(Debug, Default, Clone, Copy)]
pub struct ResponseFacts<'a> {
    pub status: u16,
    pub cc: ResponseDirectives,
    /// `Expires`, as given (an invalid one means already expired).
    pub expires: Option<&'a [u8]>,
    /// `Date`, as given.
    pub date: Option<&'a [u8]>,
    /// `Age`, as given.
    pub age: Option<&'a [u8]>,
    pub set_cookie: bool,
    /// `Vary: *` (or a `Vary` naming `*` among others).
    pub vary_star: bool,
    /// A `Content-Range` (a partial answer whatever its status).
    pub content_range: bool,
}

/// Why an answer is not stored (for `Cache-Status`' `detail` and the
/// counters), or how long it is fresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storable {
    /// Fresh for this long from when it was generated (its age is apart).
    Yes(Duration),
    No(&'static str),
}

/// Whether a shared cache may store an answer with `facts` to a GET or
/// HEAD request (`authorization`: the request carried one), and its
/// freshness lifetime; `default_ttl` stands in for a missing one on the
/// statuses cacheable by default (zero: not stored then).
pub fn storable(facts: &ResponseFacts<'_>, authorization: bool, default_ttl: Duration) -> Storable {
    let cc = &facts.cc;
    if cc.no_store {
        return Storable::No("no-store");
    }
    if cc.private {
        return Storable::No("private");
    }
    if !CACHEABLE.contains(&facts.status) || facts.content_range {
        return Storable::No("status");
    }
    if facts.set_cookie {
        return Storable::No("set-cookie");
    }
    if facts.vary_star {
        return Storable::No("vary-star");
    }
    if authorization && !cc.public && cc.s_maxage.is_none() && !cc.must_revalidate {
        return Storable::No("authorization");
    }
    match lifetime(facts) {
        Some(d) => Storable::Yes(d),
        None if cc.no_cache => Storable::Yes(Duration::ZERO),
        None if default_ttl.is_zero() => Storable::No("no-freshness"),
        None => Storable::Yes(default_ttl),
    }
}

/// The explicit freshness lifetime (section 4.2.1): `s-maxage`, else
/// `max-age`, else `Expires` less `Date` (zero when `Expires` is invalid
/// or past); `None` when the answer gives none.
pub fn lifetime(facts: &ResponseFacts<'_>) -> Option<Duration> {
    if let Some(s) = facts.cc.s_maxage.or(facts.cc.max_age) {
        return Some(Duration::from_secs(s));
    }
    let expires = facts.expires?;
    let Some(expires) = http_date(expires) else {
        return Some(Duration::ZERO);
    };
    // Without a valid Date, the time it arrived stands in for it: the
    // caller gives no clock here, so an absent Date counts the lifetime
    // from now, which `initial_age` leaves at zero.
    let date = facts.date.and_then(http_date).unwrap_or_else(unix_now);
    Some(Duration::from_secs(expires.saturating_sub(date)))
}

/// The answer's age when it arrived (section 4.2.3, with the response
/// delay taken as zero): the larger of its `Age` and how long before now
/// its `Date` is.
pub fn initial_age(facts: &ResponseFacts<'_>, now_unix: u64) -> Duration {
    let age_value = facts.age.and_then(|a| seconds(Some(a.trim_ascii())));
    let apparent = facts
        .date
        .and_then(http_date)
        .map_or(0, |d| now_unix.saturating_sub(d));
    Duration::from_secs(age_value.unwrap_or(0).max(apparent))
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) as seconds since the
/// Unix epoch; `None` for any other form (the obsolete RFC 850 and
/// asctime forms are not read: such an `Expires` counts as expired).
pub fn http_date(text: &[u8]) -> Option<u64> {
    let t = text.trim_ascii();
    if t.len() != 29 || &t[3..5] != b", " || &t[25..] != b" GMT" {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let s = &t[r];
        s.iter()
            .all(u8::is_ascii_digit)
            .then(|| s.iter().fold(0u32, |n, &b| n * 10 + u32::from(b - b'0')))
    };
    let day = num(5..7)?;
    let month = MONTHS.iter().position(|m| &t[8..11] == *m)? as u32 + 1;
    let year = num(12..16)?;
    let (h, m, s) = (num(17..19)?, num(20..22)?, num(23..25)?);
    if t[7] != b' ' || t[11] != b' ' || t[16] != b' ' || t[19] != b':' || t[22] != b':' {
        return None;
    }
    if !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    u64::try_from(days * 86_400 + i64::from(h * 3600 + m * 60 + s)).ok()
}

/// Writes `secs` (since the Unix epoch) as an IMF-fixdate.
pub fn write_http_date(secs: u64, out: &mut Vec<u8>) {
    const DAYS: [&[u8; 3]; 7] = [b"Thu", b"Fri", b"Sat", b"Sun", b"Mon", b"Tue", b"Wed"];
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, mo, d) = crate::clock::calendar::civil_from_days(days);
    out.extend_from_slice(DAYS[(days % 7) as usize]);
    out.extend_from_slice(b", ");
    let two = |n: u64, out: &mut Vec<u8>| {
        out.push(b'0' + (n / 10) as u8);
        out.push(b'0' + (n % 10) as u8);
    };
    two(u64::from(d), out);
    out.push(b' ');
    out.extend_from_slice(MONTHS[mo as usize - 1]);
    out.push(b' ');
    out.extend_from_slice(itoa::Buffer::new().format(y).as_bytes());
    out.push(b' ');
    two(rem / 3600, out);
    out.push(b':');
    two(rem / 60 % 60, out);
    out.push(b':');
    two(rem % 60, out);
    out.extend_from_slice(b" GMT");
}

/// Whether an `If-None-Match` value matches the stored `ETag` by the weak
/// comparison (section 13.1.2 of RFC 9110): `*`, or one of its tags
/// equal to it, `W/` aside.
pub fn none_match(if_none_match: &[u8], etag: &[u8]) -> bool {
    fn weakless(t: &[u8]) -> &[u8] {
        t.strip_prefix(b"W/").unwrap_or(t)
    }
    let etag = weakless(etag.trim_ascii());
    if_none_match.split(|&b| b == b',').any(|t| {
        let t = t.trim_ascii();
        t == b"*" || weakless(t) == etag
    })
}

#[cfg(test)]
mod tests;
