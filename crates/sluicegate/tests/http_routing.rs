//! Routing end to end through the real binary: `respond` routes, the 404
//! JSON for no route, precedence (exact > longest prefix > regex in file
//! order > no-path route), segment-aware prefixes, host (exact and
//! `*.suffix`), methods and header matches, `strip_prefix` and query strings;
//! matches on query parameters, cookies and header regexes; the host,
//! method, header, query, cookie and prefix matches also on HTTP/2 streams
//! (the host from `:authority`, cookies in several fields); path templates
//! (typed, percent-encoded and Unicode segments, falling through to other
//! routes, `${name}` in rewrite and request headers, `limit.per:
//! param:NAME`) over both protocols.

mod http_common;

use http_common::{assert_json_error, service, Gw};
use sluicegate_testkit::{http_get, KeepAliveClient, Proto, TestUpstream};

#[test]
fn respond_route_and_404_json_for_no_route() {
    let gw = Gw::start(
        r#"routes:
  - name: hello
    match: { path: /hello }
    respond: { status: 200, body: "hello\n", headers: { content-type: text/plain, x-made-by: gw } }
  - name: teapot
    match: { path: /teapot }
    respond: { status: 418, body: "short and stout" }
"#,
    );
    let resp = http_get(gw.addr(), "/hello", &[]);
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body_str(), "hello\n");
    assert_eq!(resp.header("content-type"), Some("text/plain"));
    assert_eq!(resp.header("x-made-by"), Some("gw"));
    assert_eq!(resp.header("content-length"), Some("6"));

    let resp = http_get(gw.addr(), "/teapot", &[]);
    assert_eq!(resp.status, 418);
    assert_eq!(resp.body_str(), "short and stout");

    for path in ["/", "/nope", "/hello/x", "/hellox", "/hello2?x=1"] {
        let resp = http_get(gw.addr(), path, &[]);
        assert_json_error(&resp, 404);
    }
}

#[test]
fn head_on_gateway_answers_has_no_body() {
    let gw = Gw::start(
        "routes:\n  - name: hello\n    match: { path: /hello }\n    respond: { status: 200, body: \"hello\\n\" }\n",
    );
    let mut client = KeepAliveClient::connect(gw.addr()).unwrap();
    let resp = client.request("HEAD", "/hello", &[], b"").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.header("content-length"), Some("6"));
    let resp = client.request("HEAD", "/nope", &[], b"").unwrap();
    assert_eq!(resp.status, 404);
    // Any body bytes after the HEAD responses would break this one.
    let resp = client.get("/hello").unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body_str(), "hello\n");
}

/// Routes are listed least specific first, so file order cannot explain a pass.
#[test]
fn precedence_exact_then_longest_prefix_then_regex_then_catch_all() {
    let gw = Gw::start(
        r#"routes:
  - name: catch-all
    respond: { status: 200, body: "catch-all" }
  - name: regex-a
    match: { path_regex: "^/a/.*" }
    respond: { status: 200, body: "regex-a" }
  - name: regex-digits
    match: { path_regex: "^/r/[0-9]+$" }
    respond: { status: 200, body: "regex-digits" }
  - name: regex-any
    match: { path_regex: "^/r/.*" }
    respond: { status: 200, body: "regex-any" }
  - name: prefix-a
    match: { path_prefix: /a }
    respond: { status: 200, body: "prefix-a" }
  - name: prefix-ab
    match: { path_prefix: /a/b }
    respond: { status: 200, body: "prefix-ab" }
  - name: exact-ab
    match: { path: /a/b }
    respond: { status: 200, body: "exact-ab" }
"#,
    );
    let cases = [
        ("/a/b", "exact-ab"),
        ("/a/b?q=1", "exact-ab"),
        ("/a/b/", "prefix-ab"),
        ("/a/b/c", "prefix-ab"),
        ("/a/bc", "prefix-a"),
        ("/a/x", "prefix-a"),
        ("/a", "prefix-a"),
        ("/ax", "catch-all"),
        ("/r/123", "regex-digits"),
        ("/r/12x", "regex-any"),
        ("/zzz", "catch-all"),
        ("/", "catch-all"),
    ];
    for (path, want) in cases {
        let resp = http_get(gw.addr(), path, &[]);
        assert_eq!(resp.status, 200, "{path}");
        assert_eq!(resp.body_str(), want, "route chosen for {path}");
    }
}

