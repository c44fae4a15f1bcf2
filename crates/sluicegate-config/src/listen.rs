//! Where clients connect: `listen` (addresses, TLS, PROXY protocol, the https redirect), `admin` and `trusted_proxies`.
//!
//! A `listen` entry is an address (a plain HTTP listener) or a mapping with
//! `addr` and the options. Certificate and key paths are kept as written:
//! the files are read by the data plane, not here.

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::model::{
    AdminConfig, AdminRole, AdminToken, CertKeyPaths, Cidr, ClientAuth, Listener, ListenerTls,
    TlsVersion,
};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos, Value};

pub(crate) const LISTENER_KEYS: &[&str] = &[
    "addr",
    "tls",
    "proxy_protocol",
    "redirect_https",
    "http2",
    "h2c",
];
pub(crate) const TLS_KEYS: &[&str] = &[
    "certificates",
    "default",
    "client_ca",
    "client_auth",
    "min_version",
];
pub(crate) const CERT_KEYS: &[&str] = &["cert", "key"];

pub(crate) const ADMIN_KEYS: &[&str] = &["listen", "tokens", "read_only", "tls"];
pub(crate) const ADMIN_TOKEN_KEYS: &[&str] = &["token_file", "role"];

/// A listen address: an IP literal and a port (port 0 picks a free port).
pub(crate) fn socket_addr(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<SocketAddr> {
    const EXPECTED: &str = "an address IP:port, e.g. 127.0.0.1:8080 or [::1]:8080";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    let addr = text.trim().parse::<SocketAddr>().ok();
    if addr.is_none() {
        cx.at(
            node.pos,
            path,
            format_args!(
                "bad address {} (expected IP:port, e.g. 127.0.0.1:8080 or [::1]:8080)",
                quote(text)
            ),
        );
    }
    addr
}

/// `listen`: one address, or a non-empty list of listeners (addresses or
/// mappings) with distinct addresses.
pub(crate) fn listen(cx: &mut Cx, node: &Node, path: Path<'_>) -> Vec<Listener> {
    if node.as_scalar().is_some() {
        return socket_addr(cx, node, path)
            .map(Listener::plain)
            .into_iter()
            .collect();
    }
    const EXPECTED: &str = "an address or a list of listeners";
    let Some(items) = reader::list(cx, node, path, EXPECTED) else {
        return Vec::new();
    };
    if items.is_empty() {
        cx.at(node.pos, path, "needs at least one address");
    }
    let mut seen: HashMap<SocketAddr, (usize, Pos)> = HashMap::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some((listener, addr_node)) = listener(cx, item, p) else {
            continue;
        };
        let addr = listener.addr;
        let also =
            |(first, pos)| format!("duplicate address {addr} (also listen[{first}] at {pos})");
        if reader::unique(
            cx,
            &mut seen,
            addr,
            (i, addr_node.pos),
            (addr_node.pos, p),
            also,
        ) {
            out.push(listener);
        }
    }
    out
}

/// One `listen` item: an address, or `{ addr, tls, proxy_protocol,
/// redirect_https, http2 }` (`h2c` is `http2`'s name on a plain
/// listener). Returns it with the node holding its address.
fn listener<'n>(cx: &mut Cx, node: &'n Node, path: Path<'_>) -> Option<(Listener, &'n Node)> {
    if node.as_scalar().is_some() {
        return socket_addr(cx, node, path).map(|a| (Listener::plain(a), node));
    }
    if !matches!(node.value, Value::Map(_)) {
        cx.expected(
            node,
            path,
            "an address IP:port or a mapping with addr, tls, proxy_protocol, redirect_https, http2",
        );
        return None;
    }
    let f = fields(cx, node, path, "listener", LISTENER_KEYS)?;
    let flag = |cx: &mut Cx, key: &str, default: bool| match f.get(key) {
        None => Some(default),
        Some(n) => reader::boolean(cx, n, path.key(key)),
    };
    let proxy_protocol = flag(cx, "proxy_protocol", false);
    let redirect_https = flag(cx, "redirect_https", false);
    let http2 = listener_http2(cx, &f, path);
    let tls = match f.get("tls") {
        None => Some(None),
        Some(n) => listener_tls(cx, n, path.key("tls")).map(Some),
    };
    if let (Some(true), Some(_)) = (redirect_https, f.get("tls")) {
        let at = f.get("redirect_https").map_or(f.pos, |n| n.pos);
        cx.at(
            at,
            path.key("redirect_https"),
            "only applies to plain listeners (it sends their clients to https): remove it or tls",
        );
    }
    let addr_node = f.require(cx, path, "addr")?;
    let addr = socket_addr(cx, addr_node, path.key("addr"))?;
    let listener = Listener {
        addr,
        tls: tls?,
        proxy_protocol: proxy_protocol?,
        redirect_https: redirect_https?,
        http2: http2?,
    };
    Some((listener, addr_node))
}

