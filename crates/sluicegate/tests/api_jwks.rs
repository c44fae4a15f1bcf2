//! OpenID Connect issuers end to end, against a real OpenID provider (npm
//! `oidc-provider`, tools/oidc-provider.mjs, installed by scripts/test-npm)
//! on loopback: discovery and a direct `jwks_uri`; RS256 and ES256
//! client-credentials tokens; claims to headers (clients' copies removed);
//! scopes (403 `insufficient_scope`); `default_plan` against a refused
//! app; wrong `aud`, `iss`, expired, future `nbf` and `iat`, `alg`
//! confusion (HS256 keyed with the public key, `none`); a flood of unknown
//! `kid`s making one JWKS fetch; key rotation, and an old token refused
//! once its key leaves the set; the provider stopped while the cached keys
//! keep serving; gRPC refusals (UNAUTHENTICATED, PERMISSION_DENIED);
//! introspection of opaque tokens (active, revoked, unknown, the answers
//! cache counted by the provider, concurrent requests making one call,
//! the token's expiry bounding the cache, 503 with the provider down);
//! an HTTPS issuer signed by a private CA, trusted through `ca_file`.

mod grpc_common;
mod http_common;
mod oidc_common;
mod ops_common;
mod tls_common;
mod venv_common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use http_common::{service, wait_until, Gw};
use oidc_common::Idp;
use serde_json::{json, Value};
use sluicegate_testkit::{http_get, TestUpstream};

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn gateway(up: &TestUpstream, issuer: &str) -> Gw {
    gateway_admin(up, issuer, "")
}

/// [`gateway`] with an admin listener on `admin` (for `/metrics`), or
/// without one when it is empty.
fn gateway_admin(up: &TestUpstream, issuer: &str, admin: &str) -> Gw {
    let admin = match admin {
        "" => String::new(),
        port => format!("admin: {{ listen: \"127.0.0.1:{port}\" }}\n"),
    };
    Gw::start(&format!(
        r#"{admin}services:
{}
routes:
  - {{ name: api, match: {{ path_prefix: /api }}, service: s, auth: jwt }}
  - {{ name: write, match: {{ path_prefix: /write }}, service: s, auth: jwt, scopes: ["orders:write", "orders:read"] }}
plans:
  free: {{ rate: 1000/s }}
jwt:
  issuers:
    - {issuer}
apps:
  - {{ id: rs-app }}
  - {{ id: es-app }}
  - {{ id: opaque-app }}
  - {{ id: opaque-short }}
"#,
        service("s", &[up.addr()], "")
    ))
}

fn call(gw: &Gw, path: &str, token: &str, extra: &[(&str, &str)]) -> sluicegate_testkit::Response {
    let auth = format!("Bearer {token}");
    let mut h = vec![("Authorization", auth.as_str())];
    h.extend_from_slice(extra);
    http_get(gw.addr(), path, &h)
}

fn assert_invalid(r: &sluicegate_testkit::Response, what: &str) {
    assert_eq!(r.status, 401, "{what}: {}", r.body_str());
    let www = r.header("www-authenticate").unwrap_or_default();
    assert!(
        www.contains("error=\"invalid_token\"") && www.contains("error_description="),
        "{what}: {www}"
    );
}