#[test]
fn host_method_and_header_matches() {
    host_method_header(Proto::Http1);
}

#[test]
fn host_method_and_header_matches_over_http2() {
    host_method_header(Proto::H2c);
}

fn host_method_header(proto: Proto) {
    let gw = Gw::start(
        r#"routes:
  - name: api-exact
    match: { host: api.example.com, path_prefix: / }
    respond: { status: 200, body: "host-exact" }
  - name: any-example
    match: { host: "*.example.com", path_prefix: / }
    respond: { status: 200, body: "host-suffix" }
  - name: post-only
    match: { path: /m, methods: [POST, PUT] }
    respond: { status: 200, body: "post-or-put" }
  - name: canary
    match: { path: /h, headers: { x-env: canary } }
    respond: { status: 200, body: "canary" }
"#,
    );
    let host = |h: &str| {
        let resp = proto.get(gw.addr(), "/anything", &[("Host", h)]);
        (resp.status, resp.body_str())
    };
    assert_eq!(host("api.example.com"), (200, "host-exact".into()));
    assert_eq!(host("api.example.com:8080"), (200, "host-exact".into()));
    assert_eq!(host("API.Example.COM"), (200, "host-exact".into()));
    assert_eq!(host("www.example.com"), (200, "host-suffix".into()));
    assert_eq!(host("a.b.example.com"), (200, "host-suffix".into()));
    // `*.example.com` needs at least one more label, and is not a substring match.
    assert_eq!(host("example.com").0, 404);
    assert_eq!(host("badexample.com").0, 404);
    assert_eq!(host("api.example.com.evil.net").0, 404);

    let resp = proto.request(gw.addr(), "POST", "/m", &[], b"x");
    assert_eq!(resp.body_str(), "post-or-put");
    let resp = proto.request(gw.addr(), "PUT", "/m", &[], b"x");
    assert_eq!(resp.body_str(), "post-or-put");
    assert_json_error(&proto.get(gw.addr(), "/m", &[]), 404);
    assert_json_error(&proto.request(gw.addr(), "DELETE", "/m", &[], b""), 404);

    assert_json_error(&proto.get(gw.addr(), "/h", &[]), 404);
    assert_json_error(&proto.get(gw.addr(), "/h", &[("x-env", "stable")]), 404);
    let resp = proto.get(gw.addr(), "/h", &[("X-Env", "canary")]);
    assert_eq!(resp.body_str(), "canary");
}

#[test]
fn segment_aware_prefix_strip_prefix_and_query_preserved() {
    prefixes_and_queries(Proto::Http1);
}

#[test]
fn segment_aware_prefix_strip_prefix_and_query_preserved_over_http2() {
    prefixes_and_queries(Proto::H2c);
}

fn prefixes_and_queries(proto: Proto) {
    let up = TestUpstream::start();
    let svc = service("web", &[up.addr()], "");
    let gw = Gw::start(&format!(
        r#"services:
{svc}
routes:
  - name: web
    match: {{ path_prefix: /web }}
    service: web
    strip_prefix: true
  - name: keep
    match: {{ path_prefix: /keep }}
    service: web
"#
    ));
    let cases = [
        ("/web/x", "/x"),
        ("/web", "/"),
        ("/web/", "/"),
        ("/web/a/b/c", "/a/b/c"),
        ("/web/x?a=1&b=two%20w", "/x?a=1&b=two%20w"),
        ("/web?a=1", "/?a=1"),
        ("/keep/z?k=v&k=w", "/keep/z?k=v&k=w"),
        ("/keep", "/keep"),
    ];
    for (path, want) in cases {
        let seen_before = up.requests_seen();
        let resp = proto.get(gw.addr(), path, &[]);
        assert_eq!(resp.status, 200, "{path}: {}", resp.body_str());
        assert_eq!(up.requests_seen(), seen_before + 1, "{path} forwarded once");
        let seen = up.last_request().expect("upstream got the request");
        assert_eq!(seen.target, want, "upstream target for {path}");
        assert_eq!(seen.method, "GET");
    }
    // Segment-aware: /webx and /keeper are not under /web or /keep.
    let before = up.requests_seen();
    assert_json_error(&proto.get(gw.addr(), "/webx", &[]), 404);
    assert_json_error(&proto.get(gw.addr(), "/keeper", &[]), 404);
    assert_eq!(up.requests_seen(), before, "404s never reach the upstream");
}

