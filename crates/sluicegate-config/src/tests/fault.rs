//! A route's `fault`: what it decodes to, and each mistake named where it is.

use std::time::Duration;

use super::{errors, ok};
use crate::*;

fn route(fault: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
services:
  - name: s
    endpoints: [\"127.0.0.1:9001\"]
routes:
  - name: r
    service: s
    fault: {fault}
"
    )
}

#[test]
fn both_parts_decode_with_fractions() {
    let c = ok(&route(
        "{ abort: { percent: 1, status: 503 }, delay: { percent: 0.5, duration: 200ms } }",
    ));
    assert_eq!(
        c.routes[0].fault,
        Some(Fault {
            abort: Some(FaultAbort {
                percent: 1.0,
                status: 503
            }),
            delay: Some(FaultDelay {
                percent: 0.5,
                duration: Duration::from_millis(200)
            }),
        })
    );
    let c = ok(&route("{ delay: { percent: 100, duration: 1s } }"));
    let f = c.routes[0].fault.as_ref().unwrap();
    assert!(f.abort.is_none() && f.delay.is_some());
    let c = ok(&route("{ abort: { percent: 0, status: 200 } }"));
    assert_eq!(
        c.routes[0]
            .fault
            .as_ref()
            .unwrap()
            .abort
            .as_ref()
            .unwrap()
            .percent,
        0.0
    );
    assert_eq!(
        ok(&route("{}")).routes[0].fault,
        Some(Fault {
            abort: None,
            delay: None
        })
    );
}

#[test]
fn a_percent_out_of_range_or_malformed_is_named() {
    let expected = "expected a percentage from 0 to 100, e.g. 5 or 0.5";
    for bad in ["100.5", "-1", "1e2", "nan", "5%", ".5", "5.", "lots"] {
        let e = errors(&route(&format!(
            "{{ abort: {{ percent: {bad}, status: 503 }} }}"
        )));
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert!(
            e[0].starts_with("8:32: routes[0].fault.abort.percent: ") && e[0].contains(expected),
            "{bad}: {e:?}"
        );
    }
    let e = errors(&route("{ delay: { percent: 101, duration: 1s } }"));
    assert!(
        e[0].starts_with("8:32: routes[0].fault.delay.percent: ") && e[0].contains(expected),
        "{e:?}"
    );
}

#[test]
fn a_bad_status_or_duration_is_named() {
    for bad in ["199", "600", "abc"] {
        let e = errors(&route(&format!(
            "{{ abort: {{ percent: 1, status: {bad} }} }}"
        )));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            e[0].starts_with("8:43: routes[0].fault.abort.status: ")
                && e[0].contains("an integer from 200 to 599"),
            "{bad}: {e:?}"
        );
    }
    let e = errors(&route("{ delay: { percent: 1, duration: 5 } }"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("8:45: routes[0].fault.delay.duration: "),
        "{e:?}"
    );
}

#[test]
fn unknown_and_missing_keys_are_named() {
    let e = errors(&route("{ abrot: { percent: 1, status: 503 } }"));
    assert_eq!(
        e,
        ["8:14: unknown key \"abrot\" in fault (expected one of: abort, delay)"]
    );
    let e = errors(&route("{ abort: { percent: 1, code: 503 } }"));
    assert_eq!(
        e,
        [
            "8:21: routes[0].fault.abort: missing required key \"status\"",
            "8:35: unknown key \"code\" in fault.abort (expected one of: percent, status)",
        ]
    );
    let e = errors(&route(
        "{ delay: { percent: 1, duration: 1s, jitter: 1s } }",
    ));
    assert_eq!(
        e,
        ["8:49: unknown key \"jitter\" in fault.delay (expected one of: percent, duration)"]
    );
}

#[test]
fn fault_needs_a_service() {
    let text = "listen: 127.0.0.1:8080
routes:
  - name: r
    respond: { status: 200 }
    fault: { abort: { percent: 1, status: 503 } }
";
    assert_eq!(
        errors(text),
        ["5:12: routes[0].fault: only applies to routes with a service"]
    );
}

/// Through the admin API's document form: JSON numbers (fractions too)
/// decode, and a mistake is named by its JSON path.
#[test]
fn json_documents_decode_and_name_the_path() {
    let doc = Document::from_yaml(&route(
        "{ abort: { percent: 0.5, status: 503 }, delay: { percent: 5, duration: 200ms } }",
    ))
    .unwrap();
    let json = doc.to_json();
    // A fraction is kept as its text, a whole number as a number.
    assert_eq!(json["routes"][0]["fault"]["abort"]["percent"], "0.5");
    assert_eq!(json["routes"][0]["fault"]["delay"]["percent"], 5);
    let c = Document::from_json(&json).decode().unwrap();
    let f = c.routes[0].fault.as_ref().unwrap();
    assert_eq!(f.abort.as_ref().unwrap().percent, 0.5);
    assert_eq!(f.delay.as_ref().unwrap().percent, 5.0);
    // A client's JSON number with a fraction.
    let mut sent = json.clone();
    sent["routes"][0]["fault"]["abort"]["percent"] = serde_json::json!(0.25);
    let c = Document::from_json(&sent).decode().unwrap();
    assert_eq!(
        c.routes[0]
            .fault
            .as_ref()
            .unwrap()
            .abort
            .as_ref()
            .unwrap()
            .percent,
        0.25
    );
    let mut bad = json.clone();
    bad["routes"][0]["fault"]["abort"]["status"] = serde_json::json!(600);
    let problems = Document::from_json(&bad).decode().unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "$.routes[0].fault.abort.status");
}
