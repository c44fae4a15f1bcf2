//! JWT authentication end to end: HS256, RS256 and ES256 tokens accepted
//! for the app their `sub` names; refused with 401 when missing, badly
//! signed, expired, not yet valid, using another algorithm than the app's
//! (including `none` and HS256-with-the-public-key), or with the wrong
//! issuer or audience. The same over HTTP/1.1 and HTTP/2 streams (h2c).

mod http_common;

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use http_common::{assert_json_error, service, Gw};
use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use serde_json::json;
use sluicegate_testkit::{Proto, TestUpstream};

const SECRET: &str = "hs256-secret-of-at-least-32-bytes!!";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt");

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

fn gateway(up: &TestUpstream) -> Gw {
    Gw::start(&format!(
        r#"services:
{}
routes:
  - name: api
    match: {{ path_prefix: /api }}
    service: s
    auth: jwt
jwt: {{ issuer: "https://issuer.test", audience: gw, leeway: 30s }}
apps:
  - id: hs-app
    jwt: {{ alg: HS256, secret: "{SECRET}" }}
  - id: rs-app
    jwt: {{ alg: RS256, public_key_file: "{FIXTURES}/rsa-public.pem" }}
  - id: es-app
    jwt: {{ alg: ES256, public_key_file: "{FIXTURES}/ec-public.pem" }}
  - id: keyonly
    keys: ["key-only-0123456789"]
"#,
        service("s", &[up.addr()], "")
    ))
}

fn claims(sub: &str) -> serde_json::Value {
    json!({ "sub": sub, "iss": "https://issuer.test", "aud": "gw", "exp": now() + 300 })
}

fn token(alg: Algorithm, key: &EncodingKey, claims: &serde_json::Value) -> String {
    encode(&Header::new(alg), claims, key).unwrap()
}

fn hs(claims: &serde_json::Value) -> String {
    token(
        Algorithm::HS256,
        &EncodingKey::from_secret(SECRET.as_bytes()),
        claims,
    )
}

fn call(proto: Proto, gw: &Gw, token: &str) -> sluicegate_testkit::Response {
    let auth = format!("Bearer {token}");
    proto.get(gw.addr(), "/api/x", &[("Authorization", auth.as_str())])
}

#[test]
fn each_algorithm_is_accepted_for_its_app() {
    algorithms_accepted(Proto::Http1);
}

#[test]
fn each_algorithm_is_accepted_for_its_app_over_http2() {
    algorithms_accepted(Proto::H2c);
}

fn algorithms_accepted(proto: Proto) {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    let rs = EncodingKey::from_rsa_pem(&fixture("rsa-private.pem")).unwrap();
    let es = EncodingKey::from_ec_pem(&fixture("ec-private.pem")).unwrap();
    for (t, app) in [
        (hs(&claims("hs-app")), "hs-app"),
        (token(Algorithm::RS256, &rs, &claims("rs-app")), "rs-app"),
        (token(Algorithm::ES256, &es, &claims("es-app")), "es-app"),
    ] {
        let r = call(proto, &gw, &t);
        assert_eq!(r.status, 200, "{app}: {}", r.body_str());
        let seen = up.last_request().unwrap();
        assert_eq!(seen.header("x-app-id"), Some(app));
        assert_eq!(
            seen.header("authorization"),
            Some(format!("Bearer {t}").as_str())
        );
    }
    // Lower-case scheme, and a token within the clock-skew allowance.
    let mut c = claims("hs-app");
    c["exp"] = json!(now() - 10);
    let r = proto.get(
        gw.addr(),
        "/api/x",
        &[("Authorization", format!("bearer {}", hs(&c)).as_str())],
    );
    assert_eq!(r.status, 200);
}

#[test]
fn every_bad_token_is_401() {
    bad_tokens_refused(Proto::Http1);
}

#[test]
fn every_bad_token_is_401_over_http2() {
    bad_tokens_refused(Proto::H2c);
}

fn bad_tokens_refused(proto: Proto) {
    let up = TestUpstream::start();
    let gw = gateway(&up);
    let rs = EncodingKey::from_rsa_pem(&fixture("rsa-private.pem")).unwrap();
    let b64 = |v: &serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    };
    let mut cases: Vec<(&str, String)> = Vec::new();
    let other_secret = EncodingKey::from_secret(b"another-secret-of-at-least-32-bytes");
    cases.push((
        "wrong secret",
        token(Algorithm::HS256, &other_secret, &claims("hs-app")),
    ));
    let mut c = claims("hs-app");
    c["exp"] = json!(now() - 120);
    cases.push(("expired", hs(&c)));
    let mut c = claims("hs-app");
    c["nbf"] = json!(now() + 120);
    cases.push(("not yet valid", hs(&c)));
    let mut c = claims("hs-app");
    c.as_object_mut().unwrap().remove("exp");
    cases.push(("no exp", hs(&c)));
    let mut c = claims("hs-app");
    c["iss"] = json!("https://evil.test");
    cases.push(("wrong issuer", hs(&c)));
    let mut c = claims("hs-app");
    c.as_object_mut().unwrap().remove("iss");
    cases.push(("no issuer", hs(&c)));
    let mut c = claims("hs-app");
    c["aud"] = json!("someone-else");
    cases.push(("wrong audience", hs(&c)));
    let mut c = claims("hs-app");
    c.as_object_mut().unwrap().remove("aud");
    cases.push(("no audience", hs(&c)));
    cases.push(("unknown app", hs(&claims("nobody"))));
    cases.push(("app without jwt", hs(&claims("keyonly"))));
    // RS256 app, token signed RS256 but naming the HS256 app.
    cases.push((
        "key of another app",
        token(Algorithm::RS256, &rs, &claims("hs-app")),
    ));
    // Algorithm confusion: HS256 with the RSA public key as the secret.
    let confused = EncodingKey::from_secret(&fixture("rsa-public.pem"));
    cases.push((
        "HS256 with the public key",
        token(Algorithm::HS256, &confused, &claims("rs-app")),
    ));
    // alg none, unsigned.
    cases.push((
        "alg none",
        format!(
            "{}.{}.",
            b64(&json!({"alg": "none", "typ": "JWT"})),
            b64(&claims("hs-app"))
        ),
    ));
    // A valid token with one payload byte changed.
    let good = hs(&claims("hs-app"));
    let mut parts: Vec<String> = good.split('.').map(str::to_string).collect();
    parts[1] = b64(
        &json!({"sub": "hs-app", "iss": "https://issuer.test", "aud": "gw", "exp": now() + 9999}),
    );
    cases.push(("tampered payload", parts.join(".")));
    cases.push(("garbage", "not.a.token".to_string()));
    for (what, t) in &cases {
        let r = call(proto, &gw, t);
        assert_eq!(r.status, 401, "{what}");
        assert_json_error(&r, 401);
        let www = r.header("www-authenticate").unwrap_or_default();
        assert!(
            www.starts_with(
                "Bearer realm=\"sluicegate\", error=\"invalid_token\", error_description=\""
            ),
            "{what}: {www}"
        );
    }
    // No Authorization at all, or another scheme.
    let r = proto.get(gw.addr(), "/api/x", &[]);
    assert_json_error(&r, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Bearer realm=\"sluicegate\"")
    );
    let r = proto.get(
        gw.addr(),
        "/api/x",
        &[("Authorization", "Basic dXNlcjpwdw==")],
    );
    assert_json_error(&r, 401);
    assert_eq!(
        up.requests_seen(),
        0,
        "nothing unauthenticated went upstream"
    );
}
