//! The split's picks: shares by weight, sticky keys, minimal moves on a
//! change of weights, pinned apps, each kind of key.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use sluicegate_config::{Split, SplitBy, SplitEntry};

use super::{KeySource, SplitRt};
use crate::filters::fault::Rng;
use crate::observe::metrics::SplitMetrics;
use crate::proto::head::HeaderRef;

fn split(weights: &[(&str, u32, &[&str])], by: SplitBy) -> SplitRt {
    let cfg = Split {
        entries: weights
            .iter()
            .map(|(s, w, apps)| SplitEntry {
                service: s.to_string(),
                weight: *w,
                apps: apps.iter().map(|a| a.to_string()).collect(),
            })
            .collect(),
        by,
    };
    let names = ["a", "b", "c"];
    SplitRt::new(
        &cfg,
        |n| names.iter().position(|x| *x == n).map(|i| i as u32),
        |n| Arc::new(SplitMetrics::new("r", n)),
    )
    .unwrap()
}

fn bare(client: IpAddr, app: Option<&str>) -> KeySource<'_> {
    KeySource {
        raw: &[],
        headers: &[],
        client,
        app,
        param: None,
    }
}

const HOME: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[test]
fn random_draws_follow_the_weights_and_skip_weight_zero() {
    let s = split(
        &[("a", 70, &[]), ("b", 0, &[]), ("c", 30, &[])],
        SplitBy::Random,
    );
    let rng = Rng::new(7);
    let mut counts = [0u32; 3];
    let n = 100_000;
    for _ in 0..n {
        counts[s.pick(&bare(HOME, None), &rng)] += 1;
    }
    assert_eq!(counts[1], 0);
    let share = f64::from(counts[0]) / f64::from(n);
    assert!((share - 0.7).abs() < 0.01, "{counts:?}");
}

#[test]
fn keys_are_sticky_and_shared_by_weight() {
    let s = split(&[("a", 1, &[]), ("b", 3, &[])], SplitBy::ClientIp);
    let rng = Rng::new(1);
    let mut counts = [0u32; 2];
    for i in 0..40_000u32 {
        let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        let first = s.pick(&bare(ip, None), &rng);
        for _ in 0..3 {
            assert_eq!(s.pick(&bare(ip, None), &rng), first);
        }
        counts[first] += 1;
    }
    let share = f64::from(counts[1]) / 40_000.0;
    assert!((share - 0.75).abs() < 0.01, "{counts:?}");
}

/// The fraction of 50,000 keys placed differently by `before` and
/// `after`, each move checked by `allowed(from, to)`.
fn moved(before: &SplitRt, after: &SplitRt, allowed: impl Fn(usize, usize) -> bool) -> f64 {
    let n = 50_000;
    let mut moved = 0;
    for i in 0..n {
        let k = super::hash(format!("app-{i}").as_bytes());
        let (x, y) = (before.by_key(k), after.by_key(k));
        if x != y {
            assert!(allowed(x, y), "key {i}: {x} -> {y}");
            moved += 1;
        }
    }
    f64::from(moved) / f64::from(n)
}

#[test]
fn a_change_of_weights_moves_only_what_it_must() {
    // A canary's step: b from 5% to 10%; a's keys move to b, 5% of all,
    // the least any scheme can move.
    let before = split(&[("a", 95, &[]), ("b", 5, &[])], SplitBy::App);
    let after = split(&[("a", 90, &[]), ("b", 10, &[])], SplitBy::App);
    let frac = moved(&before, &after, |x, y| (x, y) == (0, 1));
    assert!((frac - 0.05).abs() < 0.005, "moved {frac}");
    // A third service given a weight: only keys to it, its share.
    let before = split(
        &[("a", 60, &[]), ("b", 40, &[]), ("c", 0, &[])],
        SplitBy::App,
    );
    let after = split(
        &[("a", 60, &[]), ("b", 40, &[]), ("c", 25, &[])],
        SplitBy::App,
    );
    let frac = moved(&before, &after, |_, y| y == 2);
    assert!((frac - 0.2).abs() < 0.01, "moved {frac}");
}

#[test]
fn pinned_apps_go_to_their_entry_whatever_the_weights() {
    let s = split(&[("a", 100, &[]), ("b", 0, &["beta-co"])], SplitBy::App);
    let rng = Rng::new(3);
    for _ in 0..100 {
        assert_eq!(s.pick(&bare(HOME, Some("beta-co")), &rng), 1);
        assert_eq!(s.pick(&bare(HOME, Some("other")), &rng), 0);
        assert_eq!(s.pick(&bare(HOME, None), &rng), 0);
    }
}

#[test]
fn headers_and_cookies_are_keys_and_their_absence_is_random() {
    let raw = b"X-User: alice\r\nCookie: a=1; sid=s-42; b=2\r\n".to_vec();
    let text = std::str::from_utf8(&raw).unwrap();
    let at = |needle: &str| {
        let i = text.find(needle).unwrap();
        i..i + needle.len()
    };
    let headers = [
        HeaderRef {
            name: at("X-User"),
            value: at("alice"),
            skip: false,
        },
        HeaderRef {
            name: at("Cookie"),
            value: at("a=1; sid=s-42; b=2"),
            skip: false,
        },
    ];
    let src = KeySource {
        raw: &raw,
        headers: &headers,
        client: HOME,
        app: None,
        param: None,
    };
    let by_header = split(
        &[("a", 1, &[]), ("b", 1, &[])],
        SplitBy::Header("x-user".into()),
    );
    assert_eq!(by_header.key(&src), Some(super::hash(b"alice")));
    let by_cookie = split(
        &[("a", 1, &[]), ("b", 1, &[])],
        SplitBy::Cookie("sid".into()),
    );
    assert_eq!(by_cookie.key(&src), Some(super::hash(b"s-42")));
    let by_missing = split(
        &[("a", 1, &[]), ("b", 1, &[])],
        SplitBy::Cookie("nope".into()),
    );
    assert_eq!(by_missing.key(&src), None);
    let by_app = split(&[("a", 1, &[]), ("b", 1, &[])], SplitBy::App);
    assert_eq!(by_app.key(&src), None);
    // Without a key, both entries are drawn.
    let rng = Rng::new(9);
    let mut seen = [false; 2];
    for _ in 0..200 {
        seen[by_missing.pick(&src, &rng)] = true;
    }
    assert_eq!(seen, [true, true]);
}

#[test]
fn a_path_parameter_key_is_the_hash_taken_at_routing() {
    let by_param = split(&[("a", 1, &[]), ("b", 1, &[])], SplitBy::Param(0));
    let src = KeySource {
        param: Some(super::hash(b"42")),
        ..bare(HOME, None)
    };
    assert_eq!(by_param.key(&src), Some(super::hash(b"42")));
    // No parameter captured: drawn at random.
    assert_eq!(by_param.key(&bare(HOME, None)), None);
    // Other kinds ignore it.
    let by_ip = split(&[("a", 1, &[]), ("b", 1, &[])], SplitBy::ClientIp);
    assert_ne!(by_ip.key(&src), Some(super::hash(b"42")));
}
