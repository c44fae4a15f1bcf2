//! The Grafana dashboard in deploy/grafana/sluicegate.json: an importable
//! dashboard whose every PromQL expression names only metrics a running
//! gateway exports. The metrics are taken from real gateways: one proxying
//! to an upstream with its Redis plane on a real redis-server, one whose
//! config comes from a real etcd, so a renamed metric breaks this test,
//! not the dashboard.

mod etcd_common;
mod ops_common;

use std::collections::BTreeSet;
use std::time::Duration;

use ops_common::*;
use serde_json::Value;
use sluicegate_testkit::{http_get, RedisServer, TestUpstream};

fn dashboard() -> Value {
    let path = repo_root().join("deploy/grafana/sluicegate.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?} is not JSON: {e}"))
}

/// Every PromQL expression of the dashboard: panel targets and the
/// variables' queries.
fn expressions(d: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push(
                t["expr"]
                    .as_str()
                    .expect("a target without expr")
                    .to_string(),
            );
        }
    }
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(q) = v["query"]["query"].as_str() {
            out.push(q.to_string());
        }
    }
    out
}

/// The metric names an expression reads: words outside quoted strings
/// that start as ours (`sluicegate_`) or the process families
/// (`process_`) do.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'"' {
            // A label value: skip to the closing quote.
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if word(bytes[i]) && (i == 0 || !word(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && word(bytes[i]) {
                i += 1;
            }
            let w = &expr[start..i];
            if w.starts_with("sluicegate_") || w.starts_with("process_") {
                names.push(w.to_string());
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The sample names in Prometheus text (`name{...} v` or `name v`).
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn dashboard_is_importable_json() {
    let d = dashboard();
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 30),
        "schemaVersion"
    );
    assert!(d["title"].is_string() && d["uid"].is_string());
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 10);
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "duplicate id in {p}"
        );
        for k in ["h", "w", "x", "y"] {
            assert!(p["gridPos"][k].is_u64(), "gridPos.{k} in {p}");
        }
        if p["type"] != "row" {
            assert!(
                !p["targets"].as_array().unwrap().is_empty(),
                "a panel without queries: {p}"
            );
        }
    }
    // The data source is an input chosen at import.
    assert_eq!(d["__inputs"][0]["pluginId"], "prometheus");
    for e in expressions(&d) {
        assert_eq!(
            e.matches('(').count(),
            e.matches(')').count(),
            "unbalanced: {e}"
        );
        assert!(!metric_names(&e).is_empty(), "reads no metric of ours: {e}");
    }
}

#[test]
fn every_metric_the_dashboard_reads_is_exported() {
    let d = dashboard();
    let wanted: BTreeSet<String> = expressions(&d)
        .iter()
        .flat_map(|e| metric_names(e))
        .collect();

    // A gateway proxying, answering, refusing, with its Redis plane.
    let redis = RedisServer::start();
    let up = TestUpstream::start();
    let ports = Ports::new();
    let yaml = format!(
        "{}reload: {{ watch: false }}\nservices:\n{}routes:\n{}{}\
         cluster: {{ redis: {{ url: \"redis://127.0.0.1:{}\" }} }}\n",
        ports.head(),
        service("api", &[up.port()]),
        proxy_route("api", "/api", "api"),
        respond_route("hello", "/hello", "hi"),
        redis.port
    );
    let gw = start(ports, &yaml);
    assert_eq!(http_get(ports.addr(), "/api/x", &[]).status, 200);
    assert_eq!(http_get(ports.addr(), "/hello", &[]).status, 200);
    assert_eq!(http_get(ports.addr(), "/nowhere", &[]).status, 404);
    let mut names = BTreeSet::new();
    let seen = wait_until(Duration::from_secs(5), || {
        names = exported(&metrics(ports));
        // Counted once the answers are written: wait for the last.
        names.contains("sluicegate_cluster_redis_up")
            && names.contains("sluicegate_upstream_response_seconds_bucket")
            && names.contains("sluicegate_unrouted_responses_total")
    });
    check(&gw, seen, &format!("metrics so far: {names:?}"));

    // A gateway whose config is in etcd.
    let Some(etcd) = etcd_common::Etcd::start() else {
        panic!("etcd is not installed (scripts/deps)");
    };
    let dir = ScratchDir::new("dashboard-etcd");
    let eports = Ports::new();
    let egw = start(eports, &etcd_common::config(eports, &etcd, dir.path()));
    let mut enames = BTreeSet::new();
    let seen = wait_until(Duration::from_secs(10), || {
        enames = exported(&metrics(eports));
        enames.contains("sluicegate_etcd_connected")
    });
    check(&egw, seen, &format!("etcd metrics so far: {enames:?}"));
    names.extend(enames);

    let missing: Vec<&String> = wanted.iter().filter(|n| !names.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "the dashboard reads metrics no gateway exports: {missing:?}\nexported: {names:?}"
    );
}

#[test]
fn names_are_found_in_expressions() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (le) (rate(sluicegate_x_bucket{a=\"sluicegate_no\"}[5m]))) / process_max_fds"
        ),
        ["sluicegate_x_bucket", "process_max_fds"]
    );
}
