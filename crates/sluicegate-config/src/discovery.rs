//! `dns` (the resolver the discovery plane asks, and how long answers are
//! kept) and a service's `discovery` (`dns_srv`, or `etcd.prefix`). Only
//! the form of names is checked: `validate` never asks a resolver nor
//! etcd; names are resolved, and prefixes read, while serving.

use std::net::SocketAddr;
use std::time::Duration;

use crate::model::DnsSettings;
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node};

pub(crate) const DNS_KEYS: &[&str] = &["servers", "min_ttl", "max_ttl"];
pub(crate) const DISCOVERY_KEYS: &[&str] = &["dns_srv", "etcd"];
pub(crate) const DISCOVERY_ETCD_KEYS: &[&str] = &["prefix"];

/// A service's `discovery`, decoded: one of the two is set.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub dns_srv: Option<String>,
    pub etcd: Option<String>,
}

/// Decodes the top-level `dns`.
pub(crate) fn dns(cx: &mut Cx, node: &Node, path: Path<'_>) -> DnsSettings {
    let mut out = DnsSettings::default();
    let Some(f) = fields(cx, node, path, "dns", DNS_KEYS) else {
        return out;
    };
    if let Some(n) = f.get("servers") {
        let p = path.key("servers");
        if let Some(items) = reader::list(cx, n, p, "a list of name server addresses") {
            for (i, item) in items.iter().enumerate() {
                let p = p.index(i);
                let Some(text) = reader::scalar(cx, item, p, "an address IP:port") else {
                    continue;
                };
                match text.trim().parse::<SocketAddr>() {
                    Ok(a) if a.port() != 0 => out.servers.push(a),
                    _ => cx.at(
                        item.pos,
                        p,
                        format_args!(
                            "bad address {} (expected IP:port, e.g. 127.0.0.1:53 or [::1]:53)",
                            quote(text)
                        ),
                    ),
                }
            }
        }
    }
    reader::duration_field(cx, &f, path, "min_ttl", &mut out.min_ttl);
    reader::duration_field(cx, &f, path, "max_ttl", &mut out.max_ttl);
    if out.min_ttl < Duration::from_millis(10) {
        let n = f.get("min_ttl").unwrap_or(node);
        cx.at(n.pos, path.key("min_ttl"), "must be at least 10ms");
    } else if out.max_ttl < out.min_ttl {
        let n = f.get("max_ttl").unwrap_or(node);
        cx.at(
            n.pos,
            path.key("max_ttl"),
            "must not be shorter than min_ttl",
        );
    }
    out
}

/// Decodes a service's `discovery`: an SRV name, or an etcd prefix.
pub(crate) fn discovery(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Found> {
    let f = fields(cx, node, path, "discovery", DISCOVERY_KEYS)?;
    match (f.get("dns_srv"), f.get("etcd")) {
        (None, None) => {
            cx.at(node.pos, path, "needs dns_srv or etcd");
            None
        }
        (Some(_), Some(_)) => {
            cx.at(
                node.pos,
                path,
                "give dns_srv or etcd, not both: a service's endpoints come from one of them",
            );
            None
        }
        (Some(n), None) => dns_srv(cx, n, path.key("dns_srv")).map(|name| Found {
            dns_srv: Some(name),
            etcd: None,
        }),
        (None, Some(n)) => etcd(cx, n, path.key("etcd")).map(|prefix| Found {
            dns_srv: None,
            etcd: Some(prefix),
        }),
    }
}

fn dns_srv(cx: &mut Cx, n: &Node, p: Path<'_>) -> Option<String> {
    let name = reader::string(cx, n, p)?.trim().trim_end_matches('.');
    if !reader::is_host_name(name) || !name.contains('.') {
        cx.at(
            n.pos,
            p,
            format_args!(
                "bad SRV name {}: expected e.g. _http._tcp.orders.example",
                quote(name)
            ),
        );
        return None;
    }
    Some(name.to_string())
}

/// `discovery.etcd`: `{ prefix: /services/orders/ }`.
fn etcd(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<String> {
    let f = fields(cx, node, path, "discovery.etcd", DISCOVERY_ETCD_KEYS)?;
    let n = f.require(cx, path, "prefix")?;
    crate::source::prefix(cx, n, path.key("prefix"))
}
