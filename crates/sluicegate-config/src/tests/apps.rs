//! `plans`, `apps` and `app_key`: what they decode to, and each error with
//! the line and column of the node at fault.

use std::time::Duration;

use super::{errors, ok};
use crate::*;

const BASE: &str = "listen: 127.0.0.1:8080
services:
  - name: orders
    endpoints: [\"127.0.0.1:9001\"]
  - name: web
    endpoints: [\"127.0.0.1:9002\"]
routes:
  - name: orders
    match: { path_prefix: /orders }
    service: orders
    auth: app_key
";

fn with(rest: &str) -> String {
    format!("{BASE}{rest}")
}

#[test]
fn plans_apps_and_sources_decode() {
    let c = ok(&with(
        "plans:
  gold: { rate: 1000/s, burst: 200, quota: 1000000/day, concurrency: 50 }
  slow: { rate: 60/min }
apps:
  - id: shop-web
    keys: [\"9cf3319cbd254202cf882a79a755ba6e\", \"second-key-123\"]
    plan: gold
    plans_by_service: { web: slow }
    services: [orders, web]
    methods: [get, POST]
    paths: [/orders/, /]
  - id: bare
app_key: { header: X-Key, query: off, path_segment: false }
",
    ));
    assert_eq!(c.routes[0].auth, Auth::AppKey);
    assert_eq!(
        c.plans[0],
        Plan {
            name: "gold".into(),
            rate: Some(Rate {
                count: 1000,
                per: Duration::from_secs(1)
            }),
            burst: Some(200),
            quota: Some(Quota {
                limit: 1_000_000,
                window: QuotaWindow::Day
            }),
            concurrency: Some(50),
            scope: Scope::Local,
            on_failure: OnFailure::Local,
        }
    );
    // burst defaults to the rate's count.
    assert_eq!(c.plans[1].burst, Some(60));
    assert_eq!(c.plans[1].rate.unwrap().per, Duration::from_secs(60));
    assert_eq!(
        c.apps[0],
        App {
            id: "shop-web".into(),
            keys: vec![
                "9cf3319cbd254202cf882a79a755ba6e".into(),
                "second-key-123".into()
            ],
            plan: Some("gold".into()),
            plans_by_service: vec![("web".into(), "slow".into())],
            services: Some(vec!["orders".into(), "web".into()]),
            methods: vec!["GET".into(), "POST".into()],
            paths: vec!["/orders".into(), "/".into()],
            jwt: None,
            mtls: None,
        }
    );
    assert_eq!(c.apps[1].services, None);
    assert_eq!(
        c.app_key,
        AppKeySources {
            header: Some("x-key".into()),
            query: None,
            path_segment: false
        }
    );
}

#[test]
fn duplicate_ids_and_keys_are_named_in_file_order() {
    let all = errors(&with(
        "apps:
  - { id: x, keys: [key-one-0001, key-one-0001] }
  - { id: y, keys: [key-two-0002] }
  - { id: x, keys: [key-two-0002] }
  - { id: x, keys: [key-one-0001] }
",
    ));
    let expect = [
        "13:35: apps[0].keys[1]: key already given to this app (first at 13:21)",
        "15:11: apps[2].id: duplicate app id \"x\" (first at 13:11)",
        "15:21: apps[2].keys[0]: key already given to another app (first at 14:21)",
        "16:11: apps[3].id: duplicate app id \"x\" (first at 13:11)",
        "16:21: apps[3].keys[0]: key already given to another app (first at 13:21)",
    ];
    assert_eq!(all, expect);
}

#[test]
fn each_mistake_is_named_where_it_is() {
    let all = errors(&with(
        "plans:
  gold: { rate: 1000/fortnight, burst: 0 }
  empty: {}
  lonely: { burst: 5, quota: 10/year }
apps:
  - id: a
    keys: [\"short\", \"has space in it\", \"good-key-0001\"]
    plan: platinum
    services: [orders, nope]
    plans_by_service: { nope: gold, web: missing }
  - id: a
    keys: [\"good-key-0001\"]
  - keys: []
app_key: { header: off, query: off, path_segment: false }
",
    ));
    let expect = [
        "13:17: plans.gold.rate: expected a rate like 100/s, 60/min, 1000/h or 10000/day, found \"1000/fortnight\"",
        "13:40: plans.gold.burst: expected an integer from 1 to 1000000000, found \"0\"",
        "14:10: plans.empty: a plan needs at least one of rate, quota, concurrency",
        "15:11: plans.lonely: burst needs a rate",
        "15:30: plans.lonely.quota: expected a quota like 1000/minute, 50000/hour, 1000000/day or 10000000/month, found \"10/year\"",
        "18:12: apps[0].keys[0]: an app key is 8 to 256 characters of letters, digits and - _ . ~ + only",
        "18:21: apps[0].keys[1]: an app key is 8 to 256 characters of letters, digits and - _ . ~ + only",
        "19:11: apps[0].plan: unknown plan \"platinum\"",
        "20:24: apps[0].services[1]: unknown service \"nope\"",
        "21:25: apps[0].plans_by_service: unknown service \"nope\"",
        "21:42: apps[0].plans_by_service.web: unknown plan \"missing\"",
        "22:9: apps[1].id: duplicate app id \"a\" (first at 17:9)",
        "23:12: apps[1].keys[0]: key already given to another app (first at 18:40)",
        "24:5: apps[2]: missing required key \"id\"",
        "25:10: app_key: every key source is off: keep at least one",
    ];
    assert_eq!(all, expect);
    // A key is never echoed in an error.
    assert!(all.iter().all(|e| !e.contains("good-key-0001")));
}

#[test]
fn apps_may_come_before_the_plans_and_services_they_name() {
    // Apps are decoded as they are parsed; the names they use are checked
    // once the whole file is read.
    let text = "listen: 127.0.0.1:8080
apps:
  - { id: a, keys: [key-aaaa-0001], plan: gold, services: [orders] }
  - { id: b, keys: [key-bbbb-0002], plan: silver, plans_by_service: { web: gold, gone: gold } }
plans:
  gold: { rate: 10/s }
services:
  - name: orders
    endpoints: [\"127.0.0.1:9001\"]
  - name: web
    endpoints: [\"127.0.0.1:9002\"]
";
    let expect = [
        "4:43: apps[1].plan: unknown plan \"silver\"",
        "4:82: apps[1].plans_by_service: unknown service \"gone\"",
    ];
    assert_eq!(errors(text), expect);
    let c = ok(&text.replace("silver", "gold").replace(", gone: gold", ""));
    assert_eq!(c.apps.len(), 2);
    assert_eq!(c.apps[0].services, Some(vec!["orders".to_string()]));
    assert_eq!(c.apps[1].plans_by_service, [("web".into(), "gold".into())]);
}

#[test]
fn apps_that_are_not_a_list_or_given_twice_are_refused() {
    let e = errors(&with("apps: { id: a }\n"));
    assert_eq!(e, ["12:7: apps: expected a list of apps, found a mapping"]);
    let e = errors(&with(
        "apps:\n  - { id: a, keys: [key-aaaa-0001] }\napps: []\n",
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("14:1: duplicate key \"apps\""), "{e:?}");
}

#[test]
fn unknown_auth() {
    let text = BASE.replace("auth: app_key", "auth: basic");
    assert_eq!(
        errors(&text),
        ["11:11: routes[0].auth: unknown auth \"basic\" (expected app_key, jwt, mtls or none)"]
    );
}

#[test]
fn route_limits() {
    let text = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    limit: { rate: 10/s, concurrency: 4 }\n  - name: b\n    service: web\n    limit: { concurrency: 2, per: route }\n",
    );
    let c = ok(&text);
    assert_eq!(
        c.routes[0].limit,
        Some(RouteLimit {
            rate: Some(Rate {
                count: 10,
                per: Duration::from_secs(1)
            }),
            burst: Some(10),
            concurrency: Some(4),
            per: LimitKey::ClientIp,
            scope: Scope::Local,
            on_failure: OnFailure::Local,
        })
    );
    assert_eq!(c.routes[1].limit.as_ref().unwrap().per, LimitKey::Route);
    let bad = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    limit: { burst: 3, per: everyone }\n",
    );
    assert_eq!(
        errors(&bad),
        [
            "12:12: routes[0].limit: burst needs a rate",
            "12:12: routes[0].limit: a limit needs rate or concurrency",
            "12:29: routes[0].limit.per: expected client_ip, route, app, header:NAME, claim:NAME or param:NAME, found \"everyone\"",
        ]
    );
}

#[test]
fn route_limits_per_header_and_app() {
    let limit = |per: &str, auth: &str| {
        BASE.replace(
            "    auth: app_key\n",
            &format!("    auth: {auth}\n    limit: {{ rate: 10/s, per: \"{per}\" }}\n"),
        )
    };
    let c = ok(&limit("header:X-Tenant", "app_key"));
    let per = &c.routes[0].limit.as_ref().unwrap().per;
    assert_eq!(*per, LimitKey::Header("x-tenant".into()));
    assert!(!per.after_auth());
    let c = ok(&limit("app", "app_key"));
    assert_eq!(c.routes[0].limit.as_ref().unwrap().per, LimitKey::App);
    assert!(LimitKey::App.after_auth());
    assert_eq!(
        errors(&limit("app", "none")),
        ["12:12: routes[0].limit.per: per: app needs auth (app_key, jwt or mtls) on the route"]
    );
    assert_eq!(
        errors(&limit("header:x y", "app_key")),
        ["12:31: routes[0].limit.per: \"header:x y\": \"x y\" is not a header name"]
    );
    let c = ok(&limit("claim:https://example.com/tenant", "jwt"));
    let per = &c.routes[0].limit.as_ref().unwrap().per;
    assert_eq!(*per, LimitKey::Claim("https://example.com/tenant".into()));
    assert!(per.after_auth());
    assert_eq!(
        errors(&limit("claim:tenant", "app_key")),
        ["12:12: routes[0].limit.per: per: claim:NAME needs auth: jwt on the route"]
    );
    assert_eq!(
        errors(&limit("claim:tenant", "none")),
        ["12:12: routes[0].limit.per: per: claim:NAME needs auth: jwt on the route"]
    );
    assert_eq!(
        errors(&limit("claim:", "jwt")),
        ["12:31: routes[0].limit.per: \"claim:\": the claim's name is empty"]
    );
    // JSON (the admin API and etcd) says the same.
    let doc = crate::Document::from_yaml(&limit("header:x-tenant", "app_key")).unwrap();
    let c = crate::Document::from_json(&doc.to_json()).decode().unwrap();
    assert_eq!(
        c.routes[0].limit.as_ref().unwrap().per,
        LimitKey::Header("x-tenant".into())
    );
}

#[test]
fn header_policies() {
    let text = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    request_headers: { set: { X-Env: prod }, add: { X-Tag: a }, remove: [X-Debug] }\n    response_headers: { remove: [server] }\n",
    );
    let c = ok(&text);
    assert_eq!(
        c.routes[0].request_headers,
        HeaderOps {
            set: vec![("X-Env".into(), "prod".into())],
            add: vec![("X-Tag".into(), "a".into())],
            remove: vec!["x-debug".into()],
        }
    );
    assert_eq!(
        c.routes[0].response_headers.remove,
        vec!["server".to_string()]
    );
    let bad = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    request_headers: { set: { Host: x, \"bad name\": y }, remove: [content-length], drop: [a] }\n",
    );
    assert_eq!(
        errors(&bad).last().unwrap(),
        "12:83: unknown key \"drop\" in header policy (expected one of: set, add, remove)"
    );
    let bad = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    request_headers: { set: { Host: x, \"bad name\": y }, remove: [content-length] }\n",
    );
    assert_eq!(
        errors(&bad),
        [
            "12:31: routes[0].request_headers.set: \"Host\" is managed by the gateway and cannot be changed here",
            "12:40: routes[0].request_headers.set: bad header name \"bad name\"",
            "12:66: routes[0].request_headers.remove[0]: \"content-length\" is managed by the gateway and cannot be changed here",
        ]
    );
}

#[test]
fn cors() {
    let text = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    cors: { origins: [\"https://Shop.example.com\", \"https://*.partner.test\"], headers: [Content-Type], max_age: 1m }\n",
    );
    let c = ok(&text).routes[0].cors.clone().unwrap();
    assert_eq!(
        c.origins,
        vec![
            OriginMatch::Exact("https://shop.example.com".into()),
            OriginMatch::Suffix {
                scheme: "https://".into(),
                suffix: ".partner.test".into()
            }
        ]
    );
    assert_eq!(c.methods, ["GET", "HEAD", "POST"]);
    assert_eq!(c.headers, ["content-type"]);
    assert_eq!(c.max_age, Some(Duration::from_secs(60)));
    let bad = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    cors: { origins: [\"*\", \"ftp://x\", \"shop.example.com\"], credentials: true }\n",
    );
    assert_eq!(
        errors(&bad),
        [
            "12:28: routes[0].cors.origins[1]: expected an origin like https://shop.example.com, https://*.example.com or *, found \"ftp://x\"",
            "12:39: routes[0].cors.origins[2]: expected an origin like https://shop.example.com, https://*.example.com or *, found \"shop.example.com\"",
            "12:73: routes[0].cors.credentials: browsers refuse credentials with origin \"*\": list the origins",
        ]
    );
}

#[test]
fn ip_rules() {
    let c = ok(&format!(
        "{BASE}ip: {{ allow: [10.0.0.0/8, \"2001:db8::/32\", 192.168.1.7] }}\n"
    ));
    assert_eq!(c.ip.allow.len(), 3);
    assert!(c.ip.admits("10.1.2.3".parse().unwrap()));
    assert!(c.ip.admits("::ffff:10.1.2.3".parse().unwrap()));
    assert!(c.ip.admits("2001:db8::1".parse().unwrap()));
    assert!(c.ip.admits("192.168.1.7".parse().unwrap()));
    assert!(!c.ip.admits("192.168.1.8".parse().unwrap()));
    assert!(!c.ip.admits("11.0.0.1".parse().unwrap()));
    assert_eq!(
        errors(&format!(
            "{BASE}ip: {{ deny: [10.0.0.1/8, 10.0.0.0/33, nope] }}\n"
        )),
        [
            "12:14: ip.deny[0]: \"10.0.0.1/8\" has bits set after the prefix; the block is 10.0.0.0/8",
            "12:26: ip.deny[1]: prefix length must be 0 to 32, found \"33\"",
            "12:39: ip.deny[2]: expected an address block like 10.0.0.0/8 or 2001:db8::/32, found \"nope\"",
        ]
    );
}

#[test]
fn rewrite() {
    let c = ok(&BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    rewrite: { regex: \"^/orders/(.*)\", replacement: \"/v2/$1\" }\n",
    ));
    assert_eq!(
        c.routes[0].rewrite,
        Some(Rewrite {
            regex: "^/orders/(.*)".into(),
            replacement: "/v2/$1".into()
        })
    );
    let all = errors(&BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    rewrite: { regex: \"(\", replacement: \"/a b\" }\n",
    ));
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        all[0].starts_with("12:23: routes[0].rewrite.regex: invalid regex: "),
        "{all:?}"
    );
    assert_eq!(
        all[1],
        "12:41: routes[0].rewrite.replacement: a replacement cannot contain spaces, control characters, ? or #"
    );
}

#[test]
fn app_jwt_and_settings() {
    let c = ok(&with(
        "jwt: { issuer: https://i.test, leeway: 10s }
apps:
  - id: a
    jwt: { alg: HS256, secret: \"0123456789abcdef0123456789abcdef\" }
",
    ));
    assert_eq!(c.jwt.issuer.as_deref(), Some("https://i.test"));
    assert_eq!(c.jwt.app_claim, "sub");
    assert_eq!(c.jwt.leeway, Duration::from_secs(10));
    assert!(c.jwt.close_on_expiry, "on unless turned off");
    let off = ok(&with("jwt: { close_on_expiry: false }\n"));
    assert!(!off.jwt.close_on_expiry);
    let bad = errors(&with("jwt: { close_on_expiry: sometimes }\n")).join("\n");
    assert!(bad.contains("jwt.close_on_expiry"), "{bad}");
    assert_eq!(
        c.apps[0].jwt,
        Some(AppJwt {
            alg: JwtAlg::HS256,
            key: JwtKey::Secret(b"0123456789abcdef0123456789abcdef".to_vec())
        })
    );
    let all = errors(&with(
        "apps:
  - id: a
    jwt: { alg: HS256, secret: short }
  - id: b
    jwt: { alg: RS256, public_key: \"not pem\" }
  - id: c
    jwt: { alg: none }
  - id: d
    jwt: { alg: ES256, public_key_file: /nonexistent/key.pem }
  - id: e
    jwt: { alg: RS256, secret: \"0123456789abcdef0123456789abcdef\" }
",
    ));
    assert_eq!(
        all,
        [
            "14:32: apps[0].jwt: an HS256 secret needs at least 32 bytes",
            "16:36: apps[1].jwt: expected a PEM public key (-----BEGIN PUBLIC KEY-----)",
            "18:17: apps[2].jwt.alg: expected HS256, RS256 or ES256, found \"none\"",
            "20:41: apps[3].jwt.public_key_file: cannot read \"/nonexistent/key.pem\": No such file or directory (os error 2)",
            "22:10: apps[4].jwt: missing public_key or public_key_file (a PEM public key)",
            "22:32: apps[4].jwt.secret: does not apply to this alg",
        ]
    );
}

#[test]
fn jwt_issuers_and_scopes() {
    let c = ok(&with(
        "plans: { free: { rate: 10/s } }
jwt:
  issuers:
    - name: corp
      issuer: https://idp.test/realms/corp
      discovery: true
      audiences: [orders-api]
      app_claim: azp
      default_plan: free
      claims_to_headers: { sub: X-User-Id, email: X-User-Email }
    - { name: other, issuer: \"http://127.0.0.1:9/\", jwks_uri: \"http://127.0.0.1:9/keys\", audiences: [a, b] }
",
    ));
    let i = &c.jwt.issuers;
    assert_eq!(i.len(), 2);
    assert_eq!(i[0].jwks, JwksSource::Discovery);
    assert_eq!(i[0].app_claim.as_deref(), Some("azp"));
    assert_eq!(i[0].default_plan.as_deref(), Some("free"));
    assert_eq!(
        i[0].claims_to_headers,
        [
            ("sub".to_string(), "X-User-Id".to_string()),
            ("email".to_string(), "X-User-Email".to_string())
        ]
    );
    assert_eq!(i[1].jwks, JwksSource::Uri("http://127.0.0.1:9/keys".into()));
    assert_eq!(i[1].audiences, ["a", "b"]);
    assert_eq!(i[1].app_claim, None);
    let all = errors(&with(
        "jwt:
  issuers:
    - { name: a, issuer: idp, discovery: true, audiences: [x] }
    - { name: b, issuer: \"https://i\", discovery: true, jwks_uri: \"https://i/k\", audiences: [x] }
    - { name: c, issuer: \"https://j\", audiences: [] }
    - { name: d, issuer: \"https://k\", discovery: true, audiences: [x], default_plan: gold, claims_to_headers: { sub: X-App-Id } }
    - { name: e, issuer: \"https://k\", discovery: true, audiences: [x] }
    - { name: f, issuer: \"https://k\", discovery: true, audiences: [x] }
",
    ));
    assert_eq!(
        all,
        [
            "14:26: jwt.issuers[0].issuer: expected an http:// or https:// URL (the tokens' iss)",
            "15:66: jwt.issuers[1].jwks_uri: give either discovery: true or jwks_uri, not both",
            "16:7: jwt.issuers[2]: missing jwks_uri (or discovery: true)",
            "16:50: jwt.issuers[2].audiences: needs at least one audience",
            "17:86: jwt.issuers[3].default_plan: unknown plan \"gold\"",
            "17:118: jwt.issuers[3].claims_to_headers.sub: \"X-App-Id\" is the gateway's own",
            "19:7: jwt.issuers[5].issuer: another issuer has the same issuer \"https://k\" (first at 18:7)",
        ]
    );
    // scopes: on jwt routes only.
    let bad = errors(&BASE.replace("auth: app_key", "auth: app_key\n    scopes: [a]"));
    assert_eq!(
        bad,
        ["12:13: routes[0].scopes: only applies to routes with auth: jwt"]
    );
    let c = ok(&BASE.replace(
        "auth: app_key",
        "auth: jwt\n    scopes: [\"orders:read\", b]",
    ));
    assert_eq!(c.routes[0].scopes, ["orders:read", "b"]);
}

#[test]
fn jwt_issuer_introspection() {
    let dir = std::env::temp_dir().join(format!("sg-cfg-introspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret.txt");
    std::fs::write(&secret, "gw-secret\n").unwrap();
    std::fs::write(dir.join("empty.txt"), "").unwrap();
    let s = secret.display();
    let c = ok(&with(&format!(
        "jwt:
  issuers:
    - name: corp
      issuer: https://idp.test
      discovery: true
      audiences: [api]
      introspection: {{ client_id: gateway, client_secret_file: {s}, cache: 30s }}
    - {{ name: other, issuer: \"https://o\", jwks_uri: \"https://o/k\", audiences: [a] }}
"
    )));
    let i = c.jwt.issuers[0].introspection.as_ref().unwrap();
    assert_eq!(i.client_id, "gateway");
    assert_eq!(i.client_secret, "gw-secret");
    assert_eq!(i.cache, Duration::from_secs(30));
    assert_eq!(i.endpoint, None);
    assert!(c.jwt.issuers[1].introspection.is_none());
    // The secret never shows in the config's debug form.
    assert!(!format!("{c:?}").contains("gw-secret"));
    let c = ok(&with(&format!(
        "jwt:
  issuers:
    - {{ name: a, issuer: \"https://a\", jwks_uri: \"https://a/k\", audiences: [x], introspection: {{ client_id: g, client_secret_file: {s}, endpoint: \"https://a/i\" }} }}
"
    )));
    let i = c.jwt.issuers[0].introspection.as_ref().unwrap();
    assert_eq!(i.endpoint.as_deref(), Some("https://a/i"));
    assert_eq!(i.cache, crate::jwt::DEFAULT_INTROSPECTION_CACHE);
    let e = dir.join("empty.txt");
    let e = e.display();
    let all = errors(&with(&format!(
        "jwt:
  issuers:
    - {{ name: a, issuer: \"https://a\", discovery: true, audiences: [x], introspection: {{ client_id: g, client_secret_file: {s} }} }}
    - {{ name: b, issuer: \"https://b\", discovery: true, audiences: [x], introspection: {{ client_id: g, client_secret_file: {s} }} }}
    - {{ name: c, issuer: \"https://c\", jwks_uri: \"https://c/k\", audiences: [x], introspection: {{ client_id: g, client_secret_file: {s} }} }}
    - {{ name: d, issuer: \"https://d\", discovery: true, audiences: [x], introspection: {{ client_secret_file: {e}, endpoint: nope }} }}
"
    )));
    assert_eq!(all.len(), 5, "{all:#?}");
    assert!(all[0].contains("jwt.issuers[1].introspection: only one issuer may have introspection (issuers[0] has it)"), "{all:#?}");
    assert!(
        all[1].contains(
            "jwt.issuers[2].introspection: missing endpoint (or the issuer's discovery: true)"
        ),
        "{all:#?}"
    );
    assert!(
        all[2].contains("jwt.issuers[3].introspection: missing required key \"client_id\""),
        "{all:#?}"
    );
    assert!(
        all[3].contains("jwt.issuers[3].introspection.client_secret_file: the file is empty"),
        "{all:#?}"
    );
    assert!(
        all[4]
            .contains("jwt.issuers[3].introspection.endpoint: expected an http:// or https:// URL"),
        "{all:#?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn health_checks() {
    let text = BASE.replace(
        "    endpoints: [\"127.0.0.1:9001\"]\n",
        "    endpoints: [\"127.0.0.1:9001\"]\n    health: { path: /healthz, interval: 500ms, expect_status: [200, 300-302] }\n",
    );
    let h = ok(&text).services[0].health.clone().unwrap();
    assert_eq!(
        h,
        HealthCheck {
            path: Some("/healthz".into()),
            grpc_service: None,
            interval: Duration::from_millis(500),
            timeout: Duration::from_secs(1),
            healthy_after: 2,
            unhealthy_after: 3,
            expect_status: vec![(200, 200), (300, 302)],
        }
    );
    let text = BASE.replace(
        "    endpoints: [\"127.0.0.1:9001\"]\n",
        "    endpoints: [\"127.0.0.1:9001\"]\n    health: { type: udp, path: healthz, unhealthy_after: 0, expect_status: [99] }\n",
    );
    let all = errors(&text);
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(
        all[0].contains("services[0].health.type: expected http, tcp or grpc, found \"udp\""),
        "{all:?}"
    );
    assert!(
        all[1].contains("services[0].health.path: expected a path like /healthz"),
        "{all:?}"
    );
    assert!(
        all[2].contains("services[0].health.unhealthy_after: expected an integer from 1 to 100"),
        "{all:?}"
    );
    assert!(
        all[3].contains("services[0].health.expect_status[0]: expected a status or a range"),
        "{all:?}"
    );
}

#[test]
fn grpc_health_checks() {
    let with_health = |protocol: &str, health: &str| {
        BASE.replace(
            "    endpoints: [\"127.0.0.1:9001\"]\n",
            &format!("    endpoints: [\"127.0.0.1:9001\"]\n{protocol}    health: {health}\n"),
        )
    };
    let h2c = "    protocol: h2c\n";
    let text = with_health(h2c, "{ type: grpc, service: test.Echo, interval: 100ms }");
    let h = ok(&text).services[0].health.clone().unwrap();
    assert_eq!(h.path, None);
    assert_eq!(h.grpc_service.as_deref(), Some("test.Echo"));
    assert_eq!(h.interval, Duration::from_millis(100));
    assert_eq!((h.healthy_after, h.unhealthy_after), (2, 3));
    // Without a service: the server's overall health.
    let h = ok(&with_health(h2c, "{ type: grpc }")).services[0]
        .health
        .clone()
        .unwrap();
    assert_eq!(h.grpc_service.as_deref(), Some(""));
    // The other types have no gRPC service; tcp no path; http's default.
    for (health, path) in [
        ("{ type: tcp }", None),
        ("{ type: http }", Some("/")),
        ("{ interval: 1s }", Some("/")),
    ] {
        let h = ok(&with_health("", health)).services[0]
            .health
            .clone()
            .unwrap();
        assert_eq!(
            (h.path.as_deref(), h.grpc_service),
            (path, None),
            "{health}"
        );
    }

    // What does not go with grpc, and service without it.
    let all = errors(&with_health(
        h2c,
        "{ type: grpc, path: /h, expect_status: [200] }",
    ));
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        all[0].contains("services[0].health.path: does not apply to type: grpc"),
        "{all:?}"
    );
    assert!(
        all[1].contains("services[0].health.expect_status: does not apply to type: grpc"),
        "{all:?}"
    );
    for health in [
        "{ service: a }",
        "{ type: tcp, service: a }",
        "{ type: http, service: a }",
    ] {
        let all = errors(&with_health(h2c, health));
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(
            all[0].contains("services[0].health.service: only applies to type: grpc"),
            "{all:?}"
        );
    }
    let all = errors(&with_health(h2c, "{ type: grpc, service: [a] }"));
    assert!(
        all[0].contains("services[0].health.service: expected a string"),
        "{all:?}"
    );
    let long = format!("{{ type: grpc, service: {} }}", "a".repeat(1025));
    let all = errors(&with_health(h2c, &long));
    assert!(
        all[0].contains("services[0].health.service: expected a gRPC service name"),
        "{all:?}"
    );

    // gRPC needs HTTP/2 to the endpoints.
    let all = errors(&with_health("", "{ type: grpc }"));
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(
        all[0].contains(
            "services[0].health.type: grpc needs the service's protocol to be h2c, h2 or auto \
             (the gRPC health protocol runs over HTTP/2); it is http1 by default"
        ),
        "{all:?}"
    );
    let all = errors(&with_health("    protocol: http1\n", "{ type: grpc }"));
    assert!(all[0].ends_with("it is http1"), "{all:?}");
    // A protocol with errors of its own is reported once.
    let all = errors(&with_health("    protocol: h3\n", "{ type: grpc }"));
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(all[0].contains("services[0].protocol: expected"), "{all:?}");
}
