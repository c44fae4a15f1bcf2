//! The admin API's resources on the real binary: a service and a route
//! created one at a time then serving traffic, lists paged and filtered,
//! merge patches, deletes (refused while referenced), plans, apps whose
//! keys are only ever shown as fingerprints, and the settings.

mod admin_common;
mod ops_common;

use admin_common::*;
use ops_common::*;
use serde_json::json;
use sluicegate_testkit::{http_get, TestUpstream};

fn start_bare(ports: Ports) -> sluicegate_testkit::Gateway {
    start(
        ports,
        &format!(
            "{}routes:\n{}",
            ports.head(),
            respond_route("hello", "/hello", "hi")
        ),
    )
}

fn put(ports: Ports, path: &str, body: serde_json::Value) -> sluicegate_testkit::Response {
    call(ports, "PUT", path, &[], &body.to_string())
}

#[test]
fn services_and_routes_one_at_a_time() {
    let up = TestUpstream::start_with_id("up");
    let ports = Ports::new();
    let _gw = start_bare(ports);

    let svc = put(
        ports,
        "/services/api",
        json!({ "endpoints": [up.addr().to_string()] }),
    );
    assert_eq!(svc.status, 201, "{}", svc.body_str());
    let route = json!({ "match": { "path_prefix": "/api" }, "service": "api" });
    let created = put(ports, "/routes/api", route.clone());
    assert_eq!(created.status, 201, "{}", created.body_str());
    assert_eq!(json(&created)["revision"], 3);
    let r = http_get(ports.addr(), "/api/x", &[]);
    assert_eq!((r.status, r.header("x-upstream-id")), (200, Some("up")));
    // The same PUT again replaces it.
    assert_eq!(put(ports, "/routes/api", route).status, 200);

    // Lists: paged and filtered by name.
    let all = json(&call(ports, "GET", "/routes", &[], ""));
    assert_eq!(all["total"], 2);
    assert_eq!(all["items"][1]["name"], "api");
    let page = json(&call(ports, "GET", "/routes?limit=1&offset=1", &[], ""));
    assert_eq!(
        (
            page["items"].as_array().unwrap().len(),
            page["total"].clone()
        ),
        (1, json!(2))
    );
    assert_eq!(page["items"][0]["name"], "api");
    let named = json(&call(ports, "GET", "/routes?name=hel", &[], ""));
    assert_eq!(named["items"][0]["name"], "hello");
    assert_eq!(named["total"], 1);
    assert_eq!(call(ports, "GET", "/routes?limit=x", &[], "").status, 400);
    let one = call(ports, "GET", "/services/api", &[], "");
    assert_eq!(json(&one)["endpoints"][0], up.addr().to_string());
    assert_eq!(call(ports, "GET", "/routes/nope", &[], "").status, 404);

    // A merge patch moves the route; a name in the body must match the path.
    let moved = call(
        ports,
        "PATCH",
        "/routes/api",
        &[],
        "{\"match\":{\"path_prefix\":\"/v2\"}}",
    );
    assert_eq!(moved.status, 200, "{}", moved.body_str());
    let revision = json(&moved)["revision"].as_u64().unwrap();
    assert_eq!(
        moved.header("etag"),
        Some(format!("\"{revision}\"").as_str())
    );
    assert_eq!(http_get(ports.addr(), "/v2/x", &[]).status, 200);
    assert_eq!(http_get(ports.addr(), "/api/x", &[]).status, 404);
    let renamed = call(ports, "PATCH", "/routes/api", &[], "{\"name\":\"other\"}");
    assert_eq!(renamed.status, 400);
    assert_eq!(json(&renamed)["problems"][0]["path"], "$.name");
    // A patch needs an item to patch: none is made.
    let absent = call(ports, "PATCH", "/routes/nope", &[], "{\"service\":\"api\"}");
    assert_eq!(absent.status, 404);
    assert_eq!(json(&absent)["error"], "no routes named \"nope\"");
    assert_eq!(call(ports, "GET", "/routes/nope", &[], "").status, 404);
    // A bad field is refused with its path in the whole config.
    let bad = call(
        ports,
        "PATCH",
        "/routes/api",
        &[],
        "{\"strip_prefix\":\"maybe\"}",
    );
    assert_eq!(bad.status, 400);
    assert_eq!(
        json(&bad)["problems"][0]["path"],
        "$.routes[1].strip_prefix"
    );
    // So is a bad path template, and a limit naming no parameter of it.
    let bad = call(
        ports,
        "PATCH",
        "/routes/api",
        &[],
        "{\"match\":{\"path_prefix\":null,\"path\":\"/v2/{id:float}\"}}",
    );
    assert_eq!(bad.status, 400);
    assert_eq!(json(&bad)["problems"][0]["path"], "$.routes[1].match.path");
    let bad = call(
        ports,
        "PATCH",
        "/routes/api",
        &[],
        "{\"match\":{\"path_prefix\":null,\"path\":\"/v2/{id:int}\"},\"limit\":{\"rate\":\"1/s\",\"per\":\"param:uid\"}}",
    );
    assert_eq!(bad.status, 400, "{}", bad.body_str());
    assert_eq!(json(&bad)["problems"][0]["path"], "$.routes[1].limit.per");

    // A service still in use cannot go; once its route is gone it can.
    let in_use = call(ports, "DELETE", "/services/api", &[], "");
    assert_eq!(in_use.status, 400, "{}", in_use.body_str());
    assert_eq!(json(&in_use)["problems"][0]["path"], "$.routes[1].service");
    assert_eq!(call(ports, "DELETE", "/routes/api", &[], "").status, 200);
    assert_eq!(http_get(ports.addr(), "/v2/x", &[]).status, 404);
    assert_eq!(call(ports, "DELETE", "/services/api", &[], "").status, 200);
    assert_eq!(call(ports, "DELETE", "/services/api", &[], "").status, 404);
    assert_eq!(json(&call(ports, "GET", "/services", &[], ""))["total"], 0);
}

