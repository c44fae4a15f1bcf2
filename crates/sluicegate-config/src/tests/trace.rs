//! `request_id` and `tracing`: what they decode to, and each mistake named
//! where it is.

use super::{errors, ok};
use crate::*;

const BASE: &str = "listen: 127.0.0.1:8080\n";

#[test]
fn request_id_and_tracing_decode() {
    let c = ok(&format!(
        "{BASE}request_id: {{ header: X-Correlation-Id }}
tracing:
  service_name: edge
  sampling: {{ ratio: 0.25 }}
  otlp: {{ endpoint: \"http://127.0.0.1:4317\", timeout: 2s }}
  queue: 64
"
    ));
    assert_eq!(c.request_id.header, "x-correlation-id");
    assert_eq!(
        c.tracing,
        Some(TracingConfig {
            service_name: "edge".into(),
            ratio: 0.25,
            otlp: OtlpConfig {
                endpoint: "http://127.0.0.1:4317".into(),
                timeout: std::time::Duration::from_secs(2),
                ca_file: None,
            },
            queue: 64,
        })
    );
}

#[test]
fn defaults_are_x_request_id_and_no_tracing() {
    let c = ok(BASE);
    assert_eq!(c.request_id.header, "x-request-id");
    assert_eq!(c.tracing, None);
    let c = ok(&format!(
        "{BASE}tracing: {{ otlp: {{ endpoint: \"http://collector:4317\" }} }}\n"
    ));
    let t = c.tracing.unwrap();
    assert_eq!(
        (t.service_name.as_str(), t.ratio, t.queue),
        ("sluicegate", 0.0, 2048)
    );
    assert_eq!(t.otlp.timeout, std::time::Duration::from_secs(10));
}

#[test]
fn mistakes_are_named_with_their_key() {
    let e = errors(&format!(
        "{BASE}tracing: {{ sampling: {{ ratio: 1.5 }}, otlp: {{ endpoint: \"http://127.0.0.1:4317\" }} }}\n"
    ));
    assert!(
        e[0].contains("tracing.sampling.ratio") && e[0].contains("from 0 to 1"),
        "{e:?}"
    );
    let e = errors(&format!(
        "{BASE}tracing: {{ otlp: {{ endpoint: \"127.0.0.1:4317\" }} }}\n"
    ));
    assert!(e[0].contains("tracing.otlp.endpoint"), "{e:?}");
    let c = ok(&format!(
        "{BASE}tracing: {{ otlp: {{ endpoint: \"https://c:4317\", ca_file: /etc/ca.pem }} }}\n"
    ));
    let otlp = c.tracing.unwrap().otlp;
    assert_eq!(
        otlp.ca_file.as_deref(),
        Some(std::path::Path::new("/etc/ca.pem"))
    );
    let e = errors(&format!(
        "{BASE}tracing: {{ otlp: {{ endpoint: \"http://c:4317\", ca_file: ca.pem }} }}\n"
    ));
    assert!(
        e[0].contains("tracing.otlp.ca_file") && e[0].contains("needs an https:// endpoint"),
        "{e:?}"
    );
    let e = errors(&format!("{BASE}tracing: {{ service_name: x }}\n"));
    assert!(e[0].contains("otlp"), "{e:?}");
    let e = errors(&format!("{BASE}request_id: {{ header: \"x request\" }}\n"));
    assert!(e[0].contains("request_id.header"), "{e:?}");
    let e = errors(&format!("{BASE}request_id: {{ header: traceparent }}\n"));
    assert!(e[0].contains("already uses"), "{e:?}");
    let e = errors(&format!(
        "{BASE}tracing: {{ otlp: {{ endpoint: \"http://a:1\", protocol: http }} }}\n"
    ));
    assert!(e[0].contains("protocol"), "{e:?}");
}
