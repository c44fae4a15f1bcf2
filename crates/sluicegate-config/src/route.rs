//! The `routes` list: names, `match` conditions, and the action (proxy to a service or respond).
//!
//! The `match` mapping itself is decoded in `matcher`.

use std::collections::HashMap;

use crate::model::{Action, Auth, HeaderOps, LimitKey, PathMatch, Route};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

pub(crate) mod aggregate;
pub(crate) mod authz;
pub(crate) mod compress;
pub(crate) mod fallback;
pub(crate) mod fault;
mod fixed;
pub(crate) mod matcher;
pub(crate) mod mirror;
pub(crate) mod rollout;
pub(crate) mod split;
pub(crate) mod template;
pub(crate) mod value_regex;

use matcher::{any, match_};

pub(crate) const ROUTE_KEYS: &[&str] = &[
    "name",
    "match",
    "service",
    "respond",
    "strip_prefix",
    "auth",
    "limit",
    "request_headers",
    "response_headers",
    "cors",
    "ip",
    "rewrite",
    "upgrade",
    "fault",
    "mirror",
    "fallback",
    "fallback_on",
    "split",
    "split_by",
    "cache",
    "rollout",
    "aggregate",
    "compress",
    "scopes",
    "forward_auth",
    "ext_authz",
];

pub(crate) const RESPOND_KEYS: &[&str] = &["status", "body", "headers"];

pub(crate) const REWRITE_KEYS: &[&str] = &["regex", "replacement"];

/// Decodes the routes list, in file order. `services` holds every defined
/// service name; `client_ca` says whether some listener asks clients for a
/// certificate (which `auth: mtls` needs).
pub(crate) fn routes(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
    client_ca: bool,
) -> Vec<Route> {
    let Some(items) = reader::list(cx, node, path, "a list of routes") else {
        return Vec::new();
    };
    let mut names: HashMap<&str, Pos> = HashMap::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        if let Some(route) = route(cx, item, p, services, &mut names, client_ca) {
            out.push(route);
        }
    }
    out
}

