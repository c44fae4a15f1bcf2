//! A route's `mirror` mapping: the service that gets a copy of a share of
//! its requests.

use std::collections::HashMap;

use crate::model::Mirror;
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

pub(crate) const MIRROR_KEYS: &[&str] = &["service", "percent"];

/// Decodes `mirror: { service, percent }`: `service` one of `services`,
/// `percent` 0 to 100 (100 when absent).
pub(super) fn mirror(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    services: &HashMap<&str, Pos>,
) -> Option<Mirror> {
    let f = fields(cx, node, path, "mirror", MIRROR_KEYS)?;
    let service = f.require(cx, path, "service").and_then(|n| {
        let p = path.key("service");
        let name = reader::string(cx, n, p)?;
        if !services.contains_key(name) {
            cx.at(n.pos, p, format_args!("unknown service {}", quote(name)));
            return None;
        }
        Some(name.to_string())
    });
    let percent = match f.get("percent") {
        None => Some(100.0),
        Some(n) => super::fault::percent(cx, n, path.key("percent")),
    };
    Some(Mirror {
        service: service?,
        percent: percent?,
    })
}
