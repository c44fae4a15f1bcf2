//! A service's `retries` and `breaker`: when a failed attempt goes to
//! another endpoint, and when an endpoint is taken out for failing.

use std::time::Duration;

use crate::model::{Breaker, Ejection, Retries};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node};

pub(crate) const RETRY_KEYS: &[&str] = &["attempts", "on", "budget"];
pub(crate) const BREAKER_KEYS: &[&str] = &[
    "errors",
    "window",
    "open_for",
    "half_open_requests",
    "on_5xx",
];
pub(crate) const EJECTION_KEYS: &[&str] = &["base", "max"];
const RETRY_ON: &str =
    "connect, reset, timeout, a status from 500 to 599, or grpc:STATUS (e.g. grpc:unavailable)";

/// Decodes `retries: { attempts, on, budget }`.
pub(crate) fn retries(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Retries> {
    let f = fields(cx, node, path, "retries", RETRY_KEYS)?;
    let mut out = Retries::default();
    let mut ok = true;
    if let Some(n) = f.get("attempts") {
        match reader::int_in(cx, n, path.key("attempts"), 1, 10) {
            Some(v) => out.attempts = v as u32,
            None => ok = false,
        }
    }
    if let Some(n) = f.get("on") {
        let p = path.key("on");
        out.on_connect = false;
        out.on_reset = false;
        match reader::list(cx, n, p, "a list of retry conditions") {
            None => ok = false,
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    let Some(text) = reader::scalar(cx, item, p.index(i), RETRY_ON) else {
                        ok = false;
                        continue;
                    };
                    match text {
                        "connect" => out.on_connect = true,
                        "reset" => out.on_reset = true,
                        "timeout" => out.on_timeout = true,
                        t if t.starts_with("grpc:") => {
                            let name = t[5..].to_ascii_lowercase();
                            match crate::model::GRPC_STATUS_NAMES
                                .iter()
                                .position(|n| *n == name)
                            {
                                Some(code) if code > 0 => {
                                    if !out.on_grpc.contains(&(code as u8)) {
                                        out.on_grpc.push(code as u8);
                                    }
                                }
                                _ => {
                                    cx.at(
                                        item.pos,
                                        p.index(i),
                                        format_args!(
                                            "unknown gRPC status {} (expected grpc: and one of {})",
                                            quote(t),
                                            crate::model::GRPC_STATUS_NAMES[1..].join(", ")
                                        ),
                                    );
                                    ok = false;
                                }
                            }
                        }
                        t => match t.parse::<u16>() {
                            Ok(s) if (500..=599).contains(&s) => {
                                if !out.on_status.contains(&s) {
                                    out.on_status.push(s);
                                }
                            }
                            _ => {
                                cx.at(
                                    item.pos,
                                    p.index(i),
                                    format_args!("expected {RETRY_ON}, found {}", quote(t)),
                                );
                                ok = false;
                            }
                        },
                    }
                }
            }
        }
    }
    if let Some(n) = f.get("budget") {
        let p = path.key("budget");
        const EXPECTED: &str = "a share of requests like 20%";
        let text = reader::scalar(cx, n, p, EXPECTED);
        match text.and_then(|t| t.trim().strip_suffix('%')?.trim().parse::<u32>().ok()) {
            Some(v) if v <= 100 => out.budget_percent = v,
            _ => {
                if text.is_some() {
                    cx.expected(n, p, EXPECTED);
                }
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// Decodes `breaker: { errors, window, open_for, half_open_requests, on_5xx }`.
pub(crate) fn breaker(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Breaker> {
    let f = fields(cx, node, path, "breaker", BREAKER_KEYS)?;
    let mut ok = true;
    let mut count = |cx: &mut Cx, key: &str, default: u32| -> u32 {
        match f.get(key) {
            None => default,
            Some(n) => reader::int_in(cx, n, path.key(key), 1, 1_000_000).map_or_else(
                || {
                    ok = false;
                    default
                },
                |v| v as u32,
            ),
        }
    };
    let errors = count(cx, "errors", 5);
    let half_open_requests = count(cx, "half_open_requests", 1);
    let mut window = Duration::from_secs(10);
    let mut open_for = Duration::from_secs(10);
    reader::duration_field(cx, &f, path, "window", &mut window);
    reader::duration_field(cx, &f, path, "open_for", &mut open_for);
    for (key, d) in [("window", window), ("open_for", open_for)] {
        if d < Duration::from_millis(10) {
            let pos = f.get(key).map_or(f.pos, |n| n.pos);
            cx.at(pos, path.key(key), "must be at least 10ms");
            ok = false;
        }
    }
    let on_5xx = match f.get("on_5xx") {
        None => false,
        Some(n) => reader::boolean(cx, n, path.key("on_5xx")).unwrap_or_else(|| {
            ok = false;
            false
        }),
    };
    ok.then_some(Breaker {
        errors,
        window,
        open_for,
        half_open_requests,
        on_5xx,
    })
}

/// Decodes `ejection: false` (off) or `ejection: { base, max }`: `None`
/// inside when off, the outer `None` when invalid.
pub(crate) fn ejection(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Option<Ejection>> {
    if node.as_scalar().is_some() {
        return match reader::boolean(cx, node, path)? {
            true => Some(Some(Ejection::default())),
            false => Some(None),
        };
    }
    let f = fields(cx, node, path, "ejection", EJECTION_KEYS)?;
    let mut out = Ejection::default();
    reader::duration_field(cx, &f, path, "base", &mut out.base);
    reader::duration_field(cx, &f, path, "max", &mut out.max);
    let mut ok = true;
    if out.base < Duration::from_millis(10) {
        let pos = f.get("base").map_or(f.pos, |n| n.pos);
        cx.at(pos, path.key("base"), "must be at least 10ms");
        ok = false;
    }
    if out.max < out.base {
        let pos = f.get("max").map_or(f.pos, |n| n.pos);
        cx.at(
            pos,
            path.key("max"),
            format_args!("must be at least base ({}ms)", out.base.as_millis()),
        );
        ok = false;
    }
    ok.then_some(Some(out))
}
