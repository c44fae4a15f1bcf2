//! The top-level config keys (workers, limits, timeouts, log, reload; config_source in `source`) and the order of decoding; listen, admin and trusted_proxies are in `listen`, plans, apps and app_key in `apps`.
//!
//! Services and routes have their own modules. Decoding never stops at the
//! first problem: each section is read as far as it can be, with defaults
//! standing in for wrong values, and every problem goes into `Cx`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::model::{AccessLog, ClientTimeouts, Config, Limits, LogConfig, LogFormat, ReloadConfig};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{Node, Pos};
use crate::{apps, listen, route, service};

pub(crate) const TOP_KEYS: &[&str] = &[
    "listen",
    "admin",
    "workers",
    "busy_poll",
    "io_uring",
    "limits",
    "timeouts",
    "log",
    "reload",
    "services",
    "routes",
    "plans",
    "apps",
    "app_key",
    "ip",
    "jwt",
    "trusted_proxies",
    "http2",
    "config_source",
    "cluster",
    "request_id",
    "tracing",
    "dns",
    "cache",
];

/// Decodes the document's root node; `apps` holds the apps already
/// streamed out of the tree. The returned config is only meaningful when
/// `cx` holds no errors.
pub(crate) fn config(cx: &mut Cx, root: Option<&Node>, mut apps: apps::AppsDecoder) -> Config {
    let mut config = Config {
        listen: Vec::new(),
        admin: None,
        workers: None,
        busy_poll: Duration::ZERO,
        io_uring: None,
        limits: Limits::default(),
        timeouts: ClientTimeouts::default(),
        log: LogConfig::default(),
        reload: ReloadConfig::default(),
        services: Vec::new(),
        routes: Vec::new(),
        plans: Vec::new(),
        apps: Vec::new(),
        app_key: Default::default(),
        ip: Default::default(),
        jwt: Default::default(),
        trusted_proxies: Vec::new(),
        http2: Default::default(),
        config_source: None,
        cluster: Default::default(),
        request_id: Default::default(),
        tracing: None,
        dns: Default::default(),
        cache: None,
    };
    let root = match root {
        Some(node) if !node.is_null() => node,
        _ => {
            cx.error(
                Pos { line: 1, col: 1 },
                "the config is empty: missing required key \"listen\"".to_string(),
            );
            return config;
        }
    };
    let path = Path::Root;
    let Some(f) = fields(cx, root, path, "the top level", TOP_KEYS) else {
        return config;
    };
    let before = cx.errors.len();
    if let Some(node) = f.require(cx, path, "listen") {
        config.listen = listen::listen(cx, node, path.key("listen"));
    }
    // A listener with errors may be the one with a client CA: `auth: mtls`
    // routes are then not reported as well.
    let listen_ok = cx.errors.len() == before;
    if let Some(node) = f.get("config_source") {
        config.config_source = crate::source::config_source(cx, node, path.key("config_source"));
    }
    if let Some(node) = f.get("admin") {
        config.admin = listen::admin(cx, node, path.key("admin"), &config.listen);
    }
    if let Some(node) = f.get("trusted_proxies") {
        config.trusted_proxies = listen::trusted_proxies(cx, node, path.key("trusted_proxies"));
    }
    if let Some(node) = f.get("workers") {
        config.workers = workers(cx, node, path.key("workers"));
    }
    if let Some(node) = f.get("busy_poll") {
        config.busy_poll = busy_poll(cx, node, path.key("busy_poll"));
    }
    if let Some(node) = f.get("io_uring") {
        config.io_uring = reader::boolean(cx, node, path.key("io_uring"));
    }
    if let Some(node) = f.get("http2") {
        crate::http2::http2(cx, node, path.key("http2"), &mut config.http2);
    }
    if let Some(node) = f.get("limits") {
        limits(cx, node, path.key("limits"), &mut config.limits);
    }
    if let Some(node) = f.get("timeouts") {
        client_timeouts(cx, node, path.key("timeouts"), &mut config.timeouts);
    }
    if let Some(node) = f.get("log") {
        log(cx, node, path.key("log"), &mut config.log);
    }
    if let Some(node) = f.get("reload") {
        reload(cx, node, path.key("reload"), &mut config.reload);
    }
    let mut names = HashMap::new();
    if let Some(node) = f.get("services") {
        config.services = service::services(cx, node, path.key("services"), &mut names);
    }
    if let Some(node) = f.get("routes") {
        let client_ca = config.has_client_ca() || !listen_ok;
        config.routes = route::routes(cx, node, path.key("routes"), &names, client_ca);
    }
    if let Some(node) = f.get("plans") {
        config.plans = apps::plans(cx, node, path.key("plans"));
    }
    if let Some(node) = f.get("apps") {
        apps.list(cx, node, path.key("apps"));
    }
    let plan_names: Vec<&str> = config.plans.iter().map(|p| p.name.as_str()).collect();
    config.apps = apps.finish(cx, path.key("apps"), &names, &plan_names);
    if let Some(node) = f.get("app_key") {
        config.app_key = apps::app_key(cx, node, path.key("app_key"));
    }
    if let Some(node) = f.get("jwt") {
        config.jwt = crate::jwt::jwt_settings(cx, node, path.key("jwt"), &plan_names);
    }
    if let Some(node) = f.get("ip") {
        config.ip = crate::policy::ip_rules(cx, node, path.key("ip")).unwrap_or_default();
    }
    if let Some(node) = f.get("dns") {
        config.dns = crate::discovery::dns(cx, node, path.key("dns"));
    }
    if let Some(node) = f.get("cluster") {
        config.cluster = crate::cluster::cluster(cx, node, path.key("cluster"));
    }
    if let Some(node) = f.get("request_id") {
        config.request_id = crate::trace::request_id(cx, node, path.key("request_id"));
    }
    if let Some(node) = f.get("tracing") {
        config.tracing = crate::trace::tracing(cx, node, path.key("tracing"));
    }
    if let Some(node) = f.get("cache") {
        config.cache = crate::cache::store(cx, node, path.key("cache"));
    }
    if config.cache.is_none() && f.get("cache").is_none() {
        caching_needs_a_store(cx, &f, &config);
    }
    if !config.apps.is_empty() {
        pinned_apps_exist(cx, &f, &config);
    }
    if config.cluster.redis.is_none() {
        global_needs_redis(cx, &f, &config);
    }
    if config.discovery_etcd().is_none() {
        discovery_needs_etcd(cx, &f, &config);
    }
    config
}

