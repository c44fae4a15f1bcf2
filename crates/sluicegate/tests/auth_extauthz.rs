//! `ext_authz` on the real binary, against a grpcio server built from
//! Envoy's v3 Authorization protos (`tests/fixtures/extauthz`): an allowed
//! request goes upstream with the header the server sets (the client's
//! copy replaced), the one it appends and without the one it removes; a
//! denial with its own status, header and body reaches the client as
//! sent; a denial with no denied_response is 403, as Envoy answers; a slow
//! server follows on_error. Each is counted in `/metrics`
//! (`sluicegate_authz_*{check="ext_authz"}`).

mod http_common;
mod venv_common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use http_common::{admin_metric, service, Gw};
use sluicegate_testkit::{free_port, http_get, TestUpstream};

/// The ext_authz server; killed on drop.
struct Authz {
    child: Child,
    port: u16,
}

impl Authz {
    fn start() -> Authz {
        let port = free_port();
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/extauthz/server.py"
        );
        let mut child = Command::new(venv_common::python())
            .arg(script)
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the ext_authz server");
        let mut line = String::new();
        let out = child.stdout.take().expect("stdout");
        let _ = BufReader::new(out).read_line(&mut line);
        assert_eq!(line.trim(), "ready", "the ext_authz server did not start");
        Authz { child, port }
    }
}

impl Drop for Authz {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct World {
    _authz: Authz,
    up: TestUpstream,
    gw: Gw,
    admin: u16,
}

impl World {
    /// A `sluicegate_authz_*` counter of ext_authz on `route`; `rest`: the
    /// labels after `check`, with their leading comma.
    fn counted(&self, family: &str, route: &str, rest: &str) -> u64 {
        let series =
            format!("sluicegate_authz_{family}{{route=\"{route}\",check=\"ext_authz\"{rest}}}");
        admin_metric(self.admin, &series)
    }
}

fn world() -> World {
    {
        let authz = Authz::start();
        let up = TestUpstream::start();
        let authz_addr = std::net::SocketAddr::from(([127, 0, 0, 1], authz.port));
        let route = |name: &str, extra: &str| {
            format!(
                "  - name: {name}\n    match: {{ path_prefix: /{name} }}\n    strip_prefix: true\n    service: s\n    ext_authz: {{ service: authz{extra} }}\n"
            )
        };
        let admin = free_port();
        let rest = format!(
            "admin: {{ listen: \"127.0.0.1:{admin}\" }}\nservices:\n{}{}routes:\n{}{}{}",
            service("s", &[up.addr()], ""),
            service("authz", &[authz_addr], "    protocol: h2c\n"),
            route("ea", ""),
            route("strict", ", timeout: 300ms, on_error: deny"),
            route("lenient", ", timeout: 300ms, on_error: allow"),
        );
        let gw = Gw::start(&rest);
        World {
            _authz: authz,
            up,
            gw,
            admin,
        }
    }
}

fn seen(up: &TestUpstream, target: &str) -> Vec<(String, String)> {
    up.last_requests()
        .into_iter()
        .rev()
        .find(|s| s.target == target)
        .expect("the upstream got the request")
        .headers
}

fn values(headers: &[(String, String)], name: &str) -> Vec<String> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

#[test]
fn an_allowed_request_gets_the_servers_header_edits() {
    let w = &world();
    let r = http_get(
        w.gw.addr(),
        "/ea/echo/ok?x=1",
        &[
            ("authorization", "Bearer good"),
            ("x-user-id", "mallory"),
            ("x-tag", "mine"),
            ("x-drop", "gone"),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.body_str());
    let h = seen(&w.up, "/echo/ok?x=1");
    // The server saw the request's path (with its query) as received.
    assert_eq!(values(&h, "x-user-id"), ["/ea/echo/ok?x=1"]);
    let mut tags = values(&h, "x-tag");
    tags.sort();
    assert_eq!(tags, ["checked", "mine"]);
    assert!(values(&h, "x-drop").is_empty(), "{h:?}");
    assert_eq!(w.counted("decisions_total", "ea", ",decision=\"allow\""), 1);
}

#[test]
fn denials_carry_the_servers_status_headers_and_body() {
    let w = &world();
    let before = w.up.requests_seen();
    let r = http_get(
        w.gw.addr(),
        "/ea/echo/no",
        &[("authorization", "Bearer teapot")],
    );
    assert_eq!(r.status, 418);
    assert_eq!(r.header("x-why"), Some("tea"));
    assert_eq!(r.body_str(), "short and stout");
    // UNAUTHENTICATED without a denied_response: 403, as Envoy answers.
    let r = http_get(
        w.gw.addr(),
        "/ea/echo/no",
        &[("authorization", "Bearer nobody")],
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        w.up.requests_seen(),
        before,
        "a denied request went upstream"
    );
    assert_eq!(w.counted("decisions_total", "ea", ",decision=\"deny\""), 2);
    assert_eq!(w.counted("decisions_total", "ea", ",decision=\"allow\""), 0);
}

#[test]
fn a_slow_server_follows_on_error() {
    let w = &world();
    let r = http_get(
        w.gw.addr(),
        "/strict/echo/s",
        &[("authorization", "Bearer slow")],
    );
    assert_eq!(r.status, 503, "{}", r.body_str());
    let r = http_get(
        w.gw.addr(),
        "/lenient/echo/lenient",
        &[("authorization", "Bearer slow")],
    );
    assert_eq!(r.status, 200, "{}", r.body_str());
    assert!(values(&seen(&w.up, "/echo/lenient"), "x-user-id").is_empty());
    for (route, action) in [("strict", "deny"), ("lenient", "allow")] {
        assert_eq!(w.counted("errors_total", route, ",error=\"timeout\""), 1);
        let on_error = format!(",action=\"{action}\"");
        assert_eq!(w.counted("on_error_total", route, &on_error), 1);
    }
    // No cache for ext_authz: no such line.
    assert_eq!(w.counted("cache_hits_total", "strict", ""), 0);
}