/// A listener's `http2` flag (default on). `h2c`, HTTP/2 with prior
/// knowledge, is the same flag under the name it has on a plain listener;
/// a TLS listener's clients ask for HTTP/2 by ALPN, never by h2c.
fn listener_http2(cx: &mut Cx, f: &reader::Fields<'_>, path: Path<'_>) -> Option<bool> {
    let http2 = match f.get("http2") {
        None => None,
        Some(n) => Some(reader::boolean(cx, n, path.key("http2"))?),
    };
    let h2c = match f.get("h2c") {
        None => None,
        Some(n) => Some(reader::boolean(cx, n, path.key("h2c"))?),
    };
    if let Some(n) = f.get("h2c") {
        if f.get("tls").is_some() {
            cx.at(
                n.pos,
                path.key("h2c"),
                "only applies to plain listeners (TLS clients ask for HTTP/2 by ALPN): use http2",
            );
            return None;
        }
        if http2.is_some() && http2 != h2c {
            cx.at(
                n.pos,
                path.key("h2c"),
                "says the opposite of http2 (the same setting on a plain listener): keep one",
            );
            return None;
        }
    }
    Some(http2.or(h2c).unwrap_or(true))
}

/// A listener's `tls`.
fn listener_tls(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<ListenerTls> {
    let f = fields(cx, node, path, "listener tls", TLS_KEYS)?;
    let mut ok = true;
    let mut certificates = Vec::new();
    // The cert paths as written, which `default` must equal one of.
    let mut cert_texts: Vec<&str> = Vec::new();
    if let Some(n) = f.require(cx, path, "certificates") {
        let p = path.key("certificates");
        let expected = "a list of { cert, key } mappings";
        let items = reader::list(cx, n, p, expected).unwrap_or_else(|| {
            ok = false;
            &[]
        });
        if ok && items.is_empty() {
            cx.at(n.pos, p, "needs at least one { cert, key }");
            ok = false;
        }
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let ip = p.index(i);
            let Some((pair, cert_text, cert_node)) = cert_key(cx, item, ip) else {
                ok = false;
                continue;
            };
            let also = |first| {
                format!(
                    "duplicate cert {} (also certificates[{first}])",
                    quote(cert_text)
                )
            };
            if !reader::unique(
                cx,
                &mut seen,
                cert_text,
                i,
                (cert_node.pos, ip.key("cert")),
                also,
            ) {
                ok = false;
                continue;
            }
            cert_texts.push(cert_text);
            certificates.push(pair);
        }
    } else {
        ok = false;
    }
    let mut default = 0;
    if let Some(n) = f.get("default") {
        let p = path.key("default");
        match reader::file_path(cx, n, p).and(n.as_scalar()) {
            Some(name) => match cert_texts.iter().position(|c| *c == name) {
                Some(i) => default = i,
                None if ok => {
                    let listed: Vec<String> = cert_texts.iter().map(|c| quote(c)).collect();
                    cx.at(
                        n.pos,
                        p,
                        format_args!(
                            "{} is not the cert of any of certificates (expected one of: {})",
                            quote(name),
                            listed.join(", ")
                        ),
                    );
                    ok = false;
                }
                // The list has errors: the entry may be among them.
                None => {}
            },
            None => ok = false,
        }
    }
    let client_ca = match f.get("client_ca") {
        None => None,
        Some(n) => {
            let ca = reader::file_path(cx, n, path.key("client_ca"));
            ok &= ca.is_some();
            ca
        }
    };
    let mut client_auth = ClientAuth::default();
    if let Some(n) = f.get("client_auth") {
        let p = path.key("client_auth");
        match reader::scalar(cx, n, p, "require or request") {
            Some("require") => {}
            Some("request") => client_auth = ClientAuth::Request,
            Some(other) => {
                cx.at(
                    n.pos,
                    p,
                    format_args!("expected require or request, found {}", quote(other)),
                );
                ok = false;
            }
            None => ok = false,
        }
        if f.get("client_ca").is_none() {
            cx.at(
                n.pos,
                p,
                "only applies with client_ca (the CA client certificates are checked against)",
            );
            ok = false;
        }
    }
    let mut min_version = TlsVersion::default();
    if let Some(n) = f.get("min_version") {
        const EXPECTED: &str = "\"1.2\" or \"1.3\"";
        let p = path.key("min_version");
        match reader::scalar(cx, n, p, EXPECTED).map(str::trim) {
            Some("1.2") => {}
            Some("1.3") => min_version = TlsVersion::V1_3,
            Some(_) => {
                cx.expected(n, p, EXPECTED);
                ok = false;
            }
            None => ok = false,
        }
    }
    ok.then_some(ListenerTls {
        certificates,
        default,
        client_ca,
        client_auth,
        min_version,
    })
}

