//! A route's `compress`: `true`, `false`, or the codings offered, the
//! smallest body compressed, the media types, and the level.

use crate::model::{Compress, CompressAlgorithm, CompressLevel};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node, Value};

pub(crate) const COMPRESS_KEYS: &[&str] = &["algorithms", "min_size", "types", "level"];

/// Decodes `compress`: a boolean (`true`: every default), or a mapping
/// whose absent keys take their defaults. `Some(None)`: off.
pub(super) fn compress(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Option<Compress>> {
    if !matches!(node.value, Value::Map(_)) {
        let on = reader::boolean(cx, node, path)?;
        return Some(on.then(Compress::default));
    }
    let f = fields(cx, node, path, "compress", COMPRESS_KEYS)?;
    let d = Compress::default();
    let algorithms = match f.get("algorithms") {
        None => Some(d.algorithms),
        Some(n) => algorithms(cx, n, path.key("algorithms")),
    };
    let min_size = match f.get("min_size") {
        None => Some(d.min_size),
        Some(n) => reader::size(cx, n, path.key("min_size")),
    };
    let types = match f.get("types") {
        None => Some(d.types),
        Some(n) => types(cx, n, path.key("types")),
    };
    let level = match f.get("level") {
        None => Some(d.level),
        Some(n) => level(cx, n, path.key("level"), algorithms.as_deref()),
    };
    Some(Some(Compress {
        algorithms: algorithms?,
        min_size: min_size?,
        types: types?,
        level: level?,
    }))
}

fn algorithms(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<CompressAlgorithm>> {
    let items = reader::list(cx, node, path, "a list of zstd, br, gzip")?;
    if items.is_empty() {
        cx.at(node.pos, path, "must name at least one algorithm");
        return None;
    }
    let mut out: Vec<CompressAlgorithm> = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, n) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(text) = reader::string(cx, n, p) else {
            ok = false;
            continue;
        };
        match CompressAlgorithm::ALL.iter().find(|a| a.name() == text) {
            Some(a) if out.contains(a) => {
                cx.at(n.pos, p, format_args!("{} is listed twice", quote(text)));
                ok = false;
            }
            Some(a) => out.push(*a),
            None => {
                cx.at(
                    n.pos,
                    p,
                    format_args!(
                        "unknown algorithm {}: expected zstd, br or gzip",
                        quote(text)
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

fn types(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<Vec<String>> {
    let items = reader::list(cx, node, path, "a list of media types")?;
    if items.is_empty() {
        cx.at(node.pos, path, "must name at least one media type");
        return None;
    }
    let mut out = Vec::with_capacity(items.len());
    let mut ok = true;
    for (i, n) in items.iter().enumerate() {
        let p = path.index(i);
        let Some(text) = reader::string(cx, n, p) else {
            ok = false;
            continue;
        };
        if media_range(text) {
            out.push(text.to_ascii_lowercase());
        } else {
            cx.at(
                n.pos,
                p,
                format_args!(
                    "{} is not a media type like text/html, text/* or application/*+json",
                    quote(text)
                ),
            );
            ok = false;
        }
    }
    ok.then_some(out)
}

/// `type/subtype`, `type/*` or `type/*+suffix`, each part a token.
pub(crate) fn media_range(text: &str) -> bool {
    let Some((main, sub)) = text.split_once('/') else {
        return false;
    };
    let sub = match sub {
        "*" => return reader::is_token(main) && !main.contains('*'),
        s => s.strip_prefix("*+").unwrap_or(s),
    };
    reader::is_token(main) && !main.contains('*') && reader::is_token(sub) && !sub.contains('*')
}

fn level(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
    algorithms: Option<&[CompressAlgorithm]>,
) -> Option<CompressLevel> {
    const EXPECTED: &str = "fast, default, best, or an integer level";
    let text = reader::scalar(cx, node, path, EXPECTED)?;
    let level = match text {
        "fast" => CompressLevel::Fast,
        "default" => CompressLevel::Default,
        "best" => CompressLevel::Best,
        t => match t.parse::<i32>() {
            Ok(n) => CompressLevel::Level(n),
            Err(_) => {
                cx.expected(node, path, EXPECTED);
                return None;
            }
        },
    };
    if let (CompressLevel::Level(n), Some(algs)) = (level, algorithms) {
        if let Some(a) = algs.iter().find(|a| !a.range().contains(&n)) {
            let r = a.range();
            cx.at(
                node.pos,
                path,
                format_args!(
                    "level {n} is out of {}'s range {} to {} (one integer applies to every algorithm listed; fast, default and best map to each one's own)",
                    a.name(),
                    r.start(),
                    r.end()
                ),
            );
            return None;
        }
    }
    Some(level)
}