fn route<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
    names: &mut HashMap<&'n str, Pos>,
    client_ca: bool,
) -> Option<Route> {
    let f = fields(cx, node, path, "route", ROUTE_KEYS)?;
    let name = f
        .require(cx, path, "name")
        .and_then(|n| reader::unique_name(cx, n, path.key("name"), names, "route"));

    let mut has_prefix = false;
    let matcher = match f.get("match") {
        None => Some(any()),
        Some(m) => match_(cx, m, path.key("match"), &mut has_prefix),
    };

    let strip_prefix = match f.get("strip_prefix") {
        None => Some(false),
        Some(n) => reader::boolean(cx, n, path.key("strip_prefix")),
    };

    let template = matcher.as_ref().and_then(|m| match &m.path {
        PathMatch::Template(t) => Some(t),
        _ => None,
    });
    // Keys that only a route with a service (or split) takes.
    let not_proxy = f.get("respond").is_some() || f.get("aggregate").is_some();
    let action = match (f.get("service"), f.get("split"), f.get("respond")) {
        _ if f.get("aggregate").is_some() => {
            let n = f.get("aggregate").unwrap_or(node);
            let others = ["service", "split", "respond"];
            if let Some(other) = others.iter().find(|k| f.get(k).is_some()) {
                cx.at(
                    n.pos,
                    path.key("aggregate"),
                    format_args!("give one of service, split, respond or aggregate, not more (found {other} too)"),
                );
                None
            } else {
                if strip_prefix == Some(true) {
                    let at = f.get("strip_prefix").map_or(f.pos, |n| n.pos);
                    cx.at(
                        at,
                        path.key("strip_prefix"),
                        "only applies to routes with a service",
                    );
                }
                aggregate::aggregate(cx, n, path.key("aggregate"), services, template)
                    .map(Action::Aggregate)
            }
        }
        (None, None, None) => {
            cx.at(
                f.pos,
                path,
                "missing \"service\" (where to proxy), \"split\" (services by weight), \"respond\" (what to answer) or \"aggregate\" (calls to combine)",
            );
            None
        }
        (Some(_), None, Some(respond)) => {
            cx.at(
                respond.pos,
                path,
                "give either service or respond, not both",
            );
            None
        }
        (_, Some(split), Some(_)) | (Some(_), Some(split), None) => {
            cx.at(
                split.pos,
                path,
                "give one of service, split or respond, not more",
            );
            None
        }
        (service, split, None) => {
            if strip_prefix == Some(true) && !has_prefix {
                let at = f.get("strip_prefix").map_or(f.pos, |n| n.pos);
                cx.at(
                    at,
                    path.key("strip_prefix"),
                    "needs match.path_prefix (the prefix to strip)",
                );
            }
            let split = match split {
                None => Some(None),
                Some(n) => {
                    let template = matcher.as_ref().and_then(|m| match &m.path {
                        PathMatch::Template(t) => Some(t),
                        _ => None,
                    });
                    route_split(cx, &f, n, path, services, template).map(Some)
                }
            };
            let name = match (service, &split) {
                (Some(service), _) => {
                    let p = path.key("service");
                    let name = reader::string(cx, service, p);
                    if let Some(name) = name.filter(|n| !services.contains_key(*n)) {
                        cx.at(
                            service.pos,
                            p,
                            format_args!("unknown service {}", quote(name)),
                        );
                    }
                    name.map(str::to_string)
                }
                (None, Some(Some(s))) => Some(s.entries[0].service.clone()),
                (None, _) => None,
            };
            match (name, split) {
                (Some(service), Some(split)) => Some(Action::Proxy {
                    service,
                    strip_prefix: strip_prefix.unwrap_or(false),
                    split,
                }),
                _ => None,
            }
        }
        (None, None, Some(respond)) => {
            if strip_prefix == Some(true) {
                let at = f.get("strip_prefix").map_or(f.pos, |n| n.pos);
                cx.at(
                    at,
                    path.key("strip_prefix"),
                    "only applies to routes with a service",
                );
            }
            respond_action(cx, respond, path.key("respond"))
        }
    };
    if let (Some(n), None) = (f.get("split_by"), f.get("split")) {
        cx.at(
            n.pos,
            path.key("split_by"),
            "only applies to routes with a split",
        );
    }
    let auth = match f.get("auth") {
        None => Some(Auth::None),
        Some(n) => {
            let p = path.key("auth");
            match reader::scalar(cx, n, p, "app_key, jwt, mtls or none") {
                Some("none") => Some(Auth::None),
                Some("app_key") => Some(Auth::AppKey),
                Some("jwt") => Some(Auth::Jwt),
                Some("mtls") if client_ca => Some(Auth::Mtls),
                Some("mtls") => {
                    cx.at(
                        n.pos,
                        p,
                        "mtls needs a listener with tls.client_ca (no listener asks clients for a certificate)",
                    );
                    None
                }
                Some(other) => {
                    cx.at(
                        n.pos,
                        p,
                        format_args!(
                            "unknown auth {} (expected app_key, jwt, mtls or none)",
                            quote(other)
                        ),
                    );
                    None
                }
                None => None,
            }
        }
    };
    let limit = match f.get("limit") {
        None => Some(None),
        Some(n) => crate::apps::route_limit(cx, n, path.key("limit"), template).map(Some),
    };
    // A limit per app counts authenticated apps: the route must have some.
    if let (Some(Some(l)), Some(Auth::None), Some(n)) = (&limit, auth, f.get("limit")) {
        if l.per.after_auth() {
            let limit_path = path.key("limit");
            let msg = match l.per {
                LimitKey::Claim(_) => "per: claim:NAME needs auth: jwt on the route",
                _ => "per: app needs auth (app_key, jwt or mtls) on the route",
            };
            cx.at(n.pos, limit_path.key("per"), msg);
        }
    }
    // A limit per claim reads the verified token: only `auth: jwt` has one.
    if let (Some(Some(l)), Some(a), Some(n)) = (&limit, auth, f.get("limit")) {
        if matches!(l.per, LimitKey::Claim(_)) && !matches!(a, Auth::None | Auth::Jwt) {
            let msg = "per: claim:NAME needs auth: jwt on the route";
            cx.at(n.pos, path.key("limit").key("per"), msg);
        }
    }
    let mut ops = |key: &str| match f.get(key) {
        None => Some(HeaderOps::default()),
        Some(n) => crate::policy::header_ops(cx, n, path.key(key)),
    };
    let mut request_headers = ops("request_headers");
    let response_headers = ops("response_headers");
    if let (Some(n), Some(_)) = (f.get("request_headers"), f.get("aggregate")) {
        cx.at(
            n.pos,
            path.key("request_headers"),
            "only applies to routes with a service (an aggregate route's parts carry their own)",
        );
        request_headers = None;
    }
    if let (Some(t), Some(_), Some(n)) = (template, &request_headers, f.get("request_headers")) {
        if !header_refs(cx, n, path.key("request_headers"), t) {
            request_headers = None;
        }
    }
    let cors = match f.get("cors") {
        None => Some(None),
        Some(n) => crate::policy::cors(cx, n, path.key("cors")).map(Some),
    };
    let ip = match f.get("ip") {
        None => Some(Default::default()),
        Some(n) => crate::policy::ip_rules(cx, n, path.key("ip")),
    };
    let rewrite = match f.get("rewrite") {
        None => Some(None),
        Some(n) => {
            if not_proxy {
                cx.at(
                    n.pos,
                    path.key("rewrite"),
                    "only applies to routes with a service",
                );
                None
            } else {
                rewrite(cx, n, path.key("rewrite"), template).map(Some)
            }
        }
    };
    let upgrade = match f.get("upgrade") {
        None => Some(vec!["websocket".to_string()]),
        Some(n) => {
            if not_proxy {
                cx.at(
                    n.pos,
                    path.key("upgrade"),
                    "only applies to routes with a service",
                );
                None
            } else {
                upgrade(cx, n, path.key("upgrade"))
            }
        }
    };
    let fault = match f.get("fault") {
        None => Some(None),
        Some(n) if not_proxy => {
            cx.at(
                n.pos,
                path.key("fault"),
                "only applies to routes with a service",
            );
            None
        }
        Some(n) => fault::fault(cx, n, path.key("fault")).map(Some),
    };
    let mirror = match f.get("mirror") {
        None => Some(None),
        Some(n) if not_proxy => {
            cx.at(
                n.pos,
                path.key("mirror"),
                "only applies to routes with a service",
            );
            None
        }
        Some(n) => mirror::mirror(cx, n, path.key("mirror"), services).map(Some),
    };
    let fallback = fallback::route_fallback(cx, &f, path, services);
    let cache = match f.get("cache") {
        None => Some(None),
        Some(n) if f.get("respond").is_some() => {
            cx.at(
                n.pos,
                path.key("cache"),
                "only applies to routes with a service",
            );
            None
        }
        Some(n) => {
            let authenticated = f
                .get("auth")
                .and_then(Node::as_scalar)
                .is_some_and(|a| a != "none");
            crate::cache::route_cache(cx, n, path.key("cache"), authenticated).map(Some)
        }
    };
    let rollout = match f.get("rollout") {
        None => Some(None),
        Some(n) => rollout::rollout(cx, n, path.key("rollout"), f.get("split")).map(Some),
    };
    let compress = match f.get("compress") {
        None => Some(None),
        Some(n) if not_proxy => {
            cx.at(
                n.pos,
                path.key("compress"),
                "only applies to routes with a service",
            );
            None
        }
        Some(n) => compress::compress(cx, n, path.key("compress")),
    };
    let scopes = match f.get("scopes") {
        None => Some(Vec::new()),
        Some(n) => scopes(cx, n, path.key("scopes"), auth == Some(Auth::Jwt)),
    };
    let forward_auth = match f.get("forward_auth") {
        None => Some(None),
        Some(n) if not_proxy => {
            cx.at(
                n.pos,
                path.key("forward_auth"),
                "only applies to routes with a service",
            );
            None
        }
        Some(n) => authz::forward_auth(cx, n, path.key("forward_auth"), services)
            .map(|a| Some(Box::new(a))),
    };
    let ext_authz = match f.get("ext_authz") {
        None => Some(None),
        Some(n) if not_proxy => {
            cx.at(
                n.pos,
                path.key("ext_authz"),
                "only applies to routes with a service",
            );
            None
        }
        Some(n) => authz::ext_authz(cx, n, path.key("ext_authz"), services).map(Some),
    };
    Some(Route {
        name: name?.to_string(),
        matcher: matcher?,
        action: action?,
        auth: auth?,
        limit: limit?,
        request_headers: request_headers?,
        response_headers: response_headers?,
        cors: cors?,
        ip: ip?,
        rewrite: rewrite?,
        upgrade: upgrade?,
        fault: fault?,
        mirror: mirror?,
        fallback: fallback?,
        cache: cache?,
        rollout: rollout?,
        compress: compress?,
        scopes: scopes?,
        forward_auth: forward_auth?,
        ext_authz: ext_authz?,
    })
}

