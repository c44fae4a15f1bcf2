//! API management: `plans` (rate, burst, quota, concurrency), `apps` (the
//! consumers: id, keys, plan, allowed services) and `app_key` (where keys
//! are looked for).

use std::collections::HashMap;
use std::time::Duration;

use crate::model::{
    App, AppJwt, AppKeySources, JwtAlg, JwtKey, JwtSettings, LimitKey, Plan, Quota, QuotaWindow,
    Rate, RouteLimit,
};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

const PLAN_KEYS: &[&str] = &["rate", "burst", "quota", "concurrency"];
const APP_KEYS: &[&str] = &[
    "id",
    "keys",
    "plan",
    "plans_by_service",
    "services",
    "methods",
    "paths",
    "jwt",
];
const APP_KEY_KEYS: &[&str] = &["header", "query", "path_segment"];
const ROUTE_LIMIT_KEYS: &[&str] = &["rate", "burst", "concurrency", "per"];

/// Decodes a route's `limit`.
pub(crate) fn route_limit(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<RouteLimit> {
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
        Some(n) => {
            let p = path.key("per");
            match reader::scalar(cx, n, p, "client_ip or route") {
                Some("client_ip") => Some(LimitKey::ClientIp),
                Some("route") => Some(LimitKey::Route),
                Some(other) => {
                    cx.at(
                        n.pos,
                        p,
                        format_args!("expected client_ip or route, found {}", quote(other)),
                    );
                    None
                }
                None => None,
            }
        }
    };
    if f.get("burst").is_some() && f.get("rate").is_none() {
        cx.at(f.pos, path, "burst needs a rate");
    }
    if f.get("rate").is_none() && f.get("concurrency").is_none() {
        cx.at(f.pos, path, "a limit needs rate or concurrency");
        return None;
    }
    Some(RouteLimit {
        rate,
        burst: burst.or(rate.map(|r| r.count)),
        concurrency,
        per: per?,
    })
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
        if let Some(first) = seen.insert(name, key.pos) {
            cx.at(
                key.pos,
                path,
                format_args!("duplicate plan {} (first at {first})", quote(name)),
            );
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
    if PLAN_KEYS.iter().all(|k| f.get(k).is_none()) {
        cx.at(
            f.pos,
            path,
            "a plan needs at least one of rate, quota, concurrency",
        );
        return None;
    }
    Some(Plan {
        name: name.to_string(),
        rate,
        burst: burst.or(rate.map(|r| r.count)),
        quota,
        concurrency,
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

/// Decodes `apps`. `services` and `plans` are the defined names.
pub(crate) fn apps(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
    plans: &[Plan],
) -> Vec<App> {
    let Some(items) = reader::list(cx, node, path, "a list of apps") else {
        return Vec::new();
    };
    let plan_names: HashMap<&str, ()> = plans.iter().map(|p| (p.name.as_str(), ())).collect();
    // Ids and keys are checked for duplicates after the loop, by sorting
    // their hashes: a million of them take a fraction of the memory and
    // time of a hash map of strings.
    let hasher = foldhash::fast::RandomState::default();
    let mut ids: Vec<Seen<'_>> = Vec::with_capacity(items.len());
    let mut keys: Vec<Seen<'_>> = Vec::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(f) = fields(cx, item, p, "app", APP_KEYS) else {
            continue;
        };
        let id = f.require(cx, p, "id").and_then(|n| {
            let text = reader::string(cx, n, p.key("id"))?;
            if !reader::is_name(text) {
                cx.at(
                    n.pos,
                    p.key("id"),
                    format_args!("invalid app id {}: use letters, digits, _ . -", quote(text)),
                );
                return None;
            }
            ids.push(Seen::new(&hasher, text, n.pos, i, 0));
            Some(text)
        });
        let mut app_keys = Vec::new();
        if let Some(n) = f.get("keys") {
            let kp = p.key("keys");
            for (j, k) in reader::list(cx, n, kp, "a list of keys")
                .unwrap_or(&[])
                .iter()
                .enumerate()
            {
                let Some(text) = reader::string(cx, k, kp.index(j)) else {
                    continue;
                };
                if !valid_key(text) {
                    cx.at(
                        k.pos,
                        kp.index(j),
                        format_args!(
                            "an app key is {KEY_MIN} to {KEY_MAX} characters of letters, digits and - _ . ~ + only"
                        ),
                    );
                    continue;
                }
                keys.push(Seen::new(&hasher, text, k.pos, i, j));
                app_keys.push(text.to_string());
            }
        }
        let plan = f
            .get("plan")
            .and_then(|n| plan_ref(cx, n, p.key("plan"), &plan_names));
        let mut by_service = Vec::new();
        if let Some(n) = f.get("plans_by_service") {
            let bp = p.key("plans_by_service");
            for (key, svc, value) in
                reader::free_map(cx, n, bp, "a mapping of service name to plan name")
                    .unwrap_or_default()
            {
                if !services.contains_key(svc) {
                    cx.at(key.pos, bp, format_args!("unknown service {}", quote(svc)));
                    continue;
                }
                if by_service.iter().any(|(s, _): &(String, String)| s == svc) {
                    cx.at(
                        key.pos,
                        bp,
                        format_args!("duplicate service {}", quote(svc)),
                    );
                    continue;
                }
                if let Some(plan) = plan_ref(cx, value, bp.key(svc), &plan_names) {
                    by_service.push((svc.to_string(), plan));
                }
            }
        }
        let allowed = f.get("services").map(|n| {
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
                if !services.contains_key(name) {
                    cx.at(
                        s.pos,
                        sp.index(j),
                        format_args!("unknown service {}", quote(name)),
                    );
                } else if !out.iter().any(|o| o == name) {
                    out.push(name.to_string());
                }
            }
            out
        });
        let mut methods = Vec::new();
        if let Some(n) = f.get("methods") {
            let mp = p.key("methods");
            for (j, m) in reader::list(cx, n, mp, "a list of methods")
                .unwrap_or(&[])
                .iter()
                .enumerate()
            {
                match reader::string(cx, m, mp.index(j)) {
                    Some(t) if !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphabetic()) => {
                        methods.push(t.to_ascii_uppercase())
                    }
                    Some(t) => cx.at(m.pos, mp.index(j), format_args!("bad method {}", quote(t))),
                    None => {}
                }
            }
        }
        let mut paths = Vec::new();
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
                        paths.push(t.to_string())
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
        let jwt = f.get("jwt").and_then(|n| app_jwt(cx, n, p.key("jwt")));
        if let Some(id) = id {
            // (With a duplicate id or key the whole config is refused, so
            // what is pushed here then does not matter.)
            out.push(App {
                id: id.to_string(),
                keys: app_keys,
                plan,
                plans_by_service: by_service,
                services: allowed,
                methods,
                paths,
                jwt,
            });
        }
    }
    for (first, dup) in duplicates(&mut ids) {
        cx.at(
            dup.pos,
            path.index(dup.app as usize).key("id"),
            format_args!(
                "duplicate app id {} (first at {})",
                quote(dup.text),
                first.pos
            ),
        );
    }
    for (first, dup) in duplicates(&mut keys) {
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
    out
}

/// An app id or key, where it was given, and a hash to sort by.
#[derive(Clone, Copy)]
struct Seen<'n> {
    hash: u64,
    text: &'n str,
    pos: Pos,
    app: u32,
    item: u32,
}

