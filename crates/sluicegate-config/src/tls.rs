//! TLS towards services (a service's `tls`) and client certificates naming apps (an app's `mtls`).
//!
//! Certificate and key paths are kept as written: the files are read by
//! the data plane, not here.

use std::collections::HashMap;

use crate::model::{App, AppMtls, UpstreamTls};
use crate::reader::{self, fields, Cx, Path};
use crate::reader::{duplicates, Seen};
use crate::yaml::{quote, Node, Pos, Value};

pub(crate) const UPSTREAM_TLS_KEYS: &[&str] = &["sni", "verify", "ca", "client_cert", "client_key"];
pub(crate) const MTLS_KEYS: &[&str] = &["names", "sha256"];

/// A service's `tls`: `true` or `{}` (TLS with the defaults), `false` (no
/// TLS) or a mapping. `Some(None)` is "no TLS"; `None`, an error.
pub(crate) fn upstream_tls(
    cx: &mut Cx,
    node: &Node,
    path: Path<'_>,
) -> Option<Option<UpstreamTls>> {
    if !matches!(node.value, Value::Map(_)) {
        const EXPECTED: &str =
            "true, false or a mapping with keys sni, verify, ca, client_cert, client_key";
        if node.as_scalar().is_none() {
            cx.expected(node, path, EXPECTED);
            return None;
        }
        return match node.as_scalar() {
            Some("true" | "True" | "TRUE") if node.is_plain() => Some(Some(UpstreamTls::default())),
            Some("false" | "False" | "FALSE") if node.is_plain() => Some(None),
            _ => {
                cx.expected(node, path, EXPECTED);
                None
            }
        };
    }
    let f = fields(cx, node, path, "service tls", UPSTREAM_TLS_KEYS)?;
    let mut ok = true;
    let mut out = UpstreamTls::default();
    if let Some(n) = f.get("sni") {
        out.sni = sni(cx, n, path.key("sni"));
        ok &= out.sni.is_some();
    }
    if let Some(n) = f.get("verify") {
        match reader::boolean(cx, n, path.key("verify")) {
            Some(v) => out.verify = v,
            None => ok = false,
        }
    }
    let mut file = |cx: &mut Cx, key: &str| -> Option<std::path::PathBuf> {
        let n = f.get(key)?;
        let p = reader::file_path(cx, n, path.key(key));
        ok &= p.is_some();
        p
    };
    out.ca = file(cx, "ca");
    out.client_cert = file(cx, "client_cert");
    out.client_key = file(cx, "client_key");
    if let (Some(n), false) = (f.get("ca"), out.verify) {
        cx.at(
            n.pos,
            path.key("ca"),
            "does not apply with verify: false (nothing is verified)",
        );
        ok = false;
    }
    for (given, missing) in [("client_cert", "client_key"), ("client_key", "client_cert")] {
        if let (Some(n), None) = (f.get(given), f.get(missing)) {
            cx.at(
                n.pos,
                path.key(given),
                format_args!("needs {missing} too (give both or neither)"),
            );
            ok = false;
        }
    }
    ok.then_some(Some(out))
}