/// A route's `scopes`: each a scope token (RFC 6749: printable ASCII
/// without spaces, `"` or `\\`); only on `auth: jwt` routes.
fn scopes(cx: &mut Cx, node: &Node, path: Path<'_>, jwt: bool) -> Option<Vec<String>> {
    if !jwt {
        cx.at(node.pos, path, "only applies to routes with auth: jwt");
        return None;
    }
    let items = reader::list(cx, node, path, "a list of scopes")?;
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let s = reader::string(cx, item, p)?;
        if s.is_empty()
            || !s
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        {
            cx.at(item.pos, p, format_args!("bad scope {}", quote(s)));
            return None;
        }
        out.push(s.to_string());
    }
    Some(out)
}

/// The route's `split` and `split_by`. Pinning apps, or `split_by: app`,
/// needs the route's auth to name an app.
fn route_split(
    cx: &mut Cx,
    f: &reader::Fields<'_>,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
    template: Option<&crate::PathTemplate>,
) -> Option<crate::model::Split> {
    let authenticated = f
        .get("auth")
        .and_then(Node::as_scalar)
        .is_some_and(|a| a != "none");
    let entries = split::split_entries(cx, node, path.key("split"), services);
    let by = match f.get("split_by") {
        None => Some(Default::default()),
        Some(n) => split::split_by(cx, n, path.key("split_by"), authenticated, template),
    };
    let entries = entries?;
    if !authenticated {
        if let Some(i) = entries.iter().position(|e| !e.apps.is_empty()) {
            let p = path.key("split");
            let p = p.index(i);
            cx.at(
                node.pos,
                p.key("apps"),
                "pinning apps needs the route's auth (app_key, jwt or mtls) to know the app",
            );
            return None;
        }
    }
    Some(crate::model::Split { entries, by: by? })
}

