//! A route's `fault` mapping: aborts and delays injected on a share of its
//! requests, for testing how clients bear failures.

use crate::model::{Fault, FaultAbort, FaultDelay};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::Node;

pub(crate) const FAULT_KEYS: &[&str] = &["abort", "delay"];
pub(crate) const ABORT_KEYS: &[&str] = &["percent", "status"];
pub(crate) const DELAY_KEYS: &[&str] = &["percent", "duration"];

/// Decodes `fault: { abort: { percent, status }, delay: { percent, duration } }`.
pub(super) fn fault(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Fault> {
    let f = fields(cx, node, path, "fault", FAULT_KEYS)?;
    let abort = match f.get("abort") {
        None => Some(None),
        Some(n) => abort(cx, n, path.key("abort")).map(Some),
    };
    let delay = match f.get("delay") {
        None => Some(None),
        Some(n) => delay(cx, n, path.key("delay")).map(Some),
    };
    Some(Fault {
        abort: abort?,
        delay: delay?,
    })
}

fn abort(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<FaultAbort> {
    let f = fields(cx, node, path, "fault.abort", ABORT_KEYS)?;
    let percent = f
        .require(cx, path, "percent")
        .and_then(|n| percent(cx, n, path.key("percent")));
    let status = f
        .require(cx, path, "status")
        .and_then(|n| reader::int_in(cx, n, path.key("status"), 200, 599));
    Some(FaultAbort {
        percent: percent?,
        status: u16::try_from(status?).ok()?,
    })
}

fn delay(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<FaultDelay> {
    let f = fields(cx, node, path, "fault.delay", DELAY_KEYS)?;
    let percent = f
        .require(cx, path, "percent")
        .and_then(|n| percent(cx, n, path.key("percent")));
    let duration = f
        .require(cx, path, "duration")
        .and_then(|n| reader::duration(cx, n, path.key("duration")));
    Some(FaultDelay {
        percent: percent?,
        duration: duration?,
    })
}

/// A share of requests: a number from 0 to 100, fractions allowed
/// (`0.5`), written as digits with at most one `.`.
pub(super) fn percent(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<f64> {
    const EXPECTED: &str = "a percentage from 0 to 100, e.g. 5 or 0.5";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let value = (!whole.is_empty() && digits(whole) && digits(frac) && !text.ends_with('.'))
        .then(|| text.parse::<f64>().ok())
        .flatten()
        .filter(|p| (0.0..=100.0).contains(p));
    if value.is_none() {
        cx.expected(node, path, EXPECTED);
    }
    value
}
