//! The upgrade state document: round trips, a changed config, garbage refused.

use super::format::unescape;
use super::*;
use crate::apps::limit::PlanRt;
use crate::balance::breaker::Admit;
use sluicegate_config::{Plan, Rate};
use std::sync::atomic::Ordering::Relaxed;

/// Services s1 (health, breaker) and s2; plans q (quota 3/day) and r
/// (rate 1/h, burst 2); apps a (q), b (r, and q on s2); routes with a
/// per-route and a per-client limit. `extra` goes at the end of `apps`.
fn config(s1_eps: &str, apps_extra: &str) -> sluicegate_config::Config {
    sluicegate_config::parse(&format!(
        r#"listen: ["127.0.0.1:9"]
services:
  - name: s1
    endpoints: [{s1_eps}]
    health: {{ path: /h, interval: 1s, unhealthy_after: 2, healthy_after: 2 }}
    breaker: {{ errors: 2, window: 10s, open_for: 60s }}
  - {{ name: s2, endpoints: ["127.0.0.1:12"] }}
plans:
  q: {{ quota: 3/day }}
  r: {{ rate: 1/h, burst: 2 }}
apps:
  - {{ id: a, keys: [key-of-a-0001], plan: q }}
  - {{ id: b.c, keys: [key-of-b-0001], plan: r, plans_by_service: {{ s2: q }} }}
{apps_extra}routes:
  - name: whole
    match: {{ path_prefix: /w }}
    service: s2
    limit: {{ rate: 1/h, burst: 1, per: route }}
  - name: each
    match: {{ path_prefix: /e }}
    service: s2
    limit: {{ rate: 1/h, burst: 1 }}
  - name: api
    match: {{ path_prefix: / }}
    service: s1
    auth: app_key
"#
    ))
    .unwrap()
}

const EPS: &str = r#""127.0.0.1:10", "127.0.0.1:11""#;

/// Whether one request of `app` to service index `svc` is admitted.
fn charge(shared: &Shared, app: &str, svc: u32) -> bool {
    let t = shared.snapshot.load().apps.clone();
    let a = t.by_id(app).unwrap();
    let c = a.charge_for(svc).unwrap();
    t.slot(c.slot)
        .limit
        .try_admit(c.plan, Instant::now(), SystemTime::now)
        .is_ok()
}

fn route_plan() -> PlanRt {
    PlanRt::new(&Plan {
        name: "x".into(),
        rate: Some(Rate {
            count: 1,
            per: Duration::from_secs(3600),
        }),
        burst: Some(1),
        quota: None,
        concurrency: None,
        scope: Default::default(),
        on_failure: Default::default(),
    })
}

/// Whether one request on route `name` (from `ip`) is admitted.
fn charge_route(shared: &Shared, name: &str, ip: &str) -> bool {
    let reg = shared.registry.lock().unwrap();
    let now = Instant::now();
    let state = match reg.route_limits.get(name).unwrap() {
        RouteCounters::Route(s) => s.clone(),
        RouteCounters::ClientIp(t) => t.state(ip.parse().unwrap(), now),
        RouteCounters::Keyed { table, .. } => table.state_of(Some(ip.as_bytes()), now),
    };
    state.try_admit(&route_plan(), now, SystemTime::now).is_ok()
}

fn endpoint(shared: &Shared, name: &str) -> Arc<EndpointState> {
    let snap = shared.snapshot.load();
    let found = snap.services[0].endpoints.iter().find(|e| e.name == name);
    found.unwrap().clone()
}

