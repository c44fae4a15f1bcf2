//! Cluster config in etcd, end to end with a real etcd on loopback: three
//! gateways on one etcd converge on a route written through one gateway's
//! admin API (propagation times printed); etcd stopped for 10 s under load
//! fails no request and the gateways resync; a gateway stopped across a
//! compaction catches up without loss, and one started while etcd is down
//! serves its cache; an invalid object written with etcdctl is refused and
//! reported while the last good config stays, and so is a route with the
//! identity keys (`forward_auth`, `ext_authz`, `scopes`, `limit.per:
//! header:NAME`) with a bad field, named, after a good one applied; a
//! cache purge through one
//! gateway's admin API reaches the other two through etcd within a
//! second, a malformed purge record skipped.

mod admin_common;
mod etcd_common;
mod ops_common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_common::*;
use ops_common::*;
use sluicegate_testkit::Gateway;

/// Starts a gateway on etcd with its cache in `dir`.
fn gateway(etcd: &Etcd, dir: &std::path::Path) -> (Ports, Gateway) {
    let ports = Ports::new();
    let cache = dir.join(format!("cache-{}.json", ports.listen));
    let gw = start(ports, &config(ports, etcd, &cache));
    (ports, gw)
}

fn skip() -> bool {
    if etcd_binary().is_none() {
        eprintln!("skipped: no etcd binary (Debian etcd-server)");
        return true;
    }
    false
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[test]
fn a_route_written_through_one_gateway_serves_on_all_three() {
    if skip() {
        return;
    }
    let etcd = Etcd::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let gws: Vec<(Ports, Gateway)> = (0..3).map(|_| gateway(&etcd, dir.path())).collect();
    let all: Vec<Ports> = gws.iter().map(|(p, _)| *p).collect();
    let mut times = Vec::new();
    for i in 0..20 {
        let body =
            format!(r#"{{"match":{{"path":"/r{i}"}},"respond":{{"status":200,"body":"r{i}"}}}}"#);
        let t0 = Instant::now();
        let resp = admin_common::call(all[i % 3], "PUT", &format!("/routes/r{i}"), &[], &body);
        assert!(
            resp.status == 200 || resp.status == 201,
            "{}",
            resp.body_str()
        );
        let seen = wait_until(Duration::from_secs(10), || {
            all.iter()
                .all(|p| serves(*p, &format!("/r{i}"), &format!("r{i}")))
        });
        assert!(seen, "route r{i} not served on all three");
        times.push(t0.elapsed());
    }
    times.sort();
    eprintln!(
        "propagation (API write on one, serving on 3), 20 changes: p50 {:?} p99 {:?}",
        percentile(&times, 0.5),
        percentile(&times, 0.99)
    );
    // Every gateway reflects the same etcd revision.
    let rev = etcd.revision() as f64;
    assert!(wait_until(Duration::from_secs(5), || all
        .iter()
        .all(|p| gauge(*p, "sluicegate_config_revision") == Some(rev))));
    // A write based on a stale revision is 412 (If-Match), and the
    // transaction's own comparison holds as well.
    let (_, etag) = admin_common::config(all[0]);
    etcd.ctl(&["put", "/sg/routes/x", &route_json("/x", "x")]);
    assert!(wait_until(Duration::from_secs(5), || serves(
        all[0], "/x", "x"
    )));
    let resp = admin_common::call(
        all[0],
        "PUT",
        "/routes/y",
        &[("If-Match", &etag)],
        &route_json("/y", "y"),
    );
    assert_eq!(resp.status, 412, "{}", resp.body_str());
    // Deleting through the API deletes the key.
    let resp = admin_common::call(all[1], "DELETE", "/routes/r0", &[], "");
    assert!(resp.status < 300, "{}", resp.body_str());
    assert_eq!(etcd.ctl(&["get", "/sg/routes/r0"]), "");
    assert!(wait_until(Duration::from_secs(5), || all
        .iter()
        .all(|p| !serves(*p, "/r0", "r0"))));
}

#[test]
fn etcd_down_for_10s_under_load_fails_nothing_then_resyncs() {
    if skip() {
        return;
    }
    let mut etcd = Etcd::start().unwrap();
    etcd.ctl(&["put", "/sg/routes/a", &route_json("/a", "a")]);
    let dir = tempfile::tempdir().unwrap();
    let gws: Vec<(Ports, Gateway)> = (0..3).map(|_| gateway(&etcd, dir.path())).collect();
    let all: Vec<Ports> = gws.iter().map(|(p, _)| *p).collect();
    assert!(wait_until(Duration::from_secs(10), || all
        .iter()
        .all(|p| serves(*p, "/a", "a"))));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load: Vec<_> = all
        .iter()
        .map(|p| {
            let (p, stop, ok, failed) = (*p, stop.clone(), ok.clone(), failed.clone());
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    if serves(p, "/a", "a") {
                        ok.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    etcd.stop();
    assert!(wait_until(Duration::from_secs(10), || all
        .iter()
        .all(|p| gauge(*p, "sluicegate_etcd_connected") == Some(0.0))));
    std::thread::sleep(Duration::from_secs(10));
    etcd.resume();
    etcd.ctl(&["put", "/sg/routes/b", &route_json("/b", "b")]);
    let resynced = wait_until(Duration::from_secs(15), || {
        all.iter().all(|p| serves(*p, "/b", "b"))
    });
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    eprintln!("etcd down 10 s under load: {ok} requests ok, {failed} failed");
    assert!(resynced, "the gateways did not resync after etcd came back");
    assert_eq!(failed, 0);
    assert!(ok > 1000, "too little load: {ok}");
    assert!(all
        .iter()
        .all(|p| gauge(*p, "sluicegate_etcd_connected") == Some(1.0)));
}

#[test]
fn a_gateway_stopped_across_a_compaction_catches_up_and_a_cold_start_serves_the_cache() {
    if skip() {
        return;
    }
    let mut etcd = Etcd::start().unwrap();
    for i in 0..5 {
        etcd.ctl(&[
            "put",
            &format!("/sg/routes/k{i}"),
            &route_json(&format!("/k{i}"), "v1"),
        ]);
    }
    let dir = tempfile::tempdir().unwrap();
    let ports = Ports::new();
    let cache = dir.path().join("cache.json");
    let yaml = config(ports, &etcd, &cache);
    let gw = start(ports, &yaml);
    assert!(wait_until(Duration::from_secs(10), || serves(
        ports, "/k4", "v1"
    )));
    drop(gw);
    // While it is stopped: changes, a delete, then a compaction past them.
    for i in 0..5 {
        etcd.ctl(&[
            "put",
            &format!("/sg/routes/k{i}"),
            &route_json(&format!("/k{i}"), "v2"),
        ]);
    }
    etcd.ctl(&["del", "/sg/routes/k0"]);
    etcd.ctl(&["put", "/sg/routes/n", &route_json("/n", "new")]);
    let rev = etcd.revision();
    etcd.ctl(&["compact", &rev.to_string()]);
    let gw = start(ports, &yaml);
    let caught_up = wait_until(Duration::from_secs(10), || {
        (1..5).all(|i| serves(ports, &format!("/k{i}"), "v2")) && serves(ports, "/n", "new")
    });
    assert!(caught_up, "{}", gw.stderr());
    assert!(!serves(ports, "/k0", "v2") && !serves(ports, "/k0", "v1"));
    // At least the revision of the last change: the etcd this binary's
    // tests share may have moved on since (another test's leased key
    // expiring), and a cold start reads the store's revision then.
    let seen = gauge(ports, "sluicegate_config_revision").unwrap_or(0.0) as i64;
    assert!(
        seen >= rev as i64,
        "revision {seen}, expected at least {rev}"
    );
    // The cache is written by its own thread: wait for this revision's.
    let cached = wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&cache).is_ok_and(|t| t.contains(&format!("\"revision\":{seen}")))
    });
    assert!(cached, "the cache never held revision {seen}");
    drop(gw);
    // Started while etcd is down: the cache serves, and it catches up after.
    etcd.stop();
    let gw = start(ports, &yaml);
    assert!(serves(ports, "/n", "new"), "{}", gw.stderr());
    assert_eq!(gauge(ports, "sluicegate_etcd_connected"), Some(0.0));
    etcd.resume();
    etcd.ctl(&["put", "/sg/routes/late", &route_json("/late", "late")]);
    assert!(wait_until(Duration::from_secs(15), || serves(
        ports, "/late", "late"
    )));
}

#[test]
fn an_invalid_object_from_etcdctl_is_refused_and_reported() {
    if skip() {
        return;
    }
    let etcd = Etcd::start().unwrap();
    etcd.ctl(&["put", "/sg/routes/good", &route_json("/good", "good")]);
    let dir = tempfile::tempdir().unwrap();
    let (ports, _gw) = gateway(&etcd, dir.path());
    assert!(wait_until(Duration::from_secs(10), || serves(
        ports, "/good", "good"
    )));
    etcd.ctl(&["put", "/sg/routes/bad", r#"{"service":"missing"}"#]);
    etcd.ctl(&["put", "/sg/routes/junk", "{not json"]);
    let reported = wait_until(Duration::from_secs(10), || {
        gauge(ports, "sluicegate_etcd_rejected_objects_total") == Some(2.0)
    });
    assert!(
        reported,
        "rejected: {:?}",
        gauge(ports, "sluicegate_etcd_rejected_objects_total")
    );
    let resp = admin_common::call(ports, "GET", "/reloads", &[], "");
    let reloads = admin_common::json(&resp);
    let refused: Vec<&serde_json::Value> = reloads["reloads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "etcd" && e["applied"] == false)
        .collect();
    let text = serde_json::to_string(&refused).unwrap();
    assert!(
        text.contains("etcd:routes/bad") && text.contains("etcd:routes/junk"),
        "{text}"
    );
    assert!(text.contains("missing"), "{text}");
    // The last good config stays, and later good changes still apply.
    assert!(serves(ports, "/good", "good"));
    etcd.ctl(&["put", "/sg/routes/more", &route_json("/more", "more")]);
    assert!(wait_until(Duration::from_secs(10), || serves(
        ports, "/more", "more"
    )));
    assert!(serves(ports, "/good", "good"));
    identity_keys_through_etcd(&etcd, ports);
}

/// A route with `forward_auth`, `ext_authz`, `scopes` and a limit per
/// header, put through etcd, applies (its `auth: jwt` answers, and the
/// admin API shows its keys); the same route with a bad `limit.per` or
/// `forward_auth.url` is refused with the field named, the running route
/// staying as it was.
fn identity_keys_through_etcd(etcd: &Etcd, ports: Ports) {
    let closed = sluicegate_testkit::free_port();
    etcd.ctl(&[
        "put",
        "/sg/services/idp-up",
        &format!(r#"{{"endpoints":["127.0.0.1:{closed}"]}}"#),
    ]);
    etcd.ctl(&[
        "put",
        "/sg/services/idp-authz",
        &format!(r#"{{"endpoints":["127.0.0.1:{closed}"],"protocol":"h2c"}}"#),
    ]);
    let route = |per: &str, url: &str| {
        format!(
            r#"{{"match":{{"path_prefix":"/guarded"}},"service":"idp-up","auth":"jwt","scopes":["orders:read"],"forward_auth":{{"url":"{url}","timeout":"200ms","response_headers":["x-user-id"]}},"ext_authz":{{"service":"idp-authz","timeout":"200ms"}},"limit":{{"rate":"100/s","per":"{per}"}}}}"#
        )
    };
    let url = format!("http://127.0.0.1:{closed}/check");
    etcd.ctl(&["put", "/sg/routes/guarded", &route("header:x-tenant", &url)]);
    let bearer = || {
        sluicegate_testkit::try_http_get(ports.addr(), "/guarded/x", &[])
            .ok()
            .filter(|r| r.status == 401)
            .and_then(|r| r.header("www-authenticate").map(str::to_string))
            .is_some_and(|w| w.starts_with("Bearer"))
    };
    assert!(wait_until(Duration::from_secs(10), bearer), "not applied");
    let shown = || {
        let resp = admin_common::call(ports, "GET", "/routes/guarded", &[], "");
        admin_common::json(&resp)
    };
    let r = shown();
    assert_eq!(r["forward_auth"]["url"], url.as_str(), "{r}");
    assert_eq!(r["ext_authz"]["service"], "idp-authz", "{r}");
    assert_eq!(r["scopes"], serde_json::json!(["orders:read"]), "{r}");
    assert_eq!(r["limit"]["per"], "header:x-tenant", "{r}");
    // Invalid: each refused with its field named; the route stays.
    let refusals = |key: &str| -> String {
        let resp = admin_common::call(ports, "GET", "/reloads", &[], "");
        let reloads = admin_common::json(&resp);
        let refused: Vec<&serde_json::Value> = reloads["reloads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["source"] == "etcd" && e["applied"] == false)
            .filter(|e| e.to_string().contains(key))
            .collect();
        serde_json::to_string(&refused).unwrap()
    };
    for (per, url, field) in [
        ("header:", url.as_str(), "limit.per"),
        (
            "header:x-tenant",
            "http://idp.example/check",
            "forward_auth.url",
        ),
    ] {
        etcd.ctl(&["put", "/sg/routes/guarded", &route(per, url)]);
        assert!(
            wait_until(Duration::from_secs(10), || refusals(field)
                .contains("routes/guarded")),
            "{field}: {}",
            refusals("")
        );
        assert!(bearer(), "{field}: the running route changed");
        let r = shown();
        assert_eq!(r["limit"]["per"], "header:x-tenant", "{field}: {r}");
        assert_eq!(
            r["forward_auth"]["url"],
            format!("http://127.0.0.1:{closed}/check")
        );
    }
}

/// The status of `GET path` with app key `key`.
fn status_with_key(ports: Ports, path: &str, key: &str) -> u16 {
    sluicegate_testkit::try_http_get(ports.addr(), path, &[("X-App-Key", key)])
        .map_or(0, |r| r.status)
}

#[test]
fn apps_changed_in_etcd_apply_in_place_keeping_their_plan_state() {
    if skip() {
        return;
    }
    let etcd = Etcd::start().unwrap();
    etcd.ctl(&["put", "/sg/plans/two", r#"{"rate":"1/m","burst":2}"#]);
    etcd.ctl(&[
        "put",
        "/sg/routes/api",
        r#"{"match":{"path_prefix":"/api"},"auth":"app_key","respond":{"status":200,"body":"ok"}}"#,
    ]);
    etcd.ctl(&[
        "put",
        "/sg/apps/a1",
        r#"{"keys":["key-a1-00000001"],"plan":"two"}"#,
    ]);
    etcd.ctl(&["put", "/sg/apps/a2", r#"{"keys":["key-a2-00000001"]}"#]);
    let dir = tempfile::tempdir().unwrap();
    let (ports, gw) = gateway(&etcd, dir.path());
    assert!(wait_until(Duration::from_secs(10), || status_with_key(
        ports,
        "/api",
        "key-a2-00000001"
    ) == 200));
    // a1 spends one of its plan's two requests.
    assert_eq!(status_with_key(ports, "/api", "key-a1-00000001"), 200);

    // a1's key changes: applied in place, its plan state kept.
    etcd.ctl(&[
        "put",
        "/sg/apps/a1",
        r#"{"keys":["key-a1-00000002"],"plan":"two"}"#,
    ]);
    assert!(wait_until(Duration::from_secs(10), || status_with_key(
        ports,
        "/api",
        "key-a1-00000002"
    ) != 401));
    assert_eq!(status_with_key(ports, "/api", "key-a1-00000001"), 401);
    assert_eq!(
        status_with_key(ports, "/api", "key-a1-00000002"),
        429,
        "a1's second request was spent by the wait; its third is over the plan"
    );
    assert!(
        gw.stderr().contains("apps changed in place"),
        "{}",
        gw.stderr()
    );

    // A key another app holds, or an unknown plan: refused and reported,
    // the running apps stay.
    etcd.ctl(&["put", "/sg/apps/a3", r#"{"keys":["key-a2-00000001"]}"#]);
    etcd.ctl(&[
        "put",
        "/sg/apps/a4",
        r#"{"keys":["key-a4-00000001"],"plan":"gold"}"#,
    ]);
    assert!(wait_until(Duration::from_secs(10), || gauge(
        ports,
        "sluicegate_etcd_rejected_objects_total"
    ) == Some(2.0)));
    let resp = admin_common::call(ports, "GET", "/reloads", &[], "");
    let text = serde_json::to_string(&admin_common::json(&resp)).unwrap();
    assert!(
        text.contains("etcd:apps/a3") && text.contains("etcd:apps/a4"),
        "{text}"
    );
    assert!(text.contains("key already given to another app"), "{text}");
    assert!(text.contains("unknown plan"), "{text}");
    assert_eq!(status_with_key(ports, "/api", "key-a2-00000001"), 200);
    assert_eq!(status_with_key(ports, "/api", "key-a4-00000001"), 401);

    // Removed: its key no longer opens the route.
    etcd.ctl(&["del", "/sg/apps/a2"]);
    assert!(wait_until(Duration::from_secs(10), || status_with_key(
        ports,
        "/api",
        "key-a2-00000001"
    ) == 401));
    // The config read back through the API shows the apps in force.
    let resp = admin_common::call(ports, "GET", "/apps", &[], "");
    let text = serde_json::to_string(&admin_common::json(&resp)).unwrap();
    assert!(
        text.contains("\"a1\"") && !text.contains("\"a2\""),
        "{text}"
    );

    // Read from the objects: paged and filtered as from a document.
    let page = admin_common::json(&admin_common::call(
        ports,
        "GET",
        "/apps?name=a1&limit=5",
        &[],
        "",
    ));
    assert_eq!(page["total"], 1, "{page}");
    assert_eq!(page["items"][0]["id"], "a1", "{page}");
    assert!(
        page["items"][0]["keys"][0]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{page}"
    );
    let plan = admin_common::json(&admin_common::call(ports, "GET", "/plans/two", &[], ""));
    assert_eq!(plan["name"], "two", "{plan}");
    let resp = admin_common::call(ports, "GET", "/apps/a2", &[], "");
    assert_eq!(resp.status, 404, "{}", resp.body_str());

    // Admin API writes of one app go to etcd as one key and are applied
    // in place: no whole config is built for them.
    let rebuilds = |gw: &sluicegate_testkit::Gateway| {
        gw.stderr()
            .matches("config document built and decoded")
            .count()
    };
    let before = rebuilds(&gw);
    let call =
        |method: &str, path: &str, body: &str| admin_common::call(ports, method, path, &[], body);
    let resp = call(
        "PUT",
        "/apps/a5",
        r#"{"keys":["key-a5-00000001"],"plan":"two"}"#,
    );
    assert_eq!(resp.status, 201, "{}", resp.body_str());
    assert_eq!(status_with_key(ports, "/api", "key-a5-00000001"), 200);
    assert!(etcd
        .ctl(&["get", "/sg/apps/a5"])
        .contains("key-a5-00000001"));
    // Problems are at the body's paths, with the file's messages.
    let resp = call("PUT", "/apps/a6", r#"{"keys":["key-a1-00000002"]}"#);
    assert_eq!(resp.status, 400, "{}", resp.body_str());
    let text = resp.body_str();
    assert!(
        text.contains("$.keys[0]") && text.contains("key already given to another app"),
        "{text}"
    );
    let resp = call("PATCH", "/apps/a5", r#"{"plan":"gold"}"#);
    assert_eq!(resp.status, 400, "{}", resp.body_str());
    assert!(resp.body_str().contains("$.plan") && resp.body_str().contains("unknown plan"));
    // A read shows the key's fingerprint; sent back, it keeps the key.
    let shown = admin_common::json(&call("GET", "/apps/a5", ""));
    let fp = shown["keys"][0].as_str().unwrap().to_string();
    assert!(fp.starts_with("sha256:"), "{shown}");
    let resp = call(
        "PATCH",
        "/apps/a5",
        &format!(r#"{{"keys":["{fp}"],"plan":null}}"#),
    );
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    assert_eq!(status_with_key(ports, "/api", "key-a5-00000001"), 200);
    // A stale If-Match is 412 and changes nothing.
    let resp = admin_common::call(ports, "DELETE", "/apps/a5", &[("If-Match", "\"1\"")], "");
    assert_eq!(resp.status, 412, "{}", resp.body_str());
    let resp = call("DELETE", "/apps/a5", "");
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    assert_eq!(status_with_key(ports, "/api", "key-a5-00000001"), 401);
    assert_eq!(rebuilds(&gw), before, "{}", gw.stderr());
}

/// The `Cache-Status` of a `GET` of `path` on the gateway.
fn cache_status(ports: Ports, path: &str) -> String {
    let r = sluicegate_testkit::http_get(ports.addr(), path, &[]);
    assert_eq!(r.status, 200, "{path}: {}", r.body_str());
    r.header("cache-status").unwrap_or("").to_string()
}

/// The number of objects `GET /cache` reports.
fn cached_objects(ports: Ports) -> Option<u64> {
    let r = sluicegate_testkit::try_http_get(ports.admin_addr(), "/cache", &[]).ok()?;
    let v: serde_json::Value = serde_json::from_str(&r.body_str()).ok()?;
    v["objects"].as_u64()
}

#[test]
fn a_cache_purge_through_one_gateway_reaches_the_fleet_within_a_second() {
    if skip() {
        return;
    }
    let etcd = Etcd::start().unwrap();
    let up = sluicegate_testkit::TestUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    // The caching route in etcd; the store and the service come from
    // each gateway's file, laid under the objects.
    etcd.ctl(&["put", "/sg/routes/other", &route_json("/other", "o")]);
    etcd.ctl(&[
        "put",
        "/sg/routes/t",
        r#"{"match":{"path_prefix":"/t"},"service":"web","cache":{"tags_header":"x-tags"}}"#,
    ]);
    let all: Vec<(Ports, Gateway)> = (0..3)
        .map(|_| {
            let ports = Ports::new();
            let cache = dir.path().join(format!("cache-{}.json", ports.listen));
            let yaml = format!(
                "{}cache: {{ memory: 4MiB }}\nservices:\n{}",
                config(ports, &etcd, &cache),
                service("web", &[up.addr().port()]),
            );
            (ports, start(ports, &yaml))
        })
        .collect();
    let ports: Vec<Ports> = all.iter().map(|(p, _)| *p).collect();
    let q = "?size=100&header=cache-control:max-age=600";
    let tagged = format!("/t/a{q}&header=x-tags:red,%20blue");
    let plain = format!("/t/u{q}");
    for p in &ports {
        assert!(wait_until(Duration::from_secs(10), || serves(
            *p, "/other", "o"
        )));
        for path in [&tagged, &plain] {
            assert_eq!(cache_status(*p, path), "sluicegate; fwd=miss; stored");
            assert_eq!(cache_status(*p, path), "sluicegate; hit");
        }
    }
    // A malformed record is skipped (logged), never config, never fatal.
    etcd.ctl(&["put", "/sg/meta/cache-purge/junk-0", "{not json"]);
    etcd.ctl(&[
        "put",
        "/sg/meta/cache-purge/junk-1",
        r#"{"origin":"x","purge":{"tag":5}}"#,
    ]);

    let t0 = Instant::now();
    let r = admin_common::call(ports[0], "POST", "/cache/purge", &[], r#"{"tag":"blue"}"#);
    assert_eq!(r.status, 200, "{}", r.body_str());
    let v: serde_json::Value = serde_json::from_str(&r.body_str()).unwrap();
    assert_eq!(
        (v["purged"].as_u64(), v["fleet"].as_bool()),
        (Some(1), Some(true))
    );
    let reached = wait_until(Duration::from_secs(5), || {
        ports.iter().all(|p| cached_objects(*p) == Some(1))
    });
    let took = t0.elapsed();
    eprintln!("a purge through one gateway reached all three in {took:?}");
    assert!(reached, "the purge did not reach every gateway");
    assert!(took < Duration::from_secs(1), "the purge took {took:?}");
    for p in &ports {
        assert_eq!(cache_status(*p, &plain), "sluicegate; hit");
        assert_eq!(cache_status(*p, &tagged), "sluicegate; fwd=miss; stored");
        assert!(serves(*p, "/other", "o"));
        assert_eq!(
            gauge(*p, "sluicegate_etcd_rejected_objects_total"),
            Some(0.0)
        );
    }
    // The purge keys never became config: an API write still goes through.
    let resp = admin_common::call(ports[1], "PUT", "/routes/r", &[], &route_json("/r", "r"));
    assert!(resp.status < 300, "{}", resp.body_str());
    assert!(wait_until(Duration::from_secs(10), || ports
        .iter()
        .all(|p| serves(*p, "/r", "r"))));
}