/// `upgrade: [websocket, ...]`: the protocols a client may switch to
/// through the route (`Upgrade` tokens, compared case-insensitively); an
/// empty list allows none. `h2c` is refused: an upgrade to it from
/// HTTP/1.1 is a known smuggling path, and the gateway never makes one.
fn upgrade(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<String>> {
    const EXPECTED: &str = "a list of protocols, e.g. [websocket]";
    let items = reader::list(cx, node, path, EXPECTED)?;
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(text) = reader::scalar(cx, item, p, "a protocol name") else {
            ok = false;
            continue;
        };
        // A protocol is a token, with an optional "/version".
        let valid = !text.is_empty()
            && text.split('/').count() <= 2
            && text.split('/').all(reader::is_token);
        if !valid {
            cx.at(
                item.pos,
                p,
                format_args!("bad protocol name {}", quote(text)),
            );
            ok = false;
        } else if text.eq_ignore_ascii_case("h2c") {
            cx.at(
                item.pos,
                p,
                "h2c is never upgraded to from HTTP/1.1 (a smuggling path); clients speak HTTP/2 with prior knowledge instead",
            );
            ok = false;
        } else if !out.iter().any(|o| o.eq_ignore_ascii_case(text)) {
            out.push(text.to_ascii_lowercase());
        }
    }
    ok.then_some(out)
}

