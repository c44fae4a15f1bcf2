//! The named schemas of `components.schemas`, among them the whole
//! config's and the settings': built from the parts in `resources.rs` and
//! `top.rs` with the builders of `mod.rs`.

use super::resources::{app, plan, route, service};
use super::top::{listener_tls, top};
use super::*;

/// The named schemas, for `components.schemas`: what the other schemas
/// point to with `$ref`, and one per resource.
pub fn components() -> Vec<(&'static str, S)> {
    vec![
        ("Duration", duration_schema()),
        ("Size", size_schema()),
        ("Name", name_schema()),
        ("HeaderOps", header_ops()),
        ("IpRules", ip_rules()),
        ("ListenerTls", listener_tls()),
        ("Service", service()),
        ("Route", route()),
        ("App", app()),
        ("Plan", plan(false)),
        ("PlanItem", plan(true)),
        ("Settings", top_level(false)),
        ("Config", top_level(true)),
    ]
}

/// The whole config (`all`), or the settings: every top-level key but the
/// resource sections.
fn top_level(all: bool) -> S {
    if all {
        object("A whole config.", decode::TOP_KEYS, &["listen"], top)
    } else {
        object(
            "The settings: every top-level key but services, routes, apps and plans.",
            settings_keys(),
            &["listen"],
            top,
        )
    }
}

/// The top-level keys that are settings, leaked once (they are the same
/// for the life of the process).
fn settings_keys() -> &'static [&'static str] {
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        decode::TOP_KEYS
            .iter()
            .copied()
            .filter(|k| !SECTIONS.contains(k))
            .collect()
    })
}
