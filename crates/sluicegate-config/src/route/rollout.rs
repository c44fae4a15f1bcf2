//! A route's `rollout` mapping: the canary rollout of its `split`'s last
//! entry, which the gateway moves by `step` percentage points after each
//! window of `every` it judges good (see docs/config.md).

use std::time::Duration;

use crate::model::Rollout;
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{Node, Value};

pub(crate) const ROLLOUT_KEYS: &[&str] = &[
    "step",
    "every",
    "max_error_ratio",
    "max_p99_ratio",
    "min_requests",
];

/// The shortest window a rollout may judge.
const MIN_EVERY: Duration = Duration::from_millis(100);

impl Default for Rollout {
    fn default() -> Rollout {
        Rollout {
            step: 10,
            every: Duration::from_secs(30),
            max_error_ratio: 2.0,
            max_p99_ratio: 1.5,
            min_requests: 100,
        }
    }
}

/// Decodes `rollout`; `split` is the route's `split` node, if any: a
/// rollout needs one of at least two entries (the last is the canary).
pub(crate) fn rollout(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    split: Option<&Node>,
) -> Option<Rollout> {
    let f = fields(cx, node, path, "rollout", ROLLOUT_KEYS)?;
    let before = cx.errors.len();
    let entries = split.map(|s| match &s.value {
        Value::List(items) => items.len(),
        _ => 0,
    });
    if entries.is_none_or(|n| n < 2) {
        cx.at(
            node.pos,
            path,
            "needs the route's split with at least 2 entries (the last one is the canary)",
        );
    }
    let mut r = Rollout::default();
    if let Some(n) = f.get("step") {
        r.step = reader::int_in(cx, n, path.key("step"), 1, 100).map_or(0, |s| s as u32);
    }
    if let Some(n) = f.get("every") {
        let p = path.key("every");
        if let Some(d) = reader::duration(cx, n, p) {
            if d < MIN_EVERY {
                cx.at(n.pos, p, "must be at least 100ms");
            }
            r.every = d;
        }
    }
    if let Some(n) = f.get("max_error_ratio") {
        r.max_error_ratio = ratio(cx, n, path.key("max_error_ratio")).unwrap_or(0.0);
    }
    if let Some(n) = f.get("max_p99_ratio") {
        r.max_p99_ratio = ratio(cx, n, path.key("max_p99_ratio")).unwrap_or(0.0);
    }
    if let Some(n) = f.get("min_requests") {
        r.min_requests = reader::int_in(cx, n, path.key("min_requests"), 1, u64::MAX).unwrap_or(0);
    }
    (cx.errors.len() == before).then_some(r)
}

/// A ratio: a number of at least 1.0 (`2`, `1.5`).
fn ratio(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<f64> {
    const EXPECTED: &str = "a ratio of at least 1.0, e.g. 2 or 1.5";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (whole, frac) = text.split_once('.').unwrap_or((text, "0"));
    let value = (digits(whole) && digits(frac))
        .then(|| text.parse::<f64>().ok())
        .flatten()
        .filter(|v| v.is_finite() && *v >= 1.0);
    if value.is_none() {
        cx.expected(node, path, EXPECTED);
    }
    value
}
