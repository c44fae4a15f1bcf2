//! The admin REST API on the real binary, over loopback: the whole config
//! read and replaced, bad writes refused with their paths while the running
//! config keeps serving, stale `If-Match` refused, writes saved to the file
//! and served again after a restart, SIGUSR2, and API writes under traffic
//! without a failed request.

mod admin_common;
mod ops_common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use admin_common::*;
use ops_common::*;
use serde_json::json;
use sluicegate_testkit::{http_get, raw_exchange, KeepAliveClient, TestUpstream};

fn hello_config(ports: Ports, body: &str) -> String {
    format!(
        "# kept until the first API write\n{}reload: {{ poll_interval: 100ms }}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", body)
    )
}

/// The running config with route `name` answering `body` on `path` added.
fn with_route(mut doc: serde_json::Value, name: &str, path: &str, body: &str) -> String {
    doc["routes"].as_array_mut().unwrap().push(json!({
        "name": name,
        "match": { "path": path },
        "respond": { "status": 200, "body": body }
    }));
    doc.to_string()
}

fn body_of(ports: Ports, path: &str) -> (u16, String) {
    let r = http_get(ports.addr(), path, &[]);
    (r.status, r.body_str())
}

#[test]
fn metrics_healthz_and_openapi_answer() {
    let ports = Ports::new();
    let _gw = start(ports, &hello_config(ports, "hi"));
    let h = call(ports, "GET", "/healthz", &[], "");
    assert_eq!(h.header("content-type"), Some("application/json"));
    assert_eq!(
        h.body_str(),
        "{\"status\":\"ok\",\"config_generation\":1}\n"
    );
    let m = call(ports, "GET", "/metrics", &[], "");
    assert_eq!(m.header("content-type"), Some("text/plain; version=0.0.4"));
    assert!(m.body_str().contains("sluicegate_config_reloads_total"));
    let head = call(ports, "HEAD", "/healthz", &[], "");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    let post = call(ports, "POST", "/healthz", &[], "");
    assert_eq!(post.status, 405);
    assert_eq!(
        json(&post),
        json!({ "error": "method not allowed", "status": 405 })
    );
    let spec = json(&call(ports, "GET", "/openapi.json", &[], ""));
    assert_eq!(spec["openapi"], "3.1.0");
    assert!(
        spec["paths"]["/routes/{name}"].get("put").is_some(),
        "{spec}"
    );
    let none = call(ports, "GET", "/nope", &[], "");
    assert_eq!(json(&none), json!({ "error": "not found", "status": 404 }));
}

#[test]
fn a_client_that_stalls_in_its_head_is_closed() {
    let ports = Ports::new();
    let gw = start(ports, &hello_config(ports, "hi"));
    let mut slow = KeepAliveClient::connect(ports.admin_addr()).unwrap();
    slow.send_raw(b"GET /metr").unwrap();
    // The admin listener allows 5 s for a head; it still serves others.
    assert_eq!(call(ports, "GET", "/healthz", &[], "").status, 200);
    let closed = slow.wait_closed(Duration::from_secs(10));
    check(&gw, closed, "a stalled admin connection stayed open");
}

#[test]
fn a_route_put_through_the_api_serves_and_is_saved() {
    let ports = Ports::new();
    let gw = start(ports, &hello_config(ports, "hi"));
    let (doc, tag) = config(ports);
    assert_eq!(tag, "\"1\"");
    assert_eq!(doc["routes"][0]["name"], "hello");

    let yaml = call(
        ports,
        "GET",
        "/config",
        &[("Accept", "application/yaml")],
        "",
    );
    assert_eq!(yaml.header("content-type"), Some("application/yaml"));
    assert!(
        yaml.body_str().contains("  - name: hello\n"),
        "{}",
        yaml.body_str()
    );

    let body = with_route(doc, "api", "/api-made", "made by the API");
    let put = call(ports, "PUT", "/config", &[("If-Match", &tag)], &body);
    assert_eq!(put.status, 200, "{}", put.body_str());
    assert_eq!(etag(&put), "\"2\"");
    assert_eq!(json(&put)["revision"], 2);
    assert_eq!(
        body_of(ports, "/api-made"),
        (200, "made by the API".to_string())
    );
    assert_eq!(body_of(ports, "/hello"), (200, "hi".to_string()));

    // Saved to the file (comments are not kept), and not reloaded again by
    // the file watcher.
    let saved = std::fs::read_to_string(gw.config_path()).unwrap();
    assert!(saved.contains("name: api"), "{saved}");
    assert!(!saved.contains("# kept"), "{saved}");
    thread::sleep(Duration::from_millis(400));
    assert_eq!(generation(ports), 2);

    // The history has the write.
    let reloads = json(&call(ports, "GET", "/reloads", &[], ""));
    assert_eq!(reloads["reloads"][0]["source"], "api");
    assert_eq!(reloads["reloads"][0]["applied"], true);
    assert_eq!(reloads["reloads"][0]["revision"], 2);

    // A new process on the saved file serves what was written.
    drop(gw);
    let again = start(ports, &saved);
    assert_eq!(
        body_of(ports, "/api-made"),
        (200, "made by the API".to_string())
    );
    drop(again);
}

