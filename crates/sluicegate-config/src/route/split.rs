//! A route's `split` list (services by weight, apps pinned to one) and
//! its `split_by` key (what keeps a client on one service).

use std::collections::HashMap;

use crate::model::{SplitBy, SplitEntry, MAX_SPLIT_WEIGHT};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

pub(crate) const SPLIT_ENTRY_KEYS: &[&str] = &["service", "weight", "apps"];

/// The kinds `split_by` takes, as an error lists them.
pub(crate) const SPLIT_BY_KINDS: &str =
    "random, client_ip, app, header:NAME, cookie:NAME or param:NAME";

/// Decodes `split: [{ service, weight, apps }]`: at least one entry, each
/// service defined and named once, some weight above zero, each app pinned
/// to one entry only.
pub(crate) fn split_entries(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
) -> Option<Vec<SplitEntry>> {
    const EXPECTED: &str = "a list of { service, weight, apps }";
    let items = reader::list(cx, node, path, EXPECTED)?;
    if items.is_empty() {
        cx.at(node.pos, path, "needs at least one entry");
        return None;
    }
    let mut ok = true;
    let mut out = Vec::with_capacity(items.len());
    let mut seen: HashMap<&str, Pos> = HashMap::with_capacity(items.len());
    let mut pinned: HashMap<&str, Pos> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(f) = fields(cx, item, p, "split entry", SPLIT_ENTRY_KEYS) else {
            ok = false;
            continue;
        };
        let service = f.require(cx, p, "service").and_then(|n| {
            let sp = p.key("service");
            let name = reader::string(cx, n, sp)?;
            if !services.contains_key(name) {
                cx.at(n.pos, sp, format_args!("unknown service {}", quote(name)));
                return None;
            }
            let twice = |first| {
                format!(
                    "service {} is in the split twice (first at {first})",
                    quote(name)
                )
            };
            reader::unique(cx, &mut seen, name, n.pos, (n.pos, sp), twice).then_some(name)
        });
        let weight = f.require(cx, p, "weight").and_then(|n| {
            let w = reader::int_in(cx, n, p.key("weight"), 0, u64::from(MAX_SPLIT_WEIGHT))?;
            u32::try_from(w).ok()
        });
        let apps = match f.get("apps") {
            None => Some(Vec::new()),
            Some(n) => pinned_apps(cx, n, p.key("apps"), &mut pinned),
        };
        match (service, weight, apps) {
            (Some(service), Some(weight), Some(apps)) => out.push(SplitEntry {
                service: service.to_string(),
                weight,
                apps,
            }),
            _ => ok = false,
        }
    }
    if ok && out.iter().all(|e| e.weight == 0) {
        cx.at(
            node.pos,
            path,
            "every weight is 0: give at least one entry a weight above 0 (requests of apps not pinned need somewhere to go)",
        );
        return None;
    }
    ok.then_some(out)
}

/// An entry's `apps`: app ids, none pinned to two entries (`pinned`
/// holds those of the entries before).
fn pinned_apps<'n>(
    cx: &mut Cx,
    node: &'n Node,
    path: Path<'_>,
    pinned: &mut HashMap<&'n str, Pos>,
) -> Option<Vec<String>> {
    let items = reader::list(cx, node, path, "a list of app ids")?;
    let mut ok = true;
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(id) = reader::string(cx, item, p) else {
            ok = false;
            continue;
        };
        let twice = |first| format!("app {} is pinned twice (first at {first})", quote(id));
        if reader::unique(cx, pinned, id, item.pos, (item.pos, p), twice) {
            out.push(id.to_string());
        } else {
            ok = false;
        }
    }
    ok.then_some(out)
}

/// Decodes `split_by`: `random`, `client_ip`, `app`, `header:NAME`,
/// `cookie:NAME` or `param:NAME`. `app` needs `authenticated` (the route's
/// auth names one); `param:NAME` a parameter of the route's path
/// `template`.
pub(crate) fn split_by(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    authenticated: bool,
    template: Option<&crate::PathTemplate>,
) -> Option<SplitBy> {
    let text = reader::scalar(cx, node, path, SPLIT_BY_KINDS)?;
    let (kind, arg) = match text.split_once(':') {
        Some((k, a)) => (k, Some(a)),
        None => (text, None),
    };
    let named = |cx: &mut Cx, what: &str| -> Option<String> {
        match arg {
            Some(a) if reader::is_token(a) => Some(a.to_string()),
            _ => {
                cx.at(
                    node.pos,
                    path,
                    format_args!("{kind}: needs a {what} name, e.g. {kind}:x-user"),
                );
                None
            }
        }
    };
    let by = match (kind, arg) {
        ("random", None) => SplitBy::Random,
        ("client_ip", None) => SplitBy::ClientIp,
        ("app", None) if authenticated => SplitBy::App,
        ("app", None) => {
            cx.at(
                node.pos,
                path,
                "app needs the route's auth (app_key, jwt or mtls) to know the app",
            );
            return None;
        }
        ("header", Some(_)) => SplitBy::Header(named(cx, "header")?.to_ascii_lowercase()),
        ("cookie", Some(_)) => SplitBy::Cookie(named(cx, "cookie")?),
        ("param", Some(name)) => match template.and_then(|t| t.param_index(name)) {
            Some(index) => SplitBy::Param(index),
            None => {
                let why = match template {
                    None => "needs match.path to be a template with that parameter".to_string(),
                    Some(t) => format!(
                        "{} is not a parameter of match.path {}",
                        quote(name),
                        quote(&t.text)
                    ),
                };
                cx.at(node.pos, path, format_args!("{}: {why}", quote(text)));
                return None;
            }
        },
        _ => {
            cx.at(
                node.pos,
                path,
                format_args!("unknown kind {} (expected {SPLIT_BY_KINDS})", quote(text)),
            );
            return None;
        }
    };
    Some(by)
}
