//! `config_source`: where the gateway's services, routes, apps, plans and
//! settings come from when not from the file alone: `etcd`, with its
//! endpoints, key prefix, TLS and credentials; and the connection part of
//! it, which `cluster.etcd` (the etcd of `discovery.etcd`) shares.

use std::path::PathBuf;

use crate::reader::{self, fields, Cx, Fields, Path};
use crate::yaml::Node;

/// `config_source`: the config is kept elsewhere; the file then holds what
/// this gateway needs to start (listeners, admin, the source itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    Etcd(EtcdSource),
}

/// `config_source.etcd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdSource {
    pub connection: EtcdConnection,
    /// The key prefix every object is under; starts and ends with `/`.
    pub prefix: String,
    /// Where the last applied config is kept for a start while etcd is
    /// down; `None`: beside the config file (`FILE.etcd-cache.json`).
    pub cache: Option<PathBuf>,
    /// The TTL of the lease that makes one gateway of the fleet the
    /// rollouts' leader (whole seconds, at least 2 s).
    pub leader_ttl: std::time::Duration,
}

/// `config_source.etcd.leader_ttl` when not given.
pub const DEFAULT_LEADER_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// How to reach an etcd cluster: `config_source.etcd` without its
/// `prefix` and `cache`, or `cluster.etcd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConnection {
    /// `http://HOST:PORT` or `https://HOST:PORT`, at least one.
    pub endpoints: Vec<String>,
    pub tls: Option<EtcdTls>,
    /// Username and the file holding its password (both or neither).
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
}

/// `config_source.etcd.tls`: the CA that signs etcd's certificate, and a
/// client certificate and key when etcd asks for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Decodes `config_source`.
pub(crate) fn config_source(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<ConfigSource> {
    let f = fields(cx, node, path, "config_source", SOURCE_KEYS)?;
    let etcd = f.require(cx, path, "etcd")?;
    etcd_source(cx, etcd, path.key("etcd")).map(ConfigSource::Etcd)
}

pub(crate) const SOURCE_KEYS: &[&str] = &["etcd"];
pub(crate) const ETCD_TLS_KEYS: &[&str] = &["ca", "cert", "key"];
pub(crate) const ETCD_KEYS: &[&str] = &[
    "endpoints",
    "prefix",
    "tls",
    "username",
    "password_file",
    "cache",
    "leader_ttl",
];

/// The keys of `cluster.etcd`: those of `config_source.etcd` that say how
/// to connect.
pub(crate) const ETCD_CONNECTION_KEYS: &[&str] = &["endpoints", "tls", "username", "password_file"];

fn etcd_source(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<EtcdSource> {
    let f = fields(cx, node, path, "config_source.etcd", ETCD_KEYS)?;
    let before = cx.errors.len();
    let connection = connection(cx, &f, node, path, "config_source.etcd");
    let prefix = match f.get("prefix") {
        None => "/sluicegate/".to_string(),
        Some(n) => prefix(cx, n, path.key("prefix")).unwrap_or_default(),
    };
    let cache = f
        .get("cache")
        .and_then(|n| reader::file_path(cx, n, path.key("cache")));
    let leader_ttl = match f.get("leader_ttl") {
        None => DEFAULT_LEADER_TTL,
        Some(n) => {
            let p = path.key("leader_ttl");
            let d = reader::duration(cx, n, p).unwrap_or(DEFAULT_LEADER_TTL);
            if d.subsec_nanos() != 0 || d.as_secs() < 2 {
                cx.at(
                    n.pos,
                    p,
                    "must be whole seconds, at least 2s (an etcd lease TTL)",
                );
            }
            d
        }
    };
    (cx.errors.len() == before).then_some(EtcdSource {
        connection: connection?,
        prefix,
        cache,
        leader_ttl,
    })
}

/// Decodes `cluster.etcd`.
pub(crate) fn etcd_connection(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<EtcdConnection> {
    let f = fields(cx, node, path, "cluster.etcd", ETCD_CONNECTION_KEYS)?;
    connection(cx, &f, node, path, "cluster.etcd")
}

/// The connection keys of an etcd mapping (`None` if any is wrong).
fn connection(
    cx: &mut Cx,
    f: &Fields<'_>,
    node: &Node,
    path: Path<'_>,
    what: &str,
) -> Option<EtcdConnection> {
    let before = cx.errors.len();
    let endpoints = f
        .require(cx, path, "endpoints")
        .map(|n| endpoints(cx, n, path.key("endpoints")))
        .unwrap_or_default();
    let tls = f.get("tls").and_then(|n| tls(cx, n, path.key("tls"), what));
    let username = f
        .get("username")
        .and_then(|n| reader::string(cx, n, path.key("username")))
        .map(str::to_string);
    let password_file = f
        .get("password_file")
        .and_then(|n| reader::file_path(cx, n, path.key("password_file")));
    if username.is_some() != password_file.is_some() {
        cx.at(
            node.pos,
            path,
            "username and password_file go together: give both or neither",
        );
    }
    if tls.is_none() && endpoints.iter().any(|e| e.starts_with("https://")) {
        cx.at(
            node.pos,
            path,
            "an https:// endpoint needs tls (at least tls.ca)",
        );
    }
    (cx.errors.len() == before).then_some(EtcdConnection {
        endpoints,
        tls,
        username,
        password_file,
    })
}

/// `endpoints`: a non-empty list of `http://HOST:PORT` or `https://HOST:PORT`.
fn endpoints(cx: &mut Cx, node: &Node, path: Path<'_>) -> Vec<String> {
    const EXPECTED: &str = "a list of http://HOST:PORT or https://HOST:PORT";
    let Some(items) = reader::list(cx, node, path, EXPECTED) else {
        return Vec::new();
    };
    if items.is_empty() {
        cx.at(node.pos, path, "at least one etcd endpoint is needed");
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(text) = reader::scalar(cx, item, p, EXPECTED) else {
            continue;
        };
        if valid_endpoint(text) {
            out.push(text.to_string());
        } else {
            cx.expected(item, p, "http://HOST:PORT or https://HOST:PORT");
        }
    }
    out
}

/// `http://HOST:PORT` or `https://HOST:PORT`, nothing after the port.
fn valid_endpoint(text: &str) -> bool {
    let Some(rest) = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"))
    else {
        return false;
    };
    let Some((host, port)) = rest.rsplit_once(':') else {
        return false;
    };
    !host.is_empty() && !host.contains(['/', ' ', '@']) && port.parse::<u16>().is_ok_and(|p| p != 0)
}

/// `prefix`: starts and ends with `/`, at least one character between.
pub(crate) fn prefix(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<String> {
    const EXPECTED: &str = "a key prefix that starts and ends with / (like /sluicegate/)";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    if text.len() < 3 || !text.starts_with('/') || !text.ends_with('/') || text.contains('\0') {
        cx.expected(node, path, EXPECTED);
        return None;
    }
    Some(text.to_string())
}

fn tls(cx: &mut Cx, node: &Node, path: Path<'_>, what: &str) -> Option<EtcdTls> {
    let what = format!("{what}.tls");
    let f = fields(cx, node, path, &what, ETCD_TLS_KEYS)?;
    let mut file = |name: &str| {
        f.get(name)
            .and_then(|n| reader::file_path(cx, n, path.key(name)))
    };
    let out = EtcdTls {
        ca: file("ca"),
        cert: file("cert"),
        key: file("key"),
    };
    if out.cert.is_some() != out.key.is_some() {
        cx.at(
            node.pos,
            path,
            "cert and key go together: give both or neither",
        );
        return None;
    }
    Some(out)
}
