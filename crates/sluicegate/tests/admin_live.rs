//! The live-state API on the real binary: `/live` counts requests by
//! route, service and app with rates, percentiles and the gateway's share
//! of latency; `/live/endpoints` shows an endpoint whose health checks fail
//! as down; both need a token like the rest of the API, and both are in the
//! OpenAPI document. Sampling starts at the first `/live`.

mod admin_common;
mod ops_common;

use admin_common::*;
use ops_common::*;
use sluicegate_testkit::{free_port, http_get, TestUpstream};

const KEY: &str = "live-app-key-0123456789";

#[test]
fn live_counts_routes_services_apps_and_endpoints() {
    let up = TestUpstream::start();
    let dead = free_port();
    let dir = ScratchDir::new("admin-live");
    let token = dir.write("read.token", "live-reader\n");
    let ports = Ports::new();
    let yaml = format!(
        "listen: [\"127.0.0.1:{}\"]\nadmin:\n  listen: \"127.0.0.1:{}\"\n  tokens: [{{ token_file: {}, role: read }}]\nworkers: 1\n\
services:\n  - name: web\n    endpoints: [\"{}\", \"127.0.0.1:{dead}\"]\n    health: {{ type: tcp, interval: 50ms, timeout: 100ms, unhealthy_after: 1 }}\n\
routes:\n  - name: web\n    match: {{ path_prefix: /web }}\n    service: web\n  - name: keyed\n    match: {{ path_prefix: /keyed }}\n    service: web\n    auth: app_key\n{}\
apps:\n  - id: shop\n    keys: [\"{KEY}\"]\n",
        ports.listen,
        ports.admin,
        token.display(),
        up.addr(),
        respond_route("hello", "/hello", "hi"),
    );
    let _gw = start(ports, &yaml);
    let auth = [("Authorization", "Bearer live-reader")];
    assert_eq!(call(ports, "GET", "/live", &[], "").status, 401);

    // The dead endpoint is found down by its health checks.
    let down = wait_until(std::time::Duration::from_secs(5), || {
        let eps = json(&call(ports, "GET", "/live/endpoints", &auth, ""));
        eps["endpoints"][1]["health"] == "down"
    });
    assert!(down, "the dead endpoint never showed down");
    let eps = json(&call(ports, "GET", "/live/endpoints", &auth, ""));
    assert_eq!(eps["endpoints"][0]["state"], "up");
    assert_eq!(eps["endpoints"][1]["state"], "down");
    assert_eq!(eps["endpoints"][0]["breaker"], "off");

    // The first `/live` starts the sampling: its window is empty.
    let first = json(&call(ports, "GET", "/live", &auth, ""));
    assert_eq!(first["window_seconds"], 0.0);
    assert_eq!(first["total"]["rate"], 0.0);
    let sampled = wait_until(std::time::Duration::from_secs(5), || {
        json(&call(ports, "GET", "/live", &auth, ""))["window_seconds"].as_f64() > Some(0.0)
    });
    assert!(sampled, "no sample was taken");

    for _ in 0..30 {
        assert_eq!(http_get(ports.addr(), "/web/x", &[]).status, 200);
        assert_eq!(http_get(ports.addr(), "/hello", &[]).status, 200);
    }
    for _ in 0..5 {
        let r = http_get(ports.addr(), "/keyed/x", &[("X-App-Key", KEY)]);
        assert_eq!(r.status, 200);
    }
    assert_eq!(http_get(ports.addr(), "/nowhere", &[]).status, 404);

    let resp = call(ports, "GET", "/live?window=30", &auth, "");
    assert_eq!(resp.status, 200, "{}", resp.body_str());
    assert_eq!(etag(&resp), "\"1\"");
    let live = json(&resp);
    assert_eq!(live["revision"], 1);
    assert_eq!(live["total"]["requests"]["2xx"], 65);
    assert_eq!(live["total"]["requests"]["4xx"], 1);
    assert!(live["total"]["rate"].as_f64().unwrap() > 0.0, "{live}");
    let route = |name: &str| {
        live["routes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no route {name}: {live}"))
    };
    let web = route("web");
    assert_eq!(web["service"], "web");
    assert_eq!(web["window"]["2xx"], 30);
    assert!(web["p50_ms"].as_f64().unwrap() > 0.0);
    assert!(web["p99_ms"].as_f64().unwrap() >= web["p50_ms"].as_f64().unwrap());
    let share = web["gateway_share"].as_f64().unwrap();
    assert!((0.0..1.0).contains(&share), "{web}");
    // A fixed answer is all the gateway's time.
    assert_eq!(route("hello")["gateway_share"], 1.0);
    assert_eq!(route("hello")["service"], serde_json::Value::Null);
    let svc = &live["services"][0];
    assert_eq!(
        (svc["name"].as_str(), svc["requests"]["2xx"].as_u64()),
        (Some("web"), Some(35))
    );
    assert_eq!(
        (svc["endpoints"].as_u64(), svc["endpoints_up"].as_u64()),
        (Some(2), Some(1))
    );
    let app = &live["apps"][0];
    assert_eq!(
        (app["id"].as_str(), app["requests"].as_u64()),
        (Some("shop"), Some(5))
    );
    assert_eq!(app["server_errors"], 0);
    assert!(app["mean_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(live["apps_called"], 1);

    assert_eq!(call(ports, "GET", "/live?window=x", &auth, "").status, 400);
    let doc = json(&call(ports, "GET", "/openapi.json", &[], ""));
    assert!(doc["paths"]["/live"]["get"].is_object());
    assert!(doc["paths"]["/live/endpoints"]["get"].is_object());
    assert!(doc["components"]["schemas"]["Live"].is_object());
}