#[test]
fn query_cookie_and_header_regex_matches() {
    query_cookie_regex(Proto::Http1);
}

#[test]
fn query_cookie_and_header_regex_matches_over_http2() {
    query_cookie_regex(Proto::H2c);
}

fn query_cookie_regex(proto: Proto) {
    let gw = Gw::start(
        r#"routes:
  - name: by-query
    match: { path_prefix: /m, query: { version: "2", q: "a b/é" } }
    respond: { status: 200, body: "query" }
  - name: by-cookie
    match: { path_prefix: /m, cookies: { beta: "yes" } }
    respond: { status: 200, body: "cookie" }
  - name: by-regex
    match: { path_prefix: /m, headers: { x-client: "~app/v[0-9]+" } }
    respond: { status: 200, body: "regex" }
  - name: tilde
    match: { path: /t, headers: { x-t: "~~lit" } }
    respond: { status: 200, body: "tilde" }
  - name: fallback
    match: { path_prefix: /m }
    respond: { status: 200, body: "plain" }
"#,
    );
    let body = |path: &str, headers: &[(&str, &str)]| {
        let resp = proto.get(gw.addr(), path, headers);
        assert_eq!(resp.status, 200, "{path} {headers:?}: {}", resp.body_str());
        resp.body_str()
    };
    // Query: every parameter, decoded (%XX, + as a space), the first of a name.
    assert_eq!(body("/m/x?version=2&q=a+b%2F%C3%A9", &[]), "query");
    assert_eq!(body("/m?q=a%20b/%c3%a9&x=1&version=%32", &[]), "query");
    assert_eq!(body("/m?version=2", &[]), "plain");
    assert_eq!(body("/m?version=3&version=2&q=a+b%2F%C3%A9", &[]), "plain");
    assert_eq!(body("/m?version=2&q=a+b", &[]), "plain");
    // Cookies: in one field, or in two, the first of a name decides.
    assert_eq!(body("/m", &[("Cookie", "a=1; beta=yes")]), "cookie");
    assert_eq!(
        body("/m", &[("Cookie", "a=1"), ("Cookie", "beta=yes")]),
        "cookie"
    );
    assert_eq!(
        body("/m", &[("Cookie", "beta=no"), ("Cookie", "beta=yes")]),
        "plain"
    );
    assert_eq!(body("/m", &[("Cookie", "beta=yesno")]), "plain");
    assert_eq!(body("/m", &[("X-Beta", "yes")]), "plain");
    // Header regex: anchored, the whole value must match.
    assert_eq!(body("/m", &[("X-Client", "app/v12")]), "regex");
    assert_eq!(body("/m", &[("X-Client", "app/v12 beta")]), "plain");
    assert_eq!(body("/m", &[("X-Client", "myapp/v1")]), "plain");
    assert_eq!(body("/t", &[("X-T", "~lit")]), "tilde");
    assert_json_error(&proto.get(gw.addr(), "/t", &[("X-T", "lit")]), 404);
}

#[test]
fn path_templates() {
    templates(Proto::Http1);
}

#[test]
fn path_templates_over_http2() {
    templates(Proto::H2c);
}

