//! `cluster.redis` and the `scope` and `on_failure` of plans and route
//! limits: what they decode to, and each mistake named where it is.

use super::{errors, ok};
use crate::*;

const BASE: &str = "listen: 127.0.0.1:8080
services:
  - name: orders
    endpoints: [\"127.0.0.1:9001\"]
routes:
  - name: orders
    match: { path_prefix: /orders }
    service: orders
    auth: app_key
";

#[test]
fn redis_and_global_plans_decode() {
    let c = ok(&format!(
        "{BASE}cluster:
  redis: {{ url: \"redis://10.0.0.5:6379/2\", password_file: /run/redis.pw, cluster: true }}
plans:
  gold: {{ rate: 100/s, quota: 1000/day, scope: global, on_failure: deny }}
  free: {{ rate: 5/s }}
"
    ));
    assert_eq!(
        c.cluster.redis,
        Some(RedisConfig {
            url: "redis://10.0.0.5:6379/2".into(),
            tls: false,
            password_file: Some("/run/redis.pw".into()),
            ca_file: None,
            cluster: true,
        })
    );
    assert_eq!(c.plans[0].scope, Scope::Global);
    assert_eq!(c.plans[0].on_failure, OnFailure::Deny);
    assert_eq!(c.plans[1].scope, Scope::Local);
    assert_eq!(c.plans[1].on_failure, OnFailure::Local);
    let tls = ok(&format!(
        "{BASE}cluster: {{ redis: {{ url: \"rediss://r:6380\" }} }}\n"
    ));
    assert!(tls.cluster.redis.unwrap().tls);
    let ca = ok(&format!(
        "{BASE}cluster: {{ redis: {{ url: \"redis://r:6380\", tls: true, ca_file: /etc/redis-ca.pem }} }}\n"
    ));
    let r = ca.cluster.redis.unwrap();
    assert!(r.tls);
    assert_eq!(r.ca_file, Some("/etc/redis-ca.pem".into()));
}

#[test]
fn a_ca_file_needs_tls() {
    assert_eq!(
        errors(&format!(
            "{BASE}cluster: {{ redis: {{ url: \"redis://r\", ca_file: /etc/ca.pem }} }}\n"
        )),
        ["10:48: cluster.redis.ca_file: ca_file is for TLS: set tls: true or use a rediss:// URL"]
    );
}

#[test]
fn a_global_route_limit_is_per_route() {
    let text = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    limit: { rate: 50/s, per: route, scope: global }\n",
    );
    let c = ok(&format!(
        "{text}cluster: {{ redis: {{ url: \"redis://r\" }} }}\n"
    ));
    let l = c.routes[0].limit.as_ref().unwrap();
    assert_eq!((l.scope, l.on_failure), (Scope::Global, OnFailure::Local));
}

#[test]
fn mistakes_are_named() {
    let redis = "cluster: { redis: { url: \"redis://r\" } }\n";
    assert_eq!(
        errors(&format!(
            "{BASE}plans:\n  gold: {{ rate: 1/s, scope: global }}\n"
        )),
        ["11:3: plans.gold: has scope: global but cluster.redis is not set"]
    );
    assert_eq!(
        errors(&format!(
            "{BASE}{redis}plans:\n  gold: {{ rate: 1/s, scope: everywhere }}\n"
        )),
        ["12:29: plans.gold.scope: expected local or global, found \"everywhere\""]
    );
    assert_eq!(
        errors(&format!(
            "{BASE}plans:\n  gold: {{ rate: 1/s, on_failure: deny }}\n"
        )),
        ["11:34: plans.gold.on_failure: on_failure is for scope: global limits"]
    );
    assert_eq!(
        errors(&format!(
            "{BASE}{redis}plans:\n  gold: {{ concurrency: 3, scope: global }}\n"
        )),
        ["12:9: plans.gold: scope: global needs a rate or a quota (concurrency is per process)"]
    );
    let per_ip = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    limit: { rate: 50/s, scope: global }\n",
    );
    // Any per may be global; it needs a rate.
    assert!(crate::parse(&format!("{per_ip}{redis}")).is_ok());
    let conc_only = BASE.replace(
        "    auth: app_key\n",
        "    auth: app_key\n    limit: { concurrency: 5, per: \"header:x-tenant\", scope: global }\n",
    );
    assert_eq!(
        errors(&format!("{conc_only}{redis}")),
        ["10:12: routes[0].limit: scope: global needs a rate (concurrency is per process)"]
    );
    assert_eq!(
        errors(&format!("{BASE}cluster: {{ redis: {{ url: \"http://r\" }} }}\n")),
        ["10:26: cluster.redis.url: expected a URL like redis://127.0.0.1:6379 or rediss://redis.internal:6380, found \"http://r\""]
    );
    assert_eq!(
        errors(&format!(
            "{BASE}cluster: {{ redis: {{ url: \"redis://u:pw@r\" }} }}\n"
        )),
        ["10:26: cluster.redis.url: put the password in password_file, not in the URL"]
    );
    assert_eq!(
        errors(&format!("{BASE}cluster: {{ redis: {{ tls: true }} }}\n")),
        ["10:19: cluster.redis: missing required key \"url\""]
    );
}