#[test]
fn issuer_tokens_pass_and_bad_ones_are_refused() {
    let idp = Idp::start();
    let up = TestUpstream::start();
    let iss = idp.issuer();
    let gw = gateway(
        &up,
        &format!(
            "{{ name: corp, issuer: \"{iss}\", discovery: true, audiences: [orders-api], default_plan: free, claims_to_headers: {{ sub: X-User-Id, email: X-User-Email }} }}"
        ),
    );
    // RS256 and ES256 tokens, with the keys found through discovery (the
    // first request may come before the first fetch ends).
    let rs = idp.token("rs-app", "orders:read");
    let es = idp.token("es-app", "orders:read orders:write");
    assert!(wait_until(Duration::from_secs(10), || call(
        &gw,
        "/api/x",
        &rs,
        &[]
    )
    .status
        == 200));
    for (t, app) in [(&rs, "rs-app"), (&es, "es-app")] {
        let r = call(
            &gw,
            "/api/x",
            t,
            &[("X-User-Id", "forged"), ("X-App-Id", "forged")],
        );
        assert_eq!(r.status, 200, "{app}: {}", r.body_str());
        let seen = up.last_request().unwrap();
        assert_eq!(seen.header("x-app-id"), Some(app));
        assert_eq!(seen.header_all("x-user-id"), [app]);
        assert_eq!(seen.header("x-user-email"), Some("svc@example.test"));
    }
    // Scopes: all of the route's, else 403 with RFC 6750's parameters.
    let r = call(&gw, "/write/x", &rs, &[]);
    assert_eq!(r.status, 403);
    let www = r.header("www-authenticate").unwrap();
    assert!(
        www.contains("error=\"insufficient_scope\"")
            && www.contains("scope=\"orders:write orders:read\""),
        "{www}"
    );
    assert_eq!(call(&gw, "/write/x", &es, &[]).status, 200);
    // An app the issuer names that is not under apps: the default plan.
    let stranger = idp.token("stranger", "orders:read");
    assert_eq!(call(&gw, "/api/x", &stranger, &[]).status, 200);
    assert_eq!(
        up.last_request().unwrap().header("x-app-id"),
        Some("stranger")
    );
    // No token: 401 without an error code.
    let r = http_get(gw.addr(), "/api/x", &[]);
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"sluicegate\"")
    );
    // Tokens the provider signs with its real key, but wrong.
    let good = || json!({ "iss": iss, "aud": "orders-api", "client_id": "rs-app", "exp": now() + 300, "iat": now() });
    assert_eq!(
        call(&gw, "/api/x", &idp.sign(good(), None), &[]).status,
        200
    );
    let mut cases = Vec::new();
    for (what, key, value) in [
        ("wrong aud", "aud", json!("other-api")),
        ("wrong iss", "iss", json!("http://127.0.0.1:9/other")),
        ("expired", "exp", json!(now() - 120)),
        ("future nbf", "nbf", json!(now() + 120)),
        ("future iat", "iat", json!(now() + 120)),
    ] {
        let mut c = good();
        c[key] = value;
        cases.push((what, idp.sign(c, None)));
    }
    // alg confusion: the RSA public key (from the JWKS) as an HS256
    // secret, and alg none, both under the real kid.
    let jwks: Value = serde_json::from_slice(&http_get(idp.addr, "/jwks", &[]).body).unwrap();
    let rsa = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kty"] == "RSA")
        .unwrap();
    let kid = rsa["kid"].as_str().unwrap();
    let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    h.kid = Some(kid.to_string());
    let secret = serde_json::to_vec(rsa).unwrap();
    let hs = jsonwebtoken::encode(
        &h,
        &good(),
        &jsonwebtoken::EncodingKey::from_secret(&secret),
    )
    .unwrap();
    cases.push(("HS256 with the public key", hs));
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    cases.push((
        "alg none",
        format!(
            "{}.{}.",
            b64(&json!({ "alg": "none", "kid": kid })),
            b64(&good())
        ),
    ));
    for (what, t) in &cases {
        assert_invalid(&call(&gw, "/api/x", t, &[]), what);
    }
    // Without default_plan (and keys from jwks_uri directly), the stranger
    // is refused.
    let gw2 = gateway(
        &up,
        &format!("{{ name: corp, issuer: \"{iss}\", jwks_uri: \"{iss}/jwks\", audiences: [orders-api] }}"),
    );
    assert!(wait_until(Duration::from_secs(10), || call(
        &gw2,
        "/api/x",
        &es,
        &[]
    )
    .status
        == 200));
    assert_eq!(call(&gw2, "/api/x", &stranger, &[]).status, 403);
}