#[test]
fn state_goes_over_to_a_new_gateway_and_what_no_longer_matches_is_dropped() {
    let old = Shared::new(&config(EPS, "")).unwrap();
    assert!((0..3).all(|_| charge(&old, "a", 0)));
    assert!(!charge(&old, "a", 0), "a's quota is used up");
    assert!(charge(&old, "b.c", 0) && charge(&old, "b.c", 0));
    assert!(!charge(&old, "b.c", 0), "b's bucket is empty");
    assert!(charge(&old, "b.c", 1), "b's s2 quota has room");
    assert!(charge_route(&old, "whole", "10.0.0.1"));
    assert!(charge_route(&old, "each", "10.0.0.1"));
    let e10 = endpoint(&old, "127.0.0.1:10");
    e10.eject
        .connect_failed(mono_ns(Instant::now()).saturating_sub(2_000_000_000)); // over
    e10.eject.connect_failed(mono_ns(Instant::now())); // 2 s from now
    e10.healthy.store(false, Relaxed);
    e10.health_fails.store(5, Relaxed);
    let e11 = endpoint(&old, "127.0.0.1:11");
    let now = mono_ns(Instant::now());
    e11.breaker.record(Admit::Closed, false, now);
    assert!(e11.breaker.record(Admit::Closed, false, now), "opened");

    let (doc, exported) = old.export_state();
    let text = String::from_utf8(doc.clone()).unwrap();
    assert!(text.starts_with("sluicegate-state 1\nat "), "{text}");
    assert!(text.contains("\napp b.c "), "{text}");
    assert_eq!(exported.left_out, 0);
    assert_eq!(exported.bytes, doc.len());

    // The same config: everything matches.
    let new = Shared::new(&config(EPS, "")).unwrap();
    let got = new.import_state(&doc).unwrap();
    assert_eq!(got.dropped, 0, "{got:?}\n{text}");
    assert_eq!(got.entries(), exported.entries);
    assert!(!charge(&new, "a", 0), "the quota stays used up");
    assert!(!charge(&new, "b.c", 0), "the bucket stays empty");
    assert!((0..2).all(|_| charge(&new, "b.c", 1)));
    assert!(!charge(&new, "b.c", 1), "b's s2 quota: 1 + 2 of 3");
    assert!(!charge_route(&new, "whole", "10.0.0.1"));
    assert!(!charge_route(&new, "each", "10.0.0.1"));
    assert!(charge_route(&new, "each", "10.0.0.2"), "another client");
    let n10 = endpoint(&new, "127.0.0.1:10");
    assert!(!n10.is_healthy());
    assert_eq!(n10.health_fails.load(Relaxed), 5);
    let now = mono_ns(Instant::now());
    assert!(n10.eject.is_ejected(now) && !n10.eject.is_ejected(now + 2_000_000_000));
    assert_eq!(n10.eject.carried(now).map(|c| c.1), Some(2), "the streak");
    let n11 = endpoint(&new, "127.0.0.1:11");
    let now = mono_ns(Instant::now());
    assert!(n11.breaker.is_open(now) && !n11.in_rotation());
    assert!(
        !n11.breaker.is_open(now + 61_000_000_000),
        "open for 60 s at most"
    );

    // A config that changed: the endpoint :10 is gone (:13 is new), app
    // a is gone, c is new. What matches comes over, the rest is dropped.
    let changed = Shared::new(&config(
            r#""127.0.0.1:13", "127.0.0.1:11""#,
            "  - { id: c, keys: [key-of-c-0001], plan: q }\n  - { id: a2, keys: [key-of-a-0002], plan: q }\n",
        ))
        .unwrap();
    let doc2 = text.replace("\napp a ", "\napp gone ");
    let got = changed.import_state(doc2.as_bytes()).unwrap();
    assert_eq!(got.dropped, 3, "{got:?}"); // :10's health and ejection, app "gone"
    assert!(endpoint(&changed, "127.0.0.1:13").is_healthy());
    assert!(!endpoint(&changed, "127.0.0.1:11").in_rotation());
    assert!(charge(&changed, "c", 0) && charge(&changed, "a2", 0));
    assert!(!charge(&changed, "b.c", 0));
}

#[test]
fn garbage_is_refused_whole_with_the_line_that_failed() {
    let old = Shared::new(&config(EPS, "")).unwrap();
    assert!((0..3).all(|_| charge(&old, "a", 0)));
    let (doc, _) = old.export_state();
    let text = String::from_utf8(doc).unwrap();
    let head = "sluicegate-state 1\nat 1\n";
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "line 1: not a sluicegate state document"),
        (
            "GET / HTTP/1.1\r\n\r\n".into(),
            "line 1: not a sluicegate state document",
        ),
        (
            "sluicegate-state 2\nat 1\nend 0\n".into(),
            "line 1: version \"2\" not supported",
        ),
        (text[..text.len() - 1].into(), "does not end with a newline"),
        (text.replace("\nend ", "\nand "), "unknown entry \"and\""),
        (
            format!("{head}app a 1 2\nend 1\n"),
            "line 3: `app` takes 4 fields, found 3",
        ),
        (
            format!("{head}app a -1 0 0\nend 1\n"),
            "line 3: bad time \"-1\"",
        ),
        (
            format!("{head}app a 1 0 99999999999999999999\nend 1\n"),
            "bad quota count",
        ),
        (
            format!("{head}app a 1 16777216 1\nend 1\n"),
            "quota out of range",
        ),
        (format!("{head}app a%zz 1 0 1\nend 1\n"), "bad escape"),
        (format!("{head}app a%FF 1 0 1\nend 1\n"), "not UTF-8"),
        (
            format!("{head}client each nowhere 1\nend 1\n"),
            "bad address",
        ),
        (
            format!("{head}app a 1 0 1\nend 2\n"),
            "line 4: `end` says 2 entries, 1 read",
        ),
        (format!("{head}app a 1 0 1\n"), "no `end` line"),
        (format!("{head}end 0\nend 0\n"), "line 4: text after `end`"),
        (format!("{head}\u{0}\nend 0\n"), "line 3: unknown entry"),
    ];
    for (doc, want) in cases {
        let new = Shared::new(&config(EPS, "")).unwrap();
        let e = new.import_state(doc.as_bytes()).unwrap_err();
        assert!(e.contains(want), "{doc:?}: {e}");
        assert!(
            (0..3).all(|_| charge(&new, "a", 0)),
            "nothing applied: {doc:?}"
        );
    }
    let e = Shared::new(&config(EPS, ""))
        .unwrap()
        .import_state(&[0xff, b'\n'])
        .unwrap_err();
    assert!(e.contains("not UTF-8"), "{e}");
    let big = vec![b'x'; MAX_BYTES + 1];
    let e = Shared::new(&config(EPS, ""))
        .unwrap()
        .import_state(&big)
        .unwrap_err();
    assert!(e.contains("over the"), "{e}");
}

#[test]
fn names_round_trip_through_escapes() {
    for s in ["plain", "b c%", "tab\there", "100%", "é ü", ""] {
        let mut out = String::new();
        name(&mut out, s);
        let enc = out.strip_prefix(' ').unwrap();
        assert!(!enc.contains(' ') && !enc.contains('\n'), "{enc:?}");
        assert_eq!(unescape(enc).unwrap(), s);
    }
}
