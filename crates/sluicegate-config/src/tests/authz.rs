//! A route's `forward_auth` and `ext_authz`: what they decode to, and each
//! mistake named where it is.

use std::time::Duration;

use super::{errors, ok};
use crate::*;

fn route(key: &str, value: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
services:
  - name: s
    endpoints: [\"127.0.0.1:9001\"]
  - name: authz
    endpoints: [\"127.0.0.1:9002\"]
routes:
  - name: r
    service: s
    {key}: {value}
"
    )
}

#[test]
fn forward_auth_decodes_with_its_defaults() {
    let c = ok(&route(
        "forward_auth",
        "{ url: \"http://127.0.0.1:9000/check\" }",
    ));
    let f = c.routes[0].forward_auth.as_deref().unwrap();
    assert_eq!(
        f.target,
        AuthTarget::Address {
            addr: "127.0.0.1:9000".parse().unwrap(),
            https: false
        }
    );
    assert_eq!(f.path, "/check");
    assert_eq!(f.request_headers, ["authorization", "cookie"]);
    assert!(f.response_headers.is_empty());
    assert_eq!(f.cache, Duration::ZERO);
    assert_eq!(f.timeout, Duration::from_secs(1));
    assert_eq!(f.on_error, OnAuthError::Deny);
    let c = ok(&route(
        "forward_auth",
        "{ url: \"http://authz/v1\", request_headers: [Authorization, X-Api-Key], response_headers: [X-User-Id], cache: 30s, timeout: 200ms, on_error: allow }",
    ));
    let f = c.routes[0].forward_auth.as_deref().unwrap();
    assert_eq!(f.target, AuthTarget::Service("authz".into()));
    assert_eq!(f.request_headers, ["authorization", "x-api-key"]);
    assert_eq!(f.response_headers, ["x-user-id"]);
    assert_eq!(f.cache, Duration::from_secs(30));
    assert_eq!(f.timeout, Duration::from_millis(200));
    assert_eq!(f.on_error, OnAuthError::Allow);
}

#[test]
fn forward_auth_mistakes_are_named() {
    let e = errors(&route(
        "forward_auth",
        "{ url: \"http://auth.example.com/\" }",
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("10:26: routes[0].forward_auth.url: "),
        "{e:?}"
    );
    let e = errors(&route(
        "forward_auth",
        "{ url: \"http://127.0.0.1/\", response_headers: [x-a, X-A, host], on_error: maybe, cache: soon }",
    ));
    assert_eq!(e.len(), 4, "{e:?}");
    assert!(
        e.iter()
            .any(|e| e.contains("forward_auth.response_headers[1]: \"X-A\" is listed twice")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.contains("forward_auth.response_headers[2]: \"host\"")),
        "{e:?}"
    );
    assert!(
        e.iter().any(|e| e.contains("forward_auth.on_error")),
        "{e:?}"
    );
    assert!(e.iter().any(|e| e.contains("forward_auth.cache")), "{e:?}");
    let e = errors(&route("forward_auth", "{ timeout: 1s }"));
    assert!(
        e[0].contains("routes[0].forward_auth: missing required key \"url\""),
        "{e:?}"
    );
}

#[test]
fn ext_authz_decodes_and_names_its_service() {
    let c = ok(&route("ext_authz", "{ service: authz, timeout: 200ms }"));
    assert_eq!(
        c.routes[0].ext_authz,
        Some(ExtAuthz {
            service: "authz".into(),
            timeout: Duration::from_millis(200),
            on_error: OnAuthError::Deny,
        })
    );
    assert_eq!(
        errors(&route("ext_authz", "{ service: nope }")),
        ["10:27: routes[0].ext_authz.service: unknown service \"nope\""]
    );
}
