//! The storing and freshness rules against RFC 9111's cases.

use std::time::Duration;

use super::*;

fn cc(value: &str) -> ResponseDirectives {
    let mut d = ResponseDirectives::default();
    d.add(value.as_bytes());
    d
}

fn facts(status: u16, value: &str) -> ResponseFacts<'static> {
    ResponseFacts {
        status,
        cc: cc(value),
        ..Default::default()
    }
}

const NONE: Duration = Duration::ZERO;

#[test]
fn directives_are_read_case_blind_with_quoted_and_bad_arguments() {
    let d = cc("Public, MAX-AGE=60, s-maxage=\"30\", stale-while-revalidate=10, x-other=1");
    assert!(d.public && !d.private && !d.no_store);
    assert_eq!((d.max_age, d.s_maxage), (Some(60), Some(30)));
    assert_eq!(d.stale_while_revalidate, Some(10));
    // A malformed max-age is zero: stale at once.
    assert_eq!(cc("max-age=soon").max_age, Some(0));
    assert_eq!(cc("max-age=99999999999999999999").max_age, Some(1 << 31));
    assert!(cc("no-cache=\"set-cookie\"").no_cache);
    let mut r = RequestDirectives::default();
    r.add(b"no-cache, max-age=0, max-stale");
    assert!(r.no_cache && !r.no_store);
    assert_eq!((r.max_age, r.max_stale), (Some(0), Some(u64::MAX)));
}

#[test]
fn what_is_never_stored() {
    for (f, why) in [
        (facts(200, "no-store, max-age=60"), "no-store"),
        (facts(200, "private, max-age=60"), "private"),
        (facts(206, "max-age=60"), "status"),
        (facts(302, "max-age=60"), "status"),
        (facts(500, "max-age=60"), "status"),
    ] {
        assert_eq!(storable(&f, false, NONE), Storable::No(why), "{f:?}");
    }
    let mut f = facts(200, "max-age=60");
    f.set_cookie = true;
    assert_eq!(storable(&f, false, NONE), Storable::No("set-cookie"));
    let mut f = facts(200, "max-age=60");
    f.vary_star = true;
    assert_eq!(storable(&f, false, NONE), Storable::No("vary-star"));
    let mut f = facts(200, "max-age=60");
    f.content_range = true;
    assert_eq!(storable(&f, false, NONE), Storable::No("status"));
}

#[test]
fn authorization_needs_public_or_s_maxage() {
    let f = facts(200, "max-age=60");
    assert_eq!(storable(&f, true, NONE), Storable::No("authorization"));
    let secs = |n| Storable::Yes(Duration::from_secs(n));
    assert_eq!(
        storable(&facts(200, "public, max-age=60"), true, NONE),
        secs(60)
    );
    assert_eq!(storable(&facts(200, "s-maxage=5"), true, NONE), secs(5));
    assert_eq!(storable(&facts(200, "max-age=60"), false, NONE), secs(60));
}

#[test]
fn freshness_s_maxage_then_max_age_then_expires_then_the_default() {
    let secs = |n| Some(Duration::from_secs(n));
    assert_eq!(lifetime(&facts(200, "max-age=60, s-maxage=10")), secs(10));
    assert_eq!(lifetime(&facts(200, "max-age=60")), secs(60));
    let mut f = facts(200, "");
    f.date = Some(b"Sun, 06 Nov 1994 08:49:37 GMT");
    f.expires = Some(b"Sun, 06 Nov 1994 08:50:37 GMT");
    assert_eq!(lifetime(&f), secs(60));
    // max-age wins over Expires.
    f.cc = cc("max-age=5");
    assert_eq!(lifetime(&f), secs(5));
    // An invalid Expires is already expired.
    let mut f = facts(200, "");
    f.expires = Some(b"0");
    assert_eq!(lifetime(&f), secs(0));
    // No freshness: the default for the statuses cacheable by default.
    let f = facts(404, "");
    assert_eq!(storable(&f, false, NONE), Storable::No("no-freshness"));
    let ttl = Duration::from_secs(7);
    assert_eq!(storable(&f, false, ttl), Storable::Yes(ttl));
    // no-cache is stored, to be revalidated before each use.
    assert_eq!(
        storable(&facts(200, "no-cache"), false, NONE),
        Storable::Yes(NONE)
    );
}

#[test]
fn the_initial_age_is_the_larger_of_age_and_the_date_s_distance() {
    let now = http_date(b"Sun, 06 Nov 1994 08:50:37 GMT").unwrap();
    let mut f = facts(200, "");
    f.date = Some(b"Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(initial_age(&f, now), Duration::from_secs(60));
    f.age = Some(b"100");
    assert_eq!(initial_age(&f, now), Duration::from_secs(100));
    f.age = Some(b"junk");
    assert_eq!(initial_age(&f, now), Duration::from_secs(60));
    // A Date in the future counts nothing.
    assert_eq!(initial_age(&f, now - 3600), Duration::ZERO);
}

#[test]
fn http_dates_read_and_write_back() {
    let t = http_date(b"Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
    assert_eq!(t, 784_111_777);
    let mut out = Vec::new();
    write_http_date(t, &mut out);
    assert_eq!(out, b"Sun, 06 Nov 1994 08:49:37 GMT");
    for bad in [
        &b"Sunday, 06-Nov-94 08:49:37 GMT"[..],
        b"Sun Nov  6 08:49:37 1994",
        b"Sun, 06 Nov 1994 25:49:37 GMT",
        b"Sun, 06 Nop 1994 08:49:37 GMT",
        b"",
    ] {
        assert_eq!(http_date(bad), None, "{}", String::from_utf8_lossy(bad));
    }
    out.clear();
    write_http_date(0, &mut out);
    assert_eq!(out, b"Thu, 01 Jan 1970 00:00:00 GMT");
}

#[test]
fn if_none_match_compares_weakly() {
    assert!(none_match(b"\"a\", W/\"b\"", b"\"b\""));
    assert!(none_match(b"*", b"\"x\""));
    assert!(none_match(b"\"x\"", b"W/\"x\""));
    assert!(!none_match(b"\"a\"", b"\"b\""));
}
