//! Canary rollouts end to end, against real upstreams (and a real etcd on
//! loopback for the fleet): a healthy canary promoted to 100 by steps; a
//! canary answering 5% 500s rolled back on its first judged window; the
//! admin API's `GET/PUT /routes/{name}/rollout` (pause stops the steps, a
//! weight set applies, resume goes on) with the metrics moving; windows
//! below `min_requests` never step; and two gateways sharing etcd whose
//! leader is killed mid-rollout: the other takes over and completes it,
//! every weight written to etcd one step after the last.

mod admin_common;
mod etcd_common;
mod http_common;
mod ops_common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use admin_common::{call, json};
use http_common::load::Load;
use ops_common::{start, wait_until, Ports};
use serde_json::Value;
use sluicegate_testkit::{RawUpstream, TestUpstream};

/// A gateway on `ports` with services `v1` (the baseline) and `v2` (the
/// canary) and the route `orders` splitting between them.
fn yaml(ports: Ports, v1: &[SocketAddr], v2: &str, weights: (u32, u32), rollout: &str) -> String {
    let v1: Vec<String> = v1.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "{}log: {{ level: info, access: off }}
services:
  - name: v1
    endpoints: [{}]
  - name: v2
{v2}
  - name: other
    endpoints: [{}]
routes:
  - name: orders
    match: {{ path_prefix: / }}
    split:
      - {{ service: v1, weight: {} }}
      - {{ service: v2, weight: {} }}
    rollout: {rollout}
  - name: plain
    match: {{ path_prefix: /plain }}
    service: other
",
        ports.head(),
        v1.join(", "),
        v1[0],
        weights.0,
        weights.1
    )
}

/// `GET /routes/orders/rollout`.
fn rollout(ports: Ports) -> Value {
    let resp = call(ports, "GET", "/routes/orders/rollout", &[], "");
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    json(&resp)
}

fn put(ports: Ports, body: &str) -> sluicegate_testkit::Response {
    call(ports, "PUT", "/routes/orders/rollout", &[], body)
}

