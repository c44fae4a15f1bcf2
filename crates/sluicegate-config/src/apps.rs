//! API management: `plans` (rate, burst, quota, concurrency), `apps` (the
//! consumers: id, keys, plan, allowed services) and `app_key` (where keys
//! are looked for). An app's `jwt` is decoded in `jwt`, its `mtls` in `tls`.

use std::collections::HashMap;
use std::time::Duration;

use crate::model::{App, AppKeySources, LimitKey, Plan, Quota, QuotaWindow, Rate, RouteLimit};
use crate::reader::{self, duplicates, fields, Cx, Path, Seen};
use crate::yaml::{quote, Node, Pos};

pub(crate) const PLAN_KEYS: &[&str] = &[
    "rate",
    "burst",
    "quota",
    "concurrency",
    "scope",
    "on_failure",
];
/// The keys that set a limit (the others qualify them).
const PLAN_LIMITS: &[&str] = &["rate", "burst", "quota", "concurrency"];
pub(crate) const APP_KEYS: &[&str] = &[
    "id",
    "keys",
    "plan",
    "plans_by_service",
    "services",
    "methods",
    "paths",
    "jwt",
    "mtls",
];
pub(crate) const APP_KEY_KEYS: &[&str] = &["header", "query", "path_segment"];
pub(crate) const ROUTE_LIMIT_KEYS: &[&str] =
    &["rate", "burst", "concurrency", "per", "scope", "on_failure"];

/// Decodes a route's `limit`.
/// `template` is the route's path template, whose parameters `per:
/// param:NAME` may name.
pub(crate) fn route_limit(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    template: Option<&crate::PathTemplate>,
) -> Option<RouteLimit> {
    let f = fields(cx, node, path, "limit", ROUTE_LIMIT_KEYS)?;
    let rate = f.get("rate").and_then(|n| rate(cx, n, path.key("rate")));
    let burst = f
        .get("burst")
        .and_then(|n| reader::int_in(cx, n, path.key("burst"), 1, 1_000_000_000));
    let concurrency = f
        .get("concurrency")
        .and_then(|n| reader::int_in(cx, n, path.key("concurrency"), 1, 1_000_000_000));
    let per = match f.get("per") {
        None => Some(LimitKey::ClientIp),
        Some(n) => limit_key(cx, n, path.key("per"), template),
    };
    if f.get("burst").is_some() && f.get("rate").is_none() {
        cx.at(f.pos, path, "burst needs a rate");
    }
    if f.get("rate").is_none() && f.get("concurrency").is_none() {
        cx.at(f.pos, path, "a limit needs rate or concurrency");
        return None;
    }
    let (scope, on_failure) = crate::cluster::route_scope(cx, &f, path);
    Some(RouteLimit {
        rate,
        burst: burst.or(rate.map(|r| r.count)),
        concurrency,
        per: per?,
        scope,
        on_failure,
    })
}

/// What `limit.per` means.
const PER_EXPECTED: &str = "client_ip, route, app, header:NAME, claim:NAME or param:NAME";

/// Decodes a route limit's `per`: `client_ip`, `route`, `app`,
/// `header:NAME`, `claim:NAME` (a claim of the verified token) or
/// `param:NAME` (a parameter of the route's `template`).
fn limit_key(
    cx: &mut Cx,
    n: &Node,
    p: Path<'_>,
    template: Option<&crate::PathTemplate>,
) -> Option<LimitKey> {
    let text = reader::scalar(cx, n, p, PER_EXPECTED)?;
    let (kind, name) = match text.split_once(':') {
        Some((k, v)) => (k, Some(v)),
        None => (text, None),
    };
    match (kind, name) {
        ("client_ip", None) => Some(LimitKey::ClientIp),
        ("route", None) => Some(LimitKey::Route),
        ("app", None) => Some(LimitKey::App),
        ("header", Some(name)) => {
            if !reader::is_token(name) {
                let msg = format_args!("{}: {} is not a header name", quote(text), quote(name));
                cx.at(n.pos, p, msg);
                return None;
            }
            Some(LimitKey::Header(name.to_ascii_lowercase()))
        }
        ("claim", Some(name)) => {
            if name.is_empty() {
                cx.at(
                    n.pos,
                    p,
                    format_args!("{}: the claim's name is empty", quote(text)),
                );
                return None;
            }
            Some(LimitKey::Claim(name.to_string()))
        }
        ("param", Some(name)) => {
            let index = template.and_then(|t| t.param_index(name));
            if index.is_none() {
                let why = match template {
                    None => "needs match.path to be a template with that parameter".to_string(),
                    Some(t) => format!(
                        "{} is not a parameter of match.path {}",
                        quote(name),
                        quote(&t.text)
                    ),
                };
                cx.at(n.pos, p, format_args!("{}: {why}", quote(text)));
            }
            index.map(LimitKey::Param)
        }
        _ => {
            let msg = format_args!("expected {PER_EXPECTED}, found {}", quote(text));
            cx.at(n.pos, p, msg);
            None
        }
    }
}

