//! A route's `fallback` (a fixed answer, or another service) for when its
//! service cannot answer, and `fallback_on`, the upstream statuses it
//! replaces too.

use std::collections::HashMap;

use crate::model::{Fallback, FallbackAnswer, FallbackOn};
use crate::reader::{self, fields, Cx, Fields, Path};
use crate::yaml::{quote, Node, Pos};

pub(crate) const FALLBACK_KEYS: &[&str] = &["status", "body", "headers", "service"];

/// Decodes the route's `fallback` and `fallback_on` (`route`: the route's
/// own keys); `Some(None)` when it has neither.
pub(super) fn route_fallback(
    cx: &mut Cx,
    route: &Fields<'_>,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
) -> Option<Option<Fallback>> {
    let on_node = route.get("fallback_on");
    let Some(node) = route.get("fallback") else {
        if let Some(n) = on_node {
            cx.at(
                n.pos,
                path.key("fallback_on"),
                "needs fallback (what answers instead)",
            );
            return None;
        }
        return Some(None);
    };
    if route.get("respond").is_some() || route.get("aggregate").is_some() {
        cx.at(
            node.pos,
            path.key("fallback"),
            "only applies to routes with a service",
        );
        return None;
    }
    let own = route.get("service").and_then(|n| n.as_scalar());
    let answer = answer(cx, node, path.key("fallback"), services, own);
    let on = match on_node {
        None => Some(Vec::new()),
        Some(n) => fallback_on(cx, n, path.key("fallback_on")),
    };
    Some(Some(Fallback {
        answer: answer?,
        on: on?,
    }))
}

/// `{ status, body, headers }` or `{ service }`.
fn answer(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
    own: Option<&str>,
) -> Option<FallbackAnswer> {
    let f = fields(cx, node, path, "fallback", FALLBACK_KEYS)?;
    let fixed = ["status", "body", "headers"]
        .iter()
        .find_map(|k| f.get(k).map(|n| (*k, n)));
    match (f.get("service"), fixed) {
        (Some(service), Some((key, _))) => {
            cx.at(
                service.pos,
                path.key("service"),
                format_args!(
                    "give either service or a fixed answer (status, body, headers), not both ({key} is given too)"
                ),
            );
            None
        }
        (None, None) => {
            cx.at(
                f.pos,
                path,
                "missing \"service\" (another service) or \"status\", \"body\", \"headers\" (a fixed answer)",
            );
            None
        }
        (Some(service), None) => {
            let p = path.key("service");
            let name = reader::string(cx, service, p)?;
            if !services.contains_key(name) {
                cx.at(
                    service.pos,
                    p,
                    format_args!("unknown service {}", quote(name)),
                );
                return None;
            }
            if own == Some(name) {
                cx.at(
                    service.pos,
                    p,
                    "is the route's own service (a fallback is another one)",
                );
                return None;
            }
            Some(FallbackAnswer::Service(name.to_string()))
        }
        (None, Some(_)) => {
            let (status, body, headers) = super::fixed::fixed_answer(cx, &f, path, 200)?;
            Some(FallbackAnswer::Respond {
                status,
                body,
                headers,
            })
        }
    }
}

/// `fallback_on: [5xx, 503, ...]`.
fn fallback_on(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<FallbackOn>> {
    const EXPECTED: &str = "5xx or a status from 500 to 599";
    let items = reader::list(cx, node, path, "a list such as [5xx] or [502, 503]")?;
    let mut out = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(text) = reader::scalar(cx, item, p, EXPECTED) else {
            ok = false;
            continue;
        };
        let on = if text.eq_ignore_ascii_case("5xx") {
            Some(FallbackOn::ServerError)
        } else {
            reader::parse_uint(text)
                .filter(|s| (500..=599).contains(s))
                .map(|s| FallbackOn::Status(s as u16))
        };
        match on {
            Some(on) if !out.contains(&on) => out.push(on),
            Some(_) => {}
            None => {
                cx.expected(item, p, EXPECTED);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}
