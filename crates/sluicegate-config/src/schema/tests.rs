//! Checks that the schemas match the decoders key for key, and that the
//! examples and docs validate against them.

use super::*;

fn props(schema: &Value) -> Vec<String> {
    let mut v: Vec<String> = schema["properties"]
        .as_object()
        .expect("an object schema")
        .keys()
        .cloned()
        .collect();
    v.sort();
    v
}

fn sorted(keys: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    v.sort();
    v
}

/// Building every schema runs `object` over every key list: a key a
/// decoder reads that has no schema panics here (a debug assertion).
#[test]
fn every_decoder_key_has_a_schema_and_no_other_key_is_allowed() {
    let all: serde_json::Map<String, Value> = components()
        .into_iter()
        .map(|(n, s)| (n.to_string(), serde_json::to_value(s).unwrap()))
        .collect();
    let cases: &[(&str, &[&str])] = &[
        ("Service", service::SERVICE_KEYS),
        ("Route", route::ROUTE_KEYS),
        ("App", apps::APP_KEYS),
        ("Plan", apps::PLAN_KEYS),
        ("Config", decode::TOP_KEYS),
        ("HeaderOps", policy::OPS_KEYS),
        ("IpRules", policy::IP_KEYS),
        ("ListenerTls", listen::TLS_KEYS),
    ];
    for (name, keys) in cases {
        assert_eq!(props(&all[*name]), sorted(keys), "{name}");
        assert_eq!(all[*name]["additionalProperties"], json!(false), "{name}");
    }
    let mut plan_item = apps::PLAN_KEYS.to_vec();
    plan_item.push("name");
    assert_eq!(props(&all["PlanItem"]), sorted(&plan_item));
    let settings: Vec<&str> = decode::TOP_KEYS
        .iter()
        .copied()
        .filter(|k| !SECTIONS.contains(k))
        .collect();
    assert_eq!(props(&all["Settings"]), sorted(&settings));
    // Nested ones, reached through the tree.
    let svc = &all["Service"]["properties"];
    assert_eq!(
        props(&svc["timeouts"]),
        sorted(service::SERVICE_TIMEOUT_KEYS)
    );
    assert_eq!(props(&svc["health"]), sorted(health::HEALTH_KEYS));
    assert_eq!(props(&svc["retries"]), sorted(resilience::RETRY_KEYS));
    assert_eq!(props(&svc["breaker"]), sorted(resilience::BREAKER_KEYS));
    assert_eq!(
        props(&svc["ejection"]["anyOf"][1]),
        sorted(resilience::EJECTION_KEYS)
    );
    assert_eq!(
        props(&svc["tls"]["anyOf"][1]),
        sorted(tls::UPSTREAM_TLS_KEYS)
    );
    assert_eq!(
        props(&svc["endpoints"]["items"]["anyOf"][1]),
        sorted(service::ENDPOINT_KEYS)
    );
    let route = &all["Route"]["properties"];
    assert_eq!(props(&route["match"]), sorted(route::matcher::MATCH_KEYS));
    assert_eq!(props(&route["respond"]), sorted(route::RESPOND_KEYS));
    assert_eq!(props(&route["limit"]), sorted(apps::ROUTE_LIMIT_KEYS));
    assert_eq!(props(&route["cors"]), sorted(policy::CORS_KEYS));
    assert_eq!(props(&route["rewrite"]), sorted(route::REWRITE_KEYS));
    assert_eq!(props(&route["fault"]), sorted(route::fault::FAULT_KEYS));
    assert_eq!(props(&route["mirror"]), sorted(route::mirror::MIRROR_KEYS));
    assert_eq!(
        props(&route["forward_auth"]),
        sorted(route::authz::FORWARD_AUTH_KEYS)
    );
    assert_eq!(
        props(&route["ext_authz"]),
        sorted(route::authz::EXT_AUTHZ_KEYS)
    );
    assert_eq!(
        props(&route["aggregate"]["items"]),
        sorted(route::aggregate::PART_KEYS)
    );
    assert_eq!(
        props(&route["compress"]["anyOf"][1]),
        sorted(route::compress::COMPRESS_KEYS)
    );
    assert_eq!(
        props(&route["split"]["items"]),
        sorted(route::split::SPLIT_ENTRY_KEYS)
    );
    assert_eq!(
        props(&route["fault"]["properties"]["abort"]),
        sorted(route::fault::ABORT_KEYS)
    );
    assert_eq!(
        props(&route["fault"]["properties"]["delay"]),
        sorted(route::fault::DELAY_KEYS)
    );
    assert_eq!(
        props(&route["fallback"]),
        sorted(route::fallback::FALLBACK_KEYS)
    );
    assert_eq!(
        props(&route["cache"]),
        sorted(crate::cache::ROUTE_CACHE_KEYS)
    );
    let app = &all["App"]["properties"];
    assert_eq!(props(&app["jwt"]), sorted(jwt::APP_JWT_KEYS));
    assert_eq!(props(&app["mtls"]), sorted(tls::MTLS_KEYS));
    let top = &all["Config"]["properties"];
    assert_eq!(props(&top["admin"]), sorted(listen::ADMIN_KEYS));
    assert_eq!(
        props(&top["admin"]["properties"]["tokens"]["items"]),
        sorted(listen::ADMIN_TOKEN_KEYS)
    );
    assert_eq!(props(&top["limits"]), sorted(decode::LIMITS_KEYS));
    assert_eq!(props(&top["timeouts"]), sorted(decode::TIMEOUTS_KEYS));
    assert_eq!(props(&top["log"]), sorted(decode::LOG_KEYS));
    assert_eq!(props(&top["reload"]), sorted(decode::RELOAD_KEYS));
    assert_eq!(props(&top["app_key"]), sorted(apps::APP_KEY_KEYS));
    assert_eq!(props(&top["jwt"]), sorted(jwt::JWT_KEYS));
    assert_eq!(
        props(&top["jwt"]["properties"]["issuers"]["items"]),
        sorted(jwt::ISSUER_KEYS)
    );
    assert_eq!(props(&top["http2"]), sorted(http2::HTTP2_KEYS));
    assert_eq!(props(&top["cache"]), sorted(crate::cache::CACHE_KEYS));
    assert_eq!(
        props(&top["listen"]["anyOf"][1]["items"]["anyOf"][1]),
        sorted(listen::LISTENER_KEYS)
    );
    let etcd = &top["config_source"]["properties"]["etcd"];
    assert_eq!(props(&top["config_source"]), sorted(source::SOURCE_KEYS));
    assert_eq!(props(etcd), sorted(source::ETCD_KEYS));
    assert_eq!(
        props(&etcd["properties"]["tls"]),
        sorted(source::ETCD_TLS_KEYS)
    );
    assert_eq!(props(&top["cluster"]), sorted(cluster::CLUSTER_KEYS));
    assert_eq!(
        props(&top["cluster"]["properties"]["redis"]),
        sorted(cluster::REDIS_KEYS)
    );
    assert_eq!(
        props(&top["cluster"]["properties"]["etcd"]),
        sorted(source::ETCD_CONNECTION_KEYS)
    );
    let certs = &all["ListenerTls"]["properties"]["certificates"]["items"];
    assert_eq!(props(certs), sorted(listen::CERT_KEYS));
}

/// Every `fields(..)` call of the decoders reads its keys from a named
/// list (not a literal), and a schema here is built from that list.
#[test]
fn every_decoder_reads_its_keys_from_a_named_list() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // The schema's own files, these tests left out.
    let this: String = std::fs::read_dir(src.join("schema"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.ends_with("tests.rs"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let mut calls = 0;
    for dir in [src.clone(), src.join("route")] {
        for e in std::fs::read_dir(dir).unwrap() {
            let file = e.unwrap().path();
            if file.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
            for call in flat.split(" fields(").skip(1) {
                if call.starts_with("cx: &mut Cx") {
                    continue; // the definition
                }
                let args = call.split(')').next().unwrap();
                let last = args
                    .rsplit(',')
                    .map(str::trim)
                    .find(|a| !a.is_empty())
                    .unwrap();
                assert!(
                    last.ends_with("KEYS"),
                    "{}: fields(..{last})",
                    file.display()
                );
                let name = last.rsplit("::").next().unwrap();
                assert!(
                    this.contains(name),
                    "{}: {name} has no schema",
                    file.display()
                );
                calls += 1;
            }
        }
    }
    assert!(calls >= 30, "{calls}");
}