/// A route's `cache` needs the top-level `cache` (its store).
fn caching_needs_a_store(cx: &mut Cx, f: &reader::Fields<'_>, config: &Config) {
    for (i, r) in config.routes.iter().enumerate() {
        if r.cache.is_some() {
            let pos = f.get("routes").map_or(f.pos, |n| n.pos);
            let routes = Path::Root.key("routes");
            let route = routes.index(i);
            let msg = "needs the top-level cache (its memory) to store answers in";
            cx.at(pos, route.key("cache"), msg);
        }
    }
}

/// A service with `discovery.etcd` needs an etcd to read.
fn discovery_needs_etcd(cx: &mut Cx, f: &reader::Fields<'_>, config: &Config) {
    for s in config
        .services
        .iter()
        .filter(|s| s.discovery.etcd.is_some())
    {
        let pos = f.get("services").map_or(f.pos, |n| n.pos);
        let msg = format_args!(
            "service {} has discovery.etcd but neither cluster.etcd nor config_source.etcd is set",
            crate::yaml::quote(&s.name)
        );
        cx.at(pos, Path::Root.key("services"), msg);
    }
}

/// The apps a route's `split` pins must be among the config's apps (when
/// it has any: apps may also come alone, from etcd).
fn pinned_apps_exist(cx: &mut Cx, f: &reader::Fields<'_>, config: &Config) {
    use crate::model::Action;
    let ids: std::collections::HashSet<&str> = config.apps.iter().map(|a| a.id.as_str()).collect();
    let pos = f.get("routes").map_or(f.pos, |n| n.pos);
    for (i, r) in config.routes.iter().enumerate() {
        let Action::Proxy {
            split: Some(split), ..
        } = &r.action
        else {
            continue;
        };
        for (j, e) in split.entries.iter().enumerate() {
            for (k, id) in e.apps.iter().enumerate() {
                if !ids.contains(id.as_str()) {
                    let routes = Path::Root.key("routes");
                    let r = routes.index(i);
                    let split = r.key("split");
                    let entry = split.index(j);
                    let apps = entry.key("apps");
                    let msg = format_args!("unknown app {}", crate::yaml::quote(id));
                    cx.at(pos, apps.index(k), msg);
                }
            }
        }
    }
}