fn templates(proto: Proto) {
    let up = TestUpstream::start();
    let svc = service("web", &[up.addr()], "");
    let gw = Gw::start(&format!(
        r#"services:
{svc}
routes:
  - name: users-prefix
    match: {{ path_prefix: /users }}
    respond: {{ status: 200, body: "users-prefix" }}
  - name: user-by-id
    match: {{ path: "/users/{{id:int}}" }}
    service: web
    rewrite: {{ regex: "^.*$", replacement: "/v2/users/${{id}}" }}
    request_headers: {{ set: {{ x-user-id: "${{id}}" }} }}
  - name: user-by-name
    match: {{ path: "/users/{{name:alpha}}" }}
    service: web
    request_headers: {{ add: {{ x-user-name: "n=${{name}}" }} }}
  - name: item
    match: {{ path: "/items/{{sku:regex([A-Z]{{3}}-[0-9]+)}}/{{rest:*}}" }}
    service: web
    rewrite: {{ regex: "^/items/([^/]+)", replacement: "/catalog/${{rest}}/$1" }}
  - name: echo
    match: {{ path: "/echo/{{v}}" }}
    service: web
    rewrite: {{ regex: "^.*$", replacement: "/e/${{v}}" }}
    request_headers: {{ set: {{ x-v: "${{v}}" }} }}
  - name: buckets
    match: {{ path: "/buckets/{{bucket}}/objects" }}
    limit: {{ rate: 1/h, burst: 1, per: "param:bucket" }}
    respond: {{ status: 200, body: "bucket" }}
"#
    ));
    // (path sent, target upstream saw, header name, its value there)
    let forwarded = [
        ("/users/42", "/v2/users/42", "x-user-id", "42"),
        // Typed on the decoded segment: "%34%32" is 42.
        ("/users/%34%32?q=1", "/v2/users/42?q=1", "x-user-id", "42"),
        (
            "/users/J%C3%BCrgen",
            "/users/J%C3%BCrgen",
            "x-user-name",
            "n=J%C3%BCrgen",
        ),
        (
            "/items/ABC-12/a/b?x=1",
            "/catalog/a/b/ABC-12/a/b?x=1",
            "",
            "",
        ),
        ("/items/ABC-12", "/catalog//ABC-12", "", ""),
        // As routed: an escaped "?" stays escaped, in the path and the field.
        ("/echo/a%3fb%20c", "/e/a%3Fb%20c", "x-v", "a%3Fb%20c"),
        // A value is written as it is: its "$1" is no capture group.
        ("/echo/x$1y", "/e/x$1y", "x-v", "x$1y"),
    ];
    for (path, target, name, value) in forwarded {
        let before = up.requests_seen();
        let resp = proto.get(gw.addr(), path, &[("x-user-id", "spoofed")]);
        assert_eq!(resp.status, 200, "{path}: {}", resp.body_str());
        assert_eq!(up.requests_seen(), before + 1, "{path} forwarded once");
        let seen = up.last_request().unwrap();
        assert_eq!(seen.target, target, "{path}");
        if !name.is_empty() {
            assert_eq!(seen.header_all(name), [value], "{path}");
        }
    }
    // A segment failing its type does not match: on to the prefix, or 404.
    for path in ["/users/bob1", "/users/%FF", "/users/42/x", "/users/"] {
        let resp = proto.get(gw.addr(), path, &[]);
        assert_eq!(resp.body_str(), "users-prefix", "{path}");
    }
    for path in ["/items/abc-12/x", "/items", "/echo", "/echo/a/b"] {
        assert_json_error(&proto.get(gw.addr(), path, &[]), 404);
    }
    // Each bucket has its own counters.
    let status = |p: &str| proto.get(gw.addr(), p, &[]).status;
    assert_eq!(status("/buckets/a/objects"), 200);
    assert_eq!(status("/buckets/a/objects"), 429);
    assert_eq!(
        status("/buckets/%61/objects"),
        429,
        "same value, normalised"
    );
    assert_eq!(status("/buckets/b/objects"), 200);
    assert_eq!(status("/buckets/b/objects"), 429);
}
