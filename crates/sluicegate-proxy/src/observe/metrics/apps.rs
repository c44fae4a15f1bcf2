//! The per-app families.

use super::{family, label};
use crate::apps::AppSlot;
use std::sync::atomic::Ordering;

/// Writes the per-app families, skipping apps with no requests.
pub fn render_apps<'a>(
    out: &mut String,
    apps: impl Iterator<Item = (&'a str, &'a AppSlot)> + Clone,
) {
    type Family = (&'static str, &'static str, fn(&AppSlot) -> u64);
    let families: [Family; 3] = [
        (
            "sluicegate_app_requests_total",
            "Requests authenticated as an app.",
            |a| a.requests.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_app_forbidden_total",
            "Requests of an app refused 403 (service, method or path not allowed).",
            |a| a.forbidden.load(Ordering::Relaxed),
        ),
        (
            "sluicegate_app_limited_total",
            "Requests of an app refused 429 (over its plan).",
            |a| a.limited.load(Ordering::Relaxed),
        ),
    ];
    for (name, help, get) in families {
        let rows = apps
            .clone()
            .filter(|(_, a)| a.requests.load(Ordering::Relaxed) > 0)
            .map(|(id, a)| (format!("app=\"{}\"", label(id)), get(a)));
        family(out, name, "counter", help, rows);
    }
}