/// Shortest and longest app key accepted.
pub const KEY_MIN: usize = 8;
pub const KEY_MAX: usize = 256;

/// Decodes `plans`: a mapping of plan name to its limits.
pub(crate) fn plans(cx: &mut Cx, node: &Node, path: Path<'_>) -> Vec<Plan> {
    let Some(entries) = reader::free_map(cx, node, path, "a mapping of plan name to limits") else {
        return Vec::new();
    };
    let mut seen: HashMap<&str, Pos> = HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    for (key, name, value) in entries {
        let p = path.key(name);
        if !reader::is_name(name) {
            cx.at(
                key.pos,
                path,
                format_args!(
                    "invalid plan name {}: use letters, digits, _ . -",
                    quote(name)
                ),
            );
            continue;
        }
        let given = |first| format!("duplicate plan {} (first at {first})", quote(name));
        if !reader::unique(cx, &mut seen, name, key.pos, (key.pos, path), given) {
            continue;
        }
        if let Some(plan) = plan(cx, value, p, name) {
            out.push(plan);
        }
    }
    out
}

fn plan(cx: &mut Cx, node: &Node, path: Path<'_>, name: &str) -> Option<Plan> {
    let f = fields(cx, node, path, "plan", PLAN_KEYS)?;
    let rate = f.get("rate").and_then(|n| rate(cx, n, path.key("rate")));
    let burst = f
        .get("burst")
        .and_then(|n| reader::int_in(cx, n, path.key("burst"), 1, 1_000_000_000));
    let quota = f.get("quota").and_then(|n| quota(cx, n, path.key("quota")));
    let concurrency = f
        .get("concurrency")
        .and_then(|n| reader::int_in(cx, n, path.key("concurrency"), 1, 1_000_000_000));
    if f.get("burst").is_some() && f.get("rate").is_none() {
        cx.at(f.pos, path, "burst needs a rate");
    }
    if PLAN_LIMITS.iter().all(|k| f.get(k).is_none()) {
        cx.at(
            f.pos,
            path,
            "a plan needs at least one of rate, quota, concurrency",
        );
        return None;
    }
    let (scope, on_failure) = crate::cluster::plan_scope(cx, &f, path);
    Some(Plan {
        name: name.to_string(),
        rate,
        burst: burst.or(rate.map(|r| r.count)),
        quota,
        concurrency,
        scope,
        on_failure,
    })
}

