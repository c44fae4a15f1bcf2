//! The admin API's OpenAPI document, as the real binary serves it, checked
//! against the OpenAPI 3.1 schema by openapi-spec-validator (from the test
//! tools' virtual environment, `scripts/test-venv`) and linted by Redocly
//! CLI (`scripts/test-npm`) with the rules of `tools/npm/redocly.yaml`;
//! and its config schemas checked against the example configs.

mod admin_common;
mod ops_common;
mod venv_common;

use std::process::Command;

use admin_common::*;
use ops_common::*;
use serde_json::{json, Map, Value};
use sluicegate_config::Document;

#[test]
fn the_openapi_document_is_valid_openapi_3_1() {
    let ports = Ports::new();
    let _gw = start(
        ports,
        &format!("{}routes:\n{}", ports.head(), respond_route("r", "/r", "r")),
    );
    let resp = call(ports, "GET", "/openapi.json", &[], "");
    assert_eq!(resp.status, 200);
    let dir = ScratchDir::new("openapi");
    let file = dir.write("openapi.json", &resp.body_str());
    let out = Command::new(venv_common::python())
        .args([
            "-c",
            "import json, sys\nfrom openapi_spec_validator import validate\nvalidate(json.load(open(sys.argv[1])))\nprint('valid')",
        ])
        .arg(&file)
        .output()
        .expect("run the venv's python");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "valid");
}

#[test]
fn the_openapi_document_passes_the_redocly_lint() {
    let ports = Ports::new();
    let _gw = start(
        ports,
        &format!("{}routes:\n{}", ports.head(), respond_route("r", "/r", "r")),
    );
    let resp = call(ports, "GET", "/openapi.json", &[], "");
    assert_eq!(resp.status, 200);
    let dir = ScratchDir::new("openapi-lint");
    let file = dir.write("openapi.json", &resp.body_str());
    let root = repo_root();
    let npm = Command::new(root.join("scripts/test-npm"))
        .output()
        .expect("run scripts/test-npm");
    assert!(
        npm.status.success(),
        "scripts/test-npm: {}",
        String::from_utf8_lossy(&npm.stderr)
    );
    let bin = String::from_utf8_lossy(&npm.stdout).trim().to_string();
    let out = Command::new(format!("{bin}/redocly"))
        .arg("lint")
        .arg("--config")
        .arg(root.join("tools/npm/redocly.yaml"))
        .arg("--format=stylish")
        .arg(&file)
        .env("REDOCLY_TELEMETRY", "off")
        .env("REDOCLY_SUPPRESS_UPDATE_NOTICE", "true")
        .output()
        .expect("run redocly");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    // Every rule is an error (recommended-strict): a pass is a clean lint.
    assert!(said.contains("Your API description is valid"), "{said}");
}