fn respond_action(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Action> {
    let f = fields(cx, node, path, "respond", RESPOND_KEYS)?;
    let (status, body, headers) = fixed::fixed_answer(cx, &f, path, 100)?;
    Some(Action::Respond {
        status,
        body,
        headers,
    })
}

/// Decodes `rewrite: { regex, replacement }`. A `${name}` in the
/// replacement is a capture group of the regex when it has one of that
/// name (or number), else a parameter of the route's path `template`;
/// any other name is refused.
fn rewrite(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    template: Option<&crate::PathTemplate>,
) -> Option<crate::model::Rewrite> {
    let f = fields(cx, node, path, "rewrite", REWRITE_KEYS)?;
    let mut compiled = None;
    let re = f.require(cx, path, "regex").and_then(|n| {
        let p = path.key("regex");
        let text = reader::string(cx, n, p)?;
        match regex::bytes::Regex::new(text) {
            Ok(re) => {
                compiled = Some(re);
                Some(text)
            }
            Err(e) => {
                cx.at(n.pos, p, format_args!("invalid regex: {e}"));
                None
            }
        }
    });
    let replacement = f.require(cx, path, "replacement").and_then(|n| {
        let p = path.key("replacement");
        let text = reader::string(cx, n, p)?;
        // Literal text must be fit for a request line: no spaces or controls.
        if text
            .bytes()
            .any(|b| b <= b' ' || b == 0x7f || b == b'?' || b == b'#')
        {
            cx.at(
                n.pos,
                p,
                "a replacement cannot contain spaces, control characters, ? or #",
            );
            return None;
        }
        if let Some(re) = &compiled {
            for (_, name) in template::references(text) {
                let group = match name.parse::<usize>() {
                    Ok(i) => i < re.captures_len(),
                    Err(_) => re.capture_names().flatten().any(|g| g == name),
                };
                let param = template.is_some_and(|t| t.param_index(name).is_some());
                if !group && !param {
                    let what = match template {
                        Some(_) => "a capture group of rewrite.regex nor a parameter of match.path",
                        None => "a capture group of rewrite.regex",
                    };
                    cx.at(n.pos, p, format_args!("${{{name}}} is neither {what}"));
                    return None;
                }
            }
        }
        Some(text)
    });
    Some(crate::model::Rewrite {
        regex: re?.to_string(),
        replacement: replacement?.to_string(),
    })
}

/// On a route whose path is a template, each `${name}` in a
/// `request_headers` value (`set` or `add`) must name one of its
/// parameters; false when one does not (reported).
fn header_refs(cx: &mut Cx, node: &Node, path: Path<'_>, t: &crate::PathTemplate) -> bool {
    let Some(f) = fields(cx, node, path, "header policy", crate::policy::OPS_KEYS) else {
        return false;
    };
    let mut ok = true;
    for key in ["set", "add"] {
        let Some(n) = f.get(key) else { continue };
        let p = path.key(key);
        for (_, name, value) in reader::free_map(cx, n, p, "a mapping").unwrap_or_default() {
            let Some(text) = value.as_scalar() else {
                continue;
            };
            for (_, param) in template::references(text) {
                if t.param_index(param).is_none() {
                    cx.at(
                        value.pos,
                        p.key(name),
                        format_args!(
                            "${{{param}}} is not a parameter of match.path {}",
                            quote(&t.text)
                        ),
                    );
                    ok = false;
                }
            }
        }
    }
    ok
}
