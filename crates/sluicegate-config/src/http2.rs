//! The `http2` section: how client HTTP/2 connections are run.

use crate::model::Http2Settings;
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::Node;

/// The smallest window HTTP/2 knows (its default, 64 KiB - 1).
const MIN_WINDOW: u64 = 65_535;
/// The largest window HTTP/2 allows (2^31 - 1).
const MAX_WINDOW: u64 = (1 << 31) - 1;

pub(crate) const HTTP2_KEYS: &[&str] = &[
    "max_concurrent_streams",
    "stream_window",
    "connection_window",
    "max_streams_per_second",
];

/// `http2: { max_concurrent_streams, stream_window, connection_window,
/// max_streams_per_second }`, each optional.
pub(crate) fn http2(cx: &mut Cx, node: &Node, path: Path<'_>, out: &mut Http2Settings) {
    let Some(f) = fields(cx, node, path, "http2", HTTP2_KEYS) else {
        return;
    };
    if let Some(n) = f.get("max_concurrent_streams") {
        let p = path.key("max_concurrent_streams");
        if let Some(v) = reader::int_in(cx, n, p, 1, 100_000) {
            out.max_concurrent_streams = v as u32;
        }
    }
    for (key, slot) in [
        ("stream_window", &mut out.stream_window),
        ("connection_window", &mut out.connection_window),
    ] {
        let Some(n) = f.get(key) else { continue };
        let p = path.key(key);
        if let Some(v) = reader::size(cx, n, p) {
            if (MIN_WINDOW..=MAX_WINDOW).contains(&v) {
                *slot = v as u32;
            } else {
                cx.at(
                    n.pos,
                    p,
                    format_args!(
                        "must be from {MIN_WINDOW} (64KiB - 1) to {MAX_WINDOW} (2GiB - 1), found {v}"
                    ),
                );
            }
        }
    }
    if let Some(n) = f.get("max_streams_per_second") {
        let p = path.key("max_streams_per_second");
        if let Some(v) = reader::int_in(cx, n, p, 1, 10_000_000) {
            out.max_streams_per_second = v as u32;
        }
    }
}