#[test]
fn rotation_unknown_kid_floods_and_a_stopped_provider() {
    let idp = Idp::start();
    let up = TestUpstream::start();
    let iss = idp.issuer();
    let admin = sluicegate_testkit::free_port();
    let gw = gateway_admin(
        &up,
        &format!("{{ name: corp, issuer: \"{iss}\", discovery: true, audiences: [orders-api] }}"),
        &admin.to_string(),
    );
    let refetches =
        || http_common::admin_metric(admin, "sluicegate_jwks_refetches_total{issuer=\"corp\"}");
    let t1 = idp.token("rs-app", "orders:read");
    assert!(wait_until(Duration::from_secs(10), || call(
        &gw,
        "/api/x",
        &t1,
        &[]
    )
    .status
        == 200));
    // A flood of unknown kids: all refused, one fetch at most.
    let before = idp.jwks_fetches();
    let claims =
        json!({ "iss": iss, "aud": "orders-api", "client_id": "rs-app", "exp": now() + 300 });
    for i in 0..100 {
        let t = idp.sign(claims.clone(), Some(&format!("bogus-{i}")));
        assert_invalid(&call(&gw, "/api/x", &t, &[]), "unknown kid");
    }
    assert!(wait_until(Duration::from_secs(5), || idp.jwks_fetches() == before + 1));
    for i in 100..150 {
        let t = idp.sign(claims.clone(), Some(&format!("bogus-{i}")));
        assert_invalid(&call(&gw, "/api/x", &t, &[]), "unknown kid");
    }
    assert_eq!(
        idp.jwks_fetches(),
        before + 1,
        "the flood made more fetches"
    );
    assert_eq!(refetches(), 1, "one refetch asked by the flood");
    // Rotation: new keys sign, the old ones stay published. A token of the
    // new key passes once the refetch its kid asks for has run (asks are
    // at most one per 10 s per issuer); the old token still passes.
    idp.post("/_test/rotate");
    let t2 = idp.token("rs-app", "orders:read");
    let fresh = || call(&gw, "/api/x", &t2, &[]).status == 200;
    assert!(!fresh(), "a new kid before its refetch");
    assert!(wait_until(Duration::from_secs(20), fresh));
    assert_eq!(call(&gw, "/api/x", &t1, &[]).status, 200);
    // Only the new keys stay published: once a refetch (asked by an
    // unknown kid, at most one per 10 s) sees that, the old token (in the
    // verified-token cache) is refused and the new one still passes.
    idp.post("/_test/drop_old");
    let bogus = idp.sign(claims.clone(), Some("bogus-after-drop"));
    assert!(wait_until(Duration::from_secs(20), || {
        call(&gw, "/api/x", &bogus, &[]);
        call(&gw, "/api/x", &t1, &[]).status == 401
    }));
    assert_invalid(&call(&gw, "/api/x", &t1, &[]), "a dropped key");
    assert_eq!(call(&gw, "/api/x", &t2, &[]).status, 200);
    // The provider stops: the keys fetched keep serving (a token never
    // seen before, so not from the cache).
    let t3 = idp.token("es-app", "orders:read");
    drop(idp);
    assert_eq!(call(&gw, "/api/x", &t3, &[]).status, 200);
    assert_eq!(call(&gw, "/api/x", &t2, &[]).status, 200);
}

#[test]
fn grpc_calls_are_refused_with_grpc_statuses() {
    let idp = Idp::start();
    let server = grpc_common::Server::start();
    let iss = idp.issuer();
    let gw = Gw::start(&format!(
        r#"services:
{}
routes:
  - {{ name: echo, match: {{ path_prefix: /test.Echo/ }}, service: g, auth: jwt, scopes: ["orders:write"] }}
jwt:
  issuers:
    - {{ name: corp, issuer: "{iss}", discovery: true, audiences: [orders-api] }}
apps:
  - {{ id: rs-app }}
  - {{ id: es-app }}
"#,
        service("g", &[server.addr()], "    protocol: h2c\n")
    ));
    let p = gw.port;
    let reader = format!(
        "authorization=Bearer {}",
        idp.token("rs-app", "orders:read")
    );
    let writer = format!(
        "authorization=Bearer {}",
        idp.token("es-app", "orders:read orders:write")
    );
    assert!(wait_until(
        Duration::from_secs(10),
        || grpc_common::unary_code(p, &[&writer]) == "OK"
    ));
    assert_eq!(grpc_common::unary_code(p, &[]), "UNAUTHENTICATED");
    assert_eq!(
        grpc_common::unary_code(p, &["authorization=Bearer not.a.token"]),
        "UNAUTHENTICATED"
    );
    assert_eq!(grpc_common::unary_code(p, &[&reader]), "PERMISSION_DENIED");
}

/// A gateway whose issuer introspects opaque tokens as the provider's
/// client `gateway`, answers kept for `cache`.
fn introspecting_gateway(
    up: &TestUpstream,
    idp: &Idp,
    dir: &std::path::Path,
    cache: &str,
    admin: u16,
) -> Gw {
    let secret = dir.join("gateway-secret.txt");
    std::fs::write(&secret, "gateway-secret\n").unwrap();
    let iss = idp.issuer();
    gateway_admin(
        up,
        &format!(
            "{{ name: corp, issuer: \"{iss}\", discovery: true, audiences: [orders-api], claims_to_headers: {{ email: X-User-Email }}, \
             introspection: {{ client_id: gateway, client_secret_file: \"{}\", cache: {cache} }} }}",
            secret.display()
        ),
        &admin.to_string(),
    )
}

