//! A route's header policies: `request_headers` and `response_headers`,
//! each `{ set, add, remove }`.

use std::collections::HashMap;

use crate::model::HeaderOps;
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Pos};

const OPS_KEYS: &[&str] = &["set", "add", "remove"];

/// Headers a policy may not touch: framing and hop-by-hop headers, Host
/// and the X-Forwarded-* headers are the gateway's to write, and X-App-Id
/// is set by app-key auth.
const RESERVED: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "host",
    "x-app-id",
    "x-forwarded-for",
    "x-forwarded-proto",
    "x-forwarded-host",
];

/// Decodes one `{ set, add, remove }` mapping.
pub(crate) fn header_ops(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<HeaderOps> {
    let f = fields(cx, node, path, "header policy", OPS_KEYS)?;
    let mut ok = true;
    let mut out = HeaderOps::default();
    let reserved = |cx: &mut Cx, pos: Pos, p: Path<'_>, name: &str| {
        let lower = name.to_ascii_lowercase();
        if RESERVED.contains(&lower.as_str()) {
            cx.at(
                pos,
                p,
                format_args!(
                    "{} is managed by the gateway and cannot be changed here",
                    quote(name)
                ),
            );
            return true;
        }
        false
    };
    for (key, list) in [("set", &mut out.set), ("add", &mut out.add)] {
        let Some(n) = f.get(key) else { continue };
        let p = path.key(key);
        let expected = "a mapping of header names to values, e.g. { x-env: prod }";
        let Some(entries) = reader::free_map(cx, n, p, expected) else {
            ok = false;
            continue;
        };
        let mut seen: HashMap<String, Pos> = HashMap::new();
        for (k, name, value) in entries {
            if reserved(cx, k.pos, p, name) {
                ok = false;
                continue;
            }
            match crate::route::header(cx, k, name, value, p, &mut seen) {
                Some((name, value)) => list.push((name.to_string(), value.to_string())),
                None => ok = false,
            }
        }
    }
    if let Some(n) = f.get("remove") {
        let p = path.key("remove");
        for (i, item) in reader::list(cx, n, p, "a list of header names")
            .unwrap_or(&[])
            .iter()
            .enumerate()
        {
            let Some(name) = reader::string(cx, item, p.index(i)) else {
                ok = false;
                continue;
            };
            if !reader::is_token(name) {
                cx.at(
                    item.pos,
                    p.index(i),
                    format_args!("bad header name {}", quote(name)),
                );
                ok = false;
            } else if reserved(cx, item.pos, p.index(i), name) {
                ok = false;
            } else {
                out.remove.push(name.to_ascii_lowercase());
            }
        }
    }
    ok.then_some(out)
}
