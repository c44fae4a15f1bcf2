//! The `services` list: names, endpoints (with address resolution), balancing, upstream timeouts and forwarded headers (upstream `tls` is in `tls`, `health` in `health`).

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::model::{Balance, Endpoint, HashKey, Service, UpstreamProtocol, UpstreamTimeouts};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

pub(crate) const SERVICE_KEYS: &[&str] = &[
    "name",
    "endpoints",
    "balance",
    "hash_key",
    "max_connections_per_endpoint",
    "timeouts",
    "health",
    "retries",
    "breaker",
    "ejection",
    "forwarded_headers",
    "tls",
    "protocol",
];

/// Default for `max_connections_per_endpoint`.
pub const DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT: usize = 512;

/// Largest endpoint weight.
pub const MAX_WEIGHT: u64 = 1000;

/// Addresses already resolved in this load, so that an endpoint used by many
/// services is looked up once.
type ResolveCache = HashMap<String, Result<SocketAddr, String>>;

/// Decodes the services list. Every service that has a name is entered in
/// `names` (name -> position) even when it has other problems, so that
/// routes naming it are not reported as well.
pub(crate) fn services<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    names: &mut HashMap<&'n str, Pos>,
) -> Vec<Service> {
    let Some(items) = reader::list(cx, node, path, "a list of services") else {
        return Vec::new();
    };
    names.reserve(items.len());
    let mut cache = ResolveCache::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if let Some(service) = service(cx, item, path.index(i), names, &mut cache) {
            out.push(service);
        }
    }
    out
}

fn service<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    names: &mut HashMap<&'n str, Pos>,
    cache: &mut ResolveCache,
) -> Option<Service> {
    let f = fields(cx, node, path, "service", SERVICE_KEYS)?;
    let name = f
        .require(cx, path, "name")
        .and_then(|n| service_name(cx, n, path.key("name"), names));
    let endpoints = f
        .require(cx, path, "endpoints")
        .map(|n| endpoints(cx, n, path.key("endpoints"), cache))
        .unwrap_or_default();

    let mut balance = Balance::RoundRobin;
    let mut balance_ok = true;
    if let Some(node) = f.get("balance") {
        match parse_balance(cx, node, path.key("balance")) {
            Some(b) => balance = b,
            None => balance_ok = false,
        }
    }
    let mut hash_key = HashKey::ClientIp;
    if let Some(node) = f.get("hash_key") {
        let p = path.key("hash_key");
        if let Some(key) = parse_hash_key(cx, node, p) {
            hash_key = key;
            if balance_ok && balance != Balance::Hash {
                let how = if f.get("balance").is_some() {
                    ""
                } else {
                    " by default"
                };
                cx.at(
                    node.pos,
                    p,
                    format_args!(
                        "hash_key only applies with balance: hash (balance is {}{how})",
                        balance_name(balance)
                    ),
                );
            }
        }
    }
    let mut max_connections_per_endpoint = DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT;
    if let Some(node) = f.get("max_connections_per_endpoint") {
        let p = path.key("max_connections_per_endpoint");
        if let Some(n) = reader::positive_usize(cx, node, p) {
            max_connections_per_endpoint = n;
        }
    }
    let forwarded_headers = match f.get("forwarded_headers") {
        None => Some(true),
        Some(n) => reader::boolean(cx, n, path.key("forwarded_headers")),
    };
    let mut timeouts = UpstreamTimeouts::default();
    if let Some(node) = f.get("timeouts") {
        upstream_timeouts(cx, node, path.key("timeouts"), &mut timeouts);
    }
    let retries = match f.get("retries") {
        None => Some(crate::model::Retries::default()),
        Some(n) => crate::resilience::retries(cx, n, path.key("retries")),
    };
    let tls = match f.get("tls") {
        None => Some(None),
        Some(n) => crate::tls::upstream_tls(cx, n, path.key("tls")),
    };
    let breaker = match f.get("breaker") {
        None => Some(None),
        Some(n) => crate::resilience::breaker(cx, n, path.key("breaker")).map(Some),
    };
    let ejection = match f.get("ejection") {
        None => Some(Some(crate::model::Ejection::default())),
        Some(n) => crate::resilience::ejection(cx, n, path.key("ejection")),
    };
    let protocol = match f.get("protocol") {
        None => Some(UpstreamProtocol::Http1),
        Some(n) => protocol(
            cx,
            n,
            path.key("protocol"),
            tls.as_ref().map(Option::is_some),
        ),
    };
    let health = match f.get("health") {
        None => Some(None),
        Some(n) => crate::health::health(
            cx,
            n,
            path.key("health"),
            protocol,
            f.get("protocol").is_some(),
        )
        .map(Some),
    };
    Some(Service {
        name: name?,
        endpoints,
        balance,
        hash_key,
        max_connections_per_endpoint,
        timeouts,
        health: health?,
        retries: retries?,
        breaker: breaker?,
        ejection: ejection?,
        forwarded_headers: forwarded_headers?,
        tls: tls?,
        protocol: protocol?,
    })
}

