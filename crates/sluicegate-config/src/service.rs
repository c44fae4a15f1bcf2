//! The `services` list: names, endpoints (with address resolution), balancing, upstream timeouts and forwarded headers (upstream `tls` is in `tls`, `health` in `health`).

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::model::{
    Balance, Discovery, DnsName, Endpoint, HashKey, Service, UpstreamProtocol, UpstreamTimeouts,
};
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
    "discovery",
];

/// Default for `max_connections_per_endpoint`.
pub const DEFAULT_MAX_CONNECTIONS_PER_ENDPOINT: usize = 512;

/// Largest endpoint weight.
pub const MAX_WEIGHT: u64 = 1000;

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
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if let Some(service) = service(cx, item, path.index(i), names) {
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
) -> Option<Service> {
    let f = fields(cx, node, path, "service", SERVICE_KEYS)?;
    let name = f
        .require(cx, path, "name")
        .and_then(|n| reader::unique_name(cx, n, path.key("name"), names, "service"))
        .map(str::to_string);
    let found = match f.get("discovery") {
        None => Some(Default::default()),
        Some(n) => crate::discovery::discovery(cx, n, path.key("discovery")),
    };
    // With discovery the list may be absent or empty.
    let (endpoints, dns_names) = match f.get("endpoints") {
        None if f.get("discovery").is_some() => Default::default(),
        None => {
            f.require(cx, path, "endpoints");
            Default::default()
        }
        Some(n) => {
            let found = endpoints(cx, n, path.key("endpoints"));
            let empty = n.as_scalar().is_none()
                && matches!(&n.value, crate::yaml::Value::List(s) if s.is_empty());
            if empty && f.get("discovery").is_none() {
                cx.at(n.pos, path.key("endpoints"), "needs at least one endpoint");
            }
            found
        }
    };
    // Registered endpoints are addresses: a host name beside them would
    // be resolved by the DNS plane, which publishes the same service.
    if let (Some(f), Some(n)) = (&found, f.get("endpoints")) {
        if f.etcd.is_some() && !dns_names.is_empty() {
            cx.at(
                n.pos,
                path.key("endpoints"),
                "with discovery.etcd, endpoints beside it must be IP:port (a host name here is not resolved)",
            );
        }
    }

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
        discovery: {
            let found = found?;
            Discovery {
                names: dns_names,
                dns_srv: found.dns_srv,
                etcd: found.etcd,
            }
        },
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

/// The `endpoints` list: IP addresses as they are, host names to resolve
/// while serving.
fn endpoints(cx: &mut Cx, node: &Node, path: Path<'_>) -> (Vec<Endpoint>, Vec<DnsName>) {
    let Some(items) = reader::list(cx, node, path, "a list of endpoints") else {
        return Default::default();
    };
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(items.len());
    let mut out = (Vec::with_capacity(items.len()), Vec::new());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some((endpoint, addr_node)) = endpoint(cx, item, p) else {
            continue;
        };
        let key = match &endpoint {
            Target::Addr(e) => e.addr.to_string(),
            Target::Name(n) => format!("{}:{}", n.host.to_ascii_lowercase(), n.port),
        };
        let same = |first| {
            format!(
                "duplicate endpoint {} (same as endpoints[{first}])",
                quote(&key)
            )
        };
        if !reader::unique(cx, &mut seen, key.clone(), i, (addr_node.pos, p), same) {
            continue;
        }
        match endpoint {
            Target::Addr(e) => out.0.push(e),
            Target::Name(n) => out.1.push(n),
        }
    }
    out
}

/// An endpoint entry: an address, or a host name resolved while serving.
enum Target {
    Addr(Endpoint),
    Name(DnsName),
}

/// One endpoint: `"host:port"` or `{ addr: "host:port", weight: N }`.
/// Returns it with the node holding its address.
fn endpoint<'n>(cx: &mut Cx, node: &'n Node, path: Path<'_>) -> Option<(Target, &'n Node)> {
    let (addr_node, addr_path, weight) = if node.as_scalar().is_some() {
        (node, path, Some(1))
    } else {
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
        (f.require(cx, path, "addr")?, path.key("addr"), weight)
    };
    let text = reader::scalar(cx, addr_node, addr_path, "an address host:port")?.trim();
    let target = match parse_target(text) {
        Ok(t) => t,
        Err(reason) => {
            cx.at(addr_node.pos, addr_path, reason);
            return None;
        }
    };
    let weight = weight?;
    let target = match target {
        Ok(addr) => Target::Addr(Endpoint {
            name: text.to_string(),
            addr,
            weight,
        }),
        Err((host, port)) => Target::Name(DnsName {
            host: host.to_string(),
            port,
            weight,
        }),
    };
    Some((target, addr_node))
}

/// Reads `host:port`: an IP literal as an address, a host name (checked
/// for form only, never looked up) as `Err((host, port))`.
#[allow(clippy::type_complexity)]
pub(crate) fn parse_target(text: &str) -> Result<Result<SocketAddr, (&str, u16)>, String> {
    let bad = |why: &str| format!("bad address {}: {why}", quote(text));
    if let Ok(addr) = text.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return Err(bad("port 0 is not allowed"));
        }
        return Ok(Ok(addr));
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
    let host = host.strip_suffix('.').unwrap_or(host);
    if !reader::is_host_name(host) {
        return Err(bad("expected an IP address or a host name before the ':'"));
    }
    if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bad("not a valid IPv4 address"));
    }
    Ok(Err((host, port)))
}

const BALANCE_NAMES: &[(&str, Balance)] = &[
    ("round_robin", Balance::RoundRobin),
    ("least_conn", Balance::LeastConn),
    ("p2c_ewma", Balance::P2cEwma),
    ("hash", Balance::Hash),
    ("random", Balance::Random),
];

fn balance_name(balance: Balance) -> &'static str {
    BALANCE_NAMES
        .iter()
        .find(|(_, b)| *b == balance)
        .map_or("?", |(n, _)| n)
}

fn parse_balance(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Balance> {
    const EXPECTED: &str = "one of round_robin, least_conn, p2c_ewma, hash, random";
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
    fn literals_and_names() {
        assert_eq!(
            parse_target("127.0.0.1:9001"),
            Ok(Ok("127.0.0.1:9001".parse().unwrap()))
        );
        assert_eq!(
            parse_target("[::1]:9001"),
            Ok(Ok("[::1]:9001".parse().unwrap()))
        );
        // Never looked up, however it would resolve.
        assert_eq!(parse_target("localhost:9001"), Ok(Err(("localhost", 9001))));
        assert_eq!(
            parse_target("nosuchhost.invalid.:80"),
            Ok(Err(("nosuchhost.invalid", 80)))
        );
    }

    #[test]
    fn bad_addresses() {
        let err = |s: &str| parse_target(s).unwrap_err();
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