/// The value of the metric line starting with `prefix` (name and labels).
fn metric(ports: Ports, prefix: &str) -> Option<f64> {
    let resp = sluicegate_testkit::try_http_get(ports.admin_addr(), "/metrics", &[]).ok()?;
    resp.body_str().lines().find_map(|l| {
        l.strip_prefix(prefix)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

fn verdicts(v: &Value) -> Vec<String> {
    v["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["verdict"].as_str().unwrap().to_string())
        .collect()
}

fn dump(gw: &sluicegate_testkit::Gateway, v: &Value) -> String {
    format!("{v:#}\n--- stderr ---\n{}", gw.stderr())
}

#[test]
fn a_healthy_canary_is_promoted_step_by_step() {
    let (a, b) = (
        TestUpstream::start_with_id("v1"),
        TestUpstream::start_with_id("v2"),
    );
    let ports = Ports::new();
    let v2 = format!("    endpoints: [\"{}\"]", b.addr());
    // Tests not about latency allow a p99 ratio of 1000: a window's few
    // requests make its p99 the slowest one, and on a loaded machine one
    // slow request would roll a healthy canary back.
    let rule =
        "{ step: 30, every: 300ms, max_error_ratio: 2, max_p99_ratio: 1000, min_requests: 10 }";
    let gw = start(ports, &yaml(ports, &[a.addr()], &v2, (90, 10), rule));
    let first = rollout(ports);
    assert_eq!(
        (first["weight"].as_u64(), first["state"].as_str()),
        (Some(10), Some("running"))
    );
    assert_eq!(first["leader"], true);
    let load = Load::start(ports.addr(), 2);
    let promoted = wait_until(Duration::from_secs(30), || {
        rollout(ports)["state"] == "promoted"
    });
    let v = rollout(ports);
    assert!(promoted, "not promoted: {}", dump(&gw, &v));
    assert_eq!(v["weight"], 100);
    assert_eq!(v["weights"], serde_json::json!([0, 100]));
    // Three good windows: 10 -> 40 -> 70 -> 100, and no rollback.
    let steps: Vec<u64> = v["windows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["verdict"] == "step")
        .map(|w| w["weight"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [10, 40, 70], "{}", dump(&gw, &v));
    assert!(!verdicts(&v).contains(&"rollback".to_string()));
    for w in v["windows"].as_array().unwrap() {
        if w["verdict"] == "step" {
            assert!(w["canary"]["requests"].as_u64().unwrap() >= 10, "{w}");
            assert!(w["baseline"]["requests"].as_u64().unwrap() >= 10, "{w}");
            assert_eq!(w["canary"]["errors"], 0, "{w}");
        }
    }
    assert_eq!(
        metric(ports, "sluicegate_rollout_steps_total{route=\"orders\"}"),
        Some(3.0)
    );
    assert_eq!(
        metric(ports, "sluicegate_rollout_weight{route=\"orders\"}"),
        Some(100.0)
    );
    assert_eq!(
        metric(
            ports,
            "sluicegate_rollout_state{route=\"orders\",state=\"promoted\"}"
        ),
        Some(1.0)
    );
    // The weights are a config change: in the running config, written
    // back to the file, and what the data path now does.
    let (cfg, _) = admin_common::config(ports);
    let split = &cfg["routes"][0]["split"];
    assert_eq!(
        (split[0]["weight"].as_u64(), split[1]["weight"].as_u64()),
        (Some(0), Some(100))
    );
    let file = std::fs::read_to_string(gw.config_path()).unwrap();
    assert!(file.contains("weight: 100"), "{file}");
    load.reset();
    assert!(wait_until(Duration::from_secs(10), || load.count("v2") >= 50));
    let seen = load.finish();
    assert_eq!(seen.get("v1").copied().unwrap_or(0), 0, "{seen:?}");
    // The steps were logged.
    assert!(gw.stderr().contains("rollout: step"), "{}", gw.stderr());
}

/// An upstream that answers every request 500, keeping the connection.
fn failing() -> RawUpstream {
    use std::io::Write;
    RawUpstream::start(|mut s| {
        while sluicegate_testkit::read_request_head(&mut s) {
            let reply = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n";
            if s.write_all(reply).is_err() {
                return;
            }
        }
    })
}

#[test]
fn a_canary_answering_5_percent_500s_is_rolled_back_on_its_first_judged_window() {
    let (a, b, bad) = (
        TestUpstream::start_with_id("v1"),
        TestUpstream::start_with_id("v2"),
        failing(),
    );
    let ports = Ports::new();
    // One request in 20 of the canary's goes to the failing endpoint.
    let v2 = format!(
        "    balance: round_robin\n    endpoints: [{{ addr: \"{}\", weight: 19 }}, {{ addr: \"{}\", weight: 1 }}]",
        b.addr(),
        bad.addr()
    );
    let rule =
        "{ step: 10, every: 400ms, max_error_ratio: 2, max_p99_ratio: 10, min_requests: 100 }";
    let gw = start(ports, &yaml(ports, &[a.addr()], &v2, (50, 50), rule));
    let load = Load::start(ports.addr(), 3);
    let rolled = wait_until(Duration::from_secs(30), || {
        rollout(ports)["state"] == "rolled_back"
    });
    let v = rollout(ports);
    assert!(rolled, "not rolled back: {}", dump(&gw, &v));
    assert_eq!(v["weight"], 0);
    assert_eq!(v["weights"], serde_json::json!([100, 0]));
    // Every window before it was too small to judge: the first judged
    // one rolled back.
    let judged: Vec<String> = verdicts(&v)
        .into_iter()
        .filter(|x| x != "skipped")
        .collect();
    assert_eq!(judged, ["rollback"], "{}", dump(&gw, &v));
    let last = v["windows"].as_array().unwrap().last().unwrap().clone();
    assert!(last["canary"]["errors"].as_u64().unwrap() >= 3, "{last}");
    assert_eq!(last["baseline"]["errors"], 0, "{last}");
    assert_eq!(
        metric(
            ports,
            "sluicegate_rollout_rollbacks_total{route=\"orders\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(ports, "sluicegate_rollout_weight{route=\"orders\"}"),
        Some(0.0)
    );
    assert!(
        gw.stderr().contains("rollout: rolled back"),
        "{}",
        gw.stderr()
    );
    // From now on the canary takes nothing.
    load.reset();
    assert!(wait_until(Duration::from_secs(10), || load.count("v1") >= 100));
    let seen = load.finish();
    assert_eq!(seen.get("v2").copied().unwrap_or(0), 0, "{seen:?}");
    assert_eq!(seen.get("status 500").copied().unwrap_or(0), 0, "{seen:?}");
}

#[test]
fn the_admin_api_pauses_sets_the_weight_and_resumes() {
    let (a, b) = (
        TestUpstream::start_with_id("v1"),
        TestUpstream::start_with_id("v2"),
    );
    let ports = Ports::new();
    let v2 = format!("    endpoints: [\"{}\"]", b.addr());
    let rule =
        "{ step: 20, every: 300ms, max_error_ratio: 2, max_p99_ratio: 1000, min_requests: 10 }";
    let gw = start(ports, &yaml(ports, &[a.addr()], &v2, (95, 5), rule));
    // Unknown route, route without rollout, bad bodies.
    assert_eq!(
        call(ports, "GET", "/routes/nope/rollout", &[], "").status,
        404
    );
    assert_eq!(
        call(ports, "GET", "/routes/plain/rollout", &[], "").status,
        409
    );
    assert_eq!(
        call(ports, "PUT", "/routes/plain/rollout", &[], "{\"weight\":5}").status,
        409
    );
    let bad = put(ports, "{\"weight\": 101}");
    assert_eq!(bad.status, 400);
    assert_eq!(json(&bad)["problems"][0]["path"], "$.weight");
    assert_eq!(put(ports, "{\"state\": \"promoted\"}").status, 400);
    // Paused before any traffic: nothing is judged, whatever comes.
    let paused = put(ports, "{\"state\": \"paused\"}");
    assert_eq!(paused.status, 200, "{}", paused.body_str());
    assert_eq!(json(&paused)["state"], "paused");
    let load = Load::start(ports.addr(), 2);
    let t0 = Instant::now();
    let seen_before = b.requests_seen();
    assert!(wait_until(Duration::from_secs(20), || {
        t0.elapsed() >= Duration::from_millis(1500) && b.requests_seen() >= seen_before + 30
    }));
    let v = rollout(ports);
    assert_eq!(
        (v["weight"].as_u64(), v["state"].as_str()),
        (Some(5), Some("paused")),
        "{v}"
    );
    assert_eq!(v["windows"].as_array().unwrap().len(), 0, "{v}");
    assert_eq!(
        metric(ports, "sluicegate_rollout_steps_total{route=\"orders\"}"),
        Some(0.0)
    );
    assert_eq!(
        metric(
            ports,
            "sluicegate_rollout_state{route=\"orders\",state=\"paused\"}"
        ),
        Some(1.0)
    );
    // A weight set applies at once, as a config change, still paused.
    let set = put(ports, "{\"weight\": 60}");
    assert_eq!(set.status, 200, "{}", set.body_str());
    let v = json(&set);
    assert_eq!(
        (v["weight"].as_u64(), v["state"].as_str()),
        (Some(60), Some("paused")),
        "{v}"
    );
    assert_eq!(v["weights"], serde_json::json!([40, 60]));
    assert_eq!(
        metric(ports, "sluicegate_rollout_weight{route=\"orders\"}"),
        Some(60.0)
    );
    let one = call(ports, "GET", "/routes/orders", &[], "");
    assert_eq!(json(&one)["split"][1]["weight"], 60);
    // Resumed: 60 -> 80 -> 100.
    let resumed = put(ports, "{\"state\": \"running\"}");
    assert_eq!(json(&resumed)["state"], "running");
    let promoted = wait_until(Duration::from_secs(30), || {
        rollout(ports)["state"] == "promoted"
    });
    let v = rollout(ports);
    assert!(promoted, "{}", dump(&gw, &v));
    assert_eq!(
        metric(ports, "sluicegate_rollout_steps_total{route=\"orders\"}"),
        Some(2.0)
    );
    // Restarting from a weight after the promotion.
    let again = put(ports, "{\"weight\": 10, \"state\": \"paused\"}");
    let v = json(&again);
    assert_eq!(
        (v["weight"].as_u64(), v["state"].as_str()),
        (Some(10), Some("paused")),
        "{v}"
    );
    load.finish();
}

#[test]
fn windows_below_min_requests_never_step() {
    let (a, b) = (
        TestUpstream::start_with_id("v1"),
        TestUpstream::start_with_id("v2"),
    );
    let ports = Ports::new();
    let v2 = format!("    endpoints: [\"{}\"]", b.addr());
    let rule = "{ step: 50, every: 200ms, min_requests: 50 }";
    let gw = start(ports, &yaml(ports, &[a.addr()], &v2, (50, 50), rule));
    // No traffic at all, then a trickle under the minimum.
    let skipped = |n: usize| {
        let v = rollout(ports);
        let w = verdicts(&v);
        w.len() >= n && w.iter().all(|x| x == "skipped")
    };
    assert!(
        wait_until(Duration::from_secs(10), || skipped(3)),
        "{}",
        dump(&gw, &rollout(ports))
    );
    for i in 0..20 {
        let r = sluicegate_testkit::http_get(ports.addr(), &format!("/x{i}"), &[]);
        assert_eq!(r.status, 200);
    }
    let n = verdicts(&rollout(ports)).len();
    assert!(wait_until(Duration::from_secs(10), || {
        let v = rollout(ports);
        verdicts(&v).len() >= (n + 3).min(10) && skipped(1)
    }));
    let v = rollout(ports);
    assert_eq!(
        (v["weight"].as_u64(), v["state"].as_str()),
        (Some(50), Some("running")),
        "{v}"
    );
    assert!(verdicts(&v).iter().all(|x| x == "skipped"), "{v}");
    let counted: u64 = v["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            w["canary"]["requests"].as_u64().unwrap() + w["baseline"]["requests"].as_u64().unwrap()
        })
        .sum();
    assert!(counted <= 20, "{v}");
    assert_eq!(
        metric(ports, "sluicegate_rollout_steps_total{route=\"orders\"}"),
        Some(0.0)
    );
}

/// The canary's weight in a route object as etcd holds it.
fn canary_weight(route: &Value) -> u64 {
    let w = &route["split"][1]["weight"];
    w.as_u64()
        .or_else(|| w.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("no canary weight in {route}"))
}

/// Every version of `key` from revision `from` to `to`: (mod revision,
/// value), oldest first.
fn history(etcd: &etcd_common::Etcd, key: &str, from: u64, to: u64) -> Vec<(u64, Value)> {
    let mut out: Vec<(u64, Value)> = Vec::new();
    for rev in from..=to {
        let text = etcd.ctl(&["get", key, &format!("--rev={rev}"), "-w", "json"]);
        let got: Value = serde_json::from_str(&text).unwrap();
        let Some(kv) = got["kvs"].as_array().and_then(|k| k.first()) else {
            continue;
        };
        let modified = kv["mod_revision"].as_u64().unwrap();
        if out.last().is_some_and(|(m, _)| *m == modified) {
            continue;
        }
        use base64::Engine;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(kv["value"].as_str().unwrap())
            .unwrap();
        out.push((modified, serde_json::from_slice(&raw).unwrap()));
    }
    out
}

#[test]
fn two_gateways_on_etcd_the_leader_killed_mid_rollout_the_other_completes_it() {
    let Some(etcd) = etcd_common::Etcd::start() else {
        eprintln!("skipped: no etcd binary (Debian etcd-server)");
        return;
    };
    let (a, b) = (
        TestUpstream::start_with_id("v1"),
        TestUpstream::start_with_id("v2"),
    );
    let key = "/sg/routes/orders";
    for (name, addr) in [("v1", a.addr()), ("v2", b.addr())] {
        let service = format!("{{\"endpoints\":[\"{addr}\"]}}");
        etcd.ctl(&["put", &format!("/sg/services/{name}"), &service]);
    }
    let route = r#"{"match":{"path_prefix":"/"},"split":[{"service":"v1","weight":90},{"service":"v2","weight":10}],"rollout":{"step":10,"every":"300ms","max_error_ratio":2,"max_p99_ratio":1000,"min_requests":5}}"#;
    etcd.ctl(&["put", key, route]);
    let from = etcd.revision();
    let dir = tempfile::tempdir().unwrap();
    let mut gws = Vec::new();
    for _ in 0..2 {
        let ports = Ports::new();
        let cache = dir.path().join(format!("cache-{}.json", ports.listen));
        let text = etcd_common::config(ports, &etcd, &cache)
            + "    leader_ttl: 2s\nlog: { level: info }\n";
        gws.push((ports, start(ports, &text)));
    }
    // Both serve the route from etcd before the load starts.
    let has_rollout = |p: Ports| call(p, "GET", "/routes/orders/rollout", &[], "").status == 200;
    assert!(wait_until(Duration::from_secs(15), || gws
        .iter()
        .all(|(p, _)| has_rollout(*p))));
    let mut loads: Vec<Option<Load>> = gws
        .iter()
        .map(|(p, _)| Some(Load::start(p.addr(), 2)))
        .collect();
    // One leader, the other not.
    let leaders = |gws: &[(Ports, sluicegate_testkit::Gateway)]| -> Vec<usize> {
        (0..gws.len())
            .filter(|&i| rollout(gws[i].0)["leader"] == true)
            .collect()
    };
    assert!(wait_until(Duration::from_secs(15), || leaders(&gws).len() == 1));
    let leader = leaders(&gws)[0];
    let follower = 1 - leader;
    assert_eq!(
        metric(gws[leader].0, "sluicegate_rollout_leader"),
        Some(1.0)
    );
    assert_eq!(
        metric(gws[follower].0, "sluicegate_rollout_leader"),
        Some(0.0)
    );
    // A state change is the leader's to make.
    assert_eq!(put(gws[follower].0, "{\"state\": \"paused\"}").status, 409);
    // Mid-rollout, the leader dies.
    let current = || -> u64 {
        let text = etcd.ctl(&["get", key, "--print-value-only"]);
        canary_weight(&serde_json::from_str(text.trim()).unwrap())
    };
    assert!(
        wait_until(Duration::from_secs(20), || current() >= 30),
        "no steps: {}",
        gws[leader].1.stderr()
    );
    // (Its clients stop first: they would not reconnect.)
    if let Some(l) = loads[leader].take() {
        l.finish();
    }
    let killed_at = current();
    assert!(killed_at < 100, "promoted before the kill");
    gws[leader].1.signal("KILL");
    // The other takes over and completes it.
    let survivor = gws[follower].0;
    assert!(
        wait_until(Duration::from_secs(60), || current() == 100),
        "not completed after the leader died at {killed_at}: {}",
        gws[follower].1.stderr()
    );
    assert!(wait_until(Duration::from_secs(10), || {
        let v = rollout(survivor);
        v["leader"] == true && v["state"] == "promoted" && v["weight"] == 100
    }));
    assert!(metric(survivor, "sluicegate_rollout_steps_total{route=\"orders\"}").unwrap() >= 1.0);
    // Every weight written: one step after the other, none skipped or
    // written twice.
    let to = etcd.revision();
    let weights: Vec<u64> = history(&etcd, key, from, to)
        .iter()
        .map(|(_, v)| canary_weight(v))
        .collect();
    assert_eq!(
        weights,
        [10, 20, 30, 40, 50, 60, 70, 80, 90, 100],
        "killed at {killed_at}"
    );
    for l in loads.into_iter().flatten() {
        l.finish();
    }
}