#[test]
fn bad_writes_get_400_with_paths_and_the_running_config_stays() {
    let ports = Ports::new();
    let gw = start(ports, &hello_config(ports, "hi"));
    let (mut doc, _) = config(ports);
    let route = doc["routes"][0].as_object_mut().unwrap();
    route.remove("respond");
    route.insert("service".to_string(), json!("nowhere"));
    doc["limits"] = json!({ "max_connections": "lots", "colour": 1 });
    let put = call(ports, "PUT", "/config", &[], &doc.to_string());
    assert_eq!(put.status, 400, "{}", put.body_str());
    let problems = json(&put)["problems"].clone();
    let paths: Vec<&str> = problems
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"$.routes[0].service"), "{problems}");
    assert!(paths.contains(&"$.limits.max_connections"), "{problems}");
    assert!(paths.contains(&"$.limits.colour"), "{problems}");
    // The same message as a file gets.
    assert!(
        problems
            .to_string()
            .contains("unknown service \\\"nowhere\\\""),
        "{problems}"
    );

    // Malformed JSON, a wrong type at the top, an oversized body.
    let bad = call(ports, "PUT", "/config", &[], "{\"listen\": ");
    assert_eq!(bad.status, 400);
    assert_eq!(json(&bad)["error"], "malformed JSON");
    let list = call(ports, "PUT", "/config", &[], "[1]");
    assert_eq!(list.status, 400);
    assert_eq!(json(&list)["problems"][0]["path"], "$");
    let huge = raw_exchange(
        ports.admin_addr(),
        b"PUT /config HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{",
        Duration::from_secs(2),
    );
    let huge = String::from_utf8_lossy(&huge);
    assert!(huge.starts_with("HTTP/1.1 413"), "{huge}");

    // A YAML body is read as a file is: a key given twice is refused.
    let yaml = format!("{}workers: 2\n", ports.head());
    let twice = call(
        ports,
        "PUT",
        "/config",
        &[("Content-Type", "application/yaml")],
        &yaml,
    );
    assert_eq!(twice.status, 400, "{}", twice.body_str());
    assert_eq!(
        json(&twice)["problems"][0]["path"],
        "$.workers",
        "{}",
        twice.body_str()
    );
    assert!(
        twice.body_str().contains("duplicate key"),
        "{}",
        twice.body_str()
    );

    // Validation alone applies nothing.
    let ok = call(
        ports,
        "POST",
        "/config/validate",
        &[],
        &config(ports).0.to_string(),
    );
    assert_eq!((ok.status, json(&ok)), (200, json!({ "valid": true })));
    let ko = call(ports, "POST", "/config/validate", &[], &doc.to_string());
    assert_eq!(ko.status, 400);

    assert_eq!(body_of(ports, "/hello"), (200, "hi".to_string()));
    assert_eq!(generation(ports), 1);
    let saved = std::fs::read_to_string(gw.config_path()).unwrap();
    assert!(
        saved.starts_with("# kept"),
        "the file is untouched: {saved}"
    );
    let reloads = json(&call(ports, "GET", "/reloads", &[], ""));
    // The refused writes (the bad fields, the list, the key twice), newest first.
    let entries = reloads["reloads"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "{reloads}");
    assert!(entries
        .iter()
        .all(|e| e["applied"] == false && e["source"] == "api"));
    assert_eq!(
        entries[2]["errors"].as_array().unwrap().len(),
        3,
        "{reloads}"
    );
}