#[test]
fn opaque_tokens_are_introspected_and_the_answers_cached() {
    let idp = Idp::start();
    let up = TestUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    let admin = sluicegate_testkit::free_port();
    let gw = introspecting_gateway(&up, &idp, dir.path(), "60s", admin);
    let counted = |series: &str| http_common::admin_metric(admin, series);
    let intro = |result: &str| {
        counted(&format!(
            "sluicegate_introspections_total{{issuer=\"corp\",result=\"{result}\"}}"
        ))
    };
    let hits = "sluicegate_introspection_cache_hits_total{issuer=\"corp\"}";
    let t = idp.token("opaque-app", "orders:read");
    assert!(!t.contains('.'), "not an opaque token: {t}");
    // The endpoint comes from discovery, read with the first key fetch:
    // until then, 503 (the authorization server could not be asked).
    assert!(wait_until(Duration::from_secs(10), || call(
        &gw,
        "/api/x",
        &t,
        &[]
    )
    .status
        == 200));
    let seen = up.last_request().unwrap();
    assert_eq!(seen.header("x-app-id"), Some("opaque-app"));
    assert_eq!(seen.header("x-user-email"), Some("svc@example.test"));
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {t}").as_str())
    );
    // Cached: more requests, no more introspection.
    let n = idp.introspections();
    for _ in 0..5 {
        assert_eq!(call(&gw, "/api/x", &t, &[]).status, 200);
    }
    assert_eq!(idp.introspections(), n);
    assert_eq!(intro("active"), 1);
    assert_eq!(counted(hits), 5);
    // Its scopes are the answer's: orders:read only.
    let r = call(&gw, "/write/x", &t, &[]);
    assert_eq!(r.status, 403);
    assert!(r
        .header("www-authenticate")
        .unwrap()
        .contains("insufficient_scope"));
    // Concurrent requests with a token never seen: one introspection.
    let fresh = idp.token("opaque-app", "orders:read");
    let n = idp.introspections();
    let statuses: Vec<u16> = std::thread::scope(|s| {
        let all: Vec<_> = (0..16)
            .map(|_| s.spawn(|| call(&gw, "/api/x", &fresh, &[]).status))
            .collect();
        all.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(statuses, [200; 16]);
    assert_eq!(idp.introspections(), n + 1);
    // An unknown token and a revoked one: 401 invalid_token; the inactive
    // answer is cached too.
    let n = idp.introspections();
    assert_invalid(
        &call(&gw, "/api/x", "no-such-token", &[]),
        "unknown opaque token",
    );
    assert_invalid(
        &call(&gw, "/api/x", "no-such-token", &[]),
        "unknown opaque token",
    );
    assert_eq!(idp.introspections(), n + 1);
    let revoked = idp.token("opaque-app", "orders:read");
    idp.revoke("opaque-app", &revoked);
    assert_invalid(&call(&gw, "/api/x", &revoked, &[]), "revoked opaque token");
    // A token living 2 s, under a 60 s cache: refused once it has expired
    // (the cached answer ends with the token), after asking again.
    let short = idp.token("opaque-short", "orders:read");
    assert_eq!(call(&gw, "/api/x", &short, &[]).status, 200);
    let n = idp.introspections();
    assert!(wait_until(Duration::from_secs(10), || call(
        &gw,
        "/api/x",
        &short,
        &[]
    )
    .status
        == 401));
    assert!(
        idp.introspections() > n,
        "the expired token was not asked about again"
    );
    // The provider down: a token not cached gets 503 (not a bad token's
    // 401), a cached one still passes.
    let unseen = idp.token("opaque-app", "orders:read");
    drop(idp);
    let r = call(&gw, "/api/x", &unseen, &[]);
    assert_eq!(r.status, 503, "{}", r.body_str());
    assert_eq!(call(&gw, "/api/x", &t, &[]).status, 200);
    assert!(intro("inactive") >= 2, "{}", intro("inactive"));
    assert!(intro("error") >= 1);
    assert!(counted(hits) > 5);
    let fetched = "sluicegate_jwks_fetches_total{issuer=\"corp\",result=\"ok\"}";
    assert!(counted(fetched) >= 1);
}

#[test]
fn an_https_issuer_is_trusted_through_its_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    tls_common::make_ca(d, "ca", "Test IdP CA");
    tls_common::make_leaf(
        d,
        "ca",
        "idp",
        "127.0.0.1",
        Some("IP:127.0.0.1"),
        "serverAuth",
    );
    let idp = Idp::start_with(&[&d.join("idp.pem"), &d.join("idp.key")]);
    let up = TestUpstream::start();
    let iss = idp.issuer();
    assert!(iss.starts_with("https://"), "{iss}");
    let entry = |extra: &str| {
        format!(
            "{{ name: corp, issuer: \"{iss}\", discovery: true, audiences: [orders-api]{extra} }}"
        )
    };
    let trusting = gateway(
        &up,
        &entry(&format!(", ca_file: \"{}\"", d.join("ca.pem").display())),
    );
    let other = gateway(&up, &entry(""));
    let t = idp.token("es-app", "orders:read");
    assert!(wait_until(Duration::from_secs(10), || call(
        &trusting,
        "/api/x",
        &t,
        &[]
    )
    .status
        == 200));
    // Without the CA, the issuer's certificate is not trusted: no keys.
    assert_invalid(&call(&other, "/api/x", &t, &[]), "an untrusted issuer");
}
