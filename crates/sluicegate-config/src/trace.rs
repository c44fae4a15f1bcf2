//! `request_id` (the header that carries each request's id) and `tracing`
//! (W3C trace context, spans of sampled requests exported over OTLP/gRPC).
//! Only the form is checked: `validate` never connects to the collector.

use std::time::Duration;

use crate::model::{OtlpConfig, RequestIdConfig, TracingConfig};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node};

pub(crate) const REQUEST_ID_KEYS: &[&str] = &["header"];
pub(crate) const TRACING_KEYS: &[&str] = &["service_name", "sampling", "otlp", "queue"];
pub(crate) const SAMPLING_KEYS: &[&str] = &["ratio"];
pub(crate) const OTLP_KEYS: &[&str] = &["endpoint", "timeout", "ca_file"];

/// Longest request id header name accepted.
pub const MAX_REQUEST_ID_HEADER: usize = 48;

/// Decodes `request_id`.
pub(crate) fn request_id(cx: &mut Cx, node: &Node, path: Path<'_>) -> RequestIdConfig {
    let mut out = RequestIdConfig::default();
    let Some(f) = fields(cx, node, path, "request_id", REQUEST_ID_KEYS) else {
        return out;
    };
    if let Some(n) = f.get("header") {
        let p = path.key("header");
        const EXPECTED: &str = "a header name (letters, digits, - and _; at most 48 characters)";
        if let Some(text) = reader::scalar(cx, n, p, EXPECTED) {
            let token = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
            let reserved = ["host", "traceparent", "tracestate", "content-length"];
            if text.is_empty() || text.len() > MAX_REQUEST_ID_HEADER || !text.bytes().all(token) {
                cx.expected(n, p, EXPECTED);
            } else if reserved.iter().any(|r| text.eq_ignore_ascii_case(r))
                || text.to_ascii_lowercase().starts_with("x-forwarded-")
            {
                let msg = format_args!("{} is a header the gateway already uses", quote(text));
                cx.at(n.pos, p, msg);
            } else {
                out.header = text.to_ascii_lowercase();
            }
        }
    }
    out
}

/// Decodes `tracing`.
pub(crate) fn tracing(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<TracingConfig> {
    let f = fields(cx, node, path, "tracing", TRACING_KEYS)?;
    let otlp_node = f.require(cx, path, "otlp")?;
    let otlp = otlp(cx, otlp_node, path.key("otlp"))?;
    let mut out = TracingConfig {
        service_name: "sluicegate".to_string(),
        ratio: 0.0,
        otlp,
        queue: 2048,
    };
    if let Some(n) = f.get("service_name") {
        let p = path.key("service_name");
        if let Some(text) = reader::string(cx, n, p) {
            if text.trim().is_empty() {
                cx.expected(n, p, "a non-empty service name");
            } else {
                out.service_name = text.to_string();
            }
        }
    }
    if let Some(n) = f.get("sampling") {
        let p = path.key("sampling");
        if let Some(s) = fields(cx, n, p, "sampling", SAMPLING_KEYS) {
            if let Some(n) = s.get("ratio") {
                let p = p.key("ratio");
                const EXPECTED: &str = "a number from 0 to 1 (0.01: one request in a hundred)";
                let ratio = reader::scalar(cx, n, p, EXPECTED)
                    .and_then(|t| t.parse::<f64>().ok())
                    .filter(|r| (0.0..=1.0).contains(r));
                match ratio {
                    Some(r) => out.ratio = r,
                    None => cx.expected(n, p, EXPECTED),
                }
            }
        }
    }
    if let Some(n) = f.get("queue") {
        if let Some(q) = reader::int_in(cx, n, path.key("queue"), 1, 1 << 20) {
            out.queue = q as usize;
        }
    }
    Some(out)
}

fn otlp(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<OtlpConfig> {
    let f = fields(cx, node, path, "otlp", OTLP_KEYS)?;
    let n = f.require(cx, path, "endpoint")?;
    let p = path.key("endpoint");
    const EXPECTED: &str =
        "an OTLP/gRPC URL like http://127.0.0.1:4317 (or https://collector.example:4317 for TLS)";
    let url = reader::string(cx, n, p)?;
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let authority = rest.map(|r| r.split('/').next().unwrap_or_default());
    if authority.is_none_or(|a| a.is_empty() || a.contains(char::is_whitespace) || a.contains('@'))
    {
        cx.at(
            n.pos,
            p,
            format_args!("expected {EXPECTED}, found {}", quote(url)),
        );
        return None;
    }
    let mut out = OtlpConfig {
        endpoint: url.to_string(),
        timeout: Duration::from_secs(10),
        ca_file: None,
    };
    if let Some(n) = f.get("ca_file") {
        out.ca_file = reader::file_path(cx, n, path.key("ca_file"));
        if !url.starts_with("https://") {
            let msg = "ca_file is for TLS to the collector: it needs an https:// endpoint";
            cx.at(n.pos, path.key("ca_file"), msg);
        }
    }
    reader::duration_field(cx, &f, path, "timeout", &mut out.timeout);
    if out.timeout.is_zero() {
        let n = f.get("timeout").unwrap_or(node);
        cx.at(n.pos, path.key("timeout"), "the timeout must be above zero");
    }
    Some(out)
}
