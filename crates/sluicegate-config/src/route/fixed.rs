//! A fixed answer's `status`, `body` and `headers`: a `respond` route's,
//! or a route fallback's.

use std::collections::HashMap;

use crate::reader::{self, Cx, Fields, Path};
use crate::yaml::{quote, Pos};

/// Headers the gateway sets itself on a `respond` answer.
const FRAMING_HEADERS: &[&str] = &["content-length", "transfer-encoding"];

/// A fixed answer's `status` (from `min_status` to 599, 200 when absent),
/// `body` and `headers`, read from the mapping `f` (a `respond`, or a
/// fallback's).
pub(super) type FixedAnswer = (u16, String, Vec<(String, String)>);

pub(super) fn fixed_answer(
    cx: &mut Cx,
    f: &Fields<'_>,
    path: Path<'_>,
    min_status: u64,
) -> Option<FixedAnswer> {
    let mut ok = true;
    let mut status = 200u16;
    if let Some(n) = f.get("status") {
        match reader::int_in(cx, n, path.key("status"), min_status, 599) {
            Some(s) => status = u16::try_from(s).unwrap_or(200),
            None => ok = false,
        }
    }
    let mut body = String::new();
    if let Some(n) = f.get("body") {
        match reader::string(cx, n, path.key("body")) {
            Some(b) => body = b.to_string(),
            None => ok = false,
        }
        if !body.is_empty() && (status < 200 || status == 204 || status == 304) {
            cx.at(
                n.pos,
                path.key("body"),
                format_args!("a {status} response cannot have a body"),
            );
            ok = false;
        }
    }
    let mut headers = Vec::new();
    if let Some(n) = f.get("headers") {
        let p = path.key("headers");
        let expected = "a mapping of header names to values, e.g. { content-type: text/plain }";
        if let Some(entries) = reader::free_map(cx, n, p, expected) {
            let mut seen: HashMap<String, Pos> = HashMap::with_capacity(entries.len());
            for (key, name, value) in entries {
                if FRAMING_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                    cx.at(
                        key.pos,
                        p,
                        format_args!("{} is set by the gateway, remove it", quote(name)),
                    );
                    ok = false;
                    continue;
                }
                match reader::header(cx, key, name, value, p, &mut seen) {
                    Some((name, value)) => headers.push((name.to_string(), value.to_string())),
                    None => ok = false,
                }
            }
        } else {
            ok = false;
        }
    }
    ok.then_some((status, body, headers))
}