/// Reads `N/UNIT`, e.g. `1000/s`, `60/min`, `5000/h`.
fn rate(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Rate> {
    const EXPECTED: &str = "a rate like 100/s, 60/min, 1000/h or 10000/day";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    let parsed = text.split_once('/').and_then(|(n, unit)| {
        let count = reader::parse_uint(n.trim()).filter(|c| (1..=1_000_000_000).contains(c))?;
        let per = match unit.trim() {
            "s" | "sec" | "second" => Duration::from_secs(1),
            "m" | "min" | "minute" => Duration::from_secs(60),
            "h" | "hour" => Duration::from_secs(3600),
            "d" | "day" => Duration::from_secs(86_400),
            _ => return None,
        };
        Some(Rate { count, per })
    });
    if parsed.is_none() {
        cx.expected(node, path, EXPECTED);
    }
    parsed
}

/// Reads `N/WINDOW`, e.g. `1000000/day`; windows are calendar (UTC).
fn quota(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Quota> {
    const EXPECTED: &str = "a quota like 1000/minute, 50000/hour, 1000000/day or 10000000/month";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    let parsed = text.split_once('/').and_then(|(n, unit)| {
        let limit = reader::parse_uint(n.trim()).filter(|c| *c >= 1)?;
        let window = match unit.trim() {
            "min" | "minute" => QuotaWindow::Minute,
            "h" | "hour" => QuotaWindow::Hour,
            "d" | "day" => QuotaWindow::Day,
            "month" => QuotaWindow::Month,
            _ => return None,
        };
        Some(Quota { limit, window })
    });
    if parsed.is_none() {
        cx.expected(node, path, EXPECTED);
    }
    parsed
}

/// Decodes the items of `apps` one at a time, as the parser completes them
/// (a million apps are never held as a tree) or from a list in the tree.
/// Names of plans and services may be defined after `apps` in the file, so
/// references to them are checked by [`AppsDecoder::finish`], once the
/// whole config is read.
pub(crate) struct AppsDecoder {
    hasher: foldhash::fast::RandomState,
    /// Every id and key given, to find those given twice by sorting hashes:
    /// a million of them take a fraction of the memory and time of a hash
    /// map of strings.
    ids: Vec<Seen>,
    keys: Vec<Seen>,
    /// Every certificate name and fingerprint in an `mtls`, likewise.
    mtls_names: Vec<Seen>,
    mtls_sha256: Vec<Seen>,
    /// Names of plans and services used, to check once they are known.
    refs: Vec<Ref>,
    /// One per item, in order, even for an item with errors (the config is
    /// then refused, and this keeps an item's index its app's index).
    out: Vec<App>,
}

/// A plan or service name an app uses, and where.
struct Ref {
    app: u32,
    pos: Pos,
    kind: RefKind,
}

#[derive(Clone, Copy)]
enum RefKind {
    /// `plan`.
    Plan,
    /// `plans_by_service`'s Nth key.
    ByServiceKey(u32),
    /// `plans_by_service`'s Nth value.
    ByServicePlan(u32),
    /// `services`: the name kept at `at`, given as list item `item`.
    Service { at: u32, item: u32 },
}

impl AppsDecoder {
    pub fn new() -> Self {
        AppsDecoder {
            hasher: foldhash::fast::RandomState::default(),
            ids: Vec::new(),
            keys: Vec::new(),
            mtls_names: Vec::new(),
            mtls_sha256: Vec::new(),
            refs: Vec::new(),
            out: Vec::new(),
        }
    }

    /// Decodes `node` as the list of apps (the tree form).
    pub fn list(&mut self, cx: &mut Cx, node: &Node, path: Path<'_>) {
        if let Some(items) = reader::list(cx, node, path, "a list of apps") {
            for item in items {
                self.item(cx, item, path);
            }
        }
    }

    /// Decodes one app, the next item of the list at `path`.
    pub fn item(&mut self, cx: &mut Cx, item: &Node, path: Path<'_>) {
        let i = self.out.len();
        let mut app = App {
            id: String::new(),
            keys: Vec::new(),
            plan: None,
            plans_by_service: Vec::new(),
            services: None,
            methods: Vec::new(),
            paths: Vec::new(),
            jwt: None,
            mtls: None,
        };
        self.decode(cx, item, path.index(i), i as u32, &mut app);
        self.out.push(app);
    }

    fn decode(&mut self, cx: &mut Cx, item: &Node, p: Path<'_>, i: u32, app: &mut App) {
        let Some(f) = fields(cx, item, p, "app", APP_KEYS) else {
            return;
        };
        if let Some(n) = f.require(cx, p, "id") {
            if let Some(text) = reader::string(cx, n, p.key("id")) {
                if reader::is_name(text) {
                    self.ids.push(Seen::new(&self.hasher, text, n.pos, i, 0));
                    app.id = text.to_string();
                } else {
                    cx.at(
                        n.pos,
                        p.key("id"),
                        format_args!("invalid app id {}: use letters, digits, _ . -", quote(text)),
                    );
                }
            }
        }
        if let Some(n) = f.get("keys") {
            let kp = p.key("keys");
            let items = reader::list(cx, n, kp, "a list of keys").unwrap_or(&[]);
            app.keys.reserve_exact(items.len());
            for (j, k) in items.iter().enumerate() {
                // A wrong key keeps its place as "": the config is refused
                // then, and item j stays key j for the messages.
                let Some(text) = reader::string(cx, k, kp.index(j)) else {
                    app.keys.push(String::new());
                    continue;
                };
                if !valid_key(text) {
                    app.keys.push(String::new());
                    cx.at(
                        k.pos,
                        kp.index(j),
                        format_args!(
                            "an app key is {KEY_MIN} to {KEY_MAX} characters of letters, digits and - _ . ~ + only"
                        ),
                    );
                    continue;
                }
                self.keys
                    .push(Seen::new(&self.hasher, text, k.pos, i, j as u32));
                app.keys.push(text.to_string());
            }
        }
        if let Some(n) = f.get("plan") {
            if let Some(name) = reader::string(cx, n, p.key("plan")) {
                app.plan = Some(name.to_string());
                self.refer(i, n.pos, RefKind::Plan);
            }
        }
        if let Some(n) = f.get("plans_by_service") {
            let bp = p.key("plans_by_service");
            for (key, svc, value) in
                reader::free_map(cx, n, bp, "a mapping of service name to plan name")
                    .unwrap_or_default()
            {
                if app.plans_by_service.iter().any(|(s, _)| s == svc) {
                    cx.at(
                        key.pos,
                        bp,
                        format_args!("duplicate service {}", quote(svc)),
                    );
                    continue;
                }
                let Some(plan) = reader::string(cx, value, bp.key(svc)) else {
                    continue;
                };
                let at = app.plans_by_service.len() as u32;
                app.plans_by_service
                    .push((svc.to_string(), plan.to_string()));
                self.refer(i, key.pos, RefKind::ByServiceKey(at));
                self.refer(i, value.pos, RefKind::ByServicePlan(at));
            }
        }
        if let Some(n) = f.get("services") {
            let sp = p.key("services");
            let mut out: Vec<String> = Vec::new();
            for (j, s) in reader::list(cx, n, sp, "a list of service names")
                .unwrap_or(&[])
                .iter()
                .enumerate()
            {
                let Some(name) = reader::string(cx, s, sp.index(j)) else {
                    continue;
                };
                let at = match out.iter().position(|o| o == name) {
                    Some(at) => at,
                    None => {
                        out.push(name.to_string());
                        out.len() - 1
                    }
                };
                let (at, item) = (at as u32, j as u32);
                self.refer(i, s.pos, RefKind::Service { at, item });
            }
            app.services = Some(out);
        }
        if let Some(n) = f.get("methods") {
            let mp = p.key("methods");
            for (j, m) in reader::list(cx, n, mp, "a list of methods")
                .unwrap_or(&[])
                .iter()
                .enumerate()
            {
                match reader::string(cx, m, mp.index(j)) {
                    Some(t) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphabetic()) => {
                        app.methods.push(t.to_ascii_uppercase())
                    }
                    Some(t) => cx.at(m.pos, mp.index(j), format_args!("bad method {}", quote(t))),
                    None => {}
                }
            }
        }
        if let Some(n) = f.get("paths") {
            let pp = p.key("paths");
            for (j, item) in reader::list(cx, n, pp, "a list of path prefixes")
                .unwrap_or(&[])
                .iter()
                .enumerate()
            {
                match reader::string(cx, item, pp.index(j)) {
                    Some(t) if t.starts_with('/') && !t.contains(['?', '#', ' ', '*']) => {
                        let t = if t.len() > 1 {
                            t.trim_end_matches('/')
                        } else {
                            t
                        };
                        app.paths.push(t.to_string())
                    }
                    Some(t) => cx.at(
                        item.pos,
                        pp.index(j),
                        format_args!("expected a path prefix like /orders, found {}", quote(t)),
                    ),
                    None => {}
                }
            }
        }
        app.jwt = f
            .get("jwt")
            .and_then(|n| crate::jwt::app_jwt(cx, n, p.key("jwt")));
        if let Some(d) = f
            .get("mtls")
            .and_then(|n| crate::tls::app_mtls(cx, n, p.key("mtls")))
        {
            for (j, (name, pos)) in d.mtls.names.iter().zip(&d.name_pos).enumerate() {
                let seen = Seen::new(&self.hasher, name.as_str(), *pos, i, j as u32);
                self.mtls_names.push(seen);
            }
            for (j, (sha, pos)) in d.mtls.sha256.iter().zip(&d.sha256_pos).enumerate() {
                let seen = Seen::new(&self.hasher, sha, *pos, i, j as u32);
                self.mtls_sha256.push(seen);
            }
            app.mtls = Some(d.mtls);
        }
    }

    fn refer(&mut self, app: u32, pos: Pos, kind: RefKind) {
        self.refs.push(Ref { app, pos, kind });
    }

    /// Reports names of plans and services that are not defined, and ids
    /// and keys given twice; returns the apps. `path` is where `apps` is.
    pub fn finish(
        mut self,
        cx: &mut Cx,
        path: Path<'_>,
        services: &HashMap<&str, Pos>,
        plans: &[&str],
    ) -> Vec<App> {
        let plan_names: HashMap<&str, ()> = plans.iter().map(|p| (*p, ())).collect();
        for r in &self.refs {
            let app = &self.out[r.app as usize];
            let p = path.index(r.app as usize);
            let (name, known, what, p) = match r.kind {
                RefKind::Plan => {
                    let name = app.plan.as_deref().unwrap_or_default();
                    (name, plan_names.contains_key(name), "plan", p.key("plan"))
                }
                RefKind::ByServiceKey(at) => {
                    let name = app.plans_by_service[at as usize].0.as_str();
                    let known = services.contains_key(name);
                    (name, known, "service", p.key("plans_by_service"))
                }
                RefKind::ByServicePlan(at) => {
                    let (svc, name) = &app.plans_by_service[at as usize];
                    let known = plan_names.contains_key(name.as_str());
                    let bp = p.key("plans_by_service");
                    if !known {
                        cx.at(
                            r.pos,
                            bp.key(svc),
                            format_args!("unknown plan {}", quote(name)),
                        );
                    }
                    continue;
                }
                RefKind::Service { at, item } => {
                    let services_of = app.services.as_deref().unwrap_or_default();
                    let name = services_of[at as usize].as_str();
                    let sp = p.key("services");
                    if !services.contains_key(name) {
                        cx.at(
                            r.pos,
                            sp.index(item as usize),
                            format_args!("unknown service {}", quote(name)),
                        );
                    }
                    continue;
                }
            };
            if !known {
                cx.at(r.pos, p, format_args!("unknown {what} {}", quote(name)));
            }
        }
        let out = &self.out;
        for (first, dup) in duplicates(&mut self.ids, |s| &out[s.app as usize].id) {
            cx.at(
                dup.pos,
                path.index(dup.app as usize).key("id"),
                format_args!(
                    "duplicate app id {} (first at {})",
                    quote(&out[dup.app as usize].id),
                    first.pos
                ),
            );
        }
        let key_of = |s: &Seen| out[s.app as usize].keys[s.item as usize].as_str();
        for (first, dup) in duplicates(&mut self.keys, key_of) {
            let whose = if first.app == dup.app {
                "this app"
            } else {
                "another app"
            };
            // Never echo the key itself in an error.
            cx.at(
                dup.pos,
                path.index(dup.app as usize)
                    .key("keys")
                    .index(dup.item as usize),
                format_args!("key already given to {whose} (first at {})", first.pos),
            );
        }
        crate::tls::check_mtls(
            cx,
            path,
            &self.out,
            &self.ids,
            &mut self.mtls_names,
            &mut self.mtls_sha256,
        );
        self.out
    }
}

/// Keys are URL-safe so they can travel in a query or a path segment.
pub fn valid_key(text: &str) -> bool {
    (KEY_MIN..=KEY_MAX).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'+'))
}

