//! `forward_auth` on the real binary, against a small auth service on
//! loopback (`tests/fixtures/forward_auth.py`, which decides by the
//! Authorization header and counts its hits per value): an allowed
//! request goes upstream with the service's headers copied (a client's
//! forged copies removed); denials (401 with WWW-Authenticate and a body,
//! 302 with Location) reach the client as sent; the decision cache saves
//! the service's hits until it expires; a slow service follows on_error
//! (deny: 503, allow: through without the copied headers), as do an
//! unreachable service and an answer too long to read; an HTTP/2 client is
//! checked the same way; a gRPC call denied gets the gRPC status of the
//! service's HTTP status (401 UNAUTHENTICATED, 403 PERMISSION_DENIED),
//! not its body. Each case is checked in `/metrics` too
//! (`sluicegate_authz_*`).

mod grpc_common;
mod http_common;
mod venv_common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http_common::{admin_metric, service, wait_until, Gw};
use sluicegate_testkit::{free_port, http_get, Proto, TestUpstream};

/// The auth service; killed on drop.
struct Auth {
    child: Child,
    port: u16,
}

impl Auth {
    fn start() -> Auth {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/forward_auth.py"
        );
        let mut child = Command::new("python3")
            .arg(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the auth service");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        let _ = BufReader::new(out).read_line(&mut line);
        let port = line.trim().parse().expect("the auth service's port");
        Auth { child, port }
    }

    /// How many checks it answered for this Authorization value.
    fn hits(&self, auth: &str) -> usize {
        let q = auth.replace(' ', "%20");
        let r = http_get(("127.0.0.1", self.port), &format!("/hits?auth={q}"), &[]);
        r.body_str().trim().parse().unwrap()
    }
}

