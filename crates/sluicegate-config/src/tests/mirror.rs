//! A route's `mirror`: what it decodes to, and each mistake named where it is.

use super::{errors, ok};
use crate::*;

fn route(mirror: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
services:
  - name: s
    endpoints: [\"127.0.0.1:9001\"]
  - name: shadow
    endpoints: [\"127.0.0.1:9002\"]
routes:
  - name: r
    service: s
    mirror: {mirror}
"
    )
}

#[test]
fn service_and_percent_decode_with_a_default_of_100() {
    let c = ok(&route("{ service: shadow, percent: 12.5 }"));
    assert_eq!(
        c.routes[0].mirror,
        Some(Mirror {
            service: "shadow".into(),
            percent: 12.5
        })
    );
    let c = ok(&route("{ service: shadow }"));
    assert_eq!(c.routes[0].mirror.as_ref().unwrap().percent, 100.0);
    let c = ok(&route("{ service: s, percent: 0 }"));
    assert_eq!(c.routes[0].mirror.as_ref().unwrap().percent, 0.0);
}

#[test]
fn an_unknown_service_a_bad_percent_and_unknown_keys_are_named() {
    assert_eq!(
        errors(&route("{ service: nope }")),
        ["10:24: routes[0].mirror.service: unknown service \"nope\""]
    );
    for bad in ["100.5", "-1", "half", "5%"] {
        let e = errors(&route(&format!("{{ service: shadow, percent: {bad} }}")));
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert!(
            e[0].starts_with("10:41: routes[0].mirror.percent: ")
                && e[0].contains("a percentage from 0 to 100"),
            "{bad}: {e:?}"
        );
    }
    assert_eq!(
        errors(&route("{ percent: 5 }")),
        ["10:13: routes[0].mirror: missing required key \"service\""]
    );
    assert_eq!(
        errors(&route("{ service: shadow, share: 5 }")),
        ["10:32: unknown key \"share\" in mirror (expected one of: service, percent)"]
    );
}

#[test]
fn mirror_needs_a_service() {
    let text = "listen: 127.0.0.1:8080
services:
  - name: s
    endpoints: [\"127.0.0.1:9001\"]
routes:
  - name: r
    respond: { status: 200 }
    mirror: { service: s }
";
    assert_eq!(
        errors(text),
        ["8:13: routes[0].mirror: only applies to routes with a service"]
    );
}

/// Through the admin API's document form: the keys round-trip, and a
/// mistake is named by its JSON path.
#[test]
fn json_documents_decode_and_name_the_path() {
    let doc = Document::from_yaml(&route("{ service: shadow, percent: 0.5 }")).unwrap();
    let json = doc.to_json();
    assert_eq!(json["routes"][0]["mirror"]["service"], "shadow");
    let c = Document::from_json(&json).decode().unwrap();
    assert_eq!(
        c.routes[0].mirror,
        Some(Mirror {
            service: "shadow".into(),
            percent: 0.5
        })
    );
    let mut bad = json.clone();
    bad["routes"][0]["mirror"]["service"] = serde_json::json!("gone");
    let problems = Document::from_json(&bad).decode().unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "$.routes[0].mirror.service");
    let mut bad = json.clone();
    bad["routes"][0]["mirror"]["percent"] = serde_json::json!(101);
    let problems = Document::from_json(&bad).decode().unwrap_err();
    assert_eq!(problems[0].path, "$.routes[0].mirror.percent");
}
