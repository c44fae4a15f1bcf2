//! A service's `retries`, `breaker` and `ejection`: defaults, what they decode to, and
//! each mistake named where it is.

use std::time::Duration;

use super::{error, errors, ok};
use crate::*;

fn service(extra: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
services:
  - name: s
    endpoints: [\"127.0.0.1:9001\", \"127.0.0.1:9002\"]
{extra}routes:
  - name: all
    service: s
"
    )
}

#[test]
fn defaults_retry_connects_and_resets_once_with_no_breaker() {
    let c = ok(&service(""));
    let s = &c.services[0];
    assert_eq!(s.retries, Retries::default());
    assert_eq!(
        (s.retries.attempts, s.retries.on_connect, s.retries.on_reset),
        (2, true, true)
    );
    assert!(!s.retries.on_timeout && s.retries.on_status.is_empty());
    assert_eq!(s.retries.budget_percent, 20);
    assert_eq!(s.breaker, None);
}

#[test]
fn an_unknown_grpc_status_is_named() {
    let e = error(&service("    retries: { on: [grpc:unavail] }\n"));
    assert!(e.starts_with("5:21: services[0].retries.on[0]: unknown gRPC status \"grpc:unavail\" (expected grpc: and one of cancelled, unknown,"), "{e}");
    let e = error(&service("    retries: { on: [grpc:ok] }\n"));
    assert!(e.contains("unknown gRPC status \"grpc:ok\""), "{e}");
}

#[test]
fn retries_and_breaker_decode() {
    let c = ok(&service(
        "    retries: { attempts: 3, on: [connect, timeout, 502, 503, 503, grpc:unavailable, grpc:DEADLINE_EXCEEDED, grpc:unavailable], budget: 10% }
    breaker: { errors: 4, window: 5s, open_for: 30s, half_open_requests: 2, on_5xx: true }
",
    ));
    let s = &c.services[0];
    assert_eq!(
        s.retries,
        Retries {
            attempts: 3,
            on_connect: true,
            on_reset: false,
            on_timeout: true,
            on_status: vec![502, 503],
            on_grpc: vec![14, 4],
            budget_percent: 10,
        }
    );
    assert_eq!(
        s.breaker,
        Some(Breaker {
            errors: 4,
            window: Duration::from_secs(5),
            open_for: Duration::from_secs(30),
            half_open_requests: 2,
            on_5xx: true,
        })
    );
    let c = ok(&service("    breaker: {}\n"));
    let b = c.services[0].breaker.clone().unwrap();
    assert_eq!((b.errors, b.half_open_requests, b.on_5xx), (5, 1, false));
}

#[test]
fn each_mistake_is_named_where_it_is() {
    let all = errors(&service(
        "    retries: { attempts: 0, on: [connect, 404, sometimes], budget: 150% }
    breaker: { errors: -1, window: 1ms, on_5xx: maybe, colour: red }
",
    ));
    let expect = [
        "5:26: services[0].retries.attempts: expected an integer from 1 to 10, found \"0\"",
        "5:43: services[0].retries.on[1]: expected connect, reset, timeout, a status from 500 to 599, or grpc:STATUS (e.g. grpc:unavailable), found \"404\"",
        "5:48: services[0].retries.on[2]: expected connect, reset, timeout, a status from 500 to 599, or grpc:STATUS (e.g. grpc:unavailable), found \"sometimes\"",
        "5:68: services[0].retries.budget: expected a share of requests like 20%, found \"150%\"",
        "6:24: services[0].breaker.errors: expected an integer from 1 to 1000000, found \"-1\"",
        "6:36: services[0].breaker.window: must be at least 10ms",
        "6:49: services[0].breaker.on_5xx: expected true or false, found \"maybe\"",
        "6:56: unknown key \"colour\" in breaker (expected one of: errors, window, open_for, half_open_requests, on_5xx)",
    ];
    assert_eq!(all, expect);
}

#[test]
fn ejection_is_on_by_default_and_can_be_tuned_or_turned_off() {
    let c = ok(&service(""));
    assert_eq!(
        c.services[0].ejection,
        Some(Ejection {
            base: Duration::from_secs(1),
            max: Duration::from_secs(30),
        })
    );
    let c = ok(&service("    ejection: { base: 200ms, max: 5s }\n"));
    assert_eq!(
        c.services[0].ejection,
        Some(Ejection {
            base: Duration::from_millis(200),
            max: Duration::from_secs(5),
        })
    );
    assert_eq!(
        ok(&service("    ejection: false\n")).services[0].ejection,
        None
    );
    assert!(ok(&service("    ejection: true\n")).services[0]
        .ejection
        .is_some());
}

#[test]
fn ejection_mistakes_are_named_where_they_are() {
    let all = errors(&service(
        "    ejection: { base: 1ms, max: 2ms, colour: red }\n",
    ));
    let expect = [
        "5:23: services[0].ejection.base: must be at least 10ms",
        "5:38: unknown key \"colour\" in ejection (expected one of: base, max)",
    ];
    assert_eq!(all, expect);
    let all = errors(&service("    ejection: { base: 2s, max: 1s }\n"));
    assert_eq!(
        all,
        ["5:32: services[0].ejection.max: must be at least base (2000ms)"]
    );
    let all = errors(&service("    ejection: sometimes\n"));
    assert_eq!(
        all,
        ["5:15: services[0].ejection: expected true or false, found \"sometimes\""]
    );
}