#[test]
fn app_keys_are_write_only_and_plans_are_named() {
    let up = TestUpstream::start();
    let ports = Ports::new();
    let _gw = start_bare(ports);
    assert_eq!(
        put(
            ports,
            "/services/s",
            json!({ "endpoints": [up.addr().to_string()] })
        )
        .status,
        201
    );
    let route = json!({ "match": { "path_prefix": "/k" }, "service": "s", "auth": "app_key" });
    assert_eq!(put(ports, "/routes/k", route).status, 201);
    let plan = put(ports, "/plans/gold", json!({ "rate": "100/s" }));
    assert_eq!(plan.status, 201, "{}", plan.body_str());
    assert_eq!(
        json(&call(ports, "GET", "/plans/gold", &[], "")),
        json!({ "name": "gold", "rate": "100/s" })
    );

    let key = "secret-key-0123456789";
    let app = put(
        ports,
        "/apps/shop",
        json!({ "keys": [key], "plan": "gold" }),
    );
    assert_eq!(app.status, 201, "{}", app.body_str());
    let with_key = [("X-App-Key", key)];
    assert_eq!(http_get(ports.addr(), "/k/1", &with_key).status, 200);

    // Reads show a fingerprint, never the key.
    for path in ["/apps/shop", "/apps", "/config"] {
        let text = call(ports, "GET", path, &[], "").body_str();
        assert!(!text.contains(key), "{path}: {text}");
        assert!(text.contains("sha256:"), "{path}: {text}");
    }
    let yaml = call(
        ports,
        "GET",
        "/config",
        &[("Accept", "application/yaml")],
        "",
    )
    .body_str();
    assert!(!yaml.contains(key), "{yaml}");

    // An app read and written back keeps its key; a patch too.
    let shown = json(&call(ports, "GET", "/apps/shop", &[], ""));
    assert_eq!(put(ports, "/apps/shop", shown).status, 200);
    assert_eq!(
        call(ports, "PATCH", "/apps/shop", &[], "{\"plan\":null}").status,
        200
    );
    assert_eq!(http_get(ports.addr(), "/k/1", &with_key).status, 200);
    // So does the whole config read and written back.
    let (doc, tag) = config(ports);
    assert_eq!(
        call(
            ports,
            "PUT",
            "/config",
            &[("If-Match", &tag)],
            &doc.to_string()
        )
        .status,
        200
    );
    assert_eq!(http_get(ports.addr(), "/k/1", &with_key).status, 200);
    assert_eq!(
        http_get(ports.addr(), "/k/1", &[("X-App-Key", "other-key-000")]).status,
        401
    );
}

#[test]
fn settings_and_certificates() {
    let ports = Ports::new();
    let _gw = start_bare(ports);
    let s = json(&call(ports, "GET", "/settings", &[], ""));
    assert_eq!(s["workers"], 1);
    assert!(s.get("routes").is_none());
    let patched = call(
        ports,
        "PATCH",
        "/settings",
        &[],
        "{\"log\":{\"level\":\"debug\"}}",
    );
    assert_eq!(patched.status, 200, "{}", patched.body_str());
    let s = json(&call(ports, "GET", "/settings", &[], ""));
    assert_eq!(
        (s["log"]["level"].clone(), s["workers"].clone()),
        (json!("debug"), json!(1))
    );
    // A PUT replaces them all: what it leaves out goes back to its default.
    let mut all = s.clone();
    all.as_object_mut().unwrap().remove("log");
    assert_eq!(put(ports, "/settings", all).status, 200);
    assert!(json(&call(ports, "GET", "/settings", &[], ""))
        .get("log")
        .is_none());
    let wrong = call(ports, "PATCH", "/settings", &[], "{\"routes\":[]}");
    assert_eq!(json(&wrong)["problems"][0]["path"], "$.routes");
    let certs = json(&call(ports, "GET", "/certificates", &[], ""));
    assert_eq!(certs["total"], 0);
}

/// Found by schemathesis: a list's bad `limit` or `offset` answered a `400`
/// without the `problems` the document gives every `400`.
#[test]
fn a_bad_page_is_a_400_with_its_problems() {
    let ports = Ports::new();
    let _gw = start_bare(ports);
    for query in ["offset=null", "limit=-1", "limit=x&offset=1"] {
        let resp = call(ports, "GET", &format!("/routes?{query}"), &[], "");
        assert_eq!(resp.status, 400, "{query}: {}", resp.body_str());
        let body = json(&resp);
        assert_eq!(body["status"], 400);
        let problems = body["problems"].as_array().expect("problems");
        assert_eq!(problems[0]["path"], "$", "{body}");
        assert!(
            problems[0]["message"]
                .as_str()
                .unwrap()
                .contains("whole numbers"),
            "{body}"
        );
    }
}