/// `sni`: a DNS name (not an IP address), lower-cased.
fn sni(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<String> {
    let text = reader::string(cx, node, path)?;
    let name = text.trim().trim_end_matches('.').to_ascii_lowercase();
    let ip_like = name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if !crate::reader::is_host_name(&name) || ip_like {
        cx.at(
            node.pos,
            path,
            format_args!(
                "expected a DNS name like api.internal, found {}",
                quote(text)
            ),
        );
        return None;
    }
    Some(name)
}

/// An app's `mtls`, with the position of each name and fingerprint (for
/// the check that no two apps list the same one).
pub(crate) struct DecodedMtls {
    pub mtls: AppMtls,
    pub name_pos: Vec<Pos>,
    pub sha256_pos: Vec<Pos>,
}

/// Decodes an app's `mtls: { names, sha256 }` (both optional). A name or
/// fingerprint given twice in one app is reported here; across apps, by
/// the apps decoder.
pub(crate) fn app_mtls(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<DecodedMtls> {
    let f = fields(cx, node, path, "app mtls", MTLS_KEYS)?;
    let mut ok = true;
    let mut out = DecodedMtls {
        mtls: AppMtls::default(),
        name_pos: Vec::new(),
        sha256_pos: Vec::new(),
    };
    let names = Distinct {
        expected: "a list of certificate names",
        read: cert_name,
        shown: |text| format!("name {}", quote(text)),
    };
    for (item, name) in names.read(cx, f.get("names"), path.key("names"), &mut ok) {
        out.mtls.names.push(name);
        out.name_pos.push(item.pos);
    }
    let digests = Distinct {
        expected: "a list of SHA-256 fingerprints",
        read: fingerprint,
        shown: |_| "fingerprint".to_string(),
    };
    for (item, digest) in digests.read(cx, f.get("sha256"), path.key("sha256"), &mut ok) {
        out.mtls.sha256.push(digest);
        out.sha256_pos.push(item.pos);
    }
    ok.then_some(out)
}

/// A list whose items must differ: how one is read (`None`: refused,
/// and reported by `read`) and how one is named, from its text, when it
/// is listed twice.
struct Distinct<T> {
    expected: &'static str,
    read: fn(&mut Cx, &Node, Path<'_>) -> Option<T>,
    shown: fn(&str) -> String,
}

impl<T: Clone + Eq + std::hash::Hash> Distinct<T> {
    /// The items of the list `node` (when given), each with its node, but
    /// for those refused and for a later one equal to an earlier one
    /// ("listed twice"); either clears `ok`.
    fn read<'n>(
        &self,
        cx: &mut Cx,
        node: Option<&'n Node>,
        path: Path<'_>,
        ok: &mut bool,
    ) -> Vec<(&'n Node, T)> {
        let Some(node) = node else {
            return Vec::new();
        };
        let Some(items) = reader::list(cx, node, path, self.expected) else {
            *ok = false;
            return Vec::new();
        };
        let mut seen: HashMap<T, Pos> = HashMap::with_capacity(items.len());
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let ip = path.index(i);
            let Some(value) = (self.read)(cx, item, ip) else {
                *ok = false;
                continue;
            };
            let text = item.as_scalar().unwrap_or_default();
            let twice = |at| format!("{} listed twice (first at {at})", (self.shown)(text));
            if !reader::unique(
                cx,
                &mut seen,
                value.clone(),
                item.pos,
                (item.pos, ip),
                twice,
            ) {
                *ok = false;
                continue;
            }
            out.push((item, value));
        }
        out
    }
}

/// One of `mtls.names`: a subject CN or DNS name, lower-cased.
fn cert_name(cx: &mut Cx, item: &Node, path: Path<'_>) -> Option<String> {
    let text = reader::string(cx, item, path)?;
    if text.trim().is_empty() || text.chars().any(char::is_control) {
        cx.at(
            item.pos,
            path,
            format_args!(
                "expected a certificate name (a subject CN or DNS name), found {}",
                quote(text)
            ),
        );
        return None;
    }
    Some(text.to_ascii_lowercase())
}

/// One of `mtls.sha256`: a certificate's SHA-256 fingerprint.
fn fingerprint(cx: &mut Cx, item: &Node, path: Path<'_>) -> Option<[u8; 32]> {
    let text = reader::string(cx, item, path)?;
    parse_fingerprint(text)
        .map_err(|why| cx.at(item.pos, path, why))
        .ok()
}

/// Reports a certificate name or fingerprint listed by two apps, and a
/// name listed by one app that is the id of another without `mtls`
/// (which a certificate with that subject CN names). `path` is where
/// `apps` is; `ids`, `names` and `sha256` are the apps decoder's records.
pub(crate) fn check_mtls(
    cx: &mut Cx,
    path: Path<'_>,
    apps: &[App],
    ids: &[Seen],
    names: &mut [Seen],
    sha256: &mut [Seen],
) {
    let out = apps;
    let mtls = |s: &Seen| out[s.app as usize].mtls.as_ref();
    let at = |s: &Seen, key: &str| -> String {
        format!("apps[{}].mtls.{key}[{}] at {}", s.app, s.item, s.pos)
    };
    // Reports `message` at `s`, the `s.item`th of an app's `mtls.KEY`.
    let report = |cx: &mut Cx, s: &Seen, key: &str, message: String| {
        let app = path.index(s.app as usize);
        let mtls = app.key("mtls");
        let list = mtls.key(key);
        cx.at(s.pos, list.index(s.item as usize), message);
    };
    let name_of = |s: &Seen| mtls(s).map_or("", |m| m.names[s.item as usize].as_str());
    for (first, dup) in duplicates(names, name_of) {
        let message = format!(
            "name {} is also listed by app {} ({})",
            quote(name_of(&dup)),
            quote(&out[first.app as usize].id),
            at(&first, "names")
        );
        report(cx, &dup, "names", message);
    }
    let sha_of = |s: &Seen| mtls(s).map_or(&[0u8; 32], |m| &m.sha256[s.item as usize]);
    for (first, dup) in duplicates(sha256, sha_of) {
        let message = format!(
            "fingerprint is also listed by app {} ({})",
            quote(&out[first.app as usize].id),
            at(&first, "sha256")
        );
        report(cx, &dup, "sha256", message);
    }
    if names.is_empty() {
        return;
    }
    // Apps named by a certificate's CN equal to their id.
    let by_id: HashMap<String, Seen> = ids
        .iter()
        .filter(|s| out[s.app as usize].mtls.is_none())
        .map(|s| (out[s.app as usize].id.to_ascii_lowercase(), *s))
        .collect();
    for s in names.iter() {
        let name = name_of(s);
        if let Some(id) = by_id.get(name).filter(|id| id.app != s.app) {
            report(
                cx,
                s,
                "names",
                format!(
                    "name {} is also the id of app {} (apps[{}] at {}), which has no mtls and so is named by a certificate with that subject CN: give that app an mtls key, or list another name",
                    quote(name),
                    quote(&out[id.app as usize].id),
                    id.app,
                    id.pos
                ),
            );
        }
    }
}

/// Parses a SHA-256 fingerprint: 64 hex digits, either run together or
/// as 32 colon-separated pairs (`AB:CD:...`), in either case.
pub(crate) fn parse_fingerprint(text: &str) -> Result<[u8; 32], String> {
    let bad = |why: &str| {
        format!(
            "expected a SHA-256 fingerprint (64 hex digits, optionally as AB:CD:... pairs), found {}{why}",
            quote(text)
        )
    };
    let s = text.trim();
    let pairs: Vec<&str> = if s.contains(':') {
        s.split(':').collect()
    } else {
        if !s.len().is_multiple_of(2) || !s.is_ascii() {
            return Err(bad(""));
        }
        (0..s.len() / 2).map(|i| &s[2 * i..2 * i + 2]).collect()
    };
    if pairs
        .iter()
        .any(|p| p.len() != 2 || !p.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return Err(bad(""));
    }
    let mut out = [0u8; 32];
    if pairs.len() != out.len() {
        return Err(bad(&format!(" ({} bytes, not 32)", pairs.len())));
    }
    for (byte, pair) in out.iter_mut().zip(&pairs) {
        *byte = u8::from_str_radix(pair, 16).map_err(|_| bad(""))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::parse_fingerprint;

    #[test]
    fn fingerprints() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let d = parse_fingerprint(hex).unwrap();
        assert_eq!(d[0], 0x00);
        assert_eq!(d[1], 0x11);
        assert_eq!(d[15], 0xff);
        assert_eq!(d[31], 0xff);
        let colons: Vec<String> = d.iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(parse_fingerprint(&colons.join(":")), Ok(d));
        assert_eq!(parse_fingerprint(&colons.join(":").to_lowercase()), Ok(d));
        assert_eq!(parse_fingerprint(&format!(" {hex} ")), Ok(d));
        let err = |s: &str| parse_fingerprint(s).unwrap_err();
        assert!(
            err(&hex[2..]).contains("(31 bytes, not 32)"),
            "{}",
            err(&hex[2..])
        );
        assert!(err(&hex[1..]).contains("64 hex digits"));
        assert!(err(&format!("{hex}00")).contains("(33 bytes, not 32)"));
        assert!(err(&hex.replace('a', "g")).contains("64 hex digits"));
        assert!(err(&colons.join(":").replacen(':', "", 1)).contains("64 hex digits"));
        assert!(err(&format!("{}:", colons.join(":"))).contains("64 hex digits"));
        assert!(err(&hex.replacen("00", "+0", 1)).contains("64 hex digits"));
        assert!(err("é1").contains("64 hex digits"));
        assert!(err("").contains("64 hex digits"));
    }
}