#[test]
fn a_stale_if_match_gets_412() {
    let ports = Ports::new();
    let _gw = start(ports, &hello_config(ports, "hi"));
    let (doc, tag) = config(ports);
    let first = with_route(doc.clone(), "a", "/a", "a");
    assert_eq!(
        call(ports, "PUT", "/config", &[("If-Match", &tag)], &first).status,
        200
    );
    // A second writer that read revision 1 too.
    let second = with_route(doc, "b", "/b", "b");
    let late = call(ports, "PUT", "/config", &[("If-Match", &tag)], &second);
    assert_eq!(late.status, 412, "{}", late.body_str());
    assert_eq!(etag(&late), "\"2\"");
    assert_eq!(body_of(ports, "/b").0, 404);
    assert_eq!(
        call(ports, "PUT", "/config", &[("If-Match", "*")], &second).status,
        200
    );
    assert_eq!(body_of(ports, "/b"), (200, "b".to_string()));
}

#[test]
fn an_api_write_keeps_the_state_that_outlives_snapshots() {
    let ports = Ports::new();
    let yaml = format!(
        "{}routes:\n  - name: limited\n    match: {{ path: /limited }}\n    limit: {{ rate: 3/h, per: route }}\n    respond: {{ status: 200, body: ok }}\n",
        ports.head()
    );
    let _gw = start(ports, &yaml);
    for _ in 0..3 {
        assert_eq!(body_of(ports, "/limited").0, 200);
    }
    assert_eq!(body_of(ports, "/limited").0, 429);
    // A write that adds another route: the limited route's bucket is kept.
    let (doc, tag) = config(ports);
    let put = call(
        ports,
        "PUT",
        "/config",
        &[("If-Match", &tag)],
        &with_route(doc, "b", "/b", "b"),
    );
    assert_eq!(put.status, 200, "{}", put.body_str());
    assert_eq!(body_of(ports, "/b").0, 200);
    assert_eq!(
        body_of(ports, "/limited").0,
        429,
        "the bucket was reset by the write"
    );
}

#[test]
fn sigusr2_reloads_the_file() {
    let ports = Ports::new();
    let no_watch = format!(
        "{}reload: {{ watch: false }}\nroutes:\n{}",
        ports.head(),
        respond_route("hello", "/hello", "one")
    );
    let gw = start(ports, &no_watch);
    gw.write_config(&no_watch.replace("one", "two"));
    gw.signal("USR2");
    let applied = wait_until(Duration::from_secs(3), || {
        body_of(ports, "/hello").1 == "two"
    });
    check(&gw, applied, "SIGUSR2 did not reload");
    let reloads = json(&call(ports, "GET", "/reloads", &[], ""));
    assert_eq!(reloads["reloads"][0]["source"], "SIGUSR2");
}

#[test]
fn api_writes_under_traffic_fail_no_request() {
    let up = TestUpstream::start_with_id("up");
    let ports = Ports::new();
    let yaml = format!(
        "{}services:\n{}routes:\n{}{}",
        ports.head().replace("workers: 1\n", "workers: 2\n"),
        service("api", &[up.port()]),
        proxy_route("api", "/api", "api"),
        respond_route("hello", "/hello", "hi")
    );
    let _gw = start(ports, &yaml);
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let clients: Vec<_> = ["/hello", "/api/a", "/hello", "/api/b"]
        .into_iter()
        .map(|path| {
            let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
            thread::spawn(move || {
                // Keep-alive connections, as a real client's, across the writes.
                let connect = || {
                    let c = KeepAliveClient::connect(ports.addr()).unwrap();
                    // Generous: the machine may be shared with other builds.
                    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    c
                };
                let mut c = connect();
                while !stop.load(Ordering::Relaxed) {
                    match c.get(path) {
                        Ok(r) if r.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            c = connect();
                            0
                        }
                    };
                }
            })
        })
        .collect();
    for i in 0..20 {
        let (doc, tag) = config(ports);
        let body = with_route(doc, &format!("r{i}"), &format!("/r{i}"), "x");
        let put = call(ports, "PUT", "/config", &[("If-Match", &tag)], &body);
        assert_eq!(put.status, 200, "{}", put.body_str());
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    assert_eq!(failed.load(Ordering::Relaxed), 0);
    assert!(
        ok.load(Ordering::Relaxed) > 100,
        "{}",
        ok.load(Ordering::Relaxed)
    );
    assert_eq!(generation(ports), 21);
    assert_eq!(body_of(ports, "/r19"), (200, "x".to_string()));
}
