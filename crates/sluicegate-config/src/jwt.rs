//! JWT: an app's `jwt` (algorithm and key, files read at load) and the top-level `jwt` settings.

use crate::model::{AppJwt, JwtAlg, JwtKey, JwtSettings};
use crate::reader::{self, fields, Cx, Path};
use crate::yaml::{quote, Node};

pub(crate) const APP_JWT_KEYS: &[&str] = &[
    "alg",
    "secret",
    "secret_file",
    "public_key",
    "public_key_file",
];

pub(crate) const JWT_KEYS: &[&str] = &[
    "issuer",
    "audience",
    "app_claim",
    "leeway",
    "close_on_expiry",
];

/// Decodes an app's `jwt`: the algorithm and one key source (files are
/// read now, so a missing file is a config error with its line).
pub(crate) fn app_jwt(cx: &mut Cx, node: &Node, path: Path<'_>) -> Option<AppJwt> {
    let f = fields(cx, node, path, "app jwt", APP_JWT_KEYS)?;
    let alg = f.require(cx, path, "alg").and_then(|n| {
        let p = path.key("alg");
        match reader::scalar(cx, n, p, "HS256, RS256 or ES256")? {
            "HS256" => Some(JwtAlg::HS256),
            "RS256" => Some(JwtAlg::RS256),
            "ES256" => Some(JwtAlg::ES256),
            other => {
                cx.at(
                    n.pos,
                    p,
                    format_args!("expected HS256, RS256 or ES256, found {}", quote(other)),
                );
                None
            }
        }
    })?;
    let (inline, file, what) = match alg {
        JwtAlg::HS256 => ("secret", "secret_file", "a shared secret"),
        _ => ("public_key", "public_key_file", "a PEM public key"),
    };
    for wrong in APP_JWT_KEYS[1..]
        .iter()
        .filter(|k| **k != inline && **k != file)
    {
        if let Some(n) = f.get(wrong) {
            cx.at(n.pos, path.key(wrong), "does not apply to this alg");
        }
    }
    let bytes = match (f.get(inline), f.get(file)) {
        (Some(_), Some(n)) => {
            cx.at(
                n.pos,
                path.key(file),
                format_args!("give either {inline} or {file}, not both"),
            );
            return None;
        }
        (None, None) => {
            cx.at(
                f.pos,
                path,
                format_args!("missing {inline} or {file} ({what})"),
            );
            return None;
        }
        (Some(n), None) => reader::string(cx, n, path.key(inline))?.as_bytes().to_vec(),
        (None, Some(n)) => {
            let p = path.key(file);
            let name = reader::string(cx, n, p)?;
            match std::fs::read(name) {
                Ok(b) => b,
                Err(e) => {
                    cx.at(n.pos, p, format_args!("cannot read {}: {e}", quote(name)));
                    return None;
                }
            }
        }
    };
    let key = match alg {
        JwtAlg::HS256 => {
            if bytes.len() < 32 {
                let at = f.get(inline).or(f.get(file)).map_or(f.pos, |n| n.pos);
                cx.at(at, path, "an HS256 secret needs at least 32 bytes");
                return None;
            }
            JwtKey::Secret(bytes)
        }
        _ => {
            if !bytes.windows(10).any(|w| w == b"-----BEGIN") {
                let at = f.get(inline).or(f.get(file)).map_or(f.pos, |n| n.pos);
                cx.at(
                    at,
                    path,
                    "expected a PEM public key (-----BEGIN PUBLIC KEY-----)",
                );
                return None;
            }
            JwtKey::PublicKeyPem(bytes)
        }
    };
    Some(AppJwt { alg, key })
}

/// Decodes the top-level `jwt` settings.
pub(crate) fn jwt_settings(cx: &mut Cx, node: &Node, path: Path<'_>) -> JwtSettings {
    let mut out = JwtSettings::default();
    let Some(f) = fields(cx, node, path, "jwt", JWT_KEYS) else {
        return out;
    };
    if let Some(n) = f.get("issuer") {
        out.issuer = reader::string(cx, n, path.key("issuer")).map(str::to_string);
    }
    if let Some(n) = f.get("audience") {
        out.audience = reader::string(cx, n, path.key("audience")).map(str::to_string);
    }
    if let Some(n) = f.get("app_claim") {
        if let Some(c) = reader::string(cx, n, path.key("app_claim")) {
            out.app_claim = c.to_string();
        }
    }
    reader::duration_field(cx, &f, path, "leeway", &mut out.leeway);
    if let Some(n) = f.get("close_on_expiry") {
        if let Some(b) = reader::boolean(cx, n, path.key("close_on_expiry")) {
            out.close_on_expiry = b;
        }
    }
    out
}