/// One `{ cert, key }`; returns it with the cert path as written and its node.
fn cert_key<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
) -> Option<(CertKeyPaths, &'n str, &'n Node)> {
    let f = fields(cx, node, path, "certificate", CERT_KEYS)?;
    let cert_node = f.require(cx, path, "cert");
    let key_node = f.require(cx, path, "key");
    let cert = cert_node.and_then(|n| reader::file_path(cx, n, path.key("cert")));
    let key = key_node.and_then(|n| reader::file_path(cx, n, path.key("key")));
    let (cert_node, cert, key) = (cert_node?, cert?, key?);
    let cert_text = cert_node.as_scalar()?;
    Some((CertKeyPaths { cert, key }, cert_text, cert_node))
}

/// `admin`: its own listener, on an address no `listen` entry uses.
pub(crate) fn admin(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    listen: &[Listener],
) -> Option<AdminConfig> {
    let f = fields(cx, node, path, "admin", ADMIN_KEYS)?;
    // The same shape as a listener's `tls`: certificates, default,
    // client_ca, client_auth, min_version.
    let tls = match f.get("tls") {
        None => Some(None),
        Some(n) => listener_tls(cx, n, path.key("tls")).map(Some),
    };
    let read_only = match f.get("read_only") {
        None => Some(false),
        Some(n) => reader::boolean(cx, n, path.key("read_only")),
    };
    let tokens = match f.get("tokens") {
        None => Some(Vec::new()),
        Some(n) => admin_tokens(cx, n, path.key("tokens")),
    };
    let value = f.require(cx, path, "listen")?;
    let p = path.key("listen");
    let addr = socket_addr(cx, value, p)?;
    if addr.port() != 0 {
        if let Some(i) = listen.iter().position(|l| l.addr == addr) {
            cx.at(
                value.pos,
                p,
                format_args!("{addr} is already used by listen[{i}]"),
            );
            return None;
        }
    }
    let tokens = tokens?;
    if tokens.is_empty() && !addr.ip().is_loopback() {
        cx.at(
            value.pos,
            p,
            format_args!(
                "{addr} is not a loopback address: an admin listener without admin.tokens \
                 listens on loopback only (127.0.0.1 or [::1]); add tokens to listen elsewhere"
            ),
        );
        return None;
    }
    Some(AdminConfig {
        listen: addr,
        tokens,
        read_only: read_only?,
        tls: tls?,
    })
}

/// `admin.tokens`: a list of `{ token_file, role }`, role `read` or `write`.
fn admin_tokens(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<AdminToken>> {
    let items = reader::list(cx, node, path, "a list of { token_file, role }")?;
    let mut out = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(f) = fields(cx, item, p, "admin token", ADMIN_TOKEN_KEYS) else {
            ok = false;
            continue;
        };
        let file = f
            .require(cx, p, "token_file")
            .and_then(|n| reader::file_path(cx, n, p.key("token_file")));
        let role = f.require(cx, p, "role").and_then(|n| {
            const EXPECTED: &str = "read or write";
            match reader::scalar(cx, n, p.key("role"), EXPECTED)? {
                "read" => Some(AdminRole::Read),
                "write" => Some(AdminRole::Write),
                _ => {
                    cx.expected(n, p.key("role"), EXPECTED);
                    None
                }
            }
        });
        match (file, role) {
            (Some(token_file), Some(role)) => out.push(AdminToken { token_file, role }),
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

/// `trusted_proxies`: a list of address blocks.
pub(crate) fn trusted_proxies(cx: &mut Cx, node: &Node, path: Path<'_>) -> Vec<Cidr> {
    let expected = "a list of address blocks like 10.0.0.0/8 or ::1";
    let Some(items) = reader::list(cx, node, path, expected) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        match reader::string(cx, item, p).map(Cidr::parse) {
            Some(Ok(c)) => out.push(c),
            Some(Err(why)) => cx.at(item.pos, p, why),
            None => {}
        }
    }
    out
}
