//! A route's `fallback` and `fallback_on`: what they decode to, and each
//! mistake named where it is.

use super::{errors, ok};
use crate::*;

fn route(extra: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
services:
  - name: s
    endpoints: [\"127.0.0.1:9001\"]
  - name: backup
    endpoints: [\"127.0.0.1:9002\"]
routes:
  - name: r
    service: s
{extra}"
    )
}

#[test]
fn a_fixed_answer_and_a_service_decode() {
    let c = ok(&route(
        "    fallback: { status: 200, body: '{\"items\":[]}', headers: { content-type: application/json } }\n    fallback_on: [5xx, 503]\n",
    ));
    assert_eq!(
        c.routes[0].fallback,
        Some(Fallback {
            answer: FallbackAnswer::Respond {
                status: 200,
                body: "{\"items\":[]}".into(),
                headers: vec![("content-type".into(), "application/json".into())],
            },
            on: vec![FallbackOn::ServerError, FallbackOn::Status(503)],
        })
    );
    let c = ok(&route("    fallback: { service: backup }\n"));
    assert_eq!(
        c.routes[0].fallback,
        Some(Fallback {
            answer: FallbackAnswer::Service("backup".into()),
            on: vec![],
        })
    );
    // A body alone answers 200; repeated entries count once.
    let c = ok(&route(
        "    fallback: { body: sorry }\n    fallback_on: [5XX, 5xx]\n",
    ));
    let f = c.routes[0].fallback.as_ref().unwrap();
    assert!(matches!(
        f.answer,
        FallbackAnswer::Respond { status: 200, .. }
    ));
    assert_eq!(f.on, [FallbackOn::ServerError]);
    assert_eq!(ok(&route("")).routes[0].fallback, None);
}

#[test]
fn a_bad_status_body_or_header_is_named() {
    for bad in ["199", "600", "abc"] {
        let e = errors(&route(&format!("    fallback: {{ status: {bad} }}\n")));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("10:25: routes[0].fallback.status: ")
                && e[0].contains("an integer from 200 to 599"),
            "{bad}: {e:?}"
        );
    }
    let e = errors(&route("    fallback: { status: 204, body: x }\n"));
    assert_eq!(
        e,
        ["10:36: routes[0].fallback.body: a 204 response cannot have a body"]
    );
    let e = errors(&route(
        "    fallback: { status: 503, headers: { content-length: '3' } }\n",
    ));
    assert_eq!(
        e,
        ["10:41: routes[0].fallback.headers: \"content-length\" is set by the gateway, remove it"]
    );
}

#[test]
fn exactly_one_of_a_fixed_answer_or_a_service() {
    let e = errors(&route("    fallback: { service: backup, status: 503 }\n"));
    assert_eq!(
        e,
        ["10:26: routes[0].fallback.service: give either service or a fixed answer (status, body, headers), not both (status is given too)"]
    );
    let e = errors(&route("    fallback: {}\n"));
    assert_eq!(
        e,
        ["10:15: routes[0].fallback: missing \"service\" (another service) or \"status\", \"body\", \"headers\" (a fixed answer)"]
    );
    let e = errors(&route("    fallback: { service: nowhere }\n"));
    assert_eq!(
        e,
        ["10:26: routes[0].fallback.service: unknown service \"nowhere\""]
    );
    let e = errors(&route("    fallback: { service: s }\n"));
    assert_eq!(
        e,
        ["10:26: routes[0].fallback.service: is the route's own service (a fallback is another one)"]
    );
    let e = errors(&route("    fallback: { servise: backup }\n"));
    assert_eq!(
        e,
        [
            "10:15: routes[0].fallback: missing \"service\" (another service) or \"status\", \"body\", \"headers\" (a fixed answer)",
            "10:17: unknown key \"servise\" in fallback (expected one of: status, body, headers, service)",
        ]
    );
}

#[test]
fn fallback_on_takes_5xx_or_server_error_statuses_and_needs_fallback() {
    for bad in ["4xx", "404", "600", "5x"] {
        let e = errors(&route(&format!(
            "    fallback: {{ status: 503 }}\n    fallback_on: [{bad}]\n"
        )));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("11:19: routes[0].fallback_on[0]: ")
                && e[0].contains("5xx or a status from 500 to 599"),
            "{bad}: {e:?}"
        );
    }
    let e = errors(&route("    fallback_on: [5xx]\n"));
    assert_eq!(
        e,
        ["10:18: routes[0].fallback_on: needs fallback (what answers instead)"]
    );
    let e = errors(&route(
        "    fallback: { status: 503 }\n    fallback_on: 5xx\n",
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("11:18: routes[0].fallback_on: "), "{e:?}");
}

#[test]
fn fallback_needs_a_service() {
    let text = "listen: 127.0.0.1:8080
routes:
  - name: r
    respond: { status: 200 }
    fallback: { status: 503 }
";
    assert_eq!(
        errors(text),
        ["5:15: routes[0].fallback: only applies to routes with a service"]
    );
}

/// Through the admin API's document form: the same keys from JSON, and a
/// mistake named by its JSON path.
#[test]
fn json_documents_decode_and_name_the_path() {
    let doc = Document::from_yaml(&route(
        "    fallback: { status: 503, body: later }\n    fallback_on: [5xx, 502]\n",
    ))
    .unwrap();
    let json = doc.to_json();
    assert_eq!(json["routes"][0]["fallback"]["status"], 503);
    assert_eq!(
        json["routes"][0]["fallback_on"],
        serde_json::json!(["5xx", 502])
    );
    let c = Document::from_json(&json).decode().unwrap();
    assert_eq!(
        c.routes[0].fallback.as_ref().unwrap().on,
        [FallbackOn::ServerError, FallbackOn::Status(502)]
    );
    let mut sent = json.clone();
    sent["routes"][0]["fallback"] = serde_json::json!({ "service": "backup" });
    let c = Document::from_json(&sent).decode().unwrap();
    assert_eq!(
        c.routes[0].fallback.as_ref().unwrap().answer,
        FallbackAnswer::Service("backup".into())
    );
    let mut bad = json.clone();
    bad["routes"][0]["fallback"]["service"] = serde_json::json!("nowhere");
    let problems = Document::from_json(&bad).decode().unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "$.routes[0].fallback.service");
    let mut bad = json;
    bad["routes"][0]["fallback_on"] = serde_json::json!([404]);
    let problems = Document::from_json(&bad).decode().unwrap_err();
    assert_eq!(problems[0].path, "$.routes[0].fallback_on[0]");
}