/// `protocol`: `http1`, `h2` (needs `tls`), `h2c` (needs no `tls`) or
/// `auto` (needs `tls`). `has_tls` is unknown when `tls` has errors.
fn protocol(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    has_tls: Option<bool>,
) -> Option<UpstreamProtocol> {
    const EXPECTED: &str = "one of http1, h2, h2c, auto";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    let p = match text {
        "http1" => UpstreamProtocol::Http1,
        "h2" => UpstreamProtocol::H2,
        "h2c" => UpstreamProtocol::H2c,
        "auto" => UpstreamProtocol::Auto,
        _ => {
            cx.expected(node, path, EXPECTED);
            return None;
        }
    };
    let why = match (p, has_tls) {
        (UpstreamProtocol::H2 | UpstreamProtocol::Auto, Some(false)) => {
            "needs tls (HTTP/2 over TLS is chosen by ALPN); for HTTP/2 in the clear use h2c"
        }
        (UpstreamProtocol::H2c, Some(true)) => {
            "is HTTP/2 in the clear and cannot go with tls; over TLS use h2"
        }
        _ => return Some(p),
    };
    cx.at(node.pos, path, format_args!("{text} {why}"));
    None
}

/// A valid, unique service name; registers it in `names`.
fn service_name<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    names: &mut HashMap<&'n str, Pos>,
) -> Option<String> {
    let name = reader::string(cx, node, path)?;
    if let Some(first) = names.get(name) {
        cx.at(
            node.pos,
            path,
            format_args!("duplicate service name {} (first at {first})", quote(name)),
        );
        return None;
    }
    names.insert(name, node.pos);
    if !reader::is_name(name) {
        cx.at(
            node.pos,
            path,
            format_args!(
                "bad name {}: use letters, digits, '_', '.' and '-'",
                quote(name)
            ),
        );
        return None;
    }
    Some(name.to_string())
}

fn endpoints(cx: &mut Cx, node: &Node, path: Path<'_>, cache: &mut ResolveCache) -> Vec<Endpoint> {
    let Some(items) = reader::list(cx, node, path, "a list of endpoints") else {
        return Vec::new();
    };
    if items.is_empty() {
        cx.at(node.pos, path, "needs at least one endpoint");
    }
    let mut seen: HashMap<SocketAddr, usize> = HashMap::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some((endpoint, addr_node)) = endpoint(cx, item, p, cache) else {
            continue;
        };
        if let Some(first) = seen.get(&endpoint.addr) {
            cx.at(
                addr_node.pos,
                p,
                format_args!(
                    "duplicate endpoint {} (same address {} as endpoints[{first}])",
                    quote(&endpoint.name),
                    endpoint.addr
                ),
            );
            continue;
        }
        seen.insert(endpoint.addr, i);
        out.push(endpoint);
    }
    out
}

/// One endpoint: `"host:port"` or `{ addr: "host:port", weight: N }`.
/// Returns it with the node holding its address.
fn endpoint<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    cache: &mut ResolveCache,
) -> Option<(Endpoint, &'n Node)> {
    if node.as_scalar().is_some() {
        let (name, addr) = endpoint_addr(cx, node, path, cache)?;
        return Some((
            Endpoint {
                name,
                addr,
                weight: 1,
            },
            node,
        ));
    }
    if !matches!(node.value, crate::yaml::Value::Map(_)) {
        cx.expected(
            node,
            path,
            "an address host:port or a mapping with addr and weight",
        );
        return None;
    }
    let f = fields(cx, node, path, "endpoint", ENDPOINT_KEYS)?;
    let weight = match f.get("weight") {
        None => Some(1),
        Some(w) => reader::int_in(cx, w, path.key("weight"), 1, MAX_WEIGHT)
            .and_then(|w| u32::try_from(w).ok()),
    };
    let addr_node = f.require(cx, path, "addr")?;
    let (name, addr) = endpoint_addr(cx, addr_node, path.key("addr"), cache)?;
    let weight = weight?;
    Some((Endpoint { name, addr, weight }, addr_node))
}

fn endpoint_addr(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    cache: &mut ResolveCache,
) -> Option<(String, SocketAddr)> {
    let text = reader::scalar(cx, node, path, "an address host:port")?.trim();
    let result = match text.parse::<SocketAddr>() {
        // IP literals need no lookup, so no cache entry either.
        Ok(_) => resolve(text, cx.lookup),
        Err(_) => match cache.get(text) {
            Some(r) => r.clone(),
            None => {
                let r = resolve(text, cx.lookup);
                cache.insert(text.to_string(), r.clone());
                r
            }
        },
    };
    match result {
        Ok(addr) => Some((text.to_string(), addr)),
        Err(reason) => {
            cx.at(node.pos, path, reason);
            None
        }
    }
}