/// Decodes `app_key`: where app keys are looked for.
pub(crate) fn app_key(cx: &mut Cx, node: &Node, path: Path<'_>) -> AppKeySources {
    let mut out = AppKeySources::default();
    let Some(f) = fields(cx, node, path, "app_key", APP_KEY_KEYS) else {
        return out;
    };
    if let Some(n) = f.get("header") {
        let p = path.key("header");
        match reader::string(cx, n, p) {
            Some("") | Some("off") => out.header = None,
            Some(h) if reader::is_token(h) => out.header = Some(h.to_ascii_lowercase()),
            Some(h) => cx.at(n.pos, p, format_args!("invalid header name {}", quote(h))),
            None => {}
        }
    }
    if let Some(n) = f.get("query") {
        let p = path.key("query");
        match reader::string(cx, n, p) {
            Some("") | Some("off") => out.query = None,
            Some(q)
                if q.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) =>
            {
                out.query = Some(q.to_string())
            }
            Some(q) => cx.at(
                n.pos,
                p,
                format_args!("invalid query parameter name {}", quote(q)),
            ),
            None => {}
        }
    }
    if let Some(n) = f.get("path_segment") {
        if let Some(b) = reader::boolean(cx, n, path.key("path_segment")) {
            out.path_segment = b;
        }
    }
    if out.header.is_none() && out.query.is_none() && !out.path_segment {
        cx.at(f.pos, path, "every key source is off: keep at least one");
    }
    out
}