impl Drop for Auth {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct World {
    auth: Auth,
    up: TestUpstream,
    gw: Gw,
    admin: u16,
}

impl World {
    /// A `sluicegate_authz_*` counter of forward auth on `route`; `rest`:
    /// the labels after `check`, with their leading comma.
    fn counted(&self, family: &str, route: &str, rest: &str) -> u64 {
        let series =
            format!("sluicegate_authz_{family}{{route=\"{route}\",check=\"forward_auth\"{rest}}}");
        admin_metric(self.admin, &series)
    }
}

/// An auth service, an upstream and a gateway, for one test.
fn world() -> World {
    {
        let auth = Auth::start();
        let up = TestUpstream::start();
        let url = format!("http://127.0.0.1:{}/check", auth.port);
        let route = |name: &str, extra: &str| {
            format!(
                "  - name: {name}\n    match: {{ path_prefix: /{name} }}\n    strip_prefix: true\n    service: s\n    forward_auth: {{ url: \"{url}\", response_headers: [x-user-id, x-tenant]{extra} }}\n"
            )
        };
        // Nothing listens there.
        let down = format!(
            "  - name: down\n    match: {{ path_prefix: /down }}\n    strip_prefix: true\n    service: s\n    forward_auth: {{ url: \"http://127.0.0.1:{}/check\", timeout: 2s }}\n",
            free_port()
        );
        let admin = free_port();
        let rest = format!(
            "admin: {{ listen: \"127.0.0.1:{admin}\" }}\nservices:\n{}routes:\n{}{}{}{}{down}",
            service("s", &[up.addr()], ""),
            route("fa", ""),
            route("cached", ", cache: 300ms"),
            route("strict", ", timeout: 200ms, on_error: deny"),
            route("lenient", ", timeout: 200ms, on_error: allow"),
        );
        let gw = Gw::start(&rest);
        World {
            auth,
            up,
            gw,
            admin,
        }
    }
}

/// The upstream's last request's value of `name`, if it had one.
fn upstream_header(up: &TestUpstream, name: &str) -> Option<String> {
    let r = up.last_request()?;
    r.headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

#[test]
fn an_allowed_request_carries_the_services_headers_and_not_the_clients() {
    let w = &world();
    let r = http_get(
        w.gw.addr(),
        "/fa/echo/allowed?q=1",
        &[
            ("authorization", "Bearer good-1"),
            ("x-user-id", "mallory"),
            ("x-tenant", "forged"),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body_str());
    let seen =
        w.up.last_requests()
            .into_iter()
            .rev()
            .find(|s| s.target == "/echo/allowed?q=1")
            .expect("the upstream got the request");
    let values = |name: &str| -> Vec<String> {
        seen.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .collect()
    };
    assert_eq!(values("x-user-id"), ["alice"]);
    assert_eq!(values("x-tenant"), ["t1"]);
    // Only the listed headers are copied.
    assert!(values("x-seen-uri").is_empty());
    assert_eq!(w.auth.hits("Bearer good-1"), 1);
    assert_eq!(w.counted("decisions_total", "fa", ",decision=\"allow\""), 1);
    assert_eq!(w.counted("decisions_total", "fa", ",decision=\"deny\""), 0);
}

#[test]
fn denials_reach_the_client_as_the_service_sent_them() {
    let w = &world();
    let before = w.up.requests_seen();
    let r = http_get(
        w.gw.addr(),
        "/fa/echo/x",
        &[("authorization", "Bearer nobody")],
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"test\""));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.body_str(), "{\"error\":\"who are you\"}");
    let r = http_get(
        w.gw.addr(),
        "/fa/echo/x",
        &[("authorization", "Bearer login-1")],
    );
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/login?back=1"));
    // No credentials at all: the service decides that too.
    let r = http_get(w.gw.addr(), "/fa/echo/x", &[]);
    assert_eq!(r.status, 401);
    assert_eq!(
        w.up.requests_seen(),
        before,
        "a denied request went upstream"
    );
    assert_eq!(w.counted("decisions_total", "fa", ",decision=\"deny\""), 3);
    assert_eq!(w.counted("decisions_total", "fa", ",decision=\"allow\""), 0);
    // A denial too long to pass on (over 64 KiB) is a failed check.
    let r = http_get(
        w.gw.addr(),
        "/fa/echo/x",
        &[("authorization", "Bearer huge")],
    );
    assert_eq!(r.status, 503, "{}", r.body_str());
    assert_eq!(w.counted("errors_total", "fa", ",error=\"bad_answer\""), 1);
    assert_eq!(w.counted("on_error_total", "fa", ",action=\"deny\""), 1);
}

#[test]
fn the_cache_saves_the_services_hits_until_it_expires() {
    let w = &world();
    let token = "Bearer good-cached";
    for _ in 0..5 {
        let r = http_get(w.gw.addr(), "/cached/echo/c", &[("authorization", token)]);
        assert_eq!(r.status, 200);
        assert_eq!(
            upstream_header(&w.up, "x-user-id").as_deref(),
            Some("alice")
        );
    }
    // Two workers may each have asked once before the first answer was
    // cached... but they share one cache: one or two asks, not five.
    let first = w.auth.hits(token);
    assert!((1..=2).contains(&first), "{first} hits");
    // Another URI is another question.
    let r = http_get(w.gw.addr(), "/cached/echo/d", &[("authorization", token)]);
    assert_eq!(r.status, 200);
    assert_eq!(w.auth.hits(token), first + 1);
    // Denials are cached too.
    let deny = "Bearer nobody-cached";
    for _ in 0..3 {
        let r = http_get(w.gw.addr(), "/cached/echo/c", &[("authorization", deny)]);
        assert_eq!(r.status, 401);
    }
    assert_eq!(w.auth.hits(deny), 1);
    // Nine requests, the service asked for `first + 2` of them: the rest
    // were cache hits.
    let hits = 9 - (first as u64 + 2);
    assert_eq!(w.counted("cache_hits_total", "cached", ""), hits);
    assert_eq!(
        w.counted("decisions_total", "cached", ",decision=\"deny\""),
        3
    );
    // Past 300 ms the service is asked again.
    assert!(wait_until(Duration::from_secs(5), || {
        let r = http_get(w.gw.addr(), "/cached/echo/c", &[("authorization", token)]);
        r.status == 200 && w.auth.hits(token) > first + 1
    }));
}

#[test]
fn a_slow_service_follows_on_error() {
    let w = &world();
    let r = http_get(
        w.gw.addr(),
        "/strict/echo/s",
        &[("authorization", "Bearer slow-1")],
    );
    assert_eq!(r.status, 503, "{}", r.body_str());
    assert_eq!(w.counted("errors_total", "strict", ",error=\"timeout\""), 1);
    assert_eq!(w.counted("on_error_total", "strict", ",action=\"deny\""), 1);
    // A service that cannot be reached: refused at once, not timed out.
    let r = http_get(
        w.gw.addr(),
        "/down/echo/s",
        &[("authorization", "Bearer good-1")],
    );
    assert_eq!(r.status, 503, "{}", r.body_str());
    assert_eq!(
        w.counted("errors_total", "down", ",error=\"unreachable\""),
        1
    );
    assert_eq!(w.counted("errors_total", "down", ",error=\"timeout\""), 0);
    let r = http_get(
        w.gw.addr(),
        "/lenient/echo/lenient",
        &[("authorization", "Bearer slow-2"), ("x-user-id", "mallory")],
    );
    assert_eq!(r.status, 200, "{}", r.body_str());
    let seen =
        w.up.last_requests()
            .into_iter()
            .rev()
            .find(|s| s.target == "/echo/lenient")
            .expect("the upstream got the request");
    assert!(
        !seen
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("x-user-id")),
        "{:?}",
        seen.headers
    );
    assert_eq!(
        w.counted("errors_total", "lenient", ",error=\"timeout\""),
        1
    );
    assert_eq!(
        w.counted("on_error_total", "lenient", ",action=\"allow\""),
        1
    );
    assert_eq!(
        w.counted("decisions_total", "lenient", ",decision=\"allow\""),
        0
    );
}