/// Resolves `host:port`: an IP literal as it is, a host name with `lookup`.
pub(crate) fn resolve(text: &str, lookup: reader::Lookup) -> Result<SocketAddr, String> {
    let bad = |why: &str| format!("bad address {}: {why}", quote(text));
    if let Ok(addr) = text.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return Err(bad("port 0 is not allowed"));
        }
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(bad(
            "expected host:port, e.g. 127.0.0.1:9001 or backend.local:9001",
        ));
    };
    if host.contains(':') || host.starts_with('[') {
        return Err(bad("an IPv6 address needs brackets, e.g. [::1]:9001"));
    }
    let port = match port.parse::<u16>() {
        Ok(0) => return Err(bad("port 0 is not allowed")),
        Ok(p) if port.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => return Err(bad("the port must be a number from 1 to 65535")),
    };
    if !reader::is_host_name(host) {
        return Err(bad("expected an IP address or a host name before the ':'"));
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad("not a valid IPv4 address"));
    }
    match lookup(host, port) {
        Ok(Some(addr)) => Ok(addr),
        Ok(None) => Err(format!("cannot resolve {}: no addresses", quote(text))),
        Err(e) => Err(format!("cannot resolve {}: {e}", quote(text))),
    }
}

const BALANCE_NAMES: &[(&str, Balance)] = &[
    ("round_robin", Balance::RoundRobin),
    ("least_conn", Balance::LeastConn),
    ("p2c_ewma", Balance::P2cEwma),
    ("hash", Balance::Hash),
];

fn balance_name(balance: Balance) -> &'static str {
    BALANCE_NAMES
        .iter()
        .find(|(_, b)| *b == balance)
        .map_or("?", |(n, _)| n)
}

fn parse_balance(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Balance> {
    const EXPECTED: &str = "one of round_robin, least_conn, p2c_ewma, hash";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    let balance = BALANCE_NAMES
        .iter()
        .find(|(n, _)| *n == text)
        .map(|(_, b)| *b);
    if balance.is_none() {
        cx.expected(node, path, EXPECTED);
    }
    balance
}

fn parse_hash_key(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<HashKey> {
    const EXPECTED: &str = "client_ip, path or header:NAME";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    let key = match text {
        "client_ip" => Some(HashKey::ClientIp),
        "path" => Some(HashKey::Path),
        _ => text
            .strip_prefix("header:")
            .map(str::trim)
            .filter(|name| reader::is_token(name))
            .map(|name| HashKey::Header(name.to_ascii_lowercase())),
    };
    if key.is_none() {
        cx.expected(node, path, EXPECTED);
    }
    key
}

pub(crate) const SERVICE_TIMEOUT_KEYS: &[&str] = &[
    "connect",
    "response_header",
    "response_body",
    "idle",
    "request",
];

pub(crate) const ENDPOINT_KEYS: &[&str] = &["addr", "weight"];

fn upstream_timeouts(cx: &mut Cx, node: &Node, path: Path<'_>, out: &mut UpstreamTimeouts) {
    let Some(f) = fields(cx, node, path, "service timeouts", SERVICE_TIMEOUT_KEYS) else {
        return;
    };
    reader::duration_field(cx, &f, path, "connect", &mut out.connect);
    reader::duration_field(cx, &f, path, "response_header", &mut out.response_header);
    reader::duration_field(cx, &f, path, "response_body", &mut out.response_body);
    reader::duration_field(cx, &f, path, "idle", &mut out.idle);
    reader::duration_field(cx, &f, path, "request", &mut out.request);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_literals_and_names() {
        assert_eq!(
            resolve("127.0.0.1:9001", reader::system_lookup),
            Ok("127.0.0.1:9001".parse().unwrap())
        );
        assert_eq!(
            resolve("[::1]:9001", reader::system_lookup),
            Ok("[::1]:9001".parse().unwrap())
        );
        let local = resolve("localhost:9001", reader::system_lookup).unwrap();
        assert!(local.ip().is_loopback(), "{local}");
        assert_eq!(local.port(), 9001);
    }

    #[test]
    fn bad_addresses() {
        let err = |s: &str| resolve(s, reader::system_lookup).unwrap_err();
        assert!(err("127.0.0.1").contains("expected host:port"));
        assert!(err("127.0.0.1:0").contains("port 0"));
        assert!(err("::1:80").contains("brackets"));
        assert!(err("[::1:80").contains("brackets"));
        assert!(err("host:http").contains("port must be a number"));
        assert!(err("host:+80").contains("port must be a number"));
        assert!(err("host:70000").contains("port must be a number"));
        assert!(err(":80").contains("IP address or a host name"));
        assert!(err("a b:80").contains("IP address or a host name"));
        assert!(err("1.2.3:80").contains("IPv4"));
        assert!(
            err("nosuchhost.invalid:80").starts_with("cannot resolve \"nosuchhost.invalid:80\": ")
        );
    }

    #[test]
    fn host_names() {
        assert!(reader::is_host_name("backend-1.internal"));
        assert!(reader::is_host_name("a_b"));
        assert!(!reader::is_host_name("a..b"));
        assert!(!reader::is_host_name(".a"));
        assert!(!reader::is_host_name(&"a".repeat(64)));
    }
}
