//! `cluster`: the Redis that a fleet's instances share for `scope: global`
//! limits, the etcd they register in for `discovery.etcd`, and the `scope`
//! and `on_failure` keys of plans and route limits.
//! Only the form is checked: `validate` never connects.

use crate::model::{ClusterConfig, OnFailure, RedisConfig, Scope};
use crate::reader::{self, fields, Cx, Fields, Path};
use crate::yaml::{quote, Node};

pub(crate) const CLUSTER_KEYS: &[&str] = &["redis", "etcd"];
pub(crate) const REDIS_KEYS: &[&str] = &["url", "tls", "password_file", "ca_file", "cluster"];

/// Decodes `cluster`.
pub(crate) fn cluster(cx: &mut Cx, node: &Node, path: Path<'_>) -> ClusterConfig {
    let mut out = ClusterConfig::default();
    let Some(f) = fields(cx, node, path, "cluster", CLUSTER_KEYS) else {
        return out;
    };
    if let Some(n) = f.get("redis") {
        out.redis = redis(cx, n, path.key("redis"));
    }
    if let Some(n) = f.get("etcd") {
        out.etcd = crate::source::etcd_connection(cx, n, path.key("etcd"));
    }
    out
}

fn redis(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<RedisConfig> {
    let f = fields(cx, node, path, "redis", REDIS_KEYS)?;
    let n = f.require(cx, path, "url")?;
    let p = path.key("url");
    const EXPECTED: &str = "a URL like redis://127.0.0.1:6379 or rediss://redis.internal:6380";
    let url = reader::string(cx, n, p)?;
    let rest = url
        .strip_prefix("redis://")
        .or_else(|| url.strip_prefix("rediss://"));
    let host = rest.map(|r| r.split(['/', '?']).next().unwrap_or_default());
    // A password in the URL would be logged and shown by the admin API.
    if host.is_some_and(|h| h.contains('@')) {
        cx.at(
            n.pos,
            p,
            "put the password in password_file, not in the URL",
        );
        return None;
    }
    if host.is_none_or(|h| h.is_empty() || h.contains(char::is_whitespace)) {
        cx.at(
            n.pos,
            p,
            format_args!("expected {EXPECTED}, found {}", quote(url)),
        );
        return None;
    }
    let mut out = RedisConfig {
        url: url.to_string(),
        tls: url.starts_with("rediss://"),
        password_file: None,
        ca_file: None,
        cluster: false,
    };
    if let Some(n) = f.get("tls") {
        if let Some(b) = reader::boolean(cx, n, path.key("tls")) {
            if !b && out.tls {
                cx.at(n.pos, path.key("tls"), "a rediss:// URL always uses TLS");
            }
            out.tls |= b;
        }
    }
    if let Some(n) = f.get("password_file") {
        out.password_file = reader::file_path(cx, n, path.key("password_file"));
    }
    if let Some(n) = f.get("ca_file") {
        let p = path.key("ca_file");
        out.ca_file = reader::file_path(cx, n, p);
        if !out.tls {
            cx.at(
                n.pos,
                p,
                "ca_file is for TLS: set tls: true or use a rediss:// URL",
            );
        }
    }
    if let Some(n) = f.get("cluster") {
        out.cluster = reader::boolean(cx, n, path.key("cluster")).unwrap_or(false);
    }
    Some(out)
}

/// A plan's `scope` and `on_failure`: a global plan needs something to
/// count in Redis.
pub(crate) fn plan_scope(cx: &mut Cx, f: &Fields<'_>, path: Path<'_>) -> (Scope, OnFailure) {
    let out = scope(cx, f, path);
    if out.0 == Scope::Global && f.get("rate").is_none() && f.get("quota").is_none() {
        let msg = "scope: global needs a rate or a quota (concurrency is per process)";
        cx.at(f.pos, path, msg);
    }
    out
}

/// A route limit's `scope` and `on_failure`: global (with any `per`) only
/// for a rate.
pub(crate) fn route_scope(cx: &mut Cx, f: &Fields<'_>, path: Path<'_>) -> (Scope, OnFailure) {
    let out = scope(cx, f, path);
    if out.0 == Scope::Global && f.get("rate").is_none() {
        let msg = "scope: global needs a rate (concurrency is per process)";
        cx.at(f.pos, path, msg);
    }
    out
}

/// Reads `scope` and `on_failure` of a plan or route limit (defaults:
/// `local`, `local`).
fn scope(cx: &mut Cx, f: &Fields<'_>, path: Path<'_>) -> (Scope, OnFailure) {
    let scope = match f.get("scope") {
        None => Scope::Local,
        Some(n) => match reader::scalar(cx, n, path.key("scope"), "local or global") {
            Some("local") => Scope::Local,
            Some("global") => Scope::Global,
            Some(other) => {
                let msg = format_args!("expected local or global, found {}", quote(other));
                cx.at(n.pos, path.key("scope"), msg);
                Scope::Local
            }
            None => Scope::Local,
        },
    };
    let on_failure = match f.get("on_failure") {
        None => OnFailure::Local,
        Some(n) => {
            let p = path.key("on_failure");
            let v = match reader::scalar(cx, n, p, "local or deny") {
                Some("local") => OnFailure::Local,
                Some("deny") => OnFailure::Deny,
                Some(other) => {
                    let msg = format_args!("expected local or deny, found {}", quote(other));
                    cx.at(n.pos, p, msg);
                    OnFailure::Local
                }
                None => OnFailure::Local,
            };
            if scope == Scope::Local {
                cx.at(n.pos, p, "on_failure is for scope: global limits");
            }
            v
        }
    };
    (scope, on_failure)
}