#[test]
fn an_http2_client_is_checked_the_same_way() {
    let w = &world();
    let r = Proto::H2c.get(
        w.gw.addr(),
        "/fa/echo/h2",
        &[("authorization", "Bearer good-h2"), ("x-tenant", "forged")],
    );
    assert_eq!(r.status, 200);
    let seen =
        w.up.last_requests()
            .into_iter()
            .rev()
            .find(|s| s.target == "/echo/h2")
            .expect("the upstream got the request");
    let tenant: Vec<_> = seen
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-tenant"))
        .collect();
    assert_eq!(tenant.len(), 1);
    assert_eq!(tenant[0].1, "t1");
    let r = Proto::H2c.get(
        w.gw.addr(),
        "/fa/echo/h2",
        &[("authorization", "Bearer no-h2")],
    );
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer realm=\"test\""));
}

#[test]
fn grpc_calls_are_denied_with_grpc_statuses() {
    let auth = Auth::start();
    let server = grpc_common::Server::start();
    let admin = free_port();
    let gw = Gw::start(&format!(
        "admin: {{ listen: \"127.0.0.1:{admin}\" }}\nservices:\n{}routes:\n  - name: echo\n    match: {{ path_prefix: /test.Echo/ }}\n    service: g\n    forward_auth: {{ url: \"http://127.0.0.1:{}/check\", response_headers: [x-user-id] }}\n",
        service("g", &[server.addr()], "    protocol: h2c\n"),
        auth.port
    ));
    let code = |auth: &str| {
        let md = format!("authorization={auth}");
        grpc_common::unary_code(gw.port, &[&md])
    };
    assert_eq!(code("Bearer good-grpc"), "OK");
    // 401 and 403: the statuses of the gateway's own refusals.
    assert_eq!(code("Bearer nobody"), "UNAUTHENTICATED");
    assert_eq!(code("Bearer denied"), "PERMISSION_DENIED");
    // Any other status as the gateway maps HTTP statuses to gRPC: a
    // redirect is UNKNOWN, another 4xx INTERNAL; a failed check (a denial
    // too long to read) with on_error deny is UNAVAILABLE.
    assert_eq!(code("Bearer login"), "UNKNOWN");
    assert_eq!(code("Bearer teapot"), "INTERNAL");
    assert_eq!(code("Bearer huge"), "UNAVAILABLE");
    let counted = |rest: &str| {
        admin_metric(
            admin,
            &format!(
                "sluicegate_authz_decisions_total{{route=\"echo\",check=\"forward_auth\"{rest}}}"
            ),
        )
    };
    assert_eq!(counted(",decision=\"allow\""), 1);
    assert_eq!(counted(",decision=\"deny\""), 4);
    // The calls' endings as the route counts them.
    let ended = |status: &str| {
        admin_metric(
            admin,
            &format!("sluicegate_grpc_requests_total{{route=\"echo\",grpc_status=\"{status}\"}}"),
        )
    };
    assert_eq!(ended("unauthenticated"), 1);
    assert_eq!(ended("permission_denied"), 1);
}
