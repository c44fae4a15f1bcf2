//! Header policies end to end: a route's `request_headers` and
//! `response_headers` (`set`, `add`, `remove`) as the upstream and the
//! client see them, on proxied and `respond` routes; path rewrites after
//! `strip_prefix`. The same over HTTP/1.1 and HTTP/2 streams (h2c).

mod http_common;

use http_common::{service, Gw};
use sluicegate_testkit::{Proto, TestUpstream};

#[test]
fn request_and_response_headers_are_set_added_and_removed() {
    header_ops(Proto::Http1);
}

#[test]
fn request_and_response_headers_are_set_added_and_removed_over_http2() {
    header_ops(Proto::H2c);
}

fn header_ops(proto: Proto) {
    let up = TestUpstream::start_with_id("up1");
    let gw = Gw::start(&format!(
        r#"services:
{}
routes:
  - name: api
    match: {{ path_prefix: /api }}
    service: s
    request_headers:
      set: {{ X-Env: prod }}
      add: {{ X-Tag: gw }}
      remove: [x-debug, cookie]
    response_headers:
      set: {{ Cache-Control: no-store }}
      add: {{ X-Served-By: sluicegate }}
      remove: [x-upstream-id]
  - name: hello
    match: {{ path: /hello }}
    respond: {{ body: hi }}
    response_headers:
      add: {{ X-Served-By: sluicegate }}
  - name: plain
    match: {{ path_prefix: /plain }}
    service: s
"#,
        service("s", &[up.addr()], "")
    ));
    let r = proto.get(
        gw.addr(),
        "/api/x?header=cache-control:max-age%3D60&header=x-keep:1",
        &[
            ("X-Env", "dev"),
            ("X-Env", "qa"),
            ("X-Tag", "client"),
            ("X-Debug", "1"),
            ("Cookie", "a=b"),
            ("X-Other", "kept"),
        ],
    );
    assert_eq!(r.status, 200);
    let seen = up.last_request().unwrap();
    assert_eq!(seen.header_all("x-env"), vec!["prod"]);
    assert_eq!(seen.header_all("x-tag"), vec!["client", "gw"]);
    assert_eq!(seen.header("x-debug"), None);
    assert_eq!(seen.header("cookie"), None);
    assert_eq!(seen.header("x-other"), Some("kept"));
    // The upstream asked for max-age=60 and sent its id: both replaced/dropped.
    assert_eq!(r.header_all("cache-control"), vec!["no-store"]);
    assert_eq!(r.header("x-served-by"), Some("sluicegate"));
    assert_eq!(r.header("x-upstream-id"), None);
    assert_eq!(r.header("x-keep"), Some("1"));

    let r = proto.get(gw.addr(), "/hello", &[]);
    assert_eq!(r.body_str(), "hi");
    assert_eq!(r.header("x-served-by"), Some("sluicegate"));

    // Other routes are untouched.
    let r = proto.get(gw.addr(), "/plain", &[("X-Debug", "1")]);
    assert_eq!(up.last_request().unwrap().header("x-debug"), Some("1"));
    assert_eq!(r.header("x-upstream-id"), Some("up1"));
    assert_eq!(r.header("x-served-by"), None);
}

#[test]
fn rewrite_after_strip_prefix_keeps_the_query() {
    rewrites(Proto::Http1);
}

#[test]
fn rewrite_after_strip_prefix_keeps_the_query_over_http2() {
    rewrites(Proto::H2c);
}

fn rewrites(proto: Proto) {
    let up = TestUpstream::start();
    let gw = Gw::start(&format!(
        r#"services:
{}
routes:
  - name: v1
    match: {{ path_prefix: /v1 }}
    service: s
    strip_prefix: true
    rewrite: {{ regex: "^/users/([0-9]+)(/.*)?$", replacement: "/accounts/$1$2" }}
  - name: legacy
    match: {{ path_prefix: /legacy }}
    service: s
    rewrite: {{ regex: "^/legacy", replacement: "/new" }}
"#,
        service("s", &[up.addr()], "")
    ));
    let cases = [
        ("/v1/users/42?x=1", "/accounts/42?x=1"),
        ("/v1/users/42/orders", "/accounts/42/orders"),
        ("/v1/users/abc", "/users/abc"),
        ("/v1", "/"),
        ("/legacy/a/../b", "/new/b"),
        ("/legacy", "/new"),
    ];
    for (sent, seen) in cases {
        let r = proto.get(gw.addr(), sent, &[]);
        assert_eq!(r.status, 200, "{sent}");
        assert_eq!(up.last_request().unwrap().target, seen, "{sent}");
    }
}
