//! A route's `rollout` and `config_source.etcd.leader_ttl`: what they
//! decode to, and each mistake named where it is (file line, JSON path).

use std::time::Duration;

use super::{error, ok};
use crate::*;

fn route(split: &str, rollout: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
services:
  - name: v1
    endpoints: [\"127.0.0.1:9001\"]
  - name: v2
    endpoints: [\"127.0.0.1:9002\"]
routes:
  - name: orders
    split: {split}
    rollout: {rollout}
"
    )
}

const TWO: &str = "[{ service: v1, weight: 95 }, { service: v2, weight: 5 }]";

#[test]
fn a_rollout_decodes_with_defaults() {
    let c = ok(&route(
        TWO,
        "{ step: 10, every: 30s, max_error_ratio: 2.0, max_p99_ratio: 1.5, min_requests: 100 }",
    ));
    let r = c.routes[0].rollout.as_ref().unwrap();
    assert_eq!(
        *r,
        Rollout {
            step: 10,
            every: Duration::from_secs(30),
            max_error_ratio: 2.0,
            max_p99_ratio: 1.5,
            min_requests: 100,
        }
    );
    let c = ok(&route(TWO, "{ step: 25, every: 300ms, max_p99_ratio: 3 }"));
    let r = c.routes[0].rollout.as_ref().unwrap();
    assert_eq!((r.step, r.every), (25, Duration::from_millis(300)));
    assert_eq!(
        (r.max_error_ratio, r.max_p99_ratio, r.min_requests),
        (2.0, 3.0, 100)
    );
    assert_eq!(
        ok(&route(TWO, "{}")).routes[0].rollout,
        Some(Rollout::default())
    );
}

#[test]
fn each_bad_value_is_named() {
    let cases = [
        ("{ step: 0 }", "10:22: routes[0].rollout.step"),
        ("{ step: 101 }", "routes[0].rollout.step"),
        (
            "{ every: 50ms }",
            "routes[0].rollout.every: must be at least 100ms",
        ),
        (
            "{ max_error_ratio: 0.5 }",
            "routes[0].rollout.max_error_ratio",
        ),
        ("{ max_p99_ratio: -1 }", "routes[0].rollout.max_p99_ratio"),
        ("{ min_requests: 0 }", "routes[0].rollout.min_requests"),
        ("{ steps: 1 }", "unknown key \"steps\""),
    ];
    for (rollout, want) in cases {
        let e = error(&route(TWO, rollout));
        assert!(e.contains(want), "{rollout}: {e}");
    }
}

#[test]
fn a_rollout_needs_a_split_of_two() {
    let one = "[{ service: v1, weight: 1 }]";
    let e = error(&route(one, "{}"));
    assert!(
        e.contains("routes[0].rollout: needs the route's split with at least 2 entries"),
        "{e}"
    );
    let text = "listen: 127.0.0.1:8080
services:
  - name: v1
    endpoints: [\"127.0.0.1:9001\"]
routes:
  - name: orders
    service: v1
    rollout: { step: 5 }
";
    let e = error(text);
    assert!(
        e.contains("routes[0].rollout: needs the route's split"),
        "{e}"
    );
}

/// Through the admin API's document form: a ratio with a fraction
/// decodes, and a mistake is named by its JSON path.
#[test]
fn json_documents_decode_and_name_the_path() {
    let doc =
        Document::from_yaml(&route(TWO, "{ step: 50, every: 1s, max_p99_ratio: 1.5 }")).unwrap();
    let json = doc.to_json();
    let c = Document::from_json(&json).decode().unwrap();
    assert_eq!(c.routes[0].rollout.as_ref().unwrap().max_p99_ratio, 1.5);
    let mut sent = json.clone();
    sent["routes"][0]["rollout"]["max_error_ratio"] = serde_json::json!(2.5);
    let c = Document::from_json(&sent).decode().unwrap();
    assert_eq!(c.routes[0].rollout.as_ref().unwrap().max_error_ratio, 2.5);
    let mut bad = json.clone();
    bad["routes"][0]["rollout"]["every"] = serde_json::json!("10ms");
    let problems = Document::from_json(&bad).decode().unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "$.routes[0].rollout.every");
}

#[test]
fn leader_ttl_is_whole_seconds_of_at_least_two() {
    let source = |ttl: &str| {
        format!(
            "listen: 127.0.0.1:8080
config_source:
  etcd:
    endpoints: [\"http://127.0.0.1:2379\"]
{ttl}"
        )
    };
    let etcd = |c: Config| match c.config_source {
        Some(ConfigSource::Etcd(e)) => e,
        None => panic!("no source"),
    };
    assert_eq!(etcd(ok(&source(""))).leader_ttl, Duration::from_secs(10));
    assert_eq!(
        etcd(ok(&source("    leader_ttl: 3s\n"))).leader_ttl,
        Duration::from_secs(3)
    );
    for bad in ["1s", "2500ms"] {
        let e = error(&source(&format!("    leader_ttl: {bad}\n")));
        assert!(
            e.contains("config_source.etcd.leader_ttl: must be whole seconds"),
            "{e}"
        );
    }
}