/// A `scope: global` limit without `cluster.redis` has nowhere to count.
fn global_needs_redis(cx: &mut Cx, f: &reader::Fields<'_>, config: &Config) {
    use crate::model::Scope;
    const WHY: &str = "has scope: global but cluster.redis is not set";
    for p in config.plans.iter().filter(|p| p.scope == Scope::Global) {
        let pos = f.get("plans").map_or(f.pos, |n| n.pos);
        cx.at(pos, Path::Root.key("plans").key(&p.name), WHY);
    }
    for r in &config.routes {
        if r.limit.as_ref().is_some_and(|l| l.scope == Scope::Global) {
            let pos = f.get("routes").map_or(f.pos, |n| n.pos);
            let msg = format_args!("route {} {WHY}", crate::yaml::quote(&r.name));
            cx.at(pos, Path::Root.key("routes"), msg);
        }
    }
}

/// `workers`: `auto` (one per core) or a positive number of threads.
fn workers(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<usize> {
    const EXPECTED: &str = "\"auto\" or a positive integer";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    if text == "auto" {
        return None;
    }
    let n = reader::parse_uint(text)
        .filter(|n| *n > 0)
        .and_then(|n| usize::try_from(n).ok());
    if n.is_none() {
        cx.expected(node, path, EXPECTED);
    }
    n
}

/// Longest `busy_poll`: a worker spinning longer than this between
/// requests only burns its core.
const MAX_BUSY_POLL: Duration = Duration::from_secs(1);

/// `busy_poll`: `off` (or YAML `false`) or a duration up to [`MAX_BUSY_POLL`].
fn busy_poll(cx: &mut Cx, node: &Node, path: Path<'_>) -> Duration {
    if matches!(node.as_scalar(), Some("off" | "Off" | "OFF"))
        || (node.is_plain() && matches!(node.as_scalar(), Some("false" | "False" | "FALSE")))
    {
        return Duration::ZERO;
    }
    let Some(d) = reader::duration(cx, node, path) else {
        return Duration::ZERO;
    };
    if d > MAX_BUSY_POLL {
        cx.at(
            node.pos,
            path,
            format_args!("at most 1s (a worker spins this long after each request), found {d:?}"),
        );
        return Duration::ZERO;
    }
    d
}

const MIN_HEADER_BYTES: u64 = 1024;
const MAX_HEADER_BYTES: u64 = 1024 * 1024;

pub(crate) const LIMITS_KEYS: &[&str] = &[
    "max_connections",
    "max_header_bytes",
    "max_body_bytes",
    "max_tunnels",
];

fn limits(cx: &mut Cx, node: &Node, path: Path<'_>, out: &mut Limits) {
    let Some(f) = fields(cx, node, path, "limits", LIMITS_KEYS) else {
        return;
    };
    if let Some(node) = f.get("max_connections") {
        if let Some(n) = reader::positive_usize(cx, node, path.key("max_connections")) {
            out.max_connections = n;
        }
    }
    if let Some(node) = f.get("max_header_bytes") {
        let p = path.key("max_header_bytes");
        if let Some(n) = reader::size(cx, node, p) {
            if (MIN_HEADER_BYTES..=MAX_HEADER_BYTES).contains(&n) {
                out.max_header_bytes = usize::try_from(n).unwrap_or(usize::MAX);
            } else {
                cx.at(
                    node.pos,
                    p,
                    format_args!(
                        "must be from {MIN_HEADER_BYTES} (1KiB) to {MAX_HEADER_BYTES} (1MiB), found {n}"
                    ),
                );
            }
        }
    }
    if let Some(node) = f.get("max_body_bytes") {
        if let Some(n) = reader::size(cx, node, path.key("max_body_bytes")) {
            out.max_body_bytes = n;
        }
    }
    if let Some(node) = f.get("max_tunnels") {
        if let Some(n) = reader::positive_usize(cx, node, path.key("max_tunnels")) {
            out.max_tunnels = n;
        }
    }
}

pub(crate) const TIMEOUTS_KEYS: &[&str] = &[
    "client_header",
    "client_body",
    "keepalive",
    "drain",
    "client_write",
    "tls_handshake",
    "tunnel_idle",
];

fn client_timeouts(cx: &mut Cx, node: &Node, path: Path<'_>, out: &mut ClientTimeouts) {
    let Some(f) = fields(cx, node, path, "timeouts", TIMEOUTS_KEYS) else {
        return;
    };
    reader::duration_field(cx, &f, path, "client_header", &mut out.client_header);
    reader::duration_field(cx, &f, path, "client_body", &mut out.client_body);
    reader::duration_field(cx, &f, path, "keepalive", &mut out.keepalive);
    reader::duration_field(cx, &f, path, "drain", &mut out.drain);
    reader::duration_field(cx, &f, path, "client_write", &mut out.client_write);
    reader::duration_field(cx, &f, path, "tls_handshake", &mut out.tls_handshake);
    reader::duration_field(cx, &f, path, "tunnel_idle", &mut out.tunnel_idle);
}

const LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace"];

pub(crate) const LOG_KEYS: &[&str] = &["level", "format", "access"];

fn log(cx: &mut Cx, node: &Node, path: Path<'_>, out: &mut LogConfig) {
    let Some(f) = fields(cx, node, path, "log", LOG_KEYS) else {
        return;
    };
    if let Some(node) = f.get("level") {
        let p = path.key("level");
        const EXPECTED: &str = "one of error, warn, info, debug, trace";
        if let Some(text) = reader::scalar(cx, node, p, EXPECTED) {
            let level = text.to_ascii_lowercase();
            if LEVELS.contains(&level.as_str()) {
                out.level = level;
            } else {
                cx.expected(node, p, EXPECTED);
            }
        }
    }
    if let Some(node) = f.get("format") {
        let p = path.key("format");
        const EXPECTED: &str = "text or json";
        match reader::scalar(cx, node, p, EXPECTED) {
            Some("text") => out.format = LogFormat::Text,
            Some("json") => out.format = LogFormat::Json,
            Some(_) => cx.expected(node, p, EXPECTED),
            None => {}
        }
    }
    if let Some(node) = f.get("access") {
        if let Some(access) = access_log(cx, node, path.key("access")) {
            out.access = access;
        }
    }
}

/// `off` (or YAML `false`), `stdout`, or a file path.
fn access_log(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<AccessLog> {
    const EXPECTED: &str = "off, stdout or a file path";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    match text {
        "off" | "Off" | "OFF" => Some(AccessLog::Off),
        "false" | "False" | "FALSE" if node.is_plain() => Some(AccessLog::Off),
        "true" | "True" | "TRUE" if node.is_plain() => {
            cx.expected(node, path, EXPECTED);
            None
        }
        "stdout" => Some(AccessLog::Stdout),
        _ if text.trim().is_empty() || text.contains('\0') => {
            cx.expected(node, path, EXPECTED);
            None
        }
        _ => Some(AccessLog::File(PathBuf::from(text))),
    }
}

pub(crate) const RELOAD_KEYS: &[&str] = &["watch", "poll_interval"];

fn reload(cx: &mut Cx, node: &Node, path: Path<'_>, out: &mut ReloadConfig) {
    let Some(f) = fields(cx, node, path, "reload", RELOAD_KEYS) else {
        return;
    };
    if let Some(node) = f.get("watch") {
        if let Some(watch) = reader::boolean(cx, node, path.key("watch")) {
            out.watch = watch;
        }
    }
    reader::duration_field(cx, &f, path, "poll_interval", &mut out.poll_interval);
}