impl<'n> Seen<'n> {
    fn new(
        h: &impl std::hash::BuildHasher,
        text: &'n str,
        pos: Pos,
        app: usize,
        item: usize,
    ) -> Self {
        Seen {
            hash: h.hash_one(text),
            text,
            pos,
            app: app as u32,
            item: item as u32,
        }
    }
}

/// Each later occurrence of a text given more than once, with the first
/// one, in the order they were given.
fn duplicates<'n>(seen: &mut [Seen<'n>]) -> Vec<(Seen<'n>, Seen<'n>)> {
    seen.sort_unstable_by_key(|s| (s.hash, s.app, s.item));
    let mut out = Vec::new();
    for run in seen.chunk_by(|a, b| a.hash == b.hash) {
        for (i, s) in run.iter().enumerate() {
            // The first earlier entry with the same text (hashes can collide).
            if let Some(first) = run[..i].iter().find(|f| f.text == s.text) {
                out.push((*first, *s));
            }
        }
    }
    out.sort_unstable_by_key(|(_, d)| (d.app, d.item));
    out
}

fn plan_ref(cx: &mut Cx, node: &Node, path: Path<'_>, plans: &HashMap<&str, ()>) -> Option<String> {
    let name = reader::string(cx, node, path)?;
    if !plans.contains_key(name) {
        cx.at(node.pos, path, format_args!("unknown plan {}", quote(name)));
        return None;
    }
    Some(name.to_string())
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

const APP_JWT_KEYS: &[&str] = &[
    "alg",
    "secret",
    "secret_file",
    "public_key",
    "public_key_file",
];

/// Decodes an app's `jwt`: the algorithm and one key source (files are
/// read now, so a missing file is a config error with its line).
fn app_jwt(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<AppJwt> {
    let f = fields(cx, node, path, "app jwt", APP_JWT_KEYS)?;
    let alg = f.require(cx, path, "alg").and_then(|n| {
        let p = path.key("alg");
        match reader::scalar(cx, n, p, "HS256, RS256 or ES256")? {
            "HS256" => Some(JwtAlg::HS256),
            "RS256" => Some(JwtAlg::RS256),
            "ES256" => Some(JwtAlg::ES256),
            other => {
                cx.at(
                    n.pos,
                    p,
                    format_args!("expected HS256, RS256 or ES256, found {}", quote(other)),
                );
                None
            }
        }
    })?;
    let (inline, file, what) = match alg {
        JwtAlg::HS256 => ("secret", "secret_file", "a shared secret"),
        _ => ("public_key", "public_key_file", "a PEM public key"),
    };
    for wrong in APP_JWT_KEYS[1..]
        .iter()
        .filter(|k| **k != inline && **k != file)
    {
        if let Some(n) = f.get(wrong) {
            cx.at(n.pos, path.key(wrong), "does not apply to this alg");
        }
    }
    let bytes = match (f.get(inline), f.get(file)) {
        (Some(_), Some(n)) => {
            cx.at(
                n.pos,
                path.key(file),
                format_args!("give either {inline} or {file}, not both"),
            );
            return None;
        }
        (None, None) => {
            cx.at(
                f.pos,
                path,
                format_args!("missing {inline} or {file} ({what})"),
            );
            return None;
        }
        (Some(n), None) => reader::string(cx, n, path.key(inline))?.as_bytes().to_vec(),
        (None, Some(n)) => {
            let p = path.key(file);
            let name = reader::string(cx, n, p)?;
            match std::fs::read(name) {
                Ok(b) => b,
                Err(e) => {
                    cx.at(n.pos, p, format_args!("cannot read {}: {e}", quote(name)));
                    return None;
                }
            }
        }
    };
    let key = match alg {
        JwtAlg::HS256 => {
            if bytes.len() < 32 {
                let at = f.get(inline).or(f.get(file)).map_or(f.pos, |n| n.pos);
                cx.at(at, path, "an HS256 secret needs at least 32 bytes");
                return None;
            }
            JwtKey::Secret(bytes)
        }
        _ => {
            if !bytes.windows(10).any(|w| w == b"-----BEGIN") {
                let at = f.get(inline).or(f.get(file)).map_or(f.pos, |n| n.pos);
                cx.at(
                    at,
                    path,
                    "expected a PEM public key (-----BEGIN PUBLIC KEY-----)",
                );
                return None;
            }
            JwtKey::PublicKeyPem(bytes)
        }
    };
    Some(AppJwt { alg, key })
}

/// Decodes the top-level `jwt` settings.
pub(crate) fn jwt_settings(cx: &mut Cx, node: &Node, path: Path<'_>) -> JwtSettings {
    let mut out = JwtSettings::default();
    let Some(f) = fields(
        cx,
        node,
        path,
        "jwt",
        &["issuer", "audience", "app_claim", "leeway"],
    ) else {
        return out;
    };
    if let Some(n) = f.get("issuer") {
        out.issuer = reader::string(cx, n, path.key("issuer")).map(str::to_string);
    }
    if let Some(n) = f.get("audience") {
        out.audience = reader::string(cx, n, path.key("audience")).map(str::to_string);
    }
    if let Some(n) = f.get("app_claim") {
        if let Some(c) = reader::string(cx, n, path.key("app_claim")) {
            out.app_claim = c.to_string();
        }
    }
    reader::duration_field(cx, &f, path, "leeway", &mut out.leeway);
    out
}