/// Cases for the schema agreement test: every example config and every
/// YAML block of docs/config.md that is a mapping of top-level keys, in
/// the JSON form the API reads and answers (`Document::to_json`), split
/// into the resources the API serves. Each case is (where, schema, value);
/// a schema `Config.KEY` is that top-level key's property schema.
fn schema_cases(top_keys: &Map<String, Value>) -> Vec<(String, String, Value)> {
    let root = repo_root();
    let mut texts = Vec::new();
    for entry in std::fs::read_dir(root.join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            texts.push((path.display().to_string(), text, true));
        }
    }
    let md = std::fs::read_to_string(root.join("docs/config.md")).unwrap();
    for (i, block) in md.split("```yaml\n").skip(1).enumerate() {
        let text = block.split("```").next().unwrap().to_string();
        // The complete example is a whole config; the others are parts.
        let whole = text.starts_with("listen:") && text.contains("\nroutes:");
        texts.push((format!("docs/config.md yaml block {i}"), text, whole));
    }
    let mut cases = Vec::new();
    let mut parts = 0;
    for (name, text, whole) in texts {
        let Ok(doc) = Document::from_yaml(&text) else {
            continue; // an indented fragment (`    tls: true`)
        };
        let Value::Object(top) = doc.to_json() else {
            continue;
        };
        if !top.keys().all(|k| top_keys.contains_key(k)) {
            continue; // a part of a service or route (`health:`, `tls:`)
        }
        if whole {
            cases.push((
                name.clone(),
                "Config".to_string(),
                Value::Object(top.clone()),
            ));
            let settings: Map<String, Value> = top
                .iter()
                .filter(|(k, _)| !["services", "routes", "apps", "plans"].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            cases.push((
                name.clone(),
                "Settings".to_string(),
                Value::Object(settings),
            ));
        } else {
            parts += 1;
        }
        for (key, value) in &top {
            cases.push((
                format!("{name}: {key}"),
                format!("Config.{key}"),
                value.clone(),
            ));
        }
        let items = |key: &str| {
            top.get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        for (section, schema) in [
            ("services", "Service"),
            ("routes", "Route"),
            ("apps", "App"),
        ] {
            for (i, item) in items(section).into_iter().enumerate() {
                cases.push((format!("{name}: {section}[{i}]"), schema.to_string(), item));
            }
        }
        if let Some(Value::Object(plans)) = top.get("plans") {
            for (plan, limits) in plans {
                let mut item = Map::new();
                item.insert("name".to_string(), Value::String(plan.clone()));
                if let Value::Object(l) = limits {
                    item.extend(l.clone());
                }
                cases.push((
                    format!("{name}: plans.{plan}"),
                    "PlanItem".to_string(),
                    Value::Object(item),
                ));
            }
        }
    }
    assert!(parts >= 10, "only {parts} parts of docs/config.md read");
    cases
}

/// The schemas of `/openapi.json` agree with the decoder: every example
/// config, each of its resources, and every top-level part the config
/// reference shows, validates against its schema (Draft 2020-12, by the
/// `jsonschema` package of the test tools' virtual environment); and a
/// value the decoder refuses for its shape is refused by the schema too.
#[test]
fn the_examples_validate_against_the_resource_schemas() {
    let ports = Ports::new();
    let _gw = start(
        ports,
        &format!("{}routes:\n{}", ports.head(), respond_route("r", "/r", "r")),
    );
    let resp = call(ports, "GET", "/openapi.json", &[], "");
    assert_eq!(resp.status, 200);
    let dir = ScratchDir::new("openapi-schemas");
    let doc = dir.write("openapi.json", &resp.body_str());
    let parsed: Value = serde_json::from_str(&resp.body_str()).unwrap();
    let top_keys = parsed["components"]["schemas"]["Config"]["properties"]
        .as_object()
        .expect("the Config schema's properties");
    let mut cases: Vec<Value> = schema_cases(top_keys)
        .into_iter()
        .map(|(name, schema, value)| json!({ "name": name, "schema": schema, "value": value, "valid": true }))
        .collect();
    let n_valid = cases.len();
    assert!(n_valid >= 40, "{n_valid} cases");
    // Shapes the decoder refuses: the schema refuses them as well.
    for (schema, value) in [
        ("Route", json!({ "name": "r", "colour": "blue" })),
        ("Route", json!({ "name": "r", "auth": "password" })),
        ("Service", json!({ "name": "s", "endpoints": [] })),
        (
            "Service",
            json!({ "name": "s", "endpoints": ["127.0.0.1:1"], "balance": "randomly" }),
        ),
        ("App", json!({ "id": "a", "keys": ["short"] })),
        ("PlanItem", json!({ "name": "p", "rate": "fast" })),
        ("Route", json!({ "name": "r", "upgrade": [""] })),
        (
            "Route",
            json!({ "name": "r", "rewrite": { "regex": "a", "replacement": "a b" } }),
        ),
        (
            "Route",
            json!({ "name": "r", "request_headers": { "set": { "x a": "1" } } }),
        ),
        ("Route", json!({ "name": "r", "match": { "path": "/a?b" } })),
        (
            "Route",
            json!({ "name": "r", "match": { "path": "/{a:float}" } }),
        ),
        (
            "Route",
            json!({ "name": "r", "match": { "path": "/{v:regex(a?)}/b?" } }),
        ),
        (
            "Route",
            json!({ "name": "r", "limit": { "rate": "1/s", "per": "param:9" } }),
        ),
        ("Settings", json!({ "listen": "127.0.0.1:1", "routes": [] })),
        ("Config", json!({ "services": [] })),
    ] {
        cases.push(json!({ "name": format!("refused {value}"), "schema": schema, "value": value, "valid": false }));
    }
    // A path template, with a regex holding what plain paths may not.
    let template = json!({
        "name": "t",
        "match": { "path": "/u/{id:int}/{v:regex([a-z]{2}?)}/{rest:*}" },
        "limit": { "rate": "1/s", "per": "param:id" },
        "service": "s",
    });
    cases.push(
        json!({ "name": "a template route", "schema": "Route", "value": template, "valid": true }),
    );
    let file = dir.write("cases.json", &Value::Array(cases).to_string());
    let script = r##"
import json, sys
from jsonschema import Draft202012Validator
doc = json.load(open(sys.argv[1]))
bad = []
for case in json.load(open(sys.argv[2])):
    name = case["schema"]
    if name.startswith("Config."):
        ref = "#/components/schemas/Config/properties/" + name.split(".", 1)[1]
    else:
        ref = "#/components/schemas/" + name
    root = dict(doc)
    root["$ref"] = ref
    errors = list(Draft202012Validator(root).iter_errors(case["value"]))
    if bool(errors) == case["valid"]:
        why = "; ".join(f"{list(e.absolute_path)}: {e.message[:200]}" for e in errors[:3])
        bad.append(f"{case['name']} ({name}): {'valid' if not errors else why}")
print("\n".join(bad) if bad else "ok")
"##;
    let out = Command::new(venv_common::python())
        .args(["-c", script])
        .arg(&doc)
        .arg(&file)
        .output()
        .expect("run the venv's python");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.trim() == "ok",
        "{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
